"""The chaos load: runs built from the in-repo fixture streams, each with its own ids and opaque
values, their offline reference, and the bad-input corpus.

Every run gets a unique run id and thread id, and every opaque value of its stream (signatures,
encrypted content, redacted data: whatever the offline translator reports as an artefact) gets a
run-specific 10-character window rewritten, so a value found in a log names exactly one run and
value. The reference is the translator library fed exactly as the worker feeds it (the record's
bytes and SSE event name, then ``finish()`` on the end control record): what a correct worker
publishes on ``reasoning.events.v1``, one event per ``rw-event-seq``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from reasonwire.contracts.store import artefact_key, artefact_slot
from reasonwire.contracts.envelope import HEADER_CONTROL, HEADER_PROVIDER, HEADER_RUN_ID, HEADER_SEQ, Control
from reasonwire.workers.core.translator import ErrorCode
from reasonwire.workers.core.wire import event_json
from reasonwire.workers.services.ingress.records import OutgoingRecord, RunEnvelope, raw_records
from reasonwire.workers.io.sse import ProviderEvent, read_events
from reasonwire.workers.translators import translator_for

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TERMINAL = ("RUN_FINISHED", "RUN_ERROR")
"""The AG-UI event types that end a run."""

_WINDOW = re.compile(rb"[A-Za-z0-9]{4,10}")
_ALNUM = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@dataclass
class Template:
    """One fixture stream: its grammar, events and the opaque values its translation stores."""

    grammar: str
    name: str
    events: list[ProviderEvent]
    opaque: list[bytes]


@dataclass
class Run:
    """One run of the load: what is sent, what a correct worker publishes, what must stay secret."""

    scenario: str
    envelope: RunEnvelope
    records: list[OutgoingRecord]
    reference: list[dict[str, Any]]
    secrets: list[str] = field(default_factory=list)
    """The run's opaque values (the rewritten windows are unique to this run)."""
    expect: str = "complete"
    """``complete``: the reference, whole. Bad-input rows say what they expect themselves."""
    end: dict[str, Any] | None = None
    """A vanished producer's run: the terminal event its inactivity expiry publishes."""
    artefact_keys: list[str] = field(default_factory=list)
    """The Redis keys of the run's artefacts once it finished (an evicting Redis loses some)."""

    @property
    def run_id(self) -> str:
        return self.envelope.run_id


def templates() -> list[Template]:
    """Every fixture stream in tests/fixtures, with its opaque values (offline translation)."""
    found = []
    for path in sorted(FIXTURES.glob("*/*.jsonl")):
        grammar = path.parent.name
        with path.open(encoding="utf-8") as f:
            events = list(read_events(f))
        envelope = RunEnvelope(grammar, "template", "template")
        opaque = sorted({a.value.encode() for a in _translate(envelope, events)[1]}, key=len, reverse=True)
        found.append(Template(grammar, path.stem, events, opaque))
    return found


def make_run(template: Template, scenario: str, index: int, *, tenant: str = "chaos") -> Run:
    """A unique run from a template: new ids, every opaque value given a run-specific window."""
    run_id = f"{scenario}-{index:05d}-{template.grammar[:6]}"
    envelope = RunEnvelope(template.grammar, run_id, f"th-{run_id}", tenant=tenant, model="chaos-model")
    rewrites = {}
    for value in template.opaque:
        window = _WINDOW.search(value)
        if window is None:
            continue
        digest = hashlib.sha256(f"{run_id}/{value!r}".encode()).digest()
        fresh = bytes(_ALNUM[b % len(_ALNUM)] for b in digest[: window.end() - window.start()])
        rewrites[value] = value[: window.start()] + fresh + value[window.end() :]
    events = [ProviderEvent(e.line, _rewrite(e.data, rewrites), e.sse_event) for e in template.events]
    records = list(raw_records(envelope, events))
    reference, artefacts = _translate(envelope, events)
    keys = sorted({artefact_key(envelope.tenant, envelope.thread_id, artefact_slot(a.entity_id, a.native.position)) for a in artefacts})
    return Run(scenario, envelope, records, reference, secrets=sorted({a.value for a in artefacts}), artefact_keys=keys)


def reference_of(envelope: RunEnvelope, records: list[OutgoingRecord]) -> list[dict[str, Any]]:
    """The reference for an arbitrary record list (bad-input rows): fed as the worker feeds."""
    events = []
    for r in records:
        headers = dict(r.headers)
        if HEADER_CONTROL in headers:
            break
        if r.value is not None:
            sse = headers.get("rw-sse-event")
            events.append(ProviderEvent(0, r.value, sse.decode() if sse else None))
    return _translate(envelope, events)[0]


