"""An example agent service: run requests in, a provider stream out — the whole loop offline.

    python examples/agent_service.py --provider anthropic-messages --model claude-opus-4-5 \
        --script turn1.jsonl --script turn2.jsonl [--requests-log requests.jsonl]

For each run request on ``reasoning.requests.v1`` (``contracts/run_request.py``,
published by ``POST /v1/agent`` on the gateway) it does what a real agent service
does before calling its provider:

1. builds the provider input for the next turn with replay (``reasonwire.workers.replay``):
   the client's AG-UI history plus the thread's stored artefacts — opaque state
   restored only for the provider and model family that issued it (R8);
2. "calls the provider": instead of the network it answers with a recorded
   provider stream (the Nth ``--script`` for the thread's Nth request), published
   through the ingress client (``reasonwire.workers.services.ingress.publisher``) under the request's run
   id, thread id and tenant — so the gateway streams it back to the caller.

``--requests-log`` appends each provider request body it built (one JSON line), so
a test can check that the opaque state reached the provider input byte for byte.
Kafka and Redis from ``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from pydantic import ValidationError

from reasonwire.contracts import topics
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.contracts.run_request import RunRequest
from reasonwire.workers.services.ingress.publisher import Publisher
from reasonwire.workers.io.kafka_security import client_kwargs
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.replay import ReplayError, replay
from reasonwire.workers.io.replay_sources import read_thread
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.store import ArtefactStore

log = logging.getLogger("agent_service")


class AgentService:
    def __init__(self, args: argparse.Namespace, settings: WorkerSettings) -> None:
        self.grammar = Grammar(args.provider)
        self.model = args.model
        self.scripts = [Path(p) for p in args.script]
        self.requests_log = Path(args.requests_log) if args.requests_log else None
        self.settings = settings
        self.started_ms = int(time.time() * 1000)
        self.turns: dict[tuple[str, str], int] = {}
        """(tenant, thread) → requests answered: the Nth request gets the Nth script."""

    async def serve(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            topics.REQUESTS,
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
            group_id="reasonwire-example-agent",
            auto_offset_reset="earliest",
            **client_kwargs(),  # SASL / TLS from KAFKA_* (reasonwire.workers.io.kafka_security), as every client of the package
        )
        redis = connect(self.settings.redis_url)  # a Redis Cluster URL too (reasonwire.workers.io.redis_connect)
        store = ArtefactStore(redis, artefact_ttl_s=self.settings.artefact_ttl_s, journal_ttl_s=self.settings.journal_ttl_s)
        await consumer.start()
        try:
            async with Publisher(self.settings.kafka_bootstrap_servers) as publisher:
                print("agent service ready", flush=True)
                while not stop.is_set():
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        for record in records:
                            await self.handle(record.value, store, publisher)
                    await consumer.commit()
        finally:
            await consumer.stop()
            await redis.aclose()

    async def handle(self, value: bytes, store: ArtefactStore, publisher: Publisher) -> None:
        try:
            request = RunRequest.model_validate_json(value)
        except ValidationError as exc:
            log.warning("skipped a record that is not a run request (%d errors)", exc.error_count())
            return
        if request.requested_at_ms < self.started_ms - 5_000:
            return  # asked before this service started: its caller has given up
        body = await self.provider_request(request, store)
        if body is None:
            return
        turn = self.turns[(request.tenant, request.thread_id)] = self.turns.get((request.tenant, request.thread_id), 0) + 1
        script = self.scripts[min(turn, len(self.scripts)) - 1]
        async with publisher.run(
            provider=self.grammar.value, run_id=request.run_id, thread_id=request.thread_id, tenant=request.tenant, model=self.model
        ) as run:
            with script.open("rb") as recorded:  # the provider's answer, as its SDK's raw stream yields lines
                for line in recorded:
                    await run.send(line.rstrip(b"\n"))
        print(f"answered run {request.run_id} (turn {turn}) with {script.name}: {run.published} events", flush=True)

    async def provider_request(self, request: RunRequest, store: ArtefactStore) -> dict[str, Any] | None:
        """The body this service would send its provider: model + the replayed history."""
        artefacts = await read_thread(store, request.tenant, request.thread_id)
        try:
            result = replay(request.input, artefacts, ReplayTarget(grammar=self.grammar, model=self.model), tenant=request.tenant)
        except ReplayError as exc:
            print(f"run {request.run_id}: replay failed before the call: {getattr(exc, 'message', exc)}", flush=True)
            return None
        for warning in result.warnings:
            print(f"run {request.run_id}: replay warning: {warning.message}", flush=True)
        body = {"model": self.model, "stream": True, **result.fragment}
        if self.requests_log is not None:
            with self.requests_log.open("a") as out:
                out.write(json.dumps({"run_id": request.run_id, "thread_id": request.thread_id, "body": body}) + "\n")
        return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", required=True, choices=[g.value for g in Grammar])
    parser.add_argument("--model", required=True, help="the model the recorded streams came from (the artefacts' issuer)")
    parser.add_argument("--script", action="append", required=True, help="recorded provider stream for turn N (repeat)")
    parser.add_argument("--requests-log", help="append each built provider request body here (JSONL)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    service = AgentService(args, WorkerSettings.from_env())

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await service.serve(stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
