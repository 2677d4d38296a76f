"""The documentation runs: every fenced shell and Python block of README.md and docs/ not marked
``<!-- not run: <reason> -->`` is executed, document by document, as a reader follows it
(tests/doc_blocks.py), against the session's Kafka and Redis.

A reader of README.md starts from a bare clone: the ``reasonwire`` command is not on ``PATH``
until the README puts it there. A reader of docs/ has it installed. Each document runs in a
fresh folder that holds links to the repository's top-level entries, so relative paths
(``tests/fixtures/…``, ``.venv/bin``) resolve as from the repository root and whatever a block
writes stays out of the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reasonwire.workers.ops.settings import WorkerSettings
from tests.doc_blocks import ROOT, blocks, documents

RUNNABLE = {path: [b for b in blocks(path) if b.not_run is None] for path in documents()}
VENV_BIN = Path(sys.executable).parent


def reader_path(path: Path) -> str:
    """``PATH`` without the directories that hold a ``reasonwire`` command; docs/ readers get the venv's."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "reasonwire").exists()]
    if path.name != "README.md" or path.parent != ROOT:
        dirs.insert(0, str(VENV_BIN))
    return os.pathsep.join(dirs)


def reader_folder(where: Path) -> Path:
    """A folder that looks like the repository root to a reader's relative paths; its ``.venv`` is
    the virtualenv running the tests (``make test``'s own, or whichever runs them)."""
    where.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv"):
            (where / entry.name).symlink_to(entry)
    (where / ".venv").symlink_to(Path(sys.prefix))
    return where


@pytest.mark.parametrize("path", [p for p, runnable in RUNNABLE.items() if runnable], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_documents_blocks_run_as_written(path: Path, primed_group: WorkerSettings, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"where": b.where, "kind": b.kind, "code": b.code} for b in RUNNABLE[path]]))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {
        "PATH": reader_path(path),
        "KAFKA_BOOTSTRAP_SERVERS": primed_group.kafka_bootstrap_servers,
        "REDIS_URL": primed_group.redis_url,
        "RW_PARTITIONS": str(primed_group.partitions),  # the session's topics (a plan of 8 would differ)
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "doc_blocks.py"), str(plan)],
        cwd=reader_folder(tmp_path / "reader"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
