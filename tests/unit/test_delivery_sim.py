"""Seeded deterministic simulation of the normalizer's delivery protocol under faults.

What is simulated: the production delivery state machine
(:class:`reasonwire.workers.core.delivery_machine.DeliveryMachine`: every decision of
the worker between a poll and its commit) over the real sans-I/O core
(:class:`reasonwire.workers.core.normalizer.Normalizer`), against an in-memory broker and store.
The driver here only performs the actions the machine returns — in any order among those
outstanding, as the adapter runs them concurrently — and reports their outcome: there is no
second model of the ordering in this file. Faults are injected at every action — a send that
fails after publishing part of its records, a Redis transaction that fails before or after it
wrote, a commit that fails before or after it landed — and the machine's rewind follows; a
crash (memory lost, restart from the committed offsets) can happen between any two actions. Partitions also move to another worker and back (a rebalance: the revoked worker
settles what is in flight and drops its runs, as its listener does).

The input is hostile: runs from the sample streams with records lost, swapped, duplicated
(identical and conflicting), carrying a bad header, non-JSON, too large for a topic (with
small limits), raising inside the translator, followed by late records; end records for runs
never seen.

Checked for every seed, against a reference (the same core fed the same log once, no faults):

* no two different events share (run, ``rw-event-seq``) — trusted and public streams;
* nothing is lost: every output of the reference (events, usage, dead letters byte for byte)
  is published, and nothing else is;
* a run with a missing record never ends ``RUN_FINISHED``;
* no partition is wedged: once faults stop, every partition is committed to its end within
  a bounded number of actions (commits never pass an unprocessed record: a crash restarts at
  the committed offset and must still publish everything).

With inactivity timeouts (a clock decision, so no reference to compare with), a separate test
checks that no two different events share a number and nothing follows a run's terminal event.

Further faults break ownership and the store's memory, each with the same
invariants: *zombies* — the owner freezes and the group gives its partitions to a fresh worker
without telling it; the zombie goes on fetching from its old position, writing and sending (its
commits refused), paused ones dropping their runs first as the adapter's stall rule does;
*stream-time expiry* fed as the adapter feeds it (a lagging, crashed or paused worker must
expire nothing whose records are in the log: the outcome is the reference's); *live producers*
(records arrive over time); and a *store rollback* (copies taken, the store put back to one,
epoch id kept). The store model applies the write script's rules from the core
(``fence_accepts``, the write count against the ``Witness``). A test shows the scenarios can fail:
without the fence or without the witness, seeds break.

How it is driven (TigerBeetle's VOPR): every fault's probability is drawn per seed
(:class:`Swarm`: failures, crashes, rebalances, zombies, stalls, graceful restarts, prefetch);
the machine checks its invariants after every input (``check_invariants``); each worker has its
own clock, fed to ``tick(now)``, which jumps when its process stands still (a stall it notices
itself); the fake consumer hands over prefetched records (stale after a seek) and calls the
rebalance listener (``assigned``, ``revoke``). A seed is a function of itself:
``RW_SIM_SEED=n`` reruns seed ``n`` alone in every test, and :func:`simulate` returns its trace.
Producers that vanish mid-run (``vanish``) check that every run the store holds open ends.
tests/integration/test_delivery_sim_redis.py runs the same simulation through the real store
and its Lua scripts for a share of the seeds; tests/integration/test_fence_differential.py
holds the Lua fence and :func:`fence_accepts` to the same verdicts.

Not simulated: the asyncio adapter (``workers/services/normalizer.py``) that performs the actions —
tests/integration/test_delivery_adapter.py checks it performs only what the machine returned —
runs whose records move to another partition (``tests/integration/test_fence.py`` checks that
at the store), and a Redis Cluster.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import Control
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.usage import NO_TOKENS, UsageRecord
from reasonwire.workers.core import events as ev
from reasonwire.workers.core import normalizer as core
from reasonwire.workers.core.translator import Rejection, RunEnd, Translation
from reasonwire.workers.core.delivery import DeadLetterCode, OutputLimits
from reasonwire.workers.core.fence import Witness, fence_accepts
from reasonwire.workers.core.actions import (
    NOTIFICATIONS, Action, Adopted, Close, Commit, FailureKind, Forgot, Probe, ReadJournals, ReadOpenRuns, RecoverStore, Seek, Send, Write,
)
from reasonwire.workers.core.backoff import Backoff
from reasonwire.workers.core.delivery_machine import DeliveryMachine
from reasonwire.workers.core.fence import STALL_S
from reasonwire.workers.core.normalizer import JournalEntry, Normalizer, Outbound, RawRecord, RunKey, Step
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import ProviderEvent, read_events
from reasonwire.workers.ops import native
from reasonwire.workers.translators import translator_for
from tests.translator_faults import Replaced

SEEDS = int(os.environ.get("RW_SIM_SEEDS", "500"))
"""Per ``make test``; ``RW_SIM_SEEDS=5000`` for a longer campaign."""
ONE_SEED = int(os.environ["RW_SIM_SEED"]) if os.environ.get("RW_SIM_SEED") else None
"""``RW_SIM_SEED=n``: every simulation test runs seed ``n`` alone (a failure names its seed)."""


def seeds(count: int) -> range | list[int]:
    """The seeds a test runs: ``count`` of them, or the one ``RW_SIM_SEED`` names."""
    return [ONE_SEED] if ONE_SEED is not None else range(max(1, count))
REAL_SEEDS = max(1, SEEDS // 40)
MAX_IN_FLIGHT = 3
BOOM = b"__boom__"
FIXTURES = sorted(
    p for p in (Path(__file__).resolve().parents[1] / "fixtures").glob("*/*.jsonl") if 3 <= sum(1 for _ in p.open()) <= 12
)
_STREAMS: dict[Path, list[Any]] = {}


def _fixture_records(path: Path, run: RunEnvelope) -> list[Any]:
    if path not in _STREAMS:
        with path.open() as f:
            _STREAMS[path] = list(read_events(f))
    return list(raw_records(run, _STREAMS[path]))


class StubTranslator:
    """A translator cheap enough for thousands of seeds: one event per record, derived from its
    bytes (so a different record gives a different event), ``{"stop":…}`` finishes the run, a
    value that is not a JSON object is rejected (R7). The delivery protocol sees what a real
    translator gives it: numbered events, a terminal event, a rejection, a usage record."""

    def __init__(self, *, run_id: str, thread_id: str, **_: Any) -> None:
        self.run_id, self.thread_id = run_id, thread_id
        self.line = 0
        self.end: Any = None
        self.ended = False
        self._started = False

    def feed(self, raw: bytes, *, sse_event: str | None = None, at_ms: float | None = None) -> Translation:
        self.line += 1
        if BOOM in raw:
            raise ValueError("a translator bug")
        if self.ended:
            return Translation()
        out = self._start()
        if not raw.startswith(b"{"):
            self.ended, self.end = True, RunEnd.ERROR
            out.append(ev.run_error(f"malformed event at line {self.line}", "malformed_event", usage=None, metadata=None))
            return Translation(out, rejection=Rejection(self.line, f"malformed event at line {self.line}: not JSON"))
        if raw.startswith(b'{"stop"'):
            self.ended, self.end = True, RunEnd.FINISHED
            return Translation([*out, ev.run_finished(self.thread_id, self.run_id, pending_tool_call_ids=None, usage=None, metadata=None)])
        return Translation([*out, ev.text_message_content(f"{self.run_id}:text", raw.decode("utf-8", "replace"))])

    def finish(self) -> Translation:
        return self.abort("stream ended before the provider's terminal event")

    def abort(self, reason: str = "dropped", *, code: Any = "interrupted") -> Translation:
        if self.ended:
            return Translation()
        self.ended, self.end = True, RunEnd.INTERRUPTED
        return Translation([*self._start(), ev.run_error(reason, str(code), usage=None, metadata=None)])

    def usage_record(self, *, tenant: str | None = None) -> UsageRecord:
        return UsageRecord(run_id=self.run_id, thread_id=self.thread_id, tenant=tenant, grammar=Grammar.OPENAI_RESPONSES, tokens=NO_TOKENS, end=(self.end or RunEnd.INTERRUPTED).value)

    def _start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [ev.run_started(self.thread_id, self.run_id, None), ev.text_message_start(f"{self.run_id}:text", None)]


def _stub_records(rng: random.Random, run: RunEnvelope) -> list[Any]:
    data = [b'{"d":"%d-%d"}' % (i, rng.randrange(1000)) for i in range(rng.randint(2, 8))] + [b'{"stop":1}']
    return list(raw_records(run, [ProviderEvent(i + 1, value) for i, value in enumerate(data)]))


# -- the hostile input ------------------------------------------------------------------


@dataclass
class Scenario:
    logs: dict[int, list[RawRecord]]
    gapped: set[str] = field(default_factory=set)
    """Runs missing a record before their provider's last event: they must never finish."""
    limits: OutputLimits = field(default_factory=OutputLimits)


