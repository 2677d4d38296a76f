"""The pure decisions of record accounting: every raw record is accounted for (processed, dead-lettered
with a code, or counted as a redelivery), ``rw-event-seq`` follows the accepted input only, and
one record's failure ends its own run and nothing else."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import Control
from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream
from reasonwire.workers.core import normalizer as core
from reasonwire.workers.core.delivery import DeadLetterCode, OutputLimits, fit_dead_letter, record_size
from reasonwire.workers.core.normalizer import DeadLetter, Ended, JournalEntry, Normalizer, RawRecord, RunInput, Step
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import translator_for
from tests.translator_faults import Replaced

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl"
RUN = RunEnvelope("openai-responses", "run-a", "thread-a", tenant="acme")


def _records(run: RunEnvelope = RUN) -> list[RawRecord]:
    with FIXTURE.open() as f:
        return [RawRecord(r.key, r.value, tuple(r.headers), 0, i) for i, r in enumerate(raw_records(run, read_events(f)))]


def _feed(n: Normalizer, records: list[RawRecord], journal: dict[int, JournalEntry] | None = None) -> list[Step]:
    """As the worker does it: route, restore a run it does not hold, accept."""
    steps = []
    for record in records:
        routed = n.route(record)
        if isinstance(routed, DeadLetter):
            steps.append(n.reject(routed))
            continue
        if n.needs_restore(routed):
            n.restore(routed, list((journal or {}).values()), ended=False)
        step = n.accept(routed, now=0.0)
        if journal is not None and step.journal_append is not None:
            journal[step.journal_append.seq] = step.journal_append
        steps.append(step)
    return steps


def _events(steps: list[Step], topic: str = topics.EVENTS) -> list[tuple[int, dict[str, Any]]]:
    return [(int(o.header("rw-event-seq") or -1), json.loads(o.value)) for s in steps for o in s.outbound if o.topic == topic]


def _dead(steps: list[Step]) -> list[tuple[str | None, bytes | None]]:
    return [(o.header("rw-dlq-code"), o.value) for s in steps for o in s.outbound if o.topic == topics.DLQ]


def test_a_gap_ends_the_run_sequence_gap_right_after_the_accepted_events() -> None:
    records = _records()
    whole = _events(_feed(Normalizer(translators=translator_for), records))
    k = 6
    steps = _feed(Normalizer(translators=translator_for), records[:k] + records[k + 1 :])
    events = _events(steps)
    before = [e for e in whole if e[0] < len(events) - 1]
    assert events[:-1] == before  # the numbers the accepted input gave, unchanged
    assert events[-1] == (len(events) - 1, events[-1][1]) and events[-1][1]["code"] == "sequence_gap"
    assert "RUN_FINISHED" not in [e["type"] for _, e in events]
    assert_valid_stream([e for _, e in events])
    codes = [c for c, _ in _dead(steps)]
    assert codes == ["sequence_gap"] + ["run_ended"] * (len(records) - k - 3)  # the end record is no news
    # the gap record is not accepted input; the decision is journaled (a later owner finds it)
    assert steps[k].run_ended and steps[k].journal_append is not None and steps[k].journal_append.seq == core.GAP_SEQ


def test_a_bad_record_in_a_burst_does_not_restart_the_run_from_an_empty_journal() -> None:
    """Finding 2's mechanism: the poll's journal writes are not in the store yet when the record
    after a dead-lettered one arrives; an empty journal must not rebuild the run from nothing."""
    records = _records()
    bad = RawRecord(records[4].key, records[4].value, tuple(h for h in records[4].headers if h[0] != "rw-provider"), 0, 4)
    n = Normalizer(translators=translator_for)
    steps = _feed(n, records[:4] + [bad] + records[5:8], journal=None)
    starts = [seq for seq, e in _events(steps) if e["type"] == "RUN_STARTED"]
    assert starts == [0]
    assert [c for c, _ in _dead(steps)] == ["invalid_envelope", "sequence_gap", "run_ended", "run_ended"]


def test_an_end_record_for_an_unknown_run_is_dead_lettered_not_a_phantom_finding6() -> None:
    n = Normalizer(translators=translator_for)
    for seq, control in ((0, Control.END), (5, Control.END), (2, Control.ABORT)):
        record = RawRecord(b"ghost", None, tuple(RunEnvelope("openai-responses", "ghost", "t").headers(seq, control=control)))
        [step] = _feed(n, [record])
        assert _dead([step]) == [("unknown_run", None)] and not _events([step]) and not step.run_ended
    assert n.open_runs == 0


def test_duplicates_identical_are_counted_conflicting_are_dead_lettered() -> None:
    records = _records()
    n = Normalizer(translators=translator_for)
    _feed(n, records[:6])
    [same] = _feed(n, [records[3]])
    assert same.skipped and not same.outbound
    conflict = RawRecord(records[3].key, b'{"type":"other"}', records[3].headers, 0, 99)
    [step] = _feed(n, [conflict])
    assert _dead([step]) == [("duplicate_conflict", b'{"type":"other"}')] and not _events([step])
    rest = _feed(n, records[6:])
    assert _events(rest)[-1][1]["type"] == "RUN_FINISHED"  # the run goes on


def test_a_conflicting_record_redelivered_after_a_crash_is_still_a_conflict() -> None:
    """Restored from a journal that holds the accepted record for its rw-seq, a different record
    under that number is dead-lettered — not translated as new input over used numbers."""
    records = _records()
    journal: dict[int, JournalEntry] = {}
    _feed(Normalizer(translators=translator_for), records[:8], journal)
    conflict = RawRecord(records[5].key, b'{"type":"other"}', records[5].headers, 0, 50)
    n = Normalizer(translators=translator_for)  # after a crash
    steps = _feed(n, [conflict, *records[8:]], journal)
    assert _dead(steps)[0] == ("duplicate_conflict", b'{"type":"other"}')
    whole = _events(_feed(Normalizer(translators=translator_for), records))
    assert _events(steps[1:]) == [e for e in whole if e[0] >= whole.index(_events(steps[1:])[0])]


def test_records_after_the_end_are_dead_lettered_redeliveries_counted() -> None:
    records = _records()
    n = Normalizer(translators=translator_for)
    steps = _feed(n, records)
    ended = next(s for s in steps if s.run_ended)
    assert ended.ended_at == (0, len(records) - 2)  # response.completed, before the ingress's end record
    assert steps[-1].skipped == "run already ended"  # the end record after the provider's end: normal
    [again] = _feed(n, [records[3]])  # a redelivery (an offset before the end)
    assert again.skipped and not again.outbound
    late = RawRecord(records[3].key, records[3].value, records[3].headers, 0, len(records) + 5)
    [step] = _feed(n, [late])
    assert _dead([step]) == [("run_ended", records[3].value)]


def test_the_ended_marker_keeps_where_the_run_ended() -> None:
    assert Ended.parse(Ended(3, 41).marker()) == Ended(3, 41)
    assert Ended.parse(b"1") == Ended()  # a marker from before: ended, position unknown
    assert Ended.parse(False) is None and Ended.parse(None) is None
    n = Normalizer(translators=translator_for)
    records = _records()
    item = n.route(records[2])
    assert isinstance(item, RunInput)
    n.restore(item, [], ended=b"0:30")
    assert n.accept(item, now=0.0).skipped  # offset 2 ≤ 30: a redelivery
    late = n.route(RawRecord(records[2].key, records[2].value, records[2].headers, 0, 31))
    assert isinstance(late, RunInput) and _dead([n.accept(late, now=0.0)]) == [("run_ended", records[2].value)]


def test_an_exception_in_the_translator_fails_its_run_only() -> None:
    def exploding(*args: Any, **kwargs: Any) -> Any:
        translator = translator_for(*args, **kwargs)
        feed = translator.feed
        return Replaced(translator, feed=lambda raw, **kw: (_ for _ in ()).throw(RecursionError("secret")) if b"BOOM" in raw else feed(raw, **kw))

    victim, other = _records(), _records(RunEnvelope("openai-responses", "run-b", "thread-b"))
    victim[5] = RawRecord(victim[5].key, b'{"BOOM":1}', victim[5].headers, 0, 5)
    n = Normalizer(translators=exploding)
    steps = _feed(n, [x for pair in zip(victim, other, strict=True) for x in pair])
    mine = [s for s in steps if s.run and s.run.run_id == "run-a"]
    events = _events(mine)
    assert events[-1][1]["type"] == "RUN_ERROR" and events[-1][1]["code"] == "internal_error"
    assert "secret" not in json.dumps(events[-1][1])  # an exception's text may quote content
    assert [e for e in _events(mine[:5])] == events[:-1]  # nothing of the failing record got out
    failing = mine[5]
    assert failing.error == "RecursionError" and failing.journal_append is None
    assert ("internal_error", b'{"BOOM":1}') in _dead(mine)
    theirs = _events([s for s in steps if s.run and s.run.run_id == "run-b"])
    assert theirs[-1][1]["type"] == "RUN_FINISHED"


def test_an_output_too_large_for_its_topic_ends_the_run_too_large_finding3() -> None:
    records = _records()
    k = next(i for i, r in enumerate(records) if r.value and b"summary_text.delta" in r.value)
    event = json.loads(records[k].value or b"")
    event["delta"] = "z" * 5000
    records[k] = RawRecord(records[k].key, json.dumps(event).encode(), records[k].headers, 0, k)
    n = Normalizer(translators=translator_for, limits=OutputLimits(per_topic={topics.EVENTS: 4000, topics.DLQ: 4000}))
    steps = _feed(n, records)
    events = _events(steps)
    assert events[-1][1]["code"] == "too_large" and len(events) == len(_events(steps[:k])) + 1
    assert all(len(o.value or b"") < 4000 for s in steps for o in s.outbound)
    [(code, value)] = [d for d in _dead(steps) if d[0] == "too_large"]
    assert value is not None and (records[k].value or b"").startswith(value)
    assert_valid_stream([e for _, e in events])


def test_a_dead_letter_too_large_for_the_dlq_is_cut_with_its_size_and_sha256_finding3() -> None:
    value = bytes(range(256)) * 4000
    headers: list[tuple[str, bytes | None]] = [("rw-run-id", b"r"), ("x-big", b"h" * 50_000), ("x-null", None), ("rw-dlq-reason", b"why"), ("rw-dlq-code", b"malformed_event")]
    key, cut, kept = fit_dead_letter(b"k", value, headers, 20_000)
    assert record_size(key, cut, kept) <= 20_000
    assert cut is not None and value.startswith(cut) and len(cut) > 10_000
    marks = dict(kept)
    assert marks["rw-dlq-original-size"] == str(len(value)).encode()
    assert marks["rw-dlq-sha256"] == hashlib.sha256(value).hexdigest().encode()
    assert marks["rw-dlq-reason"] == b"why" and marks["rw-dlq-code"] == b"malformed_event"
    assert "x-big" not in marks and ("x-null", None) in kept  # what does not fit goes; the rest as consumed
    assert set((marks["rw-dlq-truncated"] or b"").split(b",")) == {b"headers", b"value"}
    assert fit_dead_letter(b"k", b"small", headers[:1], 20_000) == (b"k", b"small", headers[:1])  # fits: untouched


def test_route_never_raises_finding1() -> None:
    weird = RawRecord(b"k", b"v", (("rw-run-id", b"\xff"), ("rw-provider", None), ("x", b"\x00")))
    routed = Normalizer(translators=translator_for).route(weird)
    assert isinstance(routed, DeadLetter) and routed.code is DeadLetterCode.INVALID_ENVELOPE
    broken = RawRecord(b"k", b"v", object())  # type: ignore[arg-type]  # not even a header list
    routed = Normalizer(translators=translator_for).route(broken)
    assert isinstance(routed, DeadLetter) and routed.code is DeadLetterCode.UNREADABLE


def test_a_timeout_is_journaled_so_a_restart_never_numbers_a_late_record_over_it() -> None:
    """The timeout's RUN_ERROR went out, the worker died before the ended marker: the new owner
    finds the decision in the journal, ends the run the same way (same events, same numbers) and
    dead-letters the late record — it used to translate it into the number RUN_ERROR had."""
    records = _records()
    journal: dict[int, JournalEntry] = {}
    first = Normalizer(translators=translator_for)
    before = _feed(first, records[:7], journal)
    [expired] = first.expire(now=10_000.0, timeout_s=300)
    assert expired.journal_append is not None and expired.journal_append.seq == core.EXPIRED_SEQ
    journal[expired.journal_append.seq] = expired.journal_append  # the poll's transaction, before the send
    published = _events(before + [expired])
    assert published[-1][1]["code"] == "inactivity_timeout"
    second = Normalizer(translators=translator_for)  # crash before close_runs: no ended marker, the journal is still there
    late = RawRecord(records[7].key, records[7].value, records[7].headers, 0, 7)
    [step] = _feed(second, [late], journal)
    assert _events([step]) == published[-len(_events([expired])):]  # the same RUN_ERROR, same number
    assert _dead([step]) == [("run_ended", late.value)] and step.run_ended and step.ended_at == (0, 7)
    [again] = _feed(second, [late])
    assert again.skipped and not again.outbound


def test_no_timeout_is_judged_while_records_that_may_be_published_are_redone() -> None:
    """After a rewind (or on a partition first fetched) the records up to what was stepped (or to
    the log end) may have been published already: a timeout between two of them would number its
    RUN_ERROR over the later one's event. The core waits until it is past them."""
    records = _records()
    n = Normalizer(translators=translator_for)
    _feed(n, records[:8])
    n.forget_partitions([0])  # a rewind to offset 3
    _feed(n, [records[0]])
    journal = {i: JournalEntry(i, r.value or b"") for i, r in enumerate(records[:3])}
    n.restore(n.route(records[3]), list(journal.values()), ended=False)  # type: ignore[arg-type]
    _feed(n, [records[3]])
    assert n.replaying(0) and n.expire(now=10_000.0, timeout_s=1) == []
    _feed(n, records[4:8])
    assert not n.replaying(0) and len(n.expire(now=10_000.0, timeout_s=1)) == 1
    fresh = Normalizer(translators=translator_for)
    fresh.replay_until(0, 20)  # the log end when this worker first fetched the partition
    _feed(fresh, records[:5])
    assert fresh.replaying(0) and fresh.expire(now=10_000.0, timeout_s=1) == []


