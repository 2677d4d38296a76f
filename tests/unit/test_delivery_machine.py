"""The delivery state machine's rules one by one, without I/O: each test feeds it what
happened and reads what it says to do. The seeded fault simulation (test_delivery_sim.py)
drives the same class through thousands of schedules; these pin the individual decisions."""

from __future__ import annotations

import random
from typing import Any

from tests.conformance.oracle import LOCAL_FIXTURES
from reasonwire.workers.core.actions import (
    Acknowledged, Adopted, BackedOff, Close, Commit, FailureKind, Forgot, Probe, ReadJournals, ReadOpenRuns, RecoverStore, Recovered, Retired, Seek,
    Send, Stepped, Write,
)
from reasonwire.workers.core.backoff import Backoff
import pytest

from reasonwire.workers.core.delivery_machine import FLIGHT_MOVES, DeliveryMachine, InvariantBroken, Stage, TransitionError, _move
from reasonwire.workers.core.fence import STALL_S
from reasonwire.workers.core.normalizer import ENVELOPE_SEQ, HEAD_SEQ, JournalEntry, Normalizer, RawRecord
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import translator_for

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl"


def _records(run_id: str, partition: int = 0, first_offset: int = 0) -> list[RawRecord]:
    run = RunEnvelope("openai-responses", run_id, f"thread-{run_id}")
    with FIXTURE.open() as f:
        return [RawRecord(r.key, r.value, tuple(r.headers), partition, first_offset + i) for i, r in enumerate(raw_records(run, read_events(f)))]


TAKEN_OVER = 10_000
"""A log end past every record of a fixture: what a worker reads when it takes a partition over
whose records a previous owner may have published — a run met there is read, not presumed new."""


