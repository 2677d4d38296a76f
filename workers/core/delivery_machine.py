"""Delivery as a pure state machine: every decision between a poll and its commit, and every timing.

Theory of operation
-------------------
The worker's job per poll is a chain of I/O — read the journals of runs it does not hold, send
the outputs, write the poll's journal entries and artefacts to Redis, write the ended markers,
commit the offsets — and the order of that chain is what makes the delivery promises hold
(docs/reliability.md): at least once, one number one event, one end per run. Every one of those
ordering decisions is made here, by :class:`DeliveryMachine`, which does no I/O and reads no
clock: it is fed what happened (a poll fetched, a journal read, a send acknowledged, a write
refused, a commit done, partitions revoked or assigned, the clock's :meth:`~DeliveryMachine.tick`)
and answers with actions (:mod:`reasonwire.workers.core.actions`) — what to do next. The adapter
(``workers/services/normalizer.py``) performs each action and reports its outcome with
:meth:`DeliveryMachine.done` or :meth:`DeliveryMachine.failed`; it decides nothing about delivery.
The seeded fault simulation (tests/unit/test_delivery_sim.py) drives this same class, completing
the actions it returns in any order with faults in between — so the code that ships is the code
the simulation checks (TigerBeetle's simulator, docs/STYLE).

State, in named values (h11's habit): the machine is in one :class:`Mode`; each poll is a
*flight* in one :class:`Stage`, moved only along :data:`FLIGHT_MOVES`; each write part of a
flight in one :class:`PartStage` (:data:`PART_MOVES`); what a failure leads to is one row of
:data:`CONSEQUENCES`. :meth:`DeliveryMachine.invariants` states what must hold between any two
inputs; tests and the simulation run it after every input (and a worker with
``RW_DEBUG_INVARIANTS=1``).

Time (TigerBeetle's habit): the machine is fed ``tick(now)`` (monotonic seconds) and decides on
it — a gap of :data:`~reasonwire.workers.core.fence.STALL_S` between ticks is a stall; the
backoff after a failure (``retry_at``, jitter from the seeded source it is given); the idle probe
of a store that failed; the expiry every ``expiry_every_s`` or sooner when a run is due sooner,
only after a whole timeout without a failure; and whether a partition is caught up (the stream
clock's input, :meth:`observe`).

A poll becomes a flight. The rules, each the reason for one guard below:

* Outputs of a run that continues are sent as soon as the record is stepped (no Redis round trip
  in front of a reasoning token), *unless* the run was restored from its journal by this worker
  and no write of this worker for it has been accepted yet: a worker cut off from the group can
  still write for the run, and only the fence's verdict on our first write proves the copy
  current. Those outputs wait for their part's write, like terminal outputs.
* A run met at its first record (``rw-seq`` 0, a data record) past every offset that may have
  been published is *presumed new*: it starts from an empty journal at once, without reading
  it. Its outputs wait for its part's write like any restored run's, and that write's fence is
  the read: it refuses a run that has a journal head or an ended marker — the run is dropped
  and, redone, read first.
* A flight is written in *parts*, one per stepping: the runs stepped when the poll came, then
  the runs whose journals had to be read first. A part's write waits only for the earlier
  writes for one of its runs (the journal heads chain per run); parts of disjoint runs write
  concurrently. A part that opens a run here also puts it in the store's index of open runs.
* A run's last outputs (``RUN_FINISHED`` / ``RUN_ERROR``, usage) wait for their part's write:
  a client that sees a run end and asks for a replay finds its artefacts.
* Ended markers are written once the flight's outputs are acknowledged and every earlier flight
  got that far.
* Offsets are committed in flight order, several flights in one commit when they queue up, one
  commit at a time.
* Any failure stops new work; once every action out has reported, the machine *rewinds*: it
  seeks every partition in flight back to its first uncommitted record (records fetched before
  the seek are stale, even once an assignment reported late says where the consumer started)
  and drops those partitions' runs; a store that lost data is recovered first; runs the fence
  refused are dropped; an expiry's Steps that did not go out are sent again by the next expiry.
* Revocations, stalls and shutdown wait until everything in flight has settled.
* Every open run this worker owns ends: a run whose producer vanished has no next record to
  restore it by, so whenever runs are dropped without being handed over (a stall, a rewind, a
  store loss) and whenever partitions are assigned, the store's index of open runs of those
  partitions is read and each run not held is *adopted* — restored from its journal only to be
  judged by the expiry (by stream time). A record of an adopted run drops the adopted copy and
  restores the run as any record does (the adopted copy does not know which records come again).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from mypy_extensions import mypyc_attr

from reasonwire.workers.core.actions import (
    Acknowledged,
    Action,
    Adopted,
    BackedOff,
    Close,
    Commit,
    FailureKind,
    Forgot,
    Probe,
    ReadJournals,
    ReadOpenRuns,
    RecoverStore,
    Recovered,
    Retired,
    Seek,
    Send,
    Stepped,
    Write,
)
from reasonwire.workers.core.backoff import Backoff
from reasonwire.workers.core.delivery import DeadLetterCode
from reasonwire.workers.core.fence import journal_resumable, stalled
from reasonwire.workers.core.normalizer import DeadLetter, JournalEntry, Normalizer, Outbound, RawRecord, RunInput, RunKey, Step

Loaded = tuple[list[JournalEntry], "bytes | bool"]
"""A run's journal and its ended marker (``False``: not ended), as the store returns them."""

_NEW_RUN: Loaded = ([], False)
"""What a run presumed new is restored from: what the store returns for a run it never saw."""

MUST_READ_KEPT = 4096
"""Runs the fence refused that are read before they are presumed new again (the oldest forgotten)."""

EXPIRY_FINEST: Final = 8
"""A run close to its timeout is judged again after an eighth of ``expiry_every_s`` at the
soonest: a run ends within that much of its due time, and a run whose partition's stream time
stands still (records waiting) costs at most this many scans per interval."""

NO_FLIGHT: Final = 0
"""The flight of a :class:`Probe` or :class:`ReadJournals` no poll waits for (the idle probe, adoption)."""


