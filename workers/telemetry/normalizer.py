"""The normalizer worker's spans and metrics, derived from the raw records and the core's Steps.

Theory of operation
-------------------
The worker calls one hook per moment of its life, and nothing else:

* ``telemetry.batch(records)`` when a poll starts (a context manager; the
  pipelined worker enters it and exits it when the poll is committed or
  failed), and ``trace.stepped(steps)`` once the core has produced the batch's
  Steps (before anything is written or published) — the expiry tick does the
  same with no records;
* ``telemetry.forget(partitions)`` when partitions are revoked;
* ``telemetry.shutdown()`` when the app stops.

Spans. A **run span** (``reasonwire.run``) lives from the first record of a
run this worker handles to the run's end (or until its partition is handed
over); its parent is the producer's context from the W3C ``traceparent`` /
``tracestate`` headers of that first record, so the run appears in the trace of
the service that called the provider. A **record span** (``process
reasoning.raw.v1``, kind CONSUMER) covers one raw record from the start of its
poll to the batch's commit; its parent is the run span and it *links*
to the record's own producer context. Usage, finish reason and latency land on
the run span when the core reports the run ended; artefacts appear only as
``reasonwire.artefact`` span events with kind, subtype, size and a hash.

Cost. Nothing is built that nothing reads: without a trace exporter (the API's
no-op tracer provider) no span is started and the headers are never decoded;
without a metric reader no data point is built; a span a sampler dropped gets
no attributes. Content is registered for the log guard in every case.

Errors. A batch that fails (Redis or the broker failed; the worker rewinds and
the poll is redelivered) ends its record spans with status ERROR, the
exception's *type name* as description and ``error.type``; the exception
itself is never recorded (its message may quote content). Metrics are counted
only for batches that succeeded, so a redelivered poll is not counted twice.

Registering content. Before the store or the broker can fail with content in
an exception, :meth:`BatchTrace.stepped` registers in the
:class:`~workers.telemetry.registry.OpaqueRegistry` every artefact value,
every ``encryptedValue`` and the readable reasoning text of the events about
to be published. The raw records' bytes are *not* registered: they carry the
provider's ids and model names, which are also the run ids, model attributes
and log context operators need, and the guard would redact them everywhere.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from contracts import topics
from contracts.envelope import (
    DEFAULT_TENANT,
    HEADER_CONTROL,
    HEADER_MODEL,
    HEADER_PROVIDER,
    HEADER_RUN_ID,
    HEADER_SEQ,
    HEADER_TENANT,
    HEADER_THREAD_ID,
)
from contracts.grammars import Grammar
from contracts.usage import UsageRecord
from workers.core.normalizer import RawRecord, Step
from workers.telemetry import Telemetry
from workers.telemetry import vocabulary as v

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = ("traceparent", "tracestate")
_REASONING_TEXT = (b'"REASONING_MESSAGE_CONTENT"', b'"REASONING_MESSAGE_CHUNK"')
_REASONING_END = b'"REASONING_MESSAGE_END"'
_ENCRYPTED_VALUE = b'"REASONING_ENCRYPTED_VALUE"'
_EVENT_TOPICS = frozenset(set(topics.ALL) - {topics.RAW, topics.DLQ, topics.USAGE})


@dataclass
class _Headers:
    """What telemetry reads from a raw record's headers (never its key or value)."""

    run_id: str | None
    tenant: str
    grammar: Grammar | None
    model: str | None
    thread_id: str | None
    seq: int | None
    control: bool
    producer: Context

    @classmethod
    def of(cls, record: RawRecord) -> _Headers:
        raw = dict(record.headers)

        def text(name: str) -> str | None:
            value = raw.get(name)
            return value.decode("utf-8", "replace") or None if value is not None else None

        grammar = text(HEADER_PROVIDER)
        seq = text(HEADER_SEQ)
        carrier = {name: value for name in _TRACE_HEADERS if (value := text(name)) is not None}
        return cls(
            run_id=text(HEADER_RUN_ID),
            tenant=text(HEADER_TENANT) or DEFAULT_TENANT,
            grammar=Grammar(grammar) if grammar in v.GRAMMARS else None,
            model=text(HEADER_MODEL),
            thread_id=text(HEADER_THREAD_ID),
            seq=int(seq) if seq is not None and seq.isascii() and seq.isdigit() else None,  # int("²") raises
            control=text(HEADER_CONTROL) is not None,
            producer=_PROPAGATOR.extract(carrier, context=Context()) if carrier else Context(),
        )

    @property
    def producer_link(self) -> list[Link]:
        context = trace.get_current_span(self.producer).get_span_context()
        return [Link(context)] if context.is_valid else []


