"""Real services for integration tests: a real Kafka broker and a real Redis server.

Where they come from is :func:`tests.integration.service_choice.choose`: the servers
``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL`` name (``make test`` exports a private pair it
started with ``deploy/with-services.sh``), containers started with testcontainers where a
Docker engine answers, or ``deploy/services.sh`` on spare ports where none does. No mocks:
every test here talks to a real broker and a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis

from reasonwire.contracts import topics
from tests.integration.service_choice import ServiceChoiceError, choose, docker_answers
from reasonwire.workers.services.ingress.records import OutgoingRecord
from reasonwire.workers.services.startup import ensure_topics
from reasonwire.workers.services.replay_worker import ensure_replay_topics
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.store import EPOCH_KEY, ArtefactStore

ROOT = Path(__file__).resolve().parents[2]
# Topics are created by a worker only with RW_CREATE_TOPICS=true: the tests' own
# broker is theirs to provision, as `make test` and `make run` do.
os.environ.setdefault("RW_CREATE_TOPICS", "true")
PARTITIONS = 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


SERVICE_ENV = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")


@pytest.fixture(scope="session")
def services() -> Iterator[dict[str, str]]:
    """``KAFKA_BOOTSTRAP_SERVERS`` and ``REDIS_URL`` of the session's services (see the module doc)."""
    given = {k: os.environ[k] for k in SERVICE_ENV if os.environ.get(k)}
    try:
        path = choose(os.environ, docker_answers)
    except ServiceChoiceError as exc:
        pytest.exit(str(exc), returncode=2)
    if path == "given":
        yield given
    elif path == "testcontainers":
        yield from _containers(given)
    else:
        yield from _local_services(given)


def _containers(given: dict[str, str]) -> Iterator[dict[str, str]]:
    """Kafka (KRaft) and Redis containers for what the caller did not name; removed afterwards."""
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.redis import RedisContainer

    env = dict(given)
    started: list[Any] = []
    try:
        if "KAFKA_BOOTSTRAP_SERVERS" not in env:
            kafka = KafkaContainer().with_kraft().with_env("KAFKA_NUM_PARTITIONS", str(PARTITIONS))
            started.append(kafka.start())
            env["KAFKA_BOOTSTRAP_SERVERS"] = kafka.get_bootstrap_server()
        if "REDIS_URL" not in env:
            redis_container = RedisContainer()
            started.append(redis_container.start())
            env["REDIS_URL"] = f"redis://{redis_container.get_container_host_ip()}:{redis_container.get_exposed_port(6379)}/0"
        yield env
    finally:
        for container in reversed(started):
            container.stop()


def _local_services(given: dict[str, str]) -> Iterator[dict[str, str]]:
    """``deploy/services.sh`` for what the caller did not name. Without ``RW_STATE`` a private
    state dir and spare ports, stopped and removed afterwards; with it, the caller's (left running)."""
    script = ["bash", str(ROOT / "deploy" / "services.sh")]
    env = {**os.environ}
    private = None if env.get("RW_STATE") else tempfile.mkdtemp(prefix="reasonwire-tests.")
    if private is not None:
        env["RW_STATE"] = private
        spare = subprocess.run([*script, "spare-ports"], capture_output=True, text=True, check=True).stdout
        for line in spare.splitlines():
            name, _, port = line.partition("=")
            env.setdefault(name, port)
    out = subprocess.run([*script, "up"], capture_output=True, text=True, env=env)
    try:
        if out.returncode != 0:
            pytest.exit(f"deploy/services.sh up failed: {out.stderr.strip().splitlines()[-1:]}", returncode=3)
        found = dict(line.partition("=")[::2] for line in out.stdout.splitlines())
        yield {**found, **given}
    finally:
        if private is not None:
            subprocess.run([*script, "down"], capture_output=True, env=env)
            shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(services: dict[str, str]) -> WorkerSettings:
    return WorkerSettings(
        kafka_bootstrap_servers=services["KAFKA_BOOTSTRAP_SERVERS"],
        redis_url=services["REDIS_URL"],
        group_id=f"rw-test-{uuid.uuid4().hex[:8]}",
        partitions=PARTITIONS,
        inactivity_timeout_s=30,
        health_port=0,  # in-process workers: no probe server (tests that want one set a spare port)
    )


@pytest.fixture(scope="session")
def primed_group(settings: WorkerSettings) -> WorkerSettings:
    """Create the topics (every topic of the plan: the broker creates none by itself)
    and start the test group at the raw topic's current end, so a broker reused across
    sessions does not replay earlier sessions' records."""

    async def prime() -> None:
        partitions = await ensure_topics(settings)
        await ensure_replay_topics(settings)
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=settings.group_id, enable_auto_commit=False)
        await consumer.start()
        try:
            parts = [TopicPartition(topics.RAW, p) for p in range(partitions[topics.RAW])]
            consumer.assign(parts)
            await consumer.seek_to_end(*parts)
            await consumer.commit({tp: await consumer.position(tp) for tp in parts})
        finally:
            await consumer.stop()

    asyncio.run(prime())
    asyncio.run(fresh_store_epoch(settings.redis_url))
    return settings


async def fresh_store_epoch(redis_url: str) -> None:
    """A new, not-lost store epoch on the test Redis. Priming commits the group's offsets, and
    a worker that then finds no epoch would rightly take the store for one that lost its data
    (docs/reliability.md) — and so would every worker after a test that wiped the epoch."""
    redis = connect(redis_url)
    try:
        await redis.delete(EPOCH_KEY)
        await ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60).claim_epoch(lost=False)
    finally:
        await redis.aclose()


