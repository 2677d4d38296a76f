"""The gateway's HTTP surface (Starlette): AG-UI SSE out, run requests and HTTP ingress in.

Routes (docs/gateway.md):

* ``GET /v1/threads/{threadId}/runs/{runId}/events[?audience=public|internal]`` — the
  run's events as ``text/event-stream`` (AG-UI SSE encoding, ``id:`` = rw-event-seq,
  ``Last-Event-ID`` resumes after it), keep-alive comments while quiet, closed after
  the terminal event.
* ``POST /v1/agent[?audience=…]`` — ``HttpAgent``'s endpoint: a ``RunAgentInput``
  becomes a run request on ``reasoning.requests.v1``; the run's events stream back.
* ``POST /v1/ingest/{provider}`` — a provider stream as a chunked body, ids in
  ``RW-Run-Id`` / ``RW-Thread-Id`` / ``RW-Model`` / ``RW-Issuer-Scope`` headers.
* ``GET /v1/capabilities`` — AG-UI ``AgentCapabilities``: SSE streaming, ``transport.resumable``
  (``Last-Event-ID`` is this gateway's extension: the AG-UI HTTP binding has no resumption),
  reasoning streamed with encrypted values.
* ``GET /v1/viewer`` — a minimal page rendering a run as it streams.
* ``GET /healthz`` — liveness, and the readers and clients of this process.
* ``GET /readyz`` — 200 while Kafka, Redis and every partition reader are reachable, else 503.

Every ``/v1`` data route needs an API key (401 without one). Runs are keyed by tenant:
another tenant's run is answered exactly like one that does not exist.

Under real clients: a reader is written in bounded pieces and one that stops
reading for ``client_stall_s`` is cut off *without* a clean end (its ``Last-Event-ID``
resumes it) — a stream ends cleanly only after the run's terminal event; writes in flight
are capped in total (``max_buffered_bytes``); every id is checked against one grammar
(``reasonwire.contracts.ids``); an ingest body is recognised as its grammar before anything
is published and an event too large for the topic is a 413; while the broker is away an
answer comes within ``publish_timeout_s`` (503, ``Retry-After``) and ``/readyz`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from reasonwire.contracts import topics
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.ids import BadId, check_id
from reasonwire.contracts.run_request import RunRequest
from reasonwire.workers.ops.retry import jitter
from reasonwire.workers.core.backoff import Backoff, Degradation, ServiceFailure, Report
from reasonwire.workers.core.delivery import DEFAULT_MAX_MESSAGE_BYTES, record_size
from reasonwire.workers.services.gateway.fanout import Fanout, RunLog
from reasonwire.workers.services.gateway.keys import Audience, KeyBook, Principal
from reasonwire.workers.services.ingress.records import EventTooLarge, RunEnvelope
from reasonwire.workers.services.ingress.recognition import MalformedEvent, NotThisGrammar
from reasonwire.workers.services.ingress.publisher import IngressError, Publisher
from reasonwire.workers.io.kafka_security import client_kwargs
from reasonwire.workers.ops.metrics import GatewayCounts, GatewayMetrics, RequestMetrics, gateway_metrics
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.ops.settings import GatewaySettings  # the settings model; imported from here too
from reasonwire.workers.io.producer_config import DURABLE

__all__ = ["GatewaySettings", "create_app"]

log = logging.getLogger("reasonwire.gateway")

VIEWER = Path(__file__).with_name("viewer.html")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
PROBE_EVERY_S = 2.0
"""How often ``/readyz``'s view of Kafka and Redis is refreshed while they answer."""
PROBE_TIMEOUT_S = 2.0
RETRY_AFTER_S = 5
"""``Retry-After`` of a 503: the probes' backoff cap, the longest a recovery goes unnoticed."""
TRIM_AFTER_S = 2.0
"""Readers that left are followed by one heap trim this much later (one for a whole wave)."""
TRIM_EVERY_S = 30.0
DRAIN_S = 5.0
"""A refused ingest body is still read (and discarded) this long, so a client that sends its whole
body before reading the answer gets the answer rather than a reset connection."""