@dataclass
class _RunTrace:
    span: Span
    grammar: Grammar | None
    partition: int
    records: int = 0
    events: int = 0


@dataclass
class _Outcome:
    """The telemetry facts of one Step."""

    outcome: str
    cause: str | None = None
    events: dict[str, int] = field(default_factory=dict)
    unknown_events: dict[str, int] = field(default_factory=dict)
    """Warning code (``unknown_event``, ``unknown_delta``, …) → count."""
    usage_json: bytes | None = None
    """The run's usage record as published; parsed only for a recording run span."""


class NormalizerTelemetry:
    """Spans and metrics of one normalizer worker process."""

    def __init__(self, telemetry: Telemetry, *, group_id: str, max_open_runs: int = 10_000) -> None:
        self.telemetry = telemetry
        self.group_id = group_id
        self.max_open_runs = max_open_runs
        self.runs: OrderedDict[tuple[str, str], _RunTrace] = OrderedDict()
        counter = telemetry.counter
        self.records = counter("reasonwire.records", unit="{record}", description="Raw records handled, by outcome")
        self.events = counter("reasonwire.events", unit="{event}", description="AG-UI events published, by topic")
        self.unknown_events = counter("reasonwire.events.unknown", unit="{event}", description="Provider events skipped as unknown (P3)")
        self.dead_letters = counter("reasonwire.dlq.records", unit="{record}", description="Records dead-lettered, by cause")
        self.artefacts = counter("reasonwire.artefacts", unit="{artefact}", description="Opaque artefacts stored, by kind")
        self.artefact_bytes = counter("reasonwire.artefacts.size", unit="By", description="Bytes of opaque artefacts stored, by kind")

    def batch(self, records: Sequence[RawRecord]) -> BatchTrace:
        return BatchTrace(self, records)

    def forget(self, partitions: Iterable[int]) -> None:
        """The partitions were revoked: their runs' spans end here, the new owner starts its own."""
        gone = set(partitions)
        for key, run in list(self.runs.items()):
            if run.partition in gone:
                self._end_run(key, "handed_over")

    def shutdown(self) -> None:
        for key in list(self.runs):
            self._end_run(key, "worker_stopped")
        self.telemetry.shutdown()

    # -- runs -------------------------------------------------------------------------

    def _run(self, key: tuple[str, str], headers: _Headers | None, partition: int, started: int) -> _RunTrace:
        run = self.runs.get(key)
        if run is not None:
            return run
        grammar = headers.grammar if headers else None
        attributes: dict[str, Any] = {v.RW_TENANT: key[0], v.RW_RUN_ID: key[1]}
        if grammar is not None:
            attributes |= {v.RW_GRAMMAR: grammar.value, v.GEN_AI_PROVIDER_NAME: grammar.provider_name}
        if headers is not None:
            attributes |= _present({
                v.GEN_AI_REQUEST_MODEL: headers.model,
                v.GEN_AI_CONVERSATION_ID: headers.thread_id or key[1],
                v.RW_RUN_FIRST_SEQ: headers.seq,
            })
        span = self.telemetry.tracer.start_span(
            v.SPAN_RUN,
            context=headers.producer if headers else Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=started,
            record_exception=False,
            set_status_on_exception=False,
        )
        run = self.runs[key] = _RunTrace(span, grammar, partition)
        while len(self.runs) > self.max_open_runs:
            self._end_run(next(iter(self.runs)), "evicted")
        return run

    def _end_run(self, key: tuple[str, str], outcome: str | None, usage_json: bytes | None = None) -> None:
        run = self.runs.pop(key, None)
        if run is None:
            return
        if not run.span.is_recording():
            run.span.end()
            return
        attributes: dict[str, Any] = {v.RW_RUN_RECORDS: run.records, v.RW_RUN_EVENTS: run.events}
        if usage_json is not None:
            usage = UsageRecord.model_validate_json(usage_json)
            outcome = usage.end
            attributes |= _usage_attributes(usage)
        if outcome is not None:
            attributes[v.RW_RUN_OUTCOME] = outcome
        run.span.set_attributes(attributes)
        if outcome in ("error", "interrupted"):
            run.span.set_status(Status(StatusCode.ERROR, outcome))
        run.span.end()