@mypyc_attr(native_class=False)  # compiled, a class may not derive from a built-in exception
class TransitionError(RuntimeError):
    """An input or a move the machine's tables do not allow in the state it came in: a bug, in the
    machine or in its driver (h11's ``LocalProtocolError``). Says which, in which state."""


@mypyc_attr(native_class=False)
class InvariantBroken(AssertionError):
    """:meth:`DeliveryMachine.invariants` found a rule broken (the message lists each)."""


class Mode(Enum):
    """The machine as a whole."""

    RUNNING = "running"
    """Polls may be fed (within the bound of flights, and once deferred requests settled)."""
    REWINDING = "rewinding"
    """An action failed: no new work; the rewind comes once every action out has reported."""
    RECOVERING = "recovering"
    """The rewind waits for the store's recovery (:class:`RecoverStore` out)."""


class Stage(Enum):
    """Where a flight is in its pipeline."""

    PROBING = "probing"
    """Waits for a probe of the store before its records are stepped (the last failure was the store's)."""
    READING = "reading"
    """Some records wait for their runs' journals (the others are stepped, their part may be writing)."""
    WRITING = "writing"
    """Every record stepped; parts being written, outputs being sent."""
    ACKNOWLEDGED = "acknowledged"
    """Every part written and every output acknowledged; waits for the earlier flights to close."""
    CLOSING = "closing"
    """The ended markers of its runs that ended are being written."""
    CLOSED = "closed"
    """Ready to commit (in flight order)."""
    COMMITTING = "committing"
    """Its offsets are in the commit out."""


FLIGHT_MOVES: Final[Mapping[Stage, frozenset[Stage]]] = {
    Stage.PROBING: frozenset({Stage.READING, Stage.WRITING}),
    Stage.READING: frozenset({Stage.WRITING}),
    Stage.WRITING: frozenset({Stage.ACKNOWLEDGED}),
    Stage.ACKNOWLEDGED: frozenset({Stage.CLOSING, Stage.CLOSED}),
    Stage.CLOSING: frozenset({Stage.CLOSED}),
    Stage.CLOSED: frozenset({Stage.COMMITTING}),
    Stage.COMMITTING: frozenset(),
}
"""The only moves of a flight; leaving the pipeline (committed, or rewound) is from any stage."""

_STEPPED: Final = frozenset({Stage.WRITING, Stage.ACKNOWLEDGED, Stage.CLOSING, Stage.CLOSED, Stage.COMMITTING})
_DONE: Final = frozenset({Stage.CLOSED, Stage.COMMITTING})


class PartStage(Enum):
    """Where one write part of a flight is."""

    PENDING = "pending"
    """Waits for an earlier write of one of its runs."""
    WRITING = "writing"
    """Its :class:`Write` is out."""
    WRITTEN = "written"
    """Accepted by the store (the fence included)."""
    RELEASED = "released"
    """Its held outputs (runs that ended, runs not confirmed yet) were handed to the producer."""


PART_MOVES: Final[Mapping[PartStage, frozenset[PartStage]]] = {
    PartStage.PENDING: frozenset({PartStage.WRITING}),
    PartStage.WRITING: frozenset({PartStage.WRITTEN}),
    PartStage.WRITTEN: frozenset({PartStage.RELEASED}),
    PartStage.RELEASED: frozenset(),
}


@dataclass(frozen=True)
class Consequence:
    """What a failure of one kind leads to, besides stopping new work and rewinding."""

    backoff: bool
    """A service is failing: no poll before the backoff; health degraded; no expiry until a success."""
    probe_store: bool
    """When the action touched the store: step again only once an empty write goes through (a
    store refusing writes would otherwise have continuing runs' outputs sent on every retry)."""
    recover_store: bool
    """The store lost data: adopt its new epoch before the rewind, and drop every run."""
    drop_refused: bool
    """The fence refused these runs: drop their copies; read their journals before presuming them new."""


CONSEQUENCES: Final[Mapping[FailureKind, Consequence]] = {
    FailureKind.OUTAGE: Consequence(backoff=True, probe_store=True, recover_store=False, drop_refused=False),
    FailureKind.STORE_LOST: Consequence(backoff=True, probe_store=True, recover_store=True, drop_refused=False),
    FailureKind.MOVED: Consequence(backoff=False, probe_store=False, recover_store=False, drop_refused=True),
}
"""One row per failure kind: the whole of what a failure means (a new kind is one row here)."""

_STORE_ACTIONS: Final = (Probe, ReadJournals, Write, Close)


# -- flights -----------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Part:
    """The Steps of one stepping of a flight, written together: a run that ends waits for its own
    part's write, not for the journal reads of other runs in its poll."""

    steps: tuple[Step, ...]
    runs: set[RunKey]
    """Runs the part's write touches: the per-run order of writes."""
    held: list[Outbound]
    """Outputs sent once the part's write is accepted (runs that ended, runs not confirmed yet)."""
    opened: dict[RunKey, tuple[int, bytes]] | None = None
    """Runs this part opens here: partition and envelope, for the store's index of open runs."""
    stage: PartStage = PartStage.PENDING


@dataclass(eq=False, slots=True)
class _Flight:
    id: int
    offsets: dict[int, tuple[int, int]]
    """Partition → (first offset of the poll, offset to commit once the flight completed)."""
    stage: Stage
    now: float = 0.0
    """When the poll came (the translators' clock for the records stepped in it)."""
    expiry: bool = False
    """An expiry's flight (no records: the Steps of runs that timed out)."""
    published: dict[int, int] = field(default_factory=dict)
    """Partition → the highest offset whose outputs may have been published before this poll."""
    routed: list[DeadLetter | RunInput] = field(default_factory=list)
    steps: list[Step | None] = field(default_factory=list)
    todo: list[int] = field(default_factory=list)
    """Positions not stepped yet (their runs' journals are being read)."""
    parts: list[_Part] = field(default_factory=list)
    restored: set[RunKey] = field(default_factory=set)
    """Runs this flight restored from their journals: confirmed by their part's write."""
    sends_out: int = 0

    @property
    def delivered(self) -> bool:
        """Every record stepped, every part written and released, every send acknowledged."""
        return self.stage in _STEPPED and self.sends_out == 0 and all(p.stage is PartStage.RELEASED for p in self.parts)


