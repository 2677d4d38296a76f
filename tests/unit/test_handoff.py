"""workers/ops/handoff.py: the worker's poll → producer hand-off recorder (the hand-off targets inside the worker)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from reasonwire.workers.ops import handoff
from reasonwire.workers.core.fence import Witness
from reasonwire.workers.core.normalizer import RawRecord
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.outbox import open_outbox
from reasonwire.workers.services.normalizer import NormalizerWorker
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.ops.telemetry import setup_telemetry
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from tests.conformance.oracle import LOCAL_FIXTURES


def test_off_unless_the_variable_names_a_file() -> None:
    """Off by default: the production worker records nothing and keeps nothing."""
    off = handoff.from_env({})
    assert not off.enabled
    assert off.handed(time.perf_counter(), True) is None
    assert not hasattr(off, "samples") and not hasattr(off, "__dict__")  # nothing to grow
    assert not handoff.from_env({handoff.ENV: ""}).enabled


def test_a_sample_is_the_time_since_the_poll_started(tmp_path: Path) -> None:
    rec = handoff.Recorder(tmp_path / "h.json")
    started = time.perf_counter() - 0.004
    rec.handed(started, False)
    rec.handed(started, True)
    (t0, ms0, term0), (_, _, term1) = rec.samples
    assert 4.0 <= ms0 < 1000 and t0 > started and term0 is False and term1 is True
    rec.write()
    assert orjson.loads((tmp_path / "h.json").read_bytes())["samples"] == [list(s) for s in rec.samples]


def test_the_samples_are_written_when_the_process_exits(tmp_path: Path) -> None:
    """The benchmark stops the worker with SIGTERM and reads the file: written at exit."""
    out = tmp_path / "handoff.json"
    code = "import time; from reasonwire.workers.ops import handoff; handoff.recorder.handed(time.perf_counter() - 0.002, True)"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, handoff.ENV: str(out)}, check=True)
    [[_, ms, terminal]] = orjson.loads(out.read_bytes())["samples"]
    assert ms >= 2.0 and terminal is True


# -- the worker's two call sites (workers/services/normalizer.py; the lead's state machine keeps them) ---


class _Batch:
    def append(self, *, key: bytes | None, value: bytes, timestamp: None, headers: Any) -> object:
        return self


class _Producer:
    def create_batch(self) -> _Batch:
        return _Batch()

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Store:
    """Empty journals; every write succeeds."""

    def __init__(self) -> None:
        self.witness = Witness()

    async def load_journals(self, runs: list[Any]) -> list[tuple[list[Any], bool]]:
        return [([], False) for _ in runs]

    def loss_window(self) -> bool:
        return False

    async def apply(self, steps: Any, opened: Any = None) -> int:
        return 0

    async def close_runs(self, steps: Any) -> None:
        return None


class _Consumer:
    def __init__(self) -> None:
        self.commits: list[Any] = []

    def highwater(self, tp: Any) -> None:
        return None

    def assignment(self) -> set[Any]:
        return set()

    async def commit(self, offsets: Any) -> None:
        self.commits.append(offsets)


async def test_the_worker_hands_off_continuing_and_after_write_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll's outputs sent while it is stepped record a continuing hand-off; those sent after
    its Redis write (a run that ended, and a run this worker has just restored from its journal,
    whose outputs wait for its first accepted write) an after-write ("terminal") one.
    Fails on a worker that does not call the recorder."""
    recorder = handoff.Recorder(tmp_path / "h.json")
    monkeypatch.setattr(handoff, "recorder", recorder)
    telemetry = NormalizerTelemetry(setup_telemetry(install_global=False, env={}), group_id="g")
    worker = NormalizerWorker(WorkerSettings(), None, _Store(), telemetry)  # type: ignore[arg-type]
    worker.producer = _Producer()  # type: ignore[assignment]
    worker.outbox = await open_outbox(worker.producer)
    worker.consumer = consumer = _Consumer()  # type: ignore[assignment]
    run = RunEnvelope("openai-responses", "r1", "thread-r1")
    with (LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl").open() as f:
        records = [RawRecord(r.key, r.value, tuple(r.headers), 0, i) for i, r in enumerate(raw_records(run, read_events(f)))]
    try:
        before = time.perf_counter()
        await worker.handle(records[:3])  # the run is new here: restored, its outputs follow the write
        await worker.drain()
        assert [term for _, _, term in recorder.samples] == [True]
        worker.machine.closing = False
        await worker.handle(records[3:])  # held and confirmed: early outputs, then the end after the write
        await worker.drain()
        assert [term for _, _, term in recorder.samples] == [True, False, True]
        assert all(t > before and 0 <= ms < 60_000 for t, ms, _ in recorder.samples)
        assert len(consumer.commits) == 2
    finally:
        telemetry.telemetry.log_guard.uninstall()
