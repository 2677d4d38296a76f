"""gemini-generate-content: GenerateContentResponse chunks → AG-UI (REFERENCE §3).

Every stream produced here passes ``assert_valid_stream`` (ag-ui-validate, warnings fail).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonwire.contracts.artefacts import ArtefactRecord
from tests.conformance.oracle import Output, assert_valid_stream, facts, of_type, translate_lines, types
from reasonwire.workers.core.wire import record_json
from reasonwire.workers.translators.gemini_generate_content import GeminiGenerateContentTranslator

GRAMMAR = "gemini-generate-content"
RID = "resp-gc-1"
SIG_A = "CsMBAdTI3Sk0yXRpCkZSPDD6WuLwfITZ72AGK/cLVg+aKLdpqRICdPnoQ/rJFQBuJax7O++El5tG8iL5iMlmeh=="
SIG_B = "Cq0CAdiZbiFUuOP8WqdJXfm5bMeCsiK0S5iE9aAx68pUpPlHnEDuh/p6poFKKzMmcEKIw4xItvZdikogL0DX+/=="


def chunk(*parts: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-3-flash-preview", "responseId": RID}
    if usage is not None:
        out["usageMetadata"] = usage
    out.update(extra)
    return out


def thought(text: str, signature: str | None = None) -> dict[str, Any]:
    return {"text": text, "thought": True, **({"thoughtSignature": signature} if signature else {})}


def text(value: str, signature: str | None = None) -> dict[str, Any]:
    return {"text": value, **({"thoughtSignature": signature} if signature else {})}


def call(name: str, args: dict[str, Any], signature: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args, **fields}, **({"thoughtSignature": signature} if signature else {})}


def translate(*objs: dict[str, Any] | bytes) -> Output:
    """Translate, then check the stream is valid AG-UI (R1, R2) — for every test."""
    out = translate_lines(GRAMMAR, [o if isinstance(o, bytes) else orjson.dumps(o) for o in objs])
    assert_valid_stream(out.events)
    return out


# -- reasoning, text, calls --------------------------------------------------------------


def test_consecutive_thought_parts_are_one_summary_message_in_a_span_R1_R2_P1() -> None:
    out = translate(chunk(thought("a ")), chunk(thought("b"), thought(" c")), chunk(text("answer"), finish="STOP"))
    starts = of_type(out, "REASONING_MESSAGE_START")
    assert len(starts) == 1
    assert starts[0]["metadata"]["reasonwire"]["reasoningKind"] == "summary"
    got = facts(out.events)
    assert [r["text"] for r in got.reasoning.values()] == ["a b c"]
    assert types(out)[1:3] == ["REASONING_START", "REASONING_MESSAGE_START"]
    assert types(out).index("REASONING_END") < types(out).index("TEXT_MESSAGE_START")


def test_thought_run_without_readable_text_says_none_P1() -> None:
    out = translate(chunk(thought("", SIG_A)), chunk(text("answer"), finish="STOP"))
    [message] = of_type(out, "REASONING_MESSAGE_START")
    assert message["metadata"]["reasonwire"]["reasoningKind"] == "none"
    assert [r.entity_id for r in out.artefacts] == [message["messageId"]]


def test_text_between_thought_runs_starts_a_new_run_P2() -> None:
    out = translate(chunk(thought("one"), text("mid"), thought("two")), chunk(text("end"), finish="STOP"))
    got = facts(out.events)
    assert [kind for kind, _ in got.ordering] == ["reasoning", "text", "reasoning", "text"]
    assert [r["text"] for r in got.reasoning.values()] == ["one", "two"]


def test_function_call_args_object_is_serialised_once_in_order() -> None:
    args = {"b": 1, "a": {"nested": [1, 2.5, None, "é"]}}
    out = translate(chunk(call("f", args), finish="STOP"))
    [tool] = facts(out.events).tools.values()
    assert tool["arguments"] == '{"b":1,"a":{"nested":[1,2.5,null,"é"]}}'
    assert len(of_type(out, "TOOL_CALL_ARGS")) == 1


def test_function_call_without_args_has_empty_object_arguments() -> None:
    out = translate(chunk({"functionCall": {"name": "now"}}, finish="STOP"))
    assert [t["arguments"] for t in facts(out.events).tools.values()] == ["{}"]


def test_minted_tool_call_ids_are_stable_and_unique() -> None:
    lines = [chunk(call("f", {"x": 1}), call("f", {"x": 2})), chunk(call("g", {}), finish="STOP")]
    first, second = translate(*lines), translate(*lines)
    ids = [e["toolCallId"] for e in of_type(first, "TOOL_CALL_START")]
    assert ids == [e["toolCallId"] for e in of_type(second, "TOOL_CALL_START")]
    assert len(set(ids)) == 3
    assert all(e["metadata"]["reasonwire"]["idMinted"] is True for e in of_type(first, "TOOL_CALL_START"))


def test_provider_function_call_id_is_the_tool_call_id() -> None:
    out = translate(chunk(call("f", {}, SIG_A, id="call_77"), finish="STOP"))
    [start] = of_type(out, "TOOL_CALL_START")
    assert start["toolCallId"] == "call_77"
    assert "idMinted" not in start["metadata"]["reasonwire"]
    [record] = out.artefacts
    assert record.entity_id == "call_77"
    assert record.native.extra["callGroup"] == [{"toolCallId": "call_77", "name": "f", "position": 0, "idMinted": False}]


def test_stop_with_calls_lists_them_pending() -> None:
    out = translate(chunk(call("f", {}), call("g", {}), finish="STOP"))
    ids = [e["toolCallId"] for e in of_type(out, "TOOL_CALL_START")]
    assert facts(out.events).terminal["outcome"]["pendingToolCallIds"] == ids


# -- signatures (R3, P5) ----------------------------------------------------------------------


def test_signature_rides_its_tool_call_R3() -> None:
    part = call("get_weather", {"location": "Paris"}, SIG_A)
    out = translate(chunk(thought("plan")), chunk(part, finish="STOP"))
    [value] = of_type(out, "REASONING_ENCRYPTED_VALUE")
    [start] = of_type(out, "TOOL_CALL_START")
    assert value == {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": start["toolCallId"], "encryptedValue": SIG_A}
    [record] = out.artefacts
    assert record.native.block == {"functionCall": {"name": "get_weather", "args": {"location": "Paris"}}}
    assert (record.native.value_path, record.native.position, record.native.response_id) == (["thoughtSignature"], 1, RID)
    assert orjson.dumps(record.provider_block()) == orjson.dumps(part)  # P5: the part back, byte for byte


def test_trailing_empty_text_signature_belongs_to_the_text_message_R3() -> None:
    out = translate(chunk(text("Yes.")), chunk(text("", SIG_A), finish="STOP"))
    [message] = of_type(out, "TEXT_MESSAGE_START")
    [value] = of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert (value["subtype"], value["entityId"]) == ("message", message["messageId"])
    assert len(of_type(out, "TEXT_MESSAGE_START")) == 1
    [record] = out.artefacts
    assert (record.native.block, record.native.position) == ({"text": ""}, 1)


def test_signature_only_part_without_open_text_opens_an_empty_text_message_R3() -> None:
    """Documented decision: the part is a text part, so it is a text message with no content."""
    out = translate(chunk(thought("done thinking")), chunk({"text": "", "thoughtSignature": SIG_A}, finish="STOP"))
    got = facts(out.events)
    assert [kind for kind, _ in got.ordering] == ["reasoning", "text"]
    [(text_id, message)] = got.texts.items()
    assert message == {"text": "", "complete": True}
    assert [(e["subtype"], e["entityId"]) for e in got.encrypted] == [("message", text_id)]


def test_part_with_only_a_signature_is_an_empty_text_part_R3() -> None:
    out = translate(chunk(text("hi"), {"thoughtSignature": SIG_A}, finish="STOP"))
    [record] = out.artefacts
    assert (record.native.block, record.native.position) == ({}, 1)
    assert record.entity_id == of_type(out, "TEXT_MESSAGE_START")[0]["messageId"]


def test_signature_on_a_thought_part_rides_the_reasoning_message_inside_its_span_R1_R3() -> None:
    out = translate(chunk(thought("a", SIG_A), thought("b")), chunk(text("x"), finish="STOP"))
    names = types(out)
    value_at = names.index("REASONING_ENCRYPTED_VALUE")
    assert names.index("REASONING_MESSAGE_END") < value_at < names.index("REASONING_END")
    [record] = out.artefacts
    assert record.entity_id == of_type(out, "REASONING_MESSAGE_START")[0]["messageId"]
    assert record.native.block == {"text": "a", "thought": True}


def test_text_part_signature_is_a_standalone_value_never_an_empty_span_R1() -> None:
    """The event "opens nothing, closes nothing" (draft chapter); an empty span renders as an
    empty thinking block, so a text part's signature goes out on its own, after its message."""
    out = translate(chunk(text("answer"), text("", SIG_A), finish="STOP"))
    names = types(out)
    assert "REASONING_START" not in names and "REASONING_MESSAGE_START" not in names
    at = names.index("REASONING_ENCRYPTED_VALUE")
    assert names[at - 1] == "TEXT_MESSAGE_END"