def _move(flight: _Flight, to: Stage) -> None:
    if to not in FLIGHT_MOVES[flight.stage]:
        raise TransitionError(f"flight {flight.id}: {flight.stage.value} → {to.value} is not a move of a flight")
    flight.stage = to


def _move_part(flight: _Flight, part: _Part, to: PartStage) -> None:
    if to not in PART_MOVES[part.stage]:
        raise TransitionError(f"flight {flight.id}: a part {part.stage.value} → {to.value} is not a move of a part")
    part.stage = to


class DeliveryMachine:
    """Owns the run table (the core :class:`Normalizer`), every flight from poll to commit, and the
    worker's timing decisions.

    Inputs: :meth:`poll`, :meth:`journals_read`, :meth:`open_runs_read`, :meth:`done`,
    :meth:`failed`, :meth:`tick`, :meth:`observe`, :meth:`broker_answered`, :meth:`assigned`,
    :meth:`revoke`, :meth:`stall` and :meth:`close`; each returns the actions to perform now.
    :attr:`accepting` says whether a new poll may be fed (and :attr:`retry_at` from when);
    :attr:`settled` whether nothing is in flight.
    """

    def __init__(
        self,
        normalizer: Normalizer,
        *,
        backoff: Backoff,
        max_in_flight: int = 3,
        timeout_s: float = 300.0,
        expiry_every_s: float = 0.0,
        check_invariants: bool = False,
    ) -> None:
        self.normalizer = normalizer
        self.max_in_flight = max(1, max_in_flight)
        self.timeout_s = timeout_s
        """The inactivity timeout (stream time) after which an open run is ended."""
        self.expiry_every_s = expiry_every_s
        self.check_invariants = check_invariants
        """Run :meth:`invariants` after every input (tests, the simulation, ``RW_DEBUG_INVARIANTS=1``)."""
        self.mode = Mode.RUNNING
        self.closing = False
        """Shutdown asked: no new poll (orthogonal to the mode: a rewind still completes)."""
        self._flights: deque[_Flight] = deque()
        self._ids = 0
        self._outstanding = 0
        """I/O actions returned whose outcome was not reported yet."""
        self._committing = False
        """A commit is out (one at a time; a membership question too)."""
        self._committed: dict[int, int] = {}
        """Offsets committed per partition by this worker (its join commit included): what the
        expiry's membership question commits again."""
        self._start: dict[int, int] = {}
        """Partition → the group's committed offset when it was assigned (caught up from there)."""
        self._joining: dict[int, int] = {}
        """Assigned partitions whose committed offset this worker has not committed again yet."""
        self._join: Commit | None = None
        """The join commit out (see :meth:`assigned`)."""
        self._owned: set[int] = set()
        """Partitions assigned to this worker and not revoked."""
        self._rewound: dict[int, int] = {}
        """After a rewind: partition → offset the redelivery starts at (records fetched before are stale)."""
        self._restarts: dict[int, int] = {}
        """Rewound partitions reported assigned since: partition → the committed offset the consumer
        may have restarted at instead of the rewind's (see :meth:`assigned`)."""
        self._probe_store = False
        self._store_lost = False
        self._idle_probe = False
        """The idle probe (a :class:`Probe` of no flight) is out."""
        self._moved: set[RunKey] = set()
        self._must_read: dict[RunKey, None] = {}
        """Runs the fence refused (or adopted copies dropped): read, never presumed new (at most ``MUST_READ_KEPT``)."""
        self._unconfirmed: dict[RunKey, int] = {}
        """Runs restored here whose first write was not accepted yet → the flight that writes it."""
        self._adopted: set[RunKey] = set()
        """Runs held only to be ended (adopted from the index of open runs): a record of one drops
        the copy and restores the run as any record does."""
        self._unsent_expiries: dict[RunKey, Step] = {}
        """An expiry's Steps whose flight failed, by run: the next expiry sends them again. A record
        of the run drops its Step (the run was not ended: restored, it goes on), and so does its
        partition's revocation."""
        self._member_check: list[Step] | None = None
        self._revoking: set[int] | None = None
        self._stalled = False
        self._to_scan: set[int] = set()
        """Owned partitions whose index of open runs must be read (assigned, or runs dropped)."""
        self._scanning = False
        self._adopting: dict[RunKey, int] = {}
        """Runs whose journals are read to adopt them → their partition."""
        # -- time
        self.backoff = backoff
        self.now = 0.0
        """The machine's clock: the last time it was fed (monotonic seconds)."""
        self.retry_at = 0.0
        """No poll is stepped before this (the backoff after a failure; the adapter waits it out)."""
        self._last_tick: float | None = None
        self._next_expiry = 0.0
        self._healthy_since: float | None = None
        """Since when polls, the store and the broker have worked without a break (``None``: broken now)."""

    # -- what the adapter asks --------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """A poll may be fed now (else the adapter waits, or leaves the records uncommitted)."""
        return (
            self.mode is Mode.RUNNING and self._revoking is None and not self._stalled
            and self._member_check is None and self._in_flight() < self.max_in_flight
            and all(f.stage in _STEPPED for f in self._flights)  # a poll waiting for a journal or a probe keeps its runs in order
        )

    @property
    def probing_store(self) -> bool:
        """The last failure was the store's and no write has gone through since."""
        return self._probe_store

    @property
    def settled(self) -> bool:
        """Nothing in flight: every action reported and every flight committed or rewound."""
        return self._outstanding == 0 and not self._flights and self.mode is Mode.RUNNING

    @property
    def failing(self) -> bool:
        return self.mode is not Mode.RUNNING

    @property
    def degraded(self) -> bool:
        """A service failed and nothing has gone through end to end since."""
        return self.backoff.attempts > 0

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
        return sum(1 for f in self._flights if f.stage not in _DONE)

    # -- inputs -----------------------------------------------------------------------------

    def poll(self, records: Sequence[RawRecord], log_ends: Mapping[int, int | None], *, now: float) -> list[Action]:
        """A poll's records, fetched at ``now`` (``log_ends``: the broker's log end of each
        partition in it, read for a partition first met — up to there a previous owner may have
        published outputs it did not commit, and the core judges no timeout there until past them)."""
        if not self.accepting and not self.closing:
            raise TransitionError(f"a poll fed while the machine is not accepting one (mode {self.mode.value})")
        self.now = max(self.now, now)
        records = self._fresh(records)
        if not records or self.closing:
            return self._answer([])  # not committed: redelivered to whoever consumes next
        offsets = _offsets(records)
        for partition in offsets:
            if not self.normalizer.knows(partition):
                end = log_ends.get(partition)
                self.normalizer.replay_until(partition, end if end is not None else -1)
        flight = self._new_flight(offsets, Stage.PROBING if self._probe_store else Stage.READING)
        flight.now = now
        flight.published = {p: self.normalizer.published_upto(p) for p in offsets}
        flight.routed = [self.normalizer.route(record) for record in records]
        flight.steps = [None] * len(flight.routed)
        flight.todo = list(range(len(flight.routed)))
        if flight.stage is Stage.PROBING:
            return self._answer([self._out(Probe(flight.id))])
        return self._answer(self._step(flight, {}, doubtful=False) + self._progress())

    def fresh(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """The records of a poll that :meth:`poll` will take: after a rewind, records fetched
        before the seek are stale (the adapter opens the poll's trace over these only)."""
        return self._fresh(records)

    def journals_read(self, action: ReadJournals, loaded: Mapping[RunKey, Loaded], *, doubtful: bool) -> list[Action]:
        """The journals asked for (``doubtful``: the store is inside a loss window — a run may
        resume only from a journal holding every record before its own)."""
        self._outstanding -= 1
        if action.flight == NO_FLIGHT:
            return self._answer(self._adopt(loaded, doubtful) + self._progress())
        if self._must_read:
            for run in action.runs:
                self._must_read.pop(run, None)
        flight = self._flight(action.flight)
        if flight is None or self.mode is not Mode.RUNNING:
            return self._answer(self._progress())
        return self._answer(self._step(flight, dict(loaded), doubtful=doubtful) + self._progress())

    def open_runs_read(self, action: ReadOpenRuns, runs: Mapping[int, Sequence[RunKey]]) -> list[Action]:
        """The store's index of open runs of the partitions asked for: read the journals of those
        this worker neither holds nor knows ended, to adopt them."""
        self._outstanding -= 1
        self._scanning = False
        owned = self._owned - (self._revoking or set())
        if self.mode is not Mode.RUNNING:
            self._to_scan |= set(action.partitions) & owned
            return self._answer(self._progress())
        holds = self.normalizer.holds
        adopt = {run: p for p, listed in runs.items() if p in owned for run in listed if not holds(run)}
        if not adopt:
            return self._answer(self._progress())
        self._adopting = adopt
        return self._answer([self._out(ReadJournals(NO_FLIGHT, tuple(adopt)))] + self._progress())

    def done(self, action: Action) -> list[Action]:
        """``action`` went through (sends: the broker acknowledged every output)."""
        self._outstanding -= 1
        out: list[Action] = []
        if isinstance(action, Probe):
            self._probe_store = False
            if action.flight == NO_FLIGHT:
                self._idle_probe = False
                out += self._succeeded()
            else:
                flight = self._flight(action.flight)
                if flight is not None and self.mode is Mode.RUNNING:
                    out += self._step(flight, {}, doubtful=False)
        elif isinstance(action, Send):
            flight = self._flight(action.flight)
            if flight is not None:
                flight.sends_out -= 1
        elif isinstance(action, Write):
            flight = self._flight(action.flight)
            if flight is not None:
                _move_part(flight, flight.parts[action.part], PartStage.WRITTEN)
                for run in flight.parts[action.part].runs & flight.restored:
                    if self._unconfirmed.get(run) == flight.id:
                        del self._unconfirmed[run]
        elif isinstance(action, Close):
            flight = self._flight(action.flight)
            if flight is not None:
                _move(flight, Stage.CLOSED)
        elif isinstance(action, Commit):
            out += self._committed_now(action)
        elif isinstance(action, RecoverStore):
            self._store_lost = False
            out += self._finish_rewind(recovered=True)
        else:
            raise TransitionError(f"{type(action).__name__} reported done: it is not an action reported that way")
        return self._answer(out + self._progress())

    def failed(self, action: Action, kind: FailureKind, runs: Iterable[RunKey] = ()) -> list[Action]:
        """``action`` failed (``runs``: with :attr:`FailureKind.MOVED`, the runs the fence refused).
        The first failure stops new work; the rewind follows once everything out has reported."""
        self._outstanding -= 1
        consequence = CONSEQUENCES[kind]
        if isinstance(action, Commit) and action.membership:  # not a failure of delivery: the expiry waits
            return self._answer(self._membership_refused() + self._progress())
        if isinstance(action, ReadOpenRuns) or (isinstance(action, ReadJournals) and action.flight == NO_FLIGHT):
            self._scanning = False
            gone = set(action.partitions) if isinstance(action, ReadOpenRuns) else set(self._adopting.values())
            self._adopting = {}
            self._to_scan |= gone & self._owned
            return self._answer((self._back_off() if consequence.backoff else []) + self._progress())
        if isinstance(action, Probe) and action.flight == NO_FLIGHT:  # the idle probe: nothing to redo
            self._idle_probe = False
            return self._answer(self._back_off() if consequence.backoff and self.mode is Mode.RUNNING else [])
        out: list[Action] = []
        if isinstance(action, Commit):
            self._committing = False
            if action is self._join:  # asked again by the next progress (a member commits it; a zombie never does)
                self._join = None
                self._joining = {p: o for p, o in action.offsets.items() if p in self._owned} | self._joining
        if isinstance(action, RecoverStore):
            out += self._back_off()
            return self._answer(out + self._finish_rewind(recovered=False))
        if consequence.drop_refused and isinstance(action, Write):
            self._moved.update(runs)
        if consequence.recover_store:
            self._store_lost = True
        if consequence.probe_store and isinstance(action, _STORE_ACTIONS):
            self._probe_store = True
        if self.mode is Mode.RUNNING:
            if consequence.backoff:
                out += self._back_off()
            self.mode = Mode.REWINDING
        return self._answer(out + self._progress())

    def tick(self, now: float) -> list[Action]:
        """The clock (the adapter calls it a few times a second, and before each poll): a gap of
        ``STALL_S`` since the last tick is a stall; after the backoff, an idle worker whose store
        failed probes it; when due, the expiry runs (:meth:`_expire`)."""
        last, self._last_tick = self._last_tick, now
        self.now = max(self.now, now)
        out: list[Action] = []
        if last is None:
            if self._healthy_since is None and not self.degraded:
                self._healthy_since = now
        elif stalled(now - last):
            self._stalled = True
        if self.degraded and now >= self.retry_at:
            out += self._probe_when_idle()
        if now >= self._next_expiry:
            out += self._expire(now)
        return self._answer(out + self._progress())

    def observe(self, partition: int, *, high: int | None, fetched_at: float | None) -> None:
        """The stream clock's input: the high watermark of the partition's last fetch response and
        when it came. The partition is *caught up* when every record below it was stepped (or
        committed before this worker was assigned it) and nothing failed: only such time counts
        as silence (a paused, lagging or failing worker's runs do not go silent)."""
        if high is not None and not self.normalizer.knows(partition):  # first met: up to here a previous owner may have published
            self.normalizer.replay_until(partition, high)
        healthy = self._healthy_since is not None and self.mode is Mode.RUNNING
        position = max(self.normalizer.stepped_to(partition), self._start.get(partition, -1))
        caught_up = healthy and high is not None and position >= high
        self.normalizer.clock.observe(partition, caught_up=caught_up, fetched_at=fetched_at)

    def broker_answered(self, ok: bool) -> list[Action]:
        """The health tick asked the broker for metadata: a broker that does not answer is an
        outage nothing else notices while no poll is in flight (no expiry until it answers)."""
        if not ok:
            self._healthy_since = None
        elif self._healthy_since is None and not self.degraded:
            self._healthy_since = self.now
        return self._answer([])

    def revoke(self, partitions: Iterable[int]) -> list[Action]:
        """Partitions were revoked: what is in flight settles (committed), then their runs are
        dropped — the new owner restores them from their journals."""
        self._revoking = (self._revoking or set()) | set(partitions)
        return self._answer(self._progress())

    def assigned(self, committed: Mapping[int, int | None]) -> list[Action]:
        """Partitions were assigned (``committed``: the group's committed offset of each, ``None``
        when there is none). The consumer starts each at that offset, so a rewind mark left from
        before no longer says alone where its records restart (a mark the adapter's seek could not
        act on dropped every record of the partition as stale: ``make chaos`` zombie_worker) — nor
        does the committed offset alone, since the adapter reports the assignment late: a rewind
        in between sought after it (:meth:`_restart_at`). The
        partitions' open runs are then read from the store's index and adopted, so a run whose
        producer vanished before the move still ends. The committed offset is committed again at
        once (the *join* commit): a commit of this worker's while it is a member, which is what
        the expiry's membership question later commits again — a partition with no traffic
        gets no other commit, and its adopted runs would never be judged."""
        for partition, offset in committed.items():
            self._restart_at(partition, offset)
            self._owned.add(partition)
            self._to_scan.add(partition)
            if offset is not None and offset >= 0:
                self._start[partition] = offset
                self.normalizer.assigned_at(partition, offset)
                self._joining[partition] = offset
        return self._answer(self._progress())

    def stall(self) -> list[Action]:
        """The event loop stood still long enough to lose the partitions unnoticed: once what is
        in flight settled, drop every run held (a copy another worker went on with is stale) and
        adopt the owned partitions' open runs again from the store."""
        self._stalled = True
        return self._answer(self._progress())

    def close(self) -> list[Action]:
        """Shutdown: no new poll; what is in flight completes (or fails)."""
        self.closing = True
        return self._answer(self._progress())

    # -- invariants -------------------------------------------------------------------------

    def invariants(self) -> None:
        """What holds between any two inputs; raises :class:`InvariantBroken` naming each rule broken."""
        broken: list[str] = []
        if self._outstanding < 0:
            broken.append(f"more outcomes reported than actions returned ({self._outstanding})")
        ids = [f.id for f in self._flights]
        if ids != sorted(set(ids)):
            broken.append(f"flights out of order: {ids}")
        open_seen = False
        for f in self._flights:
            if f.stage in _DONE and open_seen:
                broken.append(f"flight {f.id} is {f.stage.value} after an earlier flight that is not")
            open_seen = open_seen or f.stage not in _DONE
            if f.stage is Stage.COMMITTING and not self._committing and self.mode is Mode.RUNNING:  # a failed commit: the rewind retires it
                broken.append(f"flight {f.id} is committing with no commit out")
            if f.stage in _STEPPED and f.todo:
                broken.append(f"flight {f.id} is {f.stage.value} with {len(f.todo)} records not stepped")
            if f.stage in (Stage.ACKNOWLEDGED, Stage.CLOSING, Stage.CLOSED, Stage.COMMITTING) and not f.delivered:
                broken.append(f"flight {f.id} is {f.stage.value} before every output was acknowledged")
            if f.stage is Stage.PROBING and f.parts:
                broken.append(f"flight {f.id} wrote before its probe")
            if f.sends_out < 0:
                broken.append(f"flight {f.id} has {f.sends_out} sends out")
        if self._in_flight() > self.max_in_flight + sum(1 for f in self._flights if f.expiry):
            broken.append(f"{self._in_flight()} flights in flight, more than {self.max_in_flight}")
        for run, flight in self._unconfirmed.items():
            if flight not in ids:
                broken.append(f"run {run.run_id} waits for the write of flight {flight}, which is gone")
        for run in self._adopted:
            if not self.normalizer.holds_open(run):
                broken.append(f"run {run.run_id} is adopted but not held")
        if self.mode is Mode.RECOVERING and not self._store_lost:
            broken.append("recovering a store that was not lost")
        if self.mode is Mode.RUNNING and self._moved:
            broken.append("runs refused by the fence are kept while running")
        if self._member_check is not None and not self._committing:
            broken.append("an expiry waits for a membership question that is not out")
        if len(self._must_read) > MUST_READ_KEPT:
            broken.append(f"{len(self._must_read)} runs to read, more than {MUST_READ_KEPT}")
        if not self._restarts.keys() <= self._rewound.keys():
            broken.append(f"restart offsets of partitions not rewound: {sorted(self._restarts.keys() - self._rewound.keys())}")
        if not self._to_scan <= self._owned:
            broken.append(f"partitions to scan that are not owned: {sorted(self._to_scan - self._owned)}")
        if self.retry_at > self.now + self.backoff.cap_s + 1e-9:
            broken.append("a retry later than one backoff step")
        if broken:
            raise InvariantBroken("; ".join(broken))

    def _answer(self, out: list[Action]) -> list[Action]:
        if self.check_invariants:
            self.invariants()
        return out

    # -- timing decisions -------------------------------------------------------------------

    def _back_off(self) -> list[Action]:
        """A service failed: the next poll waits one backoff step; no expiry until a success."""
        delay = self.backoff.next_delay()
        self.retry_at = self.now + delay
        self._healthy_since = None
        return [BackedOff(delay, self.retry_at)]

    def _succeeded(self) -> list[Action]:
        """Work went through end to end (a commit, the idle probe): the backoff starts over."""
        if self.mode is not Mode.RUNNING:
            return []  # a commit that returns after a later action failed: that failure's backoff stands
        was = self.degraded
        self.backoff.reset()
        if self._healthy_since is None:
            self._healthy_since = self.now
        return [Recovered()] if was else []

    def _probe_when_idle(self) -> list[Action]:
        """Nothing in flight, degraded, the backoff over: ask whether the store takes writes again
        (a :class:`Probe` of no flight); its success ends the degraded state. Without it, a
        worker whose last failure was an expiry's write or send (no record comes back to be
        redone) stayed degraded — and so never expired again — until traffic arrived. A broker
        still away is the health tick's to say (:meth:`broker_answered`)."""
        if not self.degraded or not self.settled or self.closing or self._idle_probe:
            return []
        self._idle_probe = True
        return [self._out(Probe(NO_FLIGHT))]

    def _expire(self, now: float) -> list[Action]:
        """Close runs whose ingress went silent by stream time — only once the worker has worked
        without a break for a whole timeout (silence while Redis or the broker was away says
        nothing about the ingress) — and send again the Steps of an earlier expiry that did not
        go out. Before an expiry's writes the group is asked whether this worker is still a
        member for those partitions (:class:`Commit` ``membership``): an expiry is a decision no
        record makes, and a worker cut off without noticing must not make it. On a partition
        with no committed offset there is nothing to ask with, so nothing is proven: its runs
        are not judged until a commit lands there.

        When: a judgement held back by something in progress is tried again on the next tick; one
        that ran is next due after ``expiry_every_s``, or sooner when a run it left open may be
        due sooner (``Normalizer.expiry_due_in``; at most :data:`EXPIRY_FINEST` times as often),
        so a run ends within a tick or so of its timeout rather than up to an interval later."""
        busy = self._revoking is not None or self._stalled or self._member_check is not None or self._committing
        if self.mode is not Mode.RUNNING or self.closing or busy or not all(f.stage in _STEPPED for f in self._flights):
            return []
        since = self._healthy_since
        if since is None or now - since < self.timeout_s:
            return []
        # where this worker committed, and knows the log end (before it, records may be waiting)
        judged = {p for p in self._committed if self.normalizer.knows(p)}
        steps = [*self._unsent_expiries.values(), *self.normalizer.expire(timeout_s=self.timeout_s, partitions=judged)]
        every = self.expiry_every_s
        self._next_expiry = now + min(every, max(self.normalizer.expiry_due_in, every / EXPIRY_FINEST))
        self._unsent_expiries.clear()
        if not steps:
            return []
        self._adopted.difference_update(step.run for step in steps)  # ended (every output of an expiry follows its write, fenced)
        partitions = {step.ended_at[0] for step in steps if step.ended_at is not None}
        offsets = {p: self._committed[p] for p in partitions if p in self._committed}
        if not offsets:
            return self._launch_expiry(steps)
        self._member_check = steps
        self._committing = True
        return [self._out(Commit(offsets, membership=True))]

    # -- stepping ---------------------------------------------------------------------------

    def _step(self, flight: _Flight, loaded: dict[RunKey, Loaded], *, doubtful: bool) -> list[Action]:
        """Step every record of the flight that can be stepped now, in record order per run.

        A record whose run is neither held here nor known ended needs its journal: that run's
        records wait (its later ones too, so each run keeps its order) while every other record
        is stepped and its outputs sent; one :class:`ReadJournals` asks for all such runs."""
        normalizer, routed, steps, now = self.normalizer, flight.routed, flight.steps, flight.now
        unconfirmed, adopted = self._unconfirmed, self._adopted
        waiting: dict[RunKey, None] = {}
        todo: list[int] = []
        stepped: list[tuple[DeadLetter | RunInput | None, Step]] = []
        early: list[Outbound] = []
        runs: set[RunKey] = set()
        held: list[Outbound] = []
        opened: dict[RunKey, tuple[int, bytes]] | None = None
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
                if adopted and run in adopted:  # held only to be ended: restored as any record restores it
                    adopted.discard(run)
                    normalizer.forget_runs([run])
                    self._must_read[run] = None
                if normalizer.needs_restore(item):
                    journal = loaded.pop(run, None)
                    if journal is None and self._presumed_new(flight, item):
                        journal = _NEW_RUN
                    if journal is None:
                        waiting[run] = None
                        todo.append(i)
                        continue
                    step = self._restore(flight, item, journal, doubtful)
                    if step.journal_append is not None and not step.run_ended:
                        opened = opened or {}
                        opened[run] = (item.record.partition, normalizer.envelope_of(run))
                else:
                    step = normalizer.accept(item, now)
            steps[i] = step
            stepped.append((item, step))
            if step.run is not None:
                runs.add(step.run)
            if step.outbound:
                if step.run_ended or (step.run is not None and step.run in unconfirmed):
                    held += step.outbound
                else:
                    early += step.outbound
        flight.todo = todo
        if stepped:
            flight.parts.append(_Part(tuple(step for _, step in stepped), runs, held, opened))
        out: list[Action] = []
        stage = Stage.READING if todo else Stage.WRITING
        if stage is not flight.stage:
            _move(flight, stage)
        if stepped or not todo:
            out.append(Stepped(flight.id, tuple(stepped), complete=not todo))
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
        step = self.normalizer.accept(item, flight.now)
        if not ended:
            self._unconfirmed[item.run] = flight.id
            flight.restored.add(item.run)
        return step

    def _adopt(self, loaded: Mapping[RunKey, Loaded], doubtful: bool) -> list[Action]:
        """Take up the open runs read from the index whose journals came back: restored to be
        judged by the expiry, their first write (the expiry's) confirming them (the fence)."""
        partitions, self._adopting = self._adopting, {}
        owned = self._owned - (self._revoking or set())
        if self.mode is not Mode.RUNNING:
            self._to_scan |= set(partitions.values()) & owned
            return []
        adopted = 0
        for run, (journal, ended) in loaded.items():
            partition = partitions.get(run)
            if partition is None or ended or partition not in owned or self.normalizer.holds(run):
                continue
            if self.normalizer.adopt(run, partition, journal, doubtful=doubtful):
                self._adopted.add(run)
                adopted += 1
        return [Adopted(adopted)] if adopted else []

    def _launch_expiry(self, steps: list[Step]) -> list[Action]:
        flight = self._new_flight({}, Stage.WRITING)
        flight.expiry = True
        flight.steps = list(steps)
        runs = {step.run for step in steps if step.run is not None}
        held = [out for step in steps for out in step.outbound]  # an expiry's outputs end their runs: after the write
        flight.parts.append(_Part(tuple(steps), runs, held))
        return [Stepped(flight.id, tuple((None, s) for s in steps), complete=True), *self._progress()]

    def _retake(self, steps: list[Step]) -> None:
        """Expiries dropped undecided: their runs (ended here in memory only) are forgotten and
        their partitions' open runs read again, so each is adopted and judged afresh."""
        self.normalizer.forget_runs(s.run for s in steps if s.run is not None)
        self._to_scan |= {s.ended_at[0] for s in steps if s.ended_at is not None} & self._owned

    def _membership_refused(self) -> list[Action]:
        """The group refused the membership commit: the expiry waits (sent by a later expiry,
        unless the partition is revoked meanwhile)."""
        steps, self._member_check = self._member_check or [], None
        self._committing = False
        self._unsent_expiries.update((step.run, step) for step in steps if step.run is not None)
        return []  # the adapter logged the refusal

    # -- the pipeline -----------------------------------------------------------------------

    def _progress(self) -> list[Action]:
        """Everything that may happen now, given what has: writes, held sends, ended markers,
        the commit, deferred requests, the scan of open runs — or, after a failure, the rewind
        once nothing is out."""
        if self.mode is not Mode.RUNNING:
            return self._rewind() if self._outstanding == 0 else []
        out: list[Action] = []
        pending_runs: set[RunKey] = set()
        earlier_closed = True
        for flight in self._flights:
            for index, part in enumerate(flight.parts):  # a probing flight has none yet
                if part.stage is PartStage.PENDING and not (part.runs & pending_runs):
                    _move_part(flight, part, PartStage.WRITING)
                    out.append(self._out(Write(flight.id, part.steps, index, part.opened)))
                if part.stage is PartStage.PENDING or part.stage is PartStage.WRITING:
                    pending_runs |= part.runs
                elif part.stage is PartStage.WRITTEN:
                    _move_part(flight, part, PartStage.RELEASED)
                    if part.held:
                        flight.sends_out += 1
                        out.append(self._out(Send(flight.id, tuple(part.held), terminal=True)))
            if flight.stage is Stage.WRITING and flight.delivered:
                _move(flight, Stage.ACKNOWLEDGED)
                out.append(Acknowledged(flight.id))
            if flight.stage is Stage.ACKNOWLEDGED and earlier_closed:
                ended = tuple(s for s in flight.steps if s is not None and s.run_ended)
                if ended:
                    _move(flight, Stage.CLOSING)
                    out.append(self._out(Close(flight.id, ended)))
                else:
                    _move(flight, Stage.CLOSED)
            earlier_closed = earlier_closed and flight.stage in _DONE
        out += self._commit()
        out += self._settle_deferred()
        out += self._scan()
        return out

    def _commit(self) -> list[Action]:
        """The oldest completed flights' offsets in one commit; one commit at a time (the join
        commit of newly assigned partitions first)."""
        if self._committing:
            return []
        if self._joining and self._revoking is None and not (self.degraded and self.now < self.retry_at):
            # a partition this worker committed since it was assigned needs no join commit, and the
            # offset read at the (late reported) assignment would take the group's back
            offsets = {p: o for p, o in self._joining.items() if p not in self._committed}
            self._joining = {}
            if offsets:
                self._committing = True
                self._join = Commit(offsets)
                return [self._out(self._join)]
        ready = []
        for flight in self._flights:
            if flight.stage is not Stage.CLOSED:
                break
            ready.append(flight)
        if not ready:
            return []
        offsets = {p: end for f in ready for p, (_, end) in f.offsets.items()}  # later flights win
        if not offsets:  # expiry flights only: nothing to commit
            return self._retire(ready, committed=True)
        for flight in ready:
            _move(flight, Stage.COMMITTING)
        self._committing = True
        return [self._out(Commit(offsets))]

    def _committed_now(self, action: Commit) -> list[Action]:
        self._committing = False
        if action is self._join:
            self._join = None
            self._committed.update({p: o for p, o in action.offsets.items() if p in self._owned})
            return self._succeeded()
        if action.membership:
            steps, self._member_check = self._member_check or [], None
            if self.mode is not Mode.RUNNING:  # decided on state the rewind discards: judged again, from the journals
                self._retake([s for s in steps if s.run is not None])
                return []
            return self._launch_expiry(steps) if steps else []
        self._committed.update(action.offsets)
        return self._retire([f for f in self._flights if f.stage is Stage.COMMITTING], committed=True) + self._succeeded()

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
                self._drop_rewind(partition)
                self._committed.pop(partition, None)
                self._start.pop(partition, None)
            self._owned -= gone
            self._to_scan -= gone
            for partition in gone:
                self._joining.pop(partition, None)
            dropped = self.normalizer.forget_partitions(gone, revoked=True)
            self._unsent_expiries = {r: s for r, s in self._unsent_expiries.items() if s.ended_at is not None and s.ended_at[0] not in gone}
            self._unconfirmed = {r: f for r, f in self._unconfirmed.items() if self.normalizer.holds_open(r)}
            self._adopted = {r for r in self._adopted if self.normalizer.holds_open(r)}
            out.append(Forgot(dropped, "revoked"))
        if self._stalled:
            self._stalled = False
            out.append(Forgot(self.normalizer.forget_all(), "stall"))
            self._unconfirmed.clear()
            self._adopted.clear()
            self._to_scan |= self._owned  # a run whose producer vanished has no record to come back by
        return out

    def _scan(self) -> list[Action]:
        """Read the index of open runs of the partitions waiting for it — once nothing else is
        asked of the store first (a deferred request, a failure, the backoff)."""
        if not self._to_scan or self._scanning or self._adopting or self.closing or self._revoking is not None or self._stalled:
            return []
        if self.degraded and self.now < self.retry_at:
            return []
        partitions, self._to_scan = tuple(sorted(self._to_scan)), set()
        self._scanning = True
        return [self._out(ReadOpenRuns(partitions))]

    # -- failure ----------------------------------------------------------------------------

    def _rewind(self) -> list[Action]:
        """Nothing is out any more: retire every flight uncommitted, and — after a store loss —
        recover the store first."""
        if self.mode is Mode.RECOVERING:
            return []
        if self._store_lost:
            self.mode = Mode.RECOVERING
            return [self._out(RecoverStore())]
        return self._finish_rewind(recovered=False)

    def _finish_rewind(self, *, recovered: bool) -> list[Action]:
        """Seek every partition in flight back to its first uncommitted record and drop its runs
        (the core advanced them in memory; they are restored from their journals)."""
        first: dict[int, int] = {}
        for flight in self._flights:
            for p, (start, _) in flight.offsets.items():
                first[p] = min(start, first.get(p, start))
        for flight in self._flights:
            if flight.expiry and flight.stage not in _DONE:  # not sent, or sent but its ended markers not written: again, identical —
                # unless its run's records come again (a rewound partition): then judged again, from the journal
                held = [(s.run, s) for s in flight.steps if s is not None and s.run is not None and s.run not in self._moved]
                self._unsent_expiries.update((run, s) for run, s in held if s.ended_at is None or s.ended_at[0] not in first)
                self._retake([s for _, s in held if s.ended_at is not None and s.ended_at[0] in first])
        out = self._retire(list(self._flights), committed=False)
        if self._moved:  # their partitions are read again: a refused expiry's run still has to end
            self._to_scan |= {p for p in map(self.normalizer.partition_of, self._moved) if p is not None} & self._owned
            self.normalizer.forget_runs(self._moved)
            for run in self._moved:
                self._unsent_expiries.pop(run, None)
                self._must_read[run] = None
            while len(self._must_read) > MUST_READ_KEPT:
                del self._must_read[next(iter(self._must_read))]
            out.append(Forgot(len(self._moved), "moved"))
            self._moved.clear()
        self.mode = Mode.RUNNING
        self._committing = False
        self._unconfirmed.clear()
        if recovered:
            out.append(Forgot(self.normalizer.forget_all(), "store_lost"))
            self._to_scan |= self._owned
        else:
            self.normalizer.forget_partitions(first)
            self._to_scan |= set(first) & self._owned
        self.normalizer.rewound(first)
        self._adopted = {r for r in self._adopted if self.normalizer.holds_open(r)}
        revoked = self._revoking or set()
        seek = {p: o for p, o in first.items() if p not in revoked}
        if seek:
            self._rewound.update(seek)
            for partition in seek:  # sought after any assignment the adapter reported: exactly there
                self._restarts.pop(partition, None)
            out.append(Seek(seek))
        return out + self._progress()

    def _fresh(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """Drop records fetched before a rewind: a rewound partition restarts at its offset — or,
        reported assigned since, at the committed offset the consumer was given (:meth:`assigned`)."""
        if not self._rewound:
            return records
        kept = []
        for record in records:
            partition = record.partition
            start = self._rewound.get(partition)
            if start is not None:
                if not self._restarts_at(partition, start, record.offset):
                    continue
                self._drop_rewind(partition)
            kept.append(record)
        return kept

    def _restarts_at(self, partition: int, start: int, offset: int) -> bool:
        """Whether a rewound partition's records may restart at ``offset``: the rewind's offset, or
        the committed offset an assignment reported since (:meth:`_restart_at`)."""
        return offset == start or offset == self._restarts.get(partition)

    def _restart_at(self, partition: int, committed: int | None) -> None:
        """An assignment of a rewound partition was reported. The consumer restarted it at the
        committed offset — unless the rewind's seek came after that: the adapter reports an
        assignment only once it has read the committed offsets, and polls go on meanwhile. So
        the partition may restart at either, and records fetched before the seek (all past the
        rewind's offset) stay stale — taken, a run met past its first records would end
        ``sequence_gap``. A committed offset not known leaves no way to tell: the mark goes (a
        partition whose records were all dropped as stale would be wedged)."""
        if partition not in self._rewound:
            return
        if committed is None or committed < 0:
            self._drop_rewind(partition)
        else:
            self._restarts[partition] = committed

    def _drop_rewind(self, partition: int) -> None:
        """The partition's records restart (or it went): its rewind mark and restart offset go together."""
        self._rewound.pop(partition, None)
        self._restarts.pop(partition, None)

    # -- bookkeeping ------------------------------------------------------------------------

    def _new_flight(self, offsets: dict[int, tuple[int, int]], stage: Stage) -> _Flight:
        self._ids += 1
        flight = _Flight(self._ids, offsets, stage)
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
