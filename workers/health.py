"""The worker's health: failure classification, the log throttle, ``/healthz`` + ``/readyz``, metrics.

Adapter code around the pure :mod:`reasonwire.workers.core.backoff` (issue 13, findings 4 and 5):

* :func:`classify` names a failure by component and exception *type* — never its
  text, which may quote a value (P8) — and says whether it is a known
  infrastructure error (one line, no traceback) or a bug (one traceback).
* :class:`LogThrottle` is a :class:`logging.Filter` for aiokafka's (and
  FastStream's) own loggers: a stopped broker made them log 2,500–5,000
  "Unable connect" lines per second. It passes the first line of each kind
  (logger, level, message template) per window and adds to the next one how many
  were suppressed in between.
* :class:`HealthServer` serves ``GET /healthz`` (the process and its event loop
  answer) and ``GET /readyz`` (Redis answers ``PING``, the broker answers a
  metadata request, the worker is not degraded, the consumer has started) on
  ``RW_HEALTH_PORT`` (``0`` disables). It is a minimal asyncio HTTP/1.0 server,
  not FastStream's ``AsgiFastStream``: the worker runs ``FastStream.run()`` in its
  own asyncio loop (``reasonwire worker normalize``), and an ASGI app would need
  an ASGI server (uvicorn, not a dependency) to own that loop instead; two
  fixed routes do not justify either.
* :class:`HealthMetrics` — failed polls, retries and store losses (counters) and
  consumer lag per partition (an observable gauge), through the guarded
  telemetry (P8: attributes from the allowlist only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from reasonwire.workers.core.backoff import Failure
from reasonwire.workers.store import StoreLost

log = logging.getLogger("reasonwire.health")

# -- classification ----------------------------------------------------------------------


def classify(exc: BaseException) -> Failure:
    """Component and kind of a failure; ``known`` for errors the infrastructure is expected
    to produce now and then (no traceback: it would say nothing an operator can act on)."""
    kind = type(exc).__name__
    if isinstance(exc, StoreLost):
        return Failure("store", kind)
    if isinstance(exc, RedisError):
        return Failure("redis", kind)
    if isinstance(exc, KafkaError):
        return Failure("kafka", kind)
    if isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError)):
        return Failure("network", kind)
    return Failure("worker", kind, known=False)


# -- the log throttle ----------------------------------------------------------------------

THROTTLED_LOGGERS = ("aiokafka", "kafka", "faststream")
"""Logger name prefixes whose connection errors repeat per attempt (not ours: ours go through
:class:`~reasonwire.workers.core.backoff.Degradation`)."""


class LogThrottle(logging.Filter):
    """Pass the first record of each kind per ``window_s``; the next one after the window says
    how many were suppressed. A *kind* is (logger, level, message template): aiokafka logs
    ``"Unable connect to %r: %r"`` with the node in the arguments, so one kind per failure mode."""

    def __init__(
        self, prefixes: Iterable[str] = THROTTLED_LOGGERS, *, window_s: float = 30.0, max_kinds: int = 512,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)
        self.window_s = window_s
        self.max_kinds = max_kinds
        self.clock = clock
        self._kinds: dict[tuple[str, int, str], list[float | int]] = {}
        """kind → [window start, suppressed in this window]."""
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefixes) or record.levelno < logging.WARNING:
            return True
        kind = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen[0] < self.window_s:
            seen[1] += 1
            self.suppressed += 1
            return False
        if seen is not None and seen[1]:
            record.msg = f"{record.msg} [{int(seen[1])} similar lines suppressed in the last {now - seen[0]:.0f}s]"
        if len(self._kinds) >= self.max_kinds and kind not in self._kinds:
            self._kinds.clear()  # a flood of distinct templates: start over rather than grow
        self._kinds[kind] = [now, 0]
        record.exc_info = record.exc_info if seen is None else None  # a traceback once per kind
        record.exc_text = None if seen is not None else record.exc_text
        return True


class RepeatGate:
    """Says whether a line of one *kind* may be logged now: the first of each kind per
    ``window_s``, then the next one after the window with how many were held back.

    For the worker's own per-record lines (a translator warning, a dead letter): a provider
    that adds an event type, or a producer that keeps sending a bad record, would otherwise
    log a line per record — the metrics count every one (``reasonwire.events.unknown``,
    ``reasonwire.dlq.records``). Asked before the line is built, so a held-back line costs a
    dictionary lookup, not a log record."""

    def __init__(self, *, window_s: float = 60.0, max_kinds: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.max_kinds = max_kinds
        self.clock = clock
        self._kinds: dict[Any, list[float | int]] = {}
        """kind → [window start, held back in this window]."""
        self.held_back = 0

    def admit(self, kind: Any) -> int | None:
        """``None``: hold this line back; else log it, noting the returned count of lines of this
        kind held back since the last one logged."""
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen[0] < self.window_s:
            seen[1] += 1
            self.held_back += 1
            return None
        if len(self._kinds) >= self.max_kinds and seen is None:
            self._kinds.clear()  # a flood of distinct kinds: start over rather than grow
        self._kinds[kind] = [now, 0]
        return int(seen[1]) if seen is not None else 0


def held_back_note(count: int) -> str:
    """The suffix of a line logged after others of its kind were held back (since the last line
    of the kind logged, which may be long before the last window)."""
    return f" [{count} more like this not logged since the last one]" if count else ""


def install_log_throttle(window_s: float = 30.0) -> LogThrottle:
    """Attach one throttle to every handler of the root logger (records of child loggers
    propagate there; a filter on the ``aiokafka`` logger itself would miss its children's)."""
    throttle = LogThrottle(window_s=window_s)
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, LogThrottle) for f in handler.filters):
            handler.addFilter(throttle)
    return throttle