def test_call_signature_after_a_thought_is_a_standalone_value_R1() -> None:
    out = translate(chunk(thought("plan")), chunk(call("f", {}, SIG_A), finish="STOP"))
    names = types(out)
    assert names.count("REASONING_START") == 1  # the thought's span only
    at = names.index("REASONING_ENCRYPTED_VALUE")
    assert names[at - 1] == "TOOL_CALL_END" and names.index("REASONING_END") < at


def test_parallel_calls_keep_grouping_and_order_only_first_signed_P5() -> None:
    out = translate(
        chunk(thought("plan")),
        chunk(call("a", {"n": 1}, SIG_A), call("b", {"n": 2})),
        chunk(call("c", {"n": 3}), finish="STOP"),
    )
    ids = [e["toolCallId"] for e in of_type(out, "TOOL_CALL_START")]
    [record] = out.artefacts
    assert record.entity_id == ids[0]
    assert record.native.extra == {
        "callGroup": [
            {"toolCallId": ids[0], "name": "a", "position": 1, "idMinted": True},
            {"toolCallId": ids[1], "name": "b", "position": 2, "idMinted": True},
            {"toolCallId": ids[2], "name": "c", "position": 3, "idMinted": True},
        ]
    }
    assert [e["metadata"]["reasonwire"]["partIndex"] for e in of_type(out, "TOOL_CALL_START")] == [1, 2, 3]
    assert len(of_type(out, "REASONING_ENCRYPTED_VALUE")) == 1


