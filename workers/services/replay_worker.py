"""The replay worker: ``reasoning.replay.requests.v1`` → the thread's artefacts in Redis → a reply.

A thin FastStream adapter around :func:`reasonwire.workers.replay.replay` (contracts:
:mod:`reasonwire.contracts.replay`). Per request: validate it at the boundary, read the
thread's artefacts for the request's tenant only (keys are tenant-namespaced, so
no request can reach another tenant's state), replay, publish the
:class:`~reasonwire.contracts.replay.ReplayReply` to ``reply_to`` (default
``reasoning.replay.replies.v1``) keyed by ``request_id``, then commit. A bad
request or a replay that fails before the call is answered with ``ok: false``
and a code, never dropped; an infrastructure failure (Redis, the broker) is
retried in place with a jittered backoff, logging state changes only
(:class:`~reasonwire.workers.ops.retry.Retrying`: a NACK would be redelivered at once,
thousands of times a second with a traceback each). Requests are
read from the group's committed offset, or from the end for a new group: a
caller waits for its reply, and answering requests nobody waits for any more
helps no one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pydantic import ValidationError

from reasonwire.contracts import topics
from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.replay import ReplayIssue, ReplayReply, ReplayRequest
from reasonwire.contracts.topic_plan import plan
from reasonwire.workers.io import topics_admin
from reasonwire.workers.ops.health import HealthServer, install_log_throttle
from reasonwire.workers.io.kafka_security import broker_security, servers
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.replay import ReplayError, read_history, replay
from reasonwire.workers.io.replay_sources import read_thread
from reasonwire.workers.ops.retry import Retrying
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.ops.telemetry import Telemetry, setup_telemetry
from reasonwire.workers.ops.telemetry.replay import ReplayTelemetry
from reasonwire.workers.io.producer_config import DURABLE

log = logging.getLogger("reasonwire.replay")



def parse_request(raw: bytes) -> ReplayRequest | ReplayReply:
    """The request, or the reply that refuses it (``invalid_request``) when it breaks the contract."""
    try:
        return ReplayRequest.model_validate_json(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "request"
        request_id = _request_id(raw)
        return ReplayReply(
            request_id=request_id,
            ok=False,
            error=ReplayIssue(code="invalid_request", message=f"not a reasonwire.replay.request.v1 ({where}: {error['msg']})"),
        )


def thread_of(request: ReplayRequest) -> str | None:
    if request.thread_id:
        return request.thread_id
    try:
        return read_history(request.history)[1]
    except ReplayError:
        return None


def reply_for(request: ReplayRequest, artefacts: list[ArtefactRecord]) -> ReplayReply:
    """The replay of one request over the thread's records (sans-I/O)."""
    try:
        result = replay(
            request.history,
            artefacts,
            request.target,
            tenant=request.tenant,
            honour_client_omissions=request.honour_client_omissions,
        )
    except ReplayError as exc:
        return ReplayReply(
            request_id=request.request_id,
            ok=False,
            error=ReplayIssue(code=exc.code, message=exc.message, entity_id=exc.entity_id),
        )
    return ReplayReply(
        request_id=request.request_id,
        ok=True,
        fragment=result.fragment,
        warnings=[ReplayIssue(code=w.code, message=w.message, entity_id=w.entity_id) for w in result.warnings],
        counters=dict(result.counters),
    )


class ReplayWorker:
    """Answers replay requests from one process."""

    def __init__(
        self, broker: KafkaBroker, store: ArtefactStore, metrics: ReplayTelemetry | None = None, *, retrying: Retrying | None = None
    ) -> None:
        self.broker = broker
        self.store = store
        self.metrics = metrics
        self.stats: dict[str, int] = {"requests": 0, "refused": 0}
        self.retrying = retrying or Retrying(log)

    async def answer(self, raw: bytes) -> ReplayReply:
        """:meth:`handle`, an infrastructure failure retried in place with backoff until it goes
        through: the request keeps its place (nothing redelivered, no tight loop) and the log
        says ``degraded`` / ``recovered`` once."""
        return await self.retrying.run(lambda: self.handle(raw))

    async def handle(self, raw: bytes) -> ReplayReply:
        parsed = parse_request(raw)
        reply_to = topics.REPLAY_REPLIES
        if isinstance(parsed, ReplayReply):
            reply = parsed
        else:
            reply_to = parsed.reply_to or reply_to
            thread_id = thread_of(parsed)
            if thread_id is None:
                reply = ReplayReply(
                    request_id=parsed.request_id,
                    ok=False,
                    error=ReplayIssue(code="invalid_request", message="no thread_id and the history names no threadId"),
                )
            else:
                reply = reply_for(parsed, await read_thread(self.store, parsed.tenant, thread_id))
                if self.metrics is not None and reply.counters:
                    self.metrics.record(parsed.target.grammar, reply.counters)  # drops by issuer (R8)
        self.stats["requests"] += 1
        self.stats["refused"] += not reply.ok
        if not reply.ok and reply.error is not None:
            log.warning("replay %s refused: %s", reply.request_id, reply.error.message)  # content-free (P8)
        for warning in reply.warnings:
            log.info("replay %s: %s", reply.request_id, warning.message)
        body = reply.model_dump_json(by_alias=True, exclude_none=True).encode()
        await self.broker.publish(body, reply_to, key=reply.request_id.encode())
        return reply


