"""``python tools/build_native.py``: compile the sans-I/O core with mypyc into ``build/native/``.

The worker's own logic per raw record — the translator, the normalizer's numbering, audience
filters and serialization, the delivery machine stepping it — is a flat profile of small
Python functions; compiled by mypyc it costs about 0.7× in process. The compiled build is
optional: the same ``.py`` files are the source of truth, and
:mod:`reasonwire.workers.ops.native` loads the build only while every source it was compiled
from is unchanged (a manifest of SHA-256 digests), so an edit is never shadowed by a stale
extension. Without a C compiler or mypy the build fails, says so, and everything runs as pure
Python.

mypyc names a module by its path, so the modules are compiled from a staged copy laid out as
installed (``reasonwire/workers/core/…``); the extensions and the shared library of the group
(``reasonwire_native__mypyc``) land in ``build/native/``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _loader() -> ModuleType:
    """``workers/ops/native.py`` (the manifest's reader, whose digests and ABI tag the manifest must
    match), loaded by path: importing ``reasonwire`` would apply the current build, and with
    ``RW_NATIVE=require`` stop at a stale one before it could be rebuilt."""
    spec = importlib.util.spec_from_file_location("_rw_native_loader", ROOT / "workers" / "ops" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OUT = ROOT / "build" / "native"
STAGE = ROOT / "build" / "native-stage"
GROUP = "reasonwire_native"

# The modules compiled: what a raw record passes through — its envelope read, the core, the
# delivery machine that steps each record through it (compiled, its own work fell from ~9,200 to
# ~2,900 instructions per record: ``python -m bench.ab --instructions``), the grammars'
# translators, the P8 registry. Left out: ``backoff`` (timers), ``surrogates`` (an error path;
# mypyc refuses surrogates in literals).
MODULES = (
    "workers/core/artefacts.py",
    "workers/core/audience.py",
    "workers/core/discipline.py",
    "workers/core/errors.py",
    "workers/core/events.py",
    "workers/core/fence.py",
    "workers/core/limits.py",
    "workers/core/normalizer.py",
    "workers/core/translator.py",
    "workers/core/wire.py",
    "workers/core/actions.py",
    "workers/core/delivery.py",
    "workers/core/delivery_machine.py",
    "workers/translators/_gemini_common.py",
    "workers/translators/anthropic_messages.py",
    "workers/translators/bedrock_converse.py",
    "workers/translators/gemini_generate_content.py",
    "workers/translators/gemini_interactions.py",
    "workers/translators/openai_responses.py",
    "workers/translators/openai_chat_completions.py",
    "workers/ops/telemetry/registry.py",
    "contracts/envelope.py",
)


def stage() -> None:
    """A copy of ``workers/`` and ``contracts/`` under ``reasonwire/`` (mypy follows the imports)."""
    shutil.rmtree(STAGE, ignore_errors=True)
    package = STAGE / "reasonwire"
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    for name in ("workers", "contracts"):
        shutil.copytree(ROOT / name, package / name, ignore=ignore)
    (package / "__init__.py").write_text("")


def compile_stage() -> None:
    """mypyc + setuptools ``build_ext`` in the stage, its output straight into ``build/native``."""
    paths = [f"reasonwire/{m}" for m in MODULES]
    script = (
        "from setuptools import setup\n"
        "from mypyc.build import mypycify\n"
        f"setup(name='reasonwire-native', ext_modules=mypycify({paths!r}, group_name={GROUP!r}, opt_level='3'),\n"
        f"      script_args=['build_ext', '--build-lib', {str(OUT)!r}, '--build-temp', 'temp'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=STAGE, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        raise SystemExit(f"build_native: mypyc failed (the core stays pure Python):\n{tail}")


def write_manifest(seconds: float) -> None:
    loader = _loader()
    sources = loader.source_digests(ROOT, MODULES)
    manifest = {"abi": loader.abi(), "group": GROUP, "modules": list(MODULES), "sources": sources, "build_s": round(seconds, 1)}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def main() -> None:
    if sys.argv[1:] == ["--sources"]:  # for make: what the build depends on (this list, once)
        print(" ".join([*MODULES, "workers/ops/native.py", "tools/build_native.py"]))
        return
    started = time.monotonic()
    try:
        import mypyc  # noqa: F401
    except ImportError:
        raise SystemExit("build_native: mypy is not installed (pip install -e '.[native]'); the core stays pure Python") from None
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    stage()
    compile_stage()
    write_manifest(time.monotonic() - started)
    shutil.rmtree(STAGE, ignore_errors=True)
    print(f"build_native: {len(MODULES)} modules compiled into {OUT.relative_to(ROOT)} in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
