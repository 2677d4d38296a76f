"""The distribution a release would publish: `python -m build` makes a wheel that carries the
licence, the typing markers and the viewer page under one import package, ``reasonwire``; installed
into a clean venv, `reasonwire translate` runs, the public API imports as ``from reasonwire import …``,
site-packages gains no generic top-level ``workers`` or ``contracts``, and a gateway started from
the venv serves its viewer page.

Both the isolated build env and the clean venv install from a wheelhouse kept in
``~/.cache/reasonwire/wheelhouse`` (``RW_CACHE``) with ``--no-index``; only when it lacks
something (the first run, a new dependency) is it filled from PyPI with ``pip download``,
so later runs need no network and stay well under a minute. Everything else happens in a
temporary folder: the build runs on a copy of the tree, so the repository gets no build/
or egg-info.
"""

from __future__ import annotations

import json
import os
import tomllib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.ops.settings import WorkerSettings
from tests.integration.gateway_support import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
WHEELHOUSE = Path(os.environ.get("RW_CACHE", Path.home() / ".cache" / "reasonwire")) / "wheelhouse"
NOT_SHIPPED = shutil.ignore_patterns(".git", ".venv", "out", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "bench")


def run(*cmd: str | Path, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    # RW_NATIVE: the suite may require the checkout's compiled build; a wheel carries none
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RW_NATIVE")}
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})})
    assert out.returncode == 0 or not check, f"{cmd}: {out.stderr[-3000:]}"
    return out


def offline_first(step: list[str | Path], fill: list[str | Path], cwd: Path) -> None:
    """Run ``step`` against the wheelhouse only; if that fails, ``pip download`` ``fill`` into it and retry."""
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE)}
    if run(*step, cwd=cwd, env=offline, check=False).returncode == 0:
        return
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    _forget_our_wheels()  # pip download would take a same-named older build for this one, and its old requirements
    run(sys.executable, "-m", "pip", "download", "--quiet", "--dest", WHEELHOUSE, *fill, cwd=cwd)
    _forget_our_wheels()  # the wheelhouse holds dependencies only: the wheel under test is always the one just built
    run(*step, cwd=cwd, env=offline)


def _forget_our_wheels() -> None:
    for old in WHEELHOUSE.glob("reasonwire-*.whl"):
        old.unlink()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("wheel")
    tree = work / "src"
    shutil.copytree(ROOT, tree, ignore=NOT_SHIPPED)
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    offline_first([sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", tree], ["wheel", *backend], cwd=work)
    [built] = (work / "dist").glob("reasonwire-*.whl")
    yield built


def test_wheel_carries_licence_typing_markers_and_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = whl.read(metadata).decode()
        [licence] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert "Apache License" in whl.read(licence).decode()
    assert {"reasonwire/py.typed", "reasonwire/workers/py.typed", "reasonwire/contracts/py.typed"} <= names
    assert "reasonwire/workers/services/gateway/viewer.html" in names
    assert {n.split("/")[0] for n in names if not n.startswith("reasonwire-")} == {"reasonwire"}
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert "Requires-Dist: ag-ui-protocol<1.1,>=1.0.0" in meta.splitlines()


def test_installed_wheel_translates_a_sample_in_a_clean_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    offline_first([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], [wheel], cwd=tmp_path)
    sample = tmp_path / SAMPLE.name  # outside the repository: only the installed package is there
    shutil.copy(SAMPLE, sample)
    out = run(venv / "bin" / "reasonwire", "translate", "--provider", "anthropic-messages", sample, cwd=tmp_path, timeout=120)
    kinds = [json.loads(line)["type"] for line in out.stdout.splitlines()]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert "REASONING_ENCRYPTED_VALUE" in kinds
    where = run(venv / "bin" / "python", "-c", "import reasonwire.workers; print(reasonwire.workers.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(venv))
    api = "from reasonwire import translator_for, replay, ReplayTarget, AgUiConsumer, Publisher; print(translator_for('openai-responses').__class__.__name__)"
    assert run(venv / "bin" / "python", "-c", api, cwd=tmp_path).stdout.strip() == "OpenAIResponsesTranslator"
    [site] = (venv / "lib").glob("python3*/site-packages")
    assert not (site / "workers").exists() and not (site / "contracts").exists()


def test_gateway_from_the_installed_wheel_serves_the_viewer(wheel: Path, tmp_path: Path, primed_group: WorkerSettings) -> None:
    """The page ships in the wheel: without it `/v1/viewer` answers 500 FileNotFoundError."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    offline_first([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], [wheel], cwd=tmp_path)
    gateway = GatewayProcess(primed_group, tmp_path / "gateway.log", command=[str(venv / "bin" / "reasonwire")], cwd=tmp_path)
    try:
        page = httpx.get(gateway.url + "/v1/viewer", timeout=10)
    finally:
        gateway.stop()
    assert page.status_code == 200, page.text[:500]
    assert page.headers["content-type"].startswith("text/html") and "<html" in page.text.lower()


def test_demo_from_the_installed_wheel_publishes_the_shipped_samples(wheel: Path, tmp_path: Path, primed_group: WorkerSettings) -> None:
    """The wheel is the whole product: `reasonwire demo` runs from a clean venv, outside any
    checkout, on the sample streams the package ships (it exited 2 naming a folder inside
    site-packages that could never exist)."""
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if n.startswith("reasonwire/workers/commands/samples/")}
    assert len(shipped) == 2 * len(Grammar) and all(whl_name.endswith(".jsonl") for whl_name in shipped)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    offline_first([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], [wheel], cwd=tmp_path)
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": primed_group.kafka_bootstrap_servers,
        "REDIS_URL": primed_group.redis_url,
        "RW_GROUP_ID": primed_group.group_id,  # primed at the raw topic's end: the demo's worker reads only the demo's runs
        "RW_HEALTH_PORT": "0",
    }
    done = run(venv / "bin" / "reasonwire", "demo", cwd=tmp_path, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"published {2 * len(Grammar)} sample streams" in done.stderr
    finished = [line for line in done.stdout.splitlines() if "RUN_FINISHED" in line]
    assert len(finished) == 2 * len(Grammar), done.stdout[-3000:]
    assert "artefacts stored in Redis" in done.stdout
