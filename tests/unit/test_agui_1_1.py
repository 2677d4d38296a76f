"""AG-UI 1.1 ``encryptedValueType`` (spec PR #2888) behind ``RW_AGUI_VERSION``: at 1.1 every
encrypted value carries the provider-prefixed type of its artefact kind and every stream validates
against the vendored 1.1 schema; at 1.0 (the default) nothing changes. On input the type is kept in
both versions, and it goes wherever its value goes — never a type without a value (R3, R5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reasonwire.contracts import topics
from reasonwire.contracts.artefacts import ENCRYPTED_VALUE_TYPES, ArtefactRecord, encrypted_value_type
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.core.events import with_value_types
from reasonwire.workers.core.normalizer import Normalizer, RawRecord, RunInput
from reasonwire.workers.core.wire import event_json
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.replay import replay
from reasonwire.workers.replay.consumer import AgUiConsumer, downgrade_messages
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.translators import implemented, translator_for
from tests.conformance.oracle import fixture_paths

SCHEMA = json.loads((Path(__file__).parents[1] / "schemas" / "ag-ui-1.1.json").read_text())
FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]


def validator(definition: str = "Event") -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{definition}"})


def stream(path: Path, version: str) -> tuple[list[dict[str, Any]], list[ArtefactRecord]]:
    """The fixture translated one provider event at a time, each step's events in ``version`` as the
    worker and ``translate`` emit them (the type comes from the records of the same step)."""
    translator = translator_for(path.parent.name)
    events: list[dict[str, Any]] = []
    records: list[ArtefactRecord] = []
    with path.open(encoding="utf-8") as f:
        steps = [translator.feed(e.data) for e in read_events(f)]
    for step in [*steps, translator.finish()]:
        out = with_value_types(step.events, step.artefacts) if version == "1.1" else step.events
        events += [json.loads(event_json(e)) for e in out]
        records += step.artefacts
    return events, records


def encrypted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "REASONING_ENCRYPTED_VALUE"]


def test_the_fixtures_carry_encrypted_values_of_every_known_kind() -> None:
    """The sweep below is not empty: every grammar's artefact kinds occur in some fixture."""
    kinds = {r.kind for path in FIXTURES for r in stream(path, "1.1")[1] if r.complete and r.value}
    assert {k for k in ENCRYPTED_VALUE_TYPES if not k.startswith("openrouter.")} <= kinds


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_with_1_1_every_encrypted_value_carries_its_type_and_the_stream_is_valid_1_1(path: Path) -> None:
    events, records = stream(path, "1.1")
    errors = [f"{e['type']}: {err.message[:120]}" for e in events for err in validator().iter_errors(e)]
    assert errors == []
    issued = {(r.subtype.value, r.entity_id, r.value): r for r in records}
    for event in encrypted(events):
        record = issued[(event["subtype"], event["entityId"], event["encryptedValue"])]
        assert event["encryptedValueType"] == encrypted_value_type(record.kind, record.issuer.provider)
        provider = (record.issuer.provider or record.kind).split(":")[0].split(".")[0]
        assert event["encryptedValueType"].startswith(f"{provider}.")  # prefixed with its issuer
    assert all("encryptedValue" in e for e in events if "encryptedValueType" in e)  # never a type without a value


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_with_1_0_the_events_are_unchanged(path: Path) -> None:
    events, _ = stream(path, "1.0")
    assert not any("encryptedValueType" in e for e in events)
    assert events == stream(path, "1.0")[0]


def test_the_type_names_the_issuing_provider_where_one_grammar_has_several() -> None:
    assert encrypted_value_type("openai.reasoning.encrypted_content") == "openai.encrypted_content"
    assert encrypted_value_type("openai.reasoning.encrypted_content", "xai") == "xai.encrypted_content"
    assert encrypted_value_type("anthropic.redacted_thinking.data") == "anthropic.redacted_thinking"
    assert encrypted_value_type("openrouter.reasoning.encrypted", "openrouter:anthropic-claude-v1") == "openrouter.reasoning.encrypted"
    assert encrypted_value_type("deepseek.reasoning_content", "deepseek") == "deepseek.reasoning_content"
    assert encrypted_value_type("some.unknown.kind") is None


