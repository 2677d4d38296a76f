"""The worker's health: failure classification, the log throttle, ``/healthz`` + ``/readyz`` + ``/metrics``, metrics.

Adapter code around the pure :mod:`reasonwire.workers.core.backoff`:

* :func:`classify` names a failure by component and exception *type* — never its
  text, which may quote a value (P8) — and says whether it is a known
  infrastructure error (one line, no traceback) or a bug (one traceback).
* :class:`LogThrottle` is a :class:`logging.Filter` for aiokafka's (and
  FastStream's) own loggers: a stopped broker made them log 2,500–5,000
  "Unable connect" lines per second. It passes the first line of each kind
  (logger, level, message template) per window and adds to the next one how many
  were suppressed in between.
* :class:`HealthServer` serves ``GET /healthz`` (the process and its event loop
  answer), ``GET /readyz`` (Redis answers ``PING``, the broker answers a
  metadata request, the worker is not degraded, the consumer has started; or why
  it waits, e.g. for missing topics) and ``GET /metrics`` (Prometheus, when
  ``OTEL_METRICS_EXPORTER`` names ``prometheus``: :mod:`reasonwire.workers.ops.metrics`)
  on ``RW_HEALTH_PORT`` (``0`` disables). It is a Starlette app served by uvicorn
  (both are dependencies: the gateway runs on them) inside the worker's own event
  loop, beside ``FastStream.run()``: uvicorn's ``Server`` on a socket bound here,
  without its signal handling (FastStream's handles SIGTERM and drains; uvicorn's
  would take the signals over while it runs). Its cost on the hot path is uvicorn's
  tick, a 0.1 s sleep in the loop (ten wake-ups a second), and the requests
  themselves: a probe every few seconds, a scrape every 15–60 s, whose collection
  runs in a worker thread (a sync endpoint).
* :func:`wait_until_allowed` — a worker that finds something in its way at start-up (its
  topics missing: :func:`reasonwire.workers.io.topics_admin.wait_for_topics`; an evicting
  Redis) reports not ready and waits, with one log line, instead of exiting (a crash loop
  under a Deployment or ``restart: unless-stopped``).
* :class:`HealthMetrics` — failed polls, retries and store losses (counters) and
  consumer lag per partition (an observable gauge), through the guarded
  telemetry (P8: attributes from the allowlist only).
* :class:`WorkerHealth` — the normalizer worker's side of it: the degraded state and its
  log lines, those counts, each partition's lag, and the lines single records cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from reasonwire.workers.core.backoff import Degradation, Report, ServiceFailure
from reasonwire.workers.core.delivery import DeadLetterCode
from reasonwire.workers.core.fence import StoreLost
from reasonwire.workers.core.normalizer import DeadLetter, RunInput, Step

log = logging.getLogger("reasonwire.health")

# -- classification ----------------------------------------------------------------------


def classify(exc: BaseException) -> ServiceFailure:
    """Component and kind of a failure; ``known`` for errors the infrastructure is expected
    to produce now and then (no traceback: it would say nothing an operator can act on)."""
    kind = type(exc).__name__
    if isinstance(exc, StoreLost):
        return ServiceFailure("store", kind)
    if isinstance(exc, RedisError):
        return ServiceFailure("redis", kind)
    if isinstance(exc, KafkaError):
        return ServiceFailure("kafka", kind)
    if isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError)):
        return ServiceFailure("network", kind)
    return ServiceFailure("worker", kind, known=False)


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
Scrape = Callable[[], "bytes | None"]

NO_METRICS = "no metrics here: set OTEL_METRICS_EXPORTER=prometheus (or otlp,prometheus) to serve them"


class HealthServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` on Starlette + uvicorn, in the caller's event
    loop (see the module docstring for how and what it costs).

    ``readiness`` answers ``/readyz`` (a body with ``ready``); while :attr:`waiting` is set, the
    worker is waiting for something before it can start (missing topics), and ``/readyz`` says
    so without asking the probe. ``metrics`` returns the Prometheus text, or None (404)."""

    def __init__(
        self, readiness: Probe, *, host: str = "0.0.0.0", port: int = 8080, metrics: Scrape | None = None,  # noqa: S104 (a probe port)
        source: str = "RW_HEALTH_HOST / RW_HEALTH_PORT",
    ) -> None:
        self.source = source
        """The settings that chose the address, named when it cannot be bound."""
        self.readiness = readiness
        self.host = host
        self.port = port
        self.metrics = metrics
        self.waiting: dict[str, Any] | None = None
        """Why the worker is not started yet (``{"topics_missing": [...]}``), else None."""
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    def app(self) -> Any:
        """The ASGI app (Starlette): the three routes, JSON 404 elsewhere."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        async def not_found(request: Any, exc: Exception) -> Any:
            return _json(404, {"error": "not found: try /healthz, /readyz or /metrics"})

        routes = [
            Route("/healthz", self._healthz, methods=["GET"]),
            Route("/readyz", self._readyz, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"]),
        ]
        return Starlette(routes=routes, exception_handlers={404: not_found})

    async def _healthz(self, request: Any) -> Any:
        return _json(200, {"status": "alive"})  # answering at all proves the loop runs

    async def _readyz(self, request: Any) -> Any:
        if self.waiting is not None:
            return _json(503, {"ready": False, **self.waiting})
        try:
            body = await asyncio.wait_for(self.readiness(), 5.0)
        except Exception as exc:  # a probe that cannot even be answered is "not ready", not a crash
            return _json(503, {"ready": False, "error": type(exc).__name__})
        return _json(200 if body.get("ready") else 503, body)

    def _metrics(self, request: Any) -> Any:
        """Sync on purpose: Starlette runs it in a worker thread, so a collection does not hold
        the event loop (the SDK's readers are thread-safe; the lag gauge observes a snapshot)."""
        from starlette.responses import Response

        from reasonwire.workers.ops.metrics import CONTENT_TYPE

        text = self.metrics() if self.metrics is not None else None
        if text is None:
            return _json(404, {"error": NO_METRICS})
        return Response(text, media_type=CONTENT_TYPE)

    async def start(self) -> None:
        import uvicorn

        # a port that cannot be bound stops the worker (exit 2, one line), as it stops the gateway:
        # a worker without /readyz is one an orchestrator can neither route by nor restart for cause
        sock = listen(self.host, self.port, self.source)
        self.port = sock.getsockname()[1]  # port 0 in tests: the one chosen
        config = uvicorn.Config(
            self.app(), lifespan="off", access_log=False, log_config=None, log_level="warning", timeout_graceful_shutdown=2,
        )
        self._server = _in_loop_server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="reasonwire-health")
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.005)
        log.info("health probes on http://%s:%d/healthz and /readyz (metrics: /metrics)", self.host, self.port)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._task, 5.0)
        self._server = self._task = None


