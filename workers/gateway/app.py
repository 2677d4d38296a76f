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
* ``GET /v1/viewer`` — a minimal page rendering a run as it streams.
* ``GET /healthz`` — readers and clients of this process.

Every ``/v1`` data route needs an API key (401 without one). A run or thread of
another tenant is a 404 — indistinguishable from one that does not exist.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from reasonwire.contracts import topics
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.run_request import RunRequest
from reasonwire.workers.gateway.fanout import Fanout, RunLog
from reasonwire.workers.gateway.keys import Audience, KeyBook, Principal
from reasonwire.workers.ingress_client import IngressError, Publisher
from reasonwire.workers.kafka_security import client_kwargs
from reasonwire.workers.metrics import gateway_metrics
from reasonwire.workers.redis_connect import connect
from reasonwire.workers.settings import GatewaySettings  # the settings model (issue 23 item 8); imported from here too

VIEWER = Path(__file__).with_name("viewer.html")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class Gateway:
    """The process-wide parts: key book, fan-out readers, producer, Redis (thread ownership)."""

    def __init__(self, settings: GatewaySettings, keys: KeyBook) -> None:
        self.settings = settings
        self.keys = keys
        self.fanout = Fanout(settings.kafka_bootstrap_servers, lookback_s=settings.lookback_s, max_runs=settings.max_runs)
        self.clients = 0
        self.served = 0

    async def start(self) -> None:
        """Clients are made here: aiokafka binds its objects to the running loop."""
        self.producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap_servers, acks="all", enable_idempotence=True, **client_kwargs())
        self.publisher = Publisher(producer=self.producer)
        self.redis = connect(self.settings.redis_url)
        await self.producer.start()
        await _ensure_requests_topic(self.settings)

    async def stop(self) -> None:
        await self.fanout.stop()
        await self.producer.stop()
        await self.redis.aclose()

    def principal(self, request: Request) -> Principal | None:
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key")
        return self.keys.principal(key)

    async def claim_thread(self, tenant: str, thread_id: str) -> bool:
        """A thread belongs to the first tenant that used it (Redis ``SET NX``); False for another's."""
        key = f"rw:gw:thread:{{{thread_id}}}"
        await self.redis.set(key, tenant, nx=True, ex=int(self.settings.lookback_s) + 7 * 24 * 3600)
        owner = await self.redis.get(key)
        return owner is not None and owner.decode() == tenant

    async def stream(self, run: RunLog, after: int) -> AsyncIterator[bytes]:
        self.clients += 1
        self.served += 1
        try:
            async for frame in run.follow(after, self.settings.keepalive_s):
                yield frame
        finally:
            self.clients -= 1


async def _ensure_requests_topic(settings: GatewaySettings) -> None:
    """The run-request topic, created only with ``RW_CREATE_TOPICS=true`` (else checked: a missing
    one is one line naming it) — where topics are provisioned, ``reasonwire topics apply`` does it."""
    from reasonwire.contracts.topic_plan import plan
    from reasonwire.workers.topics_admin import ensure

    specs = [s for s in plan(settings.partitions, settings.replication_factor) if s.name == topics.REQUESTS]
    await ensure(settings.kafka_bootstrap_servers, specs, create=settings.create_topics)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


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


async def run_events(request: Request) -> Response:
    access = _reader(request)
    if isinstance(access, Response):
        return access
    gw, principal, audience = access
    thread_id, run_id = request.path_params["thread_id"], request.path_params["run_id"]
    try:
        reader = await gw.fanout.reader(audience.topic, run_id)
        run = await reader.find(principal.tenant, run_id, gw.settings.first_event_timeout_s)
    except (LookupError, KafkaError, TimeoutError):
        run = None
    if run is None or run.thread_id != thread_id:
        return _error(404, "no such run in this thread")
    return StreamingResponse(gw.stream(run, _resume_after(request)), media_type="text/event-stream", headers=_SSE_HEADERS)


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
    if not await gw.claim_thread(principal.tenant, run_input.thread_id):
        return _error(404, "no such thread")
    reader = await gw.fanout.reader(audience.topic, run_input.run_id)
    request_record = RunRequest(
        tenant=principal.tenant,
        thread_id=run_input.thread_id,
        run_id=run_input.run_id,
        audience=audience.value,
        input=body,
        requested_at_ms=int(time.time() * 1000),
    )
    try:
        await gw.producer.send_and_wait(
            topics.REQUESTS, request_record.model_dump_json(by_alias=True).encode(), key=run_input.thread_id.encode()
        )
    except KafkaError as exc:
        return _error(503, f"the run request could not be published ({type(exc).__name__})")

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

    return StreamingResponse(events(), media_type="text/event-stream", headers=_SSE_HEADERS)


async def ingest(request: Request) -> Response:
    """HTTP ingress: records go out as the chunked body arrives (one per provider event)."""
    caller = _authenticated(request)
    if isinstance(caller, Response):
        return caller
    gw, principal = caller
    provider = request.path_params["provider"]
    if provider not in {g.value for g in Grammar}:
        return _error(404, f"unknown provider grammar {provider!r}")
    run_id = request.headers.get("rw-run-id")
    if not run_id:
        return _error(400, "the RW-Run-Id header is required")
    thread_id = request.headers.get("rw-thread-id") or run_id
    if not await gw.claim_thread(principal.tenant, thread_id):
        return _error(404, "no such thread")
    try:
        async with gw.publisher.run(
            provider=provider,
            run_id=run_id,
            thread_id=thread_id,
            tenant=principal.tenant,
            model=request.headers.get("rw-model"),
            issuer_scope=request.headers.get("rw-issuer-scope"),
        ) as run:
            async for chunk in request.stream():
                await run.feed(chunk)
    except ClientDisconnect:
        return _error(400, f"the body ended before the request did: run {run_id} aborted after {run.published} events")
    except IngressError as exc:
        return _error(503, str(exc))
    return JSONResponse({"run_id": run_id, "thread_id": thread_id, "published": run.published, "outcome": str(run.outcome)})


async def viewer(request: Request) -> Response:
    return HTMLResponse(VIEWER.read_text())


async def healthz(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    return JSONResponse({"ok": True, "clients": gw.clients, "served": gw.served, "readers": len(gw.fanout.readers)})


def create_app(settings: GatewaySettings | None = None, keys: KeyBook | None = None) -> Starlette:
    settings = settings or GatewaySettings.from_env()
    gateway = Gateway(settings, keys if keys is not None else KeyBook.from_env(os.environ))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
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
        Route("/v1/viewer", viewer, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", gateway_metrics, methods=["GET"]),  # Prometheus (reasonwire.workers.metrics; issue 23 item 6)
    ]
    return Starlette(routes=routes, lifespan=lifespan)