def _scenario(rng: random.Random, *, stub: bool = True, orderly: bool = False, vanish: bool = False) -> Scenario:
    """``orderly``: no run's records swapped, and no conflicting copy of an accepted record (see
    the rollback test). ``vanish``: some producers vanish mid-run (a run's last records, its end
    record included, never come)."""
    partitions = rng.randint(1, 3)
    per_partition: dict[int, list[list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]]] = defaultdict(list)
    gapped: set[str] = set()
    for i in range(rng.randint(2, 5)):
        path = rng.choice(FIXTURES)
        run = RunEnvelope(path.parent.name, f"run{i}", f"thread{i}", tenant="acme")
        made = _stub_records(rng, run) if stub else _fixture_records(path, run)
        records = [(r.key, r.value, list(r.headers)) for r in made]
        data = len(records) - 1  # the last one is the ingress's end record
        mutations = ["none", "none", "drop", "bad_header", "swap", "dup", "conflict", "late", "nonjson", "boom", "big"] + ["vanish"] * (3 * vanish)
        mutation = rng.choice([m for m in mutations if not (orderly and m in ("swap", "conflict"))])
        at = rng.randrange(0, max(1, data - 1))
        if mutation == "drop" and data >= 2:
            del records[at]
            gapped.add(run.run_id)
        elif mutation == "bad_header" and data >= 2:
            key, value, headers = records[at]
            records[at] = (key, value, [h for h in headers if h[0] != "rw-seq"])
            gapped.add(run.run_id)
        elif mutation == "swap" and data >= 3:
            records[at], records[at + 1] = records[at + 1], records[at]
            gapped.add(run.run_id)
        elif mutation == "dup":
            records.insert(rng.randint(at + 1, len(records)), records[at])
        elif mutation == "conflict":
            key, value, headers = records[at]
            records.insert(rng.randint(at + 1, len(records)), (key, (value or b"") + b" ", headers))
        elif mutation == "late":
            key, _, _ = records[-1]
            records.append((key, b'{"type":"late"}', list(run.headers(len(records)))))
        elif mutation == "nonjson":
            key, _, headers = records[at]
            records[at] = (key, b"\xff" * rng.choice([10, 5000]), headers)
        elif mutation == "boom":
            key, value, headers = records[at]
            records[at] = (key, (value or b"") + BOOM, headers)
        elif mutation == "vanish":
            del records[rng.randint(1, max(1, data - 1)) :]
        elif mutation == "big":
            key, value, headers = records[at]
            records[at] = (key, (value or b"")[:-1] + b',"pad":"' + b"p" * 4000 + b'"}', headers)
        per_partition[rng.randrange(partitions)].append(records)
    if rng.random() < 0.5:  # an end record for a run never seen
        ghost = RunEnvelope("openai-responses", "ghost", "ghost-thread", tenant="acme")
        per_partition[rng.randrange(partitions)].append([(b"ghost", None, list(ghost.headers(rng.choice([0, 3]), control=Control.END)))])
    logs: dict[int, list[RawRecord]] = {}
    for p in range(partitions):
        queues = [deque(rs) for rs in per_partition.get(p, [])]
        log: list[RawRecord] = []
        while any(queues):  # each run's records in order, runs interleaved at random
            q = rng.choice([q for q in queues if q])
            key, value, headers = q.popleft()
            log.append(RawRecord(key, value, tuple(headers), p, len(log)))
        logs[p] = log
    small = rng.choice([None, 600, 3000])
    limits = OutputLimits(per_topic={t: small for t in (topics.EVENTS, topics.EVENTS_PUBLIC, topics.DLQ)}) if small else OutputLimits()
    return Scenario(logs, gapped, limits)


# -- the services ------------------------------------------------------------------------


