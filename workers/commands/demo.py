"""``reasonwire demo``: the whole pipeline on the sample streams, for ``make run``.

Starts a normalizer worker process against the configured Kafka and Redis,
publishes the sample provider streams to ``reasoning.raw.v1`` as an ingress
would, prints the normalized AG-UI events as they arrive on
``reasoning.events.v1`` and a table of the artefacts the worker stored in Redis
(kind, entity, size and a sha256 prefix — an opaque value is never printed,
P8), then stops the worker.

The samples ship with the package (``samples/<grammar>/`` beside this module: the two
article cases of each grammar, links to ``tests/fixtures/`` in the repository that the
wheel carries as files), so a bare clone and a ``pip install`` both run the demo;
``RW_SAMPLES`` names another folder of ``<grammar>/*.jsonl`` streams instead.
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
from collections.abc import Iterable
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from reasonwire.contracts import topics
from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.kafka_security import client_kwargs
from reasonwire.workers.services.startup import ensure_topics
from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.ops.settings import DemoSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.translators import implemented
from reasonwire.workers.io.producer_config import DURABLE

SAMPLES = Path(__file__).with_name("samples")
"""The package's sample streams (package data: present in a checkout and in an installed wheel)."""
SAMPLE_CASES = ("a_reasoning_then_answer", "b_reasoning_then_tool_call")
"""The article's two cases: reasoning then an answer, reasoning then a tool call. The other
fixtures (errors, interruptions, unknown events) are test material, not a demo."""


def sample_streams(folder: str | None = None) -> tuple[Path, list[Path]]:
    """Where the samples come from and the streams to publish, in a stable order: every
    ``<grammar>/*.jsonl`` of ``folder`` when one is named, else the repository's sample cases."""
    if folder:
        root = Path(folder)
        return root, sorted(p for g in implemented() for p in (root / g.value).glob("*.jsonl"))
    return SAMPLES, [p for g in implemented() for c in SAMPLE_CASES if (p := SAMPLES / g.value / f"{c}.jsonl").exists()]


def main(settings: DemoSettings | None = None) -> int:
    settings = settings or DemoSettings.from_env()
    root, samples = sample_streams(settings.samples)
    if not samples:  # only a named folder can be empty: the package's own samples ship with it
        print(f"reasonwire demo: no sample streams under {root} (RW_SAMPLES: expected <grammar>/*.jsonl there)", file=sys.stderr)
        return 2
    partitions = asyncio.run(ensure_topics(settings))
    log_path = Path(tempfile.gettempdir()) / f"reasonwire-demo-worker-{os.getpid()}.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "reasonwire.workers.cli", "worker", "normalize"], stdout=log, stderr=subprocess.STDOUT)
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


async def _publish_and_show(settings: DemoSettings, samples: list[Path], event_partitions: int) -> int:
    tag = uuid.uuid4().hex[:6]
    runs = {
        f"demo-{tag}-{p.parent.name}-{p.stem}": RunEnvelope(Grammar(p.parent.name).value, f"demo-{tag}-{p.parent.name}-{p.stem}", f"thread-{tag}-{p.parent.name}-{p.stem}", tenant="demo")
        for p in samples
    }
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=None, **client_kwargs())
    await consumer.start()
    partitions = [TopicPartition(topics.EVENTS, p) for p in range(event_partitions)]
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    for tp in partitions:  # resolve the end offsets now, before anything is published
        await consumer.position(tp)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, **DURABLE, **client_kwargs())
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
    await _show_artefacts(settings, [(f"{p.parent.name}/{p.stem}", run) for p, run in zip(samples, runs.values(), strict=True)])
    if gateway := settings.gateway_url:  # `make run` starts `reasonwire gateway` (docs/gateway.md)
        print(f"\nviewer (gateway {gateway}, tenant 'demo'; key in the URL fragment, never sent):")
        for run in runs.values():
            print(f"  {gateway}/v1/viewer?thread={run.thread_id}&run={run.run_id}&audience=internal#key={settings.demo_key or ''}")
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


async def _show_artefacts(settings: DemoSettings, runs: list[tuple[str, RunEnvelope]]) -> None:
    """The artefacts each sample's run stored, read back from Redis as replay would read them."""
    store = ArtefactStore(connect(settings.redis_url), artefact_ttl_s=settings.artefact_ttl_s, journal_ttl_s=settings.journal_ttl_s)
    try:
        found = [(sample, record) for sample, run in runs for record in await store.thread_artefacts(run.tenant, run.thread_id)]
    finally:
        await store.aclose()
    print("\nartefacts stored in Redis (tenant 'demo'; values are never shown, only their size and sha256 prefix):")
    for line in artefact_table(found):
        print(f"  {line}")


ARTEFACT_COLUMNS = ("sample", "entity", "kind", "subtype", "bytes", "sha256", "complete")


def artefact_table(rows: Iterable[tuple[str, ArtefactRecord]]) -> list[str]:
    """One aligned line per (sample, artefact) under a header, from ``describe()`` (kind, size,
    hash — never the value, P8); sizes right-aligned so they compare at a glance."""
    cells = [ARTEFACT_COLUMNS]
    for sample, record in rows:
        d = record.describe()
        cells.append((sample, record.entity_id, d["kind"], d["subtype"], str(d["bytes"]), d["sha256"], "yes" if d["complete"] else "no"))
    if len(cells) == 1:
        return ["(none)"]
    widths = [max(len(row[i]) for row in cells) for i in range(len(ARTEFACT_COLUMNS))]
    right = {ARTEFACT_COLUMNS.index("bytes")}
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in cells]