def listen(host: str, port: int, source: str) -> socket.socket:
    """The bound, listening socket, or :class:`~reasonwire.workers.ops.errors.UserError` (exit 2)
    naming the address and the setting that chose it — the gateway's port and a worker's probes."""
    from reasonwire.workers.ops.errors import UserError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({source}): {exc.strerror or type(exc).__name__}") from None
    sock.set_inheritable(True)
    return sock


def _in_loop_server(config: Any) -> Any:
    """uvicorn's ``Server`` without its signal handlers: while it serves, uvicorn would replace
    FastStream's SIGTERM / SIGINT handlers with its own (and re-raise the signal only once the
    health server stopped). Built here so uvicorn is imported only where a port is served."""
    import uvicorn

    class InLoopServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # FastStream's handlers stay in charge
            yield

    return InLoopServer(config)


def _json(status: int, body: dict[str, Any]) -> Any:
    from starlette.responses import Response

    try:
        payload = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        status, payload = 503, orjson.dumps({"ready": False, "error": type(exc).__name__})
    return Response(payload, status_code=status, media_type="application/json")


async def wait_until_allowed(
    obstacle: Callable[[], Awaitable[tuple[str, dict[str, Any]] | None]],
    health: HealthServer | None = None,
    *,
    interval_s: float = 5.0,
    resumed: str = "starting",
) -> None:
    """Start-up waits, not exits, while ``obstacle()`` names something in the way (missing
    topics, an evicting Redis): an exiting worker crash-loops under a Deployment or
    ``restart: unless-stopped``, while a waiting one stays not ready — ``/readyz`` 503 with the
    obstacle's body — and starts by itself once the operator fixes it. ``obstacle()`` answers
    ``(one log line, /readyz body)`` or ``None``; it is asked again every ``interval_s``. One
    warning line when the wait starts, one when it ends."""
    waited = False
    while (found := await obstacle()) is not None:
        line, body = found
        if health is not None:
            health.waiting = body
        if not waited:
            log.warning("not ready: %s (checked every %gs)", line, interval_s)
            waited = True
        await asyncio.sleep(interval_s)
    if health is not None:
        health.waiting = None
    if waited:
        log.info("%s", resumed)


# -- metrics -----------------------------------------------------------------------------------


