"""``reasonwire topics apply`` raising the partition count (docs/scaling.md, "Changing the raw
topic's partition count"): it adds partitions once the normalizer group has consumed the raw
topic, a run whose key moves to another partition across the change stays one correct run (its
journal carries it to the new owner), and a decrease or another replication factor is refused
in one line with nothing changed. A private real broker and Redis (``deploy/services.sh`` on
spare ports), because the test resizes the real topic names; only processes it started are
signalled."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from chaos.services import Services
from reasonwire.contracts import topic_plan, topics
from reasonwire.workers.io.partitions import partition_of
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.io.topics_admin import admin_client, describe
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from tests.conformance.oracle import translate_file
from tests.integration.conftest import ROOT, Collector, WorkerProcess

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
GROUP = "rw-resize-test"


def _apply(bootstrap: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "RW_GROUP_ID": GROUP, **env}
    return subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", "topics", "apply", *args], env=full, capture_output=True, text=True, timeout=180, cwd=ROOT)


async def _partitions(bootstrap: str) -> dict[str, tuple[int, int]]:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        return {name: (t.partitions, t.replication) for name, t in (await describe(admin, (r.name for r in topic_plan.ROLES))).items()}
    finally:
        await admin.close()


def _moving_run_id() -> str:
    """A run id whose partition of 8 is not its partition of 12: its records change owner."""
    while True:
        run_id = f"resize-{uuid.uuid4().hex[:8]}"
        if partition_of(run_id.encode(), range(8)) != partition_of(run_id.encode(), range(12)):
            return run_id


async def _send(bootstrap: str, records: list[Any]) -> set[int]:
    """Records through a fresh producer (it learns the partition count now, as a restarted ingress
    does); the partitions they went to."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sent = [await (await producer.send(topics.RAW, r.value, key=r.key, headers=r.headers)) for r in records]
        return {m.partition for m in sent}
    finally:
        await producer.stop()


async def test_apply_adds_partitions_after_the_raw_topic_drained_and_a_run_moving_partition_stays_correct(private_services: Services, tmp_path: Path) -> None:
    bootstrap = private_services.bootstrap
    created = _apply(bootstrap, RW_PARTITIONS="8")
    assert created.returncode == 0, created.stderr
    assert await _partitions(bootstrap) == {r.name: (8, 1) for r in topic_plan.ROLES}
    settings = WorkerSettings(kafka_bootstrap_servers=bootstrap, redis_url=private_services.redis_url, partitions=8, group_id=GROUP)

    run_id, thread_id = _moving_run_id(), f"thread-{uuid.uuid4().hex[:8]}"
    with CAPTURE.open(encoding="utf-8") as f:
        events = list(read_events(f))
    records = list(raw_records(RunEnvelope("anthropic-messages", run_id, thread_id, "acme"), events))
    half = len(records) // 2

    worker = WorkerProcess(settings, tmp_path / "worker-0.log")
    try:
        worker.wait_assigned()
        assert await _send(bootstrap, records[:half]) == {partition_of(run_id.encode(), range(8))}
        grown = _apply(bootstrap, "--drain-timeout", "60", RW_PARTITIONS="12")  # waits for the worker to consume them
        assert grown.returncode == 0, grown.stderr
    finally:
        worker.stop()
    assert grown.stdout.count("added partitions to ") == len(topic_plan.ROLES)
    assert f"added partitions to {topics.RAW}: 8 → 12" in grown.stdout
    assert await _partitions(bootstrap) == {r.name: (12, 1) for r in topic_plan.ROLES}

    # the procedure's steps 3 and 4: workers restarted, then the ingress (its producer sees 12 partitions)
    worker = WorkerProcess(settings, tmp_path / "worker-1.log", {"RW_PARTITIONS": "12"})
    try:
        worker.wait_assigned()
        assert await _send(bootstrap, records[half:]) == {partition_of(run_id.encode(), range(12))}
        async with Collector(bootstrap) as c:
            await c.until(lambda c: c.finished(run_id), timeout=90)
            await asyncio.sleep(1.0)
            await c.until(lambda c: True)
    finally:
        worker.stop()
    offline = translate_file("anthropic-messages", CAPTURE, run_id=run_id, thread_id=thread_id)
    assert c.stream(run_id) == offline.events  # one run, every event once, as if it never moved
    assert not [d for d in c.dlq if d[0] == run_id.encode()]

    checked = _apply(bootstrap, "--check", RW_PARTITIONS="12")
    assert checked.returncode == 0 and f"all {len(topic_plan.ROLES)} topics match the plan" in checked.stdout

    for env, words in (({"RW_PARTITIONS": "8"}, "partitions is 12, the plan says 8"), ({"RW_PARTITIONS": "12", "RW_REPLICATION_FACTOR": "3"}, "replication is 1, the plan says 3")):
        for args in ((), ("--check",)):
            refused = _apply(bootstrap, *args, **env)
            assert refused.returncode == 2, refused
            assert refused.stdout == "" and refused.stderr.count("\n") == 1
            assert refused.stderr.startswith("reasonwire: error: refused, nothing changed: ") and words in refused.stderr
            assert f"{topics.RAW} and {len(topic_plan.ROLES) - 1} more topics" in refused.stderr
    assert await _partitions(bootstrap) == {r.name: (12, 1) for r in topic_plan.ROLES}


async def test_apply_does_not_add_raw_partitions_while_the_normalizer_group_has_records_to_consume(private_services: Services) -> None:
    bootstrap = private_services.bootstrap
    assert _apply(bootstrap, RW_PARTITIONS="4").returncode == 0
    run_id = f"undrained-{uuid.uuid4().hex[:8]}"
    events = [e for _, e in zip(range(3), read_events(CAPTURE.open(encoding="utf-8")), strict=False)]
    await _send(bootstrap, list(raw_records(RunEnvelope("anthropic-messages", run_id, run_id), events, end=None)))
    waited = _apply(bootstrap, "--drain-timeout", "2", RW_PARTITIONS="6")
    assert waited.returncode == 1, waited
    assert waited.stderr.count("\n") == 1 and f"still has 3 records of {topics.RAW} to consume" in waited.stderr
    assert "--live" in waited.stderr
    assert (await _partitions(bootstrap))[topics.RAW] == (4, 1)
    live = _apply(bootstrap, "--live", RW_PARTITIONS="6")
    assert live.returncode == 0, live.stderr
    assert (await _partitions(bootstrap))[topics.RAW] == (6, 1)
