"""Bad records and the worker's second line of defence on the real broker and Redis: every raw record is accounted for, a run's ``rw-event-seq`` is a function of
its accepted input, and no record is a poison pill for its partition.

Each test publishes its records *before* the worker starts, so they reach it in as few polls as
the broker hands over — the burst in which the bugs showed — and reads every output topic back
with raw (bytes) headers. Oracle: a translator fed the run's accepted records offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import Control
from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream
from reasonwire.workers.services.ingress.records import OutgoingRecord, RunEnvelope, raw_records
from reasonwire.workers.services import normalizer as normalize
from reasonwire.workers.services.normalizer import NormalizerWorker
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.ops.telemetry import setup_telemetry
from reasonwire.workers.translators import translator_for
from tests.translator_faults import Replaced

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl"
OTHER = LOCAL_FIXTURES / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"

Headers = list[tuple[str, bytes | None]]


def _run(tag: str, path: Path = FIXTURE) -> tuple[RunEnvelope, list[OutgoingRecord]]:
    run = RunEnvelope(path.parent.name, f"{tag}-{uuid.uuid4().hex[:10]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with path.open() as f:
        return run, list(raw_records(run, read_events(f)))


def _translated(run: RunEnvelope, records: list[OutgoingRecord]) -> list[dict[str, Any]]:
    """The events a translator gives for exactly these data records, with no end of input."""
    t = translator_for(Grammar(run.grammar), run_id=run.run_id, thread_id=run.thread_id, model=run.model, issuer_scope=None)
    events: list[dict[str, Any]] = []
    for r in records:
        sse = dict(r.headers).get("rw-sse-event")
        assert r.value is not None
        events += t.feed(r.value, sse_event=sse.decode() if sse else None).events
    return events


def _header(headers: Headers, name: str) -> bytes | None:
    return next((v for k, v in headers if k == name), None)


def _with(record: OutgoingRecord, *, drop: str | None = None, set_: tuple[str, bytes] | None = None, key: bytes | None = None, value: Any = ...) -> OutgoingRecord:
    headers = [(k, v) for k, v in record.headers if k != drop and (set_ is None or k != set_[0])]
    if set_ is not None:
        headers.append(set_)
    return OutgoingRecord(key if key is not None else record.key, record.value if value is ... else value, headers)


class Downstream:
    """Every output topic read from the start, headers kept as bytes (a dead letter's headers are
    the raw record's, which need not be UTF-8)."""

    def __init__(self, bootstrap: str, tag: str) -> None:
        self.tag = tag
        self.consumer = AIOKafkaConsumer(
            topics.EVENTS, topics.EVENTS_PUBLIC, topics.DLQ, topics.USAGE, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
        )
        self.events: dict[str, dict[int, list[bytes]]] = defaultdict(lambda: defaultdict(list))
        self.public: dict[str, dict[int, list[bytes]]] = defaultdict(lambda: defaultdict(list))
        self.dlq: list[tuple[bytes | None, bytes | None, Headers]] = []
        self.usage: dict[str, list[bytes]] = defaultdict(list)

    async def __aenter__(self) -> Downstream:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    def _mine(self, key: bytes | None, headers: Headers) -> bool:
        return self.tag.encode() in (key or b"") or self.tag.encode() in (_header(headers, "rw-run-id") or b"")

    async def until(self, done: Callable[[Downstream], bool], timeout: float = 30) -> bool:
        """Read until ``done`` holds; False (not an error) at the timeout, for tests that then say what is missing."""
        deadline = time.monotonic() + timeout
        while not done(self):
            if time.monotonic() > deadline:
                return False
            for records in (await self.consumer.getmany(timeout_ms=300)).values():
                for m in records:
                    headers = list(m.headers)
                    if not self._mine(m.key, headers):
                        continue
                    run_id = (_header(headers, "rw-run-id") or b"").decode(errors="replace")
                    if m.topic == topics.DLQ:
                        self.dlq.append((m.key, m.value, headers))
                    elif m.topic == topics.USAGE:
                        self.usage[run_id].append(m.value)
                    else:
                        by_seq = self.events if m.topic == topics.EVENTS else self.public
                        by_seq[run_id][int(_header(headers, "rw-event-seq") or b"-1")].append(m.value)
        return True

    def stream(self, run_id: str) -> list[dict[str, Any]]:
        """The run as a consumer de-duplicating by (run, rw-event-seq) sees it — after checking that
        no two different events share a number and that no number is missing."""
        by_seq = self.events.get(run_id, {})
        for seq, copies in by_seq.items():
            assert len(set(copies)) == 1, f"{run_id}: {len(set(copies))} different events share rw-event-seq {seq}"
        assert sorted(by_seq) == list(range(len(by_seq))), f"{run_id}: rw-event-seq numbers missing"
        return [orjson.loads(by_seq[seq][0]) for seq in sorted(by_seq)]

    def ended(self, run_id: str) -> bool:
        by_seq = self.events.get(run_id, {})
        return bool(by_seq) and orjson.loads(by_seq[max(by_seq)][0])["type"] in ("RUN_FINISHED", "RUN_ERROR")

    def dead(self, code: str) -> list[tuple[bytes | None, bytes | None, Headers]]:
        return [d for d in self.dlq if _header(d[2], "rw-dlq-code") == code.encode()]


async def _publish(bootstrap: str, records: list[OutgoingRecord]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=4 * 1024 * 1024)
    await producer.start()
    try:
        for r in records:
            await producer.send(topics.RAW, r.value, key=r.key, headers=r.headers)  # type: ignore[arg-type]
        await producer.flush()
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def _worker(settings: WorkerSettings) -> AsyncIterator[NormalizerWorker]:
    """The normalizer in this process (so a test can count its sends), started and stopped cleanly."""
    telemetry = setup_telemetry(install_global=False, env={})
    app, worker = create_app(dataclasses.replace(settings, inactivity_timeout_s=120), telemetry)
    try:
        await app.start()
        yield worker
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()


async def test_a_non_utf8_or_valueless_header_loses_nothing_of_its_poll_finding1(primed_group: WorkerSettings) -> None:
    """Finding 1: FastStream decoded every header of a poll and one non-UTF-8 value dropped the poll
    silently. Now the runs in the poll finish, a record whose foreign headers are binary is
    processed, and a record whose own header is not UTF-8 is dead-lettered with its key, value
    and headers exactly as consumed."""
    tag = f"f1{uuid.uuid4().hex[:6]}"
    run, records = _run(f"{tag}-plain")
    binary, binary_records = _run(f"{tag}-binary", OTHER)
    binary_records = [OutgoingRecord(r.key, r.value, [*r.headers, ("x-trace", b"\xff\xfe\x00binary"), ("x-empty", None)]) for r in binary_records]  # type: ignore[list-item]
    bad_key = f"{tag}-badheader".encode()
    bad = OutgoingRecord(
        bad_key, b"\x00\xffopaque bytes", [("rw-provider", b"openai-responses"), ("rw-run-id", bad_key), ("rw-seq", b"0"), ("rw-model", b"\xc3\x28")]
    )
    mixed = [x for pair in zip(records, binary_records, strict=False) for x in pair] + records[len(binary_records) :]
    mixed.insert(3, bad)
    await _publish(primed_group.kafka_bootstrap_servers, mixed)
    async with _worker(primed_group), Downstream(primed_group.kafka_bootstrap_servers, tag) as d:
        await d.until(lambda d: d.ended(run.run_id) and d.ended(binary.run_id) and bool(d.dead("invalid_envelope")), timeout=30)
    assert d.ended(run.run_id) and d.ended(binary.run_id), "runs of the poll were lost"
    assert d.stream(run.run_id)[-1]["type"] == "RUN_FINISHED"
    assert d.stream(binary.run_id)[-1]["type"] == "RUN_FINISHED"
    assert_valid_stream(d.stream(binary.run_id))
    [(key, value, headers)] = d.dead("invalid_envelope")
    assert (key, value) == (bad.key, bad.value)
    assert headers[: len(bad.headers)] == bad.headers  # byte for byte, in order
    assert b"rw-model" in (_header(headers, "rw-dlq-reason") or b"")


async def test_a_bad_record_in_a_burst_never_reuses_an_event_number_finding2(primed_group: WorkerSettings) -> None:
    """Finding 2: a bad record in the burst of its run made the stale-run restore rebuild the run
    from nothing and publish RUN_STARTED / RUN_ERROR over numbers already used. Now the run's
    numbering continues, the gap ends it with RUN_ERROR ``sequence_gap`` (never RUN_FINISHED),
    and each record after the gap is dead-lettered — for every kind of bad record."""
    tag = f"f2{uuid.uuid4().hex[:6]}"
    k = 6
    cases: dict[str, tuple[RunEnvelope, list[OutgoingRecord]]] = {}
    for kind in ("no-provider", "no-seq", "bad-seq", "digit-seq", "other-key", "null-value", "out-of-order"):
        run, records = _run(f"{tag}-{kind}")
        bad = {
            "no-provider": lambda r: _with(r, drop="rw-provider"),
            "no-seq": lambda r: _with(r, drop="rw-seq"),
            "bad-seq": lambda r: _with(r, set_=("rw-seq", b"six")),
            "digit-seq": lambda r: _with(r, set_=("rw-seq", "²".encode())),  # str.isdigit() says yes, int() raises
            "other-key": lambda r: _with(r, key=b"another-" + r.key),
            "null-value": lambda r: _with(r, value=None),
            "out-of-order": lambda r: r,
        }[kind](records[k])
        if kind == "out-of-order":
            records[k], records[k + 1] = records[k + 1], records[k]
        else:
            records[k] = bad
        cases[kind] = (run, records)
    burst = [r for _, records in cases.values() for r in records]
    await _publish(primed_group.kafka_bootstrap_servers, burst)
    async with _worker(primed_group), Downstream(primed_group.kafka_bootstrap_servers, tag) as d:
        await d.until(lambda d: all(d.ended(run.run_id) for run, _ in cases.values()), timeout=30)
        await d.until(lambda d: False, timeout=2)  # anything republished over a used number arrives too
    for kind, (run, records) in cases.items():
        stream = d.stream(run.run_id)  # no two different events share a number
        assert [e["type"] for e in stream].count("RUN_STARTED") == 1, kind
        assert "RUN_FINISHED" not in [e["type"] for e in stream], kind
        assert stream[-1]["type"] == "RUN_ERROR" and stream[-1]["code"] == "sequence_gap", kind
        assert stream[:-1] == _translated(run, records[:k]), kind  # the accepted prefix, numbered as before
        assert_valid_stream(stream)
        assert len(d.usage[run.run_id]) == 1, kind
    assert len(d.dead("sequence_gap")) == len(cases)  # the record after each gap ...
    late = d.dead("run_ended")  # ... and every later data record of the run (the end record is no news)
    assert len(late) == sum(len(records) - k - 3 + (kind == "out-of-order") for kind, (_, records) in cases.items())


async def test_later_records_of_a_gapped_run_never_finish_it_finding2(primed_group: WorkerSettings) -> None:
    """Finding 2, second half: the rest of the run arriving seconds after the gap used to be
    translated with the delta missing and the run ended RUN_FINISHED."""
    tag = f"f2l{uuid.uuid4().hex[:6]}"
    run, records = _run(tag)
    k = 5
    async with _worker(primed_group), Downstream(primed_group.kafka_bootstrap_servers, tag) as d:
        await _publish(primed_group.kafka_bootstrap_servers, records[:k] + [_with(records[k], drop="rw-seq")])
        await d.until(lambda d: len(d.events.get(run.run_id, {})) >= len(_translated(run, records[:k])) and bool(d.dlq), timeout=30)
        await asyncio.sleep(1.5)
        await _publish(primed_group.kafka_bootstrap_servers, records[k + 1 :])
        await d.until(lambda d: d.ended(run.run_id), timeout=20)
        await d.until(lambda d: False, timeout=1.5)
    stream = d.stream(run.run_id)
    assert stream[-1]["type"] == "RUN_ERROR" and stream[-1]["code"] == "sequence_gap"
    assert stream[:-1] == _translated(run, records[:k])
    assert [e["type"] for e in stream].count("RUN_STARTED") == 1


async def test_an_end_record_for_a_run_never_seen_makes_no_phantom_run_finding6(primed_group: WorkerSettings) -> None:
    """Finding 6: an end (or abort) control record for an unknown run created RUN_STARTED,
    RUN_ERROR and a usage record. Now it is dead-lettered ``unknown_run`` and nothing else."""
    tag = f"f6{uuid.uuid4().hex[:6]}"
    ghosts = [RunEnvelope("openai-responses", f"{tag}-ghost{i}", f"thread-{tag}", tenant="acme") for i in range(3)]
    controls = [
        OutgoingRecord(ghosts[0].run_id.encode(), None, ghosts[0].headers(0, control=Control.END)),
        OutgoingRecord(ghosts[1].run_id.encode(), None, ghosts[1].headers(17, control=Control.END)),
        OutgoingRecord(ghosts[2].run_id.encode(), None, ghosts[2].headers(4, control=Control.ABORT)),
    ]
    await _publish(primed_group.kafka_bootstrap_servers, controls)
    async with _worker(primed_group), Downstream(primed_group.kafka_bootstrap_servers, tag) as d:
        await d.until(lambda d: len(d.dlq) >= 3 or any(g.run_id in d.events for g in ghosts), timeout=20)
        await d.until(lambda d: False, timeout=1.5)
    assert not d.events and not d.public and not d.usage, "a phantom run was published"
    assert sorted((key, _header(h, "rw-dlq-code")) for key, _, h in d.dlq) == sorted((c.key, b"unknown_run") for c in controls)


async def test_late_and_conflicting_records_are_dead_lettered_identical_copies_only_counted(primed_group: WorkerSettings) -> None:
    """Every raw record is accounted for: a re-sent byte-identical copy of an accepted record is
    counted (no output), a different record under an accepted ``rw-seq`` is dead-lettered
    ``duplicate_conflict``, and a provider event after its run's end is dead-lettered ``run_ended``."""
    tag = f"acc{uuid.uuid4().hex[:6]}"
    run, records = _run(tag)
    conflict = _with(records[4], value=b'{"type":"response.output_text.delta","delta":"not what was accepted"}')
    stream_records = records[:6] + [records[3], conflict] + records[6:]
    end_seq = len(records) - 1
    late = OutgoingRecord(records[0].key, b'{"type":"response.created"}', run.headers(end_seq + 1))
    await _publish(primed_group.kafka_bootstrap_servers, [*stream_records, late])
    async with _worker(primed_group) as worker, Downstream(primed_group.kafka_bootstrap_servers, tag) as d:
        await d.until(lambda d: d.ended(run.run_id) and len(d.dlq) >= 2, timeout=30)
        await d.until(lambda d: False, timeout=1.5)
        skipped = worker.stats["skipped"]
    assert d.stream(run.run_id)[-1]["type"] == "RUN_FINISHED"
    assert [(v, _header(h, "rw-dlq-code")) for _, v, h in d.dlq] == [(conflict.value, b"duplicate_conflict"), (late.value, b"run_ended")]
    assert skipped >= 2  # the identical copy, and the ingress's end record after the provider's end


async def _set_max_message_bytes(bootstrap: str, limits: dict[str, int | None]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, {"max.message.bytes": str(v)} if v else {}) for t, v in limits.items()]
        )
    finally:
        await admin.close()


