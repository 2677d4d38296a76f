"""Anthropic Messages translator: rules R1–R7, P1–P3, P6 on hand-built streams."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance.oracle import LOCAL_FIXTURES, Output, assert_valid_stream, facts, translate_file, translate_lines

GRAMMAR = "anthropic-messages"


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def _start(model: str = "claude-sonnet-4-5-20250929", mid: str = "msg_T") -> bytes:
    return _line({"type": "message_start", "message": {"id": mid, "model": model, "usage": {"input_tokens": 5, "output_tokens": 1}}})


def _stream(*, thinking: list[str], signature: str, text: list[str], args: list[str]) -> list[bytes]:
    lines = [_start(), _line({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})]
    lines += [_line({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": t}}) for t in thinking]
    lines += [
        _line({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}}),
        _line({"type": "content_block_stop", "index": 0}),
        _line({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    ]
    lines += [_line({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": t}}) for t in text]
    lines += [
        _line({"type": "content_block_stop", "index": 1}),
        _line({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_X", "name": "f", "input": {}}}),
    ]
    lines += [_line({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": a}}) for a in args]
    lines += [
        _line({"type": "content_block_stop", "index": 2}),
        _line({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        _line({"type": "message_stop"}),
    ]
    return lines


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


THINKING = "Let me weigh this: √2027 ≈ 45, so test primes ≤ 43. 🙂 \"quoted\"\n\nDone."
TEXT = "Yes — 2027 is prime."
ARGS = '{"n": 2027, "note": "ünïcode \\"esc\\""}'
SIGNATURE = "EpQDCkgIBhABGAIqQIN8R6y2C3R2+/=="


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=200), max_size=12),
    st.lists(st.integers(min_value=0, max_value=200), max_size=8),
    st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_resplit_deltas_give_same_text_args_and_artefacts_P2_R3(t_cuts: list[int], x_cuts: list[int], a_cuts: list[int]) -> None:
    out = translate_lines(GRAMMAR, _stream(thinking=_split(THINKING, t_cuts), signature=SIGNATURE, text=_split(TEXT, x_cuts), args=_split(ARGS, a_cuts)))
    got = facts(out.events)
    assert [m["text"] for m in got.reasoning.values()] == [THINKING]
    assert [m["text"] for m in got.texts.values()] == [TEXT]
    assert [c["arguments"] for c in got.tools.values()] == [ARGS]
    assert [r.value for r in out.artefacts] == [SIGNATURE]
    assert out.artefacts[0].provider_block() == {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}
    assert_valid_stream(out.events)


def test_signature_rides_its_thinking_block_and_rebuilds_it_R3_P5() -> None:
    path = LOCAL_FIXTURES / GRAMMAR / "b_reasoning_then_tool_call.jsonl"
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    out = translate_file(GRAMMAR, path)
    [record] = out.artefacts
    replay_thinking = expected["replay"]["append_to_messages"][0]["content"][0]
    assert record.provider_block() == replay_thinking  # byte-for-byte the block to resend
    message_id = expected["reasoning_messages"][0]["ref"].split("#")[0]  # the message_start id
    assert record.native.position == 0 and record.native.response_id == message_id
    assert record.issuer.model == "claude-sonnet-4-5-20250929"
    assert record.entity_id == facts(out.events).ordering[0][1]


def test_signature_is_assigned_not_appended_R3() -> None:
    lines = _stream(thinking=["a"], signature="FIRST", text=["b"], args=["{}"])
    again = _line({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SECOND"}})
    lines.insert(4, again)  # after the first signature_delta, before content_block_stop
    out = translate_lines(GRAMMAR, lines)
    assert [r.value for r in out.artefacts] == ["SECOND"]


def test_encrypted_value_comes_after_message_end_inside_its_span_R1_R3() -> None:
    out = translate_lines(GRAMMAR, _stream(thinking=["a"], signature="S", text=["b"], args=["{}"]))
    kinds = [e["type"] for e in out.events]
    i = kinds.index("REASONING_ENCRYPTED_VALUE")
    assert kinds[i - 1] == "REASONING_MESSAGE_END" and kinds[i + 1] == "REASONING_END"


def test_usage_is_cumulative_never_summed_P6() -> None:
    lines = _stream(thinking=["a"], signature="S", text=["b"], args=["{}"])
    extra = _line({"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 4}})
    lines.insert(-2, extra)  # an earlier cumulative report (4) before the final one (9)
    out = translate_lines(GRAMMAR, lines)
    usage = out.events[-1]["usage"][0]
    assert usage["outputTokens"] == 9 and usage["inputTokens"] == 5 and usage["totalTokens"] == 14
    assert "reasoningTokens" not in usage  # not reported → unset, never 0


def test_tool_turn_reports_pending_tool_calls() -> None:
    out = translate_lines(GRAMMAR, _stream(thinking=["a"], signature="S", text=["b"], args=["{}"]))
    assert out.events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["toolu_X"]}
    assert out.events[-1]["metadata"]["reasonwire"]["stopReason"] == "tool_use"


def test_tool_input_given_whole_in_start_is_the_arguments() -> None:
    lines = [
        _start(),
        _line({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_W", "name": "f", "input": {"a": [1, 2]}}}),
        _line({"type": "content_block_stop", "index": 0}),
        _line({"type": "message_stop"}),
    ]
    out = translate_lines(GRAMMAR, lines)
    assert facts(out.events).tools["toolu_W"]["arguments"] == '{"a":[1,2]}'
    assert_valid_stream(out.events)


def _assert_malformed(out: Output, line: int, needle: str) -> None:
    assert out.rejected_lines == [line]
    terminal = out.events[-1]
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "malformed_event"
    assert f"line {line}" in terminal["message"] and needle in terminal["message"]
    assert_valid_stream(out.events)


def test_not_json_is_fatal_for_the_run_and_named_R7() -> None:
    lines = _stream(thinking=["abc"], signature="S", text=["b"], args=["{}"])
    lines[3] = b'{"type": "content_block_delta", "index": 0, "delta": {"typ'
    out = translate_lines(GRAMMAR, lines)
    _assert_malformed(out, 4, "not a JSON object")
    assert [r.complete for r in out.artefacts] == []  # the signature had not arrived yet


def test_missing_required_field_is_fatal_and_keeps_held_artefacts_R7() -> None:
    lines = _stream(thinking=["abc"], signature="SIG-KEPT", text=["b"], args=["{}"])
    lines[4] = _line({"type": "content_block_stop"})  # no index
    out = translate_lines(GRAMMAR, lines)
    _assert_malformed(out, 5, "'index'")
    assert [(r.value, r.complete) for r in out.artefacts] == [("SIG-KEPT", False)]
    assert "SIG-KEPT" not in out.events[-1]["message"]


def test_block_started_twice_is_a_grammar_error_R7() -> None:
    lines = _stream(thinking=["abc"], signature="S", text=["b"], args=["{}"])
    lines.insert(2, lines[1])
    _assert_malformed(translate_lines(GRAMMAR, lines), 3, "started twice")


def test_delta_of_the_wrong_kind_is_a_grammar_error_R7() -> None:
    lines = _stream(thinking=["abc"], signature="S", text=["b"], args=["{}"])
    lines[2] = _line({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}})
    _assert_malformed(translate_lines(GRAMMAR, lines), 3, "text_delta on a thinking block")


def test_events_after_the_end_are_warned_and_ignored() -> None:
    lines = _stream(thinking=["a"], signature="S", text=["b"], args=["{}"]) + [_line({"type": "ping"})]
    out = translate_lines(GRAMMAR, lines)
    assert [w.code for w in out.warnings] == ["event_after_end"]
    assert out.events[-1]["type"] == "RUN_FINISHED"


def test_abort_closes_the_run_as_interrupted() -> None:
    from reasonwire.workers.translators import translator_for

    t = translator_for(GRAMMAR, run_id="run-1", thread_id="thread-1")
    lines = _stream(thinking=["partial"], signature="S", text=["b"], args=["{}"])
    events = []
    for raw in lines[:3]:
        events += t.feed(raw).events
    result = t.abort()
    events += result.events
    wire = events  # already AG-UI wire dicts
    assert wire[0]["runId"] == "run-1" and wire[0]["threadId"] == "thread-1"
    assert wire[-1]["type"] == "RUN_ERROR" and wire[-1]["code"] == "interrupted"
    assert_valid_stream(wire)
    assert t.usage_record().end == "interrupted"


def test_reasoning_provenance_is_visible_downstream_P1() -> None:
    lines = _stream(thinking=["a"], signature="S", text=["b"], args=["{}"])
    lines[0] = _start(model="claude-3-7-sonnet-20250219")
    raw = translate_lines(GRAMMAR, lines)
    summary = translate_lines(GRAMMAR, _stream(thinking=["a"], signature="S", text=["b"], args=["{}"]))
    assert [m["kind"] for m in facts(raw.events).reasoning.values()] == ["raw"]
    assert [m["kind"] for m in facts(summary.events).reasoning.values()] == ["summary"]
    # the three channels stay apart: reasoning text never appears as answer text
    assert all(e["type"] != "TEXT_MESSAGE_CONTENT" or e["delta"] != "a" for e in summary.events)


# -- edge cases: usage, duplicates, truncation, split surrogates, empty signatures -----------


def _thinking_turn(*, delta_usage: dict[str, Any], stop_reason: str = "end_turn") -> list[bytes]:
    """A hand-written Claude 4 turn (REFERENCE §2.2): thinking, signature, text, then message_delta."""
    start_usage = {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 1}
    return [
        _line({"type": "message_start", "message": {"id": "msg_U", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": None, "usage": start_usage}}),
        _line({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        _line({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        _line({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}}),
        _line({"type": "content_block_stop", "index": 0}),
        _line({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        _line({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ok"}}),
        _line({"type": "content_block_stop", "index": 1}),
        _line({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": delta_usage}),
        _line({"type": "message_stop"}),
    ]


def test_null_delta_usage_keeps_message_start_counts_P6() -> None:
    """MessageDeltaUsage types input_tokens and the cache counts as optional: null = not restated."""
    nulls = {"input_tokens": None, "cache_creation_input_tokens": None, "cache_read_input_tokens": None, "output_tokens": 50}
    out = translate_lines(GRAMMAR, _thinking_turn(delta_usage=nulls))
    usage = out.events[-1]["usage"][0]
    assert usage["inputTokens"] == 150  # 100 + 20 written + 30 read, from message_start
    assert usage["cachedInputTokens"] == 30 and usage["cacheWriteInputTokens"] == 20
    assert usage["outputTokens"] == 50 and usage["totalTokens"] == 200
    raw = out.translator.tokens.provider_raw
    assert raw["input_tokens"] == 100 and raw["output_tokens"] == 50
    assert_valid_stream(out.events)


def test_a_duplicated_content_block_stop_is_dropped_with_a_warning() -> None:
    lines = _thinking_turn(delta_usage={"output_tokens": 9})
    lines.insert(5, lines[4])  # the thinking block's stop delivered twice
    out = translate_lines(GRAMMAR, lines)
    assert out.rejected_lines == []
    assert out.events[-1]["type"] == "RUN_FINISHED"
    assert [(w.code, w.line) for w in out.warnings] == [("duplicate_event", 6)]
    assert [r.value for r in out.artefacts] == ["SIG"]
    assert_valid_stream(out.events)


def test_max_tokens_marks_the_units_it_truncated_incomplete_R1() -> None:
    lines = [
        _start(),
        _line({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        _line({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "The answer is"}}),
        _line({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}, "usage": {"output_tokens": 8}}),
        _line({"type": "message_stop"}),
    ]
    out = translate_lines(GRAMMAR, lines)
    [end] = [e for e in out.events if e["type"] == "TEXT_MESSAGE_END"]
    assert end.get("metadata") == {"reasonwire": {"incomplete": True}}
    assert out.events[-1]["type"] == "RUN_FINISHED"
    assert out.events[-1]["metadata"]["reasonwire"]["stopReason"] == "max_tokens"
    assert_valid_stream(out.events)


def test_surrogate_halves_split_across_thinking_deltas_join_in_events_and_record_R3() -> None:
    lines = _thinking_turn(delta_usage={"output_tokens": 9})
    lines[2:3] = [
        _line({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "so \ud83d"}}),
        _line({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "\ude00 then"}}),
    ]
    out = translate_lines(GRAMMAR, lines)
    assert out.rejected_lines == [] and out.events[-1]["type"] == "RUN_FINISHED"
    assert [m["text"] for m in facts(out.events).reasoning.values()] == ["so 😀 then"]
    [record] = out.artefacts
    assert record.provider_block() == {"type": "thinking", "thinking": "so 😀 then", "signature": "SIG"}
    assert_valid_stream(out.events)


def test_empty_signature_delta_is_unsigned_thinking_never_an_encrypted_value_R3_P5() -> None:
    lines = _thinking_turn(delta_usage={"output_tokens": 9})
    lines[3] = _line({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": ""}})
    out = translate_lines(GRAMMAR, lines)
    assert not [e for e in out.events if e["type"] == "REASONING_ENCRYPTED_VALUE"]
    assert [r.complete for r in out.artefacts] == [False]  # kept as unsigned, never complete, never replayed
    codes = [w.code for w in out.warnings]
    assert "empty_signature" in codes and "unsigned_thinking" in codes
    assert out.events[-1]["type"] == "RUN_FINISHED"
    assert_valid_stream(out.events)
