"""Backoff, degradation reports and the log throttle: pure, no sleeping."""

from __future__ import annotations

import logging
import random

import pytest

from reasonwire.workers.core.backoff import Backoff, Degradation, ServiceFailure
from reasonwire.workers.ops.health import LogThrottle, RepeatGate, classify, held_back_note
from reasonwire.workers.io.store import StoreLost


def test_backoff_grows_exponentially_with_jitter_and_is_capped() -> None:
    backoff = Backoff(0.1, 5.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(12)]
    for n, delay in enumerate(delays):
        ceiling = min(5.0, 0.1 * 2**n)
        assert ceiling / 2 <= delay <= ceiling  # equal jitter: never below half a step
    assert max(delays) <= 5.0
    assert delays[0] < 0.1 < delays[5]


def test_backoff_jitter_differs_between_replicas() -> None:
    a, b = Backoff(rng=random.Random(1)), Backoff(rng=random.Random(2))
    assert [a.next_delay() for _ in range(5)] != [b.next_delay() for _ in range(5)]


def test_backoff_reset_starts_over() -> None:
    backoff = Backoff(0.1, 5.0, rng=random.Random(3))
    for _ in range(10):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() <= 0.1


def test_backoff_rejects_a_nonsense_policy() -> None:
    with pytest.raises(ValueError):
        Backoff(0.0, 5.0, rng=random.Random(0))
    with pytest.raises(ValueError):
        Backoff(6.0, 5.0, rng=random.Random(0))


REDIS_DOWN = ServiceFailure("redis", "ConnectionError")


def test_degradation_logs_state_changes_not_retries() -> None:
    """A 30 s outage with a failure every 5 ms: one degraded line, one summary, one recovered."""
    state = Degradation(summary_every_s=30.0)
    reports = [state.failed(REDIS_DOWN, now=t / 200, next_retry_s=0.1) for t in range(6001)]
    lines = [r for r in reports if r is not None]
    assert len(lines) == 2  # degraded at 0 s, summary at 30 s
    assert lines[0].message.startswith("degraded: redis: ConnectionError") and not lines[0].traceback
    assert "6001" not in lines[0].message and "still degraded" in lines[1].message
    recovered = state.succeeded(now=31.0)
    assert recovered is not None and recovered.level == "info"
    assert "recovered after 31.0s and 6001 failed attempts" in recovered.message
    assert state.succeeded(now=32.0) is None and not state.degraded


def test_degradation_gives_an_unknown_failure_one_traceback() -> None:
    state = Degradation()
    bug = ServiceFailure("worker", "KeyError", known=False)
    first = state.failed(bug, now=0.0, next_retry_s=0.1)
    assert first is not None and first.traceback and first.level == "error"
    assert state.failed(bug, now=1.0, next_retry_s=0.2) is None
    other = state.failed(ServiceFailure("worker", "IndexError", known=False), now=2.0, next_retry_s=0.4)
    assert other is not None and other.traceback


def test_degradation_summary_is_periodic_while_degraded_only() -> None:
    state = Degradation(summary_every_s=10.0)
    assert state.summary(now=100.0) is None
    state.failed(REDIS_DOWN, now=0.0, next_retry_s=1.0)
    assert state.summary(now=5.0) is None
    assert state.summary(now=10.0) is not None
    assert state.summary(now=15.0) is None


def test_classify_names_component_and_type_only() -> None:
    from aiokafka.errors import KafkaConnectionError
    from redis.exceptions import ConnectionError as RedisConnectionError

    assert classify(RedisConnectionError("secret-value")) == ServiceFailure("redis", "ConnectionError")
    assert classify(KafkaConnectionError("x")) == ServiceFailure("kafka", "KafkaConnectionError")
    assert classify(StoreLost()) == ServiceFailure("store", "StoreLost")
    assert classify(ConnectionRefusedError()) == ServiceFailure("network", "ConnectionRefusedError")
    assert classify(KeyError("k")).known is False
    assert "secret" not in classify(RedisConnectionError("secret-value")).cause


def _record(msg: str, name: str = "aiokafka.conn", level: int = logging.ERROR, args: tuple = ()) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_log_throttle_passes_the_first_of_a_kind_then_summarises() -> None:
    clock = [0.0]
    throttle = LogThrottle(window_s=30.0, clock=lambda: clock[0])
    passed = []
    for i in range(5000):  # a stopped broker: thousands of "Unable connect" lines per second
        clock[0] = i / 2500
        record = _record("Unable connect to %r: %r", args=(f"node-{i % 3}", "refused"))
        if throttle.filter(record):
            passed.append(record)
    assert len(passed) == 1
    clock[0] = 31.0
    record = _record("Unable connect to %r: %r", args=("node-1", "refused"))
    assert throttle.filter(record)
    assert "4999 similar lines suppressed" in record.getMessage()


def test_log_throttle_leaves_other_loggers_and_info_alone() -> None:
    throttle = LogThrottle(window_s=30.0, clock=lambda: 0.0)
    assert all(throttle.filter(_record("a poll failed", name="reasonwire.normalize")) for _ in range(3))
    assert all(throttle.filter(_record("joined group", level=logging.INFO)) for _ in range(3))
    assert throttle.filter(_record("one kind"))
    assert throttle.filter(_record("another kind"))


def test_repeat_gate_logs_a_per_record_warning_once_per_kind_per_window() -> None:
    """A provider that adds an event type makes every record warn (P3): the worker logs the first
    of each kind a minute, then one line saying how many it held back; other kinds pass."""
    clock = [0.0]
    gate = RepeatGate(window_s=60.0, clock=lambda: clock[0])
    kind = ("warning", "anthropic-messages", "unknown_event")
    admitted = []
    for i in range(10_000):
        clock[0] = i / 1000  # 10 s of a record per ms
        admitted.append(gate.admit(kind))
    assert admitted[0] == 0 and admitted.count(None) == 9_999
    assert gate.admit(("dead_letter", "invalid_envelope")) == 0  # another kind is not held back
    clock[0] = 61.0
    held = gate.admit(kind)
    assert held == 9_999 and "9999 more like this not logged since the last one" in held_back_note(held)
    assert held_back_note(0) == ""


def test_repeat_gate_stays_bounded_under_a_flood_of_kinds() -> None:
    gate = RepeatGate(max_kinds=8, clock=lambda: 0.0)
    assert all(gate.admit(("k", i)) == 0 for i in range(100))
    assert len(gate._kinds) <= 8


async def _get(port: int, path: str) -> tuple[int, bytes]:
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_health_server_answers_liveness_and_readiness_from_the_probe() -> None:
    """/healthz is the loop answering; /readyz is 503 until the probe says ready."""
    from reasonwire.workers.ops.health import HealthServer

    state = {"ready": False, "redis": "ConnectionError", "lag": {3: 7}}

    async def probe() -> dict:
        return dict(state)

    server = HealthServer(probe, host="127.0.0.1", port=0)
    await server.start()
    try:
        assert (await _get(server.port, "/healthz"))[0] == 200
        status, body = await _get(server.port, "/readyz")
        assert status == 503 and b'"redis":"ConnectionError"' in body and b'"3":7' in body
        state["ready"] = True
        assert (await _get(server.port, "/readyz"))[0] == 200
        assert (await _get(server.port, "/nope"))[0] == 404
    finally:
        await server.stop()