class ReaderDropped(Exception):
    """A reader that stopped reading (or could not get write budget) for ``client_stall_s``: its
    connection is closed without the stream's clean end, so it resumes with ``Last-Event-ID``."""


class ByteBudget:
    """The bytes all readers' writes may hold in flight together (``max_buffered_bytes``): a write
    waits for room (backpressure) rather than grow the process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._room = asyncio.Event()

    async def acquire(self, n: int, timeout: float) -> bool:
        """Take ``n`` bytes (at most the whole budget); False if no room came within ``timeout``."""
        n = min(n, self.limit)
        deadline = time.monotonic() + timeout
        while self.used + n > self.limit:
            self._room.clear()
            try:
                await asyncio.wait_for(self._room.wait(), deadline - time.monotonic())
            except TimeoutError:
                return False
        self.used += n
        return True

    def release(self, n: int) -> None:
        self.used -= min(n, self.limit)
        self._room.set()


class Lease:
    """One connected reader, counted from its request's arrival (while its run is looked up) until
    its response ends, however it ends: ``/healthz``'s ``clients``."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway: Gateway | None = gateway
        gateway.clients += 1

    def release(self) -> None:
        if self._gateway is not None:
            self._gateway.clients -= 1
            self._gateway.readers_left()
            self._gateway = None


def _libc() -> Any:
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _heap_trimmer() -> Callable[[], object] | None:
    """glibc's ``malloc_trim``, or None elsewhere. The pieces written to readers are freed as soon
    as they are sent, but glibc keeps freed heap pages (fragmented among live objects) in the
    process: trimming after readers leave gives them back to the system."""
    import ctypes

    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