async def test_an_output_too_large_for_its_topic_is_no_poison_pill_finding3(primed_group: WorkerSettings) -> None:
    """Finding 3: a dead letter (the raw bytes plus the reason) larger than the DLQ's
    ``max.message.bytes`` failed, rewound and was retried forever, republishing the other runs of
    the poll each time. Now: a non-JSON value too large for the DLQ is dead-lettered as a
    truncated copy with its size and SHA-256; an event too large for the events topic ends its
    run ``too_large``; the partition moves on at once and the other runs are published once."""
    tag = f"f3{uuid.uuid4().hex[:6]}"
    limit = 200_000
    bootstrap = primed_group.kafka_bootstrap_servers
    huge_text = b"x" * 300_000  # fits the raw topic (1 MiB), not the DLQ
    text_run, text_records = _run(f"{tag}-nonjson")
    text_records[3] = _with(text_records[3], value=huge_text)
    delta_run, delta_records = _run(f"{tag}-delta")
    kind = next(i for i, r in enumerate(delta_records) if r.value and b"reasoning_summary_text.delta" in r.value)
    event = orjson.loads(delta_records[kind].value or b"")
    event["delta"] = "y" * 300_000  # one AG-UI event larger than the events topic takes
    delta_records[kind] = _with(delta_records[kind], value=orjson.dumps(event))
    bystander, bystander_records = _run(f"{tag}-bystander", OTHER)
    await _set_max_message_bytes(bootstrap, {topics.DLQ: limit, topics.EVENTS: limit, topics.EVENTS_PUBLIC: limit})
    try:
        await _publish(bootstrap, [x for trio in zip(text_records, delta_records, bystander_records, strict=False) for x in trio])
        await _publish(bootstrap, text_records[len(bystander_records) :] + delta_records[len(bystander_records) :])
        started = time.monotonic()
        async with _worker(primed_group), Downstream(bootstrap, tag) as d:
            runs = (text_run, delta_run, bystander)
            await d.until(lambda d: all(d.ended(r.run_id) for r in runs), timeout=30)
            took = time.monotonic() - started
            await d.until(lambda d: False, timeout=2)
    finally:
        await _set_max_message_bytes(bootstrap, {topics.DLQ: None, topics.EVENTS: None, topics.EVENTS_PUBLIC: None})
    assert all(d.ended(r.run_id) for r in runs), "a partition stayed blocked"
    assert took < 25
    text = d.stream(text_run.run_id)
    assert text[-1]["type"] == "RUN_ERROR" and text[-1]["code"] == "malformed_event"
    [(_, value, headers)] = [x for x in d.dead("malformed_event") if text_run.run_id.encode() in (x[0] or b"")]
    assert value is not None and len(value) < limit and huge_text.startswith(value)
    assert _header(headers, "rw-dlq-original-size") == str(len(huge_text)).encode()
    assert _header(headers, "rw-dlq-sha256") == hashlib.sha256(huge_text).hexdigest().encode()
    delta = d.stream(delta_run.run_id)
    assert delta[-1]["type"] == "RUN_ERROR" and delta[-1]["code"] == "too_large"
    assert delta[:-1] == _translated(delta_run, delta_records[:kind])
    assert_valid_stream(delta)
    [(_, value, headers)] = [x for x in d.dead("too_large") if delta_run.run_id.encode() in (x[0] or b"")]
    original = delta_records[kind].value or b""
    assert value is not None and original.startswith(value) and len(value) < limit  # cut to fit the DLQ
    assert _header(headers, "rw-dlq-sha256") == hashlib.sha256(original).hexdigest().encode()
    assert d.stream(bystander.run_id)[-1]["type"] == "RUN_FINISHED"
    assert all(len(copies) == 1 for copies in d.events[bystander.run_id].values()), "the other runs of the poll were republished"


