"""reasonwire on real clusters: a Redis Cluster of 3 masters + 3 replicas and a
3-broker KRaft Kafka cluster (RF 3, min.insync.replicas 2), both started by
``deploy/cluster.sh`` (``make test-cluster`` starts them, runs this file and stops them).

Skipped unless ``RW_TEST_REDIS_CLUSTER`` (a ``redis-cluster://`` URL) / ``RW_TEST_KAFKA_CLUSTER``
(the brokers' bootstrap list) name running clusters; ``make test`` includes them when set.

* The hidden-slot check: every transaction the store sends touches one hash slot — the
  cluster itself refuses one that does not (``CROSSSLOT``), and the test shows it does.
* A Redis master killed (SIGKILL) mid-stream, its replica promoted: no artefact of a run
  whose terminal event was published is missing (the store ``WAIT``s for a replica before
  a run's terminal event; the worker's log says how often a ``WAIT`` timed out).
* A Kafka broker killed (SIGKILL) mid-stream: producers use ``acks=all`` and idempotence,
  topics RF 3 / min.insync 2; every run's event stream is complete and equal to the offline
  translation, and the worker carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError

from reasonwire.contracts import topic_plan, topics
from reasonwire.contracts.store import ended_key, journal_key, thread_index_key
from tests.integration.conftest import ROOT, WorkerProcess, fresh_store_epoch
from tests.integration.test_normalizer_worker import FIXTURES, _assert_nothing_lost, _half_then_rest, _offline, _run
from reasonwire.workers.core.normalizer import JournalEntry, Normalizer, RunInput, RunKey, Step
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.io.redis_slots import SlotWriter, slot_of
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.store import EPOCH_KEY, ArtefactStore
from reasonwire.workers.io.topics_admin import apply

REDIS_CLUSTER = os.environ.get("RW_TEST_REDIS_CLUSTER")
KAFKA_CLUSTER = os.environ.get("RW_TEST_KAFKA_CLUSTER")
CLUSTER_SH = ROOT / "deploy" / "cluster.sh"

needs_redis_cluster = pytest.mark.skipif(not REDIS_CLUSTER, reason="no Redis Cluster: set RW_TEST_REDIS_CLUSTER (make test-cluster does)")
needs_kafka_cluster = pytest.mark.skipif(not KAFKA_CLUSTER, reason="no Kafka cluster: set RW_TEST_KAFKA_CLUSTER (make test-cluster does)")
pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def _cluster() -> AsyncIterator[Any]:
    client = connect(REDIS_CLUSTER or "")
    # redis-py 8.1: a transaction pipeline that is a RedisCluster's first command leaves a
    # connection on a loop of its own, and aclose() then fails with "Event loop is closed"
    await client.initialize()
    try:
        yield client
    finally:
        await client.aclose()


def _record(thread: str, run: str, position: int) -> Any:
    from tests.integration.test_store import _record as record

    return record(thread, position, f"opaque/{thread}/{position}==").model_copy(update={"run_id": run})


# -- the hidden-slot check ---------------------------------------------------------------------


@needs_redis_cluster
async def test_the_cluster_refuses_a_transaction_across_two_slots() -> None:
    """The check has teeth: a MULTI over two threads' keys is refused, by redis-py and by Redis
    itself (the store's own per-slot transactions go to the master directly)."""
    a, b = thread_index_key("acme", "thread-a"), thread_index_key("acme", "thread-zz")
    assert slot_of(a) != slot_of(b)
    async with _cluster() as cluster:
        pipe = cluster.pipeline(transaction=True)
        pipe.rpush(a, "x")
        pipe.rpush(b, "y")
        with pytest.raises((RedisClusterException, ResponseError)):
            await pipe.execute()
        await cluster.initialize()
        node = cluster.get_node_from_key(a)
        writer = SlotWriter(cluster)
        with pytest.raises(ResponseError, match="same slot"):  # two slots in one of our MULTIs, same master
            other = next(k for k in (thread_index_key("acme", f"t{i}") for i in range(500)) if slot_of(k) != slot_of(a) and cluster.get_node_from_key(k) == node)
            client = writer._client(node.name)  # noqa: SLF001 - the raw connection the store uses
            p = client.pipeline(transaction=False)
            p.execute_command("MULTI")
            p.rpush(a, "x")
            p.rpush(other, "y")
            p.execute_command("EXEC")
            await p.execute()
        await writer.aclose()


@needs_redis_cluster
async def test_a_poll_over_many_threads_and_runs_stays_within_one_slot_per_transaction() -> None:
    """The store's every write path on a real cluster — apply, close_runs, load, replay read,
    erase — with one poll touching 60 threads and 60 run journals (most in different slots):
    one cross-slot transaction or multi-key command anywhere would raise here."""
    async with _cluster() as cluster:
        store = ArtefactStore(cluster, artefact_ttl_s=120, journal_ttl_s=120)
        tag = uuid.uuid4().hex[:6]
        steps = []
        for i in range(60):
            thread, run = f"th-{tag}-{i}", f"run-{tag}-{i}"
            steps.append(Step(run=RunKey("acme", run), thread_id=thread, artefacts=[_record(thread, run, 0), _record(thread, run, 2)], journal_append=JournalEntry(0, b"{}")))
        slots = {slot_of(thread_index_key("acme", s.thread_id)) for s in steps} | {slot_of(journal_key("acme", s.run.run_id)) for s in steps}
        assert len(slots) > 100
        assert await store.apply(steps) == 120
        loaded = await store.load_journals([s.run for s in steps])
        assert all(journal == [JournalEntry(0, b"{}")] and not ended for journal, ended in loaded)
        ended = [Step(run=s.run, thread_id=s.thread_id, run_ended=True) for s in steps]
        assert store.slot_writer is not None
        waits = store.slot_writer.stats.waits
        await store.apply(ended)  # a poll that ends runs, writing nothing: the store WAITs for a replica
        assert store.slot_writer.stats.waits > waits
        await store.close_runs(ended)
        assert all(ended for _, ended in await store.load_journals([s.run for s in steps]))
        for s in steps[:5]:
            assert [a.native.position for a in await store.thread_artefacts("acme", s.thread_id)] == [0, 2]
            removed = await store.erase_thread("acme", s.thread_id)
            assert sorted(removed["artefacts"]) == ["resp:reasoning:0#0", "resp:reasoning:0#2"]
            assert await store.thread_artefacts("acme", s.thread_id) == []
        assert store.slot_writer is not None and store.slot_writer.stats.waits >= 1


# -- failover ----------------------------------------------------------------------------------


def _with(settings: WorkerSettings, **changes: Any) -> WorkerSettings:
    """A copy with ``changes`` (a pydantic settings model, or the older dataclass)."""
    if hasattr(settings, "model_copy"):
        return settings.model_copy(update=changes)
    import dataclasses

    return dataclasses.replace(settings, **changes)


def _cluster_sh(*args: str) -> str:
    # the clusters' state dir (RW_TEST_CLUSTER_STATE), not the single services' RW_STATE
    env = {**os.environ, "RW_STATE": os.environ.get("RW_TEST_CLUSTER_STATE") or os.environ.get("RW_STATE", "/tmp/reasonwire-services")}
    out = subprocess.run(["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture
def cluster_worker(tmp_path: Path, primed_group: WorkerSettings) -> Iterator[Any]:
    workers: list[WorkerProcess] = []

    def spawn(settings: WorkerSettings, extra: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(settings, tmp_path / f"cluster-worker-{len(workers)}.log", {"RW_CREATE_TOPICS": "true", **(extra or {})})
        workers.append(worker)
        return worker

    yield spawn
    for worker in workers:
        worker.stop()


@needs_redis_cluster
async def test_redis_master_killed_mid_stream_loses_no_acknowledged_artefact(cluster_worker: Any, primed_group: WorkerSettings, producer: AIOKafkaProducer) -> None:
    settings = _with(primed_group, redis_url=REDIS_CLUSTER)
    worker = cluster_worker(settings)
    worker.wait_assigned()
    runs = [(path, *_run(path, "redis-failover")) for path in FIXTURES for _ in range(2)]
    client = connect(REDIS_CLUSTER or "")
    await client.initialize()
    # the master holding the first run's thread: the one whose loss would hurt
    victim = client.get_node_from_key(thread_index_key("acme", runs[0][1].thread_id))
    await client.aclose()

    async def kill_master() -> None:
        _cluster_sh("kill-redis", str(victim.port))
        await asyncio.sleep(0.5)

    try:
        c = await _half_then_rest(producer, runs, kill_master, settings.kafka_bootstrap_servers)
    finally:
        _cluster_sh("up", "--redis-cluster")  # the killed node comes back (as a replica)
    _assert_nothing_lost(c, runs)
    store = ArtefactStore(connect(REDIS_CLUSTER or ""), artefact_ttl_s=60, journal_ttl_s=60)
    try:
        for path, run, _ in runs:
            stored = await store.thread_artefacts("acme", run.thread_id)
            assert [a.value for a in stored] == [a.value for a in _offline(path, run).artefacts], path.name
    finally:
        await store.redis.aclose()
    log = worker.log.read_text(errors="replace")
    unreplicated = log.count("replicas acknowledged within")
    print(f"redis failover: {len(runs)} runs, WAIT timeouts logged: {unreplicated}")


@pytest.fixture
def kafka_cluster_settings(primed_group: WorkerSettings) -> WorkerSettings:
    """The test group on the Kafka cluster, topics as planned (RF 3), starting at the raw topic's end."""
    settings = _with(primed_group, kafka_bootstrap_servers=KAFKA_CLUSTER, group_id=f"rw-cluster-{uuid.uuid4().hex[:8]}")

    async def prime() -> None:
        specs = [s for s in topic_plan.plan(settings.partitions, 3) if s.name in topics.ALL]
        await apply(settings.kafka_bootstrap_servers, specs, create=True)
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=settings.group_id, enable_auto_commit=False)
        await consumer.start()
        try:
            parts = [TopicPartition(topics.RAW, p) for p in range(settings.partitions)]
            consumer.assign(parts)
            await consumer.seek_to_end(*parts)
            await consumer.commit({tp: await consumer.position(tp) for tp in parts})
        finally:
            await consumer.stop()

    asyncio.run(prime())
    return settings


@needs_kafka_cluster
async def test_kafka_broker_killed_mid_stream_loses_nothing(cluster_worker: Any, kafka_cluster_settings: WorkerSettings) -> None:
    settings = kafka_cluster_settings
    worker = cluster_worker(settings, {"RW_REPLICATION_FACTOR": "3"})
    worker.wait_assigned(timeout=90)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all", enable_idempotence=True)
    await producer.start()
    runs = [(path, *_run(path, "broker-kill")) for path in FIXTURES for _ in range(2)]
    started = time.monotonic()

    async def kill_broker() -> None:
        _cluster_sh("kill-kafka", "2")

    try:
        c = await _half_then_rest(producer, runs, kill_broker, settings.kafka_bootstrap_servers)
    finally:
        await producer.stop()
        _cluster_sh("start-kafka", "2")
    _assert_nothing_lost(c, runs)
    assert worker.proc.poll() is None  # carried on
    print(f"kafka broker kill: {len(runs)} runs complete in {time.monotonic() - started:.1f}s")


# -- on a cluster: the fence and the per-shard rollback witness ------------------------


def _store(cluster: Any) -> ArtefactStore:
    return ArtefactStore(cluster, artefact_ttl_s=60, journal_ttl_s=60)


async def _closed(*stores: ArtefactStore) -> None:
    """The stores' own per-master connections (the cluster client is closed by ``_cluster``)."""
    for store in stores:
        if store.slot_writer is not None:
            await store.slot_writer.aclose()


def _run_on(cluster: Any, tag: str, *, away_from: str) -> tuple[Any, list[Any]]:
    """A run (fixture records) whose journal lives on another master than the key ``away_from``
    (the epoch hash): a shard going back there is invisible to the epoch's own count."""
    from tests.integration.test_fence import _runs

    avoid = cluster.get_node_from_key(away_from).name
    while True:
        [(run, records)] = _runs(tag, 1)
        if cluster.get_node_from_key(journal_key(run.tenant, run.run_id)).name != avoid:
            return run, records


@needs_redis_cluster
async def test_on_a_cluster_a_stale_copy_cannot_end_a_run_another_worker_finished() -> None:
    """The fence on a Redis Cluster: worker B restores a run from its journal and finishes it; A's
    stale copy expires it. A's write is refused with ``RunsMoved`` by the per-slot fence script
    (the run's journal and ended marker share a slot) — nothing of it written, its ``RUN_ERROR``
    never sent. Main wrote it on a cluster (the fence was checked on one server only)."""
    from reasonwire.workers.io.store import RunsMoved
    from tests.integration.test_fence import _raw, _runs, _step_and_store

    async with _cluster() as cluster:
        [(run, records)] = _runs("moved-cluster", 1)
        a_store, b_store = _store(cluster), _store(cluster)
        await a_store.claim_epoch(lost=False)
        await b_store.claim_epoch(lost=False)
        a, b = Normalizer(), Normalizer()
        a.token, b.token = "a", "b"
        half = len(records) // 2
        try:
            await _step_and_store(a, a_store, _raw(run, records[:half], 0, 100))
            b_steps = await _step_and_store(b, b_store, _raw(run, records[half:], 5, 0))  # the run's new partition
            assert any(s.run_ended for s in b_steps)
            await b_store.close_runs(b_steps)
            [expiry] = a.expire(now=1e9, timeout_s=1)  # A's stale copy times out
            assert any(b'"RUN_ERROR"' in o.value for o in expiry.outbound)
            with pytest.raises(RunsMoved) as refused:
                await a_store.apply([expiry])
            assert refused.value.runs == [expiry.run]
            assert await cluster.hget(journal_key(run.tenant, run.run_id), "-1") is None  # nothing of it written
        finally:
            await cluster.delete(journal_key(run.tenant, run.run_id))
            await cluster.delete(ended_key(run.tenant, run.run_id))
            await _closed(a_store, b_store)


@needs_redis_cluster
async def test_on_a_cluster_a_zombie_write_is_refused_and_a_redo_from_the_journal_agrees() -> None:
    """Both workers hold the run; B writes first. A's write (the next records, from its stale copy)
    is refused on the cluster; A drops its copy, restores from the journal as B left it and derives
    the same outputs as an undisturbed run — beside a run of another slot whose write in the same
    poll went through (a refused slot does not make the other slots' writes wrong)."""
    from reasonwire.workers.io.store import RunsMoved
    from tests.integration.test_fence import _raw, _runs, _step_and_store

    async with _cluster() as cluster:
        (run, records), (other, other_records) = _runs("race-cluster", 2)
        a_store, b_store = _store(cluster), _store(cluster)
        await a_store.claim_epoch(lost=False)
        await b_store.claim_epoch(lost=False)
        a, b = Normalizer(), Normalizer()
        a.token, b.token = "a", "b"
        try:
            await _step_and_store(a, a_store, _raw(run, records[:3], 0, 0))
            await _step_and_store(b, b_store, _raw(run, records[:5], 0, 0))  # B redoes and goes on
            items = [a.route(r) for r in _raw(run, records[3:5], 0, 3) + _raw(other, other_records[:2], 1, 0)]
            stale = [a.accept(i, now=0.0) for i in items if isinstance(i, RunInput)]
            with pytest.raises(RunsMoved) as refused:
                await a_store.apply(stale)
            assert refused.value.runs == [stale[0].run]
            assert sorted(int(f) for f in await cluster.hkeys(journal_key(other.tenant, other.run_id))) == [-3, 0, 1]
            a.forget_runs([stale[0].run])  # what the worker's rewind does
            redone = await _step_and_store(a, a_store, _raw(run, records[5:7], 0, 5))
            reference = Normalizer()
            ref_steps = [reference.accept(i, now=0.0) for i in (reference.route(r) for r in _raw(run, records[:7], 0, 0)) if isinstance(i, RunInput)]
            assert [o for s in redone for o in s.outbound] == [o for s in ref_steps[5:7] for o in s.outbound]
        finally:
            for r in (run, other):
                await cluster.delete(journal_key(r.tenant, r.run_id))
                await cluster.delete(ended_key(r.tenant, r.run_id))
            await _closed(a_store, b_store)


def _redis_pid(port: int) -> int:
    state = os.environ.get("RW_TEST_CLUSTER_STATE") or os.environ.get("RW_STATE", "/tmp/reasonwire-services")
    return int((Path(state) / "redis-cluster" / str(port) / "redis.pid").read_text().split()[0])


async def _until(check: Any, timeout: float = 30.0) -> Any:
    """Retry ``check`` (async, returning a truthy value) until it does, through a failover's errors."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = await check()
            if value:
                return value
        except (RedisClusterException, ResponseError, ConnectionError, OSError, redis_errors.ConnectionError, redis_errors.TimeoutError):
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.3)


@needs_redis_cluster
async def test_a_replica_promoted_without_the_last_writes_is_detected_before_a_run_resumes() -> None:
    """The realistic rollback of one shard: its replica is cut off (link dropped, process stopped),
    the master acknowledges more of a run's journal, dies (SIGKILL), and the replica is promoted
    without those writes. The epoch hash lives on another shard and is intact; the store's count
    of its own writes on that master is what gives it away: the next journal read and write raise
    ``StoreLost``, and the recovery replaces the epoch with one marked lost, so the run is not
    resumed from the journal that went back (main read it as intact)."""
    from reasonwire.workers.io.store import StoreLost
    from tests.integration.test_fence import _raw, _step_and_store

    async with _cluster() as cluster:
        await fresh_store_epoch(REDIS_CLUSTER or "")
        store = _store(cluster)
        old = await store.claim_epoch(lost=False)
        run, records = _run_on(cluster, "promoted", away_from=EPOCH_KEY)
        victim = cluster.get_node_from_key(journal_key(run.tenant, run.run_id))
        master = Redis(host=victim.host, port=victim.port)
        replica_host, replica_port = await _until(lambda: _online_replica(master), timeout=60)  # a node killed by an earlier test may still be joining
        n = Normalizer()
        try:
            await _step_and_store(n, store, _raw(run, records[:4], 0, 0))
            await asyncio.sleep(0.5)  # the replica has those
            replica_pid = _redis_pid(replica_port)
            os.kill(replica_pid, signal.SIGSTOP)
            try:
                await master.execute_command("CLIENT", "KILL", "TYPE", "replica")  # the link drops
                await _step_and_store(n, store, _raw(run, records[4:8], 0, 4))  # acknowledged by the master alone
                assert _entries(await master.hkeys(journal_key(run.tenant, run.run_id))) == set(range(8))
                _cluster_sh("kill-redis", str(victim.port))
            finally:
                os.kill(replica_pid, signal.SIGCONT)
            promoted = Redis(host=replica_host, port=replica_port)
            await _until(lambda: _is_master(promoted), timeout=40)
            journal_now = await _until(lambda: promoted.hkeys(journal_key(run.tenant, run.run_id)))
            assert _entries(journal_now) == set(range(4))  # the shard went back
            await _until(lambda: _read_answers(store, run), timeout=40)
            with pytest.raises(StoreLost):
                await store.load_journals([n.route(_raw(run, records[8:9], 0, 8)[0]).run])  # type: ignore[union-attr]
            with pytest.raises(StoreLost):
                await store.apply([Step(run=RunKey(run.tenant, run.run_id), journal_append=JournalEntry(8, b"{}"))])
            assert await store.recover_from_loss() != old and store.lost_ms is not None and store.loss_window()
            journal, ended = await store.load_journal(RunKey(run.tenant, run.run_id))
            assert not store.journal_intact(journal, ended, 8)  # the run is refused (store_lost), not renumbered
            await promoted.aclose()
        finally:
            await master.aclose()
            _cluster_sh("up", "--redis-cluster")  # the killed node comes back (as a replica)
            await _until(lambda: _deleted(cluster, journal_key(run.tenant, run.run_id)), timeout=40)
            await _closed(store)
            await fresh_store_epoch(REDIS_CLUSTER or "")


async def _online_replica(master: Redis) -> tuple[str, int] | None:
    """The master's replica once it is attached and synced (``INFO replication``: ``state=online``)."""
    info = await master.info("replication")
    replica = info.get("slave0")
    if isinstance(replica, dict) and replica.get("state") == "online":
        return str(replica["ip"]), int(replica["port"])
    return None


def _entries(fields: list[bytes]) -> set[int]:
    """A journal's record entries (negative fields are bookkeeping: the head, an expiry)."""
    return {int(f) for f in fields if int(f) >= 0}


async def _is_master(client: Redis) -> bool:
    return (await client.execute_command("ROLE"))[0] == b"master"


async def _read_answers(store: ArtefactStore, run: Any) -> bool:
    """True once a journal read gets past the failover's connection errors to the store's verdict
    (the journal, or ``StoreLost``: the assertions after this say which)."""
    from reasonwire.workers.io.store import StoreLost

    with contextlib.suppress(StoreLost):
        await store.load_journal(RunKey(run.tenant, run.run_id))
    return True


async def _deleted(cluster: Any, *keys: str) -> bool:
    for key in keys:
        await cluster.delete(key)
    return True


async def _snapshot(shard: Redis) -> dict[bytes, tuple[bytes, int]]:
    """Every key on one master, as ``DUMP`` and its TTL: the shard's backup (an RDB/AOF copy)."""
    out = {}
    async for key in shard.scan_iter(count=1000):
        blob, ttl = await shard.dump(key), await shard.pttl(key)
        if blob is not None and ttl != -2:
            out[key] = (blob, max(ttl, 0))
    return out


async def _put_back(shard: Redis, copy: dict[bytes, tuple[bytes, int]]) -> None:
    """The master restarted from the older copy: keys made since are gone, the rest as they were."""
    async for key in shard.scan_iter(count=1000):
        if key not in copy:
            await shard.delete(key)
    for key, (blob, ttl) in copy.items():
        await shard.restore(key, ttl, blob, replace=True)


@needs_redis_cluster
async def test_a_shard_restored_from_an_older_copy_is_detected_at_start_up_and_its_runs_refused(
    primed_group: WorkerSettings, producer: AIOKafkaProducer
) -> None:
    """A worker on a Redis Cluster; a run goes on after a copy of ONE shard (the master holding the
    run's journal, not the epoch hash) is taken; that shard is put back to the copy and a worker
    starts. The counts committed with the offsets (the first worker's writes per master) are above
    the shard's counter: the new worker replaces the epoch (marked lost) and refuses the run's later
    records ``store_lost`` instead of translating them from the old journal — main took the store
    for intact and ended the run ``sequence_gap`` on a number already published."""
    from reasonwire.workers.services.normalizer_app import create_app
    from reasonwire.workers.ops.telemetry import setup_telemetry
    from tests.integration.conftest import Collector, send, send_and_count_refusals
    from tests.integration.test_fence import _one_number_one_event

    await fresh_store_epoch(REDIS_CLUSTER or "")
    settings = _with(primed_group, redis_url=REDIS_CLUSTER, inactivity_timeout_s=120, health_port=0)
    async with _cluster() as cluster:
        run, records = _run_on(cluster, "restored-shard", away_from=EPOCH_KEY)
        node = cluster.get_node_from_key(journal_key(run.tenant, run.run_id))
    shard = Redis(host=node.host, port=node.port)
    third = len(records) // 3
    telemetry = setup_telemetry(install_global=False, env={})
    app, _ = create_app(settings, telemetry)
    try:
        await app.start()
        await send(producer, records[:third])
        async with Collector(settings.kafka_bootstrap_servers) as c:
            await c.until(lambda c: len(c.events.get(run.run_id, {})) >= 3, timeout=60)
            await asyncio.sleep(1.0)  # committed
        copy = await _snapshot(shard)  # the shard's backup
        await send(producer, records[third : 2 * third])
        deadline = time.monotonic() + 30
        while len(_entries(await shard.hkeys(journal_key(run.tenant, run.run_id)))) < 2 * third and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.5)  # the polls commit, with the per-master counts in their metadata
    finally:
        await app.stop()
    await _put_back(shard, copy)  # that master restarted from the older copy
    assert len(_entries(await shard.hkeys(journal_key(run.tenant, run.run_id)))) < 2 * third

    app, worker = create_app(settings, telemetry)
    try:
        await app.start()
        c, lost = await send_and_count_refusals(settings.kafka_bootstrap_servers, producer, run.run_id, records[2 * third :])
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
        await shard.aclose()
        await fresh_store_epoch(REDIS_CLUSTER or "")
    _one_number_one_event(c, [(run, records)])
    assert lost == len(records) - 2 * third  # refused, every later record accounted for
    assert worker.store.lost_ms is not None