class EventStreamResponse(StreamingResponse):
    """An SSE response written in bounded pieces, each within ``client_stall_s`` and the total
    budget, else the reader is dropped (:class:`ReaderDropped`: no clean end). The lease is
    released and the frames generator closed however the response ends."""

    def __init__(self, frames: AsyncIterator[bytes], gateway: Gateway, lease: Lease) -> None:
        super().__init__(frames, media_type="text/event-stream", headers=_SSE_HEADERS)
        self._gateway = gateway
        self._lease = lease
        self._frames = frames

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._lease.release()
            aclose = getattr(self._frames, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(RuntimeError):
                    await aclose()

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for piece in self._frames:
            await self._gateway.write(send, piece)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _QuietDrops(logging.Filter):
    """uvicorn logs every app exception with a traceback; a dropped reader is an expected event,
    logged once by the gateway itself (throttled), so uvicorn's copy is left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BaseExceptionGroup):
            return not exc.subgroup(lambda e: isinstance(e, ReaderDropped))
        return not isinstance(exc, ReaderDropped)


class Gateway:
    """The process-wide parts: key book, fan-out readers, producer, Redis, the health of both."""

    def __init__(self, settings: GatewaySettings, keys: KeyBook) -> None:
        self.settings = settings
        self.keys = keys
        self.fanout = Fanout(settings.kafka_bootstrap_servers, lookback_s=settings.lookback_s, max_runs=settings.max_runs)
        self.budget = ByteBudget(settings.max_buffered_bytes)
        self.clients = 0
        """Connected readers (SSE responses, and requests still looking their run up)."""
        self.served = 0
        self.dropped = 0
        """Readers cut off for stalling (:class:`ReaderDropped`)."""
        self.kafka_ok = True
        self.redis_ok = True
        self.health = Degradation()
        self.raw_limit = DEFAULT_MAX_MESSAGE_BYTES
        """The largest raw record the topic and the producer take (read at start-up)."""
        self._watch: asyncio.Task[None] | None = None
        self._last_drop_log = 0.0
        self._trim = _heap_trimmer()
        self._trim_pending = False
        self._last_trim = float("-inf")
        self.counts = GatewayCounts()
        self.metrics = GatewayMetrics(self)

    def readers_left(self) -> None:
        """Give the memory of departed readers back: one trim :data:`TRIM_AFTER_S` after a reader
        leaves, at most one per :data:`TRIM_EVERY_S` (a trim walks the heap: ~30 ms for 500 MB)."""
        if self._trim is None or self._trim_pending:
            return
        self._trim_pending = True
        loop = asyncio.get_running_loop()

        def trim() -> None:
            self._trim_pending = False
            self._last_trim = loop.time()
            if self._trim is not None:
                self._trim()

        loop.call_at(max(loop.time() + TRIM_AFTER_S, self._last_trim + TRIM_EVERY_S), trim)

    async def start(self) -> None:
        """Clients are made here: aiokafka binds its objects to the running loop."""
        self.producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap_servers, **DURABLE, **client_kwargs())
        self.publisher = Publisher(producer=self.producer, deliver_timeout_s=self.settings.publish_timeout_s)
        self.redis = connect(self.settings.redis_url)
        await self.producer.start()
        await _ensure_requests_topic(self.settings)
        self.raw_limit = await _raw_record_limit(self.settings.kafka_bootstrap_servers)
        self._watch = asyncio.create_task(self._probe_forever(), name="gateway-probes")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await _bounded("probe task", self._watch)
        for name, closing in (("event readers", self.fanout.stop), ("producer", self.producer.stop), ("Redis client", self.redis.aclose)):
            await _bounded(name, closing())

    def principal(self, request: Request) -> Principal | None:
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key")
        return self.keys.principal(key)

    def stream(self, run: RunLog, after: int) -> AsyncIterator[bytes]:
        self.served += 1
        return run.follow(after, self.settings.keepalive_s, self.settings.client_chunk_bytes)

    async def write(self, send: Send, piece: bytes) -> None:
        """One piece to one reader, within the stall bound and the total budget (else :class:`ReaderDropped`)."""
        stall = self.settings.client_stall_s
        if not await self.budget.acquire(len(piece), stall):
            self._dropped("no write budget")
        try:
            async with asyncio.timeout(stall):  # no task per write (wait_for would make one)
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            self.counts.sent_bytes += len(piece)
        except TimeoutError:
            self._dropped("not reading")
        finally:
            self.budget.release(len(piece))
        # uvicorn's send returns at once, without a pause, to a reader that has gone: this is where
        # its departure (cancellation) arrives — else the loop would cut the whole rest of the run
        # into pieces for nobody. It also lets a fast reader's burst share the loop with the others.
        await asyncio.sleep(0)

    def _dropped(self, why: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log > 30:  # one line per 30 s however many readers stall
            self._last_drop_log = now
            log.warning("dropped a reader (%s for %gs; %d dropped so far): it resumes with Last-Event-ID", why, self.settings.client_stall_s, self.dropped)
        raise ReaderDropped(why)

    async def publish_request(self, value: bytes, key: bytes) -> None:
        """A run request on ``reasoning.requests.v1``, acknowledged within ``publish_timeout_s``
        (else :class:`TimeoutError`; the producer's own future is never cancelled)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.publish_timeout_s
        future = await asyncio.wait_for(self.producer.send(topics.REQUESTS, value, key=key), self.settings.publish_timeout_s)
        done, _ = await asyncio.wait([future], timeout=max(0.0, deadline - loop.time()))
        if not done:
            raise TimeoutError
        future.result()

    def event_limit(self, envelope: RunEnvelope) -> int:
        """The largest provider event of this run the raw topic takes: the record limit less the
        run's envelope (key and headers), capped by ``max_event_bytes``."""
        headers = envelope.headers(10**12, sse_event="x" * 64)
        limit = self.raw_limit - record_size(envelope.run_id.encode(), b"", headers)
        return min(limit, self.settings.max_event_bytes or limit)

    # -- readiness: Kafka and Redis probed, with backoff and jitter while they fail ----------

    async def _probe_forever(self) -> None:
        backoff = Backoff(initial_s=0.5, cap_s=float(RETRY_AFTER_S), rng=jitter())
        while True:
            failure = await self._probe()
            now = time.monotonic()
            if failure is None:
                backoff.reset()
                _log(self.health.succeeded(now), None)
                delay = PROBE_EVERY_S
            else:
                delay = backoff.next_delay()
                _log(self.health.failed(failure, now, delay), None)
            await asyncio.sleep(delay)

    async def _probe(self) -> ServiceFailure | None:
        """Kafka (cluster metadata) and Redis (PING), each within :data:`PROBE_TIMEOUT_S`; the first failure."""
        from redis.exceptions import RedisError

        failure = None
        try:
            await asyncio.wait_for(self.producer.client.fetch_all_metadata(), PROBE_TIMEOUT_S)
            self.kafka_ok = True
        except (KafkaError, OSError, TimeoutError) as exc:
            self.kafka_ok = False
            failure = ServiceFailure("kafka", type(exc).__name__)
        try:
            await asyncio.wait_for(self.redis.ping(), PROBE_TIMEOUT_S)
            self.redis_ok = True
        except (RedisError, OSError, TimeoutError) as exc:
            self.redis_ok = False
            failure = failure or ServiceFailure("redis", type(exc).__name__)
        return failure

    def readiness(self) -> dict[str, Any]:
        degraded = sum(1 for r in self.fanout.readers.values() if r.degraded)
        ready = self.kafka_ok and self.redis_ok and degraded == 0
        return {"ready": ready, "kafka": self.kafka_ok, "redis": self.redis_ok, "readers": len(self.fanout.readers), "readers_degraded": degraded}


def _log(report: Report | None, exc: BaseException | None) -> None:
    if report is not None:
        getattr(log, report.level)("gateway %s", report.message, exc_info=exc if report.traceback else None)


async def _ensure_requests_topic(settings: GatewaySettings) -> None:
    """The run-request topic, created only with ``RW_CREATE_TOPICS=true`` (else checked: a missing
    one is one line naming it) — where topics are provisioned, ``reasonwire topics apply`` does it."""
    from reasonwire.contracts.topic_plan import plan
    from reasonwire.workers.io.topics_admin import ensure

    specs = [s for s in plan(settings.partitions, settings.replication_factor) if s.name == topics.REQUESTS]
    await ensure(settings.kafka_bootstrap_servers, specs, create=settings.create_topics)


async def _raw_record_limit(bootstrap: str) -> int:
    """``reasoning.raw.v1``'s ``max.message.bytes``, capped by the producer's ``max.request.size``
    (1 MiB); Kafka's default when the config cannot be read."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from reasonwire.workers.io.topics_admin import admin_client

    admin = admin_client(bootstrap)
    try:
        await admin.start()
        for response in await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topics.RAW)]):
            for error_code, _, _, _, entries in response.resources:
                value = next((e[1] for e in entries if e[0] == "max.message.bytes"), None) if not error_code else None
                if value is not None and str(value).isdigit():
                    return min(int(value), DEFAULT_MAX_MESSAGE_BYTES)
    except KafkaError as exc:
        log.warning("could not read %s's max.message.bytes (%s): assuming Kafka's default", topics.RAW, type(exc).__name__)
    finally:
        await admin.close()
    return DEFAULT_MAX_MESSAGE_BYTES


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _unavailable(message: str) -> JSONResponse:
    """503 with ``Retry-After``: nothing was acknowledged; the same request may succeed later."""
    return JSONResponse({"error": message}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


def _audience(request: Request, principal: Principal) -> Audience | JSONResponse:
    name = request.query_params.get("audience", Audience.PUBLIC.value)
    try:
        audience = Audience(name)
    except ValueError:
        return _error(400, f"unknown audience {name!r}; one of: public, internal")
    if audience not in principal.audiences:
        return _error(403, f"this key does not grant the {audience.value} audience")
    return audience


def _authenticated(request: Request) -> tuple[Gateway, Principal] | JSONResponse:
    """The gateway and the key's principal, or the 401 every route answers without a known key."""
    gw: Gateway = request.app.state.gateway
    principal = gw.principal(request)
    if principal is None:
        return _error(401, "an API key is required (Authorization: Bearer <key>)")
    return gw, principal


def _reader(request: Request) -> tuple[Gateway, Principal, Audience] | JSONResponse:
    """As :func:`_authenticated`, plus the audience the caller asked for and is entitled to (400 / 403)."""
    caller = _authenticated(request)
    if isinstance(caller, Response):
        return caller
    audience = _audience(request, caller[1])
    if isinstance(audience, Response):
        return audience
    return (*caller, audience)


def _resume_after(request: Request) -> int:
    value = request.headers.get("last-event-id") or request.query_params.get("lastEventId") or ""
    return int(value) if value.strip().isdigit() else -1


def _ids(**ids: str) -> JSONResponse | None:
    """400 naming the first id outside the id grammar (nothing published, nothing looked up)."""
    for what, value in ids.items():
        try:
            check_id(what.replace("_", " "), value)
        except BadId as exc:
            return _error(400, str(exc))
    return None


async def _leased(gw: Gateway, answer: Callable[[Lease], Awaitable[Response]]) -> Response:
    """Count the reader from now; the lease passes to an :class:`EventStreamResponse`, or ends here."""
    lease = Lease(gw)
    try:
        response = await answer(lease)
    except BaseException:
        lease.release()
        raise
    if not isinstance(response, EventStreamResponse):
        lease.release()
    return response


async def run_events(request: Request) -> Response:
    access = _reader(request)
    if isinstance(access, Response):
        return access
    gw, principal, audience = access
    thread_id, run_id = request.path_params["thread_id"], request.path_params["run_id"]
    if bad := _ids(thread_id=thread_id, run_id=run_id):
        return bad

    async def answer(lease: Lease) -> Response:
        try:
            reader = await asyncio.wait_for(gw.fanout.reader(audience.topic, run_id), gw.settings.publish_timeout_s)
            run = await reader.find(principal.tenant, run_id, gw.settings.first_event_timeout_s)
        except LookupError:
            run = None
        except (KafkaError, OSError, TimeoutError):  # not "no such run": the partition could not be read in time
            return _unavailable("the run's partition could not be read in time (the broker is unreachable or slow); nothing is known about the run")
        if run is None or run.thread_id != thread_id:
            return _error(404, "no such run in this thread")
        after = _resume_after(request)
        if after >= 0:
            gw.counts.resumed += 1
        return EventStreamResponse(gw.stream(run, after), gw, lease)

    return await _leased(gw, answer)


async def agent(request: Request) -> Response:
    """``HttpAgent``: publish the run request, then stream the run the agent service produces."""
    from ag_ui.core import RunAgentInput

    access = _reader(request)
    if isinstance(access, Response):
        return access
    gw, principal, audience = access
    try:
        body = orjson.loads(await request.body())
        run_input = RunAgentInput.model_validate(body)
    except orjson.JSONDecodeError:
        return _error(400, "the body is not JSON")
    except ValidationError as exc:
        first = exc.errors()[0]
        return _error(422, f"not a RunAgentInput: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
    if bad := _ids(thread_id=run_input.thread_id, run_id=run_input.run_id):
        return bad
    if not gw.kafka_ok:
        return _unavailable("the run request cannot be published now (the broker is unreachable)")

    async def answer(lease: Lease) -> Response:
        try:
            reader = await asyncio.wait_for(gw.fanout.reader(audience.topic, run_input.run_id), gw.settings.publish_timeout_s)
        except LookupError:
            return _error(404, "no such run")
        except (KafkaError, OSError, TimeoutError):
            return _unavailable("the event topics cannot be read now (the broker is unreachable)")
        request_record = RunRequest(
            tenant=principal.tenant,
            thread_id=run_input.thread_id,
            run_id=run_input.run_id,
            audience=audience.value,
            input=body,
            requested_at_ms=int(time.time() * 1000),
        )
        try:
            await gw.publish_request(request_record.model_dump_json(by_alias=True).encode(), run_input.thread_id.encode())
        except (KafkaError, TimeoutError) as exc:
            return _unavailable(f"the run request could not be published ({type(exc).__name__})")

        async def events() -> AsyncIterator[bytes]:
            try:
                run = await reader.find(principal.tenant, run_input.run_id, gw.settings.first_event_timeout_s)
            except TimeoutError:
                run = None
            if run is None or run.thread_id != run_input.thread_id:
                error = {"type": "RUN_ERROR", "message": "no agent service answered this run request in time", "code": "agent_timeout"}
                yield b"data: " + orjson.dumps(error) + b"\n\n"
                return
            async for frame in gw.stream(run, -1):
                yield frame

        return EventStreamResponse(events(), gw, lease)

    return await _leased(gw, answer)


async def _drained(request: Request, response: Response) -> Response:
    """Read and discard what is left of a refused body (bounded: :data:`DRAIN_S`), then answer."""
    with contextlib.suppress(ClientDisconnect, RuntimeError, TimeoutError):
        async with asyncio.timeout(DRAIN_S):
            async for _ in request.stream():
                pass
    return response


async def ingest(request: Request) -> Response:
    """HTTP ingress: records go out as the chunked body arrives (one per provider event), after the
    grammar is recognised; refused before anything is published when it is not."""
    gw: Gateway = request.app.state.gateway

    async def refused(reason: str, response: Response) -> Response:
        gw.counts.ingest_refusals[reason] += 1  # reasonwire.gateway.ingest.refusals
        return await _drained(request, response)

    caller = _authenticated(request)
    if isinstance(caller, Response):
        return await refused("unauthenticated", caller)
    gw, principal = caller
    provider = request.path_params["provider"]
    if provider not in {g.value for g in Grammar}:
        known = ", ".join(g.value for g in Grammar)
        return await refused("unknown_grammar", _error(404, f"unknown provider grammar {provider!r}; one of: {known}"))
    run_id = request.headers.get("rw-run-id")
    if not run_id:
        return await refused("bad_request", _error(400, "the RW-Run-Id header is required"))
    thread_id = request.headers.get("rw-thread-id") or run_id
    if bad := _ids(run_id=run_id, thread_id=thread_id):
        return await refused("bad_request", bad)
    if not gw.kafka_ok:
        return await refused("unavailable", _unavailable("the broker is unreachable: nothing was published"))
    model, scope = request.headers.get("rw-model"), request.headers.get("rw-issuer-scope")
    issuer = request.headers.get("rw-issuer-provider") or None
    if issuer is not None and (bad := _ids(issuer_provider=issuer)):
        return await refused("bad_request", bad)
    limit = gw.event_limit(RunEnvelope(provider, run_id, thread_id, principal.tenant, model, scope, issuer))
    run = None
    try:
        async with gw.publisher.run(
            provider=provider, run_id=run_id, thread_id=thread_id, tenant=principal.tenant, model=model, issuer_scope=scope,
            issuer_provider=issuer, check_grammar=True, max_event_bytes=limit,
        ) as run:
            async for chunk in request.stream():
                gw.counts.ingest_bytes[provider] += len(chunk)
                await run.feed(chunk)
    except ClientDisconnect:
        published = _published(gw, provider, run)
        gw.counts.ingest_refusals["body_cut"] += 1
        return _error(400, f"the body ended before the request did: run {run_id} aborted after {published} events")
    except NotThisGrammar as exc:
        return await refused("not_this_grammar", _error(422, f"{exc}; nothing was published"))
    except MalformedEvent as exc:  # refused before its record; a run already started was aborted
        published = _published(gw, provider, run)
        after = "nothing was published" if not published else f"the run was aborted after {published} events"
        return await refused("malformed_event", _error(400, f"{exc}; {after}", line=exc.line, published=published))
    except EventTooLarge as exc:
        published = _published(gw, provider, run)
        after = "nothing was published" if not published else f"the run was aborted after {published} events"
        return await refused("too_large", _error(413, f"{exc}; {after}", limit=exc.limit, published=published))
    except IngressError as exc:
        published = _published(gw, provider, run)
        return await refused("unavailable", _unavailable(f"{exc}; {published} events acknowledged, the run was aborted"))
    assert run is not None
    _published(gw, provider, run)
    return JSONResponse({"run_id": run_id, "thread_id": thread_id, "published": run.published, "outcome": str(run.outcome)})


def _published(gw: Gateway, provider: str, run: Any) -> int:
    """The provider events the broker acknowledged for ``run`` (0 before it began), counted once
    in ``reasonwire.gateway.ingest.records``."""
    published = run.published if run is not None else 0
    gw.counts.ingest_records[provider] += published
    return int(published)


CAPABILITIES: dict[str, Any] = {
    "transport": {"streaming": True, "resumable": True},
    "reasoning": {"supported": True, "streaming": True, "encrypted": True},
}
"""What this gateway advertises (AG-UI ``AgentCapabilities``, wire shape). ``resumable``: a
reader cut off resumes with ``Last-Event-ID`` (or ``?lastEventId=``) after the last ``id:`` it
got — this gateway's extension; stock ``@ag-ui/client`` does not resume (docs/gateway.md)."""


async def capabilities(request: Request) -> Response:
    caller = _authenticated(request)
    if isinstance(caller, Response):
        return caller
    return JSONResponse(CAPABILITIES)


async def viewer(request: Request) -> Response:
    return HTMLResponse(VIEWER.read_text())


async def healthz(request: Request) -> Response:
    """Liveness (the process answers) and what it holds: ``/readyz`` says whether it can serve."""
    gw: Gateway = request.app.state.gateway
    body = {"ok": True, "clients": gw.clients, "served": gw.served, "dropped": gw.dropped, "readers": len(gw.fanout.readers), "buffered_bytes": gw.budget.used}
    return JSONResponse(body)


async def readyz(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    state = gw.readiness()
    return JSONResponse(state, status_code=200 if state["ready"] else 503)


def create_app(settings: GatewaySettings | None = None, keys: KeyBook | None = None) -> Starlette:
    settings = settings or GatewaySettings.from_env()
    gateway = Gateway(settings, keys if keys is not None else KeyBook.from_env(os.environ))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        logging.getLogger("uvicorn.error").addFilter(_QuietDrops())  # after uvicorn configured its loggers
        await gateway.start()
        app.state.gateway = gateway
        try:
            yield
        finally:
            await gateway.stop()

    routes = [
        Route("/v1/threads/{thread_id}/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/v1/agent", agent, methods=["POST"]),
        Route("/v1/ingest/{provider}", ingest, methods=["POST"]),
        Route("/v1/capabilities", capabilities, methods=["GET"]),
        Route("/v1/viewer", viewer, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", gateway_metrics, methods=["GET"]),  # Prometheus (reasonwire.workers.ops.metrics)
    ]
    middleware = [Middleware(RequestMetrics, metrics=gateway.metrics, access_log=settings.access_log)]  # outermost: every request counted
    if settings.origins:  # a browser app on another origin (HttpAgent, CopilotKit)
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "X-API-Key", "Content-Type", "Accept", "Last-Event-ID", "RW-Run-Id", "RW-Thread-Id", "RW-Model", "RW-Issuer-Scope", "RW-Issuer-Provider"],
                expose_headers=["Retry-After"],
                max_age=600,
            )
        )
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)


SHUTDOWN_STEP_S = 5.0
"""How long each client of the gateway gets to close at shutdown."""


async def _bounded(name: str, closing: Awaitable[Any]) -> None:
    """Close one client, giving up after :data:`SHUTDOWN_STEP_S`: Ctrl-C or SIGTERM must stop the
    gateway even when a client's close hangs (a Kafka reader stopping mid-fetch under a large
    backlog once held `make run`'s gateway for over 60 s after Ctrl-C). The task left behind
    dies with the process."""
    task = asyncio.ensure_future(closing)
    done, _ = await asyncio.wait({task}, timeout=SHUTDOWN_STEP_S)
    if not done:
        log.warning("shutdown: the %s did not close within %.0f s; going on", name, SHUTDOWN_STEP_S)
    elif not task.cancelled() and task.exception() is not None:
        log.warning("shutdown: closing the %s failed (%s)", name, type(task.exception()).__name__)
