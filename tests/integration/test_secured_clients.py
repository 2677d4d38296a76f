"""Secured clients (issue 16): SASL_SSL with SCRAM/PLAIN and client certificates on a real broker,
Redis over TLS with an ACL user; wrong credentials are one clear line.

The broker and Redis are started by the test (tests/integration/secure_services.py) with
certificates made now; the settings reach the clients only through
:func:`workers.kafka_security.client_kwargs` and ``REDIS_URL``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from redis.asyncio import Redis

from tests.integration.secure_services import SecureServices, secure_services
from workers.kafka_security import KafkaSecurity, client_kwargs, describe_failure


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServices]:
    with secure_services(tmp_path_factory.mktemp("secure")) as services:
        yield services


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=180)


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
    assert out.returncode == 3
    assert out.stderr.strip().splitlines() == ["reasonwire: Kafka refused the SASL credentials (check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD, KAFKA_SASL_MECHANISM)"]
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
