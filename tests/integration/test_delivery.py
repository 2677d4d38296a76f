"""At-least-once delivery on the real broker and Redis when publishing fails mid-poll."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream, translate_file
from tests.integration.conftest import Collector, send
from reasonwire.workers.core.normalizer import Outbound
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.ops.telemetry import setup_telemetry

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "b_reasoning_then_tool_call.jsonl"


class BrokerOutage(Exception):
    pass


FailWhen = Callable[[RunEnvelope, Sequence[Outbound]], bool]


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
    try:
        await app.start()
        outbox = worker.outbox
        assert outbox is not None
        outbox_add = outbox.add

        def failing_add(outbound: Sequence[Outbound]) -> Any:
            if not failed and fail_when(run, outbound):
                failed.append(len(outbound))
                raise BrokerOutage(outage)
            return outbox_add(outbound)

        outbox.add = failing_add  # type: ignore[method-assign]
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            # the run's first records, then the rest once they are out: a run restored here sends
            # only after its first write, so its later records are the ones sent while stepping
            await send(producer, records[:2])
            await c.until(lambda c: bool(c.stream(run.run_id)), timeout=60)
            await send(producer, records[2:])
            await c.until(lambda c: bool(failed) and c.finished(run.run_id), timeout=90)
            await asyncio.sleep(0.5)
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    assert failed, "no send failed: the path under test did not run"
    return run, c.stream(run.run_id)


def _terminal(out: Outbound) -> bool:
    return b'"RUN_FINISHED"' in out.value or b'"RUN_ERROR"' in out.value


def _ends_the_run(run: RunEnvelope, outbound: Sequence[Outbound]) -> bool:
    return any(o.key == run.run_id.encode() and _terminal(o) for o in outbound)


def _mid_run(run: RunEnvelope, outbound: Sequence[Outbound]) -> bool:
    mine = [o for o in outbound if o.key == run.run_id.encode()]
    return bool(mine) and not any(_terminal(o) for o in outbound)


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