def test_a_thought_between_calls_starts_a_new_call_group_P5() -> None:
    out = translate(chunk(call("a", {}, SIG_A), thought("more"), call("b", {}, SIG_B), call("c", {}), finish="STOP"))
    first, second = out.artefacts
    assert [c["name"] for c in first.native.extra["callGroup"]] == ["a"]
    assert [c["name"] for c in second.native.extra["callGroup"]] == ["b", "c"]
    assert [r.value for r in out.artefacts] == [SIG_A, SIG_B]


def test_unknown_part_fields_go_back_verbatim_R3() -> None:
    part = {"text": "", "futureField": {"k": [1]}, "thoughtSignature": SIG_A}
    out = translate(chunk(text("t"), part, finish="STOP", unknownTopLevel=True))
    [record] = out.artefacts
    assert orjson.dumps(record.provider_block()) == orjson.dumps(part)
    assert out.warnings == []


def test_empty_unsigned_parts_change_nothing() -> None:
    out = translate(chunk(thought("a"), thought(""), text(""), thought("b"), finish="STOP"))
    got = facts(out.events)
    assert [kind for kind, _ in got.ordering] == ["reasoning"]
    assert [r["text"] for r in got.reasoning.values()] == ["ab"]


# -- end, usage (P6) ---------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["MAX_TOKENS", "SAFETY", "RECITATION", "MALFORMED_FUNCTION_CALL", "MISSING_THOUGHT_SIGNATURE"])
def test_non_stop_finish_ends_the_run_with_the_reason_kept(reason: str) -> None:
    out = translate(chunk(call("f", {})), chunk(text("cut"), finish=reason))
    terminal = facts(out.events).terminal
    assert terminal["type"] == "RUN_FINISHED"
    assert terminal["metadata"]["reasonwire"]["stopReason"] == reason
    assert "pendingToolCallIds" not in terminal["outcome"]
    assert out.translator.stop_reason == reason


def test_finish_reason_on_a_candidate_without_content_ends_the_run() -> None:
    out = translate(chunk(text("x")), {"candidates": [{"finishReason": "STOP"}], "responseId": RID})
    assert facts(out.events).terminal["type"] == "RUN_FINISHED"


