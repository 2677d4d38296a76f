"""At-least-once delivery on the real broker and Redis when publishing fails mid-poll."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream, translate_file
from tests.integration.conftest import Collector, send
from reasonwire.workers.core.normalizer import RawRecord, Step
from reasonwire.workers.ingress import RunEnvelope, raw_records
from reasonwire.workers.normalize import create_app
from reasonwire.workers.settings import WorkerSettings
from reasonwire.workers.sse import read_events
from reasonwire.workers.telemetry import setup_telemetry

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "b_reasoning_then_tool_call.jsonl"


class BrokerOutage(Exception):
    pass


FailWhen = Callable[[RunEnvelope, list[Step]], bool]


async def _stream_with_one_failed_send(
    primed_group: WorkerSettings, producer: Any, prefix: str, fail_when: FailWhen, outage: str
) -> tuple[RunEnvelope, list[dict[str, Any]]]:
    """Publish one run through a worker whose first send matching ``fail_when`` raises;
    returns the run and the stream a consumer sees once the run has finished."""
    run = RunEnvelope("openai-responses", f"{prefix}-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with FIXTURE.open() as f:
        records = list(raw_records(run, read_events(f)))
    telemetry = setup_telemetry(install_global=False, env={})
    app, worker = create_app(dataclasses.replace(primed_group, inactivity_timeout_s=120), telemetry)
    failed: list[int] = []
    worker_send = worker._send

    async def failing_send(steps: list[Step]) -> list[Any]:
        if not failed and fail_when(run, steps):
            failed.append(len(steps))
            raise BrokerOutage(outage)
        return await worker_send(steps)

    worker._send = failing_send  # type: ignore[method-assign]
    try:
        await app.start()
        await send(producer, records)
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            await c.until(lambda c: bool(failed) and c.finished(run.run_id), timeout=90)
            await asyncio.sleep(0.5)
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    assert failed, "no send failed: the path under test did not run"
    return run, c.stream(run.run_id)


def _ends_the_run(run: RunEnvelope, steps: list[Step]) -> bool:
    return any(s.run_ended and s.run and s.run.run_id == run.run_id for s in steps)


def _mid_run(run: RunEnvelope, steps: list[Step]) -> bool:
    mine = [s for s in steps if s.run and s.run.run_id == run.run_id and s.outbound]
    return bool(mine) and not any(s.run_ended for s in steps)


async def test_a_run_whose_end_failed_to_publish_is_finished_on_redelivery(primed_group: WorkerSettings, producer: Any) -> None:
    """The store wrote the poll, then publishing failed: the retry must still publish RUN_FINISHED
    (the ended marker is written only after publishing, so the run is rebuilt from its journal)."""
    run, stream = await _stream_with_one_failed_send(
        primed_group, producer, "delivery", _ends_the_run, "publish failed after the store wrote the poll"
    )
    assert stream == translate_file(run.grammar, FIXTURE, run_id=run.run_id, thread_id=run.thread_id).events
    assert_valid_stream(stream)


async def test_a_send_failing_while_a_poll_is_stepped_rewinds_and_loses_nothing(primed_group: WorkerSettings, producer: Any) -> None:
    """The outputs of runs still open are sent while stepping: a failure there rewinds every
    partition in flight to its first uncommitted record, and the redone poll publishes everything."""
    run, stream = await _stream_with_one_failed_send(primed_group, producer, "early", _mid_run, "send failed while stepping")
    assert stream == translate_file(run.grammar, FIXTURE, run_id=run.run_id, thread_id=run.thread_id).events
    assert_valid_stream(stream)


async def test_a_poll_reads_only_the_journals_of_runs_it_does_not_hold(primed_group: WorkerSettings) -> None:
    """Several records of one run in a poll: its journal is read once when the run is new here,
    and not at all while the worker holds it (judged on the run's first record in the poll)."""
    run = RunEnvelope("openai-responses", f"journal-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with FIXTURE.open() as f:
        records = [RawRecord(r.key, r.value, tuple(r.headers), 0, i) for i, r in enumerate(raw_records(run, read_events(f)))]
    telemetry = setup_telemetry(install_global=False, env={})
    _, worker = create_app(primed_group, telemetry)
    reads: list[list[Any]] = []
    load_journals = worker.store.load_journals

    async def counted(runs: list[Any]) -> list[Any]:
        reads.append(list(runs))
        return await load_journals(runs)

    worker.store.load_journals = counted  # type: ignore[method-assign]
    try:
        first_poll = [worker.normalizer.route(r) for r in records[:4]]
        unread = worker._runs_to_read(first_poll)
        assert unread == [first_poll[0].run]  # type: ignore[union-attr]
        assert list(await worker._read_journals(unread)) == unread
        for item in first_poll:
            worker.normalizer.accept(item)  # type: ignore[arg-type]
        assert worker._runs_to_read([worker.normalizer.route(r) for r in records[4:9]]) == []
        assert len(reads) == 1
    finally:
        await worker.store.redis.aclose()
        telemetry.log_guard.uninstall()
