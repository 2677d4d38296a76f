"""How the worker waits and what it says while Redis or the broker is failing (sans-I/O).

Two small pure objects, fed by the adapter (``workers/services/normalizer.py``) and tested alone:

* :class:`Backoff` — capped exponential backoff with *equal jitter*: the n-th
  consecutive failure waits ``d/2 + U(0, d/2)`` with ``d = min(cap, initial * 2**n)``.
  Without it a failing poll was retried at once, ~1,500 times in 8 s of Redis
  outage. Half of each step is fixed so replicas never
  retry in a tight loop; the other half is random so replicas that failed
  together do not retry together. The cap bounds how late the worker notices
  a recovery: at most one step (``cap``) after the service is back.
* :class:`Degradation` — the worker's health as a state machine,
  ``healthy → degraded → healthy``, that turns a storm of failures into one
  line per state change plus a periodic summary. It returns the lines to log
  (content-free: an exception's *kind*, never its text — a Redis or broker
  error may quote a value) and never logs itself.

Clocks are passed in (``now``, monotonic seconds) and so is the jitter's source (:class:`Jitter`,
e.g. a seeded ``random.Random``): tests and the simulation need no sleeping, and a seed replays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_INITIAL_S = 0.1
DEFAULT_CAP_S = 5.0
DEFAULT_SUMMARY_EVERY_S = 30.0


class Jitter(Protocol):
    """Where the random half of each step comes from (``random.Random`` is one): passed in, so
    the core draws no randomness of its own."""

    def uniform(self, a: float, b: float) -> float: ...


@dataclass
class Backoff:
    """Capped exponential backoff with equal jitter; :meth:`reset` after a success."""

    initial_s: float = DEFAULT_INITIAL_S
    cap_s: float = DEFAULT_CAP_S
    rng: Jitter = field(kw_only=True)
    attempts: int = 0
    """Consecutive failures so far (the exponent of the next step)."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.cap_s:
            raise ValueError("backoff needs 0 < initial_s <= cap_s")

    def ceiling(self, attempt: int) -> float:
        """The largest wait of the ``attempt``-th failure (0-based), before jitter."""
        return min(self.cap_s, self.initial_s * 2 ** min(attempt, 64))

    def next_delay(self) -> float:
        """The wait before the next retry; each call counts one more failure."""
        ceiling = self.ceiling(self.attempts)
        self.attempts += 1
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempts = 0


@dataclass(frozen=True)
class ServiceFailure:
    """A failure as the health state machine sees it: which component and what kind, no text."""

    component: str
    """``redis``, ``kafka``, ``store`` (the store lost data) or ``worker`` (anything else)."""
    kind: str
    """The exception's type name (``ConnectionError``, ``KafkaConnectionError``…): never its message."""
    known: bool = True
    """An infrastructure error we expect (no traceback needed); unknown ones get one traceback."""

    @property
    def cause(self) -> str:
        return f"{self.component}: {self.kind}"


@dataclass
class Report:
    """One line for the log, and whether the caller should attach the exception's traceback."""

    level: str
    """``warning`` (degraded, summary), ``error`` (an unknown failure) or ``info`` (recovered)."""
    message: str
    traceback: bool = False


@dataclass
class Degradation:
    """healthy → degraded (first failure) → healthy (first success), with a summary every
    ``summary_every_s`` while degraded; counts failures and retries for the lines and metrics."""

    summary_every_s: float = DEFAULT_SUMMARY_EVERY_S
    since: float | None = None
    """When the current degradation started (``None``: healthy)."""
    causes: dict[str, int] = field(default_factory=dict)
    """Cause → failures in the current degradation."""
    failures: int = 0
    """Failures in the current degradation."""
    _last_report: float = 0.0
    _reported_unknown: set[str] = field(default_factory=set)

    @property
    def degraded(self) -> bool:
        return self.since is not None

    @property
    def cause(self) -> str | None:
        """The most frequent cause of the current degradation."""
        return max(self.causes, key=self.causes.__getitem__) if self.causes else None

    def failed(self, failure: ServiceFailure, now: float, next_retry_s: float) -> Report | None:
        """A poll (or tick) failed; a report on the state change, or the summary when due."""
        self.failures += 1
        self.causes[failure.cause] = self.causes.get(failure.cause, 0) + 1
        if self.since is None:
            self.since = self._last_report = now
            self._reported_unknown = set()
            if not failure.known:
                self._reported_unknown.add(failure.kind)
            return Report(
                "warning" if failure.known else "error",
                f"degraded: {failure.cause}; retrying with backoff (next in {next_retry_s:.2f}s)",
                traceback=not failure.known,
            )
        if not failure.known and failure.kind not in self._reported_unknown:
            self._reported_unknown.add(failure.kind)  # a new kind of bug: its traceback once
            return Report("error", f"still degraded, new failure: {failure.cause}", traceback=True)
        return self.summary(now, next_retry_s)

    def summary(self, now: float, next_retry_s: float | None = None) -> Report | None:
        """The periodic line while degraded (``None`` when healthy or not yet due)."""
        if self.since is None or now - self._last_report < self.summary_every_s:
            return None
        self._last_report = now
        causes = ", ".join(f"{c} x{n}" for c, n in sorted(self.causes.items()))
        nxt = f"; next retry in {next_retry_s:.2f}s" if next_retry_s is not None else ""
        return Report("warning", f"still degraded after {now - self.since:.1f}s: {self.failures} failed attempts ({causes}){nxt}")

    def succeeded(self, now: float) -> Report | None:
        """Work went through: ``recovered`` once, with the outage's duration and retries."""
        if self.since is None:
            return None
        report = Report(
            "info",
            f"recovered after {now - self.since:.1f}s and {self.failures} failed attempts (cause: {self.cause})",
        )
        self.since = None
        self.failures = 0
        self.causes = {}
        return report
