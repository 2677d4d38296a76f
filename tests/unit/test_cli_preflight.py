"""Start-up checks are bounded: a service address that accepts connections but never
answers fails within the check's timeout, as a closed port fails at once — never a hang."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from reasonwire.workers.ops.errors import ServiceUnreachable
from reasonwire.workers.services.preflight import check_kafka, check_redis, redis_location
from reasonwire.workers.ops.settings import WorkerSettings


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that never accepts or answers: TCP connects (the backlog), requests go unanswered."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def test_a_broker_that_never_answers_fails_within_the_timeout(silent_port: int) -> None:
    settings = WorkerSettings(kafka_bootstrap_servers=f"127.0.0.1:{silent_port}")
    started = time.monotonic()
    with pytest.raises(ServiceUnreachable, match="KAFKA_BOOTSTRAP_SERVERS") as caught:
        asyncio.run(check_kafka(settings, timeout_s=1.0))
    assert time.monotonic() - started < 10
    assert "\n" not in str(caught.value)


def test_a_redis_that_never_answers_fails_within_the_timeout(silent_port: int) -> None:
    settings = WorkerSettings(redis_url=f"redis://127.0.0.1:{silent_port}/0")
    started = time.monotonic()
    with pytest.raises(ServiceUnreachable, match="REDIS_URL") as caught:
        asyncio.run(check_redis(settings, timeout_s=1.0))
    assert time.monotonic() - started < 10
    assert "no answer in time" in str(caught.value)


def test_the_redis_location_never_carries_credentials() -> None:
    assert redis_location("redis://user:hunter2@cache.internal:6380/3") == "cache.internal:6380/3"
    assert redis_location("rediss://:hunter2@cache") == "cache:6379"
    assert redis_location("unix:///run/redis.sock") == "/run/redis.sock"
