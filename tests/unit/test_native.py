"""The compiled core is used only while it is current (workers/ops/native.py).

A stale build must never shadow an edit: the loader compares every source the build was
compiled from with the tree, byte for byte, and falls back to pure Python otherwise. The
decisions are checked on builds made up in a temporary folder (the loader's ``BUILD``); the
last tests check what this process imported."""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path

import pytest

from reasonwire.workers.ops import native

SOURCE = "workers/core/wire.py"


@pytest.fixture
def fake_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A build folder for a tree of one source, with the loader's decision reset (restored after)."""
    root = tmp_path / "tree"
    (root / "workers" / "core").mkdir(parents=True)
    (root / SOURCE).write_text("x = 1\n")
    build = root / "build" / "native"
    (build / "reasonwire" / "workers" / "core").mkdir(parents=True)
    (build / "reasonwire" / "workers" / "core" / f"wire.{sysconfig.get_config_var('SOABI')}.so").write_bytes(b"")
    monkeypatch.setattr(native, "BUILD", build)
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv("RW_NATIVE", raising=False)
    return build


def _manifest(build: Path, **changes: object) -> None:
    digest = hashlib.sha256((build.parents[1] / SOURCE).read_bytes()).hexdigest()
    manifest = {"abi": sysconfig.get_config_var("SOABI"), "group": "nowhere", "modules": [SOURCE], "sources": {SOURCE: digest}}
    (build / "manifest.json").write_text(json.dumps({**manifest, **changes}))


def test_no_build_is_pure_python(fake_build: Path) -> None:
    assert native.status() == "pure (not built)"


def test_a_source_edited_after_the_build_makes_it_stale(fake_build: Path) -> None:
    _manifest(fake_build)
    (fake_build.parents[1] / SOURCE).write_text("x = 2\n")
    assert native.status() == f"pure (stale: {SOURCE} changed since the build)"


def test_a_build_for_another_interpreter_is_not_loaded(fake_build: Path) -> None:
    _manifest(fake_build, abi="cpython-399-elsewhere")
    assert native.status() == "pure (built for cpython-399-elsewhere)"


def test_a_current_build_without_its_shared_library_is_not_loaded(fake_build: Path) -> None:
    _manifest(fake_build)
    assert native.status() == "pure (its shared library is missing)"


def test_off_is_pure_whatever_is_built(fake_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _manifest(fake_build)
    monkeypatch.setenv("RW_NATIVE", "off")
    assert native.status() == "pure (RW_NATIVE=off)"


def test_require_refuses_a_stale_build_with_one_line(fake_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _manifest(fake_build)
    (fake_build.parents[1] / SOURCE).write_text("x = 2\n")
    monkeypatch.setenv("RW_NATIVE", "require")
    with pytest.raises(native.NativeBuildError, match=r"^RW_NATIVE=require but the compiled core cannot be used: stale: .*make native"):
        native.status()


def test_this_process_imports_what_the_loader_decided() -> None:
    """Under ``make test`` the build is current (a prerequisite) and CI requires it: then the
    normalizer and the translators are the extensions; with ``RW_NATIVE=off``, the ``.py`` files."""
    from reasonwire.workers.core import normalizer
    from reasonwire.workers.translators import openai_responses

    compiled = native.status() == "compiled"
    for module in (normalizer, openai_responses):
        assert str(module.__file__).endswith(".so") is compiled, (native.status(), module.__file__)
