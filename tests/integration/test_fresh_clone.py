"""A fresh clone stands on its own: `git clone` of the committed HEAD into an
empty temporary folder — nothing beside it, so none of the reference material that sits beside a developer's checkout — then ``make run`` there
publishes the in-repo sample streams through the real broker and shows ``REASONING_*``
events, and the clone's own conformance tests find their fixtures.

``make run`` is the real command. To spare a ~2 minute ``pip install`` per run it is
pointed at the virtualenv running this test (``VENV=…``, with ``-o`` so make does not
reinstall into it) and imports the clone's code (``PYTHONPATH`` = the clone); set
``RW_FRESH_CLONE_INSTALL=1`` to let the clone create and install its own ``.venv``.
The services are the session's (``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL``), so the clone
starts no broker of its own and stops nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.ops.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CASES = ("a_reasoning_then_answer", "b_reasoning_then_tool_call")
GRAMMARS = [g.value for g in Grammar]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed HEAD of the repository under test, alone in an empty folder."""
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("the repository under test is not a git checkout")
    where = tmp_path_factory.mktemp("fresh") / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where)], check=True, timeout=120)
    assert sorted(p.name for p in where.parent.iterdir()) == ["clone"]  # nothing beside it: no reference folder next to the clone
    return where


def clone_env(clone: Path, settings: WorkerSettings, state: Path) -> tuple[dict[str, str], list[str]]:
    """The environment and make arguments for running the clone against this session's services."""
    # RW_NATIVE too: CI requires the compiled build of its own tree; a clone builds its own (make
    # native, first thing `make run` does) or, outside make, runs pure Python
    env = {k: v for k, v in os.environ.items() if k not in ("RW_SAMPLES", "RW_FIXTURES", "VIRTUAL_ENV", "PYTHONPATH", "RW_NATIVE")}
    env |= {
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "REDIS_URL": settings.redis_url,
        "RW_GROUP_ID": settings.group_id,  # the primed test group: no backlog of earlier sessions
        "RW_PARTITIONS": str(settings.partitions),
        "RW_STATE": str(state),  # whatever services.sh does, it does it in a folder of this test
    }
    venv = Path(sys.executable).parent.parent
    if os.environ.get("RW_FRESH_CLONE_INSTALL") or not (venv / "bin" / "reasonwire").exists():
        return env, []
    env["PYTHONPATH"] = str(clone)
    return env, [f"VENV={venv}", "-o", f"{venv}/.installed"]


def test_the_clone_imports_its_own_code_not_the_parents(clone: Path, primed_group: WorkerSettings, tmp_path: Path) -> None:
    """What makes the venv shortcut honest: with it, the code that runs is the clone's."""
    env, make_args = clone_env(clone, primed_group, tmp_path / "state")
    if not make_args:
        pytest.skip("the clone installs its own .venv")
    out = subprocess.run([sys.executable, "-c", "import reasonwire.workers.commands.demo as d; print(d.__file__)"], cwd=clone, env=env, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()).is_relative_to(clone)


def test_make_run_in_a_fresh_clone_publishes_the_in_repo_samples_through_the_broker(clone: Path, primed_group: WorkerSettings, tmp_path: Path) -> None:
    env, make_args = clone_env(clone, primed_group, tmp_path / "state")
    done = subprocess.run(["make", "--no-print-directory", "run", *make_args], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "not starting Kafka" in output and "not starting Redis" in output  # the session's services, none of its own
    assert f"published {len(GRAMMARS) * len(SAMPLE_CASES)} sample streams to reasoning.raw.v1" in output
    outside = "/".join(("..", "shared"))  # the reference folder beside a developer checkout; a clone has none
    assert "Traceback" not in output and outside not in output
    # every sample's run came back through reasoning.events.v1 with its reasoning and a terminal event
    for grammar in GRAMMARS:
        for case in SAMPLE_CASES:
            run = re.escape(f"-{grammar}-{case}")
            assert re.search(rf"^demo-\w+{run}\s+#\s*\d+ REASONING_MESSAGE_CONTENT ", done.stdout, re.M), (grammar, case)
            if _announces_a_value(clone / "tests" / "fixtures" / grammar / f"{case}.expected.json"):
                assert re.search(rf"^demo-\w+{run}\s+#\s*\d+ REASONING_ENCRYPTED_VALUE .*not shown", done.stdout, re.M), (grammar, case)
            assert re.search(rf"^demo-\w+{run}\s+#\s*\d+ RUN_FINISHED$", done.stdout, re.M), (grammar, case)
    # and the artefacts the worker stored in Redis, as a table: one row per sample, no values
    table = done.stdout.split("artefacts stored in Redis", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert table[0].split() == ["sample", "entity", "kind", "subtype", "bytes", "sha256", "complete"]
    assert sorted(line.split()[0] for line in table[1:] if line.strip()) == sorted(f"{g}/{c}" for g in GRAMMARS for c in SAMPLE_CASES)
    # and where to watch each run: the viewer of the gateway make run started
    viewers = re.findall(r"^  (http://127\.0\.0\.1:\d+/v1/viewer\?thread=\S+&run=(\S+)&audience=\w+)#key=\S+$", done.stdout, re.M)
    assert sorted(run.split("-", 2)[2] for _, run in viewers) == sorted(f"{g}-{c}" for g in GRAMMARS for c in SAMPLE_CASES)
    values = [json_value for path in clone.glob("tests/fixtures/*/[ab]_*.expected.json") for json_value in _opaque_values(path)]
    assert values and not any(v in output for v in values)  # P8: described, never printed


def _announces_a_value(expected: Path) -> bool:
    """Whether the sample's stream carries a ``REASONING_ENCRYPTED_VALUE``: readable reasoning kept
    as replay state (Chat Completions' ``reasoning_content``) is stored but never announced."""
    return any(a.get("announced", True) for a in json.loads(expected.read_text()).get("opaque_artifacts", []))


def test_the_clones_conformance_tests_find_the_in_repo_fixtures(clone: Path, primed_group: WorkerSettings, tmp_path: Path) -> None:
    env, _ = clone_env(clone, primed_group, tmp_path / "state")
    env["PYTHONPATH"] = str(clone)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance/test_fixtures.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    summary = done.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))  # type: ignore[union-attr]
    assert passed >= 3 * 2 * len(GRAMMARS) and "skipped" not in summary and "failed" not in summary, summary


def _opaque_values(path: Path) -> list[str]:
    """The sample's opaque values (readable reasoning kept as replay state is shown as reasoning)."""
    return [a["value"] for a in json.loads(path.read_text())["opaque_artifacts"] if a.get("announced", True)]