def test_blocked_prompt_ends_the_run_with_the_block_reason() -> None:
    out = translate({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}})
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["metadata"]["reasonwire"]["stopReason"]) == ("RUN_FINISHED", "SAFETY")


def test_usage_counts_thoughts_as_output_and_cache_as_part_of_input_P6() -> None:
    usage = {
        "promptTokenCount": 1000,
        "cachedContentTokenCount": 800,
        "toolUsePromptTokenCount": 50,
        "candidatesTokenCount": 40,
        "thoughtsTokenCount": 300,
        "totalTokenCount": 1390,
    }
    out = translate(chunk(text("x"), finish="STOP", usage=usage))
    [reported] = facts(out.events).terminal["usage"]
    assert reported == {
        "provider": "gcp.gemini",
        "model": "gemini-3-flash-preview",
        "inputTokens": 1050,
        "outputTokens": 340,
        "totalTokens": 1390,
        "reasoningTokens": 300,
        "cachedInputTokens": 800,
    }
    assert out.translator.tokens.provider_raw == usage


def test_usage_is_the_last_report_never_summed_P6() -> None:
    out = translate(
        chunk(thought("a"), usage={"promptTokenCount": 10, "thoughtsTokenCount": 5}),
        chunk(text("b"), usage={"promptTokenCount": 10, "thoughtsTokenCount": 9}),
        chunk(text("c"), finish="STOP", usage={"promptTokenCount": 10, "thoughtsTokenCount": 9, "candidatesTokenCount": 3}),
    )
    [reported] = facts(out.events).terminal["usage"]
    assert (reported["inputTokens"], reported["outputTokens"], reported["reasoningTokens"]) == (10, 12, 9)


def test_absent_counts_are_zero_not_unknown_P6() -> None:
    """proto3 JSON omits zero values: no thoughtsTokenCount means no thought tokens."""
    out = translate(chunk(text("x"), finish="STOP", usage={"promptTokenCount": 4, "candidatesTokenCount": 2}))
    [reported] = facts(out.events).terminal["usage"]
    assert (reported["reasoningTokens"], reported["cachedInputTokens"], reported["totalTokens"]) == (0, 0, 6)


def test_a_count_that_is_not_a_number_is_malformed_R7() -> None:
    out = translate(chunk(text("x"), usage={"promptTokenCount": "12"}))
    assert out.rejected_lines == [1]
    assert facts(out.events).terminal["code"] == "malformed_event"


# -- errors, interruption, unknowns ------------------------------------------------------------


def test_error_chunk_is_run_error_and_keeps_held_values_incomplete_R1_P8() -> None:
    out = translate(chunk(text("partial", SIG_A)), {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "provider_error")
    assert terminal["metadata"]["reasonwire"]["providerCode"] == "UNAVAILABLE"
    assert "overloaded" in terminal["message"]
    [record] = out.artefacts
    assert record.complete is False
    assert of_type(out, "REASONING_ENCRYPTED_VALUE") == []  # never announced
    assert SIG_A not in terminal["message"]


def test_interrupted_stream_closes_units_and_ends_with_interrupted_R1() -> None:
    out = translate(chunk(thought("half", SIG_A)))
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "interrupted")
    assert of_type(out, "REASONING_MESSAGE_END")[0]["metadata"]["reasonwire"]["incomplete"] is True
    assert [r.complete for r in out.artefacts] == [False]


def test_unknown_chunk_shape_is_skipped_without_closing_the_open_message_P3() -> None:
    out = translate(chunk(text("a")), {"keepAlive": {}}, chunk(text("b"), finish="STOP"))
    assert [w.code for w in out.warnings] == ["unknown_event"]
    assert out.translator.counters["unknown_events"] == 1
    assert [t["text"] for t in facts(out.events).texts.values()] == ["ab"]


def test_unknown_and_unsupported_parts_are_skipped_without_closing_the_message_P3() -> None:
    out = translate(chunk(text("a"), {"hologram": {}}, {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}, text("b"), finish="STOP"))
    assert [w.code for w in out.warnings] == ["unknown_part", "unsupported_part"]
    assert [t["text"] for t in facts(out.events).texts.values()] == ["ab"]


def test_signature_on_a_skipped_part_is_reported_lost_R4_P8() -> None:
    out = translate(chunk({"executableCode": {"code": "1"}, "thoughtSignature": SIG_A}, text("x"), finish="STOP"))
    assert "signature_lost" in [w.code for w in out.warnings]
    assert all(SIG_A not in w.message for w in out.warnings)
    assert out.artefacts == []


