"""One number, one event under pauses, moved partitions and restored stores.

Real Kafka and Redis. The oracle is the offline translation (``tests.conformance.oracle``) and
the invariant every consumer relies on: no two different events under one (run,
``rw-event-seq``), one terminal event per run.

* a worker SIGSTOPped with records of its runs waiting, and a short ``RW_INACTIVITY_TIMEOUT_S``,
  resumes without expiring them (item 1);
* a worker SIGSTOPped long enough for the group to give its partitions to another worker, which
  finishes its runs, resumes and publishes nothing that contradicts them (item 2);
* a stale copy of a run whose records moved to another partition cannot end it (item 3: the
  fence in the store's write script, checked against the real script);
* a Redis restored from an older copy (its keys put back with ``RESTORE``, write count included)
  is detected before any run is renumbered (item 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from reasonwire.contracts.store import ended_key, journal_key
from reasonwire.workers.core.normalizer import JournalEntry, Normalizer, RawRecord, RunInput, Step
from reasonwire.workers.services.ingress.records import OutgoingRecord, RunEnvelope, raw_records
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.io.store import EPOCH_KEY, ArtefactStore, StoreLost
from reasonwire.workers.ops.telemetry import setup_telemetry
from reasonwire.workers.translators import translator_for
from tests.conformance.oracle import LOCAL_FIXTURES, translate_file
from tests.integration.conftest import Collector, fresh_store_epoch, send, send_and_count_refusals
from tests.integration.gateway_support import free_port

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl"


@pytest.fixture(autouse=True)
def _epoch_restored_afterwards(primed_group: WorkerSettings) -> Iterator[None]:
    """Some tests here put back an old epoch: later tests get a fresh, not-lost one."""
    yield
    asyncio.run(fresh_store_epoch(primed_group.redis_url))


def _runs(tag: str, count: int) -> list[tuple[RunEnvelope, list[OutgoingRecord]]]:
    out = []
    for _ in range(count):
        run = RunEnvelope("openai-responses", f"{tag}-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
        with FIXTURE.open() as f:
            out.append((run, list(raw_records(run, read_events(f)))))
    return out


def _offline(run: RunEnvelope) -> list[dict[str, Any]]:
    return translate_file(run.grammar, FIXTURE, run_id=run.run_id, thread_id=run.thread_id, model=run.model).events


def _one_number_one_event(c: Collector, runs: list[tuple[RunEnvelope, list[OutgoingRecord]]]) -> None:
    """One number, one event: per run, no number carries two different events, and there is
    one terminal event (identical redeliveries of it allowed)."""
    for run, _ in runs:
        by_seq = c.events.get(run.run_id, {})
        differing = sorted(seq for seq, copies in by_seq.items() if len({orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in copies}) > 1)
        assert differing == [], f"{run.run_id}: different events share rw-event-seq {differing}"
        terminal = {seq for seq, copies in by_seq.items() if copies[0]["type"] in ("RUN_FINISHED", "RUN_ERROR")}
        assert len(terminal) <= 1, f"{run.run_id}: terminal events at {sorted(terminal)}"


def _sigstop(worker: Any) -> None:
    worker.proc.send_signal(signal.SIGSTOP)


def _sigcont(worker: Any) -> None:
    worker.proc.send_signal(signal.SIGCONT)


async def test_a_paused_worker_does_not_expire_runs_whose_records_wait(spawn_worker: Any, producer: Any, primed_group: Any) -> None:
    """SIGSTOP for twice the inactivity timeout while the runs' next records arrive: on resuming,
    the worker must translate them, not end the runs ``inactivity_timeout`` and dead-letter them
    ``run_ended`` (main ended 23 of 24 runs this way: silence was measured on the worker's clock)."""
    worker = spawn_worker({"RW_INACTIVITY_TIMEOUT_S": "4", "RW_HEALTH_PORT": "0"})
    worker.wait_assigned()
    runs = _runs("paused", 8)
    for _, records in runs:
        await send(producer, records[: len(records) // 2])
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(run.run_id in c.events for run, _ in runs))
    await asyncio.sleep(1.0)  # the worker is caught up and idle before the pause
    _sigstop(worker)
    try:
        for _, records in runs:
            await send(producer, records[len(records) // 2 :])
        await asyncio.sleep(8.0)
    finally:
        _sigcont(worker)
    c = Collector(primed_group.kafka_bootstrap_servers)
    async with c:
        await c.until(lambda c: all(c.finished(run.run_id) for run, _ in runs), timeout=60)
        await asyncio.sleep(1.0)
        await c.until(lambda c: True)
    _one_number_one_event(c, runs)
    for run, _ in runs:
        assert c.stream(run.run_id) == _offline(run), run.run_id
    ended = [h for _, _, h in c.dlq if h.get("rw-run-id") in {run.run_id for run, _ in runs} and h.get("rw-dlq-code") == "run_ended"]
    assert ended == []


async def test_a_worker_thawed_after_its_partitions_moved_contradicts_nothing(spawn_worker: Any, producer: Any, primed_group: Any) -> None:
    """A holds runs and is SIGSTOPped past its session timeout; B takes its partitions and finishes
    the runs; A resumes. Nothing A publishes may contradict B (main: A's expiry tick published
    ``RUN_ERROR`` under numbers B had used — two different events, two terminal events)."""
    env = {"RW_INACTIVITY_TIMEOUT_S": "12", "RW_HEALTH_PORT": "0"}
    a = spawn_worker(env)
    a.wait_assigned()
    b = spawn_worker(env)
    b.wait_assigned()
    await asyncio.sleep(3.0)  # the group settles: each holds half the partitions
    runs = _runs("zombie", 12)
    for _, records in runs:
        await send(producer, records[: len(records) // 2])
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(run.run_id in c.events for run, _ in runs))
    await asyncio.sleep(1.0)
    _sigstop(a)
    frozen = time.monotonic()
    try:
        for _, records in runs:
            await send(producer, records[len(records) // 2 :])
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            await c.until(lambda c: all(c.finished(run.run_id) for run, _ in runs), timeout=90)  # B finished them all
        await asyncio.sleep(max(0.0, 25.0 - (time.monotonic() - frozen)))  # A stays frozen 25 s, past the 12 s timeout
    finally:
        _sigcont(a)
    await asyncio.sleep(8.0)  # A resumes: expiry ticks, fetches, its rejoin
    c = Collector(primed_group.kafka_bootstrap_servers)
    async with c:
        await c.until(lambda c: all(c.finished(run.run_id) for run, _ in runs), timeout=30)
        await asyncio.sleep(1.0)
        await c.until(lambda c: True)
    _one_number_one_event(c, runs)
    for run, _ in runs:
        assert c.stream(run.run_id) == _offline(run), run.run_id


def _raw(run: RunEnvelope, records: list[OutgoingRecord], partition: int, first_offset: int) -> list[RawRecord]:
    return [RawRecord(r.key, r.value, tuple(r.headers), partition, first_offset + i) for i, r in enumerate(records)]


async def _step_and_store(n: Normalizer, store: ArtefactStore, records: list[RawRecord]) -> list[Step]:
    """What the worker does with a poll, minus Kafka: route, restore what it does not hold, accept, write."""
    steps = []
    for record in records:
        item = n.route(record)
        assert isinstance(item, RunInput)
        if n.needs_restore(item):
            journal, ended = await store.load_journal(item.run)
            n.restore(item, journal, ended=ended)
        steps.append(n.accept(item, now=0.0))
    await store.apply(steps)
    return steps


async def test_a_stale_copy_cannot_end_a_run_its_new_partition_finished(redis: Redis) -> None:
    """The raw topic gained partitions and a run's producer moved to the new one: worker B (the new
    partition's owner) restores the run from its journal and finishes it; worker A still holds a
    copy. A's expiry of that copy is refused by the store's write script (nothing written, its
    ``RUN_ERROR`` never sent) — main wrote it and published a second terminal event over B's numbers."""
    from reasonwire.workers.io.store import RunsMoved  # inside: a worker tree without the fence (an older revision under test) has none to import

    [(run, records)] = _runs("moved", 1)
    await redis.delete(EPOCH_KEY)
    a_store, b_store = (ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60) for _ in range(2))
    await a_store.claim_epoch(lost=False)
    await b_store.claim_epoch(lost=False)
    a, b = Normalizer(translators=translator_for), Normalizer(translators=translator_for)
    a.token, b.token = "a", "b"
    half = len(records) // 2
    await _step_and_store(a, a_store, _raw(run, records[:half], 0, 100))
    b_steps = await _step_and_store(b, b_store, _raw(run, records[half:], 5, 0))  # the run's new partition
    assert b_steps[-1].run_ended or any(s.run_ended for s in b_steps)
    await b_store.close_runs(b_steps)
    [expiry] = a.expire(now=1e9, timeout_s=1)  # A's stale copy times out
    assert any(b'"RUN_ERROR"' in o.value for o in expiry.outbound)
    with pytest.raises(RunsMoved) as refused:
        await a_store.apply([expiry])
    assert refused.value.runs == [expiry.run]
    assert await redis.hget(journal_key(run.tenant, run.run_id), "-1") is None  # nothing of it written
    await redis.delete(journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id))


async def test_a_zombie_write_is_refused_and_a_redo_from_the_journal_agrees(redis: Redis) -> None:
    """Both workers hold the run; B writes first. A's write (the same records) is refused; A drops
    its copy, restores from the journal as B left it and derives the same outputs."""
    from reasonwire.workers.io.store import RunsMoved

    [(run, records)] = _runs("race", 1)
    await redis.delete(EPOCH_KEY)
    a_store, b_store = (ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60) for _ in range(2))
    await a_store.claim_epoch(lost=False)
    await b_store.claim_epoch(lost=False)
    a, b = Normalizer(translators=translator_for), Normalizer(translators=translator_for)
    a.token, b.token = "a", "b"
    first = _raw(run, records[:3], 0, 0)
    await _step_and_store(a, a_store, first)
    await _step_and_store(b, b_store, _raw(run, records[:3], 0, 0) + _raw(run, records[3:5], 0, 3))  # B redoes and goes on
    stale = [a.accept(item, now=0.0) for item in [a.route(r) for r in _raw(run, records[3:5], 0, 3)] if isinstance(item, RunInput)]
    with pytest.raises(RunsMoved):
        await a_store.apply(stale)
    a.forget_runs([stale[0].run])  # what the worker's rewind does
    redone = await _step_and_store(a, a_store, _raw(run, records[5:7], 0, 5))
    reference = Normalizer(translators=translator_for)
    ref_steps = [reference.accept(item, now=0.0) for item in (reference.route(r) for r in _raw(run, records[:7], 0, 0)) if isinstance(item, RunInput)]
    assert [o for s in redone for o in s.outbound] == [o for s in ref_steps[5:7] for o in s.outbound]
    await redis.delete(journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id))


async def _dump(redis: Redis, keys: list[str]) -> dict[str, bytes | None]:
    return {key: await redis.dump(key) for key in keys}


async def _restore(redis: Redis, saved: dict[str, bytes | None]) -> None:
    """Put the keys back as they were (a Redis restarted from an older AOF/RDB copy)."""
    for key, blob in saved.items():
        await redis.delete(key)
        if blob is not None:
            await redis.restore(key, 0, blob, replace=True)


async def test_a_store_restored_from_an_older_copy_is_detected_before_renumbering(
    primed_group: WorkerSettings, producer: Any, redis: Redis
) -> None:
    """A run goes on after a copy of the store is taken; the store is put back to the copy (same
    epoch id: main took it for intact) and a worker starts. Its later records must not be
    translated from the old journal (main: a ``sequence_gap`` ``RUN_ERROR`` on a number already
    published); the store's write count, below the one committed with the offsets, gives it away."""
    [(run, records)] = _runs("restored", 1)
    third = len(records) // 3
    settings = dataclasses.replace(primed_group, inactivity_timeout_s=120, health_port=0)
    keys = [EPOCH_KEY, journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id)]
    telemetry = setup_telemetry(install_global=False, env={})
    app, _ = create_app(settings, telemetry)
    try:
        await app.start()
        await send(producer, records[:third])
        async with Collector(settings.kafka_bootstrap_servers) as c:
            await c.until(lambda c: len(c.events.get(run.run_id, {})) >= 3, timeout=60)
            await asyncio.sleep(1.0)  # committed
        copy = await _dump(redis, keys)  # the backup
        await send(producer, records[third : 2 * third])
        deadline = time.monotonic() + 30
        while len(await redis.hkeys(journal_key(run.tenant, run.run_id))) < 2 * third and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.5)  # the polls commit, with the store's write count in their metadata
    finally:
        await app.stop()
    await _restore(redis, copy)  # Redis restarted from the older copy

    app, worker = create_app(settings, telemetry)
    try:
        await app.start()
        c, lost = await send_and_count_refusals(settings.kafka_bootstrap_servers, producer, run.run_id, records[2 * third :])
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    _one_number_one_event(c, [(run, records)])
    assert lost == len(records) - 2 * third  # refused, every later record accounted for
    assert worker.store.lost_ms is not None


async def test_the_write_count_is_checked_by_every_read_and_write(redis: Redis) -> None:
    """Store level: a write count below the witness makes the next read and write refuse
    (``StoreLost``); the recovery adopts a new epoch marked lost and raises the count."""
    await redis.delete(EPOCH_KEY)
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    old = await store.claim_epoch(lost=False)
    [(run, records)] = _runs("count", 1)
    n = Normalizer(translators=translator_for)
    await _step_and_store(n, store, _raw(run, records[:2], 0, 0))
    copy = await _dump(redis, [EPOCH_KEY])
    await _step_and_store(n, store, _raw(run, records[2:4], 0, 2))
    assert store.witness.count >= 2
    await _restore(redis, copy)
    key = n.route(_raw(run, records[:1], 0, 0)[0]).run  # type: ignore[union-attr]
    with pytest.raises(StoreLost):
        await store.load_journals([key])
    with pytest.raises(StoreLost):
        await store.apply([Step(run=key, journal_append=JournalEntry(9, b"{}"))])
    assert await store.recover_from_loss() != old and store.lost_ms is not None
    assert int(await redis.hget(EPOCH_KEY, "w") or 0) >= store.witness.count
    await store.load_journals([key])  # accepted again, inside the loss window
    await redis.delete(journal_key(run.tenant, run.run_id))



async def test_an_evicting_redis_is_refused_at_start_unless_said_dedicated(spawn_worker: Any, redis: Redis) -> None:
    """``maxmemory-policy volatile-lru`` (a managed-Redis default) evicts journals and artefacts,
    which all carry TTLs: the worker refuses to run — it waits not ready (``/readyz`` 503 naming
    the policy, one log line; an exit would crash-loop under a Deployment) and starts by itself
    once the policy is ``noeviction`` — unless the operator says the store is dedicated and
    sized (``RW_REDIS_DEDICATED=true``). Main started and took partitions at once."""
    before = (await redis.config_get("maxmemory-policy"))["maxmemory-policy"]
    await redis.config_set("maxmemory-policy", "volatile-lru")
    health = free_port()
    try:
        dedicated = spawn_worker({"RW_HEALTH_PORT": "0", "RW_REDIS_DEDICATED": "true"})
        dedicated.wait_assigned()
        dedicated.stop()
        refused = spawn_worker({"RW_HEALTH_PORT": str(health)})
        body = await _readyz_until(health, lambda b: "store_refused" in b)
        assert "maxmemory-policy is volatile-lru" in body["store_refused"] and body["ready"] is False
        await asyncio.sleep(2)
        assert refused.proc.poll() is None, refused.log.read_text(errors="replace")[-2000:]
        text = refused.log.read_text(errors="replace")
        assert "assigned to partitions" not in text and "Traceback" not in text
        assert len([line for line in text.splitlines() if "maxmemory-policy" in line]) == 1
        await redis.config_set("maxmemory-policy", "noeviction")
        refused.wait_assigned(timeout=60)
    finally:
        await redis.config_set("maxmemory-policy", before)


async def _readyz_until(port: int, done: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                body = (await client.get(f"http://127.0.0.1:{port}/readyz", timeout=2)).json()
                if done(body):
                    return body
            await asyncio.sleep(0.3)
    raise AssertionError(f"/readyz never said so: {body}")


async def test_a_redis_out_of_memory_repeats_a_polls_outputs_a_bounded_number_of_times(
    primed_group: WorkerSettings, producer: Any, redis: Redis
) -> None:
    """While Redis refuses writes (``maxmemory`` reached, ``noeviction``), main stepped every
    retried poll again and sent its continuing runs' outputs each time (1,632 copies in the
    issue's run). Now a poll is stepped only once an empty write goes through: a few copies."""
    [(run, records)] = _runs("oom", 1)
    settings = dataclasses.replace(primed_group, inactivity_timeout_s=120, health_port=0, backoff_initial_s=0.05, backoff_max_s=0.3)
    telemetry = setup_telemetry(install_global=False, env={})
    app, _ = create_app(settings, telemetry)
    before = (await redis.config_get("maxmemory"))["maxmemory"]
    try:
        await app.start()
        await send(producer, records[:5])
        async with Collector(settings.kafka_bootstrap_servers) as c:
            await c.until(lambda c: len(c.events.get(run.run_id, {})) >= 4, timeout=60)  # records 0-4 give 5 events
            await asyncio.sleep(1.0)  # committed
        await redis.config_set("maxmemory", 1)  # every write refused: OOM
        try:
            await send(producer, records[5:-2])
            await asyncio.sleep(8.0)  # some 25 retries at 0.3 s
        finally:
            await redis.config_set("maxmemory", before)
        await send(producer, records[-2:])
        c = Collector(settings.kafka_bootstrap_servers)
        async with c:
            await c.until(lambda c: c.finished(run.run_id), timeout=60)
            await asyncio.sleep(1.0)
            await c.until(lambda c: True)
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    _one_number_one_event(c, [(run, records)])
    assert c.stream(run.run_id) == _offline(run)
    copies = max(len(v) for v in c.events[run.run_id].values())
    assert copies <= 3, f"an output was published {copies} times during the outage"


async def test_a_running_worker_judges_the_store_by_the_groups_commits_when_it_takes_partitions_over(
    primed_group: WorkerSettings, producer: Any, redis: Redis
) -> None:
    """Worker B runs idle; worker A owns a run's partition, writes and commits the store's write
    count. The store is put back to a copy taken after B's last write but before A's last ones;
    A leaves and B takes its partitions over. B read the group's counts only at its start-up and
    its own writes saw less than the copy holds: before, it took the store for intact and went
    on from the old journal (renumbering). Now it reads the group's counts when partitions are
    assigned, and refuses the run (``store_lost``)."""
    settings = dataclasses.replace(primed_group, inactivity_timeout_s=120, health_port=0)
    telemetry = setup_telemetry(install_global=False, env={})
    app_b, worker_b = create_app(settings, telemetry)
    app_a, worker_a = create_app(settings, telemetry)
    a_running = False
    try:
        await app_b.start()
        await _assigned(worker_b)
        await app_a.start()
        a_running = True
        await _assigned(worker_a)
        await _until_split(worker_a, worker_b)
        owned = sorted(tp.partition for tp in worker_a.consumer.assignment())  # type: ignore[union-attr]
        run, records = _run_on(owned, await producer.partitions_for("reasoning.raw.v1"))
        third = len(records) // 3
        keys = [EPOCH_KEY, journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id)]
        await send(producer, records[:third])
        async with Collector(settings.kafka_bootstrap_servers) as c:
            await c.until(lambda c: len(c.events.get(run.run_id, {})) >= 3, timeout=60)
            await asyncio.sleep(1.0)  # committed
        copy = await _dump(redis, keys)  # the backup
        assert worker_b.store.witness.count < int(await redis.hget(EPOCH_KEY, "w") or 0), "B saw every write: nothing to test"
        await send(producer, records[third : 2 * third])
        deadline = time.monotonic() + 30
        while len(await redis.hkeys(journal_key(run.tenant, run.run_id))) < 2 * third and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.5)  # A's polls commit, with the store's write count in their metadata
        await _restore(redis, copy)  # the store goes back to the copy
        await app_a.stop()  # B takes A's partitions over
        a_running = False
        await _until_owned(worker_b, owned)
        c, lost = await send_and_count_refusals(settings.kafka_bootstrap_servers, producer, run.run_id, records[2 * third :])
    finally:
        if a_running:
            await app_a.stop()
        await app_b.stop()
        telemetry.log_guard.uninstall()
    _one_number_one_event(c, [(run, records)])
    assert lost == len(records) - 2 * third  # refused, every later record accounted for


async def _assigned(worker: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (worker.consumer is None or not worker.consumer.assignment()) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert worker.consumer is not None and worker.consumer.assignment(), "no partitions assigned"


async def _until_split(a: Any, b: Any, timeout: float = 60) -> None:
    """Until the group's rebalance gave each worker some partitions."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if a.consumer.assignment() and b.consumer.assignment() and not (a.consumer.assignment() & b.consumer.assignment()):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the two workers never split the partitions")


async def _until_owned(worker: Any, partitions: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not set(partitions) <= {tp.partition for tp in worker.consumer.assignment()} and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert {tp.partition for tp in worker.consumer.assignment()} >= set(partitions), "the partitions never moved"


def _run_on(partitions: list[int], every: set[int]) -> tuple[RunEnvelope, list[OutgoingRecord]]:
    """A run whose records land on one of ``partitions`` (Kafka's default partitioner)."""
    from reasonwire.workers.io.partitions import partition_of

    while True:
        [(run, records)] = _runs("takeover", 1)
        if partition_of(run.run_id.encode(), sorted(every)) in partitions:
            return run, records
