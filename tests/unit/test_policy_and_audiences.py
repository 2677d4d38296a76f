"""Retention policy (P7) and audience filtering (P1, P8): refusals, the public stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from reasonwire.contracts import topics
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.policy import AudienceRule, PolicyBook, PolicyError, ReasoningVisibility, RetentionPolicy, StoreRule
from reasonwire.contracts.usage import TokenCounts
from tests.conformance.oracle import assert_valid_stream, facts, fixture_paths, translate_file
from reasonwire.workers.core.audience import AudienceFilter
from reasonwire.workers.core.normalizer import Normalizer, RawRecord, RunInput
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import implemented, translator_for

FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"public": {"reasoning": "all", "encrypted_values": True}}, "R3, R8"),
        ({"opaque_state": {"store": True, "ttl_s": 60, "cross_boundary": True}}, "R8, P5"),
        ({"forward_raw_events": True}, "P8"),
        ({"drop_bound_text": True}, "P5"),
        ({"opaque_state": {"store": True}}, "needs a TTL"),
    ],
)
def test_policies_that_break_a_protocol_rule_are_refused_with_the_rule(change: dict, rule: str) -> None:
    with pytest.raises(ValidationError, match=rule.replace("(", r"\(")):
        RetentionPolicy.model_validate(change)


def test_not_storing_opaque_state_is_allowed_with_a_warning_R4() -> None:
    policy = RetentionPolicy(opaque_state=StoreRule(store=False))
    assert any("R4" in w for w in policy.warnings())
    assert RetentionPolicy().warnings() == []


def test_policy_file_per_tenant_with_default(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"tenants": {"strict": {"public": {"reasoning": "none", "encrypted_values": False}, "opaque_state": {"store": True, "ttl_s": 3600}}}}))
    book = PolicyBook.load(path)
    assert book.for_tenant("strict").opaque_state.ttl_s == 3600
    assert book.for_tenant("anyone-else") == RetentionPolicy()
    path.write_text(json.dumps({"default": {"forward_raw_events": True}}))
    with pytest.raises(PolicyError, match="P8"):
        PolicyBook.load(path)


def test_default_policy_is_purpose_limitation_P7() -> None:
    policy = RetentionPolicy()
    assert policy.public == AudienceRule(reasoning=ReasoningVisibility.SUMMARY, encrypted_values=False)
    assert policy.opaque_state.store and policy.opaque_state.ttl_s and not policy.opaque_state.cross_boundary
    assert not policy.readable_reasoning.store and not policy.forward_raw_events


@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_public_stream_is_valid_summaries_only_never_encrypted_P1_P8(path: Path) -> None:
    out = translate_file(path.parent.name, path)
    public = AudienceFilter(RetentionPolicy().public)
    wire = [e for e in (public.admit(e) for e in out.events) if e]
    assert_valid_stream(wire)
    assert not any(e["type"] == "REASONING_ENCRYPTED_VALUE" or "rawEvent" in e for e in wire)
    full = facts(out.events)
    kept = facts(wire)
    summaries = {i for i, m in full.reasoning.items() if m["kind"] == "summary"}
    assert set(kept.reasoning) <= summaries
    for message_id, message in kept.reasoning.items():
        assert message["text"] == full.reasoning[message_id]["text"]  # whole messages, never parts
    assert kept.texts == full.texts and kept.tools == full.tools  # the answer channel is untouched


@pytest.mark.parametrize("visibility", list(ReasoningVisibility))
def test_every_visibility_keeps_the_stream_valid_R1_R2(visibility: ReasoningVisibility) -> None:
    rule = AudienceRule(reasoning=visibility, encrypted_values=False)
    for path in FIXTURES:
        audience = AudienceFilter(rule)
        kept = [e for e in (audience.admit(e) for e in translate_file(path.parent.name, path).events) if e]
        assert_valid_stream(kept)
        if visibility is ReasoningVisibility.NONE:
            assert not any(e["type"].startswith("REASONING") for e in kept)


def test_normalizer_publishes_full_and_public_streams_with_their_own_numbering() -> None:
    path = next(p for p in FIXTURES if p.parent.name == "openai-responses" and p.stem.startswith("a_"))
    run = RunEnvelope("openai-responses", "run-p", "thread-p")
    n = Normalizer(translators=translator_for)
    outbound = []
    with path.open() as f:
        for r in raw_records(run, read_events(f)):
            item = n.route(RawRecord(r.key, r.value, tuple(r.headers)))
            assert isinstance(item, RunInput)
            outbound += n.accept(item, now=0.0).outbound
    full = [o for o in outbound if o.topic == topics.EVENTS]
    public = [o for o in outbound if o.topic == topics.EVENTS_PUBLIC]
    assert [int(o.header("rw-event-seq") or -1) for o in public] == list(range(len(public)))
    assert len(public) < len(full)
    assert not any(b"REASONING_ENCRYPTED_VALUE" in o.value for o in public)
    assert_valid_stream([json.loads(o.value) for o in public])


def test_tenant_that_keeps_no_opaque_state_stores_nothing() -> None:
    book = PolicyBook(tenants={"nostore": RetentionPolicy(opaque_state=StoreRule(store=False))})
    path = FIXTURES[0]
    n = Normalizer(book, translators=translator_for)
    run = RunEnvelope(path.parent.name, "run-n", "thread-n", tenant="nostore")
    with path.open() as f:
        steps = [n.accept(n.route(RawRecord(r.key, r.value, tuple(r.headers))), now=0.0) for r in raw_records(run, read_events(f))]  # type: ignore[arg-type]
    assert not any(s.artefacts for s in steps)


def test_usage_inconsistencies_are_named_without_counts_P6() -> None:
    assert TokenCounts(input_tokens=10, output_tokens=5, reasoning_tokens=3, total_tokens=15).inconsistencies() == []
    bad = TokenCounts(input_tokens=10, output_tokens=5, reasoning_tokens=7, cached_input_tokens=11, total_tokens=99)
    assert bad.inconsistencies() == [
        "reasoning_tokens exceeds output_tokens",
        "cached_input_tokens exceeds input_tokens",
        "total_tokens is not input_tokens + output_tokens",
    ]


@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_every_fixture_reports_consistent_usage_P6(path: Path) -> None:
    out = translate_file(path.parent.name, path)
    assert out.translator.usage_record().tokens.inconsistencies() == []
