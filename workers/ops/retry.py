"""Retry one unit of work in place with backoff, logging state changes only.

The normalizer's poll loop waits a capped, jittered backoff between failed attempts and logs
one line per state change (``workers/core/backoff.py``). A FastStream subscriber that raises
instead gets its message NACKed and redelivered at once: with Redis away 15 s and replay
requests pending, the replay worker retried ~5,600 times, each with a traceback — 22–34 MB
of log at 65–93 % of a core. :class:`Retrying` gives any such handler the normalizer's
behaviour: the message is retried inside the handler (same order, nothing redelivered), the
n-th consecutive failure waits ``d/2 + U(0, d/2)`` with ``d = min(cap, initial·2ⁿ)``, and
the log says ``degraded`` once, a summary every 30 s, ``recovered`` once — an infrastructure
error named by component and type, never with its text (P8); an unknown one (a bug) with its
traceback once per type per outage.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections.abc import Awaitable, Callable
from typing import TypeVar

from reasonwire.workers.core.backoff import Backoff, Degradation, Report
from reasonwire.workers.ops.health import classify

T = TypeVar("T")

def jitter() -> random.Random:
    """This process's source of backoff jitter (``workers/core/backoff.py`` draws none of its own):
    seeded from the OS, so replicas that failed together do not retry together."""
    return random.Random(secrets.randbits(64))


_LEVELS = {"info": logging.INFO, "warning": logging.WARNING}


class Retrying:
    """Runs an attempt until it succeeds, sleeping a backoff step after each failure."""

    def __init__(self, log: logging.Logger, *, initial_s: float = 0.1, cap_s: float = 5.0) -> None:
        self.log = log
        self.backoff = Backoff(initial_s, cap_s, rng=jitter())
        self.degradation = Degradation()

    @property
    def degraded(self) -> str | None:
        """The cause of the current outage (``redis: ConnectionError``…), ``None`` when healthy."""
        return self.degradation.cause if self.degradation.degraded else None

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``'s result, after as many backed-off retries as it takes. Cancellation
        (shutdown) passes through; every other exception is a failure to wait out."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                result = await attempt()
            except Exception as exc:
                delay = self.backoff.next_delay()
                self._log(self.degradation.failed(classify(exc), loop.time(), delay), exc)
                await asyncio.sleep(delay)
                continue
            self.backoff.reset()
            self._log(self.degradation.succeeded(loop.time()))
            return result

    def _log(self, report: Report | None, exc: BaseException | None = None) -> None:
        if report is not None:
            self.log.log(_LEVELS.get(report.level, logging.ERROR), "%s", report.message, exc_info=exc if report.traceback else None)
