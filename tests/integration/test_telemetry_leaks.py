"""P8 on the real broker and Redis: nothing opaque (nor readable reasoning) escapes into telemetry.

The real FastStream app (``reasonwire.workers.services.normalizer_app.create_app``) runs in this process
against the project's Kafka and Redis, with an in-memory span exporter, an
in-memory metric reader and log capture on every handler FastStream and our
code log to, at DEBUG. Every fixture is sent through it, plus a record with
broken headers (DLQ). The store is made to fail once with an exception whose
message quotes artefact values, so the FastStream error log, the exception
text and the span status of that batch are exercised too; the worker nacks,
the poll is redelivered and the runs still finish.

Oracle: the offline translator's artefact values and reasoning text for each
fixture (itself checked against expected.json). None of them, nor any
4-byte-aligned 24-character slice of them, nor any single reasoning delta of
12 characters or more, may appear in span names, attributes, events, links,
status, resource, metric labels or log output.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import fixture_paths, translate_file
from tests.integration.conftest import Collector, send
from reasonwire.workers.core.normalizer import Step
from reasonwire.workers.services.ingress.records import OutgoingRecord, RunEnvelope, raw_records
from reasonwire.workers.services import normalizer_app
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.ops.telemetry import setup_telemetry
from reasonwire.workers.ops.telemetry.registry import SLICE, STRIDE
from reasonwire.workers.translators import implemented

pytestmark = pytest.mark.integration

FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
LOGGERS = ("", "faststream", "faststream.access", "faststream.access.kafka", "reasonwire.normalize", "aiokafka", "redis")


class StoreOutage(Exception):
    """What a careless Redis client error looks like: the command's arguments in the message."""


