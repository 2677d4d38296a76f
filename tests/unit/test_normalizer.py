"""The normalizer's decisions without a broker: routing, dead letters, duplicates,
recovery from the journal, inactivity, run end (issue: streaming backbone)."""

from __future__ import annotations

import json

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import Control
from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream
from reasonwire.workers.core.normalizer import DeadLetter, JournalEntry, Normalizer, RawRecord, RunInput, Step, dead_letter
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import translator_for

FIXTURE = LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.jsonl"
RUN = RunEnvelope("anthropic-messages", "run-1", "thread-1", tenant="acme", model="claude-sonnet-4-5")


def _records(run: RunEnvelope = RUN, end: Control | None = Control.END) -> list[RawRecord]:
    with FIXTURE.open() as f:
        return [RawRecord(r.key, r.value, tuple(r.headers)) for r in raw_records(run, read_events(f), end=end)]


def _run_all(n: Normalizer, records: list[RawRecord]) -> list[Step]:
    steps = []
    for record in records:
        routed = n.route(record)
        assert isinstance(routed, RunInput), routed
        steps.append(n.accept(routed, now=0.0))
    return steps


def _events(steps: list[Step]) -> list[tuple[int, dict]]:
    return [
        (int(o.header("rw-event-seq") or -1), json.loads(o.value))
        for s in steps
        for o in s.outbound
        if o.topic == topics.EVENTS
    ]


def test_a_run_flows_to_events_artefacts_and_usage() -> None:
    steps = _run_all(Normalizer(translators=translator_for), _records())
    events = _events(steps)
    assert [seq for seq, _ in events] == list(range(len(events)))  # deterministic event identity
    assert_valid_stream([e for _, e in events])
    assert events[0][1]["runId"] == "run-1" and events[0][1]["threadId"] == "thread-1"
    [artefact] = [a for s in steps for a in s.artefacts]
    assert artefact.tenant == "acme" and artefact.thread_id == "thread-1"
    usage = [json.loads(o.value) for s in steps for o in s.outbound if o.topic == topics.USAGE]
    expected = json.loads(FIXTURE.with_suffix(".expected.json").read_text())["usage"]
    assert len(usage) == 1 and usage[0]["tokens"]["output_tokens"] == expected["output_tokens"]
    assert steps[-2].run_ended  # message_stop ends it; the ingress's end record finds it ended
    assert steps[-1].skipped == "run already ended"
    assert all(s.journal_append is not None for s in steps[:-1])  # every raw event is journaled


def test_bad_headers_are_dead_lettered_with_their_bytes_and_reason() -> None:
    n = Normalizer(translators=translator_for)
    good = _records()[0]
    cases = {
        "missing header rw-run-id": tuple(h for h in good.headers if h[0] != "rw-run-id"),
        "unknown grammar 'smoke-signals'": tuple((k, b"smoke-signals" if k == "rw-provider" else v) for k, v in good.headers),
        "rw-seq missing": tuple(h for h in good.headers if h[0] != "rw-seq"),
    }
    for reason, headers in cases.items():
        routed = n.route(RawRecord(good.key, good.value, headers))
        assert isinstance(routed, DeadLetter) and reason in routed.reason
    mismatch = n.route(RawRecord(b"another-run", good.value, good.headers))
    assert isinstance(mismatch, DeadLetter) and "key differs" in mismatch.reason


def test_a_dead_letter_keeps_every_original_header_byte_for_byte() -> None:
    good = _records()[0]
    foreign = (
        ("x-ingress-trace", b"\xff\xfe not utf-8"),
        ("x-valueless", None),  # Kafka headers may have no value; aiokafka hands them over as None
        ("rw-dlq-reason", b"forged by the producer"),
    )
    record = RawRecord(good.key, good.value, tuple(h for h in good.headers if h[0] != "rw-provider") + foreign)
    routed = Normalizer(translators=translator_for).route(record)
    assert isinstance(routed, DeadLetter)
    out = dead_letter(routed)
    assert out.topic == topics.DLQ and out.value == good.value and out.key == good.key
    kept = [h for h in out.headers if h[0] not in ("rw-dlq-reason", "rw-dlq-code")]
    assert kept == [h for h in record.headers if h[0] != "rw-dlq-reason"]  # order and bytes as consumed
    assert [v for k, v in out.headers if k == "rw-dlq-reason"] == [b"missing header rw-provider"]  # ours, once
    assert [v for k, v in out.headers if k == "rw-dlq-code"] == [b"invalid_envelope"]


def test_a_valueless_header_is_read_as_absent() -> None:
    good = _records()[0]
    record = RawRecord(good.key, good.value, (*good.headers, ("rw-model", None), ("x-valueless", None)))
    routed = Normalizer(translators=translator_for).route(record)
    assert isinstance(routed, RunInput) and routed.envelope.model is None