class HealthMetrics:
    """Counters of failed polls, retries and store losses; consumer lag per partition."""

    def __init__(self, telemetry: Any) -> None:
        from reasonwire.workers.ops.telemetry import vocabulary as v  # telemetry stays optional for pure users

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

    def failed(self, failure: ServiceFailure) -> None:
        self.failed_polls.add(1, {self._v.RW_COMPONENT: failure.component, self._v.ERROR_TYPE: failure.kind})

    def retried(self, failure: ServiceFailure) -> None:
        self.retries.add(1, {self._v.RW_COMPONENT: failure.component})

    def _observe_lag(self, options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        for partition, lag in list(self.lag.items()):  # a snapshot: the exporter runs in its own thread
            yield Observation(max(0, lag), {self._v.MESSAGING_DESTINATION_PARTITION_ID: str(partition)})


# -- the normalizer worker's health and the lines records cause ------------------------------


class WorkerHealth:
    """The normalizer worker's health bookkeeping, beside the delivery machine that decides the
    backoff: the degraded state and its log lines (one per state change, and the periodic
    summary), the failure, retry and store-loss counts, each partition's lag, and the WARNING
    lines single records cause, one per kind a minute (:class:`RepeatGate`; the metrics count all)."""

    def __init__(self, telemetry: Any, log: logging.Logger) -> None:
        self.log = log
        self.degradation = Degradation()
        self.metrics = HealthMetrics(telemetry)
        self.repeats = RepeatGate()

    @property
    def degraded(self) -> str | None:
        """The cause of the degraded state (``/readyz``), ``None`` while healthy."""
        return self.degradation.cause if self.degradation.degraded else None

    def failed(self, exc: BaseException, delay: float) -> None:
        """Count the failure the machine backed off after, and log only on a state change (or the
        periodic summary): a retry per poll logged a traceback per poll."""
        failure = classify(exc)
        self.metrics.failed(failure)
        self.metrics.retried(failure)
        if isinstance(exc, StoreLost):
            self.metrics.store_lost.add(1)
        self.report(self.degradation.failed(failure, time.monotonic(), delay), exc)

    def recovered(self) -> None:
        self.report(self.degradation.succeeded(time.monotonic()))

    def summary(self) -> None:
        """The summary line while degraded (the health tick)."""
        self.report(self.degradation.summary(time.monotonic()))

    def report(self, report: Report | None, exc: BaseException | None = None) -> None:
        if report is not None:
            level = {"info": logging.INFO, "warning": logging.WARNING}.get(report.level, logging.ERROR)
            self.log.log(level, "%s", report.message, exc_info=exc if report.traceback else None)

    def committed(self, partition: int, high: int | None, offset: int) -> None:
        """A commit went through: the partition's lag behind the broker's high watermark."""
        if high is not None:
            self.metrics.lag[partition] = high - offset

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: their lag is the new owner's to report."""
        for partition in partitions:
            self.metrics.lag.pop(partition, None)

    def warn_repeating(self, kind: Any, line: str, *args: Any) -> None:
        """A WARNING that one record causes: logged once per ``kind`` a minute, the next one saying
        how many were held back (:class:`RepeatGate`); the metrics count all."""
        held = self.repeats.admit(kind)
        if held is not None:
            self.log.warning(line + "%s", *args, held_back_note(held))

    def log_step(self, item: DeadLetter | RunInput | None, step: Step, stats: dict[str, int]) -> None:
        """What a record caused (a warning, a dead letter, a skip), counted in ``stats``. Codes and
        exception types only: never a record's content (P8)."""
        log = self.log
        if isinstance(item, DeadLetter):
            record = item.record
            self.warn_repeating(
                ("dead_letter", item.code), "dead-lettered raw record at partition %d offset %d (%s): %s",
                record.partition, record.offset, item.code, item.reason,
            )
            return
        if item is None:
            return
        for warning in step.warnings:  # content-free by construction (P8); counted by the metrics
            self.warn_repeating(
                ("warning", item.envelope.grammar, warning.code), "run %s line %d: %s", item.envelope.run_id, warning.line, warning.message
            )
        if step.dead_letter is DeadLetterCode.STORE_LOST and step.run is None:
            stats["store_lost"] += 1
            log.debug("run %s rw-seq %d: journal lost with the store; dead-lettered", item.envelope.run_id, item.envelope.seq)
        elif step.dead_letter is not None:
            record = item.record
            line = "run %s: record at partition %d offset %d dead-lettered (%s)%s"
            args = (item.envelope.run_id, record.partition, record.offset, step.dead_letter, f" after {step.error}" if step.error else "")
            if step.dead_letter is DeadLetterCode.RUN_ENDED:
                # a late record is counted (metrics, DLQ), not logged at WARNING: a producer that
                # keeps sending after its run ended must not flood the log
                log.debug(line, *args)
            else:
                self.warn_repeating(("dead_letter", step.dead_letter), line, *args)
        if step.skipped:
            stats["skipped"] += 1
            # normal operation (the ingress's end record after the provider's own end): not INFO per run
            log.debug("run %s: record skipped (%s)", item.envelope.run_id, step.skipped)
