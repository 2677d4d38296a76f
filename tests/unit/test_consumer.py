"""The consumer side of the draft reasoning chapter: R3–R7 on a sans-I/O AgUiConsumer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conformance.oracle import LOCAL_FIXTURES
from tests.unit.test_replay_roundtrip import translate
from reasonwire.workers.replay.consumer import AgUiConsumer, downgrade_messages

VALUE = "EqQBCkYIBRgCKkB+opaque/value=="


def reasoning_events(message_id: str = "r1", text: str = "thinking") -> list[dict[str, Any]]:
    return [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "run"},
        {"type": "REASONING_START", "messageId": "span-1"},
        {"type": "REASONING_MESSAGE_START", "messageId": message_id, "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": message_id, "delta": text},
        {"type": "REASONING_MESSAGE_END", "messageId": message_id},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": message_id, "encryptedValue": VALUE},
        {"type": "REASONING_END", "messageId": "span-1"},
    ]


def tool_call_events(call_id: str = "call-1") -> list[dict[str, Any]]:
    return [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": "get_weather"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": '{"city":'},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": '"Paris"}'},
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": call_id, "encryptedValue": VALUE},
    ]


def held(consumer: AgUiConsumer) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in consumer.wire_messages()}


# -- building the history ---------------------------------------------------------------------------


def test_events_become_messages_with_their_encrypted_values_R3() -> None:
    consumer = AgUiConsumer()
    out = consumer.feed_all(
        [
            *reasoning_events(),
            {
                "type": "TEXT_MESSAGE_START",
                "messageId": "m1",
                "role": "assistant",
                "metadata": {"reasonwire": {"phase": "final_answer"}},
            },
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello"},
            {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
            *tool_call_events(),
            {"type": "TOOL_CALL_RESULT", "messageId": "tr1", "toolCallId": "call-1", "content": "14C"},
            {"type": "RUN_FINISHED", "threadId": "t", "runId": "run"},
        ]
    )
    assert out.fatal is None and out.warnings == []
    messages = held(consumer)
    assert messages["r1"] == {"id": "r1", "role": "reasoning", "content": "thinking", "encryptedValue": VALUE}
    assert messages["m1"]["content"] == "Hello" and messages["m1"]["metadata"] == {"reasonwire": {"phase": "final_answer"}}
    [call] = messages["call-1"]["toolCalls"]  # no parentMessageId: the call opens its own assistant message
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert call["encryptedValue"] == VALUE
    assert messages["tr1"] == {"id": "tr1", "role": "tool", "content": "14C", "toolCallId": "call-1"}
    assert consumer.values() == {"r1": VALUE, "call-1": VALUE}


def test_a_tool_call_joins_the_message_its_parent_id_names() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(
        [
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Let me check."},
            {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "parentMessageId": "m1"},
            {"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "g", "parentMessageId": "m1"},
        ]
    )
    assert [c["id"] for c in held(consumer)["m1"]["toolCalls"]] == ["c1", "c2"]


def test_chunk_events_build_the_same_messages_as_start_content_end() -> None:
    consumer = AgUiConsumer()
    out = consumer.feed_all(
        [
            {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r1", "delta": "a"},
            {"type": "REASONING_MESSAGE_CHUNK", "delta": "b"},
            {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "x"},
            {"type": "TEXT_MESSAGE_CHUNK", "delta": "y"},
            {"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "f", "delta": "{}"},
        ]
    )
    assert out.fatal is None
    messages = held(consumer)
    assert messages["r1"]["content"] == "ab" and messages["m1"]["content"] == "xy"
    assert messages["c1"]["toolCalls"][0]["function"]["arguments"] == "{}"


def test_a_translated_stream_applies_cleanly() -> None:
    out = translate(LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.jsonl")
    consumer = AgUiConsumer()
    assert consumer.feed_all(out.events).fatal is None
    assert list(consumer.values().values()) == [a.value for a in out.artefacts]


@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=8))
def test_rechunking_reasoning_deltas_keeps_the_text_and_the_value_byte_for_byte_R3(chunks: list[str]) -> None:
    consumer = AgUiConsumer()
    events = [{"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"}]
    events += [{"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": c} for c in chunks]
    events += [{"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "r", "encryptedValue": VALUE}]
    consumer.feed_all(events)
    assert held(consumer)["r"]["content"] == "".join(chunks)
    assert consumer.values() == {"r": VALUE}


# -- R4: a path that cannot carry a value warns ------------------------------------------------------------


def test_a_store_that_cannot_carry_a_value_warns_R4() -> None:
    consumer = AgUiConsumer(max_value_bytes=8)
    out = consumer.feed_all(reasoning_events())
    assert [w.code for w in out.warnings] == ["value_not_stored"]
    assert VALUE not in out.warnings[0].message  # P8: sizes, never the value
    assert "encryptedValue" not in held(consumer)["r1"]
    assert consumer.counters["lost_encrypted_values"] == 1 and out.fatal is None


def test_a_downgrade_to_a_pre_1_0_shape_warns_for_each_value_it_drops_R4() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all([*reasoning_events(), *tool_call_events()])
    legacy, warnings = downgrade_messages(consumer.messages, "0.0.47")
    assert [w.code for w in warnings] == ["value_lost_in_downgrade", "value_lost_in_downgrade"]
    assert "encryptedValue" not in str(legacy)
    current, none = downgrade_messages(consumer.messages, "1.0")
    assert none == [] and current == consumer.wire_messages()


# -- R5: snapshots replace wholesale, withdrawals stick --------------------------------------------------------


def test_a_snapshot_replaces_a_restated_message_wholesale_value_included_R5() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(reasoning_events())
    restated = {"id": "r1", "role": "reasoning", "content": "revised", "encryptedValue": "NEW+value=="}
    out = consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": [restated]})
    assert out.fatal is None
    assert held(consumer)["r1"] == restated


def test_a_snapshot_that_omits_the_value_withdraws_it_R5() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(reasoning_events())
    consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "r1", "role": "reasoning", "content": "thinking"}]})
    assert "encryptedValue" not in held(consumer)["r1"]
    assert consumer.values() == {}
    assert consumer.counters["withdrawn_encrypted_values"] == 1


def test_a_withdrawn_value_is_never_resurrected_R5() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(reasoning_events())
    consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "r1", "role": "reasoning", "content": "thinking"}]})
    consumer.feed({"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"})
    consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "r1", "role": "reasoning", "content": "thinking"}]})
    assert consumer.values() == {}


def test_a_snapshot_withdraws_a_tool_call_value_it_omits_R5() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(tool_call_events())
    message = held(consumer)["call-1"]
    message["toolCalls"][0].pop("encryptedValue")
    consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": [message]})
    assert consumer.values() == {}


def test_the_consumers_own_messages_survive_a_snapshot() -> None:
    consumer = AgUiConsumer()
    consumer.add_message({"id": "u1", "role": "user", "content": "Hi"})
    consumer.feed_all(reasoning_events())
    consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "r1", "role": "reasoning", "content": "x"}]})
    assert [m["id"] for m in consumer.wire_messages()] == ["r1", "u1"]


# -- R6: unknown entities warn, may drop, never fail -------------------------------------------------------------


def test_an_encrypted_value_for_an_unknown_entity_warns_and_never_fails_the_run_R6() -> None:
    consumer = AgUiConsumer()
    out = consumer.feed_all(
        [
            *reasoning_events(),
            {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "nobody", "encryptedValue": VALUE},
            {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "r1", "encryptedValue": VALUE},
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        ]
    )
    assert out.fatal is None and consumer.failed is None
    assert [w.code for w in out.warnings] == ["unknown_entity", "unknown_entity"]
    assert consumer.counters["unknown_entity"] == 2
    assert "m1" in held(consumer)  # the run went on


def test_an_encrypted_value_naming_an_activity_message_is_an_unknown_entity_R6() -> None:
    consumer = AgUiConsumer()
    out = consumer.feed_all(
        [
            {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "PLAN", "content": {"steps": []}},
            {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "a1", "encryptedValue": VALUE},
        ]
    )
    assert out.fatal is None
    assert [w.code for w in out.warnings] == ["unknown_entity"]
    assert "encryptedValue" not in held(consumer)["a1"]


# -- R7: malformed known events are fatal; unrecognised subtypes are stripped ---------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "encryptedValue": VALUE},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "r1"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": 7, "entityId": "r1", "encryptedValue": VALUE},
        {"type": "REASONING_ENCRYPTED_VALUE", "entityId": "r1", "encryptedValue": VALUE},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "never-started", "delta": "x"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "never-started", "delta": "{}"},
        {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "x", "role": "wizard"}]},
        {"type": "TOOL_CALL_START", "toolCallId": "c9"},
        {"messageId": "no type"},
    ],
    ids=[
        "missing-entityId",
        "missing-encryptedValue",
        "non-string-subtype",
        "missing-subtype",
        "content-for-unknown-message",
        "args-for-unknown-call",
        "snapshot-with-bad-message",
        "tool-call-without-name",
        "no-type",
    ],
)
def test_a_malformed_known_event_is_fatal_and_nothing_else_is_lost_R7(event: dict[str, Any]) -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(reasoning_events())
    before = consumer.wire_messages()
    out = consumer.feed(event)
    assert out.fatal is not None and consumer.failed == out.fatal
    assert VALUE not in out.fatal
    assert consumer.wire_messages() == before  # nothing already held is lost
    assert consumer.feed({"type": "TEXT_MESSAGE_START", "messageId": "late", "role": "assistant"}).fatal is None
    assert "late" not in held(consumer)  # the run is over: later events are ignored


def test_an_unrecognised_string_subtype_is_stripped_with_a_warning_removing_the_event_R7() -> None:
    consumer = AgUiConsumer()
    consumer.feed_all(reasoning_events(message_id="r1"))
    out = consumer.feed(
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "thought-bundle", "entityId": "r1", "encryptedValue": "OTHER=="}
    )
    assert out.fatal is None
    assert [w.code for w in out.warnings] == ["unrecognised_subtype"]
    assert consumer.values() == {"r1": VALUE}  # the event was removed, nothing changed


def test_an_unknown_event_type_is_skipped_with_a_warning() -> None:
    consumer = AgUiConsumer()
    out = consumer.feed({"type": "REASONING_SOMETHING_NEW", "messageId": "r1"})
    assert out.fatal is None and [w.code for w in out.warnings] == ["unknown_event"]


# -- what the reference @ag-ui/client does ----------------------------------------------------------


def test_a_tool_call_whose_parent_is_a_reasoning_message_is_filed_under_its_own_id_with_a_warning() -> None:
    """parentMessageId is optional and may name the reasoning message before the call: a valid
    event (R7 is for malformed ones). Like @ag-ui/client: warn, open an assistant message with the
    call's id; the run goes on and the call's encrypted value is kept."""
    consumer = AgUiConsumer()
    events = reasoning_events()
    call = tool_call_events()
    call[0] = {**call[0], "parentMessageId": "r1"}
    out = consumer.feed_all([*events, *call, {"type": "RUN_FINISHED", "threadId": "t", "runId": "run"}])
    assert out.fatal is None
    assert [w.code for w in out.warnings] == ["parent_not_assistant"]
    messages = consumer.wire_messages()
    assert [(m["id"], m["role"]) for m in messages] == [("r1", "reasoning"), ("call-1", "assistant")]
    assert messages[1]["toolCalls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert consumer.values() == {"r1": VALUE, "call-1": VALUE}


def test_a_snapshot_that_restates_no_reasoning_keeps_the_held_reasoning_and_its_value() -> None:
    """The reference client keeps held reasoning messages when a snapshot carries none (docs/replay.md)."""
    consumer = AgUiConsumer()
    consumer.add_message({"id": "u1", "role": "user", "content": "Hi"})
    consumer.feed_all(reasoning_events())
    consumer.feed_all([
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    ])
    snapshot = [{"id": "u1", "role": "user", "content": "Hi"}, {"id": "m1", "role": "assistant", "content": "Hello"}]
    out = consumer.feed({"type": "MESSAGES_SNAPSHOT", "messages": snapshot})
    assert out.fatal is None
    assert [m["id"] for m in consumer.wire_messages()] == ["u1", "r1", "m1"]
    assert consumer.values() == {"r1": VALUE}
