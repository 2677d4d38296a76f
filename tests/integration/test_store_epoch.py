"""A store that lost data never makes the worker reuse event numbers.

Real Kafka and Redis. The loss is simulated by deleting what a Redis restarted without
persistence would have lost: the epoch marker and the open run's journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from reasonwire.contracts.store import journal_key
from tests.integration.conftest import Collector, fresh_store_epoch, send
from reasonwire.workers.core.normalizer import JournalEntry, RunKey, Step
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.io.store import EPOCH_KEY, ArtefactStore, StoreLost
from reasonwire.workers.ops.telemetry import setup_telemetry

pytestmark = pytest.mark.integration

FIXTURE = "tests/fixtures/openai-responses/c_interleaved_reasoning_tool_calls.jsonl"


@pytest.fixture(autouse=True)
def _epoch_restored_afterwards(primed_group: WorkerSettings) -> Iterator[None]:
    """These tests wipe the shared test Redis's epoch: later tests get a fresh, not-lost one."""
    yield
    asyncio.run(fresh_store_epoch(primed_group.redis_url))


async def test_claiming_the_epoch_is_idempotent_and_a_missing_epoch_is_detected(redis: Redis) -> None:
    await redis.delete(EPOCH_KEY)
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    first = await store.claim_epoch(lost=False)
    again = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    assert await again.claim_epoch(lost=True) == first and again.lost_ms is None  # an existing epoch is no loss
    key = RunKey("acme", f"epoch-{uuid.uuid4().hex[:6]}")
    await store.apply([Step(run=key, journal_append=JournalEntry(0, b"{}"))])
    await redis.delete(EPOCH_KEY)  # what a restart without persistence leaves
    with pytest.raises(StoreLost):
        await store.load_journals([key])
    with pytest.raises(StoreLost):
        await store.apply([Step(run=key, journal_append=JournalEntry(1, b"{}"))])
    assert await store.recover_from_loss() != first and store.loss_window()
    assert not store.journal_intact([JournalEntry(1, b"{}")], False, 2)  # entry 0 vanished
    assert store.journal_intact([JournalEntry(0, b"{}"), JournalEntry(1, b"{}")], False, 2)
    assert store.journal_intact([], False, 0)  # a run that starts after the loss
    assert store.journal_intact([JournalEntry(-1, b"300"), JournalEntry(0, b"{}")], False, 1)  # bookkeeping fields ignored
    assert store.journal_intact([JournalEntry(0, b"{}"), JournalEntry(1, b"{}")], False, 1)  # a redelivery
    await redis.delete(EPOCH_KEY)


async def test_a_batch_meant_for_a_wiped_store_writes_nothing_into_it(redis: Redis) -> None:
    """One server: the write script compares the epoch before its first write (the
    single-server script path), so nothing of a refused batch lands in the emptied store."""
    await redis.delete(EPOCH_KEY)
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    await store.claim_epoch(lost=False)
    key = RunKey("acme", f"wiped-{uuid.uuid4().hex[:6]}")
    await store.apply([Step(run=key, journal_append=JournalEntry(0, b"{}"))])
    await redis.delete(EPOCH_KEY)
    with pytest.raises(StoreLost):
        await store.apply([Step(run=key, thread_id="t", journal_append=JournalEntry(1, b"{}"))])
    assert await redis.hkeys(journal_key("acme", key.run_id)) == [b"0"]
    with pytest.raises(StoreLost):
        await store.close_runs([Step(run=key, run_ended=True, ended_at=(0, 1))])
    assert await redis.hkeys(journal_key("acme", key.run_id)) == [b"0"]  # not dropped either
    await redis.delete(journal_key("acme", key.run_id))


async def test_the_write_script_is_loaded_again_after_the_server_forgot_it(redis: Redis) -> None:
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    key = RunKey("acme", f"noscript-{uuid.uuid4().hex[:6]}")
    await redis.script_flush()  # what a restarted server (scripts are not persisted) looks like
    await store.apply([Step(run=key, journal_append=JournalEntry(0, b"{}"))])
    await redis.script_flush()
    await store.apply([Step(run=key, journal_append=JournalEntry(1, b"{}"))])
    assert sorted(await redis.hkeys(journal_key("acme", key.run_id))) == [b"0", b"1"]
    await redis.delete(journal_key("acme", key.run_id))


def _events_by_seq(c: Collector, run_id: str) -> dict[int, list[bytes]]:
    return {seq: [orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in copies] for seq, copies in c.events[run_id].items()}


async def test_a_run_whose_journal_vanished_is_not_renumbered_after_a_restart(primed_group: WorkerSettings, producer: Any, redis: Redis) -> None:
    """Worker stops mid-run, Redis loses its data, a worker starts: the run's later records must not
    rebuild it from nothing (a second RUN_STARTED at rw-event-seq 0 over different events): they
    are dead-lettered ``store_lost`` and no number is published twice with different content."""
    run = RunEnvelope("openai-responses", f"lost-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with open(FIXTURE) as f:
        records = list(raw_records(run, read_events(f)))
    half = len(records) // 2
    settings = dataclasses.replace(primed_group, inactivity_timeout_s=120, health_port=0)
    telemetry = setup_telemetry(install_global=False, env={})
    app, _ = create_app(settings, telemetry)
    try:
        await app.start()
        await send(producer, records[:half])
        async with Collector(settings.kafka_bootstrap_servers) as c:
            await c.until(lambda c: len(c.events.get(run.run_id, {})) >= 3, timeout=60)
            await asyncio.sleep(1.0)  # the poll commits
    finally:
        await app.stop()
    await redis.delete(EPOCH_KEY, journal_key(run.tenant, run.run_id))  # Redis came back empty

    app, worker = create_app(settings, telemetry)
    try:
        await app.start()
        await send(producer, records[half:])
        rest = {r.key for r in records[half:]}
        async with Collector(settings.kafka_bootstrap_servers) as c:
            # it reads the topics from their start: after a whole suite's traffic (the gateway's
            # multi-MB runs) that took longer than the wait below, and the run's first events were
            # not read yet (KeyError 0 in the merged suite)
            await c.until(lambda c: 0 in c.events.get(run.run_id, {}), timeout=180)
            lost = lambda c: sum(1 for k, _, h in c.dlq if k in rest and h.get("rw-dlq-code") == "store_lost")  # noqa: E731
            # either every later record is dead-lettered, or (the old worker) the run was rebuilt and ended
            with contextlib.suppress(AssertionError):  # the old worker dead-letters nothing: judged below
                await c.until(lambda c: lost(c) >= len(records) - half, timeout=45)
            await asyncio.sleep(1.0)
            await c.until(lambda c: True)
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    by_seq = _events_by_seq(c, run.run_id)
    reused = sorted(seq for seq, copies in by_seq.items() if len(set(copies)) > 1)
    assert reused == [], f"different events share rw-event-seq {reused}"
    assert sum(b'"RUN_STARTED"' in copy for copies in by_seq.values() for copy in copies) == len(by_seq[0])
    assert lost(c) == len(records) - half  # every later record accounted for
    assert worker.store.lost_ms is not None