def test_a_unicode_digit_seq_is_an_invalid_envelope_not_an_exception() -> None:
    record = _records()[1]
    headers = tuple((k, "²".encode() if k == "rw-seq" else v) for k, v in record.headers)
    routed = Normalizer(translators=translator_for).route(RawRecord(record.key, record.value, headers, 0, 1))
    assert isinstance(routed, DeadLetter) and routed.code is DeadLetterCode.INVALID_ENVELOPE


def test_a_usage_record_that_cannot_be_serialized_costs_the_usage_not_the_run() -> None:
    def refusing(grammar: Any, /, **kwargs: Any) -> Any:
        """Translators whose usage record holds a value its serializer refuses (the translator let
        it through): the core's ``record_json`` fails on it, compiled or not."""
        translator = translator_for(grammar, **kwargs)
        made = translator.usage_record
        return Replaced(translator, usage_record=lambda **kw: made(**kw).model_copy(update={"stop_reason": object()}))

    steps = _feed(Normalizer(translators=refusing), _records())
    events = _events(steps)
    assert events[-1][1]["type"] == "RUN_FINISHED"  # the run's own events are fine
    assert not [o for s in steps for o in s.outbound if o.topic == topics.USAGE]
    assert any(w.code == "usage_unavailable" for s in steps for w in s.warnings)