class WorkerProcess:
    """``reasonwire worker <kind>`` (``normalize`` or ``replay``) as a real OS process."""

    def __init__(self, settings: WorkerSettings, log: Path, extra_env: dict[str, str] | None = None, *, kind: str = "normalize") -> None:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
            "REDIS_URL": settings.redis_url,
            "RW_GROUP_ID": settings.group_id,
            "RW_PARTITIONS": str(settings.partitions),
            "RW_INACTIVITY_TIMEOUT_S": str(settings.inactivity_timeout_s),
            "RW_HEALTH_PORT": "0",  # several workers at once, other checkouts' on this host: a taken port stops a worker (tests that probe pass one)
            **(extra_env or {}),
        }
        self.log = log
        self._out = log.open("wb")
        self.kind = kind
        cmd = [sys.executable, "-m", "reasonwire.workers.cli", "worker", kind]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT)

    def wait_assigned(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "assigned to partitions" in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.kind} worker exited: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        raise AssertionError(f"{self.kind} worker never got partitions: {self.log.read_text(errors='replace')[-2000:]}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._out.close()


@pytest.fixture
def spawn_worker(primed_group: WorkerSettings, tmp_path: Path) -> Iterator[Any]:
    workers: list[WorkerProcess] = []

    def spawn(extra_env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(primed_group, tmp_path / f"worker-{len(workers)}.log", extra_env)
        workers.append(worker)
        return worker

    yield spawn
    for worker in workers:
        worker.stop()


@pytest_asyncio.fixture
async def producer(services: dict[str, str]) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=services["KAFKA_BOOTSTRAP_SERVERS"], acks="all")
    await p.start()
    yield p
    await p.stop()


@pytest_asyncio.fixture
async def redis(services: dict[str, str]) -> AsyncIterator[Redis]:
    client = connect(services["REDIS_URL"])  # a redis-cluster:// URL gives a RedisCluster (make test-cluster)
    yield client
    await client.aclose()


async def send(producer: AIOKafkaProducer, records: list[OutgoingRecord]) -> None:
    for r in records:
        await producer.send(topics.RAW, r.value, key=r.key, headers=r.headers)
    await producer.flush()


async def send_and_count_refusals(bootstrap: str, producer: AIOKafkaProducer, run_id: str, records: list[OutgoingRecord]) -> tuple[Collector, int]:
    """Send a run's later ``records`` after its store lost or rolled back data, and collect until
    each one is dead-lettered ``store_lost`` or the run finished (an old worker refuses nothing:
    the caller judges); returns the collector and how many of ``records`` were refused."""
    await send(producer, records)
    keys = {r.key for r in records}

    def refused(c: Collector) -> int:
        return sum(1 for k, _, h in c.dlq if k in keys and h.get("rw-dlq-code") == "store_lost")

    async with Collector(bootstrap) as c:
        with contextlib.suppress(AssertionError):
            await c.until(lambda c: refused(c) >= len(records) or c.finished(run_id), timeout=45)
        await asyncio.sleep(1.5)
        await c.until(lambda c: True)
    return c, refused(c)


class Collector:
    """Reads downstream topics from the start and keeps what belongs to the given runs."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = AIOKafkaConsumer(topics.EVENTS, topics.EVENTS_PUBLIC, topics.DLQ, topics.USAGE, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
        self.events: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        self.dlq: list[Any] = []
        self.usage: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.public: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))

    async def __aenter__(self) -> Collector:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    def finished(self, run_id: str) -> bool:
        by_seq = self.events.get(run_id, {})
        if not by_seq:
            return False
        last = by_seq[max(by_seq)][0]["type"]
        return last in ("RUN_FINISHED", "RUN_ERROR") and len(by_seq) == max(by_seq) + 1

    def stream(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events in rw-event-seq order, duplicates (same seq) dropped after checking equal."""
        out = []
        for seq in sorted(self.events[run_id]):
            copies = self.events[run_id][seq]
            assert all(c == copies[0] for c in copies), f"event {seq} of {run_id} differs between deliveries"
            out.append(copies[0])
        return out

    async def until(self, done: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not done(self):
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for downstream records")
            batch = await self.consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for m in records:
                    # a dead letter carries the raw record's headers, which need not be UTF-8 (or present)
                    headers = {k: v.decode("utf-8", "replace") if v is not None else "" for k, v in m.headers}
                    if m.topic == topics.EVENTS:
                        self.events[headers["rw-run-id"]][int(headers["rw-event-seq"])].append(orjson.loads(m.value))
                    elif m.topic == topics.EVENTS_PUBLIC:
                        self.public[headers["rw-run-id"]][int(headers["rw-event-seq"])].append(orjson.loads(m.value))
                    elif m.topic == topics.DLQ:
                        self.dlq.append((m.key, m.value, headers))
                    else:
                        self.usage[headers["rw-run-id"]].append(orjson.loads(m.value))


def _spare_port_pair() -> int:
    """A port whose successor is free too (the broker's controller listener)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no spare port pair")


@pytest.fixture
def private_services(tmp_path: Path) -> Any:
    """A broker and Redis of the test's own, on spare ports, for tests that stop, restart or
    reshape them (the session's services stay untouched); skipped where none can start."""
    from chaos.services import Services

    kafka_port = _spare_port_pair()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        redis_port = int(s.getsockname()[1])
    services = Services(tmp_path / "state", kafka_port, redis_port, tmp_path / "services.log")
    try:
        services.up()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"cannot start a private broker here: {exc}")
    yield services
    services.down()
