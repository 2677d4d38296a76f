"""The normalizer's decisions, sans-I/O: raw records in, records to publish and state to write out.

Theory of operation
-------------------
The Kafka worker (``reasonwire.workers.services.normalizer``) is a thin adapter around this object.
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
numbering continues where the previous owner stopped. Output is at least
once: a record redelivered after its outputs were published but before its
offset was committed is published again with the same ``rw-event-seq``, so
consumers can drop the duplicate.

Record accounting (``reasonwire.workers.core.delivery``): every raw record is
processed, dead-lettered with a code, or counted as a redelivery. A run accepts
its input strictly in ``rw-seq`` order; a gap ends it (``sequence_gap``), a
different record under an accepted ``rw-seq`` is a conflict, a provider event
after the end is dead-lettered (the ended marker keeps the offset the run ended
at, so a redelivery is told from a late record), and a control record for a run
with no accepted input makes no run. An exception while translating one record,
or an output too large for its topic, ends that record's run and nothing else.
Because only accepted input is journaled and every number is derived from it,
``rw-event-seq`` is a function of the run's accepted input across restarts,
rewinds and gaps.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from functools import partial
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

import orjson

from reasonwire.contracts import topics
from reasonwire.contracts.artefacts import AGUI_VERSIONS, ArtefactRecord
from reasonwire.contracts.envelope import (
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
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.policy import Audience, PolicyBook, RetentionPolicy
from reasonwire.workers.core import events as ev
from reasonwire.workers.core.audience import AudienceFilter
from reasonwire.workers.core.delivery import DeadLetterCode, OutputLimits, dead_letter_headers, fit_dead_letter, record_size
from reasonwire.workers.core.discipline import METADATA_KEY
from reasonwire.workers.core.events import WireEvent, with_value_types
from reasonwire.workers.core.fence import SilenceClock, next_head
from reasonwire.workers.core.translator import ErrorCode, RunEnd, RunTranslator, Translation, TranslatorFactory, TranslatorWarning
from reasonwire.workers.core.wire import event_json, record_json


_ENDED_MEMORY = 10_000
_DIGESTS_KEPT = 8
_DIGEST_BYTES = 4
"""Per ended run, 4-byte digests of its last 8 accepted records, in its ended marker (64 hex
characters): a producer's retry of a record lands soon after it, so mostly among its run's last
ones. An older copy is dead-lettered ``run_ended`` as before, its bytes kept."""
EXPIRED_SEQ = -1
"""The journal field under which an inactivity timeout is recorded (its value: the timeout, in seconds)."""
HEAD_SEQ = -3
"""The journal field holding the run's head (``workers/core/fence.py``): who wrote for it last."""
ENVELOPE_SEQ = -4
"""The journal field holding the run's envelope (:meth:`Normalizer.envelope_of`): what a worker that
meets the run in the store's index of open runs, with no record of it, rebuilds its translator from."""
GAP_SEQ = -2
"""The journal field under which a ``sequence_gap`` end is recorded (``partition:offset:reason`` of
the record that showed the gap): judged against the journal as it was, so every later owner must
find the decision rather than judge again against a journal another worker went on writing."""
"""How many ended runs a worker remembers locally; older ones are found in the store."""


