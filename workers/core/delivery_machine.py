"""Delivery as a pure state machine (issue 27): every decision between a poll and its commit.

Theory of operation
-------------------
The worker's job per poll is a chain of I/O — read the journals of runs it does not hold, send
the outputs, write the poll's journal entries and artefacts to Redis, write the ended markers,
commit the offsets — and the order of that chain is what makes the delivery promises hold
(docs/reliability.md): at least once, one number one event, one end per run. Every one of those
ordering decisions is made here, by :class:`DeliveryMachine`, which does no I/O at all: it is fed
what happened (a poll fetched, a journal read, a send acknowledged, a write refused, a commit
done, partitions revoked or assigned, an expiry tick, a stall) and answers with :class:`Action`
objects — what to do next. The adapter (``workers/services/normalizer.py``) performs each action and reports its
outcome with :meth:`DeliveryMachine.done` or :meth:`DeliveryMachine.failed`; it decides nothing
about delivery. The seeded fault simulation (tests/unit/test_delivery_sim.py) drives this same
class, completing the actions it returns in any order with faults in between — so the code that
ships is the code the simulation checks (TigerBeetle's simulator, docs/STYLE).

A poll becomes a *flight*. The rules, each the reason for one guard below:

* Outputs of a run that continues are sent as soon as the record is stepped (no Redis round trip
  in front of a reasoning token), *unless* the run was restored from its journal by this worker
  and no write of this worker for it has been accepted yet: a worker cut off from the group can
  still write for the run, and only the fence's verdict on our first write proves the copy
  current (issue 24). Those outputs wait for their part's write, like terminal outputs.
* A run met at its first record (``rw-seq`` 0, a data record) past every offset that may have
  been published is *presumed new*: it starts from an empty journal at once, without reading
  it, so a poll of new runs waits for no round trip before it is stepped and the next poll is
  not held behind it. Its outputs wait for its part's write like any restored run's, and that
  write's fence is the read: it refuses a run that has a journal head or an ended marker (a
  previous owner's, a redelivery's) — the run is dropped and, redone, read first.
* A flight is written in *parts*, one per stepping: the runs stepped when the poll came, then
  the runs whose journals had to be read first. A part's write waits only for the earlier
  writes for one of its runs (the journal heads chain per run) — not for the journal reads of
  other runs in its poll; parts of disjoint runs write concurrently.
* A run's last outputs (``RUN_FINISHED`` / ``RUN_ERROR``, usage) wait for their part's write:
  a client that sees a run end and asks for a replay finds its artefacts.
* Ended markers are written once the flight's outputs are acknowledged and every earlier flight
  got that far (a marker written before an earlier flight's send failed would make the retry
  skip the run's events).
* Offsets are committed in flight order, several flights in one commit when they queue up, one
  commit at a time; the store's write count rides along in the commit metadata (the adapter
  adds it).
* Any failure stops new work; once every action out has reported, the machine *rewinds*: it
  seeks every partition in flight back to its first uncommitted record and drops those
  partitions' runs (restored from their journals on their next record); a store that lost data
  is recovered first; runs the fence refused are dropped; an expiry's Steps that did not go out
  are sent again by the next tick.
* Revocations, stalls and shutdown wait until everything in flight has settled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Union

from reasonwire.workers.core.delivery import DeadLetterCode
from reasonwire.workers.core.fence import journal_resumable
from reasonwire.workers.core.normalizer import DeadLetter, JournalEntry, Normalizer, Outbound, RawRecord, RunInput, RunKey, Step

Loaded = tuple[list[JournalEntry], "bytes | bool"]
"""A run's journal and its ended marker (``False``: not ended), as the store returns them."""

_NEW_RUN: Loaded = ([], False)
"""What a run presumed new is restored from: what the store returns for a run it never saw."""

MUST_READ_KEPT = 4096
"""Runs the fence refused that are read before they are presumed new again (the oldest forgotten)."""