async def ensure_replay_topics(settings: WorkerSettings) -> None:
    """The replay topics as the plan has them (contracts/topic_plan.py), created only with
    ``RW_CREATE_TOPICS=true``; else checked (:class:`~reasonwire.workers.io.topics_admin.TopicsMissing`)."""
    specs = [s for s in plan(settings.partitions, topics_admin.replication_factor()) if s.name in topics.REPLAY]
    await topics_admin.ensure(settings.kafka_bootstrap_servers, specs, create=topics_admin.create_enabled())


async def replay_readiness(broker: KafkaBroker, store: ArtefactStore, worker: ReplayWorker | None = None) -> dict[str, Any]:
    """``/readyz`` of a replay worker: Redis answers ``PING``, the broker answers a ping and no
    request is being retried."""
    body: dict[str, Any] = {}
    degraded = worker.retrying.degraded if worker is not None else None
    try:
        await asyncio.wait_for(store.redis.ping(), 1.0)
        body["redis"] = "ok"
    except Exception as exc:
        body["redis"] = type(exc).__name__
    try:
        body["kafka"] = "ok" if await asyncio.wait_for(broker.ping(timeout=2.0), 3.0) else "unreachable"
    except Exception as exc:
        body["kafka"] = type(exc).__name__
    body["degraded"] = degraded
    body["ready"] = body["redis"] == "ok" and body["kafka"] == "ok" and degraded is None
    return body


def create_app(settings: WorkerSettings | None = None, telemetry: Telemetry | None = None) -> tuple[FastStream, ReplayWorker]:
    settings = settings or WorkerSettings.from_env()
    telemetry = telemetry or setup_telemetry()
    metrics = ReplayTelemetry(telemetry)
    broker = KafkaBroker(servers(settings.kafka_bootstrap_servers), security=broker_security(), **DURABLE)
    store = ArtefactStore(connect(settings.redis_url), artefact_ttl_s=settings.artefact_ttl_s, journal_ttl_s=settings.journal_ttl_s)
    worker = ReplayWorker(broker, store, metrics, retrying=Retrying(log, initial_s=settings.backoff_initial_s, cap_s=settings.backoff_max_s))

    @broker.subscriber(
        topics.REPLAY_REQUESTS,
        group_id=settings.replay_group_id,
        auto_offset_reset="latest",
        ack_policy=AckPolicy.NACK_ON_ERROR,
    )
    async def on_request(body: Any, msg: KafkaMessage) -> None:
        await worker.answer(msg.body)  # the raw bytes: the contract is validated here, not by FastStream

    app = FastStream(broker, logger=log)

    health: dict[str, HealthServer] = {}

    @app.on_startup
    async def _topics() -> None:
        if settings.health_port:  # the same probes as the normalizer's (deploy/helm: liveness, readiness), and /metrics
            health["server"] = HealthServer(lambda: replay_readiness(broker, store, worker), host=settings.health_host, port=settings.health_port, metrics=telemetry.scrape)
            await health["server"].start()
        await topics_admin.wait_for_topics(lambda: ensure_replay_topics(settings), health.get("server"))  # missing: not ready, wait

    @app.on_shutdown
    async def _close() -> None:
        if "server" in health:
            await health.pop("server").stop()
        await store.aclose()

    return app, worker


def run(settings: WorkerSettings | None = None) -> None:
    """``reasonwire worker replay``: run until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    install_log_throttle()  # aiokafka logs every failed connection attempt (as the normalizer)
    app, _ = create_app(settings)
    with topics_admin.start_failures(log):
        asyncio.run(app.run())


def _request_id(raw: bytes) -> str:
    """The request id of a request that breaks the contract, if one can be read, so its caller hears back."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "unknown"
    request_id = value.get("request_id") if isinstance(value, dict) else None
    return request_id if isinstance(request_id, str) and request_id else "unknown"