async def test_an_exception_in_translation_fails_only_its_run_second_line_of_defence(primed_group: WorkerSettings) -> None:
    """An unexpected exception from a translator (or from serializing its output) for one record
    must not fail the whole poll (it would be redone and fail again): that run ends
    RUN_ERROR ``internal_error``, the record is dead-lettered with its bytes, and the other runs of
    the poll are published once."""
    tag = f"f18{uuid.uuid4().hex[:6]}"
    victim, victim_records = _run(f"{tag}-victim")
    trigger = b"__boom__"
    k = 5
    victim_records[k] = _with(victim_records[k], value=(victim_records[k].value or b"")[:-1] + b', "x": "' + trigger + b'"}')
    bystander, bystander_records = _run(f"{tag}-bystander", OTHER)
    real = normalize.translator_for  # the factory the worker gives its Normalizer

    def exploding(*args: Any, **kwargs: Any) -> Any:
        translator = real(*args, **kwargs)
        feed = translator.feed

        def feed_or_raise(raw: bytes, **kw: Any) -> Any:
            if trigger in raw:
                raise RecursionError("a translator bug")
            return feed(raw, **kw)

        return Replaced(translator, feed=feed_or_raise)

    normalize.translator_for = exploding  # type: ignore[assignment]
    try:
        await _publish(primed_group.kafka_bootstrap_servers, [x for pair in zip(victim_records, bystander_records, strict=False) for x in pair] + victim_records[len(bystander_records) :])
        async with _worker(primed_group), Downstream(primed_group.kafka_bootstrap_servers, tag) as d:
            await d.until(lambda d: d.ended(victim.run_id) and d.ended(bystander.run_id), timeout=30)
            await d.until(lambda d: False, timeout=1.5)
    finally:
        normalize.translator_for = real  # type: ignore[assignment]
    stream = d.stream(victim.run_id)
    assert stream[-1]["type"] == "RUN_ERROR" and stream[-1]["code"] == "internal_error"
    assert stream[:-1] == _translated(victim, victim_records[:k])
    assert "a translator bug" not in stream[-1]["message"]  # the exception's text may quote content
    [(_, value, _)] = d.dead("internal_error")
    assert value == victim_records[k].value
    assert d.stream(bystander.run_id)[-1]["type"] == "RUN_FINISHED"
    assert all(len(copies) == 1 for copies in d.events[bystander.run_id].values())