def test_extra_candidates_are_skipped() -> None:
    obj = chunk(text("zero"))
    obj["candidates"].append({"content": {"parts": [{"text": "one"}]}, "index": 1, "finishReason": "STOP"})
    out = translate(obj, chunk(finish="STOP"))
    assert [t["text"] for t in facts(out.events).texts.values()] == ["zero"]
    assert [w.code for w in out.warnings] == ["extra_candidate"]


def test_streamed_function_call_arguments_are_refused_R7() -> None:
    out = translate(chunk({"functionCall": {"name": "f", "partialArgs": [{"jsonPath": "$.x", "stringValue": "1"}], "willContinue": True}}))
    assert out.rejected_lines == [1]
    assert facts(out.events).terminal["code"] == "malformed_event"


@pytest.mark.parametrize(
    "bad",
    [
        {"candidates": {"not": "a list"}},
        {"candidates": [{"content": {"parts": ["not an object"]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]},
        {"candidates": [{"content": {"parts": [{"text": 7}]}}]},
        {"error": "not an object"},
    ],
)
def test_malformed_known_chunk_is_fatal_R7(bad: dict[str, Any]) -> None:
    out = translate(chunk(text("a")), bad)
    assert out.rejected_lines == [2]
    assert facts(out.events).terminal["code"] == "malformed_event"


def test_chunks_after_the_terminal_chunk_are_ignored() -> None:
    out = translate(chunk(text("a"), finish="STOP"), chunk(text("late")))
    assert [w.code for w in out.warnings] == ["event_after_end"]


def test_event_type_classifies_payload_shapes() -> None:
    classify = GeminiGenerateContentTranslator().event_type
    assert classify({"error": {}}, None) == "error"
    assert classify({"candidates": []}, None) == "chunk"
    assert classify({"usageMetadata": {}}, None) == "chunk"
    assert classify({"somethingElse": 1}, None) is None


# -- re-chunking (P2, R3): hypothesis -----------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
# Integers stay within what the core's JSON parser (orjson) reads exactly: larger ones become floats.
_ARGS = st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=8), st.booleans()), max_size=3)


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:]) if b > a]