def fed_only(envelope: RunEnvelope, records: list[OutgoingRecord]) -> list[dict[str, Any]]:
    """The events a worker publishes for ``records`` before the run is closed (a producer that
    vanished: what comes next is the worker's own closing events, :func:`expiry_end`)."""
    return _fed(envelope, records)[1]


def expiry_end(envelope: RunEnvelope, records: list[OutgoingRecord]) -> dict[str, Any]:
    """The terminal event the worker's inactivity expiry publishes after ``records``: what the
    translator's own ``abort(inactivity_timeout)`` ends with — ``RUN_ERROR inactivity_timeout``,
    or ``RUN_FINISHED`` when the provider's stream had already completed and only the end record
    never came."""
    translator, fed = _fed(envelope, records)
    events = fed + [orjson.loads(event_json(e)) for e in translator.abort("the ingress vanished", code=ErrorCode.INACTIVITY_TIMEOUT).events]
    return next(e for e in reversed(events) if e.get("type") in TERMINAL)  # the run's own end, if it had one


def _translator(envelope: RunEnvelope) -> Any:
    """The translator the worker builds for the run's envelope."""
    return translator_for(
        envelope.grammar, run_id=envelope.run_id, thread_id=envelope.thread_id, model=envelope.model, issuer_scope=envelope.issuer_scope,
        issuer_provider=envelope.issuer_provider,
    )


def _fed(envelope: RunEnvelope, records: list[OutgoingRecord]) -> tuple[Any, list[dict[str, Any]]]:
    """The run's translator fed ``records`` as the worker feeds them, and the events it published."""
    translator = _translator(envelope)
    out = []
    for r in records:
        if r.value is not None and HEADER_CONTROL not in dict(r.headers):
            sse = dict(r.headers).get("rw-sse-event")
            out += translator.feed(r.value, sse_event=sse.decode() if sse else None).events
    return translator, [orjson.loads(event_json(e)) for e in out]


def _rewrite(data: bytes, rewrites: dict[bytes, bytes]) -> bytes:
    for old, new in rewrites.items():
        if old in data:
            data = data.replace(old, new)
    return data


def _translate(envelope: RunEnvelope, events: list[ProviderEvent]) -> tuple[list[dict[str, Any]], list[Any]]:
    translator = _translator(envelope)
    out_events, artefacts = [], []
    for event in events:
        out = translator.feed(event.data, sse_event=event.sse_event)
        out_events += out.events
        artefacts += out.artefacts
    out = translator.finish()
    out_events += out.events
    artefacts += out.artefacts
    return [orjson.loads(event_json(e)) for e in out_events], artefacts


# -- the bad-input corpus ---------------------------------------------------------------------


@dataclass
class BadCase:
    """One row of the bad-input table: the records it sends and what must hold afterwards."""

    name: str
    run: Run
    must: str
    """What the issue requires, in words (printed in the table)."""
    dlq_keys: set[bytes] = field(default_factory=set)
    """Keys whose records must reach the DLQ (every raw record accounted for)."""
    terminal_not: str | None = None
    """A terminal event type the run must NOT end with (a gap never ends RUN_FINISHED)."""
    no_events: bool = False
    """The run must publish nothing (an end for an unknown run is not a phantom run)."""
    consistent: bool = True
    """The published stream must equal ``run.reference`` on every seq it has."""


def _with_headers(record: OutgoingRecord, **changes: bytes | None) -> OutgoingRecord:
    headers = [(k, v) for k, v in record.headers if k not in changes]
    headers += [(k, v) for k, v in changes.items() if v is not None]
    return OutgoingRecord(record.key, record.value, headers)


def _pick(base: list[Template]) -> Template:
    return next(t for t in base if len(t.events) >= 6)


def huge_case(base: list[Template], huge_value_size: int) -> BadCase:
    """A value that fits the raw topic but whose dead letter (same bytes + a reason header) does not
    fit the DLQ: its own scenario, last, because today it wedges the partitions of its polls."""
    run = make_run(_pick(base), "bad_hugevalue", 0)
    run.expect = "bad"
    run.records = [OutgoingRecord(run.records[0].key, b"x" * huge_value_size, run.records[0].headers), *run.records[1:]]
    run.reference = reference_of(run.envelope, run.records)
    return BadCase(f"huge value ({huge_value_size} B, > DLQ max.message.bytes with headers)", run,
                   "dead-lettered (truncated + sha256), partition moves on", dlq_keys={run.records[0].key}, consistent=False)