def normalized(path: Path, version: str) -> list[dict[str, Any]]:
    """The trusted stream the normalizer publishes for the fixture."""
    normalizer = Normalizer(translators=translator_for, agui_version=version)
    run = RunEnvelope(path.parent.name, "run-v", "thread-v")
    outbound = []
    with path.open() as f:
        for r in raw_records(run, read_events(f)):
            item = normalizer.route(RawRecord(r.key, r.value, tuple(r.headers)))
            assert isinstance(item, RunInput)
            outbound += normalizer.accept(item, 0.0).outbound
    return [json.loads(o.value) for o in outbound if o.topic == topics.EVENTS]


ANTHROPIC_B = next(p for p in FIXTURES if p.parent.name == "anthropic-messages" and p.stem.startswith("b_"))


def test_the_worker_emits_the_type_at_1_1_only() -> None:
    at_1_1, at_1_0 = normalized(ANTHROPIC_B, "1.1"), normalized(ANTHROPIC_B, "1.0")
    assert [e["encryptedValueType"] for e in encrypted(at_1_1)] == ["anthropic.thinking_signature"]
    assert not any("encryptedValueType" in e for e in at_1_0)
    assert [{k: v for k, v in e.items() if k != "encryptedValueType"} for e in at_1_1] == at_1_0


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="1.0, 1.1"):
        Normalizer(translators=translator_for, agui_version="2.0")


# -- input: kept in both versions, with its value or not at all ----------------------------------------


def typed_history() -> tuple[AgUiConsumer, list[dict[str, Any]]]:
    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "REASONING_MESSAGE_START", "messageId": "m1", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "m1", "delta": "thinking"},
        {"type": "REASONING_MESSAGE_END", "messageId": "m1"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "m1", "encryptedValue": "sig==", "encryptedValueType": "anthropic.thinking_signature"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c1", "encryptedValue": "ts==", "encryptedValueType": "gemini.thought_signature"},
    ]
    consumer = AgUiConsumer()
    assert consumer.feed_all(events).fatal is None
    return consumer, events


def test_the_consumer_keeps_the_type_on_the_message_and_the_call_it_names() -> None:
    consumer, _ = typed_history()
    reasoning, assistant = consumer.wire_messages()
    assert reasoning["encryptedValue"] == "sig==" and reasoning["encryptedValueType"] == "anthropic.thinking_signature"
    [call] = assistant["toolCalls"]
    assert call["encryptedValue"] == "ts==" and call["encryptedValueType"] == "gemini.thought_signature"
    for message in consumer.wire_messages():
        assert list(validator("Message").iter_errors(message)) == []


def test_a_value_the_store_cannot_keep_goes_with_its_type_R4() -> None:
    consumer = AgUiConsumer(max_value_bytes=3)
    _, events = typed_history()
    consumer.feed_all(events)
    reasoning, assistant = consumer.wire_messages()
    assert "encryptedValue" not in reasoning and "encryptedValueType" not in reasoning
    assert "encryptedValueType" not in assistant["toolCalls"][0]


def test_a_snapshot_that_withdraws_the_value_withdraws_the_type_R5() -> None:
    consumer, _ = typed_history()
    restated = [{**m, "encryptedValueType": "anthropic.thinking_signature"} for m in consumer.wire_messages()]
    del restated[0]["encryptedValue"]  # a type without its value: the producer broke the rule, the consumer does not keep it
    consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": restated})
    reasoning = consumer.wire_messages()[0]
    assert "encryptedValue" not in reasoning and "encryptedValueType" not in reasoning


def test_a_new_value_without_a_type_replaces_the_old_type() -> None:
    consumer, _ = typed_history()
    consumer.feed({"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "m1", "encryptedValue": "other=="})
    reasoning = consumer.wire_messages()[0]
    assert reasoning["encryptedValue"] == "other==" and "encryptedValueType" not in reasoning


def test_downgrading_strips_the_type_with_the_versions_that_cannot_carry_it() -> None:
    consumer, _ = typed_history()
    for version, typed, valued in (("1.1", True, True), ("1.0", False, True), ("0.0.45", False, False)):
        messages, _ = downgrade_messages(consumer.messages, version)
        assert ("encryptedValueType" in messages[0]) is typed and ("encryptedValue" in messages[0]) is valued
        assert ("encryptedValueType" in messages[1]["toolCalls"][0]) is typed


def test_replay_reads_a_1_1_history_like_a_1_0_one() -> None:
    """Replay input accepts the type in either version; the stored copy still decides the bytes."""
    consumer, _ = typed_history()
    typed = consumer.wire_messages()
    plain, _ = downgrade_messages(consumer.messages, "1.0")
    target = ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model="claude-sonnet-4-5")
    assert replay(typed, [], target).fragment == replay(plain, [], target).fragment
