"""The compiled build of the sans-I/O core, used when it is present and current.

``make`` compiles the hot path — the core, the translators, the envelope reader, the P8
registry — with mypyc into ``build/native/`` (``tools/build_native.py``,
issue 27 item 3: about 0.7× the core's CPU per record). This module decides, once per process,
whether the extensions are loaded in place of the ``.py`` files: only if the build is for this
interpreter and every source it was compiled from is byte for byte the file in the tree (its
manifest lists their SHA-256 digests). A stale build is never used, so an edit is never
shadowed; the compiled modules call each other directly, so it is all of them or none.

``RW_NATIVE``: ``auto`` (default) as above; ``off`` pure Python whatever is built; ``require``
refuse to start unless the current build is loaded (CI and the benchmarks, which must measure
what they say they measure).

``reasonwire`` calls :func:`install` when it is imported from a checkout, before any of its
modules: a finder in front of ``sys.meta_path`` answers for the compiled modules only
(``reasonwire.workers.core.normalizer`` → its extension), so the core itself imports nothing
to be compiled. (An installed wheel has no build: pure Python.)
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

BUILD = Path(__file__).resolve().parents[1] / "build" / "native"

_state: dict[str, Any] = {}


class NativeBuildError(SystemExit):
    """``RW_NATIVE=require`` and the compiled build cannot be used: the process stops with one
    line (it is raised while ``reasonwire`` is imported, before any command could catch it)."""


def status() -> str:
    """``compiled`` or ``pure (<why>)``: what this process runs (logged at start, in bench results)."""
    _decide()
    reason = _state["reason"]
    return "compiled" if reason is None else f"pure ({reason})"


def install() -> None:
    """Put the finder of the compiled modules in front of ``sys.meta_path`` if the build is used."""
    if _decide() is None and not any(isinstance(f, _CompiledFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CompiledFinder(_state["modules"]))


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules of the build (module name → extension file), nothing else."""

    def __init__(self, modules: dict[str, Path]) -> None:
        self.modules = modules

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        found = self.modules.get(fullname)
        return importlib.util.spec_from_file_location(fullname, found) if found is not None else None


def _decide() -> str | None:
    """Why the build is not used (``None``: it is, and its shared library is loaded)."""
    if "reason" not in _state:
        mode = os.environ.get("RW_NATIVE", "auto").strip().lower() or "auto"
        reason = "RW_NATIVE=off" if mode == "off" else _unusable()
        if reason is None:
            reason = _load_group()
        _state["reason"] = reason
        if reason is not None and mode == "require":
            raise NativeBuildError(f"RW_NATIVE=require but the compiled core cannot be used: {reason} (run `make native`)")
    return _state["reason"]


def _unusable() -> str | None:
    try:
        manifest = json.loads((BUILD / "manifest.json").read_text())
    except (OSError, ValueError):
        return "not built"
    if manifest.get("abi") != sysconfig.get_config_var("SOABI"):
        return f"built for {manifest.get('abi')}"
    root = BUILD.parents[1]
    for source, expected in manifest.get("sources", {}).items():
        try:
            actual = hashlib.sha256((root / source).read_bytes()).hexdigest()
        except OSError:
            actual = None
        if actual != expected:
            return f"stale: {source} changed since the build"
    extensions = {}
    for source in manifest.get("modules", []):
        name = "reasonwire." + source.removesuffix(".py").replace("/", ".")
        found = sorted((BUILD / "reasonwire" / Path(source).parent).glob(Path(source).stem + ".*.so"))
        if not found:
            return f"{source}'s extension is missing"
        extensions[name] = found[0]
    _state["group"], _state["modules"] = manifest.get("group"), extensions
    return None


def _load_group() -> str | None:
    """Load the group's shared library under its top-level name: the extensions import it by
    that name, and ``build/native`` stays off ``sys.path``."""
    name = f"{_state['group']}__mypyc"
    if name in sys.modules:
        return None
    found = sorted(BUILD.glob(f"{name}.*.so"))
    spec = importlib.util.spec_from_file_location(name, found[0]) if found else None
    if spec is None or spec.loader is None:
        return "its shared library is missing"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[name]
        return f"its shared library does not load ({exc})"
    return None