class BatchTrace:
    """One poll's record spans; see the module docstring."""

    def __init__(self, owner: NormalizerTelemetry, records: Sequence[RawRecord]) -> None:
        self.owner = owner
        self.records = records
        self._headers: list[_Headers] | None = None
        self._tally = _Tally()
        self.steps: Sequence[Step] = ()
        self.started = time.time_ns()

    @property
    def headers(self) -> list[_Headers]:
        """Read only when a span or a data point needs them (nothing records otherwise)."""
        if self._headers is None:
            self._headers = [_Headers.of(r) for r in self.records]
        return self._headers

    def __enter__(self) -> BatchTrace:
        return self

    def stepped(self, steps: Sequence[Step]) -> None:
        """The core's Steps for this batch (one per record, or the expiry's): register their
        content before the store or the broker can quote it in an exception."""
        self.steps = steps
        registry = self.owner.telemetry.registry
        streams: dict[tuple[str, str | None], list[str]] = {}
        """(topic, message id) → the poll's reasoning deltas of that message, in order."""
        ended: list[tuple[str, str | None]] = []
        seen: set[int] = set()
        for step in steps:
            for artefact in step.artefacts:
                registry.add(artefact.value)
            for out in step.outbound:
                if out.topic in _EVENT_TOPICS and id(out.value) not in seen:
                    seen.add(id(out.value))  # both audiences share one blob when the filter kept it whole
                    _collect_event(out.topic, out.value, registry, streams, ended)
        for key, deltas in streams.items():  # one registry call per message per poll, not per delta
            registry.add_stream(key, "".join(deltas), end=key in ended)
        for key in ended:
            if key not in streams:
                registry.add_stream(key, "", end=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        telemetry = self.owner.telemetry
        if not (telemetry.tracing or telemetry.metering):
            return  # nothing exports spans or reads metrics: building them would be wasted work
        if exc is not None:
            self._failed(exc)
            return
        if self.records:
            for record, headers, step in zip(self.records, self.headers, self.steps, strict=True):
                self._record_done(record, headers, step)
        else:
            for step in self.steps:
                self._expired(step)
        self._tally.flush()

    # -- outcomes ---------------------------------------------------------------------

    def _record_done(self, record: RawRecord, headers: _Headers, step: Step) -> None:
        owner = self.owner
        tracing = owner.telemetry.tracing
        facts = _outcome(step, headers)
        run = None
        if tracing and step.run is not None and (step.skipped is None or (step.run.tenant, step.run.run_id) in owner.runs):
            run = owner._run((step.run.tenant, step.run.run_id), headers, record.partition, self.started)
        span = self._record_span(record, headers, run) if tracing else None
        recording = span is not None and span.is_recording()
        provider = {v.GEN_AI_PROVIDER_NAME: headers.grammar.provider_name} if headers.grammar else {}
        if recording:
            span.set_attributes(  # type: ignore[union-attr]
                _present({
                    v.RW_RECORD_OUTCOME: facts.outcome,
                    v.RW_DLQ_CAUSE: facts.cause,
                    v.RW_RECORD_EVENTS: sum(facts.events.values()),
                    v.RW_RECORD_ARTEFACTS: len(step.artefacts),
                    v.RW_RECORD_UNKNOWN_EVENTS: sum(facts.unknown_events.values()),
                })
            )
        for artefact in step.artefacts:
            if recording:
                described = artefact.describe()
                span.add_event(  # type: ignore[union-attr]
                    v.EVENT_ARTEFACT,
                    {
                        v.RW_ARTEFACT_KIND: described["kind"],
                        v.RW_ARTEFACT_SUBTYPE: described["subtype"],
                        v.RW_ARTEFACT_BYTES: described["bytes"],
                        v.RW_ARTEFACT_SHA256: described["sha256"],
                        v.RW_ARTEFACT_COMPLETE: described["complete"],
                    },
                )
            kind = {**provider, v.RW_ARTEFACT_KIND: artefact.kind}
            self._tally.add(owner.artefacts, 1, kind)
            self._tally.add(owner.artefact_bytes, len(artefact.value.encode()), kind)
        if recording:
            for warning in step.warnings:
                span.add_event(v.EVENT_WARNING, {v.RW_WARNING_CODE: warning.code, v.RW_WARNING_LINE: warning.line})  # type: ignore[union-attr]
        if span is not None:
            span.end()
        self._tally.add(owner.records, 1, {**provider, v.RW_RECORD_OUTCOME: facts.outcome})
        self._count(facts, provider)
        if run is not None:
            run.records += 1
            run.events += sum(facts.events.values())
            if step.run_ended and step.run is not None:
                owner._end_run((step.run.tenant, step.run.run_id), None, facts.usage_json)

    def _expired(self, step: Step) -> None:
        if step.run is None:
            return
        key = (step.run.tenant, step.run.run_id)
        run = self.owner.runs.get(key)
        facts = _outcome(step, None)
        provider = {v.GEN_AI_PROVIDER_NAME: run.grammar.provider_name} if run and run.grammar else {}
        self._count(facts, provider)
        if run is not None:
            run.events += sum(facts.events.values())
        if step.run_ended:
            self.owner._end_run(key, "interrupted", facts.usage_json)

    def _failed(self, exc: BaseException) -> None:
        """The batch raised: record spans end in ERROR with the exception's type only."""
        if not self.owner.telemetry.tracing:
            return
        error_type = f"{type(exc).__module__}.{type(exc).__name__}"
        for record, headers in zip(self.records, self.headers, strict=True):
            key = (headers.tenant, headers.run_id) if headers.run_id else None
            span = self._record_span(record, headers, self.owner.runs.get(key) if key else None)
            span.set_attribute(v.ERROR_TYPE, error_type)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.end()

    def _record_span(self, record: RawRecord, headers: _Headers, run: _RunTrace | None) -> Span:
        attributes: dict[str, Any] = {
            v.MESSAGING_SYSTEM: "kafka",
            v.MESSAGING_OPERATION_TYPE: "process",
            v.MESSAGING_DESTINATION_NAME: topics.RAW,
            v.MESSAGING_DESTINATION_PARTITION_ID: str(record.partition),
            v.MESSAGING_CONSUMER_GROUP_NAME: self.owner.group_id,
        }
        attributes |= _present({
            v.MESSAGING_KAFKA_OFFSET: record.offset if record.offset >= 0 else None,
            v.RW_RUN_ID: headers.run_id,
            v.RW_TENANT: headers.tenant if headers.run_id else None,
            v.RW_GRAMMAR: headers.grammar.value if headers.grammar else None,
            v.GEN_AI_PROVIDER_NAME: headers.grammar.provider_name if headers.grammar else None,
            v.RW_RECORD_SEQ: headers.seq,
        })
        return self.owner.telemetry.tracer.start_span(
            v.SPAN_RECORD,
            context=trace.set_span_in_context(run.span, Context()) if run else Context(),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=headers.producer_link,
            start_time=self.started,
            record_exception=False,
            set_status_on_exception=False,
        )

    def _count(self, facts: _Outcome, provider: dict[str, str]) -> None:
        owner = self.owner
        for topic, n in facts.events.items():
            self._tally.add(owner.events, n, {**provider, v.MESSAGING_DESTINATION_NAME: topic})
        for code, n in facts.unknown_events.items():
            self._tally.add(owner.unknown_events, n, {**provider, v.RW_WARNING_CODE: code})
        if facts.cause is not None:
            self._tally.add(owner.dead_letters, 1, {**provider, v.RW_DLQ_CAUSE: facts.cause})


class _Tally:
    """A poll's counter increments, summed per counter and label set and added once at the end:
    counters are sums, so the exported values are the same, at one guarded ``add`` per label
    set per poll instead of several per record."""

    def __init__(self) -> None:
        self._sums: dict[tuple[Any, frozenset[tuple[str, Any]]], int] = {}

    def add(self, counter: Any, amount: int, attributes: dict[str, Any]) -> None:
        key = (counter, frozenset(attributes.items()))
        self._sums[key] = self._sums.get(key, 0) + amount

    def flush(self) -> None:
        sums, self._sums = self._sums, {}
        for (counter, attributes), amount in sums.items():
            counter.add(amount, dict(attributes))


def _outcome(step: Step, headers: _Headers | None) -> _Outcome:
    events: dict[str, int] = {}
    usage: bytes | None = None
    dead_lettered = False
    for out in step.outbound:
        if out.topic == topics.DLQ:
            dead_lettered = True
        elif out.topic == topics.USAGE:
            usage = out.value
        else:
            events[out.topic] = events.get(out.topic, 0) + 1
    unknown: dict[str, int] = {}
    for warning in step.warnings:  # P3: an unknown event, delta, block, part or item type
        if warning.code.startswith("unknown_"):
            unknown[warning.code] = unknown.get(warning.code, 0) + 1
    if step.run is None:
        return _Outcome("dead_lettered", "envelope", events, unknown, usage)
    if dead_lettered:  # the core's code (issue 13): malformed_event, sequence_gap, run_ended, too_large …
        cause = step.dead_letter.value if step.dead_letter is not None else "malformed_event"
        return _Outcome("rejected", cause, events, unknown, usage)
    if step.skipped is not None:
        # The core's reasons are prose; the metric needs a fixed vocabulary.
        outcome = "skipped_duplicate" if step.skipped.startswith("duplicate") else "skipped_run_ended" if "ended" in step.skipped else "skipped"
        return _Outcome(outcome, None, events, unknown, usage)
    return _Outcome("control" if headers and headers.control else "translated", None, events, unknown, usage)


def _usage_attributes(usage: UsageRecord) -> dict[str, Any]:
    t = usage.tokens
    return _present({
        v.GEN_AI_RESPONSE_MODEL: usage.model,
        v.GEN_AI_RESPONSE_FINISH_REASONS: [usage.stop_reason] if usage.stop_reason else None,
        v.GEN_AI_USAGE_INPUT_TOKENS: t.input_tokens,
        v.GEN_AI_USAGE_OUTPUT_TOKENS: t.output_tokens,
        v.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: t.reasoning_tokens,
        v.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: t.cached_input_tokens,
        v.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: t.cache_write_input_tokens,
        v.RW_USAGE_TOTAL_TOKENS: t.total_tokens,
        v.RW_REASONING_MESSAGES: usage.reasoning_blocks,
        v.RW_TOOL_CALLS: usage.tool_calls,
        v.RW_USAGE_TIME_TO_FIRST_REASONING_MS: usage.time_to_first_reasoning_ms,
        v.RW_USAGE_TIME_TO_FIRST_TEXT_MS: usage.time_to_first_text_ms,
    })


def _collect_event(
    topic: str, value: bytes, registry: Any, streams: dict[tuple[str, str | None], list[str]], ended: list[tuple[str, str | None]]
) -> None:
    """Readable reasoning and encrypted values of an outgoing AG-UI event: encrypted values into
    the registry, reasoning deltas and ends into ``streams`` / ``ended`` (registered per message).

    Only events whose bytes name a reasoning type are parsed; the rest are skipped by a byte search."""
    is_text = any(marker in value for marker in _REASONING_TEXT)
    if not (is_text or _REASONING_END in value or _ENCRYPTED_VALUE in value):
        return
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:  # not ours to judge here; telemetry never fails a batch
        return
    kind = event.get("type")
    if kind == "REASONING_ENCRYPTED_VALUE":
        registry.add(event.get("encryptedValue", ""))
    elif kind in ("REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_CHUNK"):
        streams.setdefault((topic, event.get("messageId")), []).append(event.get("delta") or "")
    elif kind == "REASONING_MESSAGE_END":
        ended.append((topic, event.get("messageId")))


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: val for k, val in attributes.items() if val is not None}
