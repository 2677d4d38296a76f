"""The runtime's folders are layers: no module imports a folder above its own, and no modules
import each other in a circle.

The order, bottom to top, is the one ``workers/__init__.py`` explains (why each folder sits where
it does). A module may import its own folder and the folders below it; an arrow upwards, or a
circle of imports anywhere, ties a lower piece to what is built on it, so it can no longer be
used, tested or reasoned about alone. The check reads the source with ``ast``: every import
statement, inside functions and ``TYPE_CHECKING`` blocks included, and every
``importlib.import_module("…")`` of a literal name — so a lazy import cannot hide an arrow.

Only ``reasonwire.workers`` and ``reasonwire.contracts`` are mapped under ``reasonwire``: the
repository's tests, benchmarks, chaos and fuzz harnesses are not part of the package.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = (
    "reasonwire.contracts",
    "reasonwire.workers.core",
    "reasonwire.workers.translators",
    "reasonwire.workers.replay",
    "reasonwire.workers.ops",
    "reasonwire.workers.io",
    "reasonwire.workers.services",
    "reasonwire.workers.commands",
    "reasonwire.workers",
    "reasonwire",
)
"""Bottom to top: ``reasonwire.workers`` is the folder's own modules (cli, launch), ``reasonwire``
the public API (``reasonwire/__init__.py``)."""

Edge = tuple[str, str, int]
"""(importing module, imported module, line)."""


def _modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    found = {"reasonwire": root / "reasonwire" / "__init__.py"}
    for top in ("workers", "contracts"):
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(("reasonwire", *parts[: -1 if parts[-1] == "__init__" else None]))] = path
    return found


def _named(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """Every module name an import in ``tree`` names (relative ones resolved against
    ``package``), with its line; ``from m import n`` yields ``m.n`` too, in case ``n`` is a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            yield node.lineno, module
            yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _edges(modules: dict[str, Path]) -> list[Edge]:
    """The imports between the package's own modules (each pair once, at its first line)."""
    edges: dict[tuple[str, str], int] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for line, target in _named(ast.parse(path.read_text(), str(path)), package):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("reasonwire"):
                edges.setdefault((name, target), line)
    return sorted((a, b, line) for (a, b), line in edges.items())


def _layer(module: str) -> int:
    """The index in :data:`LAYERS` of the module's layer: the longest one that contains it."""
    return max((len(layer), i) for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))[1]


def _upward(edges: list[Edge]) -> list[Edge]:
    return [(a, b, line) for a, b, line in edges if _layer(b) > _layer(a)]


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _where(module: str, modules: dict[str, Path], root: Path = ROOT) -> str:
    return str(modules[module].relative_to(root))


def test_no_module_imports_a_folder_above_its_own() -> None:
    modules = _modules()
    upward = [
        f"{_where(a, modules)}:{line}: {a} imports {b} ({LAYERS[_layer(a)]} is below {LAYERS[_layer(b)]})"
        for a, b, line in _upward(_edges(modules))
    ]
    assert not upward, "upward imports (order in workers/__init__.py):\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle() -> None:
    modules = _modules()
    edges = _edges(modules)
    report = []
    for component in _cycles(edges):
        members = set(component)
        report.append(
            "cycle: "
            + " ".join(component)
            + "".join(f"\n  {_where(a, modules)}:{line}: imports {b}" for a, b, line in edges if a in members and b in members)
        )
    assert not report, "import cycles:\n" + "\n".join(report)