def test_malformed_event_ends_the_run_and_is_dead_lettered_R7() -> None:
    records = _records()
    records[3] = RawRecord(records[3].key, b"{broken", records[3].headers)
    steps = _run_all(Normalizer(translators=translator_for), records[:4])
    [dlq] = [o for o in steps[3].outbound if o.topic == topics.DLQ]
    assert dlq.value == b"{broken" and "line 4" in (dlq.header("rw-dlq-reason") or "")
    assert dlq.header("rw-run-id") == "run-1"
    assert _events(steps)[-1][1]["type"] == "RUN_ERROR"
    assert steps[3].run_ended


def test_duplicates_are_skipped_and_ended_runs_stay_ended() -> None:
    n = Normalizer(translators=translator_for)
    records = _records()
    _run_all(n, records[:3])
    again = n.accept(n.route(records[1]), now=0.0)  # type: ignore[arg-type]
    assert again.skipped and not again.outbound
    _run_all(n, records[3:])
    late = n.accept(n.route(records[5]), now=0.0)  # type: ignore[arg-type]
    assert (late.skipped or "").startswith("run already ended")  # a redelivery: counted, not dead-lettered


def test_a_new_owner_resumes_from_the_journal_with_the_same_event_numbers() -> None:
    records = _records()
    whole = _events(_run_all(Normalizer(translators=translator_for), records))
    first = Normalizer(translators=translator_for)
    first_steps = _run_all(first, records[:7])
    journal = [s.journal_append for s in first_steps if s.journal_append is not None]
    second = Normalizer(translators=translator_for)  # another worker: the partition moved, or the first one was killed
    item = second.route(records[7])
    assert isinstance(item, RunInput) and second.needs_restore(item)
    second.restore(item, journal, ended=False)
    rest = [second.accept(item, now=0.0)] + _run_all(second, records[8:])
    assert _events(first_steps) + _events(rest) == whole


def test_redelivered_record_after_a_crash_is_reprocessed_from_the_journal() -> None:
    """Crash after the Redis write, before the commit: the journal already holds the record."""
    records = _records()
    whole = _events(_run_all(Normalizer(translators=translator_for), records))
    first_steps = _run_all(Normalizer(translators=translator_for), records[:5])
    journal = [s.journal_append for s in first_steps if s.journal_append is not None]
    second = Normalizer(translators=translator_for)
    item = second.route(records[4])
    second.restore(item, journal, ended=False)  # type: ignore[arg-type]
    replayed = [second.accept(item, now=0.0)] + _run_all(second, records[5:])  # type: ignore[arg-type]
    assert _events(replayed) == whole[len(_events(first_steps[:4])):]


def test_a_held_run_is_never_restored_over_the_state_it_has() -> None:
    """The old rule restored a held run from the journal whenever a record skipped ahead; with
    the poll's own writes not yet in the store that rebuilt the run from nothing (finding 2)."""
    n = Normalizer(translators=translator_for)
    records = _records()
    _run_all(n, records[:3])
    later = n.route(records[6])
    assert isinstance(later, RunInput) and not n.needs_restore(later)


def test_silent_ingress_closes_the_run_as_interrupted() -> None:
    """Silence is stream time: confirmed caught-up time on the run's partition."""
    n = Normalizer(translators=translator_for)
    n.clock.step = 1.0
    records = _records(end=None)
    _run_all(n, records[:5])
    for t in range(100, 106):  # one fetch response a second, the partition caught up
        n.clock.observe(0, caught_up=True, fetched_at=float(t))
    assert n.expire(timeout_s=10) == []
    for t in range(106, 113):
        n.clock.observe(0, caught_up=True, fetched_at=float(t))
    [step] = n.expire(timeout_s=10)
    events = [e for _, e in _events([step])]
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "inactivity_timeout"
    assert step.run_ended and n.open_runs == 0


def test_abort_control_record_interrupts_the_run() -> None:
    n = Normalizer(translators=translator_for)
    records = _records(end=None)
    abort = RawRecord(records[0].key, None, tuple(RUN.headers(5, control=Control.ABORT)))
    steps = _run_all(n, records[:5] + [abort])
    last = _events(steps)[-1][1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "interrupted"
    assert "dropped" in last["message"]


def test_partition_handover_forgets_runs() -> None:
    n = Normalizer(translators=translator_for)
    _run_all(n, _records(end=None)[:3])
    assert n.forget_partitions([0]) == 1 and n.open_runs == 0


def test_journal_entries_keep_bytes_exact_R3() -> None:
    records = _records()
    steps = _run_all(Normalizer(translators=translator_for), records[:6])
    assert [s.journal_append.value for s in steps if s.journal_append] == [r.value for r in records[:6]]
    assert isinstance(steps[0].journal_append, JournalEntry)
