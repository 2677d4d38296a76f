"""The compiled build of the sans-I/O core, used when it is present and current.

``make`` compiles the hot path — the core and its delivery machine, the translators, the
envelope reader, the P8 registry — with mypyc into ``build/native/`` (``tools/build_native.py``,
about 0.7× the core's CPU per record). This module decides, once per process,
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BUILD = Path(__file__).resolve().parents[2] / "build" / "native"

_state: dict[str, Any] = {}


class NativeBuildError(SystemExit):
    """``RW_NATIVE=require`` and the compiled build cannot be used: the process stops with one
    line (it is raised while ``reasonwire`` is imported, before any command could catch it)."""


def status() -> str:
    """``compiled`` or ``pure (<why>)``: what this process runs (logged at start, in bench results)."""
    reason = _decide()
    return "compiled" if reason is None else f"pure ({reason})"


def abi() -> str:
    """The interpreter a build is for (``cpython-311-x86_64-linux-gnu``)."""
    return str(sysconfig.get_config_var("SOABI"))


def source_digests(root: Path, sources: Iterable[str]) -> dict[str, str | None]:
    """SHA-256 of each source file under ``root`` (``None``: unreadable): what a build's manifest
    records (``tools/build_native.py``) and what the loader compares it with."""
    digests: dict[str, str | None] = {}
    for source in sources:
        try:
            digests[source] = hashlib.sha256((root / source).read_bytes()).hexdigest()
        except OSError:
            digests[source] = None
    return digests


def install() -> None:
    """Put the finder of the compiled modules in front of ``sys.meta_path`` if the build is used."""
    if _decide() is None and not any(isinstance(f, _CompiledFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CompiledFinder(_state["extensions"]))


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules of the build (module name → extension file), nothing else."""

    def __init__(self, modules: dict[str, Path]) -> None:
        self.modules = modules

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        found = self.modules.get(fullname)
        return importlib.util.spec_from_file_location(fullname, found) if found is not None else None


def _decide() -> str | None:
    """Why the build is not used (``None``: it is, and its shared library is loaded); decided once."""
    if "reason" not in _state:
        mode = os.environ.get("RW_NATIVE", "auto").strip().lower() or "auto"
        reason, group, extensions = ("RW_NATIVE=off", "", {}) if mode == "off" else _read_build()
        if reason is None:
            reason = _load_group(group)
        _state.update(reason=reason, extensions=extensions)
        if reason is not None and mode == "require":
            raise NativeBuildError(f"RW_NATIVE=require but the compiled core cannot be used: {reason} (run `make native`)")
    return _state["reason"]


def _read_build() -> tuple[str | None, str, dict[str, Path]]:
    """(why the build cannot be used or ``None``, its group, module name → extension file)."""
    try:
        manifest = json.loads((BUILD / "manifest.json").read_text())
    except (OSError, ValueError):
        return "not built", "", {}
    if manifest.get("abi") != abi():
        return f"built for {manifest.get('abi')}", "", {}
    recorded = manifest.get("sources", {})
    for source, actual in source_digests(BUILD.parents[1], recorded).items():
        if actual != recorded[source]:
            return f"stale: {source} changed since the build", "", {}
    extensions = {}
    for source in manifest.get("modules", []):
        found = sorted((BUILD / "reasonwire" / Path(source).parent).glob(Path(source).stem + ".*.so"))
        if not found:
            return f"{source}'s extension is missing", "", {}
        extensions["reasonwire." + source.removesuffix(".py").replace("/", ".")] = found[0]
    return None, str(manifest.get("group")), extensions


def _load_group(group: str) -> str | None:
    """Load the group's shared library under its top-level name: the extensions import it by
    that name, and ``build/native`` stays off ``sys.path``."""
    name = f"{group}__mypyc"
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