def bad_cases(base: list[Template]) -> list[BadCase]:
    """The corpus: the issue's findings plus binary headers, null values, truncated JSON."""
    pick = _pick(base)
    cases = []

    def fresh(name: str) -> Run:
        return make_run(pick, f"bad_{name}", 0)

    # 1. a non-UTF-8 header value (unknown header) on one record mid-run
    run = fresh("binhdr")
    k = len(run.records) // 2
    run.records[k] = OutgoingRecord(run.records[k].key, run.records[k].value, [*run.records[k].headers, ("x-trace", b"\xff\xfe\x00bin")])
    cases.append(BadCase("binary header value (unknown header)", run, "run complete, or the record dead-lettered; nothing dropped",
                         consistent=True))
    # 2. a non-UTF-8 rw-tenant on a standalone record
    run = fresh("bintenant")
    run.records = [_with_headers(run.records[0], **{"rw-tenant": b"\xc3\x28"})]
    run.reference = []
    cases.append(BadCase("binary rw-tenant header", run, "dead-lettered with its bytes", dlq_keys={run.records[0].key}))
    # 4. a data record with a null value
    run = fresh("null")
    k = len(run.records) // 2
    run.records[k] = OutgoingRecord(run.records[k].key, None, run.records[k].headers)
    run.reference = reference_of(run.envelope, run.records)
    cases.append(BadCase("null value (data record)", run, "dead-lettered; run never ends RUN_FINISHED",
                         dlq_keys={run.records[k].key}, terminal_not="RUN_FINISHED", consistent=False))
    # 5. truncated JSON mid-run
    run = fresh("trunc")
    k = len(run.records) // 2
    value = run.records[k].value or b"{}"
    run.records[k] = OutgoingRecord(run.records[k].key, value[: max(1, len(value) // 2)], run.records[k].headers)
    run.reference = reference_of(run.envelope, run.records)
    cases.append(BadCase("truncated JSON", run, "dead-lettered (malformed_event); stream as the offline reference",
                         dlq_keys={run.records[k].key}))
    # 6. missing rw-provider / rw-seq (standalone)
    run = fresh("nohdr")
    r0 = run.records[0]
    run.records = [OutgoingRecord(r0.key, r0.value, [(k_, v) for k_, v in r0.headers if k_ not in (HEADER_PROVIDER, HEADER_SEQ)])]
    run.reference = []
    cases.append(BadCase("missing rw-provider and rw-seq", run, "dead-lettered with its bytes", dlq_keys={r0.key}))
    # 7. a missing record mid-run (seq gap)
    run = fresh("gap")
    k = len(run.records) // 2
    del run.records[k]
    run.reference = reference_of(run.envelope, run.records[:k])
    cases.append(BadCase("rw-seq gap (one record never sent)", run, "ends RUN_ERROR (sequence_gap), never RUN_FINISHED",
                         terminal_not="RUN_FINISHED", consistent=False))
    # 8. a duplicate rw-seq with different content
    run = fresh("dupdiff")
    k = 2
    other = run.records[k + 1].value
    run.records.insert(k + 1, OutgoingRecord(run.records[k].key, other, run.records[k].headers))
    cases.append(BadCase("duplicate rw-seq with different content", run, "the second copy dead-lettered; stream as reference",
                         dlq_keys={run.records[k].key}))
    # 9. an end control record for a run never seen
    run = fresh("phantom")
    end = [r for r in run.records if dict(r.headers).get(HEADER_CONTROL) == Control.END.value.encode()]
    run.records = end[-1:]
    run.reference = []
    cases.append(BadCase("end record for an unknown run", run, "no phantom run (no events); dead-lettered", no_events=True,
                         dlq_keys={run.records[0].key}))
    # 10. a record key that differs from rw-run-id, mid-run
    run = fresh("badkey")
    k = len(run.records) // 2
    run.records[k] = OutgoingRecord(b"another-key", run.records[k].value, run.records[k].headers)
    run.reference = reference_of(run.envelope, run.records)
    cases.append(BadCase("key differs from rw-run-id, mid-run", run, "dead-lettered; run never ends RUN_FINISHED",
                         dlq_keys={b"another-key"}, terminal_not="RUN_FINISHED", consistent=False))
    for case in cases:
        case.run.expect = "bad"
    _ = HEADER_RUN_ID
    return cases
