"""A poll that meets a run this worker does not hold is stepped in two parts (issue 17, latency).

The runs held here are stepped and their outputs queued while the journal read of the new run
is in flight; the new run follows once the read answers. Steps stay in record order (telemetry
pairs them with the records) and every run's outputs keep their order. In-memory stand-ins for
the store and the producer: the point is the order of the worker's own actions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.oracle import LOCAL_FIXTURES
from reasonwire.workers.core.normalizer import RawRecord
from reasonwire.workers.ingress import RunEnvelope, raw_records
from reasonwire.workers.normalize import NormalizerWorker
from reasonwire.workers.settings import WorkerSettings
from reasonwire.workers.sse import read_events
from reasonwire.workers.telemetry import setup_telemetry
from reasonwire.workers.telemetry.normalizer import NormalizerTelemetry


class _Batch:
    def __init__(self) -> None:
        self.keys: list[bytes | None] = []

    def append(self, *, key: bytes | None, value: bytes, timestamp: None, headers: Any) -> object:
        self.keys.append(key)
        return self


class _Producer:
    """Records what was queued, and when (the journal read's state at that moment)."""

    def __init__(self, read_answered: asyncio.Event) -> None:
        self.read_answered = read_answered
        self.queued: list[tuple[bytes | None, bool]] = []

    def create_batch(self) -> _Batch:
        return _Batch()

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[None]:
        self.queued += [(key, self.read_answered.is_set()) for key in batch.keys]
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Store:
    """Journals are empty; the read answers only when the test says so."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.answered = asyncio.Event()
        self.reads: list[list[Any]] = []

    async def load_journals(self, runs: list[Any]) -> list[tuple[list[Any], bool]]:
        self.reads.append(list(runs))
        await self.release.wait()
        self.answered.set()
        return [([], False) for _ in runs]

    def journal_intact(self, journal: Any, ended: Any, seq: int) -> bool:
        return True

    def loss_window(self) -> bool:
        return False


def _records(run_id: str, partition: int, first_offset: int) -> list[RawRecord]:
    run = RunEnvelope("openai-responses", run_id, f"thread-{run_id}")
    with (LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl").open() as f:
        return [RawRecord(r.key, r.value, tuple(r.headers), partition, first_offset + i) for i, r in enumerate(raw_records(run, read_events(f)))]


async def test_held_runs_are_sent_while_the_new_runs_journal_is_read_and_steps_keep_record_order() -> None:
    store = _Store()
    telemetry = NormalizerTelemetry(setup_telemetry(install_global=False, env={}), group_id="g")
    worker = NormalizerWorker(WorkerSettings(), None, store, telemetry)  # type: ignore[arg-type]
    worker.producer = _Producer(store.answered)  # type: ignore[assignment]
    flights: list[Any] = []
    worker._launch = flights.append  # type: ignore[method-assign]  # the flight's later I/O is not under test
    held, new = _records("held", 0, 0), _records("new", 1, 0)

    store.release.set()  # the first poll: "held" is new here and read at once
    await worker.handle(held[:3])
    worker._slots.release()
    store.release.clear()
    store.answered.clear()
    worker.producer.queued.clear()  # type: ignore[attr-defined]

    poll = [new[0], held[3], held[4]]  # the new run's record comes first in the poll
    handling = asyncio.create_task(worker.handle(poll))
    for _ in range(50):
        await asyncio.sleep(0)
        if worker.producer.queued:  # type: ignore[attr-defined]
            break
    queued = list(worker.producer.queued)  # type: ignore[attr-defined]
    assert queued and {key for key, _ in queued} == {b"held"}, "the held run's outputs go out before the read answers"
    assert not handling.done() and store.reads[-1] == [worker.normalizer.route(new[0]).run]  # type: ignore[union-attr]
    store.release.set()
    await handling
    later = worker.producer.queued[len(queued):]  # type: ignore[attr-defined]
    assert later and all(key == b"new" and answered for key, answered in later)
    [flight] = flights[1:]
    assert [step.run.run_id for step in flight.steps] == ["new", "held", "held"]  # record order
    telemetry.telemetry.log_guard.uninstall()