class RawRecord(NamedTuple):
    """One record from ``reasoning.raw.v1``, bytes as consumed (a tuple: one per raw record)."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    """As the Kafka client hands them over (a header's value may be absent)."""
    partition: int = 0
    offset: int = -1
    timestamp: int = -1
    """The record's Kafka timestamp (ms since the epoch; -1: unknown), for telemetry's end-to-end delay."""


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


@dataclass(slots=True, init=False)
class Step:
    """What the adapter must do for one record, in this order: store, publish, commit.

    One is built per raw record, so it holds no object it does not need: ``artefacts``,
    ``warnings``, ``reasoning`` and ``secrets`` are the shared empty tuple unless the record
    has some (then a list); read them, never append to them."""

    run: RunKey | None
    thread_id: str | None
    outbound: list[Outbound]
    artefacts: Sequence[ArtefactRecord]
    artefact_ttl_s: int | None
    """How long the artefacts live (the tenant's opaque-state policy)."""
    journal_append: JournalEntry | None
    run_ended: bool
    warnings: Sequence[TranslatorWarning]
    skipped: str | None
    """Why the record changed nothing (duplicate, run already ended), if it did not."""
    dead_letter: DeadLetterCode | None
    """Why this record was dead-lettered, if it was (the DLQ record is in ``outbound``)."""
    ended_at: tuple[int, int] | None
    """When ``run_ended``: (partition, offset) of the run's last raw record, for the ended
    marker — a later record of the run is dead-lettered, a redelivered one is not."""
    ended_marker: bytes
    """When ``run_ended``: the ended marker to store (:meth:`Ended.marker`)."""
    error: str | None
    """The exception type that failed the run (``internal_error``), for a content-free log line."""
    fence: tuple[str, str] | None
    """(head expected, head written) of the run's journal: set on every Step that writes for its
    run (a journal entry, a run's end). The store applies the poll only if the run's head is still
    the expected one (``workers/core/fence.py``): a stale copy of the run writes and sends nothing."""
    reasoning: Sequence[tuple[str, str | None]]
    """P8: the readable reasoning of this step's events, in order, before audience filtering —
    (message id, delta), or (message id, ``None``) where a message ends. The adapter registers
    it (with ``secrets`` and the artefacts' values) so no log line or span can carry it; handed
    over as text, so the adapter does not parse the events it publishes to find it."""
    secrets: Sequence[str]
    """P8: the ``encryptedValue`` of this step's ``REASONING_ENCRYPTED_VALUE`` events."""

    def __init__(
        self,
        run: RunKey | None = None,
        thread_id: str | None = None,
        *,
        outbound: list[Outbound] | None = None,
        artefacts: Sequence[ArtefactRecord] = (),
        artefact_ttl_s: int | None = None,
        journal_append: JournalEntry | None = None,
        run_ended: bool = False,
        warnings: Sequence[TranslatorWarning] = (),
        skipped: str | None = None,
        dead_letter: DeadLetterCode | None = None,
        ended_at: tuple[int, int] | None = None,
        ended_marker: bytes = b"",
        error: str | None = None,
        fence: tuple[str, str] | None = None,
        reasoning: Sequence[tuple[str, str | None]] = (),
        secrets: Sequence[str] = (),
    ) -> None:
        """Written out (``init=False``), not generated: compiled by mypyc, a dataclass's generated
        ``__init__`` stays interpreted Python, and one Step is built per record. The defaults
        live here only."""
        self.run = run
        self.thread_id = thread_id
        self.outbound = [] if outbound is None else outbound
        self.artefacts = artefacts
        self.artefact_ttl_s = artefact_ttl_s
        self.journal_append = journal_append
        self.run_ended = run_ended
        self.warnings = warnings
        self.skipped = skipped
        self.dead_letter = dead_letter
        self.ended_at = ended_at
        self.ended_marker = ended_marker
        self.error = error
        self.fence = fence
        self.reasoning = reasoning
        self.secrets = secrets


@dataclass
class DeadLetter:
    """A record that cannot be attributed to a run: it goes to the DLQ as it came."""

    record: RawRecord
    reason: str
    code: DeadLetterCode = DeadLetterCode.INVALID_ENVELOPE


class Ended(NamedTuple):
    """Where a run ended: its last raw record's partition and offset (-1: unknown)."""

    partition: int = -1
    offset: int = -1
    digests: str = ""
    """Short digests (hex) of the run's last accepted records (``_DIGESTS_KEPT`` at most): a copy
    of one of them arriving after the end is a duplicate, not a late record. Kept in
    the ended marker, so the judgement is the same whoever makes it."""
    accepted: int = 0
    """How many records the run accepted (the ``rw-seq`` after its last one)."""

    def duplicate(self, seq: int, digest: bytes) -> bool:
        """Whether ``digest`` is the one accepted under ``seq`` (known for the last few only)."""
        width = 2 * _DIGEST_BYTES
        index = seq - (self.accepted - len(self.digests) // width)
        return 0 <= index and seq < self.accepted and self.digests[width * index : width * (index + 1)] == digest[:_DIGEST_BYTES].hex()

    def marker(self) -> bytes:
        """The ended marker's value in the store: ``partition:offset[:accepted:digests]``."""
        tail = f":{self.accepted}:{self.digests}" if self.digests else ""
        return f"{self.partition}:{self.offset}{tail}".encode()

    @classmethod
    def parse(cls, marker: bytes | str | bool | None) -> Ended | None:
        """An ended marker as the store returns it (``None``/``False``: the run has not ended;
        a marker from before offsets were recorded, or ``True``: ended, position unknown)."""
        if not marker:
            return None
        text = marker.decode("ascii", "replace") if isinstance(marker, bytes) else str(marker)
        partition, _, rest = text.partition(":")
        offset, _, rest = rest.partition(":")
        accepted, _, digests = rest.partition(":")
        try:
            return cls(int(partition), int(offset), digests, int(accepted) if accepted else 0)
        except ValueError:
            return cls()


@dataclass(slots=True, init=False)
class RunInput:
    record: RawRecord
    envelope: RawEnvelope
    run: RunKey

    def __init__(self, record: RawRecord, envelope: RawEnvelope, run: RunKey) -> None:
        """Written out: one per record (see :class:`Step`)."""
        self.record, self.envelope, self.run = record, envelope, run


@dataclass
class _RunState:
    translator: RunTranslator
    envelope: RawEnvelope
    partition: int
    policy: RetentionPolicy
    trusted: AudienceFilter
    public: AudienceFilter
    base_headers: KafkaHeaders
    """The headers every output of the run carries (encoded once per run)."""
    key: bytes = b""
    """The run id as the outputs' Kafka key (encoded once per run)."""
    trusted_all: bool = False
    public_all: bool = False
    """The audience's filter passes every event (``AudienceFilter.passes_everything``): not asked per event."""
    next_seq: int = 0
    event_seq: int = 0
    public_seq: int = 0
    last_seen: float = 0.0
    last_offset: int = -1
    """Offset of the run's last accepted raw record (its partition is ``partition``)."""
    digests: list[bytes] = field(default_factory=list)
    """Per accepted ``rw-seq``: a digest of the record, so a re-sent copy is told from a conflict."""
    broken: str | None = None
    """Re-feeding the journal raised (exception type): the run fails ``internal_error`` on its next record."""
    expired: str | None = None
    """The journal says the run timed out (after its last entry): the timeout, as journaled."""
    gap: tuple[int, int, str] | None = None
    """The journal says the run ended ``sequence_gap`` (after its last entry): where, and why."""
    ahead: dict[int, JournalEntry] = field(default_factory=dict)
    """Journal entries past the state (accepted by an attempt whose offsets were not committed):
    a record that comes again is checked against them (:meth:`Normalizer.accept`)."""
    room: tuple[int, int] = (0, 0)
    """The largest event value (trusted, public) that fits its topic with the run's headers."""


class Normalizer:
    """Per-worker run table and every routing decision of the normalizer (sans-I/O).

    Every raw record is accounted for (``reasonwire.workers.core.delivery``): :meth:`route` and
    :meth:`accept` never raise — a record they cannot handle is dead-lettered, and an
    exception while translating or serializing one record fails that record's run
    (``internal_error``) and nothing else. A run's event numbering (``rw-event-seq``) is a
    function of its accepted input only, which is exactly its journal: input is accepted
    strictly in ``rw-seq`` order from 0, a gap ends the run (``sequence_gap``), and a record
    that ends a run for any reason other than its own content is never journaled.
    """

    def __init__(
        self,
        policies: PolicyBook | None = None,
        *,
        translators: TranslatorFactory,
        limits: OutputLimits | None = None,
        grammars: Iterable[Grammar | str] | None = None,
        agui_version: str = "1.0",
    ) -> None:
        self.policies = policies or PolicyBook()
        if agui_version not in AGUI_VERSIONS:
            raise ValueError(f"AG-UI version {agui_version!r}: expected one of {', '.join(AGUI_VERSIONS)}")
        self.agui_version = agui_version
        """``RW_AGUI_VERSION``: at 1.1 each encrypted value carries its ``encryptedValueType``."""
        self._translator_for = translators
        """Makes each run's translator (``reasonwire.workers.translators.translator_for``): handed
        in, so the core never imports the translators built on it."""
        self.limits = limits or OutputLimits()
        """The broker's size limit per output topic (the worker sets them from the topics' configs)."""
        self._runs: dict[RunKey, _RunState] = {}
        self._ended: OrderedDict[RunKey, Ended] = OrderedDict()
        """Runs that ended here recently, and where, so late records are judged without a lookup."""
        self._grammars = frozenset(Grammar(g).value for g in (Grammar if grammars is None else grammars))
        """The grammars ``translators`` has a translator for (default: every grammar of the contract);
        a record of another one is dead-lettered by :meth:`route`."""
        self._stepped: dict[int, int] = {}
        """Partition → offset of the last raw record routed (goes back after a rewind)."""
        self._replay: dict[int, int] = {}
        """Partition → the highest offset that may have been published already: stepped before a
        rewind, or in the log when this worker first fetched the partition (``replay_until``)."""
        self.clock = SilenceClock()
        """Stream time per partition: what silence is measured in (the adapter feeds it)."""
        self.expiry_due_in = float("inf")
        """After :meth:`expire`: the stream time until the first run it judged and left open may be
        due. Stream time runs no faster than the wall clock (but for one clock step after a jump),
        so judging again that much later in wall time ends no run early, and at most a step late."""
        self.token = "w"
        """This worker's name in the journal heads it writes (the adapter sets a random one)."""
        self._doubtful: set[RunKey] = set()
        """Runs restored while the store may have lost entries (its loss window): a gap there may be
        the store's, not the input's, so it is refused (``store_lost``), never decided."""
        self._heads: dict[RunKey, str] = {}
        """Run → its journal head as this worker last read or wrote it (the fence, ``Step.fence``)."""

    # -- routing --------------------------------------------------------------------

    def route(self, record: RawRecord) -> DeadLetter | RunInput:
        """What the record is: input for a run, or a dead letter (never raises)."""
        self._stepped[record.partition] = record.offset
        if record.offset > self._replay.get(record.partition, -1):
            self._replay[record.partition] = record.offset
        try:
            return self._route(record)
        except Exception as exc:  # whatever the headers hold, the record is accounted for
            return DeadLetter(record, f"record could not be read ({type(exc).__name__})", DeadLetterCode.UNREADABLE)

    def _route(self, record: RawRecord) -> DeadLetter | RunInput:
        headers = dict(record.headers)
        try:
            envelope = read_envelope(headers, self._grammars)
        except EnvelopeError as exc:
            return DeadLetter(record, str(exc))
        if envelope.control is None and record.value is None:
            return DeadLetter(record, "record has no value and is not a control record")
        if record.key is not None and record.key != envelope.run_id.encode():
            return DeadLetter(record, f"record key differs from {HEADER_RUN_ID}: ordering per run is not guaranteed")
        return RunInput(record, envelope, _run_key((envelope.tenant, envelope.run_id)))

    def replay_until(self, partition: int, end_offset: int) -> None:
        """The partition's log ended at ``end_offset`` when this worker first fetched it: a previous
        owner may have published outputs of any record before it (it died before committing)."""
        self._replay[partition] = max(self._replay.get(partition, -1), end_offset - 1)

    def assigned_at(self, partition: int, committed: int) -> None:
        """The partition was assigned with the group's committed offset: every record below it was
        processed (by whoever owned it), so it is the stepped position until a record comes."""
        if partition not in self._stepped:
            self._stepped[partition] = committed - 1

    def rewound(self, offsets: Mapping[int, int]) -> None:
        """These partitions were rewound to these offsets: their records from there come again, so
        until they are stepped again the partitions are replaying (no timeout judged there — a
        run adopted meanwhile would otherwise be expired over outputs already sent for them)."""
        for partition, offset in offsets.items():
            if self._stepped.get(partition, -1) >= offset:
                self._stepped[partition] = offset - 1

    def knows(self, partition: int) -> bool:
        return partition in self._replay

    def published_upto(self, partition: int) -> int:
        """The highest offset of ``partition`` whose outputs may have been published already, by
        this worker before a rewind or by a previous owner (-1: none)."""
        return self._replay.get(partition, -1)

    def stepped_to(self, partition: int) -> int:
        """The offset after the last record of ``partition`` stepped here (-1: none)."""
        last = self._stepped.get(partition)
        return -1 if last is None else last + 1

    def replaying(self, partition: int) -> bool:
        """Records of this partition that may have been published are being stepped again: no
        timeout is judged there until they are past (a timeout between two of them would number
        its ``RUN_ERROR`` over an event already published for the later one)."""
        return self._stepped.get(partition, -1) < self._replay.get(partition, -1)

    def reject(self, item: DeadLetter) -> Step:
        """The step for a record :meth:`route` refused: its dead letter, nothing else."""
        return Step(outbound=[self._dead_letter(item.record, item.reason, item.code)], dead_letter=item.code)

    def needs_restore(self, item: RunInput) -> bool:
        """True when the run is neither held here nor known to have ended here: its journal (and
        ended marker) must be read first. A held run never needs it — partitions are handed over
        through the rebalance listener, which drops the revoked partitions' runs, so what this
        worker holds is never behind another owner."""
        return item.run not in self._ended and item.run not in self._runs

    def restore(self, item: RunInput, journal: Iterable[JournalEntry], *, ended: bytes | str | bool | None, head: str = "", doubtful: bool = False) -> None:
        """Rebuild the run from its journal, or mark it ended.

        The journal is the run's accepted input, ``0, 1, 2 …`` (only a contiguous prefix counts).
        It is re-fed up to this record's ``rw-seq`` — the exact state the run had when the record
        first came, so the numbering continues where the previous owner (or attempt) stopped and
        a redelivered record publishes what it published before. The entries from the record on
        are kept aside (``ahead``): they were accepted already, by an attempt whose offsets were
        not committed, and :meth:`accept` checks the records that come again against them —
        a record that differs from the entry for its ``rw-seq`` is a conflict, not new input.
        A run with no accepted input is not created here: a data record starts it in
        :meth:`accept`, a control record for it is dead-lettered (``unknown_run``). ``head`` is
        the journal's head as read: this worker's next write for the run expects it.
        ``doubtful``: the store may have lost entries of this journal (a loss window): the run
        goes on only with contiguous input — a gap or an expiry would be judged against what
        the store lost, so the run's record is refused instead (``store_lost``)."""
        where = Ended.parse(ended)
        self._runs.pop(item.run, None)
        self._heads.pop(item.run, None)
        self._doubtful.discard(item.run)
        if where is not None:
            self._mark_ended(item.run, where)
            return
        entries = {entry.seq: entry for entry in journal}
        stored = entries.pop(HEAD_SEQ, None)
        self._heads[item.run] = stored.value.decode("ascii", "replace") if stored is not None else head
        if doubtful:  # even with no entry 0: its rw-seq 0 may be a copy of a record the store lost
            self._doubtful.add(item.run)
        expired = entries.pop(EXPIRED_SEQ, None)
        gap = entries.pop(GAP_SEQ, None)
        entries.pop(ENVELOPE_SEQ, None)
        if 0 not in entries:
            return
        state = self._new_state(item)
        self._runs[item.run] = state
        if expired is not None:
            state.expired = expired.value.decode("ascii", "replace")
        if gap is not None:
            partition, _, rest = gap.value.decode("utf-8", "replace").partition(":")
            offset, _, reason = rest.partition(":")
            state.gap = (int(partition), int(offset), reason)
        self._catch_up(state, entries, upto=item.envelope.seq)
        end = state.next_seq
        while end in entries:
            state.ahead[end] = entries[end]
            end += 1

    def _catch_up(self, state: _RunState, entries: dict[int, JournalEntry], *, upto: int) -> None:
        """Re-feed accepted entries ``next_seq … upto-1`` (their outputs were published): the
        numbering and the filters advance, nothing is emitted."""
        try:
            while state.next_seq < upto and state.next_seq in entries:
                entry = entries.pop(state.next_seq) if entries is state.ahead else entries[state.next_seq]
                out = state.translator.feed(entry.value, sse_event=entry.sse_event)
                self._apply(state, out, Step(), None, emit=False)
                state.digests.append(_digest(entry.value, entry.sse_event))
                state.next_seq += 1
        except Exception as exc:  # deterministic: the same input raised (or not) when first accepted
            state.broken = type(exc).__name__

    # -- processing -----------------------------------------------------------------

    def accept(self, item: RunInput, now: float) -> Step:
        """Judge and translate one raw record of a run; the adapter stores, publishes, then commits.

        ``now``: when the record's poll came (monotonic seconds; the translators' timings in the
        usage record). Silence is measured apart from it, on the partition's stream time (:attr:`clock`)."""
        step = self._accept(item, now)
        self._fence(item.run, step)
        if item.run not in self._runs:  # ended, refused, or never started: nothing of it is held
            self._heads.pop(item.run, None)
        return step

    def _fence(self, run: RunKey, step: Step) -> None:
        """Give a Step that writes for its run the head it expects and the head it writes."""
        if step.journal_append is None and not step.run_ended:
            return
        before = self._heads.get(run, "")
        after = next_head(before, self.token)
        step.fence = (before, after)
        if step.run_ended:
            self._heads.pop(run, None)
        else:
            self._heads[run] = after

    def _accept(self, item: RunInput, wall: float) -> Step:
        key, env, record = item.run, item.envelope, item.record
        ended = self._ended.get(key)
        if ended is not None:
            return self._after_end(item, ended)
        state = self._runs.get(key)
        if state is None:
            if env.control is not None:
                reason = f"{env.control.value} record for a run with no accepted input"
                return self._refuse(item, DeadLetterCode.UNKNOWN_RUN, reason)
            state = self._runs[key] = self._new_state(item)
        if state.ahead and env.seq >= state.next_seq:
            accepted = state.ahead.get(env.seq)
            if accepted is not None and (env.control is not None or _digest(accepted.value, accepted.sse_event) != _digest(record.value, env.sse_event)):
                reason = f"rw-seq {env.seq} was already accepted with different content"
                return self._refuse(item, DeadLetterCode.DUPLICATE_CONFLICT, reason)
            self._catch_up(state, state.ahead, upto=env.seq)  # records between came before this poll
            redone = state.ahead.pop(env.seq, None) is not None
        else:
            redone = False
        if state.expired is not None and not state.ahead and not redone and env.seq >= state.next_seq:
            return self._after_expiry(item, state)
        if state.gap is not None and not state.ahead and not redone and env.seq >= state.next_seq:
            return self._after_gap(item, state)
        if env.seq < state.next_seq:
            return self._duplicate(item, state)
        step = Step(key, state.envelope.thread_id)  # positional: a keyword call costs twice as much
        state.last_seen = self.clock.seen(state.partition)
        state.last_offset = record.offset
        if env.seq > state.next_seq and key in self._doubtful:
            self.forget_runs([key])  # each later record is judged against the store again
            return self._refuse(item, DeadLetterCode.STORE_LOST, "the run's journal vanished with the store")
        if env.seq > state.next_seq:
            missing = f"rw-seq jumped from {state.next_seq} to {env.seq}: a record of the run is missing"
            self._fail(state, step, item, DeadLetterCode.SEQUENCE_GAP, missing)
            step.journal_append = JournalEntry(GAP_SEQ, f"{record.partition}:{record.offset}:{missing}".encode())
            return step
        if state.broken is not None:
            self._fail(state, step, item, DeadLetterCode.INTERNAL_ERROR, f"the run could not be restored ({state.broken})")
            return step
        marks = (state.event_seq, state.public_seq)
        try:
            self._translate(state, item, step, wall)
            if state.expired is not None and not state.ahead and not step.run_ended:  # redone up to the timeout
                self._expire_run(state, step, state.expired)
        except Exception as exc:  # this record's outputs cannot be made or cannot be published
            state.event_seq, state.public_seq = marks
            step.outbound.clear()
            step.artefacts = ()
            step.journal_append = None
            step.run_ended = False
            if isinstance(exc, _TooLarge):
                self._fail(state, step, item, DeadLetterCode.TOO_LARGE, str(exc))
            else:
                step.error = type(exc).__name__
                self._fail(state, step, item, DeadLetterCode.INTERNAL_ERROR, f"translating the record failed ({step.error})")
        return step

    def _after_expiry(self, item: RunInput, state: _RunState) -> Step:
        """A record of a run whose timeout a previous owner journaled: end the run as it did (the
        same events, numbers included), then judge the record as one after the end."""
        step = Step(run=item.run, thread_id=state.envelope.thread_id)
        state.last_offset = item.record.offset  # the ended marker: this record and earlier ones are judged
        self._expire_run(state, step, state.expired or "")
        late = self._after_end(item, Ended(item.record.partition, item.record.offset - 1))  # this one came after the end
        step.outbound += late.outbound
        step.dead_letter = late.dead_letter
        return step

    def _after_gap(self, item: RunInput, state: _RunState) -> Step:
        """A record of a run whose ``sequence_gap`` end is journaled: end the run as it was ended
        (the same events, numbers included); the record that showed the gap is judged as it was
        then, any other as a record after the end."""
        assert state.gap is not None
        step = Step(run=item.run, thread_id=state.envelope.thread_id)
        partition, offset, _ = state.gap
        record = item.record
        if (record.partition, record.offset) == (partition, offset):
            self._end_by_gap(state, step, item)
            return step
        self._end_by_gap(state, step, None)
        late = self._after_end(item, Ended(partition, offset))
        step.outbound += late.outbound
        step.dead_letter = late.dead_letter
        return step

    def _end_by_gap(self, state: _RunState, step: Step, item: RunInput | None) -> None:
        """End the run ``sequence_gap`` as journaled (the decision rewritten: idempotent)."""
        assert state.gap is not None
        partition, offset, reason = state.gap
        step.journal_append = JournalEntry(GAP_SEQ, f"{partition}:{offset}:{reason}".encode())
        state.partition, state.last_offset = partition, offset
        self._fail(state, step, item, DeadLetterCode.SEQUENCE_GAP, reason)

    def _translate(self, state: _RunState, item: RunInput, step: Step, now: float) -> None:
        env, record = item.envelope, item.record
        if env.control is not None:
            reason = "the ingress reported the connection dropped" if env.control is Control.ABORT else None
            translation = state.translator.abort(reason) if reason else state.translator.finish()
        else:
            assert record.value is not None  # route() dead-letters value-less data records
            step.journal_append = _journal_entry((env.seq, record.value, env.sse_event))
            translation = state.translator.feed(record.value, sse_event=env.sse_event, at_ms=now * 1000)
        self._apply(state, translation, step, record)
        state.next_seq = env.seq + 1
        state.digests.append(_digest(record.value, env.sse_event))

    def expire(self, *, now: float | None = None, timeout_s: float, partitions: Container[int] | None = None) -> list[Step]:
        """Close runs whose ingress went silent for ``timeout_s`` (RUN_ERROR, interrupted);
        ``partitions``: only runs of these (the others are not judged now).

        The decision is journaled (entry ``EXPIRED_SEQ``, in the same transaction as the rest of
        the poll, before the ``RUN_ERROR`` is sent): a timeout depends on the clock, not on the
        log, so a worker that restores the run after a crash must find it, not decide again —
        a late record would otherwise be translated into the number the ``RUN_ERROR`` took."""
        steps = []
        due_in = float("inf")
        for key, state in list(self._runs.items()):
            if state.ahead or self.replaying(state.partition) or key in self._doubtful:  # being redone, or its journal is in doubt
                continue
            if partitions is not None and state.partition not in partitions:
                continue
            current = self.clock.at(state.partition) if now is None else now
            left = timeout_s - (current - state.last_seen)
            if left > 0:
                due_in = min(due_in, left)
            else:
                step = Step(run=key, thread_id=state.envelope.thread_id)
                if state.gap is not None:  # another owner ended it: end it as it did, never twice
                    self._end_by_gap(state, step, None)
                else:
                    timeout = state.expired or f"{timeout_s:g}"
                    step.journal_append = JournalEntry(EXPIRED_SEQ, timeout.encode())
                    self._expire_run(state, step, timeout)
                self._fence(key, step)
                steps.append(step)
        self.expiry_due_in = due_in
        return steps

    def _expire_run(self, state: _RunState, step: Step, timeout: str) -> None:
        """End the run ``inactivity_timeout`` — the same events whenever it is (re)done."""
        marks = (state.event_seq, state.public_seq)
        try:
            translation = state.translator.abort(f"no input for {timeout}s: the ingress vanished", code=ErrorCode.INACTIVITY_TIMEOUT)
            self._apply(state, translation, step, None)
            if not step.run_ended:  # the translator had ended already: close the run anyway
                self._end(state, step, state.base_headers)
        except Exception as exc:
            state.event_seq, state.public_seq = marks
            step.outbound.clear()
            step.artefacts = ()
            step.error = type(exc).__name__
            self._fail(state, step, None, DeadLetterCode.INTERNAL_ERROR, f"closing the run failed ({step.error})")

    def holds(self, run: RunKey) -> bool:
        """Whether the run is held here, open or known ended (its records need no journal read)."""
        return run in self._runs or run in self._ended

    def holds_open(self, run: RunKey) -> bool:
        return run in self._runs

    def envelope_of(self, run: RunKey) -> bytes:
        """The run's envelope as its journal keeps it (``ENVELOPE_SEQ``): what every record of the
        run shares — grammar, ids, tenant, model, issuer — so a worker that finds the run only in
        the store's index of open runs can rebuild it (:meth:`adopt`)."""
        env = self._runs[run].envelope
        return orjson.dumps([env.grammar, env.run_id, env.thread_id, env.tenant, env.model, env.issuer_scope])

    def adopt(self, run: RunKey, partition: int, journal: Iterable[JournalEntry], *, doubtful: bool = False) -> bool:
        """Restore an open run that no record brought back (found in the store's index of open runs
        of ``partition``) from its whole journal, so the expiry judges it by stream time: a run
        whose producer vanished is ended, whoever held it before and whatever happened to it.

        Its last position is taken to be the highest offset of the partition that may have been
        published (its records up to there count as redeliveries once it ended). False when the
        journal cannot rebuild it (no envelope, no first record, already held)."""
        entries = {entry.seq: entry for entry in journal}
        blob = entries.get(ENVELOPE_SEQ)
        if blob is None or 0 not in entries or self.holds(run):
            return False
        try:
            grammar, run_id, thread_id, tenant, model, issuer = orjson.loads(blob.value)
        except (ValueError, TypeError):
            return False
        if grammar not in self._grammars or (tenant, run_id) != tuple(run):
            return False
        upto = 0
        while upto in entries:
            upto += 1
        envelope = RawEnvelope(grammar, run_id, thread_id, tenant, upto, model, issuer, None, None)
        record = RawRecord(run_id.encode(), None, (), partition, self.published_upto(partition))
        self.restore(RunInput(record, envelope, run), entries.values(), ended=False, doubtful=doubtful)
        state = self._runs.get(run)
        if state is None:
            return False
        state.last_seen = self.clock.at(partition)  # silent from now: no record came (a record's time is a tick ahead)
        return True

    def forget_partitions(self, partitions: Iterable[int], *, revoked: bool = False) -> int:
        """Drop the runs of partitions this worker no longer owns (``revoked``: for good, until
        assigned again) or is about to redo (a rewind); the runs are restored from the journal."""
        gone = set(partitions)
        if revoked:  # another owner may publish there meanwhile: judge the log end (and where it got) again on return
            for partition in gone:
                self._replay.pop(partition, None)
                self._stepped.pop(partition, None)
            self.clock.forget(gone)
        dropped = [k for k, s in self._runs.items() if s.partition in gone]
        self.forget_runs(dropped)
        self._ended.clear()
        return len(dropped)

    def forget_all(self) -> int:
        """Drop every run held (the worker was stalled long enough to have lost its partitions
        without being told): each is restored from its journal, as it is now, on its next record."""
        held = list(self._runs)
        self.forget_runs(held)
        self._heads.clear()
        self._ended.clear()
        return len(held)

    def partition_of(self, run: RunKey) -> int | None:
        """The raw partition of a run held here, open or ended here (``None``: not known)."""
        state = self._runs.get(run)
        if state is not None:
            return state.partition
        ended = self._ended.get(run)
        return ended.partition if ended is not None and ended.partition >= 0 else None

    def forget_runs(self, runs: Iterable[RunKey]) -> None:
        """Drop these runs' copies (the store refused a write for them: another worker wrote
        since — their next record restores them from the journal as it is now). An end decided
        here and refused goes too: the run is not known to have ended."""
        for key in runs:
            self._runs.pop(key, None)
            self._ended.pop(key, None)
            self._heads.pop(key, None)
            self._doubtful.discard(key)

    @property
    def open_runs(self) -> int:
        return len(self._runs)

    # -- accounting -----------------------------------------------------------------

    def _after_end(self, item: RunInput, ended: Ended) -> Step:
        """A record of a run that ended: a control record confirms the end (the ingress's end
        record after the provider's own end is normal); the run's records up to where it
        ended come again only as redeliveries (counted); anything later is dead-lettered."""
        record = item.record
        if item.envelope.control is not None:
            return Step(run=item.run, skipped="run already ended")
        if ended.offset < 0 or (record.partition == ended.partition and record.offset <= ended.offset):
            return Step(run=item.run, skipped="run already ended (redelivered record)")
        if ended.digests and ended.duplicate(item.envelope.seq, _digest(record.value, item.envelope.sse_event)):
            return Step(run=item.run, skipped=f"duplicate record rw-seq {item.envelope.seq} (the run has ended)")
        return self._refuse(item, DeadLetterCode.RUN_ENDED, "record after the end of its run")

    def _duplicate(self, item: RunInput, state: _RunState) -> Step:
        """An ``rw-seq`` already accepted: a byte-identical copy is counted, anything else is a conflict."""
        env = item.envelope
        known = state.digests[env.seq] if env.seq < len(state.digests) else None
        if env.control is None and known in (None, _digest(item.record.value, env.sse_event)):
            return Step(run=item.run, skipped=f"duplicate record rw-seq {env.seq} (next is {state.next_seq})")
        reason = f"rw-seq {env.seq} was already accepted with different content"
        return self._refuse(item, DeadLetterCode.DUPLICATE_CONFLICT, reason)

    def _refuse(self, item: RunInput, code: DeadLetterCode, reason: str) -> Step:
        return Step(run=item.run, outbound=[self._dead_letter(item.record, reason, code)], dead_letter=code)

    def _fail(self, state: _RunState, step: Step, item: RunInput | None, code: DeadLetterCode, reason: str) -> None:
        """End the run with ``RUN_ERROR`` ``code`` and dead-letter the record that caused it.

        The translator is not asked: after an exception its state is not trusted, and after a
        gap or an oversized output what it would close no longer matches what was published.
        A bare ``RUN_ERROR`` (after ``RUN_STARTED`` if none was published) is a valid AG-UI
        ending whatever is still open, and it is numbered right after the run's last
        published event — a function of the accepted input, as every number is."""
        env = state.envelope
        events = []
        if state.event_seq == 0:
            meta = {METADATA_KEY: {k: v for k, v in (("grammar", env.grammar), ("model", env.model)) if v is not None}}
            events.append(ev.run_started(env.thread_id, env.run_id, meta))
        events.append(ev.run_error(f"run ended by reasonwire: {reason}", code.value, usage=None, metadata=None))
        try:
            state.translator.end = RunEnd.ERROR
        except Exception:  # noqa: S110 - the usage record then says interrupted
            pass
        self._apply(state, Translation(events), step, None, ended=True)
        if item is not None:
            step.outbound.append(self._dead_letter(item.record, reason, code))
            step.dead_letter = code

    # -- internals ------------------------------------------------------------------

    def _mark_ended(self, key: RunKey, where: Ended) -> None:
        self._ended[key] = where
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)

    def _new_state(self, item: RunInput) -> _RunState:
        env = item.envelope
        translator = self._translator_for(
            Grammar(env.grammar),
            run_id=env.run_id,
            thread_id=env.thread_id,
            model=env.model,
            issuer_scope=env.issuer_scope,
            issuer_provider=env.issuer_provider,
        )
        policy = self.policies.for_tenant(env.tenant)
        base: KafkaHeaders = [
            (HEADER_RUN_ID, env.run_id.encode()),
            (HEADER_THREAD_ID, env.thread_id.encode()),
            (HEADER_TENANT, env.tenant.encode()),
            (HEADER_PROVIDER, env.grammar.encode()),
        ]
        overhead = _headers_size(base)
        trusted, public = AudienceFilter(policy.rule(Audience.TRUSTED)), AudienceFilter(policy.rule(Audience.PUBLIC))
        return _RunState(
            translator,
            env,
            item.record.partition,
            policy,
            trusted=trusted,
            public=public,
            base_headers=base,
            key=base[0][1] or b"",
            trusted_all=trusted.passes_everything,
            public_all=public.passes_everything,
            last_seen=self.clock.seen(item.record.partition),
            last_offset=item.record.offset,
            room=(self.limits.limit(topics.EVENTS) - overhead, self.limits.limit(topics.EVENTS_PUBLIC) - overhead),
        )

    def _apply(
        self,
        state: _RunState,
        translation: Translation,
        step: Step,
        record: RawRecord | None,
        *,
        emit: bool = True,
        ended: bool | None = None,
    ) -> None:
        """Number and filter the translation's events per audience and put the outputs in ``step``;
        with ``emit=False`` (a restore) only the numbering and the filters advance. ``ended``
        overrides the translator's own verdict (a run the normalizer fails itself)."""
        events = translation.events
        if not emit:
            if events:
                _count(state, events)
            return
        if events:
            if self.agui_version != "1.0" and translation.artefacts:
                events = with_value_types(events, translation.artefacts)
            self._emit(state, events, step)
        policy = state.policy
        if policy.opaque_state.store:
            step.artefact_ttl_s = policy.opaque_state.ttl_s
            artefacts = translation.artefacts
            if artefacts:  # fresh from the translator, owned by this step
                for artefact in artefacts:
                    artefact.tenant = state.envelope.tenant
                step.artefacts = [*step.artefacts, *artefacts] if step.artefacts else artefacts
        if translation.warnings:
            step.warnings = [*step.warnings, *translation.warnings] if step.warnings else translation.warnings
        if translation.rejection is not None and record is not None:
            step.outbound.append(self._dead_letter(record, translation.rejection.reason, DeadLetterCode.MALFORMED_EVENT))
            step.dead_letter = DeadLetterCode.MALFORMED_EVENT
        if state.translator.ended if ended is None else ended:
            self._end(state, step, state.base_headers)

    @staticmethod
    def _emit(state: _RunState, events: list[WireEvent], step: Step) -> None:
        """Each event numbered and serialized once per audience that may see it, in order.

        The hot loop of the worker (one pass per output event): what is the same for the whole
        run (key, headers, size limits, whether a filter passes everything) is looked up once per
        call, the numbers are counted in locals, and an audience whose filter passes everything
        is not asked per event."""
        key, base = state.key, state.base_headers
        room, public_room = state.room
        trusted_filter, public_filter = state.trusted, state.public
        trusted_all, public_all = state.trusted_all, state.public_all
        outbound = step.outbound
        reasoning = cast("list[tuple[str, str | None]] | None", step.reasoning) if step.reasoning else None  # set below: a list
        seq, public_seq = state.event_seq, state.public_seq
        cached = len(_SEQ_HEADERS)
        try:
            for event in events:
                p8 = _P8.get(event["type"])
                if p8 is not None:  # P8: what the adapter must keep out of logs and traces (Step.reasoning, Step.secrets)
                    if p8 is _SECRET:
                        step.secrets = [*step.secrets, event.get("encryptedValue") or ""]
                    else:
                        if reasoning is None:
                            reasoning = []
                            step.reasoning = reasoning
                        delta = (event.get("delta") or "") if p8 is _READABLE else None  # None: the message ends
                        reasoning.append((event.get("messageId", ""), delta))
                trusted = event if trusted_all and "rawEvent" not in event else trusted_filter.admit(event)
                blob = None
                if trusted is not None:
                    blob = event_json(trusted)
                    if len(blob) > room:
                        raise _TooLarge(topics.EVENTS, len(blob))
                    header = _SEQ_HEADERS[seq] if seq < cached else _seq_header(seq)
                    outbound.append(_outbound((topics.EVENTS, key, blob, [*base, header, _JSON])))
                    seq += 1
                public = event if public_all and "rawEvent" not in event else public_filter.admit(event)
                if public is not None:
                    public_blob = blob if public is trusted and blob is not None else event_json(public)
                    if len(public_blob) > public_room:
                        raise _TooLarge(topics.EVENTS_PUBLIC, len(public_blob))
                    header = _SEQ_HEADERS[public_seq] if public_seq < cached else _seq_header(public_seq)
                    outbound.append(_outbound((topics.EVENTS_PUBLIC, key, public_blob, [*base, header, _JSON])))
                    public_seq += 1
        finally:
            state.event_seq, state.public_seq = seq, public_seq

    def _end(self, state: _RunState, step: Step, headers: KafkaHeaders) -> None:
        env = state.envelope
        if state.policy.publish_usage:
            try:  # a run failed before its translator started, or by the translator's fault: no usage
                usage = state.translator.usage_record(tenant=env.tenant)
                problems = usage.tokens.inconsistencies()
                blob = record_json(usage)  # may refuse what the translator let through
            except Exception as exc:
                step.warnings = [*step.warnings, TranslatorWarning("usage_unavailable", f"no usage record ({type(exc).__name__})", state.translator.line)]
            else:
                if problems:
                    step.warnings = [*step.warnings, *(TranslatorWarning("usage_inconsistent", p, state.translator.line) for p in problems)]
                if self.limits.fits(topics.USAGE, env.run_id.encode(), blob, headers):
                    step.outbound.append(Outbound(topics.USAGE, env.run_id.encode(), blob, list(headers)))
        step.run_ended = True
        kept = "".join(d[:_DIGEST_BYTES].hex() for d in state.digests[-_DIGESTS_KEPT:])
        where = Ended(state.partition, state.last_offset, kept, len(state.digests))
        step.ended_at = (where.partition, where.offset)
        step.ended_marker = where.marker()
        self._runs.pop(RunKey(env.tenant, env.run_id), None)
        self._doubtful.discard(RunKey(env.tenant, env.run_id))
        self._mark_ended(RunKey(env.tenant, env.run_id), where)

    def _dead_letter(self, record: RawRecord, reason: str, code: DeadLetterCode) -> Outbound:
        return _dead_letter(record, reason, code, self.limits.limit(topics.DLQ))


class _TooLarge(Exception):
    """An output exceeds its topic's size limit: publishing it would fail on every retry."""

    def __init__(self, topic: str, size: int) -> None:
        super().__init__(f"an output of {size} bytes exceeds the size limit of {topic}")


def _digest(value: bytes | None, sse_event: str | None) -> bytes:
    """Identifies a record's content (value and SSE event name) for duplicate checks."""
    h = hashlib.blake2b(value or b"", digest_size=16)
    h.update(b"\x00" + sse_event.encode("utf-8", "surrogatepass") if sse_event else b"\x00")
    return h.digest()


def _headers_size(headers: KafkaHeaders) -> int:
    """What a run's event record takes besides its value: key, common and per-event headers."""
    return record_size(headers[0][1], b"", [*headers, (HEADER_EVENT_SEQ, b"18446744073709551615"), ("content-type", b"application/json")])


_JSON = ("content-type", b"application/json")
_READABLE, _END, _SECRET = "readable", "end", "secret"
_P8 = {
    "REASONING_MESSAGE_CONTENT": _READABLE,
    "REASONING_MESSAGE_CHUNK": _READABLE,
    "REASONING_MESSAGE_END": _END,
    "REASONING_ENCRYPTED_VALUE": _SECRET,
}
"""The event types whose content the adapter must keep out of logs and traces (``Step.reasoning``,
``Step.secrets``): one lookup per event tells whether and how."""

_outbound = partial(tuple.__new__, Outbound)
"""``Outbound(...)`` without the named tuple's Python-level ``__new__`` (two per output event);
likewise one run key and one journal entry per raw record."""
_run_key = partial(tuple.__new__, RunKey)
_journal_entry = partial(tuple.__new__, JournalEntry)

_SEQ_HEADERS: list[tuple[str, bytes]] = []
"""``rw-event-seq`` headers of the first numbers, built once each and shared (immutable): the
header every event record carries costs no ``str``, ``encode`` and tuple per event."""
_SEQ_HEADERS_KEPT = 4096


def _seq_header(seq: int) -> tuple[str, bytes]:
    """The ``rw-event-seq`` header for ``seq`` (kept for the first ``_SEQ_HEADERS_KEPT`` numbers)."""
    while len(_SEQ_HEADERS) <= min(seq, _SEQ_HEADERS_KEPT - 1):
        _SEQ_HEADERS.append((HEADER_EVENT_SEQ, str(len(_SEQ_HEADERS)).encode()))
    return _SEQ_HEADERS[seq] if seq < _SEQ_HEADERS_KEPT else (HEADER_EVENT_SEQ, str(seq).encode())


def _count(state: _RunState, events: list[WireEvent]) -> None:
    """A restore: advance each audience's numbering and filter over ``events``, emitting nothing
    (a filter that passes everything keeps no state: only the count moves)."""
    if state.trusted_all:
        state.event_seq += len(events)
    else:
        state.event_seq += sum(1 for event in events if state.trusted.admit(event) is not None)
    if state.public_all:
        state.public_seq += len(events)
    else:
        state.public_seq += sum(1 for event in events if state.public.admit(event) is not None)


def dead_letter(item: DeadLetter, limits: OutputLimits | None = None) -> Outbound:
    """The DLQ record for an unattributable input: original key, bytes and headers, plus why."""
    return _dead_letter(item.record, item.reason, item.code, (limits or OutputLimits()).limit(topics.DLQ))


def _dead_letter(record: RawRecord, reason: str, code: DeadLetterCode, limit: int) -> Outbound:
    """Original key, value and headers as consumed (a null value stays null), plus why; cut to
    fit the DLQ's size limit if it must (``fit_dead_letter``)."""
    headers = dead_letter_headers(record.headers, HEADER_REASON, reason, code)
    key, value, headers = fit_dead_letter(record.key, record.value, headers, limit)
    return Outbound(topics.DLQ, key, value, headers)  # type: ignore[arg-type]