# -- the HTTP probes -------------------------------------------------------------------------

Probe = Callable[[], Awaitable[dict[str, Any]]]


class HealthServer:
    """``/healthz`` and ``/readyz`` over plain HTTP/1.0 (see the module docstring for why)."""

    def __init__(self, readiness: Probe, *, host: str = "0.0.0.0", port: int = 8080) -> None:  # noqa: S104 (a probe port)
        self.readiness = readiness
        self.host = host
        self.port = port
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as exc:  # the port is taken: the probes fail visibly; the worker still works
            log.warning("health probes not served: port %d: %s (set RW_HEALTH_PORT)", self.port, type(exc).__name__)
            return
        self.port = self._server.sockets[0].getsockname()[1]  # port 0 in tests: the one chosen
        log.info("health probes on http://%s:%d/healthz and /readyz", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 2.0)
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else ""
            if path == "/healthz":
                status, body = 200, {"status": "alive"}  # answering at all proves the loop runs
            elif path == "/readyz":
                body = await asyncio.wait_for(self.readiness(), 5.0)
                status = 200 if body.get("ready") else 503
            else:
                status, body = 404, {"error": "not found: try /healthz or /readyz"}
        except Exception as exc:  # a probe that cannot even be answered is "not ready", not a crash
            status, body = 503, {"ready": False, "error": type(exc).__name__}
        try:
            payload = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as exc:
            status, payload = 503, orjson.dumps({"ready": False, "error": type(exc).__name__})
        reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
        with contextlib.suppress(Exception):
            writer.write(
                f"HTTP/1.0 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            writer.close()


# -- metrics -----------------------------------------------------------------------------------


class HealthMetrics:
    """Counters of failed polls, retries and store losses; consumer lag per partition."""

    def __init__(self, telemetry: Any) -> None:
        from reasonwire.workers.telemetry import vocabulary as v  # telemetry stays optional for pure users

        self._v = v
        counter = telemetry.counter
        self.failed_polls = counter("reasonwire.polls.failed", unit="{poll}", description="Polls that failed (Redis, broker, store), by component")
        self.retries = counter("reasonwire.polls.retries", unit="{retry}", description="Backoff waits before a retry, by component")
        self.store_lost = counter("reasonwire.store.lost", unit="{event}", description="Times the store was found to have lost data (epoch)")
        self.lag: dict[int, int] = {}
        """Partition → records between the committed offset and the partition's high watermark."""
        meter = telemetry.meter_provider.get_meter("reasonwire")
        meter.create_observable_gauge(
            "reasonwire.consumer.lag", callbacks=[self._observe_lag], unit="{record}",
            description="Raw records not yet committed by this worker, per assigned partition",
        )

    def failed(self, failure: Failure) -> None:
        self.failed_polls.add(1, {self._v.RW_COMPONENT: failure.component, self._v.ERROR_TYPE: failure.kind})

    def retried(self, failure: Failure) -> None:
        self.retries.add(1, {self._v.RW_COMPONENT: failure.component})

    def _observe_lag(self, options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        for partition, lag in list(self.lag.items()):  # a snapshot: the exporter runs in its own thread
            yield Observation(max(0, lag), {self._v.MESSAGING_DESTINATION_PARTITION_ID: str(partition)})
