"""At-least-once delivery on the real broker and Redis when publishing fails mid-poll."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest

from tests.conformance.oracle import SHARED_FIXTURES, assert_valid_stream, translate_file
from tests.integration.conftest import Collector, send
from workers.core.normalizer import Step
from workers.ingress import RunEnvelope, raw_records
from workers.normalize import create_app
from workers.settings import WorkerSettings
from workers.sse import read_events
from workers.telemetry import setup_telemetry

pytestmark = pytest.mark.integration

FIXTURE = SHARED_FIXTURES / "openai-responses" / "b_reasoning_then_tool_call.jsonl"


class BrokerOutage(Exception):
    pass


async def test_a_run_whose_end_failed_to_publish_is_finished_on_redelivery(primed_group: WorkerSettings, producer: Any) -> None:
    """The store wrote the poll, then publishing failed: the retry must still publish RUN_FINISHED
    (the ended marker is written only after publishing, so the run is rebuilt from its journal)."""
    run = RunEnvelope("openai-responses", f"delivery-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with FIXTURE.open() as f:
        records = list(raw_records(run, read_events(f)))
    telemetry = setup_telemetry(install_global=False, env={})
    app, worker = create_app(dataclasses.replace(primed_group, inactivity_timeout_s=120), telemetry)
    failed: list[int] = []
    worker_send = worker._send

    async def fail_when_a_run_ends(steps: list[Step]) -> list[Any]:
        if not failed and any(s.run_ended and s.run and s.run.run_id == run.run_id for s in steps):
            failed.append(len(steps))
            raise BrokerOutage("publish failed after the store wrote the poll")
        return await worker_send(steps)

    worker._send = fail_when_a_run_ends  # type: ignore[method-assign]
    try:
        await app.start()
        await send(producer, records)
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            await c.until(lambda c: bool(failed) and c.finished(run.run_id), timeout=90)
            await asyncio.sleep(0.5)
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    assert failed, "publishing never failed: the path under test did not run"
    stream = c.stream(run.run_id)
    assert stream == translate_file(run.grammar, FIXTURE, run_id=run.run_id, thread_id=run.thread_id).events
    assert_valid_stream(stream)
