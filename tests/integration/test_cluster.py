"""reasonwire on real clusters (issue 16): a Redis Cluster of 3 masters + 3 replicas and a
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
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError

from reasonwire.contracts import topic_plan, topics
from reasonwire.contracts.store import journal_key, thread_index_key
from tests.integration.conftest import ROOT, WorkerProcess
from tests.integration.test_normalizer_worker import FIXTURES, _assert_nothing_lost, _half_then_rest, _offline, _run
from reasonwire.workers.core.normalizer import JournalEntry, RunKey, Step
from reasonwire.workers.redis_connect import connect
from reasonwire.workers.redis_slots import SlotWriter, slot_of
from reasonwire.workers.settings import WorkerSettings
from reasonwire.workers.store import ArtefactStore
from reasonwire.workers.topics_admin import apply

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