def _turn(reasoning: list[str], answer: list[str], args: tuple[dict[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """Unsigned thought pieces, a signed thought part, two parallel calls (first signed),
    unsigned answer pieces, the trailing signature part."""
    return [
        *(thought(p) for p in reasoning),
        thought("!", SIG_A),
        call("first", args[0], SIG_B),
        call("second", args[1]),
        *(text(p) for p in answer),
        text("", "Ep4BAb" + SIG_A[::-1]),
    ]


def _chunks(parts: list[dict[str, Any]], cuts: list[int]) -> list[dict[str, Any]]:
    points = sorted({c % (len(parts) + 1) for c in cuts} | {0, len(parts)})
    groups = [parts[a:b] for a, b in zip(points, points[1:]) if b > a]
    return [*(chunk(*g) for g in groups), chunk(finish="STOP")]


def _summary(out: Output) -> tuple[list[str], list[str], list[str]]:
    got = facts(out.events)
    return (
        [r["text"] for r in got.reasoning.values()],
        [t["text"] for t in got.texts.values()],
        [t["arguments"] for t in got.tools.values()],
    )


@settings(max_examples=60, deadline=None)
@given(reasoning=_TEXT, answer=_TEXT, args=st.tuples(_ARGS, _ARGS), cuts=st.lists(st.integers(0, 100), max_size=8))
def test_regrouping_parts_into_chunks_changes_nothing_P2_R3(
    reasoning: str, answer: str, args: tuple[dict[str, Any], dict[str, Any]], cuts: list[int]
) -> None:
    parts = _turn([reasoning], [answer], args)
    one_per_chunk = translate(*(chunk(p) for p in parts), chunk(finish="STOP"))
    regrouped = translate(*_chunks(parts, cuts))
    assert _summary(regrouped) == _summary(one_per_chunk) == ([reasoning + "!"], [answer], [orjson.dumps(a).decode() for a in args])
    assert [record_json(a) for a in regrouped.artefacts] == [record_json(a) for a in one_per_chunk.artefacts]


@settings(max_examples=60, deadline=None)
@given(
    reasoning=_TEXT,
    answer=_TEXT,
    args=st.tuples(_ARGS, _ARGS),
    reasoning_cuts=st.lists(st.integers(0, 100), max_size=6),
    answer_cuts=st.lists(st.integers(0, 100), max_size=6),
    chunk_cuts=st.lists(st.integers(0, 100), max_size=6),
)
def test_resplitting_text_into_more_parts_keeps_text_args_and_signatures_P2_R3(
    reasoning: str,
    answer: str,
    args: tuple[dict[str, Any], dict[str, Any]],
    reasoning_cuts: list[int],
    answer_cuts: list[int],
    chunk_cuts: list[int],
) -> None:
    """Same facts and the same artefacts; only ``native.position`` moves, to the signed
    part's new index in the turn (the part index is where the value goes back)."""
    baseline = translate(*_chunks(_turn([reasoning], [answer], args), []))
    reasoning_parts, answer_parts = _pieces(reasoning, reasoning_cuts), _pieces(answer, answer_cuts)
    parts = _turn(reasoning_parts, answer_parts, args)
    resplit = translate(*_chunks(parts, chunk_cuts))
    assert _summary(resplit) == _summary(baseline)
    signed_positions = [i for i, p in enumerate(parts) if "thoughtSignature" in p]
    assert [a.native.position for a in resplit.artefacts] == signed_positions
    assert [_without_position(a) for a in resplit.artefacts] == [_without_position(a) for a in baseline.artefacts]


def _without_position(record: ArtefactRecord) -> dict[str, Any]:
    dumped = record.model_dump()
    dumped["native"].pop("position")
    for entry in dumped["native"]["extra"].get("callGroup", []):
        entry.pop("position")
    return dumped


# -- signatures: empty, before the text, on an unknown part; split surrogates ------------------


def test_empty_thought_signature_on_a_call_is_unsigned_never_an_encrypted_value_R3_P5() -> None:
    out = translate(chunk(thought("plan")), chunk({"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": ""}, finish="STOP"))
    assert not of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert [(r.subtype.value, r.complete) for r in out.artefacts] == [("tool-call", False)]
    assert "empty_signature" in [w.code for w in out.warnings]


def test_empty_signature_only_part_carries_nothing() -> None:
    out = translate(chunk(text("Yes.")), chunk({"text": "", "thoughtSignature": ""}, finish="STOP"))
    assert len(of_type(out, "TEXT_MESSAGE_START")) == 1
    assert not of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert all(r.complete is False for r in out.artefacts)


def test_signature_before_the_thought_text_keeps_it_a_summary_P1() -> None:
    """A ``{text:"", thought:true, thoughtSignature}`` part, then the thought text."""
    out = translate(chunk(thought("", SIG_A)), chunk(thought("Readable plan.")), chunk(text("x"), finish="STOP"))
    [start] = of_type(out, "REASONING_MESSAGE_START")
    assert start["metadata"]["reasonwire"]["reasoningKind"] == "summary"
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["Readable plan."]
    [value] = of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert value["entityId"] == start["messageId"]


def test_unknown_part_with_a_signature_is_skipped_not_read_as_text_P3_R4() -> None:
    out = translate(chunk(thought("a"), {"hologram": {"uri": "gs://x"}, "thoughtSignature": SIG_A}, thought("b")), chunk(text("x"), finish="STOP"))
    got = facts(out.events)
    assert [r["text"] for r in got.reasoning.values()] == ["ab"]  # the thought run is not split
    assert [t["text"] for t in got.texts.values()] == ["x"]  # no empty text message
    codes = [w.code for w in out.warnings]
    assert codes == ["unknown_part", "signature_lost"]
    assert out.artefacts == [] and not of_type(out, "REASONING_ENCRYPTED_VALUE")


def test_surrogate_halves_split_across_parts_join_and_the_signed_part_stays_writable_R3() -> None:
    cut = [json.dumps(c).encode() for c in (chunk(thought("a \ud83d", SIG_A)), chunk(thought("\ude00 b")))]
    out = translate(*cut, chunk(text("x"), finish="STOP"))
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["a 😀 b"]
    [record] = out.artefacts
    assert record.value == SIG_A  # the opaque value is untouched (R3)
    assert orjson.loads(record_json(record))["native"]["block"] == {"text": "a \ufffd", "thought": True}
