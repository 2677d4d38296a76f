"""Secured clients: SASL_SSL with SCRAM/PLAIN and client certificates on a real broker,
Redis over TLS with an ACL user; wrong credentials are one clear line.

The broker and Redis are started by the test (tests/integration/secure_services.py) with
certificates made now; the settings reach the clients only through
:func:`reasonwire.workers.io.kafka_security.client_kwargs` and ``REDIS_URL``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from redis.asyncio import Redis

from reasonwire.contracts import topics
from tests.conformance.oracle import fixture_paths
from tests.integration.secure_services import SecureServices, secure_services
from reasonwire.workers.services.ingress.records import RunEnvelope
from reasonwire.workers.services.ingress.publisher import Publisher
from reasonwire.workers.io.kafka_security import KafkaSecurity, client_kwargs, describe_failure
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.io.store import ArtefactStore


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServices]:
    with secure_services(tmp_path_factory.mktemp("secure")) as services:
        yield services


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_producer_and_consumer_round_trip_over_sasl_ssl(secure: SecureServices, mechanism: str) -> None:
    kwargs = client_kwargs(KafkaSecurity.from_env(secure.kafka_env(mechanism)))
    topic = f"rwtest.secure.{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap, acks="all", enable_idempotence=True, **kwargs)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"opaque-bytes", key=b"run-1")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=secure.bootstrap, group_id=None, auto_offset_reset="earliest", **client_kwargs(KafkaSecurity.from_env(secure.kafka_env(mechanism))))
    await consumer.start()
    try:
        record = await consumer.getone()
    finally:
        await consumer.stop()
    assert (record.key, record.value) == (b"run-1", b"opaque-bytes")


def test_topics_apply_over_sasl_ssl_then_everything_matches(secure: SecureServices) -> None:
    env = {**secure.kafka_env(), "RW_PARTITIONS": "2", "RW_REPLICATION_FACTOR": "1"}
    first = _cli(env, "topics", "apply")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created reasoning.raw.v1" in first.stdout
    again = _cli(env, "topics", "apply", "--check")
    assert again.returncode == 0 and "match the plan" in again.stdout, again.stdout + again.stderr


def test_wrong_kafka_password_is_one_clear_line(secure: SecureServices) -> None:
    out = _cli(secure.kafka_env(password="not-the-password"), "topics", "apply", "--check")
    assert out.returncode == 2  # the settings are wrong, the broker is there (README: exit 2, as every command)
    assert out.stderr.strip().splitlines() == ["reasonwire: error: Kafka refused the SASL credentials (check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD, KAFKA_SASL_MECHANISM)"]
    assert "not-the-password" not in out.stderr


def test_plaintext_client_on_a_tls_listener_is_one_line(secure: SecureServices) -> None:
    out = _cli({"KAFKA_BOOTSTRAP_SERVERS": secure.bootstrap, "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, "topics", "apply", "--check")
    assert out.returncode == 3
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


async def test_redis_over_tls_with_an_acl_user(secure: SecureServices) -> None:
    redis = Redis.from_url(secure.redis_url)
    try:
        await redis.set("rw:v1:probe", b"1", ex=30)
        assert await redis.get("rw:v1:probe") == b"1"
        assert (await redis.acl_whoami()) == "rw-worker"
    finally:
        await redis.aclose()
    wrong = Redis.from_url(secure.redis_url.replace("redis-s3cret-pw", "wrong"))
    try:
        from redis.exceptions import AuthenticationError

        with pytest.raises(AuthenticationError):
            await wrong.ping()
    finally:
        await wrong.aclose()


def test_describe_failure_never_quotes_the_exception() -> None:
    from aiokafka.errors import KafkaConnectionError

    assert "secret" not in (describe_failure(KafkaConnectionError("secret in text")) or "")


def _worker_env(secure: SecureServices, **extra: str) -> dict[str, str]:
    return {**secure.kafka_env(), "RW_GROUP_ID": f"rw-secure-{uuid.uuid4().hex[:6]}", "RW_PARTITIONS": "2", "RW_HEALTH_PORT": "0", **extra}


async def test_worker_end_to_end_over_sasl_ssl_with_tls_redis_acl_user(secure: SecureServices, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The normalizer worker, secured only by the environment: it consumes a run over SASL_SSL,
    stores its artefacts through rediss:// as an ACL user, and publishes the AG-UI events."""
    env = _worker_env(secure, RW_CREATE_TOPICS="true")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "reasonwire.workers.cli", "worker", "normalize"], env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "assigned to partitions" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            await asyncio.sleep(0.3)
        path = next(p for p in fixture_paths() if p.stem == "a_reasoning_then_answer" and p.parent.name == "anthropic-messages")
        run = RunEnvelope(path.parent.name, f"secure-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
        publisher = Publisher(secure.bootstrap)  # secured by client_kwargs() from the environment
        await publisher.start()
        try:
            async with publisher.run(provider=run.grammar, run_id=run.run_id, thread_id=run.thread_id, tenant="acme") as sink:
                for line in path.read_text().splitlines():
                    await sink.send(line)
        finally:
            await publisher.stop()
        consumer = AIOKafkaConsumer(topics.EVENTS, bootstrap_servers=secure.bootstrap, group_id=None, auto_offset_reset="earliest", **client_kwargs())
        await consumer.start()
        types: list[str] = []
        try:
            while not types or types[-1] not in ("RUN_FINISHED", "RUN_ERROR"):
                assert time.monotonic() < deadline + 60, types
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    types += [orjson.loads(m.value)["type"] for m in records if m.key == run.run_id.encode()]
        finally:
            await consumer.stop()
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
        store = ArtefactStore(connect(secure.redis_url), artefact_ttl_s=60, journal_ttl_s=60)
        try:
            stored = await store.thread_artefacts("acme", run.thread_id)
        finally:
            await store.aclose()
        assert stored and all(a.run_id == run.run_id for a in stored)
    finally:
        proc.terminate()
        proc.wait(30)


def test_worker_with_a_wrong_kafka_password_says_so_in_one_line(secure: SecureServices) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "reasonwire.workers.cli", "worker", "normalize"],
        env={**os.environ, **_worker_env(secure, KAFKA_SASL_PASSWORD="wrong-password")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode != 0
    lines = [line for line in (out.stdout + out.stderr).splitlines() if "ERROR" in line or line.startswith("reasonwire:")]
    assert any("Kafka refused the SASL credentials" in line for line in lines), out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stdout + out.stderr
    assert "wrong-password" not in out.stdout + out.stderr


def test_replay_worker_without_its_topics_names_them_in_one_line(secure: SecureServices) -> None:
    """`topics apply` above made every topic; a replay worker pointed at another partition
    count still starts (it checks existence), so show the missing case on a topic plan of
    its own: the replay worker on the secured broker after its topics are deleted."""
    async def delete() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=secure.bootstrap, **client_kwargs(KafkaSecurity.from_env(secure.kafka_env())))
        await admin.start()
        try:
            await admin.delete_topics(list(topics.REPLAY))
        finally:
            await admin.close()

    asyncio.run(delete())
    time.sleep(2)
    # it does not exit 2 (a crash loop under a Deployment) but logs the line
    # once, reports not ready and waits for the topics; SIGTERM ends the wait
    proc = subprocess.Popen(
        [sys.executable, "-m", "reasonwire.workers.cli", "worker", "replay"], env={**os.environ, **_worker_env(secure, RW_CREATE_TOPICS="")},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    waiting = "missing Kafka topics: reasoning.replay.requests.v1, reasoning.replay.replies.v1"
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(waiting in line for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        time.sleep(1.5)
        assert proc.poll() is None, "".join(lines)[-2000:]
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=30)
    text = "".join(lines) + rest
    assert text.count(waiting) == 1, text[-2000:]
    assert "Traceback" not in text