class Capture(logging.Handler):
    """Every line as a handler would write it: message, exception text, stack info."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _needles(texts: list[str]) -> set[str]:
    """Each text, and every 4-byte-aligned 24-character slice of it."""
    found = set()
    for text in texts:
        found.add(text)
        found.update(text[i : i + SLICE] for i in range(0, len(text) - SLICE + 1, STRIDE))
    return found


def _reasoning_texts(events: list[dict[str, Any]]) -> list[str]:
    by_message: dict[str, str] = {}
    for event in events:
        if event["type"] == "REASONING_MESSAGE_CONTENT":
            by_message[event["messageId"]] = by_message.get(event["messageId"], "") + event["delta"]
    return [t for t in by_message.values() if len(t) >= SLICE]


def _deltas(events: list[dict[str, Any]]) -> list[str]:
    """Reasoning deltas long enough not to occur by chance: one event's worth of reasoning."""
    return [e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT" and len(e["delta"].strip()) >= 12]


def _span_texts(span: ReadableSpan) -> list[str]:
    texts = [span.name, str(span.status.description), repr(dict(span.attributes or {}))]
    texts += [repr(dict(span.resource.attributes))]
    for event in span.events:
        texts += [event.name, repr(dict(event.attributes or {}))]
    for link in span.links:
        texts.append(repr(dict(link.attributes or {})))
    return texts


def _worker_done(spans: InMemorySpanExporter, metrics: InMemoryMetricReader, run_ids: list[str]) -> bool:
    """This process's worker ended every run and dead-lettered the bad record (a broker shared
    with other consumer groups may publish the same events first: the Collector alone proves nothing).
    The bad record belongs to no run, so no span covers it: the dead-letter counter says it."""
    finished = spans.get_finished_spans()
    ended = {s.attributes.get("reasonwire.run.id") for s in finished if s.name == "reasonwire.run"}
    if not all(r in ended for r in run_ids):
        return False
    data = metrics.get_metrics_data()
    return any(
        p.attributes.get("reasonwire.dlq.cause") == "envelope"
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "reasonwire.dlq.records"
        for p in m.data.data_points
    )


async def _until(done: Any, timeout: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting for the worker"
        await asyncio.sleep(0.2)


def _run(path: Path) -> tuple[RunEnvelope, list[OutgoingRecord]]:
    run = RunEnvelope(path.parent.name, f"otel-{path.stem}-{uuid.uuid4().hex[:6]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme", model="test-model")
    with path.open() as f:
        records = list(raw_records(run, read_events(f)))
    traced = [("traceparent", TRACEPARENT.encode())]
    return run, [OutgoingRecord(r.key, r.value, [*r.headers, *traced]) for r in records]


async def test_no_artefact_or_reasoning_escapes_into_spans_metrics_or_logs_even_on_errors_P8(primed_group: WorkerSettings, producer: Any) -> None:
    # The ingress's records are on the broker before capture starts: at DEBUG, this test's own
    # producer logs every value it sends, and it is not the worker under test.
    runs = [(path, *_run(path)) for path in FIXTURES]
    bad_key = f"otel-nohdr-{uuid.uuid4().hex[:6]}".encode()  # no rw-run-id: dead-lettered (envelope)
    for _, _, records in runs:
        await send(producer, records)
    await send(producer, [OutgoingRecord(bad_key, b"{}", [("rw-provider", b"anthropic-messages")])])

    capture = Capture()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    saved_levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(capture)
        lg.setLevel(logging.DEBUG)
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    telemetry = setup_telemetry(span_exporter=spans, metric_reader=metrics, install_global=False, env={})
    # Small polls: every run's records come in several, so when the store fails the consumer holds
    # a poll fetched before the rewind's seek. The assignment is reported only after that rewind
    # (as under load: the listener reads the committed offsets while polls go on) and within the
    # backoff the held poll waits out: it must stay stale, or a run met past its first records
    # ends sequence_gap.
    settings = dataclasses.replace(primed_group, inactivity_timeout_s=120, max_batch=8, backoff_initial_s=1.0)
    app, worker = create_app(settings, telemetry)

    quoted: list[str] = []
    store_apply = worker.store.apply

    async def fail_once_quoting_values(steps: list[Step], *rest: Any) -> int:
        values = [a.value for s in steps for a in s.artefacts]
        if values and not quoted:
            quoted.extend(values)
            raise StoreOutage(f"EXEC failed: SET rw:artefact {values[0]!r} (batch values: {values})")
        return await store_apply(steps, *rest)

    worker.store.apply = fail_once_quoting_values  # type: ignore[method-assign]
    read_committed = normalizer_app.committed_offsets

    reported: list[bool] = []

    async def committed_after_the_rewind(consumer: Any, partitions: list[Any]) -> dict[int, int | None]:
        deadline = asyncio.get_running_loop().time() + 30
        while not reported and asyncio.get_running_loop().time() < deadline:  # the first assignment only
            if worker.machine.degraded and not worker.machine.failing:  # rewound, the retry not yet through
                break
            await asyncio.sleep(0.01)
        reported.append(True)
        return await read_committed(consumer, partitions)

    normalizer_app.committed_offsets = committed_after_the_rewind  # type: ignore[assignment]

    try:
        await app.start()
        await _until(lambda: _worker_done(spans, metrics, [run.run_id for _, run, _ in runs]) and bool(quoted))
        async with Collector(settings.kafka_bootstrap_servers) as c:
            await c.until(lambda c: all(c.finished(run.run_id) for _, run, _ in runs))
    finally:
        normalizer_app.committed_offsets = read_committed  # type: ignore[assignment]
        await app.stop()
        for lg, level in zip(loggers, saved_levels, strict=True):
            lg.removeHandler(capture)
            lg.setLevel(level)
        telemetry.log_guard.uninstall()

    assert quoted, "the store never failed: the exception path was not exercised"
    assert reported, "the assignment was never reported"
    secrets: list[str] = []
    reasoning: list[str] = []
    deltas: list[str] = []
    for path, run, _ in runs:
        offline = translate_file(run.grammar, path, run_id=run.run_id, thread_id=run.thread_id, model=run.model)
        secrets += [a.value for a in offline.artefacts]
        reasoning += _reasoning_texts(offline.events)
        deltas += _deltas(offline.events)
        assert c.stream(run.run_id) == offline.events, path.name  # the failed batch was redone, nothing lost
    assert set(quoted) <= set(secrets) and reasoning

    finished = spans.get_finished_spans()
    haystack = [t for span in finished for t in _span_texts(span)]
    haystack += [orjson.dumps(orjson.loads(metrics.get_metrics_data().to_json())).decode()]
    haystack += capture.lines
    leaks = sorted({n for n in _needles(secrets) | _needles(reasoning) if any(n in text for text in haystack)})
    assert leaks == [], f"{len(leaks)} content fragments escaped, e.g. {leaks[:1]}"
    # One event's delta is shorter than a slice: what the DEBUG producer log would show of it.
    assert deltas and not [d for d in deltas if any(d in text for text in haystack)]

    # The exception path really ran through the guards: logged with its type, text redacted.
    # (lines with its traceback; the state-change lines name only the type: "recovered … StoreOutage")
    failure_lines = [line for line in capture.lines if "StoreOutage" in line and "Traceback" in line]
    assert failure_lines and all("[redacted]" in line for line in failure_lines)
    failed_spans = [s for s in finished if s.status.status_code is StatusCode.ERROR and s.status.description == "StoreOutage"]
    assert failed_spans and all(s.attributes["error.type"].endswith("StoreOutage") for s in failed_spans)
    assert not any(e.name == "exception" for s in finished for e in s.events)

    # And the telemetry is there: runs with GenAI attributes, linked records, metrics.
    run_spans = {s.attributes["reasonwire.run.id"]: s for s in finished if s.name == "reasonwire.run"}
    for _, run, _ in runs:
        span = run_spans[run.run_id]
        assert span.attributes["gen_ai.provider.name"] == Grammar(run.grammar).provider_name
        assert span.parent is not None and format(span.parent.trace_id, "032x") == TRACEPARENT.split("-")[1]
    records = [s for s in finished if s.name == "process reasoning.raw.v1" and s.status.status_code is not StatusCode.ERROR]
    assert all(format(s.links[0].context.span_id, "016x") == TRACEPARENT.split("-")[2] for s in records if s.links)
    names = {m.name for rm in metrics.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"reasonwire.events", "reasonwire.events.unknown", "reasonwire.dlq.records", "reasonwire.artefacts.size"} <= names