def test_the_checks_see_lazy_upward_imports_and_circles(tmp_path: Path) -> None:
    """A regression would most likely be an import tucked inside a function or a dynamic
    ``import_module``: the checks see both, and a circle of two modules."""
    for folder in ("workers/core", "workers/io", "contracts", "reasonwire"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "reasonwire" / "__init__.py").write_text("")
    (tmp_path / "workers" / "__init__.py").write_text("")
    (tmp_path / "workers" / "core" / "__init__.py").write_text("")
    (tmp_path / "workers" / "io" / "__init__.py").write_text("")
    (tmp_path / "contracts" / "__init__.py").write_text("")
    (tmp_path / "contracts" / "ids.py").write_text("")
    (tmp_path / "workers" / "core" / "a.py").write_text("def f():\n    from reasonwire.workers.io import b\n")
    (tmp_path / "workers" / "core" / "c.py").write_text("import importlib\nimportlib.import_module('reasonwire.workers.io.b')\n")
    (tmp_path / "workers" / "io" / "b.py").write_text("from ..core import a\nfrom reasonwire.contracts import ids\n")
    modules = _modules(tmp_path)
    edges = _edges(modules)
    assert _upward(edges) == [
        ("reasonwire.workers.core.a", "reasonwire.workers.io", 2),
        ("reasonwire.workers.core.a", "reasonwire.workers.io.b", 2),
        ("reasonwire.workers.core.c", "reasonwire.workers.io.b", 2),
    ]
    assert _cycles(edges) == [["reasonwire.workers.core.a", "reasonwire.workers.io.b"]]


def test_every_folder_of_the_package_has_a_layer() -> None:
    """A new folder must be placed in the order, not fall silently into its parent's layer."""
    folders = {name for name, path in _modules().items() if path.name == "__init__.py"}
    unplaced = sorted(f for f in folders if f not in LAYERS and not any(f.startswith(layer + ".") for layer in LAYERS[:-2]))
    assert not unplaced, f"folders without a layer in LAYERS: {unplaced}"


def test_the_order_explained_in_workers_init_is_the_order_checked() -> None:
    """The reasons live in ``workers/__init__.py``'s numbered list; it names the same folders in
    the same order as :data:`LAYERS`, so the explanation cannot drift from the check."""
    docstring = ast.get_docstring(ast.parse((ROOT / "workers" / "__init__.py").read_text())) or ""
    explained = re.findall(r"^\d+\. ``(\w+)/``", docstring, re.M)
    assert explained == [layer.rpartition(".")[2] for layer in LAYERS[:-2]]


def test_only_workers_and_contracts_are_importable_under_reasonwire() -> None:
    """The checkout's other top-level folders (tests, bench, chaos, fuzz) are not part of the
    package: ``reasonwire.<folder>`` does not import, while the two mapped ones do."""
    code = (
        "import importlib, sys\n"
        "for name in ('tests', 'bench', 'chaos', 'fuzz', 'workers', 'contracts'):\n"
        "    try:\n"
        "        importlib.import_module('reasonwire.' + name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    print(name)\n"
    )
    importable = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    assert sorted(importable) == ["contracts", "workers"]
    linked = {p.name: p.resolve() for p in (ROOT / "reasonwire").iterdir() if p.name not in ("__init__.py", "py.typed", "__pycache__")}
    assert linked == {"contracts": ROOT / "contracts", "workers": ROOT / "workers"}


def test_a_type_checker_resolves_reasonwire_workers_to_the_checkouts_files_and_knows_no_reasonwire_tests(tmp_path: Path) -> None:
    """mypy (run from the checkout, with pyproject.toml's settings) finds ``reasonwire.workers.x``
    as the file ``workers/x.py`` through the links, with its real signature, and finds no
    ``reasonwire.tests``."""
    pytest.importorskip("mypy", reason="mypy comes with the `native` extra (make install)")
    probe = tmp_path / "probe.py"
    probe.write_text("from reasonwire.workers.ops.interrupts import hold_interrupts\nimport reasonwire.tests\n\nreveal_type(hold_interrupts)\n")
    command = [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull, "--follow-imports=silent", "--no-error-summary", str(probe)]
    out = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT, timeout=300).stdout
    assert f'{probe}:4: note: Revealed type is "def ()"' in out, out
    assert f'{probe}:2: error: Cannot find implementation or library stub for module named "reasonwire.tests"' in out, out
    assert out.count("error:") == 1, out