class Store:
    """Redis as the worker uses it: journals (with the run's head), ended markers, the index of
    open runs per partition, the epoch and its write count — and the write script's checks, with
    the rule the Lua script applies (``reasonwire.workers.core.fence``, checked against the Lua
    itself by tests/integration/test_fence_differential.py): a store refused by the epoch or the
    witness raises :class:`Gone`, a fenced run that moved raises :class:`Moved`, and then nothing
    is written."""

    def __init__(self) -> None:
        self.journals: dict[RunKey, dict[int, JournalEntry]] = {}
        self.ended: dict[RunKey, bytes] = {}
        self.heads: dict[RunKey, str] = {}
        self.open: dict[int, set[RunKey]] = defaultdict(set)
        self.epoch = "e0"
        self.writes = 0
        self.lost = False

    def _check(self, witness: Witness) -> None:
        if witness.epoch != self.epoch or witness.rolled_back(self.epoch, self.writes):
            raise Gone("the store's epoch changed or its write count went back")

    def apply(self, steps: list[Step], witness: Witness, opened: Any = None) -> None:
        self._check(witness)
        fences: dict[RunKey, tuple[str, str]] = {}
        for s in steps:
            if s.run is not None and s.fence is not None:
                fences[s.run] = (fences[s.run][0] if s.run in fences else s.fence[0], s.fence[1])
        moved = [run for run, (expected, new) in fences.items() if not fence_accepts(self.heads.get(run, ""), expected, new, run in self.ended)]
        if moved:
            raise Moved(moved)
        for run, (_, new) in fences.items():
            self.heads[run] = new
        for s in steps:
            if s.run is not None and s.journal_append is not None:
                self.journals.setdefault(s.run, {})[s.journal_append.seq] = s.journal_append
        for run, (partition, envelope) in (opened or {}).items():
            if run in self.journals:
                self.journals[run][core.ENVELOPE_SEQ] = JournalEntry(core.ENVELOPE_SEQ, envelope)
                self.open[partition].add(run)
        self._wrote(witness)

    def close(self, steps: list[Step], witness: Witness) -> None:
        self._check(witness)
        for s in steps:
            if s.run is not None and s.run_ended:
                self.journals.pop(s.run, None)
                self.heads.pop(s.run, None)
                self.ended[s.run] = s.ended_marker
                if s.ended_at is not None:
                    self.open[s.ended_at[0]].discard(s.run)
        self._wrote(witness)

    def open_runs(self, partitions: tuple[int, ...]) -> dict[int, list[RunKey]]:
        return {p: sorted(self.open.get(p, ())) for p in partitions}

    def _wrote(self, witness: Witness) -> None:
        self.writes += 1
        witness.saw(self.writes)

    def load(self, run: RunKey, witness: Witness) -> tuple[list[JournalEntry], bytes | bool]:
        self._check(witness)
        journal = list(self.journals.get(run, {}).values())
        if run in self.heads:
            journal.append(JournalEntry(core.HEAD_SEQ, self.heads[run].encode()))
        return journal, self.ended.get(run, False)

    def claim(self, witness: Witness, counts: dict[str, int] | None) -> None:
        """``ArtefactStore.claim_epoch`` at start-up (``counts``: the commits' counts per epoch id)
        and after :class:`Gone` (``None``: the worker's own witness; ``recover_from_loss`` marks the
        store lost): a store behind its id's count gets a new epoch, lost; a store whose id no
        commit carries, while commits carry ids, is not the one they were made against: lost."""
        count = counts.get(self.epoch, 0) if counts is not None else (witness.count if witness.epoch == self.epoch else 0)
        if self.writes < count:
            self.epoch, self.writes, self.lost = f"e{int(self.epoch[1:]) + 1}", count, True
        elif counts is None or (counts and self.epoch not in counts):
            self.lost = True
        witness.adopt(self.epoch, self.writes)

    def copy(self) -> Store:
        twin = Store()
        twin.journals = {run: dict(entries) for run, entries in self.journals.items()}
        twin.ended, twin.heads = dict(self.ended), dict(self.heads)
        twin.open = defaultdict(set, {p: set(runs) for p, runs in self.open.items()})
        twin.epoch, twin.writes, twin.lost = self.epoch, self.writes, self.lost
        return twin


class Fault(Exception):
    pass


class Gone(Fault):
    """``StoreLost``: the worker recovers the store's epoch and drops every run it holds."""


class Moved(Fault):
    """``RunsMoved``: the fence refused a write for these runs."""

    def __init__(self, runs: list[RunKey]) -> None:
        super().__init__("runs moved")
        self.runs = runs


class Worker:
    """One worker process: the production :class:`DeliveryMachine` (the decisions) driven over
    the in-memory services. The actions it returns are outstanding at once, as the adapter runs
    them concurrently; each simulated moment performs one of them, chosen at random, with
    faults — so completions arrive in every order the adapter could see. Its own clock
    (``self.clock``, what it feeds ``tick``) is its event loop's: one unit per tick, jumping
    forward when the process stood still (a stall the machine notices by itself)."""

    def __init__(self, world: World, normalizer: Normalizer) -> None:
        self.world = world
        self.n = normalizer
        world.workers += 1
        self.name = f"w{world.workers}"
        self.n.token = self.name
        swarm = world.swarm
        self.machine = DeliveryMachine(
            normalizer, max_in_flight=MAX_IN_FLIGHT, backoff=Backoff(0.5, 4.0, rng=random.Random(world.workers)), check_invariants=True,
            timeout_s=world.timeout_s, expiry_every_s=swarm.expiry_every,
        )
        self.clock = 0.0
        self.position = dict(world.committed)
        self.prefetched: list[RawRecord] = []
        """Records the consumer fetched ahead and hands over with the next poll (a seek does not recall them)."""
        self.pending: list[Action] = []
        """Actions returned by the machine and not performed yet."""
        self.witness = Witness()
        if world.stream_time:
            self.n.clock.step = 1.0  # one fetch response per action
        self.zombie = False
        """Lost its partitions without being told (paused, cut off from the coordinator): its
        commits are refused; its fetches, writes and sends still go through."""
        world.store.claim(self.witness, {world.metadata[0]: world.metadata[1]} if world.metadata[0] else {})  # start-up: the commits' witness
        self.unreported = world.late_assignment
        """The assignment is not reported yet (``World.late_assignment``): :meth:`report_assignment`."""
        if not self.unreported:
            self.report_assignment()

    def report_assignment(self) -> None:
        """The rebalance listener: the group's committed offsets as read now, when it reports."""
        self.unreported = False
        self.world.log(self, "assigned", dict(self.world.committed))
        self.take(self.machine.assigned(dict(self.world.committed)))

    def take(self, actions: list[Action]) -> None:
        """What the adapter does with the machine's answer: I/O goes out, a seek moves the
        fetch position, notifications are only read."""
        for action in actions:
            if isinstance(action, Seek):
                self.position.update(action.offsets)
                self.world.log(self, "Seek", action.offsets)
            elif isinstance(action, Forgot | Adopted):
                self.world.log(self, type(action).__name__, action.runs)
            elif not isinstance(action, NOTIFICATIONS):
                self.pending.append(action)

    def observe(self) -> None:
        """``NormalizerWorker.tick``'s stream clock: each partition's high watermark and the fetch response's time."""
        for p in self.world.logs:
            self.machine.observe(p, high=self.world.end(p), fetched_at=float(self.world.clock))

    def tick(self, jump: float = 0.0) -> None:
        """The adapter's clock loop: one unit, or ``jump`` more (the process stood still)."""
        self.clock += 1.0 + jump
        self.take(self.machine.tick(self.clock))

    def poll(self, rng: random.Random) -> None:
        """A poll, as the consumer hands it over: what it prefetched before (fetched from where the
        position was then — stale if a seek came since), then a few records of every partition
        from the fetch position, part of which may stay in its buffer for the next poll."""
        if not self.machine.accepting:
            return
        records, self.prefetched = self.prefetched, []
        fresh: list[RawRecord] = []
        for p, log in self.world.logs.items():
            take = rng.randint(1, 4)
            fresh += log[self.position[p] : min(self.world.end(p), self.position[p] + take)]
            self.position[p] = min(self.world.end(p), self.position[p] + take)
        if len(fresh) > 1 and rng.random() < self.world.swarm.prefetch:
            cut = rng.randrange(1, len(fresh))
            fresh, self.prefetched = fresh[:cut], fresh[cut:]
        records += fresh
        if records:
            self.world.log(self, "poll", [(r.partition, r.offset) for r in records])
            self.take(self.machine.poll(records, {p: self.world.end(p) for p in self.world.logs}, now=self.clock))

    def advance(self, rng: random.Random, faulty: bool) -> None:
        """One outstanding action, chosen at random, performed and reported."""
        if self.pending:
            self.perform(self.pending.pop(rng.randrange(len(self.pending))), rng, faulty)

    def perform(self, action: Action, rng: random.Random, faulty: bool) -> None:
        world, store, machine = self.world, self.world.store, self.machine
        outcome = "done"
        try:
            if isinstance(action, ReadJournals):
                world.redis(lambda: None, rng, faulty)
                loaded = {run: store.load(run, self.witness) for run in action.runs}
                world.log(self, "ReadJournals", action.flight, "done")
                self.take(machine.journals_read(action, loaded, doubtful=store.lost))
                return
            if isinstance(action, ReadOpenRuns):
                world.redis(lambda: None, rng, faulty)
                world.log(self, "ReadOpenRuns", action.partitions, "done")
                self.take(machine.open_runs_read(action, world.store.open_runs(action.partitions)))
                return
            if isinstance(action, Send):
                world.send(list(action.outbound), rng, faulty)
            elif isinstance(action, Write):
                world.redis(lambda: world.store.apply(list(action.steps), self.witness, action.opened), rng, faulty)
            elif isinstance(action, Close):
                world.redis(lambda: world.store.close(list(action.steps), self.witness), rng, faulty)
            elif isinstance(action, Probe):
                world.redis(lambda: world.store._check(self.witness), rng, faulty)
            elif isinstance(action, RecoverStore):
                world.redis(lambda: world.store.claim(self.witness, None), rng, faulty)
            elif isinstance(action, Commit):
                late = action.membership and rng.random() < world.late_membership
                world.redis(lambda: self._commit(action, late=late), rng, faulty)  # fails before or after it lands
        except Moved as failure:
            outcome = "moved"
            answer = machine.failed(action, FailureKind.MOVED, failure.runs)
        except Gone:
            outcome = "store_lost"
            answer = machine.failed(action, FailureKind.STORE_LOST)
        except Fault:
            outcome = "outage"
            answer = machine.failed(action, FailureKind.OUTAGE)
        else:
            answer = machine.done(action)
        world.log(self, type(action).__name__, getattr(action, "flight", ""), outcome)
        self.take(answer)

    def _commit(self, action: Commit, *, late: bool = False) -> None:
        """``late``: a zombie's membership question answered before the group moved on (the
        answer was true when given; the expiry it lets through races the new owner)."""
        if self.zombie and not late:
            raise Fault("the group's generation moved on: commit refused")
        if self.zombie:
            return
        if not action.membership:
            self.world.committed.update(action.offsets)
        self.world.metadata = (self.witness.epoch or "", self.witness.count)

    def settle(self, rng: random.Random) -> None:
        """Every outstanding action performed without faults, until the machine has settled."""
        while self.pending:
            self.advance(rng, faulty=False)
        assert self.machine.settled or not self.machine._flights, "actions done, yet flights wait"

    def revoke(self, rng: random.Random) -> None:
        """The rebalance listener: settle what is in flight, then drop the partitions' runs."""
        self.prefetched = []  # the consumer drops its buffer with the partitions
        self.take(self.machine.revoke(self.world.logs))
        self.settle(rng)
        assert not self.machine.revoking


