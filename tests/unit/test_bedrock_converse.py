"""Bedrock ConverseStream translator: rules R1–R8, P1–P9 on fixtures and hand-built streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance.oracle import (
    LOCAL_FIXTURES,
    Output,
    assert_matches_expected,
    assert_valid_stream,
    facts,
    translate_file,
    translate_lines,
)
from reasonwire.workers.core.wire import record_json
from reasonwire.workers.translators import translator_for

GRAMMAR = "bedrock-converse"
CLAUDE_4 = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
FIXTURES = sorted((LOCAL_FIXTURES / GRAMMAR).glob("*.jsonl"))


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _line({"contentBlockDelta": {"delta": delta, "contentBlockIndex": index}})


def _stop(index: int) -> bytes:
    return _line({"contentBlockStop": {"contentBlockIndex": index}})


START = _line({"messageStart": {"role": "assistant"}})


def _message_stop(reason: str = "end_turn") -> bytes:
    return _line({"messageStop": {"stopReason": reason}})


def _metadata(**usage: int) -> bytes:
    usage = usage or {"inputTokens": 10, "outputTokens": 20, "totalTokens": 30}
    return _line({"metadata": {"usage": usage, "metrics": {"latencyMs": 100}}})


def _reasoning(index: int, parts: list[str], signature: str | None = None, *, stop: bool = True) -> list[bytes]:
    lines = [_delta(index, {"reasoningContent": {"text": p}}) for p in parts]
    if signature is not None:
        lines.append(_delta(index, {"reasoningContent": {"signature": signature}}))
    return lines + ([_stop(index)] if stop else [])


def _text(index: int, parts: list[str]) -> list[bytes]:
    return [_delta(index, {"text": p}) for p in parts] + [_stop(index)]


def _tool(index: int, tool_id: str, name: str, fragments: list[str]) -> list[bytes]:
    start = _line({"contentBlockStart": {"start": {"toolUse": {"toolUseId": tool_id, "name": name}}, "contentBlockIndex": index}})
    return [start] + [_delta(index, {"toolUse": {"input": f}}) for f in fragments] + [_stop(index)]


def _stream(
    *, reasoning: list[str], signature: str, text: list[str], args: list[str], redacted: str = "UkVEQUNURUQ="
) -> list[bytes]:
    """Signed reasoning, a redacted block, answer text, one tool call — every block kind."""
    return [
        START,
        *_reasoning(0, reasoning, signature),
        _delta(1, {"reasoningContent": {"redactedContent": redacted}}),
        _stop(1),
        *_text(2, text),
        *_tool(3, "tooluse_X", "f", args),
        _message_stop("tool_use"),
        _metadata(),
    ]


def _run(lines: list[bytes], model: str | None = CLAUDE_4) -> Output:
    out = translate_lines(GRAMMAR, lines, model=model)
    assert_valid_stream(out.events)
    return out


def _terminal(out: Output) -> dict[str, Any]:
    return out.events[-1]


# -- fixtures (P9), with the model each fixture's request names ------------------------------


def _expected(path: Path) -> dict[str, Any]:
    expected: dict[str, Any] = json.loads(path.with_suffix(".expected.json").read_text())
    return expected


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_facts_hold_with_the_requested_model_P9_P1(path: Path) -> None:
    expected = _expected(path)
    out = translate_file(GRAMMAR, path, model=expected["request"]["modelId"])
    assert_matches_expected(out, expected)
    assert_valid_stream(out.events)
    end = expected["end"]
    if "stop_reason" in end:
        assert out.translator.stop_reason == end["stop_reason"]
        assert _terminal(out)["metadata"]["reasonwire"]["stopReason"] == end["stop_reason"]
    if "pending_tool_call_ids" in end:
        assert _terminal(out)["outcome"]["pendingToolCallIds"] == end["pending_tool_call_ids"]


@pytest.mark.parametrize("path", [p for p in FIXTURES if "replay" in _expected(p)], ids=lambda p: p.stem)
def test_artefacts_rebuild_the_blocks_the_next_request_sends_P5_R3(path: Path) -> None:
    expected = _expected(path)
    out = translate_file(GRAMMAR, path, model=expected["request"]["modelId"])
    assistant = expected["replay"]["append_to_messages"][0]["content"]
    assert out.artefacts, "the fixture has opaque state to replay"
    for record in out.artefacts:
        assert record.complete
        assert record.provider_block() == assistant[record.native.position]  # byte for byte
        assert record.issuer.model == expected["request"]["modelId"]  # R8: bound to its issuer


# -- re-chunking (P2, R3) ---------------------------------------------------------------------------


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


REASONING = "√2027 ≈ 45, so test primes ≤ 43. 🙂 \"quoted\"\n\nDone."
TEXT = "Yes — 2027 is prime."
ARGS = '{"n": 2027, "note": "ünïcode \\"esc\\""}'
SIGNATURE = "EpQDCkgIBhABGAIqQIN8R6y2C3R2+/=="
REDACTED = "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB1L9RIvNEVUxTveLruM0rfj0WAK1jHDhaXXzOI8d4VFmtvB"
BASELINE = translate_lines(GRAMMAR, _stream(reasoning=[REASONING], signature=SIGNATURE, text=[TEXT], args=[ARGS], redacted=REDACTED))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=200), max_size=12),
    st.lists(st.integers(min_value=0, max_value=200), max_size=8),
    st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_resplit_deltas_give_same_text_args_and_artefacts_P2_R3(r_cuts: list[int], t_cuts: list[int], a_cuts: list[int]) -> None:
    lines = _stream(
        reasoning=_split(REASONING, r_cuts), signature=SIGNATURE, text=_split(TEXT, t_cuts), args=_split(ARGS, a_cuts), redacted=REDACTED
    )
    out = translate_lines(GRAMMAR, lines)
    got = facts(out.events)
    assert [m["text"] for m in got.reasoning.values()] == [REASONING, ""]
    assert [m["text"] for m in got.texts.values()] == [TEXT]
    assert [c["arguments"] for c in got.tools.values()] == [ARGS]
    assert [record_json(r) for r in out.artefacts] == [record_json(r) for r in BASELINE.artefacts]  # byte-identical
    assert [r.value for r in out.artefacts] == [SIGNATURE, REDACTED]
    assert [e for e in out.events if e["type"] == "REASONING_ENCRYPTED_VALUE"] == [
        e for e in BASELINE.events if e["type"] == "REASONING_ENCRYPTED_VALUE"
    ]
    assert_valid_stream(out.events)


# -- blocks: no start event, one-member unions (REFERENCE §5.3) ------------------------------------


def test_first_delta_opens_text_and_reasoning_blocks() -> None:
    out = _run([START, *_reasoning(0, ["think"], "S"), *_text(1, ["answer"]), _message_stop(), _metadata()])
    kinds = [e["type"] for e in out.events]
    assert kinds[:3] == ["RUN_STARTED", "REASONING_START", "REASONING_MESSAGE_START"]
    assert kinds.index("TEXT_MESSAGE_START") > kinds.index("REASONING_END")


def test_signature_rides_its_reasoning_message_after_it_ends_inside_its_span_R1_R3() -> None:
    out = _run([START, *_reasoning(0, ["a"], "SIG"), *_text(1, ["b"]), _message_stop(), _metadata()])
    kinds = [e["type"] for e in out.events]
    i = kinds.index("REASONING_ENCRYPTED_VALUE")
    assert kinds[i - 1] == "REASONING_MESSAGE_END" and kinds[i + 1] == "REASONING_END"
    event = out.events[i]
    assert event["subtype"] == "message" and event["entityId"] == facts(out.events).ordering[0][1]
    [record] = out.artefacts
    assert record.kind == "bedrock.reasoningContent.signature" and record.native.position == 0
    assert record.native.value_path == ["reasoningContent", "reasoningText", "signature"]
    assert record.provider_block() == {"reasoningContent": {"reasoningText": {"text": "a", "signature": "SIG"}}}


def test_redacted_bytes_are_kept_exactly_never_decoded_R3() -> None:
    # Not even valid base64: a translator that decoded (or re-encoded) the blob would fail or change it.
    odd = "AAEC/+//==x\u00e9-not*base64"
    out = _run([START, _delta(0, {"reasoningContent": {"redactedContent": odd}}), _stop(0), _message_stop(), _metadata()])
    [record] = out.artefacts
    assert record.value == odd and record.kind == "bedrock.reasoningContent.redactedContent"
    assert record.provider_block() == {"reasoningContent": {"redactedContent": odd}}
    [message] = facts(out.events).reasoning.values()
    assert message == {"text": "", "kind": "redacted", "complete": True}
    assert [e["encryptedValue"] for e in out.events if e["type"] == "REASONING_ENCRYPTED_VALUE"] == [odd]


def test_readable_reasoning_without_signature_has_no_artefact_P9() -> None:
    """DeepSeek R1 on Bedrock: reasoning text, never a signature — raw reasoning, nothing opaque."""
    out = _run([START, *_reasoning(0, ["Let me ", "think."]), *_text(1, ["4"]), _message_stop(), _metadata()], model="us.deepseek.r1-v1:0")
    assert [(m["text"], m["kind"], m["complete"]) for m in facts(out.events).reasoning.values()] == [("Let me think.", "raw", True)]
    assert out.artefacts == [] and not any(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in out.events)
    assert out.translator.counters["unsigned_reasoning"] == 1
    assert out.warnings == []  # normal for this model, nothing skipped


def test_tool_call_without_input_fragments_gets_empty_object_arguments() -> None:
    out = _run([START, *_tool(0, "tooluse_N", "now", []), _message_stop("tool_use"), _metadata()])
    assert facts(out.events).tools["tooluse_N"] == {"name": "now", "arguments": "{}", "complete": True}
    assert _terminal(out)["outcome"]["pendingToolCallIds"] == ["tooluse_N"]


def test_second_signature_replaces_the_first_with_a_warning_R3_R4() -> None:
    lines = [START, *_reasoning(0, ["a"], "FIRST", stop=False), _delta(0, {"reasoningContent": {"signature": "SECOND"}}), _stop(0)]
    out = _run([*lines, _message_stop(), _metadata()])
    assert [r.value for r in out.artefacts] == ["SECOND"]
    assert [w.code for w in out.warnings] == ["opaque_value_replaced"]
    assert "FIRST" not in out.warnings[0].message and "SECOND" not in out.warnings[0].message  # P8


def test_citation_deltas_are_metadata_not_text() -> None:
    citation = {"citation": {"title": "doc", "location": {"documentChar": {"documentIndex": 0, "start": 0, "end": 3}}}}
    out = _run([START, _delta(0, {"text": "abc"}), _delta(0, citation), _stop(0), _message_stop(), _metadata()])
    assert [t["text"] for t in facts(out.events).texts.values()] == ["abc"]
    assert out.translator.counters["citations"] == 1 and out.warnings == []


def test_server_side_blocks_are_skipped_and_not_pending() -> None:
    server_call = {"toolUse": {"toolUseId": "srv_1", "name": "web_search", "type": "server_tool_use"}}
    result = {"toolResult": {"toolUseId": "srv_1", "type": "web_search_result"}}
    lines = [
        START,
        _line({"contentBlockStart": {"start": server_call, "contentBlockIndex": 0}}),
        _delta(0, {"toolUse": {"input": '{"q": "x"}'}}),
        _stop(0),
        _line({"contentBlockStart": {"start": result, "contentBlockIndex": 1}}),
        _delta(1, {"toolResult": [{"text": "found"}]}),
        _stop(1),
        *_text(2, ["Found it."]),
        _message_stop(),
        _metadata(),
    ]
    out = _run(lines)
    assert facts(out.events).tools == {}
    assert [w.code for w in out.warnings] == ["unsupported_block", "unsupported_block"]
    assert _terminal(out)["type"] == "RUN_FINISHED"


# -- unknown material (P3) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ({"SDK_UNKNOWN_MEMBER": {"name": "messageProgress"}}, "unknown_event"),
        ({}, "unknown_event"),  # what botocore makes of an unknown :event-type
        ({"futureStreamEvent": {"x": 1}}, "unknown_event"),
    ],
)
def test_unknown_top_level_events_are_counted_and_skipped_P3(line: dict[str, Any], code: str) -> None:
    lines = [START, *_reasoning(0, ["a"], "S", stop=False), _line(line), _stop(0), *_text(1, ["b"]), _message_stop(), _metadata()]
    out = _run(lines)
    assert [w.code for w in out.warnings] == [code]
    assert out.translator.counters["unknown_events"] == 1
    assert [m["text"] for m in facts(out.events).reasoning.values()] == ["a"] and [r.value for r in out.artefacts] == ["S"]


@pytest.mark.parametrize(
    ("delta", "named"),
    [
        ({"SDK_UNKNOWN_MEMBER": {"name": "audio"}}, "SDK_UNKNOWN_MEMBER(audio)"),
        ({"reasoningContent": {"SDK_UNKNOWN_MEMBER": {"name": "summaryText"}}}, "reasoningContent.SDK_UNKNOWN_MEMBER(summaryText)"),
        ({"futureMember": {"x": 1}}, "'futureMember'"),
    ],
    ids=["delta", "reasoningContent", "raw-wire-name"],
)
def test_unknown_union_members_leave_the_open_block_intact_P3(delta: dict[str, Any], named: str) -> None:
    lines = [START, _delta(0, {"reasoningContent": {"text": "be"}}), _delta(0, delta)]
    lines += [_delta(0, {"reasoningContent": {"text": "fore"}}), _delta(0, {"reasoningContent": {"signature": "S"}}), _stop(0)]
    out = _run([*lines, _message_stop(), _metadata()])
    assert [w.code for w in out.warnings] == ["unknown_delta"]
    assert named in out.warnings[0].message  # the member's name, as botocore reports it, for the operator
    assert [m["text"] for m in facts(out.events).reasoning.values()] == ["before"] and [r.value for r in out.artefacts] == ["S"]


def test_block_of_only_unknown_members_stops_quietly_P3() -> None:
    lines = [START, _delta(0, {"SDK_UNKNOWN_MEMBER": {"name": "video"}}), _stop(0), *_text(1, ["ok"]), _message_stop(), _metadata()]
    out = _run(lines)
    assert [w.code for w in out.warnings] == ["unknown_delta"]
    assert [t["text"] for t in facts(out.events).texts.values()] == ["ok"]


# -- provenance (P1, REFERENCE §7.11) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "summary"),
        ("anthropic.claude-opus-4-1-20250805-v1:0", "summary"),
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "summary"),
        ("anthropic.claude-3-7-sonnet-20250219-v1:0", "raw"),
        ("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-7-sonnet-20250219-v1:0", "raw"),
        ("us.deepseek.r1-v1:0", "raw"),
        ("openai.gpt-oss-120b-1:0", "raw"),
    ],
)
def test_reasoning_provenance_comes_from_the_model_id_P1(model: str, kind: str) -> None:
    out = _run([START, *_reasoning(0, ["a"], "S"), _message_stop(), _metadata()], model=model)
    [start] = [e for e in out.events if e["type"] == "REASONING_MESSAGE_START"]
    assert start["metadata"]["reasonwire"] == {"reasoningKind": kind}
    assert out.warnings == []
    assert out.artefacts[0].issuer.model == model  # R8: the value goes back to this model only


def test_unknown_model_defaults_to_summary_marked_assumed_P1() -> None:
    lines = [START, *_reasoning(0, ["a"], "S"), *_reasoning(1, ["b"], "T"), _message_stop(), _metadata()]
    out = _run(lines, model=None)
    starts = [e["metadata"]["reasonwire"] for e in out.events if e["type"] == "REASONING_MESSAGE_START"]
    assert starts == [{"reasoningKind": "summary", "reasoningKindAssumed": True}] * 2
    assert [w.code for w in out.warnings] == ["provenance_assumed"]  # once per run


def test_reasoning_never_leaks_into_answer_text_P1() -> None:
    out = _run([START, *_reasoning(0, ["secret plan"], "S"), *_text(1, ["answer"]), _message_stop(), _metadata()])
    assert all(e.get("delta") != "secret plan" for e in out.events if e["type"] == "TEXT_MESSAGE_CONTENT")


# -- end of run: stop reasons, trailing usage, interruption, exceptions ------------------------------------


@pytest.mark.parametrize(
    "reason", ["max_tokens", "guardrail_intervened", "content_filtered", "stop_sequence", "model_context_window_exceeded"]
)
def test_non_end_turn_stop_reasons_finish_and_keep_the_reason(reason: str) -> None:
    out = _run([START, *_text(0, ["cut"]), _message_stop(reason), _metadata()])
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_FINISHED" and terminal["metadata"]["reasonwire"]["stopReason"] == reason
    assert "pendingToolCallIds" not in terminal["outcome"]
    assert out.translator.usage_record().stop_reason == reason


def test_usage_arrives_after_message_stop_and_lands_on_run_finished_P6() -> None:
    translator = translator_for(GRAMMAR, model=CLAUDE_4)
    for raw in [START, *_text(0, ["hi"]), _message_stop()]:
        assert not any(e["type"] == "RUN_FINISHED" for e in translator.feed(raw).events)  # deferred: usage trails
    finished = translator.feed(_metadata(inputTokens=7, outputTokens=9, totalTokens=16)).events
    assert [e["type"] for e in finished] == ["RUN_FINISHED"]
    usage = finished[0]["usage"][0]
    assert (usage["inputTokens"], usage["outputTokens"], usage["totalTokens"]) == (7, 9, 16)
    assert translator.usage_record().end == "finished"


def test_eof_after_message_stop_without_metadata_is_finished_without_usage() -> None:
    out = _run([START, *_reasoning(0, ["a"], "S"), *_text(1, ["b"]), _message_stop()])
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_FINISHED" and "usage" not in terminal
    assert out.translator.usage_record().end == "finished" and out.translator.tokens.input_tokens is None
    assert [r.complete for r in out.artefacts] == [True]


def test_reasoning_tokens_stay_unknown_never_zero_and_cache_counts_normalize_P6() -> None:
    usage = {"inputTokens": 100, "outputTokens": 50, "totalTokens": 1450, "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 300}
    out = _run([START, *_text(0, ["x"]), _message_stop(), _metadata(**usage)])
    [reported] = _terminal(out)["usage"]
    assert "reasoningTokens" not in reported  # the Converse shape has no such count
    assert reported["inputTokens"] == 1400 and reported["totalTokens"] == 1450  # inputTokens excludes the cache
    assert reported["cachedInputTokens"] == 1000 and reported["cacheWriteInputTokens"] == 300
    assert out.translator.tokens.reasoning_tokens is None and out.translator.tokens.provider_raw == usage


def test_interrupted_reasoning_keeps_its_signature_as_incomplete_record_P5() -> None:
    out = _run([START, *_reasoning(0, ["partial"], "SIG-HELD", stop=False)])
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "interrupted"
    assert [(r.value, r.complete) for r in out.artefacts] == [("SIG-HELD", False)]
    assert not any(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in out.events)  # never announced
    assert "SIG-HELD" not in terminal["message"]  # P8


def test_message_stop_with_a_block_still_open_leaves_its_signature_incomplete_P5() -> None:
    out = _run([START, *_reasoning(0, ["a"], "SIG-OPEN", stop=False), _message_stop(), _metadata()])
    assert _terminal(out)["type"] == "RUN_FINISHED"
    assert [(r.value, r.complete) for r in out.artefacts] == [("SIG-OPEN", False)]


def test_abort_mid_tool_call_is_interrupted_and_names_the_call() -> None:
    translator = translator_for(GRAMMAR, run_id="run-1", thread_id="thread-1", model=CLAUDE_4)
    events = []
    for raw in [START, *_tool(0, "tooluse_A", "f", ['{"a": '])[:-1]]:
        events += translator.feed(raw).events
    events += translator.abort().events
    wire = events  # already AG-UI wire dicts
    assert wire[0]["runId"] == "run-1" and wire[-1]["code"] == "interrupted"
    assert wire[-1]["metadata"]["reasonwire"]["incompleteToolCallIds"] == ["tooluse_A"]
    assert_valid_stream(wire)


EXCEPTIONS = [
    "internalServerException",
    "modelStreamErrorException",
    "validationException",
    "throttlingException",
    "serviceUnavailableException",
]


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_exception_frames_end_the_run_with_provider_error(name: str) -> None:
    frame = _line({name: {"message": "went wrong"}})
    out = _run([START, *_reasoning(0, ["a"], "SIG-OPEN", stop=False), frame])
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "provider_error"
    assert terminal["metadata"]["reasonwire"]["providerCode"] == name
    assert name in terminal["message"] and "went wrong" in terminal["message"] and "SIG-OPEN" not in terminal["message"]
    assert [(r.value, r.complete) for r in out.artefacts] == [("SIG-OPEN", False)]
    assert out.translator.usage_record().end == "error"


def test_exception_before_any_content_is_a_valid_failed_run() -> None:
    out = _run([_line({"throttlingException": {}})])
    assert [e["type"] for e in out.events] == ["RUN_STARTED", "RUN_ERROR"]


# -- malformed known events (R7) --------------------------------------------------------------------------


def _assert_malformed(lines: list[bytes], line: int, needle: str) -> Output:
    out = translate_lines(GRAMMAR, lines, model=CLAUDE_4)
    assert out.rejected_lines == [line]
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "malformed_event"
    assert f"line {line}" in terminal["message"] and needle in terminal["message"], terminal["message"]
    assert_valid_stream(out.events)
    return out


def test_not_json_is_fatal_and_keeps_held_artefacts_R7() -> None:
    lines = [START, *_reasoning(0, ["a"], "SIG-KEPT", stop=False), b'{"contentBlockStop": {"contentBl']
    out = _assert_malformed(lines, 4, "not a JSON object")
    assert [(r.value, r.complete) for r in out.artefacts] == [("SIG-KEPT", False)]
    assert "SIG-KEPT" not in _terminal(out)["message"]


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"contentBlockDelta": {"delta": {"text": "x"}}}, "'contentBlockIndex'"),
        ({"contentBlockDelta": {"delta": {"text": "x"}, "contentBlockIndex": 0}, "metadata": {}}, "2 top-level keys"),
        ({"contentBlockDelta": {"delta": {"text": "x", "toolUse": {"input": ""}}, "contentBlockIndex": 0}}, "exactly one member"),
        ({"contentBlockDelta": {"delta": {}, "contentBlockIndex": 0}}, "exactly one member"),
        ({"contentBlockDelta": {"delta": {"text": 5}, "contentBlockIndex": 0}}, "'text' is not str"),
        ({"contentBlockDelta": {"delta": {"reasoningContent": {"redactedContent": [1, 2]}}, "contentBlockIndex": 0}}, "'redactedContent' is not str"),
        ({"contentBlockDelta": {"delta": {"toolUse": {"input": "{}"}}, "contentBlockIndex": 0}}, "toolUse delta on block 0 without contentBlockStart"),
        ({"messageStop": {}}, "'stopReason'"),
        ({"contentBlockStop": {"contentBlockIndex": 7}}, "block 7 is not open"),
        ({"contentBlockDelta": None}, "'contentBlockDelta'"),
    ],
    ids=[
        "no-index",
        "two-events",
        "two-members",
        "no-member",
        "text-not-str",
        "redacted-not-str",
        "tool-delta-without-start",
        "stop-without-reason",
        "stop-unknown-block",
        "null-payload",
    ],
)
def test_malformed_known_events_are_fatal_and_named_R7(bad: dict[str, Any], needle: str) -> None:
    _assert_malformed([START, _line(bad)], 2, needle)


def test_delta_of_another_kind_on_an_open_block_is_a_grammar_error_R7() -> None:
    _assert_malformed([START, _delta(0, {"reasoningContent": {"text": "a"}}), _delta(0, {"text": "b"})], 3, "text delta on a reasoning block")
    lines = [START, _delta(0, {"reasoningContent": {"text": "a"}}), _delta(0, {"reasoningContent": {"redactedContent": "UkVE"}})]
    _assert_malformed(lines, 3, "on a reasoning block")


def test_content_after_message_stop_is_a_grammar_error_R7() -> None:
    _assert_malformed([START, *_text(0, ["a"]), _message_stop(), _delta(1, {"text": "late"})], 5, "after messageStop")
    _assert_malformed([START, *_text(0, ["a"]), _message_stop(), _message_stop()], 5, "already stopped")


def test_block_started_twice_or_fed_after_its_stop_is_a_grammar_error_R7() -> None:
    tool = _tool(0, "tooluse_T", "f", ["{}"])
    _assert_malformed([START, tool[0], tool[0]], 3, "started twice")
    _assert_malformed([START, *_text(0, ["a"]), _delta(0, {"text": "b"})], 4, "already stopped")


def test_events_after_the_end_are_warned_and_ignored() -> None:
    out = _run([START, *_text(0, ["a"]), _message_stop(), _metadata(), _metadata()])
    assert [w.code for w in out.warnings] == ["event_after_end"]
    assert _terminal(out)["type"] == "RUN_FINISHED"


# -- empty signatures ------------------------------------------------------------------------


def test_empty_reasoning_signature_is_unsigned_never_an_encrypted_value_R3_P5() -> None:
    out = _run([START, *_reasoning(0, ["think"], ""), *_text(1, ["ok"]), _message_stop(), _metadata()])
    assert not [e for e in out.events if e["type"] == "REASONING_ENCRYPTED_VALUE"]
    assert [r.complete for r in out.artefacts] == [False]
    assert "empty_signature" in [w.code for w in out.warnings]
    assert _terminal(out)["type"] == "RUN_FINISHED"
