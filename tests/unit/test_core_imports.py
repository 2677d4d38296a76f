"""The sans-I/O core imports nothing built on it ("the core takes a translator
factory instead of importing the registry").

``reasonwire.workers.core`` is the bottom layer of the runtime: the translators, the store, the
telemetry and the workers build on it, and it may use only itself, ``reasonwire.contracts`` and
third-party libraries. An arrow the other way (the core naming the translators' registry, as
``normalizer.py`` once did) makes the core impossible to use, test or simulate without what sits
above it. Two checks, so neither a lazy import inside a function nor an import hidden behind
another module slips through: every import statement in the core's source (function bodies and
``TYPE_CHECKING`` blocks included), and the modules a fresh interpreter holds after importing the
whole core.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "workers" / "core"
ALLOWED = ("reasonwire.workers.core", "reasonwire.contracts")
"""The reasonwire packages the core may import (anything outside ``reasonwire`` is a library)."""


def _core_modules() -> list[str]:
    return [f"reasonwire.workers.core.{p.stem}" for p in sorted(CORE.glob("*.py")) if p.stem != "__init__"]


def _imported(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement in ``path`` names (relative imports resolved), with its line."""
    package = "reasonwire.workers.core"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found += [(node.lineno, f"{module}.{alias.name}" if node.module is None or node.level else module) for alias in node.names]
    return found


def _upward(module: str) -> bool:
    top = module.split(".")[0]
    return top == "reasonwire" and module != "reasonwire" and not module.startswith(tuple(f"{a}." for a in ALLOWED) + ALLOWED)


def test_no_core_module_imports_the_translators_or_anything_else_above_the_core() -> None:
    upward = [
        f"workers/core/{path.name}:{line}: {module}"
        for path in sorted(CORE.glob("*.py"))
        for line, module in _imported(path)
        if _upward(module) or module in ("reasonwire", "workers") or module.startswith("workers.")
    ]
    assert not upward, "the core imports what is built on it:\n" + "\n".join(upward)


def test_importing_the_whole_core_loads_no_reasonwire_module_outside_it() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {_core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('reasonwire.workers.') and not m.startswith('reasonwire.workers.core')\n"
        "                         and m not in ('reasonwire.workers.ops', 'reasonwire.workers.ops.native'))))\n"  # reasonwire's own loader of the compiled build, not imported by the core
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"importing the core loaded {loaded}"


BANNED = ("asyncio", "time", "random", "redis", "aiokafka", "faststream", "socket", "secrets", "threading", "subprocess")
"""I/O, clocks and randomness: the core is fed time (``tick(now)``) and jitter (a seeded source), and
performs no I/O — so a seed replays it exactly and the simulation runs the code that ships."""


def _banned(module: str) -> bool:
    return module.split(".")[0] in BANNED


def test_no_core_module_imports_io_a_clock_or_randomness() -> None:
    found = [
        f"workers/core/{path.name}:{line}: {module}"
        for path in sorted(CORE.glob("*.py"))
        for line, module in _imported(path)
        if _banned(module)
    ]
    assert not found, "the core imports I/O, a clock or randomness:\n" + "\n".join(found)


def test_importing_the_whole_core_loads_no_io_client() -> None:
    """``time`` and ``random`` are loaded by the standard library itself; the clients are not."""
    code = (
        "import importlib, sys\n"
        f"for name in {_core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'aiokafka', 'faststream'))))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"importing the core loaded {loaded}"


def test_the_checks_see_an_import_inside_a_function(tmp_path: Path) -> None:
    """The source check is not blind to a lazy import (what a regression would most likely be)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from reasonwire.workers.translators import translator_for\n    from . import events\n")
    found = [module for _, module in _imported(probe)]
    assert found == ["reasonwire.workers.translators", "reasonwire.workers.core.events"]
    assert _upward(found[0]) and not _upward(found[1])
    probe.write_text("def g():\n    import time\n    from random import Random\n")
    assert [m for _, m in _imported(probe) if _banned(m)] == ["time", "random"]
