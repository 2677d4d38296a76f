"""bench.e2e.frozen: a drain round's consumers are stopped while the backlog is produced and
thawed after, even when producing fails (on an idle host the consumer would outrun the
producer and the round would have no slope to measure)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.e2e import frozen


def _state(pid: int, wanted: str) -> str:
    """The process's state once it is one of ``wanted`` (a signal is delivered asynchronously: on a
    loaded host the state read right after ``kill`` was still "R"), or the last one read after 5 s."""
    deadline = time.monotonic() + 5
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in wanted or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


def test_consumers_are_stopped_inside_and_running_after_even_on_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    consumer = SimpleNamespace(proc=proc)
    try:
        with frozen([consumer]):  # type: ignore[list-item]
            assert _state(proc.pid, "T") == "T"
        assert _state(proc.pid, "SR") in ("S", "R")
        with pytest.raises(RuntimeError), frozen([consumer]):  # type: ignore[list-item]
            raise RuntimeError("producing failed")
        assert _state(proc.pid, "SR") in ("S", "R")
    finally:
        proc.kill()
        proc.wait()
