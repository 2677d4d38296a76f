"""The normalizer worker's spans and metrics, derived from the raw records and the core's Steps.

Theory of operation
-------------------
The worker calls one hook per moment of its life, and nothing else:

* ``telemetry.batch(records)`` when a poll starts (a context manager; the
  pipelined worker enters it and exits it when the poll is committed or
  failed), ``trace.stepped(steps)`` once the core has produced the batch's
  Steps (before anything is written or published) and ``trace.acknowledged()``
  once the broker acknowledged the poll's outputs — the expiry tick does the
  same with no records;
* ``telemetry.forget(partitions)`` when partitions are revoked;
* ``telemetry.shutdown()`` when the app stops.

Spans (OpenTelemetry messaging conventions for batch consumers, docs/telemetry.md
says why this shape). A **run span** (``reasonwire.run``) lives from the first
record of a run this worker handles to the run's end (or until its partition is
handed over); its parent is the producer's context from the W3C ``traceparent``
/ ``tracestate`` headers of that first record, so a parent-based sampler follows
the ingress's decision and a traced run is traced whole. Under it, one
**process span** (``process reasoning.raw.v1``, kind CONSUMER) per poll that
held records of the run: the run's records in that poll, from the start of the
poll to its commit, linked to the records' producer contexts (sampled ones
only). Usage, finish reason and latency land on the run span when the core
reports the run ended; artefacts and translator warnings appear only as
``reasonwire.artefact`` / ``reasonwire.warning`` events with kinds, codes, sizes
and hashes.

Cost. Nothing is built that nothing reads, and nothing is done per record for a
run that is not traced: the sampling decision is taken once per run, on its
first record; with a parent-based sampler an unsampled ``traceparent`` is
judged by its last character (the sampled flag) without the propagator. A run
that is not traced costs a dictionary entry (its provider name, for the
metrics' labels). Without a trace exporter (the API's no-op tracer provider)
no span is started and no header is decoded; without a metric reader no data
point is built. Counters are summed per poll and label set before they are
added. Content is registered for the log guard in every case.

Metrics. Counters of records by outcome, events by topic, unknown events,
dead letters by code (``rw-dlq-code``), artefacts; histograms of the poll
duration (start of the poll → commit) and of the end-to-end delay (the raw
record's Kafka timestamp → its outputs acknowledged), measured once per
partition per poll on the partition's oldest record in it (the poll's worst
case there; per record it would cost a data point per record). Per run, from the usage record
of a run that ended (parsed once per run, only with a metric reader): runs ended by outcome,
tokens by type (input, reasoning, answer — disjoint) and the times to the first reasoning and
to the first answer text, labelled with the provider and the response model.

Errors. A batch that fails (Redis or the broker failed; the worker rewinds and
the poll is redelivered) ends its process spans with status ERROR, the
exception's *type name* as description and ``error.type``; the exception
itself is never recorded (its message may quote content). Metrics are counted
only for batches that succeeded, so a redelivered poll is not counted twice.

Registering content. Before the store or the broker can fail with content in
an exception, :meth:`BatchTrace.stepped` registers in the
:class:`~reasonwire.workers.ops.telemetry.registry.OpaqueRegistry` every artefact value,
every ``encryptedValue`` and the readable reasoning text of the poll — as the
core hands them over on each Step (``Step.secrets``, ``Step.reasoning``: the
translator's events before audience filtering, so reasoning no audience sees
is registered too), without parsing the events about to be published. The raw
records' bytes are *not* registered: they carry the provider's ids and model
names, which are also the run ids, model attributes and log context operators
need, and the guard would redact them everywhere.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import (
    DEFAULT_TENANT,
    HEADER_MODEL,
    HEADER_PROVIDER,
    HEADER_RUN_ID,
    HEADER_SEQ,
    HEADER_TENANT,
    HEADER_THREAD_ID,
)
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.usage import UsageRecord
from reasonwire.workers.core.delivery import DeadLetterCode
from reasonwire.workers.core.normalizer import Outbound, RawRecord, Step
from reasonwire.workers.ops import handoff
from reasonwire.workers.ops.telemetry import Telemetry
from reasonwire.workers.ops.telemetry import vocabulary as v

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACEPARENT, _TRACESTATE = "traceparent", "tracestate"
_TRACEPARENT_LENGTH = 55
"""``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``: the only length whose last character
is certainly the low digit of the flags (version 00; a longer future version is parsed in full)."""
_SAMPLED_LAST = frozenset(b"13579bdfBDF")
"""The flags' low hex digit when the sampled bit (bit 0) is set."""
_EVENT_TOPICS = frozenset(set(topics.ALL) - {topics.RAW, topics.DLQ, topics.USAGE})
_DLQ = topics.DLQ
MAX_LINKS = 32
"""Process-span links beyond the run's own producer context (records of one run normally share it)."""
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Histogram buckets of the duration metrics (seconds; the SDK's default buckets are for milliseconds)."""


@dataclass
class _Headers:
    """What telemetry reads from a raw record's headers (never its key or value): once per run."""

    run_id: str | None
    tenant: str
    grammar: Grammar | None
    model: str | None
    thread_id: str | None
    seq: int | None
    traceparent: bytes | None
    tracestate: bytes | None

    @classmethod
    def of(cls, record: RawRecord) -> _Headers:
        raw = dict(record.headers)

        def text(name: str) -> str | None:
            value = raw.get(name)
            return value.decode("utf-8", "replace") or None if value is not None else None

        grammar = text(HEADER_PROVIDER)
        seq = text(HEADER_SEQ)
        return cls(
            run_id=text(HEADER_RUN_ID),
            tenant=text(HEADER_TENANT) or DEFAULT_TENANT,
            grammar=Grammar(grammar) if grammar in v.GRAMMARS else None,
            model=text(HEADER_MODEL),
            thread_id=text(HEADER_THREAD_ID),
            seq=int(seq) if seq is not None and seq.isascii() and seq.isdigit() else None,  # int("²") raises
            traceparent=raw.get(_TRACEPARENT),
            tracestate=raw.get(_TRACESTATE),
        )

    @property
    def provider(self) -> str | None:
        return self.grammar.provider_name if self.grammar else None


def _traceparent(record: RawRecord) -> bytes | None:
    for name, value in record.headers:
        if name == _TRACEPARENT:
            return value
    return None


def _producer_context(traceparent: bytes | None, tracestate: bytes | None) -> Context:
    """The W3C propagator's reading of the two headers (an invalid one gives an empty context)."""
    if traceparent is None:
        return Context()
    carrier = {_TRACEPARENT: traceparent.decode("ascii", "replace")}
    if tracestate is not None:
        carrier[_TRACESTATE] = tracestate.decode("ascii", "replace")
    return _PROPAGATOR.extract(carrier, context=Context())


def _sampled_link(context: Context) -> Link | None:
    """A link to a producer context, only when it is valid and sampled (an unsampled one leads
    to spans nobody recorded)."""
    span_context = trace.get_current_span(context).get_span_context()
    return Link(span_context) if span_context.is_valid and span_context.trace_flags.sampled else None


def _drops_unsampled_parents(provider: Any) -> bool:
    """True when the provider's sampler drops every span whose remote parent is not sampled
    (``parentbased_*``, the SDK's default): then an unsampled ``traceparent`` decides the run
    without parsing it or starting a span."""
    from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler

    sampler = getattr(provider, "sampler", None)
    if not isinstance(sampler, ParentBased):
        return False
    judge = getattr(sampler, "_remote_parent_not_sampled", None)
    return isinstance(judge, StaticSampler) and getattr(judge, "_decision", None) is Decision.DROP


class _RunTrace:
    """One run this worker handles: its span when traced, its provider name for metric labels."""

    __slots__ = ("span", "provider", "partition", "traceparent", "link", "records", "events")

    def __init__(self, span: Span | None, provider: str | None, partition: int, traceparent: bytes | None, link: Link | None) -> None:
        self.span = span
        """``None``: the run is not traced (the sampler dropped it, or nothing exports spans)."""
        self.provider = provider
        self.partition = partition
        self.traceparent = traceparent
        self.link = link
        self.records = 0
        self.events = 0


@dataclass
class _PollOfRun:
    """What one poll did for one traced run: becomes that poll's process span under the run."""

    run: _RunTrace
    records: int = 0
    events: int = 0
    first_offset: int = -1
    outcomes: dict[str, int] = field(default_factory=dict)
    artefacts: list[Any] = field(default_factory=list)
    warnings: list[Any] = field(default_factory=list)
    links: dict[bytes, Link] = field(default_factory=dict)
    dead_letters: int = 0


class NormalizerTelemetry:
    """Spans and metrics of one normalizer worker process."""

    def __init__(self, telemetry: Telemetry, *, group_id: str, max_open_runs: int = 10_000, metric_flush_s: float = 0.0) -> None:
        self.telemetry = telemetry
        self.metric_flush_s = metric_flush_s
        """How long committed polls' counts may wait in :attr:`tally` before they reach the SDK's
        counters (0: after every poll). The worker uses a second: a guarded SDK ``add`` per label
        set per poll cost ~5 µs per record; a reader exports every minute anyway."""
        self.tally = _Tally()
        self._flushed_at = time.monotonic()
        self.group_id = group_id
        self.max_open_runs = max_open_runs
        self.runs: OrderedDict[tuple[str, str], _RunTrace] = OrderedDict()
        """Every run met and not ended (traced or not), oldest first; bounded by ``max_open_runs``."""
        self.tracing = telemetry.tracing
        self.metering = telemetry.metering
        self.tracer = telemetry.tracer
        self.skip_unsampled = self.tracing and _drops_unsampled_parents(telemetry.tracer_provider)
        counter, histogram = telemetry.counter, telemetry.histogram
        self.records = counter("reasonwire.records", unit="{record}", description="Raw records handled, by outcome")
        self.events = counter("reasonwire.events", unit="{event}", description="AG-UI events published, by topic")
        self.unknown_events = counter("reasonwire.events.unknown", unit="{event}", description="Provider events skipped as unknown (P3)")
        self.dead_letters = counter("reasonwire.dlq.records", unit="{record}", description="Records dead-lettered, by cause and rw-dlq-code")
        self.artefacts = counter("reasonwire.artefacts", unit="{artefact}", description="Opaque artefacts stored, by kind")
        self.artefact_bytes = counter("reasonwire.artefacts.size", unit="By", description="Bytes of opaque artefacts stored, by kind")
        self.poll_duration = histogram(
            "reasonwire.poll.duration", unit="s", description="One poll from its start (records handed over) to its commit", buckets=SECONDS_BUCKETS
        )
        self.record_delay = histogram(
            "reasonwire.record.delay",
            unit="s",
            description="End to end: a raw record's Kafka timestamp to its outputs acknowledged (each partition's oldest record per poll)",
            buckets=SECONDS_BUCKETS,
        )
        # per run, from its usage record: what a run cost and how fast it answered
        self.runs_ended = counter("reasonwire.runs.ended", unit="{run}", description="Runs ended, by outcome (the usage record's end)")
        self.tokens = counter(
            "reasonwire.usage.tokens", unit="{token}", description="Tokens of ended runs by type: input, reasoning, answer (output less reasoning)"
        )
        self.first_reasoning = histogram(
            "reasonwire.run.time_to_first_reasoning", unit="s", description="A run's start to its first reasoning delta", buckets=SECONDS_BUCKETS
        )
        self.first_text = histogram(
            "reasonwire.run.time_to_first_text", unit="s", description="A run's start to its first answer text delta", buckets=SECONDS_BUCKETS
        )

    def batch(self, records: Sequence[RawRecord]) -> BatchTrace:
        return BatchTrace(self, records)

    def forget(self, partitions: Iterable[int]) -> None:
        """The partitions were revoked: their runs' spans end here, the new owner starts its own."""
        gone = set(partitions)
        for key, run in list(self.runs.items()):
            if run.partition in gone:
                self._end_run(key, "handed_over")

    def flush_counts(self, *, now: float | None = None) -> None:
        """Hand the summed counts to the SDK's counters once ``metric_flush_s`` has passed."""
        now = time.monotonic() if now is None else now
        if now - self._flushed_at >= self.metric_flush_s:
            self._flushed_at = now
            self.tally.flush()

    def shutdown(self) -> None:
        self.tally.flush()
        for key in list(self.runs):
            self._end_run(key, "worker_stopped")
        self.telemetry.shutdown()

    # -- runs -------------------------------------------------------------------------

    def _start_run(self, key: tuple[str, str], record: RawRecord, started: int) -> _RunTrace:
        """The run's first record here: read its headers once and decide whether it is traced."""
        headers = _Headers.of(record)
        span: Span | None = None
        link: Link | None = None
        if self.tracing and not (
            self.skip_unsampled
            and headers.traceparent is not None
            and len(headers.traceparent) == _TRACEPARENT_LENGTH
            and headers.traceparent[-1] not in _SAMPLED_LAST
        ):
            producer = _producer_context(headers.traceparent, headers.tracestate)
            span = self.tracer.start_span(
                v.SPAN_RUN,
                context=producer,
                kind=SpanKind.INTERNAL,
                start_time=started,
                record_exception=False,
                set_status_on_exception=False,
            )
            if span.is_recording():
                span.set_attributes(self._run_attributes(key, headers))
                link = _sampled_link(producer)
            else:
                span = None
        run = self.runs[key] = _RunTrace(span, headers.provider, record.partition, headers.traceparent, link)
        while len(self.runs) > self.max_open_runs:
            self._end_run(next(iter(self.runs)), "evicted")
        return run

    def _run_attributes(self, key: tuple[str, str], headers: _Headers) -> dict[str, Any]:
        attributes: dict[str, Any] = {v.RW_TENANT: key[0], v.RW_RUN_ID: key[1]}
        if headers.grammar is not None:
            attributes |= {v.RW_GRAMMAR: headers.grammar.value, v.GEN_AI_PROVIDER_NAME: headers.grammar.provider_name}
        return attributes | _present({
            v.GEN_AI_REQUEST_MODEL: headers.model,
            v.GEN_AI_CONVERSATION_ID: headers.thread_id or key[1],
            v.RW_RUN_FIRST_SEQ: headers.seq,
        })

    def _end_run(self, key: tuple[str, str], outcome: str | None, usage_json: bytes | None = None, end_time: int | None = None) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            _finish_run(run, outcome, usage_json, end_time)


def _finish_run(run: _RunTrace, outcome: str | None, usage_json: bytes | None = None, end_time: int | None = None) -> None:
    span = run.span
    if span is None:
        return
    attributes: dict[str, Any] = {v.RW_RUN_RECORDS: run.records, v.RW_RUN_EVENTS: run.events}
    if usage_json is not None:
        usage = UsageRecord.model_validate_json(usage_json)
        outcome = usage.end
        attributes |= _usage_attributes(usage)
    if outcome is not None:
        attributes[v.RW_RUN_OUTCOME] = outcome
    span.set_attributes(attributes)
    if outcome in ("error", "interrupted"):
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end(end_time)


class BatchTrace:
    """One poll's process spans and data points; see the module docstring."""

    def __init__(self, owner: NormalizerTelemetry, records: Sequence[RawRecord]) -> None:
        self.owner = owner
        self.records = records
        self._tally = owner.tally
        """Shared by every poll: only committed polls add to it (:meth:`__exit__` without an error)."""
        self.steps: Sequence[Step] = ()
        self.started = time.time_ns()
        self.acknowledged_at: int | None = None

    def __enter__(self) -> BatchTrace:
        return self

    def acknowledged(self) -> None:
        """The broker acknowledged the poll's outputs: the end of the records' end-to-end delay."""
        if self.acknowledged_at is None:
            self.acknowledged_at = time.time_ns()

    def stepped(self, steps: Sequence[Step], *, registered: bool = False) -> None:
        """The core's Steps for this batch (one per record, in record order, or the expiry's);
        their content is registered unless :meth:`register` already did (``registered``)."""
        self.steps = steps
        if not registered:
            self.register(steps)

    def register(self, steps: Sequence[Step]) -> None:
        """Register these Steps' content before the store or the broker can quote it in an
        exception (P8); a poll stepped in parts registers each part before sending it."""
        registry = self.owner.telemetry.registry
        streams: dict[tuple[object, str], list[str]] = {}
        """(run, message id) → the poll's reasoning deltas of that message, in order."""
        ended: list[tuple[object, str]] = []
        opaque: dict[str, None] = {}
        """Whole values, once each: a step's ``encryptedValue`` is the value of its artefact."""
        for step in steps:
            for artefact in step.artefacts:
                opaque[artefact.value] = None
            for secret in step.secrets:
                opaque[secret] = None
            if step.reasoning:
                run = step.run
                for message_id, delta in step.reasoning:
                    if delta is None:
                        ended.append((run, message_id))
                    else:
                        streams.setdefault((run, message_id), []).append(delta)
        for value in opaque:
            registry.add(value)
        for key, deltas in streams.items():  # one registry call per message per poll, not per delta
            registry.add_stream(key, "".join(deltas), end=key in ended)
        for key in ended:
            if key not in streams:
                registry.add_stream(key, "", end=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        owner = self.owner
        if not (owner.tracing or owner.metering):
            return  # nothing exports spans or reads metrics: building them would be wasted work
        if exc is not None:
            self._failed(exc)
            return
        now = time.time_ns()
        if self.records:
            self._records_done(now)
        else:
            for step in self.steps:
                self._expired(step, now)
        if owner.metering:
            owner.flush_counts()
            owner.poll_duration.record((now - self.started) / 1e9)
            self._delays(self.acknowledged_at or now)

    # -- outcomes ---------------------------------------------------------------------

    def _records_done(self, now: int) -> None:
        """Every record of the committed poll: counted by label set; the traced runs' records
        gathered into one process span per run; runs that ended end their span."""
        owner, tally = self.owner, self._tally
        runs, metering = owner.runs, owner.metering
        sums, records_counter, events_counter = tally.sums, owner.records, owner.events
        polls: dict[tuple[str, str], _PollOfRun] = {}
        ended: list[tuple[_RunTrace, bytes | None]] = []
        for record, step in zip(self.records, self.steps, strict=True):
            key = step.run
            run = self._run_of(record, step)
            provider = run.provider if run is not None else _Headers.of(record).provider  # the rare record of no run held
            outcome = _outcome(step)
            if metering:  # summed per label set in the poll's tally, inline: this runs per record
                label = (records_counter, provider, v.RW_RECORD_OUTCOME, outcome)
                sums[label] = sums.get(label, 0) + 1
                for out in step.outbound:
                    if out.topic in _EVENT_TOPICS:
                        label = (events_counter, provider, v.MESSAGING_DESTINATION_NAME, out.topic)
                        sums[label] = sums.get(label, 0) + 1
                if outcome in ("dead_lettered", "rejected"):
                    tally.add(owner.dead_letters, provider, _DLQ_LABELS, _dead_letter_labels(step))
                if step.warnings:
                    for warning in step.warnings:  # P3: an unknown event, delta, block, part or item type
                        if warning.code.startswith("unknown_"):
                            tally.add(owner.unknown_events, provider, v.RW_WARNING_CODE, warning.code)
                for artefact in step.artefacts:
                    tally.add(owner.artefacts, provider, v.RW_ARTEFACT_KIND, artefact.kind)
                    tally.add(owner.artefact_bytes, provider, v.RW_ARTEFACT_KIND, artefact.kind, len(artefact.value.encode()))
            if run is None:
                continue
            if run.span is not None:  # a traced run: per-record detail (never for a run not traced)
                poll = polls.get(key)  # type: ignore[arg-type]
                if poll is None:
                    poll = polls[key] = _PollOfRun(run, first_offset=record.offset)  # type: ignore[index]
                events = sum(1 for out in step.outbound if out.topic in _EVENT_TOPICS)
                poll.records += 1
                poll.events += events
                poll.outcomes[outcome] = poll.outcomes.get(outcome, 0) + 1
                poll.artefacts += step.artefacts
                poll.warnings += step.warnings
                poll.dead_letters += step.dead_letter is not None
                _note_link(poll, record)
                run.records += 1
                run.events += events
            if step.run_ended:
                if metering:
                    self._run_metrics(provider, _usage_json(step))
                del runs[key]  # type: ignore[arg-type]  # a record after the end is judged as one of no run held
                if run.span is not None:
                    ended.append((run, _usage_json(step)))
        for poll in polls.values():
            self._process_span(poll, now)
        for run, usage_json in ended:
            _finish_run(run, None, usage_json, now)

    def _process_span(self, poll: _PollOfRun, now: int, error: BaseException | None = None) -> None:
        """One poll's records of one traced run (messaging ``process``, a child of the run span)."""
        run = poll.run
        assert run.span is not None
        attributes: dict[str, Any] = {
            v.MESSAGING_SYSTEM: "kafka",
            v.MESSAGING_OPERATION_TYPE: "process",
            v.MESSAGING_DESTINATION_NAME: topics.RAW,
            v.MESSAGING_DESTINATION_PARTITION_ID: str(run.partition),
            v.MESSAGING_CONSUMER_GROUP_NAME: self.owner.group_id,
            v.MESSAGING_BATCH_MESSAGE_COUNT: poll.records,
            v.RW_RECORD_EVENTS: poll.events,
            v.RW_RECORD_ARTEFACTS: len(poll.artefacts),
            v.RW_RECORD_UNKNOWN_EVENTS: sum(1 for w in poll.warnings if w.code.startswith("unknown_")),
        }
        if poll.first_offset >= 0:
            attributes[v.MESSAGING_KAFKA_OFFSET] = poll.first_offset
        if len(poll.outcomes) == 1:
            attributes[v.RW_RECORD_OUTCOME] = next(iter(poll.outcomes))
        if poll.dead_letters:
            attributes[v.RW_RECORD_DEAD_LETTERS] = poll.dead_letters
        links = ([run.link] if run.link is not None else []) + list(poll.links.values())
        span = self.owner.tracer.start_span(
            v.SPAN_RECORD,
            context=trace.set_span_in_context(run.span, Context()),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=self.started,
            record_exception=False,
            set_status_on_exception=False,
        )
        for artefact in poll.artefacts:
            described = artefact.describe()
            span.add_event(
                v.EVENT_ARTEFACT,
                {
                    v.RW_ARTEFACT_KIND: described["kind"],
                    v.RW_ARTEFACT_SUBTYPE: described["subtype"],
                    v.RW_ARTEFACT_BYTES: described["bytes"],
                    v.RW_ARTEFACT_SHA256: described["sha256"],
                    v.RW_ARTEFACT_COMPLETE: described["complete"],
                },
                timestamp=now,
            )
        for warning in poll.warnings:
            span.add_event(v.EVENT_WARNING, {v.RW_WARNING_CODE: warning.code, v.RW_WARNING_LINE: warning.line}, timestamp=now)
        if error is not None:
            span.set_attribute(v.ERROR_TYPE, f"{type(error).__module__}.{type(error).__name__}")
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end(now)

    def _expired(self, step: Step, now: int) -> None:
        if step.run is None:
            return
        owner = self.owner
        run = owner.runs.get(step.run)  # type: ignore[call-overload]
        provider = run.provider if run else None
        events = _events(step)
        if owner.metering:
            for topic, n in events.items():
                self._tally.add(owner.events, provider, v.MESSAGING_DESTINATION_NAME, topic, n)
        if run is not None:
            run.events += sum(events.values())
        if step.run_ended:
            if owner.metering:
                self._run_metrics(provider, _usage_json(step))
            owner._end_run(step.run, "interrupted", _usage_json(step), now)  # type: ignore[arg-type]

    def _run_metrics(self, provider: str | None, usage_json: bytes | None) -> None:
        """An ended run's outcome, tokens by type and times to first reasoning / text, from its
        usage record (parsed once per run, only when a metric reader is installed)."""
        if usage_json is None:
            return
        owner, tally = self.owner, self._tally
        usage = UsageRecord.model_validate_json(usage_json)
        model = usage.model
        tally.add(owner.runs_ended, provider, _RUN_LABELS, (usage.end, model))
        t = usage.tokens
        answer = max(0, t.output_tokens - (t.reasoning_tokens or 0)) if t.output_tokens is not None else None
        for kind, count in (("input", t.input_tokens), ("reasoning", t.reasoning_tokens), ("answer", answer)):
            if count:
                tally.add(owner.tokens, provider, _TOKEN_LABELS, (kind, model), count)
        labels = _present({v.GEN_AI_PROVIDER_NAME: provider, v.GEN_AI_RESPONSE_MODEL: model})
        if usage.time_to_first_reasoning_ms is not None:
            owner.first_reasoning.record(usage.time_to_first_reasoning_ms / 1e3, labels)
        if usage.time_to_first_text_ms is not None:
            owner.first_text.record(usage.time_to_first_text_ms / 1e3, labels)

    def _failed(self, exc: BaseException) -> None:
        """The batch raised: each traced run's process span ends in ERROR with the exception's type only."""
        owner = self.owner
        if not owner.tracing or not self.records:
            return
        now = time.time_ns()
        polls: dict[_RunTrace, _PollOfRun] = {}
        steps = self.steps if len(self.steps) == len(self.records) else None  # None: it failed before stepping
        for i, record in enumerate(self.records):
            run = self._run_of_failed(record, steps[i] if steps is not None else None)
            if run is None or run.span is None:
                continue
            poll = polls.get(run)
            if poll is None:
                poll = polls[run] = _PollOfRun(run, first_offset=record.offset)
            poll.records += 1
            _note_link(poll, record)
        for poll in polls.values():
            self._process_span(poll, now, exc)

    def _run_of(self, record: RawRecord, step: Step) -> _RunTrace | None:
        """The run a stepped record counts under: the one held, or one first met here (started);
        a record of no run held — skipped or dead-lettered — has none (a span started for it
        would never end). A failed poll's retry reuses a run started by the failure."""
        key = step.run
        if key is None:
            return None
        run = self.owner.runs.get(key)  # type: ignore[arg-type]
        if run is None and step.skipped is None and step.dead_letter is None:
            run = self.owner._start_run(key, record, self.started)  # type: ignore[arg-type]
        return run

    def _run_of_failed(self, record: RawRecord, step: Step | None) -> _RunTrace | None:
        """The run a record of a failed poll is spanned under: as a committed poll would judge it
        (:meth:`_run_of`) once stepped; if it failed before stepping, only a run already held,
        named by the record's headers."""
        if step is not None:
            return self._run_of(record, step)
        headers = _Headers.of(record)
        return self.owner.runs.get((headers.tenant, headers.run_id)) if headers.run_id is not None else None

    def _delays(self, acknowledged: int) -> None:
        """End-to-end delay: each partition's oldest record in the poll (its Kafka timestamp, ms)."""
        oldest: dict[int, int] = {}
        for record in self.records:
            stamp = record.timestamp
            if stamp >= 0 and stamp < oldest.get(record.partition, 1 << 62):
                oldest[record.partition] = stamp
        record_delay = self.owner.record_delay
        for stamp in oldest.values():
            record_delay.record(max(0.0, acknowledged / 1e9 - stamp / 1e3))


def _note_link(poll: _PollOfRun, record: RawRecord) -> None:
    """A traced run's record produced under another context than the run's first: link it (sampled only)."""
    traceparent = _traceparent(record)
    if traceparent is None or traceparent == poll.run.traceparent or traceparent in poll.links or len(poll.links) >= MAX_LINKS:
        return
    link = _sampled_link(_producer_context(traceparent, None))
    if link is not None:
        poll.links[traceparent] = link


class _Tally:
    """Counter increments of committed polls, summed per counter and label set and handed to the
    SDK by :meth:`NormalizerTelemetry.flush_counts`: counters are sums, so the exported values
    are the same, at one guarded ``add`` per label set per flush instead of several per record."""

    def __init__(self) -> None:
        self.sums: dict[tuple[Any, str | None, Any, Any], int] = {}
        """(counter, provider, label name(s), label value(s)) → amount; the per-record loop adds
        to it directly (a call per record and label set cost more than the sum)."""

    def add(self, counter: Any, provider: str | None, name: Any, value: Any, amount: int = 1) -> None:
        key = (counter, provider, name, value)
        self.sums[key] = self.sums.get(key, 0) + amount

    def flush(self) -> None:
        sums, self.sums = self.sums, {}
        for (counter, provider, name, value), amount in sums.items():
            labels: dict[str, Any] = {v.GEN_AI_PROVIDER_NAME: provider} if provider is not None else {}
            if type(name) is tuple:
                labels.update(zip(name, value, strict=True))
            else:
                labels[name] = value
            counter.add(amount, labels)


_DLQ_LABELS = (v.RW_DLQ_CAUSE, v.RW_DLQ_CODE)
_RUN_LABELS = (v.RW_RUN_OUTCOME, v.GEN_AI_RESPONSE_MODEL)
_TOKEN_LABELS = (v.RW_TOKEN_TYPE, v.GEN_AI_RESPONSE_MODEL)


def _dead_letter_labels(step: Step) -> tuple[str, str]:
    """(cause, code): ``envelope`` when no run could be named, else the core's code; the code is
    the record's ``rw-dlq-code`` header (``reasonwire.workers.core.delivery.DeadLetterCode``)."""
    if step.dead_letter is not None:
        code = step.dead_letter.value
    else:
        code = DeadLetterCode.INVALID_ENVELOPE.value if step.run is None else DeadLetterCode.MALFORMED_EVENT.value
    return ("envelope" if step.run is None else code), code


def _outcome(step: Step) -> str:
    """The record's outcome in the metric's fixed vocabulary (the commonest case first)."""
    if step.dead_letter is None and step.skipped is None:
        if step.run is None:
            return "dead_lettered"
        for out in step.outbound:  # a loop, not any(<generator>): this runs per record
            if out.topic == _DLQ:
                return "rejected"
        return "translated" if step.journal_append is not None else "control"  # a control record is never journaled
    if step.run is None:
        return "dead_lettered"
    if step.dead_letter is not None:
        return "rejected"
    # The core's reasons are prose; the metric needs a fixed vocabulary.
    skipped = step.skipped or ""
    return "skipped_duplicate" if skipped.startswith("duplicate") else "skipped_run_ended" if "ended" in skipped else "skipped"


def _events(step: Step) -> dict[str, int]:
    """AG-UI events published by the Step, by topic (dead letters and usage records are not events)."""
    events: dict[str, int] = {}
    for out in step.outbound:
        topic = out.topic
        if topic in _EVENT_TOPICS:
            events[topic] = events.get(topic, 0) + 1
    return events


def _usage_json(step: Step) -> bytes | None:
    for out in step.outbound:
        if out.topic == topics.USAGE:
            return out.value
    return None


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


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: val for k, val in attributes.items() if val is not None}


class Flights:
    """The normalizer worker's bookkeeping per flight of the delivery machine: its batch trace
    from the poll to its retirement, the poll's hand-off time (workers/ops/handoff.py; expiry
    flights have none), and the worker's counts (``stats``)."""

    def __init__(self, telemetry: NormalizerTelemetry) -> None:
        self.telemetry = telemetry
        self.traces: dict[int, BatchTrace] = {}
        self.polled: dict[int, float] = {}
        """Flight → ``time.perf_counter()`` when its poll reached the worker (only while the
        hand-off recorder is on)."""
        self.stats: dict[str, int] = {"records": 0, "events": 0, "artefacts": 0, "dead_letters": 0, "skipped": 0, "store_lost": 0}

    def opened(self, flight: int, records: Sequence[RawRecord], polled: float) -> None:
        """A poll became ``flight``: its trace starts."""
        self.traces[flight] = self.telemetry.batch(records).__enter__()
        if handoff.recorder.enabled:
            self.polled[flight] = polled

    def stepped(self, flight: int, steps: Sequence[Step], complete: Sequence[Step] | None) -> None:
        """Register the Steps' content before the store or the broker can quote it (P8);
        ``complete``: every Step of the flight, once it is stepped whole."""
        trace = self.traces.get(flight)
        if trace is None:  # an expiry's flight
            trace = self.traces[flight] = self.telemetry.batch(()).__enter__()
        trace.register(steps)
        if complete is not None:
            trace.stepped(complete, registered=True)

    def sent(self, flight: int, outbound: Sequence[Outbound], terminal: bool) -> None:
        """A flight's outputs went to the outbox: the hand-off timing, the counts."""
        polled = self.polled.get(flight) if self.polled else None
        if polled is not None:  # ``terminal``: after the poll's write (runs that ended, runs not yet confirmed)
            handoff.recorder.handed(polled, terminal)
        stats = self.stats
        for out in outbound:
            stats["dead_letters" if out.topic == topics.DLQ else "events"] += 1

    def acknowledged(self, flight: int) -> None:
        """The end of the records' end-to-end delay."""
        trace = self.traces.get(flight)
        if trace is not None:
            trace.acknowledged()

    def retired(self, flight: int, records: int, failure: BaseException | None) -> None:
        """The flight committed (``failure`` None) or was rewound: its trace ends (may raise: a
        telemetry bug, which the caller reports without stopping delivery)."""
        self.polled.pop(flight, None)
        trace = self.traces.pop(flight, None)
        if failure is None:
            self.stats["records"] += records
        if trace is not None:
            trace.__exit__(type(failure) if failure else None, failure, None)