@dataclass
class Swarm:
    """Every fault's probability, drawn per seed (TigerBeetle's swarm testing): a seed that
    crashes often and never stalls finds what a seed with every fault at a middling rate hides."""

    fault_rate: float
    """An action fails (a send after publishing part of its records, a write before or after it landed)."""
    crash: float
    """The owner crashes between two actions (memory lost, restart from the committed offsets)."""
    rebalance: float
    """The partitions move to the other worker and back."""
    zombie: float
    """The owner freezes and the group moves on without telling it."""
    backup: float
    """A copy of the store is taken (and, with ``rollback``, once restored)."""
    stall: float
    """The owner's event loop stands still for more than ``STALL_S`` (it notices by its clock)."""
    shutdown: float
    """The owner is stopped gracefully (``close``: what is in flight completes) and started again."""
    prefetch: float
    """How often the consumer keeps part of a fetch for the next poll (records that may be stale by then)."""
    poll_bias: float
    """How often the owner polls rather than performs an outstanding action."""
    expiry_every: float
    """The machine's expiry interval (ticks of its own clock)."""
    calm_after: int
    """Actions after which faults stop (every partition must then be committed to its end)."""

    @classmethod
    def draw(cls, rng: random.Random, faults: bool) -> Swarm:
        if not faults:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.55, rng.choice([0.0, 1.0, 3.0]), 0)
        return cls(
            fault_rate=rng.choice([0.02, 0.05, 0.15, 0.3]), crash=rng.choice([0.0, 0.01, 0.04, 0.08]), rebalance=rng.choice([0.0, 0.01, 0.03, 0.06]),
            zombie=rng.choice([0.0, 0.02, 0.03, 0.06]), backup=rng.choice([0.0, 0.03, 0.06]), stall=rng.choice([0.0, 0.0, 0.01, 0.03]),
            shutdown=rng.choice([0.0, 0.0, 0.01, 0.02]), prefetch=rng.choice([0.0, 0.2, 0.5]),
            poll_bias=rng.choice([0.3, 0.45, 0.6]), expiry_every=rng.choice([0.0, 1.0, 3.0]), calm_after=rng.randint(5, 120),
        )


class World:
    def __init__(self, logs: dict[int, list[RawRecord]], swarm: Swarm, store: Any = None) -> None:
        self.logs = logs
        self.swarm = swarm
        self.committed = {p: 0 for p in logs}
        self.metadata: tuple[str, int] = ("", 0)
        """The last commit's metadata: (store epoch id, write count) — the witness of a restored store."""
        self.store: Any = store or Store()
        """The in-memory model, or (tests/integration/test_delivery_sim_redis.py) the real
        ``ArtefactStore`` on Redis behind the same methods."""
        self.published: list[Outbound] = []
        self.fault_rate = swarm.fault_rate
        self.clock = 0
        """Fetch responses so far (one per action): the stream clock's time source."""
        self.stream_time = False
        """Expiry by the stream clock rather than every open run timing out at each expiry."""
        self.timeout_s = math.inf
        self.arrived: dict[int, int] | None = None
        """Records produced so far per partition (``None``: the whole log is there from the start)."""
        self.late_membership = 0.0
        """How often a zombie's membership question is answered as if the group had not moved on yet."""
        self.late_assignment = False
        """The rebalance listener reports a worker's assignment only after a few moments (it reads
        the committed offsets first), while the consumer already hands over polls."""
        self.workers = 0
        self.trace: list[str] = []
        """What happened, one line per step: a seed's trace (``RW_SIM_SEED=n`` reruns it alone)."""

    def log(self, worker: Worker, *what: Any) -> None:
        self.trace.append(f"{self.clock} {worker.name} " + " ".join(map(str, what)))

    def send(self, outputs: list[Outbound], rng: random.Random, faulty: bool) -> None:
        if faulty and outputs and rng.random() < self.fault_rate:
            self.published += outputs[: rng.randrange(len(outputs))]  # acknowledged before the failure
            raise Fault("send failed")
        self.published += outputs

    def redis(self, write: Any, rng: random.Random, faulty: bool) -> None:
        if faulty and rng.random() < self.fault_rate:
            if rng.random() < 0.5:
                write()  # done, but the reply was lost
            raise Fault("write failed")
        write()

    def end(self, partition: int) -> int:
        """The partition's log end as a consumer sees it now."""
        return len(self.logs[partition]) if self.arrived is None else self.arrived[partition]

    def produce(self, rng: random.Random) -> None:
        """The ingress goes on: a few more records become visible."""
        if self.arrived is not None:
            for p, log in self.logs.items():
                if rng.random() < 0.3:
                    self.arrived[p] = min(len(log), self.arrived[p] + rng.randint(1, 3))

    def done(self) -> bool:
        return all(self.committed[p] == len(log) for p, log in self.logs.items())