def _of(actions: list[Any], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def _machine(**kw: Any) -> DeliveryMachine:
    normalizer = Normalizer(translators=translator_for)
    normalizer.token = "me"
    kw.setdefault("timeout_s", 1.0)
    return DeliveryMachine(normalizer, backoff=Backoff(0.1, 5.0, rng=random.Random(0)), check_invariants=True, **kw)


def _silence(machine: DeliveryMachine, seconds: int = 3) -> list[Any]:
    """Stream time passes: every partition caught up, a fetch response each second, and the
    machine's clock ticks each second (its first tick starts the healthy time)."""
    out: list[Any] = []
    for _ in range(seconds):
        now = machine.now + 1.0
        for partition in (0, 1):
            machine.observe(partition, high=machine.normalizer.stepped_to(partition), fetched_at=now)
        out += machine.tick(now)
    return out


def _complete(machine: DeliveryMachine, actions: list[Any]) -> list[Any]:
    """Perform every I/O action successfully until none is left; every answer, in order."""
    seen: list[Any] = []
    while io := [a for a in actions if not isinstance(a, (Stepped, Acknowledged, Retired, Forgot, Seek, Adopted, BackedOff, Recovered))]:
        seen += actions
        actions = []
        for action in io:
            if isinstance(action, ReadJournals):
                actions += machine.journals_read(action, {run: ([], False) for run in action.runs}, doubtful=False)
            elif isinstance(action, ReadOpenRuns):
                actions += machine.open_runs_read(action, {})
            else:
                actions += machine.done(action)
    return seen + actions


def _fence_refuses(machine: DeliveryMachine, actions: list[Any]) -> list[Any]:
    """The poll's write refused by the fence (another worker wrote for its run since), its early
    sends acknowledged: what the machine answers."""
    [write] = _of(actions, Write)
    after = machine.failed(write, FailureKind.MOVED, [write.steps[0].run])
    for send in _of(actions, Send):
        after += machine.done(send)
    return after


def _held(machine: DeliveryMachine, records: list[RawRecord]) -> None:
    """Poll ``records`` and complete every action, so the run is held and confirmed."""
    pending = machine.poll(records, {}, now=0.0)
    while True:
        io = [a for a in pending if not isinstance(a, (Stepped, Acknowledged, Retired, Forgot, Seek))]
        if not io:
            return
        pending = []
        for action in io:
            if isinstance(action, ReadJournals):
                pending += machine.journals_read(action, {run: ([], False) for run in action.runs}, doubtful=False)
            else:
                pending += machine.done(action)


def test_held_runs_are_sent_and_written_while_a_new_runs_journal_is_read_and_steps_keep_record_order() -> None:
    """A poll meeting a run it does not hold: the held run's outputs go out at once and its part
    of the flight is written at once — a run ending there would wait for that write only, not
    for another run's journal read; the new run's records wait for its journal
    and are written as the flight's next part; the flight's Steps keep record order."""
    machine = _machine()
    held, new = _records("held"), _records("new", partition=1)
    _held(machine, held[:3])
    actions = machine.poll([new[0], held[3], held[4]], {1: TAKEN_OVER}, now=0.0)
    [send] = _of(actions, Send)
    assert {o.key for o in send.outbound} == {b"held"} and not send.terminal
    [read] = _of(actions, ReadJournals)
    assert [r.run_id for r in read.runs] == ["new"]
    [first] = _of(actions, Write)
    assert [s.run.run_id for s in first.steps] == ["held", "held"] and first.part == 0
    assert not machine.accepting, "a poll waiting for a journal keeps the next one out (each run's order)"
    after = machine.journals_read(read, {read.runs[0]: ([], False)}, doubtful=False)
    [stepped] = _of(after, Stepped)
    assert stepped.complete
    [write] = _of(after, Write)
    assert [s.run.run_id for s in write.steps] == ["new"] and write.part == 1
    assert [s.run.run_id for s in machine.steps_of(read.flight)] == ["new", "held", "held"]


def test_a_runs_end_waits_for_its_own_parts_write_not_another_runs_journal_read() -> None:
    """"A terminal output waits only for its own run's artefacts": a held run
    that ends in a poll which also meets a new run gets its end out once its own part is
    written, while the new run's journal is still being read."""
    machine = _machine()
    held, new = _records("held"), _records("new", partition=1)
    end_at = 36  # response.completed (then the ingress's end-of-stream control record)
    _held(machine, held[:end_at])
    actions = machine.poll([new[0], held[end_at]], {1: TAKEN_OVER}, now=0.0)
    assert _of(actions, ReadJournals) and not _of(actions, Send), "the ending record's outputs are held for a write"
    [write] = _of(actions, Write)
    [end] = _of(machine.done(write), Send)
    assert end.terminal and {o.key for o in end.outbound} == {b"held"}
    assert any(b"RUN_FINISHED" in o.value for o in end.outbound)


def test_a_restored_runs_outputs_wait_for_its_first_accepted_write() -> None:
    """A run this worker restored from its journal is not proven current until the fence accepts
    its first write (a zombie may still be writing for it): its outputs follow that write."""
    machine = _machine()
    records = _records("r")
    actions = machine.poll(records[:3], {0: TAKEN_OVER}, now=0.0)
    [read] = _of(actions, ReadJournals)
    after = machine.journals_read(read, {read.runs[0]: ([], False)}, doubtful=False)
    assert not _of(after, Send), "nothing of a restored run goes out before its write"
    [write] = _of(after, Write)
    [send] = _of(machine.done(write), Send)
    assert send.terminal and all(o.key == b"r" for o in send.outbound)
    machine.done(send)
    # confirmed now: its next records' outputs go out while stepping
    assert _of(machine.poll(records[3:5], {}, now=0.0), Send)[0].terminal is False


def test_terminal_outputs_follow_their_own_write_and_markers_follow_acknowledgement() -> None:
    machine = _machine()
    records = _records("t")
    _held(machine, records[:2])
    actions = machine.poll(records[2:], {}, now=0.0)
    early = _of(actions, Send)
    [write] = _of(actions, Write)
    assert all(not any(b"RUN_FINISHED" in o.value for o in s.outbound) for s in early)
    after = machine.done(write)
    [terminal] = _of(after, Send)
    assert terminal.terminal and any(b"RUN_FINISHED" in o.value for o in terminal.outbound)
    assert not _of(after, Close), "the ended marker waits for every output's acknowledgement"
    for send in early:
        assert not _of(machine.done(send), Close)
    [close] = _of(machine.done(terminal), Close)
    [commit] = _of(machine.done(close), Commit)
    assert commit.offsets == {0: len(records)}
    [retired] = _of(machine.done(commit), Retired)
    assert retired.committed and machine.settled


def test_writes_of_disjoint_runs_do_not_wait_for_each_other_but_one_runs_do() -> None:
    """A flight's write waits only for earlier writes of its own runs."""
    machine = _machine(max_in_flight=4)
    a, b = _records("a"), _records("b", partition=1)
    _held(machine, a[:2])
    _held(machine, b[:2])
    [w1] = _of(machine.poll(a[2:3], {}, now=0.0), Write)
    [w2] = _of(machine.poll(b[2:3], {}, now=0.0), Write)  # disjoint: out at once
    assert not _of(machine.poll(a[3:4], {}, now=0.0), Write), "same run: waits for the earlier write"
    assert _of(machine.done(w1), Write)
    assert w2.flight != w1.flight


def test_commits_go_in_flight_order_one_at_a_time() -> None:
    machine = _machine(max_in_flight=4)
    a, b = _records("a"), _records("b", partition=1)
    _held(machine, a[:2])
    _held(machine, b[:2])
    first = machine.poll(a[2:3], {}, now=0.0)
    second = machine.poll(b[2:3], {}, now=0.0)
    later = []
    for action in _of(second, Write) + _of(second, Send):
        later += machine.done(action)
    assert not _of(later, Commit), "a later flight is not committed before an earlier one"
    done: list[Any] = []
    for action in _of(first, Write) + _of(first, Send):
        done += machine.done(action)
    [commit] = _of(done, Commit)
    assert dict(commit.offsets) == {0: 3, 1: 3}  # both flights, one commit


def test_a_failure_rewinds_every_partition_in_flight_once_nothing_is_out() -> None:
    machine = _machine()
    records = _records("f")
    _held(machine, records[:2])
    actions = machine.poll(records[2:4], {}, now=0.0)
    [write] = _of(actions, Write)
    [send] = _of(actions, Send)
    [backed_off] = machine.failed(write, FailureKind.OUTAGE)  # the send is still out: nothing yet but the backoff
    assert isinstance(backed_off, BackedOff) and machine.retry_at == backed_off.retry_at > machine.now
    after = machine.done(send)
    [retired] = _of(after, Retired)
    [seek] = _of(after, Seek)
    assert not retired.committed and dict(seek.offsets) == {0: 2}
    assert machine.normalizer.open_runs == 0, "the partition's runs are restored from their journals"
    # records fetched before the seek are stale; the redelivery starts at the seek's offset
    assert machine.poll(records[4:5], {}, now=0.0) == []


def test_after_a_redis_failure_a_poll_is_stepped_only_once_a_probe_goes_through() -> None:
    """During a Redis OOM every retried poll sent its continuing runs' outputs again (1,632 copies)."""
    machine = _machine()
    records = _records("p")
    _held(machine, records[:2])
    actions = machine.poll(records[2:3], {}, now=0.0)
    machine.failed(_of(actions, Write)[0], FailureKind.OUTAGE)
    assert not machine.accepting
    for send in _of(actions, Send):
        machine.done(send)
    assert machine.accepting
    [probe] = machine.poll(records[2:4], {}, now=0.0)
    assert isinstance(probe, Probe) and machine.normalizer.open_runs == 0
    refused = machine.failed(probe, FailureKind.OUTAGE)
    assert _of(refused, Seek) and not _of(refused, Send)
    [probe] = machine.poll(records[2:4], {}, now=0.0)
    assert _of(machine.done(probe), ReadJournals)  # stepped now (the run is restored first)


def test_the_fence_refusing_a_write_drops_those_runs_and_redoes_the_poll() -> None:
    machine = _machine()
    records = _records("m")
    _held(machine, records[:2])
    actions = machine.poll(records[2:3], {}, now=0.0)
    after = _fence_refuses(machine, actions)
    assert _of(after, Seek) and any(isinstance(a, Forgot) and a.why == "moved" for a in after)
    assert not _of(after, Send), "nothing of a moved run is sent after the refusal"


def test_a_store_loss_recovers_the_store_and_drops_every_run_before_anything_else() -> None:
    machine = _machine()
    a, b = _records("a"), _records("b", partition=1)
    _held(machine, a[:2])
    _held(machine, b[:2])
    actions = machine.poll(a[2:3], {}, now=0.0)
    machine.failed(_of(actions, Write)[0], FailureKind.STORE_LOST)
    [recover] = machine.done(_of(actions, Send)[0])
    assert isinstance(recover, RecoverStore) and not machine.accepting
    after = machine.done(recover)
    assert any(isinstance(x, Forgot) and x.why == "store_lost" and x.runs == 2 for x in after)
    assert machine.normalizer.open_runs == 0


def test_an_expiry_asks_for_membership_first_and_is_sent_again_when_its_flight_failed() -> None:
    """No record brings an idle run back, so a failed
    expiry's Steps are sent again by the next tick — the same Steps; a record of the run, or its
    partition's revocation, drops them."""
    machine = _machine()
    records = _records("idle")
    _held(machine, records[:2])
    [member] = _of(_silence(machine), Commit)
    assert member.membership and dict(member.offsets) == {0: 2}
    actions = machine.done(member)
    [stepped] = _of(actions, Stepped)
    [write] = _of(actions, Write)
    assert not _of(actions, Send), "an expiry's RUN_ERROR follows its write"
    [step] = write.steps
    assert step.run_ended and any(b"inactivity_timeout" in o.value for o in step.outbound)
    assert _of(machine.failed(write, FailureKind.OUTAGE), BackedOff)
    idle = _silence(machine)
    assert not _of(idle, Commit), "no expiry until work went through again"
    [probe] = _of(idle, Probe)  # idle: the store is asked (the write was the store's)
    assert _of(machine.done(probe), Recovered)
    [again] = _of(_silence(machine), Commit)
    [write_again] = _of(machine.done(again), Write)
    assert list(write_again.steps) == [step]
    machine.failed(write_again, FailureKind.OUTAGE)
    machine.revoke([0])
    machine.done(_of(_silence(machine), Probe)[0])
    assert not _of(_silence(machine), Commit), "the revocation dropped the unsent expiry"


def test_no_expiry_is_decided_on_a_partition_this_worker_has_not_committed() -> None:
    """Without a commit of ours on a partition there is nothing to ask the group with, so the
    worker's membership is not proven there: its runs are not judged — nothing is decided or
    held back — until a commit lands (a worker cut off from the coordinator since it joined
    expired runs unasked; found by the live-traffic simulation, seed 88)."""
    machine = _machine()
    records = _records("idle")
    actions = machine.poll(records[:2], {0: 0}, now=0.0)
    assert not _of(_silence(machine), Commit)
    assert machine.normalizer.open_runs == 1, "the run is still open: nothing was decided"
    _complete(machine, actions)
    [member] = _of(_silence(machine), Commit)
    assert member.membership and dict(member.offsets) == {0: 2}


def test_a_refused_membership_holds_the_expiry_back() -> None:
    machine = _machine()
    _held(machine, _records("idle")[:2])
    [member] = _of(_silence(machine), Commit)
    after = machine.failed(member, FailureKind.OUTAGE)
    assert not _of(after, Write) and not machine.failing


def test_revocation_and_stall_wait_for_what_is_in_flight() -> None:
    machine = _machine()
    records = _records("s")
    _held(machine, records[:2])
    actions = machine.poll(records[2:3], {}, now=0.0)
    assert machine.revoke([0]) == [] and machine.revoking
    pending = _of(actions, Write) + _of(actions, Send)
    out: list[Any] = []
    while pending:
        out = machine.done(pending.pop())
        pending += [a for a in out if isinstance(a, (Write, Send, Close, Commit))]
    assert not machine.revoking and machine.normalizer.open_runs == 0
    machine2 = _machine()
    _held(machine2, records[:2])
    [forgot] = machine2.stall()
    assert isinstance(forgot, Forgot) and forgot.why == "stall" and forgot.runs == 1


def test_a_record_of_an_idle_run_drops_its_unsent_expiry() -> None:
    """The ingress was alive after all: the run is restored from its journal and goes on."""
    machine = _machine()
    records = _records("idle")
    _held(machine, records[:2])
    [member] = _of(_silence(machine), Commit)
    machine.failed(_of(machine.done(member), Write)[0], FailureKind.OUTAGE)
    [probe] = machine.poll(records[2:3], {}, now=0.0)  # after a Redis failure: a probe first
    assert machine.done(probe)
    assert machine._unsent_expiries == {}, "the expiry is not sent again"


def test_a_new_run_past_the_published_log_is_stepped_without_a_journal_read_and_held_for_its_write() -> None:
    """A run met at its first record past every offset that may have been published is presumed
    new: it is stepped at once — no journal read in front of it, and the next
    poll is not held behind one — and, like a restored run, its outputs follow its part's write,
    whose fence refuses it if anyone wrote for the run."""
    machine = _machine()
    held, new = _records("held"), _records("new", partition=1)
    _held(machine, held[:3])
    actions = machine.poll([new[0], new[1], held[3]], {1: 0}, now=0.0)
    assert not _of(actions, ReadJournals)
    assert machine.accepting, "stepped whole: the next poll may come"
    [early] = _of(actions, Send)
    assert {o.key for o in early.outbound} == {b"held"}, "only the confirmed run's outputs go out before the write"
    [write] = _of(actions, Write)
    assert [s.run.run_id for s in write.steps] == ["new", "new", "held"]
    [after] = _of(machine.done(write), Send)
    assert after.terminal and {o.key for o in after.outbound} == {b"new"}


def test_a_seq_zero_record_within_the_published_log_or_a_control_record_is_read_not_presumed_new() -> None:
    """Where a previous owner (or this worker, before a rewind) may have published, a run's first
    record may not be its first visit: its journal is read."""
    machine = _machine()
    records = _records("old")
    assert _of(machine.poll(records[:2], {0: 1}, now=0.0), ReadJournals), "offset 0 lies before the log end at first fetch"
    [end] = [RawRecord(r.key, r.value, tuple(r.headers), 0, 0) for r in raw_records(RunEnvelope("openai-responses", "ctl", "t"), [])]
    assert dict(end.headers)["rw-seq"] == b"0" and dict(end.headers)["rw-control"] == b"end"
    [read] = _of(_machine().poll([end], {0: 0}, now=0.0), ReadJournals)
    assert [r.run_id for r in read.runs] == ["ctl"], "a control record names a run that must exist: read it"


def test_a_run_presumed_new_that_the_fence_refuses_is_read_when_redone() -> None:
    """The fence refused the first write of a run presumed new (someone wrote its journal, or it
    ended): the poll is redone, and this time the run's journal is read — never presumed again."""
    machine = _machine()
    records = _records("z")
    actions = machine.poll(records[:3], {0: 0}, now=0.0)
    assert not _of(actions, ReadJournals)
    [write] = _of(actions, Write)
    after = machine.failed(write, FailureKind.MOVED, [write.steps[0].run])
    [seek] = _of(after, Seek)
    assert seek.offsets == {0: 0}
    assert any(isinstance(a, Forgot) and a.why == "moved" for a in after)
    assert not _of(after, Send), "nothing of the refused run went out"
    [read] = _of(machine.poll(records[:3], {}, now=0.0), ReadJournals)
    assert [r.run_id for r in read.runs] == ["z"]


def test_a_partition_assigned_again_is_not_held_to_a_rewind_its_seek_could_not_perform() -> None:
    """A rewind decided while the partition was not assigned (a poll fetched before a revocation
    and refused by the fence after it): the adapter cannot seek there, and once the partition
    comes back the consumer starts at the committed offset — its records must not be dropped as
    stale for ever (``make chaos`` zombie_worker wedged two partitions)."""
    machine = _machine()
    records = _records("w")
    _held(machine, records[:5])
    actions = machine.poll(records[5:8], {}, now=0.0)
    after = _fence_refuses(machine, actions)
    [seek] = _of(after, Seek)
    assert seek.offsets == {0: 5}
    committed_elsewhere = records[9:11]
    assert list(machine.fresh(committed_elsewhere)) == [], "before: stale until offset 5 comes again"
    machine.assigned({0: None})
    assert list(machine.fresh(committed_elsewhere)) == committed_elsewhere


def test_records_fetched_before_a_rewind_stay_stale_when_the_assignment_is_reported_after_it() -> None:
    """The adapter reports an assignment only once it has read the committed offsets, and polls
    go on meanwhile: a rewind's seek can come after the assignment it hears of later. Records
    fetched before that seek must stay stale, or a run met past its first records ends
    ``sequence_gap`` with a ``RUN_STARTED`` of its own (docs/reliability.md, at least once: the
    failed poll is redone, nothing lost) — the partition restarts at the rewind's offset or at
    the committed one, never past them."""
    machine = _machine()
    records = _records("late")
    [read] = _of(machine.poll(records[:5], {0: TAKEN_OVER}, now=0.0), ReadJournals)
    [write] = _of(machine.journals_read(read, {read.runs[0]: ([], False)}, doubtful=False), Write)
    [seek] = _of(machine.failed(write, FailureKind.OUTAGE), Seek)
    assert seek.offsets == {0: 0}
    machine.assigned({0: 0})  # the group's committed offset when the partition was assigned, read late
    fetched_before_the_seek = records[5:9]
    assert list(machine.fresh(fetched_before_the_seek)) == [], "stale: the run's first records would be skipped"
    redone = records[:9]
    assert list(machine.fresh(redone)) == redone
    seen = _complete(machine, machine.poll(redone, {}, now=machine.retry_at))
    events = [o for send in _of(seen, Send) for o in send.outbound if o.topic == "reasoning.events.v1"]
    assert [int(o.header("rw-event-seq") or -1) for o in events] == list(range(len(events)))
    assert b"RUN_STARTED" in events[0].value and not [o for o in events if b"sequence_gap" in o.value]


def test_a_rewound_partition_reported_assigned_restarts_at_its_committed_offset_too() -> None:
    """A partition whose seek the adapter could not perform comes back at the group's committed
    offset, which another owner may have moved past the rewind's: its records there are taken,
    and so are the rewind's own (whichever came last); none fetched before the seek."""
    machine = _machine()
    records = _records("moved")
    _held(machine, records[:5])
    after = _fence_refuses(machine, machine.poll(records[5:8], {}, now=0.0))
    [seek] = _of(after, Seek)
    assert seek.offsets == {0: 5}
    machine.assigned({0: 9})
    assert list(machine.fresh(records[6:9])) == [], "fetched before the seek: stale"
    assert list(machine.fresh(records[9:11])) == records[9:11]
    assert list(machine.fresh(records[11:12])) == records[11:12], "the mark is spent"


def test_an_assignment_reported_after_this_workers_commit_there_does_not_take_the_group_back() -> None:
    """The join commit commits the offset read when the assignment was reported: once this worker
    committed past it there (polls go on before the report), it would move the group's committed
    offset back — and at the end of traffic leave it there."""
    machine = _machine()
    _held(machine, _records("j")[:5])
    joined = machine.assigned({0: 0})
    assert not _of(joined, Commit), "committed here since: a member's commit, and a later one"
    assert _of(machine.assigned({1: 3}), Commit), "a partition not committed here still gets its join commit"


def test_a_poll_reads_only_the_journals_of_runs_it_does_not_hold() -> None:
    """Several records of one run in a poll: its journal is read once when the run is new here,
    and not at all while the worker holds it."""
    machine = _machine()
    records = _records("j")
    [read] = _of(machine.poll(records[:4], {0: TAKEN_OVER}, now=0.0), ReadJournals)
    assert [r.run_id for r in read.runs] == ["j"]
    actions = machine.journals_read(read, {read.runs[0]: ([], False)}, doubtful=False)
    while io := [a for a in actions if isinstance(a, (Write, Send, Close, Commit))]:
        actions = [x for a in io for x in machine.done(a)]
    assert not _of(machine.poll(records[4:9], {}, now=0.0), ReadJournals)


def test_an_idle_worker_probes_the_store_after_a_failure_no_record_will_redo() -> None:
    """An expiry's write failed and no traffic follows: the machine offers a probe of no flight
    (once at a time); when it goes through, the store is taken to write again."""
    machine = _machine()
    _held(machine, _records("idle")[:2])
    [member] = _of(_silence(machine), Commit)
    [write] = _of(machine.done(member), Write)
    [backed_off] = _of(machine.failed(write, FailureKind.OUTAGE), BackedOff)
    assert machine.settled and machine.probing_store and machine.degraded
    assert not _of(machine.tick(backed_off.retry_at - 0.01), Probe), "not before the backoff"
    [probe] = _of(machine.tick(backed_off.retry_at), Probe)
    assert probe.flight == 0 and not _of(_silence(machine), Probe), "one probe at a time"
    [again] = _of(machine.failed(probe, FailureKind.OUTAGE), BackedOff)
    assert not machine.failing and again.delay_s > 0
    [probe] = _of(machine.tick(again.retry_at), Probe)
    assert _of(machine.done(probe), Recovered) and not machine.degraded
    later = _silence(machine)
    assert not machine.probing_store and not _of(later, Probe)
    assert _of(later, Commit), "the held-back expiry goes out again"


# -- named states, the machine's clock, runs that no record brings back ----------------------------


def test_a_flight_moves_only_along_its_table_and_a_wrong_report_names_itself() -> None:
    """h11's habit: a move the table does not list is an error at once, naming the stage."""
    machine = _machine()
    records = _records("t")
    _held(machine, records[:2])
    actions = machine.poll(records[2:4], {}, now=0.0)
    [flight] = list(machine._flights)
    assert flight.stage is Stage.WRITING and Stage.COMMITTING not in FLIGHT_MOVES[flight.stage]
    with pytest.raises(TransitionError, match="writing → committing"):
        _move(flight, Stage.COMMITTING)
    with pytest.raises(TransitionError, match="Stepped"):
        machine.done(_of(actions, Stepped)[0])


def test_the_invariants_name_a_broken_rule() -> None:
    machine = _machine()
    _held(machine, _records("i")[:2])
    machine.invariants()
    machine._to_scan.add(7)
    with pytest.raises(InvariantBroken, match="not owned"):
        machine.invariants()


def test_a_gap_between_ticks_is_a_stall_the_held_runs_go_and_the_owned_partitions_are_scanned_again() -> None:
    """The machine's clock decides a stall (no reading of a clock anywhere in the core), and a
    stall no longer forgets runs for good: the owned partitions' open runs are read again."""
    machine = _machine()
    [scan] = _of(machine.assigned({0: None}), ReadOpenRuns)
    machine.open_runs_read(scan, {0: []})
    _held(machine, _records("s")[:3])
    assert not _of(machine.tick(10.0) + machine.tick(10.0 + STALL_S / 2), Forgot)
    after = machine.tick(10.0 + STALL_S / 2 + STALL_S)
    [forgot] = _of(after, Forgot)
    assert forgot.why == "stall" and forgot.runs == 1
    [again] = _of(after, ReadOpenRuns)
    assert again.partitions == (0,)


def _written_elsewhere(records: list[RawRecord], upto: int) -> tuple[list[JournalEntry], Any, int]:
    """A run whose first ``upto`` records another worker stepped, wrote and published before its
    producer vanished: (the journal as the store holds it, the run, events it published)."""
    other = _machine()
    seen = _complete(other, other.poll(records[:upto], {0: 0}, now=0.0))
    writes = _of(seen, Write)
    journal = [s.journal_append for w in writes for s in w.steps if s.journal_append is not None]
    [(run, (partition, envelope))] = [item for w in writes for item in (w.opened or {}).items()]
    assert partition == 0
    head = [s.fence for w in writes for s in w.steps if s.fence is not None][-1][1]
    published = sum(1 for send in _of(seen, Send) for o in send.outbound if o.topic == "reasoning.events.v1")
    return [*journal, JournalEntry(ENVELOPE_SEQ, envelope), JournalEntry(HEAD_SEQ, head.encode())], run, published


def test_a_run_whose_producer_vanished_is_adopted_on_assignment_and_ended_by_stream_time() -> None:
    """Every run this worker owns ends: a run met only in the store's index of open runs (its
    producer vanished, its previous owner gone) is restored from its journal and expired —
    numbered right after what was published — after a membership question with the group's
    committed offset."""
    records = _records("gone")
    journal, run, published = _written_elsewhere(records, 5)
    machine = _machine()
    joined = machine.assigned({0: 5})
    [scan] = _of(joined, ReadOpenRuns)
    [join] = _of(joined, Commit)
    assert not join.membership and dict(join.offsets) == {0: 5}, "a commit of this worker's while a member: what the expiry asks with"
    machine.done(join)
    [read] = _of(machine.open_runs_read(scan, {0: [run]}), ReadJournals)
    assert read.flight == 0 and read.runs == (run,)
    [adopted] = _of(machine.journals_read(read, {run: (journal, False)}, doubtful=False), Adopted)
    assert adopted.runs == 1 and machine.normalizer.open_runs == 1
    [member] = _of(_silence(machine), Commit)
    assert member.membership and dict(member.offsets) == {0: 5}
    [write] = _of(machine.done(member), Write)
    assert write.steps[0].fence is not None and write.steps[0].fence[0] == journal[-1].value.decode(), "the write expects the journal's head"
    [end] = _of(machine.done(write), Send)
    events = [o for o in end.outbound if o.topic == "reasoning.events.v1"]
    assert [int(o.header("rw-event-seq") or -1) for o in events] == list(range(published, published + len(events)))
    assert b"RUN_ERROR" in events[-1].value and b"inactivity_timeout" in events[-1].value


def test_a_record_of_an_adopted_run_restores_it_from_its_journal_as_any_record_does() -> None:
    """An adopted copy does not know which of its records come again (a rewind, a takeover):
    the first record of it drops the copy and reads the journal, never presumes the run new."""
    records = _records("back")
    journal, run, _ = _written_elsewhere(records, 5)
    machine = _machine()
    [scan] = _of(machine.assigned({0: 5}), ReadOpenRuns)
    [read] = _of(machine.open_runs_read(scan, {0: [run]}), ReadJournals)
    machine.journals_read(read, {run: (journal, False)}, doubtful=False)
    [again] = _of(machine.poll(records[5:7], {0: 5}, now=0.0), ReadJournals)
    assert again.flight != 0 and again.runs == (run,)
    after = machine.journals_read(again, {run: (journal, False)}, doubtful=False)
    assert not _of(after, Send), "restored: its outputs wait for its first accepted write"
    [write] = _of(after, Write)
    assert [s.journal_append.seq for s in write.steps if s.journal_append is not None] == [5, 6]


def test_no_expiry_until_a_whole_timeout_of_service_after_a_failure() -> None:
    """Silence while Redis (or the broker) was away is no evidence that the ingress vanished: a
    held run is expired only once the worker has served without a break for the whole timeout
    (the machine's gate now; the adapter only feeds the clock)."""
    machine = _machine(timeout_s=3.0)
    idle, busy = _records("idle", partition=1), _records("busy")
    _held(machine, idle[:2])
    _held(machine, busy[:2])
    actions = machine.poll(busy[2:3], {}, now=machine.now)
    assert _of(machine.failed(_of(actions, Write)[0], FailureKind.OUTAGE), BackedOff)
    _complete(machine, _of(actions, Send))
    out = _silence(machine, 5)
    assert not _of(out, Commit), "no success yet: no expiry"
    [probe] = _of(out, Probe)
    assert _of(machine.done(probe), Recovered)
    assert not _of(_silence(machine, 2), Commit), "back for less than a timeout"
    [member] = _of(_silence(machine, 2), Commit)
    assert dict(member.offsets) == {1: 2}


@pytest.mark.parametrize("phase", [0.0, 0.5, 1.0, 1.25])
def test_a_silent_run_is_expired_at_the_first_tick_it_is_due_not_up_to_an_interval_later(phase: float) -> None:
    """DESIGN: an inactivity timeout closes runs whose ingress vanished — within a tick of its
    due time, whatever the phase of the expiry interval the run fell silent in: the expiry
    judges again when the first run it left open is due (``EXPIRY_FINEST``), not only every
    ``expiry_every_s`` (which left a vanished producer's run open up to a whole interval
    longer: ``make chaos`` stall_vanished)."""
    machine = _machine(timeout_s=6.0, expiry_every_s=1.5)
    machine.normalizer.clock.step = 1.5  # the adapter's setting: credit per confirmation at most an interval
    tick = 0.25
    for _ in range(int((7.0 + phase) / tick)):  # served a whole timeout; the expiry's phase shifts with ``phase``
        now = machine.now + tick
        for partition in (0, 1):
            machine.observe(partition, high=machine.normalizer.stepped_to(partition), fetched_at=now)
        assert not _of(machine.tick(now), Commit)
    _held(machine, _records("idle")[:2])
    due = machine.normalizer.clock.seen(0) + 6.0  # the record counts from one interval on
    for _ in range(60):
        now = machine.now + tick
        for partition in (0, 1):
            machine.observe(partition, high=machine.normalizer.stepped_to(partition), fetched_at=now)
        members = _of(machine.tick(now), Commit)
        if members:
            break
    assert members and dict(members[0].offsets) == {0: 2}, "the silent run was never expired"
    assert due <= machine.normalizer.clock.at(0) < due + tick, "expired late (or early): more than a tick past its due time"


def test_consecutive_failures_back_off_exponentially_up_to_the_cap_and_a_success_resets() -> None:
    machine = _machine()
    _held(machine, _records("idle")[:2])
    [member] = _of(_silence(machine), Commit)
    [write] = _of(machine.done(member), Write)
    delays = [_of(machine.failed(write, FailureKind.OUTAGE), BackedOff)[0].delay_s]
    for _ in range(8):
        [probe] = _of(machine.tick(machine.retry_at), Probe)
        delays.append(_of(machine.failed(probe, FailureKind.OUTAGE), BackedOff)[0].delay_s)
    assert delays[0] <= 0.1 < delays[4] and max(delays) <= 5.0 and delays[-1] >= 2.5
    [probe] = _of(machine.tick(machine.retry_at), Probe)
    assert _of(machine.done(probe), Recovered) and machine.backoff.attempts == 0
