"""The normalizer's decisions, sans-I/O: raw records in, records to publish and state to write out.

Theory of operation
-------------------
The Kafka worker (``workers.normalize``) is a thin adapter around this object.
For each raw record it asks :meth:`Normalizer.route` what the record is — a
dead letter (headers break the ``reasoning.raw.v1`` contract), or input for a
run — and then :meth:`Normalizer.accept` for the run's translator output, as a
:class:`Step`: AG-UI events for ``reasoning.events.v1`` numbered per run,
artefact records for the store, a usage record when the run ends, dead letters,
and the journal operation that keeps the run recoverable.

Run ownership and recovery. Every record of a run shares its partition (key =
run id), so one worker owns a run at a time. Translators are deterministic, so
a run's state is fully described by the raw events it has consumed: the
*journal* (raw bytes of the run's records so far, kept in Redis only while the
run is open) is written in the same Redis transaction as the record's
artefacts, before the offset is committed. A worker that meets a run it does
not hold in memory — after a restart, a crash, or a partition moving to it —
calls :meth:`Normalizer.restore` with the journal: the run's earlier events are
re-fed to a fresh translator, their output discarded but counted, so the event
numbering continues where the previous owner stopped. An in-memory run whose
next expected sequence number is not the record's is stale (another worker
advanced it) and is restored the same way. Redelivered records (``rw-seq``
below the run's next) are skipped; a record of a run that already ended is
skipped too. Output is at least once: a record redelivered after its outputs
were published but before its offset was committed is published again with
the same ``rw-event-seq``, so consumers can drop the duplicate.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from contracts import topics
from contracts.artefacts import ArtefactRecord
from contracts.envelope import (
    HEADER_EVENT_SEQ,
    HEADER_PROVIDER,
    HEADER_REASON,
    HEADER_RUN_ID,
    HEADER_TENANT,
    HEADER_THREAD_ID,
    Control,
    EnvelopeError,
    RawEnvelope,
    read_envelope,
)
from contracts.grammars import Grammar
from contracts.policy import Audience, PolicyBook, RetentionPolicy
from workers.core.audience import AudienceFilter
from workers.core.translator import ErrorCode, Translation, Translator, TranslatorWarning
from workers.core.wire import event_json, record_json
from workers.translators import implemented, translator_for


_ENDED_MEMORY = 10_000
"""How many ended runs a worker remembers locally; older ones are found in the store."""


class RawRecord(NamedTuple):
    """One record from ``reasoning.raw.v1``, bytes as consumed (a tuple: one per raw record)."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    """As the Kafka client hands them over (a header's value may be absent)."""
    partition: int = 0
    offset: int = -1


KafkaHeaders = list[tuple[str, bytes | None]]


class Outbound(NamedTuple):
    """A record to publish (a tuple: one is built per output event)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: KafkaHeaders
    """As the Kafka client takes them, encoded once: a run's common headers are
    encoded when the run starts, not per record."""

    def header(self, name: str) -> str | None:
        """One header's value, decoded (for readers; the adapter sends ``headers`` as is)."""
        for key, value in self.headers:
            if key == name:
                return value.decode("utf-8", "replace") if value is not None else None
        return None


class RunKey(NamedTuple):
    """A run's identity in the run table (a tuple: hashed several times per record)."""

    tenant: str
    run_id: str


class JournalEntry(NamedTuple):
    """One raw event of an open run, as the journal keeps it."""

    seq: int
    value: bytes
    sse_event: str | None = None


@dataclass(slots=True)
class Step:
    """What the adapter must do for one record, in this order: store, publish, commit."""

    run: RunKey | None = None
    thread_id: str | None = None
    outbound: list[Outbound] = field(default_factory=list)
    artefacts: list[ArtefactRecord] = field(default_factory=list)
    artefact_ttl_s: int | None = None
    """How long the artefacts live (the tenant's opaque-state policy)."""
    journal_append: JournalEntry | None = None
    run_ended: bool = False
    warnings: list[TranslatorWarning] = field(default_factory=list)
    skipped: str | None = None
    """Why the record changed nothing (duplicate, run already ended), if it did not."""


@dataclass
class DeadLetter:
    """A record that cannot be attributed to a run: it goes to the DLQ as it came."""

    record: RawRecord
    reason: str


@dataclass(slots=True)
class RunInput:
    record: RawRecord
    envelope: RawEnvelope
    run: RunKey


@dataclass
class _RunState:
    translator: Translator
    envelope: RawEnvelope
    partition: int
    policy: RetentionPolicy
    trusted: AudienceFilter
    public: AudienceFilter
    base_headers: KafkaHeaders
    """The headers every output of the run carries (encoded once per run)."""
    next_seq: int = 0
    event_seq: int = 0
    public_seq: int = 0
    last_seen: float = 0.0


class Normalizer:
    """Per-worker run table and every routing decision of the normalizer (sans-I/O)."""

    def __init__(self, policies: PolicyBook | None = None) -> None:
        self.policies = policies or PolicyBook()
        self._runs: dict[RunKey, _RunState] = {}
        self._ended: OrderedDict[RunKey, None] = OrderedDict()
        """Runs that ended here recently, so late duplicates are skipped without a lookup."""
        self._grammars = frozenset(g.value for g in implemented())

    # -- routing --------------------------------------------------------------------

    def route(self, record: RawRecord) -> DeadLetter | RunInput:
        headers = dict(record.headers)
        try:
            envelope = read_envelope(headers, self._grammars)
        except EnvelopeError as exc:
            return DeadLetter(record, str(exc))
        if envelope.control is None and record.value is None:
            return DeadLetter(record, "record has no value and is not a control record")
        if record.key is not None and record.key != envelope.run_id.encode():
            return DeadLetter(record, f"record key differs from {HEADER_RUN_ID}: ordering per run is not guaranteed")
        return RunInput(record, envelope, RunKey(envelope.tenant, envelope.run_id))

    def needs_restore(self, item: RunInput) -> bool:
        """True when the run is not held here, or is held but stale (another owner moved it on)."""
        if item.run in self._ended:
            return False
        state = self._runs.get(item.run)
        return state is None or item.envelope.seq > state.next_seq

    def restore(self, item: RunInput, journal: Iterable[JournalEntry], *, ended: bool) -> None:
        """Rebuild the run from its journal (entries before this record), or mark it ended."""
        self._runs.pop(item.run, None)
        if ended:
            self._mark_ended(item.run)
            return
        state = self._new_state(item)
        for entry in sorted(journal, key=lambda e: e.seq):
            if entry.seq >= item.envelope.seq:
                break
            out = state.translator.feed(entry.value, sse_event=entry.sse_event)
            self._apply(state, out, Step(), None, emit=False)  # same numbering and filters, no output
            state.next_seq = entry.seq + 1
        self._runs[item.run] = state

    # -- processing -----------------------------------------------------------------

    def accept(self, item: RunInput, *, now: float | None = None) -> Step:
        """Translate one raw record of a run; the adapter stores, publishes, then commits."""
        now = time.monotonic() if now is None else now
        key, env = item.run, item.envelope
        if key in self._ended:
            return Step(run=key, skipped="run already ended")
        state = self._runs.get(key) or self._new_state(item)
        self._runs[key] = state
        if env.seq < state.next_seq:
            return Step(run=key, skipped=f"duplicate record rw-seq {env.seq} (next is {state.next_seq})")
        step = Step(run=key, thread_id=state.envelope.thread_id)
        if env.seq > state.next_seq:
            step.warnings.append(TranslatorWarning("sequence_gap", f"rw-seq jumped from {state.next_seq} to {env.seq}", env.seq))
        state.next_seq = env.seq + 1
        state.last_seen = now
        if env.control is not None:
            reason = "the ingress reported the connection dropped" if env.control is Control.ABORT else None
            translation = state.translator.abort(reason) if reason else state.translator.finish()
        else:
            assert item.record.value is not None  # route() dead-letters value-less data records
            step.journal_append = JournalEntry(env.seq, item.record.value, env.sse_event)
            translation = state.translator.feed(item.record.value, sse_event=env.sse_event, at_ms=now * 1000)
        self._apply(state, translation, step, item.record)
        return step

    def expire(self, *, now: float | None = None, timeout_s: float) -> list[Step]:
        """Close runs whose ingress went silent for ``timeout_s`` (RUN_ERROR, interrupted)."""
        now = time.monotonic() if now is None else now
        steps = []
        for key, state in list(self._runs.items()):
            if now - state.last_seen >= timeout_s:
                step = Step(run=key, thread_id=state.envelope.thread_id)
                translation = state.translator.abort(
                    f"no input for {timeout_s:g}s: the ingress vanished", code=ErrorCode.INACTIVITY_TIMEOUT
                )
                self._apply(state, translation, step, None)
                steps.append(step)
        return steps

    def forget_partitions(self, partitions: Iterable[int]) -> int:
        """Drop the runs of partitions this worker no longer owns; the new owner restores them."""
        gone = set(partitions)
        dropped = [k for k, s in self._runs.items() if s.partition in gone]
        for key in dropped:
            del self._runs[key]
        self._ended.clear()
        return len(dropped)

    @property
    def open_runs(self) -> int:
        return len(self._runs)

    # -- internals ------------------------------------------------------------------

    def _mark_ended(self, key: RunKey) -> None:
        self._ended[key] = None
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)

    def _new_state(self, item: RunInput) -> _RunState:
        env = item.envelope
        translator = translator_for(
            Grammar(env.grammar),
            run_id=env.run_id,
            thread_id=env.thread_id,
            model=env.model,
            issuer_scope=env.issuer_scope,
        )
        policy = self.policies.for_tenant(env.tenant)
        return _RunState(
            translator,
            env,
            item.record.partition,
            policy,
            trusted=AudienceFilter(policy.rule(Audience.TRUSTED)),
            public=AudienceFilter(policy.rule(Audience.PUBLIC)),
            base_headers=[
                (HEADER_RUN_ID, env.run_id.encode()),
                (HEADER_THREAD_ID, env.thread_id.encode()),
                (HEADER_TENANT, env.tenant.encode()),
                (HEADER_PROVIDER, env.grammar.encode()),
            ],
            last_seen=time.monotonic(),
        )

    def _apply(
        self, state: _RunState, translation: Translation, step: Step, record: RawRecord | None, *, emit: bool = True
    ) -> None:
        """Number and filter the translation's events per audience and put the outputs in ``step``;
        with ``emit=False`` (a restore) only the numbering and the filters advance."""
        env, policy, base = state.envelope, state.policy, state.base_headers
        key = env.run_id.encode()
        for event in translation.events:
            trusted = state.trusted.admit(event)
            blob = None
            if trusted is not None:
                if emit:
                    blob = event_json(trusted)
                    step.outbound.append(_event_record(topics.EVENTS, key, blob, base, state.event_seq))
                state.event_seq += 1
            public = state.public.admit(event)
            if public is not None:
                if emit:
                    public_blob = blob if public is trusted and blob is not None else event_json(public)
                    step.outbound.append(_event_record(topics.EVENTS_PUBLIC, key, public_blob, base, state.public_seq))
                state.public_seq += 1
        if not emit:
            return
        if policy.opaque_state.store:
            step.artefact_ttl_s = policy.opaque_state.ttl_s
            for record in translation.artefacts:  # fresh from the translator, owned by this step
                record.tenant = env.tenant
            step.artefacts += translation.artefacts
        step.warnings += translation.warnings
        if translation.rejection is not None and record is not None:
            step.outbound.append(_dead_letter(record, translation.rejection.reason))
        if state.translator.ended:
            self._end(state, step, base)

    def _end(self, state: _RunState, step: Step, headers: KafkaHeaders) -> None:
        env = state.envelope
        usage = state.translator.usage_record(tenant=env.tenant)
        for problem in usage.tokens.inconsistencies():
            step.warnings.append(TranslatorWarning("usage_inconsistent", problem, state.translator.line))
        if state.policy.publish_usage:
            step.outbound.append(Outbound(topics.USAGE, env.run_id.encode(), record_json(usage), list(headers)))
        step.run_ended = True
        self._runs.pop(RunKey(env.tenant, env.run_id), None)
        self._mark_ended(RunKey(env.tenant, env.run_id))


_JSON = ("content-type", b"application/json")


def _event_record(topic: str, key: bytes, blob: bytes, base: KafkaHeaders, seq: int) -> Outbound:
    return Outbound(topic, key, blob, [*base, (HEADER_EVENT_SEQ, str(seq).encode()), _JSON])


def dead_letter(item: DeadLetter) -> Outbound:
    """The DLQ record for an unattributable input: original key, bytes and headers, plus why."""
    return _dead_letter(item.record, item.reason)


def _dead_letter(record: RawRecord, reason: str) -> Outbound:
    """The original headers byte for byte (even ones that are not UTF-8), plus the reason."""
    headers = [(name, value) for name, value in record.headers if name != HEADER_REASON]
    headers.append((HEADER_REASON, reason.encode()))
    return Outbound(topics.DLQ, record.key, record.value or b"", headers)