# -- the simulation ----------------------------------------------------------------------


@dataclass
class Outcome:
    published: list[Outbound]
    actions: int
    trace: list[str]
    open_after: list[str] = field(default_factory=list)
    """Runs the store still holds open once every owned run should have ended (``every_run_ends``)."""


def simulate(
    scenario: Scenario, rng: random.Random, *, faults: bool, timeouts: bool = False, stream_time: bool = False,
    zombies: bool = False, rollback: bool = False, paused: float = 0.5, owner_expires: bool = True, live: bool = False,
    late_membership: float = 0.0, every_run_ends: bool = False, store: Any = None, late_assignment: bool = False,
) -> Outcome:
    """Run the protocol until every partition is committed to its end; returns what was
    published, how many actions it took and the trace.

    ``timeouts``: the machine expires runs — by the stream clock with ``stream_time`` (fed as the
    adapter feeds it), else every open run at each expiry (timeout 0). ``zombies``: the owner
    sometimes freezes and the group gives its partitions to a fresh worker without telling it;
    the zombie goes on acting now and then (fetching from its old position, writing, sending,
    expiring) with its commits refused, until it rejoins. A zombie that was paused (with
    probability ``paused``) notices its stall by its own clock and drops its runs first; one cut
    off from the group's coordinator without a pause does not. ``owner_expires=False``: only
    zombies expire. ``live``: the records arrive over time. ``rollback``: copies of the store are
    taken now and then, and once it is put back to one. ``late_membership``: how often a
    zombie's membership question (before an expiry) is answered yes — so its expiry goes ahead
    and only the fence stands between it and the new owner. ``every_run_ends``: once the log is
    consumed, the owner goes on (stream time passing) until every run it owns has ended; the
    runs the store still holds open then are returned (the invariant: none). ``late_assignment``:
    each worker's assignment is reported a few moments late, polls, failures and rewinds
    going on meanwhile (the adapter's listener reads the committed offsets first)."""
    swarm = Swarm.draw(rng, faults)
    world = World(scenario.logs, swarm, store)
    world.late_membership = late_membership
    world.late_assignment = late_assignment
    world.stream_time = stream_time
    if timeouts:
        world.timeout_s = 3.0 if stream_time else 0.0
    if live:
        world.arrived = {p: 0 for p in scenario.logs}
    normalizers = [Normalizer(limits=scenario.limits, translators=_translators), Normalizer(limits=scenario.limits, translators=_translators)]
    owner = 0
    expiring = world.timeout_s
    world.timeout_s = expiring if owner_expires else math.inf
    worker = Worker(world, normalizers[owner])
    frozen: list[tuple[Worker, bool]] = []
    backups: list[Store] = []
    actions = 0
    bound = swarm.calm_after + 8000
    while not world.done() or not worker.machine.settled:
        actions += 1
        world.clock += 1
        world.produce(rng)
        assert actions < bound, "a partition is wedged: no progress"
        faulty = faults and actions < swarm.calm_after
        worker.observe()
        if owner_expires and not stream_time:  # "every open run times out" decides at moments, during the faults (a model: a real
            # timeout never fires while the run's records are in the log, which a zombie may still be stepping)
            worker.machine.timeout_s = expiring if faulty and rng.random() < 0.16 else math.inf
        worker.tick()
        if worker.unreported and rng.random() < 0.03:
            worker.report_assignment()
        if frozen and rng.random() < 0.3:
            i = rng.randrange(len(frozen))
            _zombie_acts(world, frozen, i, rng, expiring)
            continue
        roll = rng.random()
        if faulty and (roll := roll - swarm.crash) < 0:  # crash between any two actions: what was outstanding never happens
            normalizers[owner] = Normalizer(limits=scenario.limits, translators=_translators)
            worker = Worker(world, normalizers[owner])
        elif faulty and (roll := roll - swarm.rebalance) < 0:  # a rebalance: the partitions move to the other worker and back
            worker.revoke(rng)
            owner = 1 - owner
            worker = Worker(world, normalizers[owner])
        elif zombies and faulty and (roll := roll - swarm.zombie) < 0:  # the owner freezes; the group moves on without it
            worker.zombie = True
            frozen.append((worker, rng.random() < paused))
            normalizers[owner] = Normalizer(limits=scenario.limits, translators=_translators)
            worker = Worker(world, normalizers[owner])
        elif rollback and faulty and (roll := roll - swarm.backup) < 0:  # backups are taken; the store is restored from one, once
            if backups and rng.random() < 0.5:
                world.store = backups.pop(rng.randrange(len(backups))).copy()
                rollback = False
            else:
                backups.append(world.store.copy())
        elif faulty and (roll := roll - swarm.stall) < 0:  # the event loop stands still: the next tick comes late
            worker.tick(jump=2 * STALL_S)
        elif faulty and (roll := roll - swarm.shutdown) < 0:  # SIGTERM: what is in flight completes, the partitions go, a restart
            worker.take(worker.machine.close())
            worker.settle(rng)
            worker.revoke(rng)
            normalizers[owner] = Normalizer(limits=scenario.limits, translators=_translators)
            worker = Worker(world, normalizers[owner])
        elif worker.machine.accepting and roll < swarm.poll_bias:
            worker.poll(rng)
        elif worker.pending:
            worker.advance(rng, faulty)
        else:
            worker.poll(rng)
    open_after: list[str] = []
    if every_run_ends:
        for _ in range(int(4 * world.timeout_s + 40 * (1 + swarm.expiry_every))):
            world.clock += 1
            worker.observe()
            worker.tick()
            worker.poll(rng)  # what a rewind left to redeliver (a commit that landed though reported failed)
            while worker.pending:
                worker.advance(rng, faulty=False)
        open_after = sorted(run.run_id for run in world.store.journals if run not in world.store.ended)
    worker.take(worker.machine.close())  # the end: shutdown, what is in flight completes
    worker.settle(rng)
    return Outcome(world.published, actions, world.trace, open_after)


def _zombie_acts(world: World, frozen: list[tuple[Worker, bool]], i: int, rng: random.Random, timeout_s: float) -> None:
    """One action of a worker that lost its partitions without being told (see :func:`simulate`)."""
    zombie, stalled = frozen[i]
    if stalled:  # its event loop stood still: its clock jumps, and its next tick is a stall
        frozen[i] = (zombie, False)
        zombie.tick(jump=2 * STALL_S)
        zombie.settle(rng)
    elif rng.random() < 0.08:  # it rejoins: its listener settles and drops everything; it is a standby now
        zombie.revoke(rng)
        frozen.pop(i)
    elif zombie.pending and rng.random() < 0.5:
        zombie.advance(rng, faulty=False)
    elif rng.random() < 0.3:
        zombie.observe()
        zombie.machine.timeout_s = timeout_s
        zombie.tick()
    else:
        zombie.poll(rng)