# -- actions: what the adapter must do ------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Probe:
    """Before stepping again after a store failure: does an empty write go through?"""

    flight: int


@dataclass(frozen=True, slots=True, eq=False)
class ReadJournals:
    """Read these runs' journals and ended markers (one round trip); report :meth:`DeliveryMachine.journals_read`."""

    flight: int
    runs: tuple[RunKey, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Stepped:
    """Notification, before any I/O quotes them: these records were stepped (register their
    content with the telemetry's redaction, P8; log their warnings). ``complete``: the flight's
    last part — ``steps`` of the whole flight are then :attr:`DeliveryMachine.steps_of`."""

    flight: int
    items: tuple[tuple[DeadLetter | RunInput | None, Step], ...]
    complete: bool


@dataclass(frozen=True, slots=True, eq=False)
class Send:
    """Hand these outputs to the producer, in order; report done when the broker acknowledged all."""

    flight: int
    outbound: tuple[Outbound, ...]
    terminal: bool
    """Sent after the flight's write (a run's end, or a run not yet confirmed by the fence)."""


@dataclass(frozen=True, slots=True, eq=False)
class Write:
    """A part of the flight's store transaction (journal entries, artefacts, fenced heads):
    ``part`` is its index in the flight (0: the runs stepped at once; then those restored)."""

    flight: int
    steps: tuple[Step, ...]
    part: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class Close:
    """Write the ended markers of the flight's runs that ended (after their outputs were acknowledged)."""

    flight: int
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Commit:
    """Commit these offsets (partition → next offset). ``membership``: not progress, the expiry's
    question whether the group still counts this worker a member (it commits what it committed)."""

    offsets: Mapping[int, int]
    membership: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Seek:
    """Rewind these partitions to these offsets (the first record not committed)."""

    offsets: Mapping[int, int]


@dataclass(frozen=True, slots=True, eq=False)
class RecoverStore:
    """The store lost data: adopt its new epoch (marked lost) before anything is read or written."""


@dataclass(frozen=True, slots=True, eq=False)
class Retired:
    """Notification: the flight left the pipeline — committed, or rewound (its records come again)."""

    flight: int
    records: int
    committed: bool


@dataclass(frozen=True, slots=True, eq=False)
class Acknowledged:
    """Notification: every output of the flight was acknowledged by the broker and its write
    accepted (the end of its records' end-to-end delay)."""

    flight: int


@dataclass(frozen=True, slots=True, eq=False)
class Forgot:
    """Notification: runs held here were dropped (``why``: revoked, stall, rewind, store_lost)."""

    runs: int
    why: str


Action = Union[Probe, ReadJournals, Stepped, Send, Write, Close, Commit, Seek, RecoverStore, Acknowledged, Retired, Forgot]


class Failure(Enum):
    """How an action failed, as far as delivery cares."""

    OUTAGE = "outage"
    """Redis, the broker or the network: redo the flights in flight after the backoff."""
    STORE_LOST = "store_lost"
    """The store's epoch vanished or its write count went back: recover it, drop every run."""
    MOVED = "moved"
    """The fence refused a write: another worker wrote for these runs; drop their copies."""


# -- flights -----------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Part:
    """The Steps of one stepping of a flight, written together (issue 27 item 2): a run that ends
    waits for its own part's write, not for the journal reads of other runs in its poll."""

    steps: tuple[Step, ...]
    runs: set[RunKey]
    """Runs the part's write touches: the per-run order of writes."""
    held: list[Outbound]
    """Outputs sent once the part's write is accepted (runs that ended, runs not confirmed yet)."""
    write_out: bool = False
    written: bool = False
    held_sent: bool = False


@dataclass(eq=False, slots=True)
class _Flight:
    id: int
    offsets: dict[int, tuple[int, int]]
    """Partition → (first offset of the poll, offset to commit once the flight completed)."""
    published: dict[int, int] = field(default_factory=dict)
    """Partition → the highest offset whose outputs may have been published before this poll
    (:meth:`Normalizer.published_upto`): a run first met beyond it may be presumed new."""
    routed: list[DeadLetter | RunInput] = field(default_factory=list)
    steps: list[Step | None] = field(default_factory=list)
    todo: list[int] = field(default_factory=list)
    """Positions not stepped yet (their runs' journals are being read)."""
    parts: list[_Part] = field(default_factory=list)
    """One per stepping, in order; each written on its own (see :class:`_Part`)."""
    restored: set[RunKey] = field(default_factory=set)
    """Runs this flight restored from their journals: confirmed by their part's write."""
    expiry: bool = False
    stepped: bool = False
    probing: bool = False
    sends_out: int = 0
    noted: bool = False
    """Its :class:`Acknowledged` was returned."""
    close_out: bool = False
    closed: bool = False
    committing: bool = False

    @property
    def written(self) -> bool:
        return self.stepped and all(part.written for part in self.parts)

    @property
    def acknowledged(self) -> bool:
        return self.written and all(part.held_sent for part in self.parts) and self.sends_out == 0


class DeliveryMachine:
    """Owns the run table (the core :class:`Normalizer`) and every flight from poll to commit.

    Feed it with :meth:`poll`, :meth:`journals_read`, :meth:`done`, :meth:`failed`,
    :meth:`tick`, :meth:`revoke`, :meth:`stall` and :meth:`close`; each returns the actions to
    perform now (:meth:`assigned` only forgets, and returns none). :attr:`accepting` says whether a new poll may be fed; :attr:`settled` whether
    nothing is in flight (every action reported, every flight committed or rewound).
    """

    def __init__(self, normalizer: Normalizer, *, max_in_flight: int = 3) -> None:
        self.normalizer = normalizer
        self.max_in_flight = max(1, max_in_flight)
        self._flights: deque[_Flight] = deque()
        self._ids = 0
        self._outstanding = 0
        """Actions returned whose outcome was not reported yet."""
        self._failure: Failure | None = None
        self._committing = False
        self._committed: dict[int, int] = {}
        """Offsets this worker last committed, per partition (the expiry's membership question)."""
        self._rewound: dict[int, int] = {}
        """After a rewind: partition → offset the redelivery starts at (records fetched before are stale)."""
        self._probe_store = False
        self._store_lost = False
        self._moved: set[RunKey] = set()
        self._must_read: dict[RunKey, None] = {}
        """Runs the fence refused: their journals are read, never presumed empty (at most ``MUST_READ_KEPT``)."""
        self._unconfirmed: dict[RunKey, int] = {}
        """Runs restored here whose first write was not accepted yet → the flight that writes it."""
        self._unsent_expiries: dict[RunKey, Step] = {}
        """An expiry tick's Steps whose flight failed, by run: the next tick sends them again — no
        record brings those runs back. A record of the run drops its Step (the run was not
        ended: restored from its journal, it goes on), and so does its partition's revocation."""
        self._member_check: list[Step] | None = None
        self._revoking: set[int] | None = None
        self._stalled = False
        self._recovering = False
        self._idle_probe = False
        self.closing = False

    # -- what the adapter asks --------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """A poll may be fed now (else the adapter waits, or leaves the records uncommitted)."""
        return (
            self._failure is None and not self._recovering and self._revoking is None and not self._stalled
            and self._member_check is None and self._in_flight() < self.max_in_flight
            and all(f.stepped for f in self._flights)  # a poll waiting for a journal or a probe keeps its runs in order
        )

    @property
    def probing_store(self) -> bool:
        """The last failure was the store's and no write has gone through since."""
        return self._probe_store

    @property
    def settled(self) -> bool:
        """Nothing in flight: every action reported and every flight committed or rewound."""
        return self._outstanding == 0 and not self._flights and self._failure is None and not self._recovering

    @property
    def failing(self) -> bool:
        return self._failure is not None or self._recovering

    @property
    def revoking(self) -> bool:
        """A revocation waits for what is in flight to settle."""
        return self._revoking is not None

    def steps_of(self, flight: int) -> list[Step]:
        for f in self._flights:
            if f.id == flight:
                return [s for s in f.steps if s is not None]
        return []

    def _in_flight(self) -> int:
        return sum(1 for f in self._flights if not f.closed)

    # -- inputs -----------------------------------------------------------------------------

    def poll(self, records: Sequence[RawRecord], log_ends: Mapping[int, int | None]) -> list[Action]:
        """A poll's records (``log_ends``: the broker's log end of each partition in it, read
        for a partition first met — up to there a previous owner may have published outputs it
        did not commit, and the core judges no timeout there until past them)."""
        if not self.accepting and not self.closing:
            raise RuntimeError("a poll fed while the machine is not accepting one (see DeliveryMachine.accepting)")
        records = self._fresh(records)
        if not records or self.closing:
            return []  # not committed: redelivered to whoever consumes next
        offsets = _offsets(records)
        for partition in offsets:
            if not self.normalizer.knows(partition):
                end = log_ends.get(partition)
                self.normalizer.replay_until(partition, end if end is not None else -1)
        flight = self._new_flight(offsets)
        flight.published = {p: self.normalizer.published_upto(p) for p in offsets}
        flight.routed = [self.normalizer.route(record) for record in records]
        flight.steps = [None] * len(flight.routed)
        flight.todo = list(range(len(flight.routed)))
        if self._probe_store:
            flight.probing = True
            return [self._out(Probe(flight.id))]
        return self._step(flight, {}, doubtful=False) + self._progress()

    def fresh(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """The records of a poll that :meth:`poll` will take: after a rewind, records fetched
        before the seek are stale (the adapter opens the poll's trace over these only)."""
        return self._fresh(records)

    def journals_read(self, action: ReadJournals, loaded: Mapping[RunKey, Loaded], *, doubtful: bool) -> list[Action]:
        """The journals asked for (``doubtful``: the store is inside a loss window — a run may
        resume only from a journal holding every record before its own)."""
        self._outstanding -= 1
        if self._must_read:
            for run in action.runs:
                self._must_read.pop(run, None)
        flight = self._flight(action.flight)
        if flight is None or self._failure is not None:
            return self._progress()
        return self._step(flight, dict(loaded), doubtful=doubtful) + self._progress()

    def done(self, action: Action) -> list[Action]:
        """``action`` went through (sends: the broker acknowledged every output)."""
        self._outstanding -= 1
        out: list[Action] = []
        if isinstance(action, Probe):
            self._probe_store = False
            self._idle_probe = self._idle_probe and action.flight != 0
            flight = self._flight(action.flight)
            if flight is not None and self._failure is None:
                flight.probing = False
                out += self._step(flight, {}, doubtful=False)
        elif isinstance(action, Send):
            flight = self._flight(action.flight)
            if flight is not None:
                flight.sends_out -= 1
        elif isinstance(action, Write):
            flight = self._flight(action.flight)
            if flight is not None:
                part = flight.parts[action.part]
                part.write_out, part.written = False, True
                for run in part.runs & flight.restored:
                    if self._unconfirmed.get(run) == flight.id:
                        del self._unconfirmed[run]
        elif isinstance(action, Close):
            flight = self._flight(action.flight)
            if flight is not None:
                flight.close_out, flight.closed = False, True
        elif isinstance(action, Commit):
            out += self._committed_now(action)
        elif isinstance(action, RecoverStore):
            self._store_lost = False
            out += self._finish_rewind(recovered=True)
        return out + self._progress()

    def failed(self, action: Action, failure: Failure, runs: Iterable[RunKey] = ()) -> list[Action]:
        """``action`` failed (``runs``: with :attr:`Failure.MOVED`, the runs the fence refused).
        The first failure stops new work; the rewind follows once everything out has reported."""
        self._outstanding -= 1
        if isinstance(action, Commit) and action.membership:
            return self._membership_refused() + self._progress()
        if isinstance(action, Probe) and action.flight == 0:  # the idle probe: nothing to redo
            self._idle_probe = False
            return []
        if isinstance(action, Commit):
            self._committing = False
        if isinstance(action, RecoverStore):
            self._recovering = False
            return self._finish_rewind(recovered=False) + self._progress()
        if isinstance(action, Write) and failure is Failure.MOVED:
            self._moved.update(runs)
        if failure is Failure.STORE_LOST:
            self._store_lost = True
        if failure in (Failure.OUTAGE, Failure.STORE_LOST) and isinstance(action, (Probe, ReadJournals, Write, Close)):
            self._probe_store = True
        if self._failure is None:
            self._failure = failure
        return self._progress()

    def tick(self, *, timeout_s: float, now: float | None = None) -> list[Action]:
        """The expiry tick (the adapter calls it only after a whole timeout without a failure):
        close runs whose ingress went silent by stream time, and send again the Steps of an
        earlier tick that did not go out. Before an expiry's writes the group is asked whether
        this worker is still a member for those partitions (:class:`Commit` ``membership``): an
        expiry is a decision no record makes, and a worker cut off without noticing must not
        make it (issue 24 item 2). On a partition this worker has not committed yet there is
        nothing to ask with, so nothing is proven: its runs are not judged until a later tick
        finds a commit there (a worker cut off from the coordinator since it joined never gets
        to decide one; found by the simulation of live traffic, issue 27)."""
        busy = self._revoking is not None or self._stalled or self._member_check is not None or self._committing
        if self.failing or self.closing or busy or not all(f.stepped for f in self._flights):
            return []
        # only where this worker committed: elsewhere membership cannot be asked, so is not proven
        steps = [*self._unsent_expiries.values(), *self.normalizer.expire(now=now, timeout_s=timeout_s, partitions=self._committed)]
        self._unsent_expiries.clear()
        if not steps:
            return []
        partitions = {step.ended_at[0] for step in steps if step.ended_at is not None}
        offsets = {p: self._committed[p] for p in partitions if p in self._committed}
        if not offsets:
            return self._launch_expiry(steps)
        self._member_check = steps
        self._committing = True
        return [self._out(Commit(offsets, membership=True))]

    def revoke(self, partitions: Iterable[int]) -> list[Action]:
        """Partitions were revoked: what is in flight settles (committed), then their runs are
        dropped — the new owner restores them from their journals."""
        self._revoking = (self._revoking or set()) | set(partitions)
        return self._progress()

    def assigned(self, partitions: Iterable[int]) -> None:
        """Partitions were assigned (again): the consumer starts each at the group's committed
        offset, so a rewind mark left from before no longer says where its records restart.
        Without this a rewind decided while the partition was not assigned (a poll fetched
        before a revocation, refused by the fence after it) left a mark the adapter's seek
        could not act on, and every record of the partition was dropped as stale once it came
        back: the partition wedged (``make chaos`` zombie_worker, issue 27)."""
        for partition in partitions:
            self._rewound.pop(partition, None)

    def stall(self) -> list[Action]:
        """The event loop stood still long enough to lose the partitions unnoticed: once what is
        in flight settled, drop every run held (a copy another worker went on with is stale)."""
        self._stalled = True
        return self._progress()

    def close(self) -> list[Action]:
        """Shutdown: no new poll; what is in flight completes (or fails)."""
        self.closing = True
        return self._progress()

    def probe_when_idle(self) -> list[Action]:
        """Nothing in flight, and the last failure was the store's: ask whether it takes writes
        again (a :class:`Probe` of no flight). Without it, a worker whose only failure was an
        expiry's write (no record comes back to be redone) stayed degraded — and so never
        ticked again — until traffic arrived."""
        if not self._probe_store or not self.settled or self.closing or self._idle_probe:
            return []
        self._idle_probe = True
        return [self._out(Probe(0))]

    def observe(self, partition: int, *, caught_up: bool, fetched_at: float | None) -> None:
        """The stream clock's input (issue 24 item 1): whether every record below the last fetch
        response's high watermark has been stepped, and when that response came."""
        self.normalizer.clock.observe(partition, caught_up=caught_up, fetched_at=fetched_at)

    # -- stepping ---------------------------------------------------------------------------

    def _step(self, flight: _Flight, loaded: dict[RunKey, Loaded], *, doubtful: bool) -> list[Action]:
        """Step every record of the flight that can be stepped now, in record order per run.

        A record whose run is neither held here nor known ended needs its journal: that run's
        records wait (its later ones too, so each run keeps its order) while every other record
        is stepped and its outputs sent; one :class:`ReadJournals` asks for all such runs."""
        normalizer, routed, steps = self.normalizer, flight.routed, flight.steps
        waiting: dict[RunKey, None] = {}
        todo: list[int] = []
        stepped: list[tuple[DeadLetter | RunInput | None, Step]] = []
        early: list[Outbound] = []
        runs: set[RunKey] = set()
        held: list[Outbound] = []
        for i in flight.todo:
            item = routed[i]
            if isinstance(item, DeadLetter):
                step = normalizer.reject(item)
            else:
                run = item.run
                if self._unsent_expiries:
                    self._unsent_expiries.pop(run, None)
                if run in waiting:
                    todo.append(i)
                    continue
                if normalizer.needs_restore(item):
                    journal = loaded.pop(run, None)
                    if journal is None and self._presumed_new(flight, item):
                        journal = _NEW_RUN
                    if journal is None:
                        waiting[run] = None
                        todo.append(i)
                        continue
                    step = self._restore(flight, item, journal, doubtful)
                else:
                    step = normalizer.accept(item)
            steps[i] = step
            stepped.append((item, step))
            if step.run is not None:
                runs.add(step.run)
            if step.outbound:
                if step.run_ended or (step.run is not None and step.run in self._unconfirmed):
                    held += step.outbound
                else:
                    early += step.outbound
        flight.todo = todo
        if stepped:
            flight.parts.append(_Part(tuple(step for _, step in stepped), runs, held))
        out: list[Action] = []
        if stepped or not todo:
            flight.stepped = not todo
            out.append(Stepped(flight.id, tuple(stepped), complete=flight.stepped))
        if early:
            flight.sends_out += 1
            out.append(self._out(Send(flight.id, tuple(early), terminal=False)))
        if waiting:
            out.append(self._out(ReadJournals(flight.id, tuple(waiting))))
        return out

    def _presumed_new(self, flight: _Flight, item: RunInput) -> bool:
        """A run's first data record, past every offset that may have been published, of a run
        the fence has not refused: no one can have written its journal but a worker whose write
        the fence refuses ours against (module docstring)."""
        env, record = item.envelope, item.record
        return (
            env.seq == 0 and env.control is None and record.offset > flight.published.get(record.partition, -1)
            and item.run not in self._must_read
        )

    def _restore(self, flight: _Flight, item: RunInput, loaded: Loaded, doubtful: bool) -> Step:
        """Rebuild a run from its journal, then step its record — or refuse it when the store lost
        entries of that journal (resuming would renumber events already published)."""
        journal, ended = loaded
        if not journal_resumable((e.seq for e in journal), ended=ended, upto=item.envelope.seq, doubtful=doubtful):
            return self.normalizer.reject(DeadLetter(item.record, "the run's journal vanished with the store", DeadLetterCode.STORE_LOST))
        self.normalizer.restore(item, journal, ended=ended, doubtful=doubtful)
        step = self.normalizer.accept(item)
        if not ended:
            self._unconfirmed[item.run] = flight.id
            flight.restored.add(item.run)
        return step

    def _launch_expiry(self, steps: list[Step]) -> list[Action]:
        flight = self._new_flight({})
        flight.expiry = True
        flight.steps = list(steps)
        flight.stepped = True
        runs = {step.run for step in steps if step.run is not None}
        held = [out for step in steps for out in step.outbound]  # an expiry's outputs end their runs: after the write
        flight.parts.append(_Part(tuple(steps), runs, held))
        return [Stepped(flight.id, tuple((None, s) for s in steps), complete=True), *self._progress()]

    def _membership_refused(self) -> list[Action]:
        """The group refused the membership commit: the expiry waits (sent by a later tick,
        unless the partition is revoked meanwhile)."""
        steps, self._member_check = self._member_check or [], None
        self._committing = False
        self._unsent_expiries.update((step.run, step) for step in steps if step.run is not None)
        return []  # the adapter logged the refusal

    # -- the pipeline -----------------------------------------------------------------------

    def _progress(self) -> list[Action]:
        """Everything that may happen now, given what has: writes, held sends, ended markers,
        the commit — or, after a failure, the rewind once nothing is out."""
        if self._failure is not None or self._recovering:
            return self._rewind() if self._outstanding == 0 else []
        out: list[Action] = []
        pending_runs: set[RunKey] = set()
        earlier_closed = True
        for flight in self._flights:
            for index, part in enumerate(flight.parts):  # a probing flight has none yet
                if not part.written and not part.write_out and not (part.runs & pending_runs):
                    part.write_out = True
                    out.append(self._out(Write(flight.id, part.steps, index)))
                if not part.written:
                    pending_runs |= part.runs
                if part.written and not part.held_sent:
                    part.held_sent = True
                    if part.held:
                        flight.sends_out += 1
                        out.append(self._out(Send(flight.id, tuple(part.held), terminal=True)))
            if flight.acknowledged and not flight.noted:
                flight.noted = True
                out.append(Acknowledged(flight.id))
            if flight.acknowledged and not flight.closed and not flight.close_out and earlier_closed:
                ended = tuple(s for s in flight.steps if s is not None and s.run_ended)
                if ended:
                    flight.close_out = True
                    out.append(self._out(Close(flight.id, ended)))
                else:
                    flight.closed = True
            earlier_closed = earlier_closed and flight.closed
        out += self._commit()
        out += self._settle_deferred()
        return out

    def _commit(self) -> list[Action]:
        """The oldest completed flights' offsets in one commit; one commit at a time."""
        if self._committing:
            return []
        ready = []
        for flight in self._flights:
            if not flight.closed:
                break
            ready.append(flight)
        if not ready:
            return []
        offsets = {p: end for f in ready for p, (_, end) in f.offsets.items()}  # later flights win
        if not offsets:  # expiry flights only: nothing to commit
            return self._retire(ready, committed=True)
        for flight in ready:
            flight.committing = True
        self._committing = True
        return [self._out(Commit(offsets))]

    def _committed_now(self, action: Commit) -> list[Action]:
        self._committing = False
        if action.membership:
            steps, self._member_check = self._member_check or [], None
            return self._launch_expiry(steps) if steps else []
        self._committed.update(action.offsets)
        return self._retire([f for f in self._flights if f.committing], committed=True)

    def _retire(self, flights: list[_Flight], *, committed: bool) -> list[Action]:
        out: list[Action] = []
        for flight in flights:
            self._flights.remove(flight)
            out.append(Retired(flight.id, 0 if flight.expiry else len(flight.steps), committed))
        return out

    def _settle_deferred(self) -> list[Action]:
        """Revocations, stalls: performed once nothing is in flight."""
        if self._outstanding or self._flights:
            return []
        out: list[Action] = []
        if self._revoking is not None:
            gone, self._revoking = self._revoking, None
            for partition in gone:
                self._rewound.pop(partition, None)
                self._committed.pop(partition, None)
            dropped = self.normalizer.forget_partitions(gone, revoked=True)
            self._unsent_expiries = {r: s for r, s in self._unsent_expiries.items() if s.ended_at is not None and s.ended_at[0] not in gone}
            out.append(Forgot(dropped, "revoked"))
        if self._stalled:
            self._stalled = False
            out.append(Forgot(self.normalizer.forget_all(), "stall"))
            self._unconfirmed.clear()
        return out

    # -- failure ----------------------------------------------------------------------------

    def _rewind(self) -> list[Action]:
        """Nothing is out any more: retire every flight uncommitted, and — after a store loss —
        recover the store first."""
        if self._recovering:
            return []
        if self._store_lost:
            self._recovering = True
            return [self._out(RecoverStore())]
        return self._finish_rewind(recovered=False)

    def _finish_rewind(self, *, recovered: bool) -> list[Action]:
        """Seek every partition in flight back to its first uncommitted record and drop its runs
        (the core advanced them in memory; they are restored from their journals)."""
        self._recovering = False
        first: dict[int, int] = {}
        for flight in self._flights:
            for p, (start, _) in flight.offsets.items():
                first[p] = min(start, first.get(p, start))
            if flight.expiry and not flight.acknowledged:
                self._unsent_expiries.update((s.run, s) for s in flight.steps if s is not None and s.run is not None and s.run not in self._moved)
        out = self._retire(list(self._flights), committed=False)
        if self._moved:
            self.normalizer.forget_runs(self._moved)
            for run in self._moved:
                self._unsent_expiries.pop(run, None)
                self._must_read[run] = None
            while len(self._must_read) > MUST_READ_KEPT:
                del self._must_read[next(iter(self._must_read))]
            out.append(Forgot(len(self._moved), "moved"))
            self._moved.clear()
        self._failure = None
        self._committing = False
        self._unconfirmed.clear()
        if recovered:
            out.append(Forgot(self.normalizer.forget_all(), "store_lost"))
        else:
            self.normalizer.forget_partitions(first)
        revoked = self._revoking or set()
        seek = {p: o for p, o in first.items() if p not in revoked}
        if seek:
            self._rewound.update(seek)
            out.append(Seek(seek))
        return out + self._progress()

    def _fresh(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """Drop records fetched before a rewind: a rewound partition restarts at its offset."""
        if not self._rewound:
            return records
        kept = []
        for record in records:
            start = self._rewound.get(record.partition)
            if start is not None:
                if record.offset != start:
                    continue
                del self._rewound[record.partition]
            kept.append(record)
        return kept

    # -- bookkeeping ------------------------------------------------------------------------

    def _new_flight(self, offsets: dict[int, tuple[int, int]]) -> _Flight:
        self._ids += 1
        flight = _Flight(self._ids, offsets)
        self._flights.append(flight)
        return flight

    def _flight(self, flight_id: int) -> _Flight | None:
        for flight in self._flights:
            if flight.id == flight_id:
                return flight
        return None

    def _out(self, action: Action) -> Action:
        self._outstanding += 1
        return action


def _offsets(records: Sequence[RawRecord]) -> dict[int, tuple[int, int]]:
    """Per partition: the poll's first offset (to rewind to) and the offset to commit."""
    spans: dict[int, list[int]] = {}
    for record in records:
        offset = record.offset
        span = spans.get(record.partition)
        if span is None:
            spans[record.partition] = [offset, offset + 1]
        elif offset < span[0]:
            span[0] = offset
        elif offset >= span[1]:
            span[1] = offset + 1
    return {partition: (first, end) for partition, (first, end) in spans.items()}
