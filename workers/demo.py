"""``reasonwire demo``: the whole pipeline on the sample streams, for ``make run``.

Starts a normalizer worker process against the configured Kafka and Redis,
publishes every sample provider stream to ``reasoning.raw.v1`` as an ingress
would, prints the normalized AG-UI events as they arrive on
``reasoning.events.v1`` and the artefacts the worker stored in Redis (described
by kind, size and hash — an opaque value is never printed, P8), then stops the
worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis

from contracts import topics
from contracts.grammars import Grammar
from workers.ingress import RunEnvelope, raw_records
from workers.normalize import ensure_topics
from workers.settings import WorkerSettings
from workers.sse import read_events
from workers.store import ArtefactStore
from workers.translators import implemented

SAMPLES = Path(os.environ.get("RW_SAMPLES", Path(__file__).resolve().parents[2] / "shared" / "fixtures"))


def main() -> int:
    settings = WorkerSettings.from_env()
    samples = sorted(p for g in implemented() for p in (SAMPLES / g.value).glob("*.jsonl"))
    if not samples:
        print(f"reasonwire demo: no sample streams under {SAMPLES}", file=sys.stderr)
        return 2
    partitions = asyncio.run(ensure_topics(settings))
    log_path = Path(tempfile.gettempdir()) / f"reasonwire-demo-worker-{os.getpid()}.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "workers.cli", "worker", "normalize"], stdout=log, stderr=subprocess.STDOUT)
    print(f"worker log: {log_path}", file=sys.stderr)
    try:
        _wait_for_assignment(worker, log_path)
        return asyncio.run(_publish_and_show(settings, samples, partitions[topics.EVENTS]))
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
        print("worker stopped", file=sys.stderr)


def _wait_for_assignment(worker: subprocess.Popen[bytes], log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        if b"assigned to partitions" in log_path.read_bytes():
            print("worker started and owns the raw topic's partitions", file=sys.stderr)
            return
        time.sleep(0.2)
    raise SystemExit(f"the worker did not start (exit status {worker.poll()}); see {log_path}")


async def _publish_and_show(settings: WorkerSettings, samples: list[Path], event_partitions: int) -> int:
    tag = uuid.uuid4().hex[:6]
    runs = {
        f"demo-{tag}-{p.parent.name}-{p.stem}": RunEnvelope(Grammar(p.parent.name).value, f"demo-{tag}-{p.parent.name}-{p.stem}", f"thread-{tag}-{p.parent.name}-{p.stem}", tenant="demo")
        for p in samples
    }
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=None)
    await consumer.start()
    partitions = [TopicPartition(topics.EVENTS, p) for p in range(event_partitions)]
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    for tp in partitions:  # resolve the end offsets now, before anything is published
        await consumer.position(tp)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
    await producer.start()
    try:
        for path, run in zip(samples, runs.values(), strict=True):
            with path.open() as f:
                for record in raw_records(run, read_events(f)):
                    await producer.send(topics.RAW, record.value, key=record.key, headers=record.headers)
        await producer.flush()
        print(f"published {len(samples)} sample streams to {topics.RAW}", file=sys.stderr)
        await _show_events(consumer, set(runs))
    finally:
        await producer.stop()
        await consumer.stop()
    await _show_artefacts(settings, runs.values())
    if gateway := os.environ.get("RW_GATEWAY_URL"):  # `make run` starts `reasonwire gateway` (docs/gateway.md)
        print(f"\nviewer (gateway {gateway}, tenant 'demo'; key in the URL fragment, never sent):")
        for run in runs.values():
            print(f"  {gateway}/v1/viewer?thread={run.thread_id}&run={run.run_id}&audience=internal#key={os.environ.get('RW_DEMO_KEY', '')}")
    return 0


async def _show_events(consumer: AIOKafkaConsumer, pending: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            for m in records:
                headers = {k: v.decode() for k, v in m.headers}
                run_id = headers.get("rw-run-id", "")
                if run_id not in pending:
                    continue
                event = orjson.loads(m.value)
                print(f"{run_id:<60} #{headers['rw-event-seq']:>3} {_summary(event)}")
                if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
                    pending.discard(run_id)
    if pending:
        raise SystemExit(f"no terminal event within {timeout:g}s for: {', '.join(sorted(pending))}")


def _summary(event: dict[str, object]) -> str:
    kind = str(event["type"])
    if kind == "REASONING_ENCRYPTED_VALUE":
        return f"{kind} subtype={event['subtype']} entityId={event['entityId']} ({len(str(event['encryptedValue']))} chars, not shown)"
    detail = event.get("delta") or event.get("toolCallName") or event.get("code") or ""
    return f"{kind} {str(detail)[:60]!r}" if detail else kind


async def _show_artefacts(settings: WorkerSettings, runs: object) -> None:
    redis = Redis.from_url(settings.redis_url)
    store = ArtefactStore(redis, artefact_ttl_s=settings.artefact_ttl_s, journal_ttl_s=settings.journal_ttl_s)
    try:
        print("\nartefacts stored in Redis (tenant 'demo'):")
        for run in runs:  # type: ignore[attr-defined]
            for record in await store.thread_artefacts(run.tenant, run.thread_id):
                print(f"  {run.thread_id:<40} {record.entity_id:<60} {record.describe()}")
    finally:
        await redis.aclose()