def _by_identity(published: list[Outbound]) -> tuple[dict[tuple[str, bytes | None, int], set[bytes]], set[Any], set[Any]]:
    events: dict[tuple[str, bytes | None, int], set[bytes]] = defaultdict(set)
    dlq, usage = set(), set()
    for out in published:
        if out.topic in (topics.EVENTS, topics.EVENTS_PUBLIC):
            events[(out.topic, out.key, int(out.header("rw-event-seq") or -1))].add(out.value)
        elif out.topic == topics.DLQ:
            dlq.add((out.key, out.value, tuple(out.headers)))
        else:  # timings are the wall clock's, not the input's: a run restored from its journal has none
            record = orjson.loads(out.value)
            usage.add((out.key, orjson.dumps({k: v for k, v in record.items() if not k.startswith("time_to_first")})))
    return events, dlq, usage


def _translators(grammar: Any, **kw: Any) -> Any:
    """The factory every simulated Normalizer is given: ``translator_for``, which the fixtures swap."""
    return translator_for(grammar, **kw)


@pytest.fixture
def stub_translators(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sys.modules[__name__], "translator_for", lambda grammar, **kw: StubTranslator(**kw))
    yield


@pytest.fixture
def exploding_translators(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real translators, with a bug on demand: feeding a value that contains ``BOOM`` raises."""
    real = translator_for

    def exploding(*args: Any, **kwargs: Any) -> Any:
        translator = real(*args, **kwargs)
        feed = translator.feed

        def feed_or_raise(raw: bytes, **kw: Any) -> Any:
            if BOOM in raw:
                raise ValueError("a translator bug")
            return feed(raw, **kw)

        return Replaced(translator, feed=feed_or_raise)

    monkeypatch.setattr(sys.modules[__name__], "translator_for", exploding)
    yield


def _check(seed: int, *, stub: bool = True, late_assignment: bool = False) -> None:
    scenario = _scenario(random.Random(seed), stub=stub)
    reference = simulate(scenario, random.Random(seed), faults=False).published
    published = simulate(scenario, random.Random(seed + 1), faults=True, late_assignment=late_assignment).published
    ref_events, ref_dlq, ref_usage = _by_identity(reference)
    events, dlq, usage = _by_identity(published)
    clashes = {k: v for k, v in events.items() if len(v) > 1}
    assert not clashes, f"seed {seed}: different events share (run, rw-event-seq): {sorted(clashes)[:3]}"
    assert events == ref_events, f"seed {seed}: published events differ from the accepted input's"
    assert dlq == ref_dlq, f"seed {seed}: dead letters differ (lost: {len(ref_dlq - dlq)}, extra: {len(dlq - ref_dlq)})"
    assert usage == ref_usage, f"seed {seed}: usage records differ"
    for run_id in scenario.gapped:
        finished = [v for (topic, key, _), vs in ref_events.items() if key == run_id.encode() for v in vs if b'"RUN_FINISHED"' in v]
        assert not finished, f"seed {seed}: {run_id} is missing a record but finished"


def test_delivery_simulation_many_seeds(stub_translators: None) -> None:
    """Thousands of seeded runs of the protocol with faults at every step (``RW_SIM_SEEDS``),
    over stub translators (the protocol is what is under test here)."""
    for seed in seeds(SEEDS):
        _check(seed)


def test_delivery_simulation_with_assignments_reported_late_matches_the_reference(stub_translators: None) -> None:
    """The rebalance listener reports an assignment only once it has read the committed offsets,
    while the consumer already hands over polls: a poll fails and is rewound before the machine
    hears of the assignment, and records fetched before the seek must still be stale (a run met
    past its first records would end ``sequence_gap``, its first records skipped)."""
    for seed in seeds(SEEDS):
        _check(seed, late_assignment=True)


def test_delivery_simulation_with_the_real_translators(exploding_translators: None) -> None:
    """Fewer seeds over the sample streams and the real translators (slower per record)."""
    for seed in seeds(REAL_SEEDS):
        _check(seed, stub=False)


def _in_pure_python(request: pytest.FixtureRequest) -> bool:
    """Run this test again in a fresh interpreter on the pure-Python core when this one runs the
    compiled core (and say whether it did): a test that replaces a method of ``Normalizer`` or
    ``DeliveryMachine`` on the class is not seen by compiled callers, which call it directly."""
    if native.status() != "compiled":
        return False
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid], cwd=root,
                         env={**os.environ, "RW_NATIVE": "off"}, capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"on the pure-Python core:\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
    return True


def test_the_simulation_can_fail_a_core_that_reuses_numbers(monkeypatch: pytest.MonkeyPatch, stub_translators: None, request: pytest.FixtureRequest) -> None:
    """The simulation is a real check: the old stale-run rule (restore from the journal whenever
    a record skips ahead, keeping nothing) makes it find different events under one number."""
    if _in_pure_python(request):
        return

    def old_restore(self: Normalizer, item: Any, journal: Any, *, ended: Any, **_: Any) -> None:
        where = core.Ended.parse(ended)
        self._runs.pop(item.run, None)
        if where is not None:
            self._mark_ended(item.run, where)
            return
        state = self._new_state(item)
        for entry in sorted(journal, key=lambda e: e.seq):
            if entry.seq >= item.envelope.seq:
                break
            self._apply(state, state.translator.feed(entry.value, sse_event=entry.sse_event), Step(), None, emit=False)
            state.next_seq = entry.seq + 1
            state.digests.append(core._digest(entry.value, entry.sse_event))
        self._runs[item.run] = state

    def old_accept(self: Normalizer, item: Any, now: float) -> Step:
        state = self._runs.get(item.run)
        if state is not None and item.envelope.seq > state.next_seq:
            state.next_seq = item.envelope.seq  # main's rule: warn and go on
        return real_accept(self, item, now)

    real_accept = Normalizer.accept
    monkeypatch.setattr(Normalizer, "restore", old_restore)
    monkeypatch.setattr(Normalizer, "accept", old_accept)
    for seed in range(200):
        try:
            _check(seed)
        except AssertionError:
            return
    pytest.fail("200 seeds and the old rule was never caught")


def test_delivery_simulation_with_timeouts_never_reuses_numbers(stub_translators: None) -> None:
    """Inactivity timeouts depend on the clock, so the outcome is not the reference's; what must
    still hold: no two different events share (run, rw-event-seq), nothing follows a run's
    terminal event, and no partition is wedged."""
    for seed in seeds(SEEDS // 5):
        scenario = _scenario(random.Random(seed))
        published = simulate(scenario, random.Random(seed + 7), faults=True, timeouts=True).published
        events, _, _ = _by_identity(published)
        clashes = {k: v for k, v in events.items() if len(v) > 1}
        assert not clashes, f"seed {seed}: different events share (run, rw-event-seq): {sorted(clashes)[:3]}"
        ends: dict[tuple[str, bytes | None], int] = {}
        for (topic, key, seq), values in events.items():
            if any(b'"RUN_FINISHED"' in v or b'"RUN_ERROR"' in v for v in values):
                ends[(topic, key)] = min(seq, ends.get((topic, key), seq))
        after = [(t, k, q) for (t, k, q) in events if (t, k) in ends and q > ends[(t, k)]]
        assert not after, f"seed {seed}: events after a run's terminal event: {after[:3]}"


# -- pauses, zombies, store rollback ---------------------------------------------


def _invariants(seed: int, published: list[Outbound]) -> None:
    """What holds whatever the clock decided: no two different events share (run, rw-event-seq),
    and nothing follows a run's terminal event (so a run ends once)."""
    events, _, _ = _by_identity(published)
    clashes = {k: v for k, v in events.items() if len(v) > 1}
    assert not clashes, f"seed {seed}: different events share (run, rw-event-seq): {sorted(clashes)[:3]}"
    ends: dict[tuple[str, bytes | None], int] = {}
    for (topic, key, seq), values in events.items():
        if any(b'"RUN_FINISHED"' in v or b'"RUN_ERROR"' in v for v in values):
            ends[(topic, key)] = min(seq, ends.get((topic, key), seq))
    after = [(t, k, q) for (t, k, q) in events if (t, k) in ends and q > ends[(t, k)]]
    assert not after, f"seed {seed}: events after a run's terminal event: {after[:3]}"


def _check_against_reference(seed: int, **kind: Any) -> None:
    """The faulty run publishes exactly what the fault-free reference does (identical copies aside)."""
    scenario = _scenario(random.Random(seed))
    reference = simulate(scenario, random.Random(seed), faults=False).published
    published = simulate(scenario, random.Random(seed + 1), faults=True, **kind).published
    _invariants(seed, published)
    ref_events, ref_dlq, ref_usage = _by_identity(reference)
    events, dlq, usage = _by_identity(published)
    assert events == ref_events, f"seed {seed}: published events differ from the accepted input's"
    assert dlq == ref_dlq, f"seed {seed}: dead letters differ (lost: {len(ref_dlq - dlq)}, extra: {len(dlq - ref_dlq)})"
    assert usage == ref_usage, f"seed {seed}: usage records differ"


def test_delivery_simulation_with_zombies_matches_the_reference(stub_translators: None) -> None:
    """Item 2: owners freeze and the group moves on without telling them; the zombies go on
    fetching, writing and sending (their commits refused) — paused ones drop their runs first
    (the stall rule), cut-off ones do not. What they send is derived from records and journals,
    so the outcome is still exactly the reference's: the fence refuses every stale write."""
    for seed in seeds(SEEDS // 5):
        _check_against_reference(seed, zombies=True)


def test_delivery_simulation_of_live_traffic_with_zombies_matches_the_reference(stub_translators: None) -> None:
    """Records arrive while the workers consume (``live``): most runs are met at their first
    record past the log end, and presumed new — stepped from an empty journal without reading it
   . Crashes, rebalances and zombies that go on writing: the fence on the run's
    first write stands in for the read, and the outcome is still exactly the reference's."""
    for seed in seeds(SEEDS // 5):
        _check_against_reference(seed, zombies=True, live=True)


def test_delivery_simulation_of_live_traffic_with_timeouts_and_zombies_never_reuses_numbers(stub_translators: None) -> None:
    """Live traffic, runs presumed new, expiry decided at any moment by the owner and by zombies
    (paused or cut off; some asked about their membership a moment before the group moved on):
    one number never carries two events and a run ends once. A zombie cut off from the
    coordinator before its first commit must not expire runs without asking (it has no offsets
    to ask with) while the new owner sends a continuing run's outputs: that published a
    ``RUN_ERROR`` and a ``TEXT_MESSAGE_CONTENT`` under one number."""
    for seed in seeds(SEEDS // 5):
        scenario = _scenario(random.Random(seed))
        published = simulate(
            scenario, random.Random(seed + 11), faults=True, timeouts=True, zombies=True, live=True, paused=0.25, late_membership=0.3
        ).published
        _invariants(seed, published)


def test_delivery_simulation_expiring_by_stream_time_matches_the_reference(stub_translators: None) -> None:
    """Item 1: expiry ticks all along, by the stream clock fed as the adapter feeds it. Every run
    in the log has its records there, so a worker that lags, crashes, rewinds or is a paused
    zombie must never expire one: the outcome is the reference's (no ``inactivity_timeout``)."""
    for seed in seeds(SEEDS // 5):
        _check_against_reference(seed, timeouts=True, stream_time=True, zombies=True)


def test_delivery_simulation_with_timeouts_and_paused_zombies_never_reuses_numbers(stub_translators: None) -> None:
    """Expiry decided at any moment (every open run times out), by the owner and by paused
    zombies: a decision is journaled under the fence before its ``RUN_ERROR`` is sent, so one
    number never carries two events and a run ends once."""
    for seed in seeds(SEEDS // 5):
        scenario = _scenario(random.Random(seed))
        published = simulate(scenario, random.Random(seed + 7), faults=True, timeouts=True, zombies=True).published
        _invariants(seed, published)


def test_delivery_simulation_with_store_rollback_never_reuses_numbers(stub_translators: None) -> None:
    """Item 4: backups are taken and the store is put back to one of them (its epoch id kept).
    The write count against the witness catches it before any run is resumed from an old journal;
    runs whose journal lost entries are refused (``store_lost``), never renumbered.

    Known limit, kept out of this test (``orderly``): the store cannot tell what it forgot. A run
    ended ``sequence_gap`` by records that came out of order, whose missing record arrives after
    the rollback erased that decision, or a conflicting copy of a record the old journal does not
    hold yet, is taken for new input and numbered on from the old journal (docs/reliability.md).
    Ordinary traffic (in order, identical redeliveries) is never renumbered."""
    for seed in seeds(SEEDS // 5):
        scenario = _scenario(random.Random(seed), orderly=True)
        published = simulate(scenario, random.Random(seed + 3), faults=True, rollback=True).published
        _invariants(seed, published)


def test_the_simulation_catches_a_store_without_the_fence_or_the_witness(monkeypatch: pytest.MonkeyPatch, stub_translators: None) -> None:
    """The new scenarios are real checks. Without the fence, zombies cut off from the group (no
    pause) that expire runs while producers go on sending reuse numbers; without the witness, a
    restored store renumbers runs. With both, no seed breaks: the race the fence alone left open
    — a zombie's ``RUN_ERROR`` winning the fence a moment after the owner restored the run, the
    owner's outputs of the next record already sent — is closed by the machine holding a restored
    run's outputs until its first write is accepted (found by this test with the old
    model, 1 seed in 200)."""

    def caught(**kind: Any) -> int:
        found = 0
        for seed in range(300):
            try:
                _invariants(seed, simulate(_scenario(random.Random(seed)), random.Random(seed + 7), faults=True, **kind).published)
            except AssertionError:
                found += 1
        return found

    zombies_expiring = {"timeouts": True, "owner_expires": False, "zombies": True, "paused": 0.0, "live": True, "late_membership": 1.0}
    with_fence = caught(**zombies_expiring)
    monkeypatch.setattr(sys.modules[__name__], "fence_accepts", lambda current, expected, new, ended: True)
    without = caught(**zombies_expiring)
    assert with_fence == 0, f"{with_fence} seeds broke an invariant with the fence"
    assert without >= 2, f"the fence made no difference ({without} seeds broke without it)"
    monkeypatch.undo()
    monkeypatch.setattr(sys.modules[__name__], "translator_for", lambda grammar, **kw: StubTranslator(**kw))
    monkeypatch.setattr(Witness, "rolled_back", lambda self, epoch, count: False)
    assert caught(rollback=True), "200 seeds and a store restored from a copy was never caught"


# -- every run ends; a seed replays; the paths the simulation reaches ------------------------------


def test_every_owned_run_ends_across_stalls_crashes_and_moves(stub_translators: None) -> None:
    """Producers vanish mid-run (no next record, no end record) while the owner stalls, crashes,
    is restarted or its partitions move: once the log is consumed and stream time passes, every
    run the store holds open has ended (``RUN_ERROR inactivity_timeout``, journaled, its ended
    marker written) — the runs dropped by a stall, a rewind or a move are taken up again from the
    index of open runs. And still no number carries two events, no run ends twice."""
    for seed in seeds(SEEDS // 5):
        outcome = simulate(_scenario(random.Random(seed), vanish=True), random.Random(seed + 13), faults=True, timeouts=True, stream_time=True,
                           every_run_ends=True)
        _invariants(seed, outcome.published)
        assert not outcome.open_after, f"seed {seed} (rerun: RW_SIM_SEED={seed}): runs never ended: {outcome.open_after}"


def test_every_owned_run_ends_with_zombies_about(stub_translators: None) -> None:
    """The same with owners that freeze while the group moves on (their copies fenced off)."""
    for seed in seeds(SEEDS // 10):
        outcome = simulate(_scenario(random.Random(seed), vanish=True), random.Random(seed + 17), faults=True, timeouts=True, stream_time=True,
                           zombies=True, every_run_ends=True)
        _invariants(seed, outcome.published)
        assert not outcome.open_after, f"seed {seed} (rerun: RW_SIM_SEED={seed}): runs never ended: {outcome.open_after}"


def test_a_seed_rerun_alone_reproduces_its_trace(stub_translators: None) -> None:
    """What ``RW_SIM_SEED=n`` promises: the simulation is a function of its seed — the same
    schedule, faults and answers, step for step (no clock, no unseeded randomness anywhere in
    the machine or the simulation)."""
    for seed in seeds(20):
        scenario = _scenario(random.Random(seed), vanish=True)
        first = simulate(scenario, random.Random(seed + 5), faults=True, timeouts=True, stream_time=True, zombies=True, live=True)
        again = simulate(_scenario(random.Random(seed), vanish=True), random.Random(seed + 5), faults=True, timeouts=True, stream_time=True,
                         zombies=True, live=True)
        assert first.trace == again.trace and len(first.trace) > 10, f"seed {seed}: the rerun's trace differs"
        assert [(o.key, o.value) for o in first.published] == [(o.key, o.value) for o in again.published]


PATHS = ("assigned", "stale record dropped", "idle probe", "close with work in flight", "stall noticed by the clock", "adopted", "store recovered")


def reach(count: int) -> dict[str, int]:
    """Run ``count`` seeds of every kind of simulation (stub translators) and count how often the
    machine took each of :data:`PATHS` (``python -m tests.unit.test_delivery_sim``, under coverage)."""
    globals()["translator_for"] = lambda grammar, **kw: StubTranslator(**kw)
    reached: dict[str, int] = dict.fromkeys(PATHS, 0)

    def counting(name: str, method: Any, hit: Any) -> None:
        def wrapper(self: DeliveryMachine, *args: Any, **kw: Any) -> Any:
            result = method(self, *args, **kw)
            if hit(self, args, result):
                reached[name] += 1
            return result

        setattr(DeliveryMachine, method.__name__, wrapper)

    counting("assigned", DeliveryMachine.assigned, lambda self, args, out: bool(args[0]))
    counting("stale record dropped", DeliveryMachine._fresh, lambda self, args, out: len(out) < len(args[0]))
    counting("idle probe", DeliveryMachine._probe_when_idle, lambda self, args, out: bool(out))
    counting("close with work in flight", DeliveryMachine.close, lambda self, args, out: bool(self._flights))
    counting("stall noticed by the clock", DeliveryMachine._settle_deferred, lambda self, args, out: any(getattr(a, "why", "") == "stall" for a in out))
    counting("adopted", DeliveryMachine._adopt, lambda self, args, out: bool(out))
    counting("store recovered", DeliveryMachine._finish_rewind, lambda self, args, out: _recovered(out))
    for seed in range(count):
        _check(seed)
        simulate(_scenario(random.Random(seed), vanish=True), random.Random(seed + 13), faults=True, timeouts=True, stream_time=True,
                 zombies=True, live=seed % 2 == 0, rollback=seed % 3 == 0, every_run_ends=seed % 4 == 0)
        simulate(_scenario(random.Random(seed), orderly=True), random.Random(seed + 3), faults=True, rollback=True)
    return reached


def _recovered(out: list[Any]) -> bool:
    """A rewind that recovered the store (its answer drops every run, why ``store_lost``)."""
    return any(getattr(a, "why", "") == "store_lost" for a in out)


def test_the_simulation_reaches_the_machines_decisions(tmp_path: Path) -> None:
    """The paths a fault simulation must reach to be worth trusting, counted as the machine takes
    them — an assignment, a record dropped as stale after a rewind, the idle probe, a shutdown
    with work in flight, a stall noticed by the clock, an adoption, a store recovered — and the
    machine's branch coverage over the simulation (``coverage``, in a fresh interpreter so the
    module's own lines count), printed and held above a floor."""
    pytest.importorskip("coverage")
    source = "workers/core/delivery_machine.py"
    root = Path(__file__).resolve().parents[2]
    # on the pure-Python core (RW_NATIVE=off): coverage sees no compiled lines, and the counting
    # wraps the machine's methods, which its compiled callers would call past the wrapper
    env = {**os.environ, "COVERAGE_FILE": str(tmp_path / "coverage"), "RW_SIM_REACH": str(max(40, SEEDS // 10)), "RW_NATIVE": "off"}
    run = subprocess.run([sys.executable, "-m", "coverage", "run", "--branch", f"--include=*/{source}", "-m", "tests.unit.test_delivery_sim"],
                         cwd=root, env=env, capture_output=True, text=True, check=True)
    reached = orjson.loads(run.stdout.strip().splitlines()[-1])
    report = subprocess.run([sys.executable, "-m", "coverage", "report", "--show-missing"], cwd=root, env=env, capture_output=True, text=True, check=True)
    percent = float(report.stdout.strip().splitlines()[-1].split()[-1].rstrip("%"))
    print(f"\ndelivery machine over the simulation: {reached}\n{report.stdout}")
    missing = [name for name in PATHS if not reached[name]]
    assert not missing, f"the simulation never reached: {missing}"
    assert percent >= 90, f"branch coverage of the delivery machine {percent:.0f} %"


if __name__ == "__main__":  # under coverage, for the test above
    print(orjson.dumps(reach(int(os.environ.get("RW_SIM_REACH", "40")))).decode())
