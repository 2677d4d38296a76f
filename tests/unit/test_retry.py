"""Retrying: a failed attempt is retried in place after a jittered backoff; the log says
``degraded`` and ``recovered`` once each (the replay worker's NACK loop)."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from reasonwire.workers.ops.retry import Retrying


class Flaky:
    """Fails ``failures`` times with ``error``, then returns ``"done"``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


async def test_an_outage_is_waited_out_with_two_log_lines_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    retrying = Retrying(logging.getLogger("reasonwire.test"), initial_s=0.001, cap_s=0.004)
    attempt = Flaky(40, RedisConnectionError("Error 111 connecting to 10.0.0.1:6379 password=hunter2"))
    with caplog.at_level(logging.INFO, logger="reasonwire.test"):
        assert await retrying.run(attempt) == "done"
    assert attempt.calls == 41
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # not one line per retry
    assert messages[0].startswith("degraded: redis: ConnectionError; retrying with backoff")
    assert messages[1].startswith("recovered after") and "40 failed attempts" in messages[1]
    assert not any(r.exc_info for r in caplog.records)
    assert "hunter2" not in caplog.text  # an error's text may quote a secret or a value (P8)
    assert retrying.degraded is None and retrying.backoff.attempts == 0


async def test_the_wait_grows_and_the_cause_is_reported_while_degraded() -> None:
    retrying = Retrying(logging.getLogger("reasonwire.test"), initial_s=0.001, cap_s=0.004)
    waits = [retrying.backoff.ceiling(n) for n in range(5)]
    assert waits == [0.001, 0.002, 0.004, 0.004, 0.004]  # capped exponential (equal jitter: half of it fixed)
    seen: list[str | None] = []

    async def attempt() -> str:
        seen.append(retrying.degraded)
        if len(seen) < 3:
            raise TimeoutError
        return "ok"

    assert await retrying.run(attempt) == "ok"
    assert seen == [None, "network: TimeoutError", "network: TimeoutError"]


async def test_an_unknown_failure_gets_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    retrying = Retrying(logging.getLogger("reasonwire.test"), initial_s=0.001, cap_s=0.002)
    with caplog.at_level(logging.INFO, logger="reasonwire.test"):
        await retrying.run(Flaky(5, KeyError("bug")))
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and tracebacks[0].levelno == logging.ERROR
