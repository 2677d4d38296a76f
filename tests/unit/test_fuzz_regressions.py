"""Hostile input never crashes a translator or breaks AG-UI: fuzz findings as regressions.

Two kinds of tests:

* every minimized case the fuzzer found on the code before the fixes
  (``tests/fixtures/fuzz/*.json``, written by ``python -m fuzz``) runs clean
  through the same oracle ``make fuzz`` uses — no exception, no safety-net
  hit, valid ``ag_ui.core`` events, ``ag-ui-validate`` clean with warnings as
  failures;
* one focused test per rule the fixes established (R1, R7, AGUI204, usage
  range, limits), stating the behaviour rather than only its absence of crash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fuzz.cases import read_case
from fuzz.corpus import Line
from fuzz.oracle import Case, run_case
from tests.conformance.oracle import assert_valid_stream
from reasonwire.workers.core.limits import MAX_NESTING, MAX_TOKEN_COUNT
from reasonwire.workers.core.translator import Translation
from reasonwire.workers.core.wire import event_json, record_json
from reasonwire.workers.translators import translator_for
from reasonwire.workers.translators.anthropic_messages import AnthropicMessagesTranslator

CASES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "fuzz").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fuzz_finding_stays_fixed(path: Path) -> None:
    case, facts = read_case(path)
    findings = run_case(case).findings
    assert not findings, f"{facts['signature']} is back: {[f.signature for f in findings]}"


def test_regression_cases_are_present() -> None:
    """The campaign on the old code found these classes; each must have a case on file."""
    assert len(CASES) >= 10


# -- helpers --------------------------------------------------------------------------


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _run(grammar: str, lines: list[bytes | str], *, sse: list[str | None] | None = None, **kwargs: Any) -> list[Translation]:
    t = translator_for(grammar, **kwargs)
    outs = [t.feed(line, sse_event=(sse[i] if sse else None)) for i, line in enumerate(lines)]
    outs.append(t.finish())
    return outs


def _events(outs: list[Translation]) -> list[dict[str, Any]]:
    events = [json.loads(event_json(e)) for o in outs for e in o.events]
    for o in outs:
        for record in o.artefacts:
            record_json(record)
    return events


def _terminal(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    return events[-1]


def _anthropic(*body: dict[str, Any], usage: dict[str, Any] | None = None, stop: str = "end_turn") -> list[bytes]:
    start = {"type": "message_start", "message": {"id": "msg_F", "model": "claude-sonnet-4-5", "usage": usage or {}}}
    end = [{"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 3}}, {"type": "message_stop"}]
    return [_line(o) for o in (start, *body, *end)]


def _tool_block(index: int, partial: list[str], *, tool_id: str = "toolu_1", name: str = "f") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}}
    ]
    out += [{"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}} for p in partial]
    out.append({"type": "content_block_stop", "index": index})
    return out


# -- tool calls whose arguments are cut off (AGUI204) -------------------------------------


def test_agui204_block_stop_with_cut_off_arguments_ends_run_error_not_tool_call_end() -> None:
    """max_tokens mid-arguments: the call is never ended (its arguments are not JSON), the text
    after it still streams, and the run ends RUN_ERROR incomplete_tool_call, stop reason kept."""
    text = [
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "after"}},
        {"type": "content_block_stop", "index": 1},
    ]
    outs = _run("anthropic-messages", _anthropic(*_tool_block(0, ['{"city": "Par']), *text, stop="max_tokens"))
    events = _events(outs)
    assert_valid_stream(events)
    assert "TOOL_CALL_END" not in [e["type"] for e in events]
    assert "TEXT_MESSAGE_END" in [e["type"] for e in events]
    end = _terminal(events)
    assert end["type"] == "RUN_ERROR" and end["code"] == "incomplete_tool_call"
    assert end["metadata"]["reasonwire"] == {"stopReason": "max_tokens", "incompleteToolCallIds": ["toolu_1"]}
    assert not any(o.rejection for o in outs)  # a truncated call is not a malformed event


def test_agui204_no_argument_call_still_ends_and_run_finishes() -> None:
    """A call that streamed no arguments is a no-argument call (ag-ui-validate AGUI204 agrees)."""
    lines = [
        _line({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}}),
        _line({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "now", "arguments": ""}}),
        _line({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "now", "arguments": ""}}),
        _line({"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}),
    ]
    events = _events(_run("openai-responses", lines))
    assert_valid_stream(events)
    assert [e["type"] for e in events][-2:] == ["TOOL_CALL_END", "RUN_FINISHED"]


def test_agui204_bedrock_message_stop_with_tool_use_open_and_arguments_cut_off() -> None:
    lines = [
        _line({"messageStart": {"role": "assistant"}}),
        _line({"contentBlockStart": {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tu_1", "name": "f"}}}}),
        _line({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"toolUse": {"input": '{"a": ['}}}}),
        _line({"messageStop": {"stopReason": "max_tokens"}}),
        _line({"metadata": {"usage": {"inputTokens": 3, "outputTokens": 4}}}),
    ]
    events = _events(_run("bedrock-converse", lines, model="anthropic.claude-sonnet-4"))
    assert_valid_stream(events)
    end = _terminal(events)
    assert end["code"] == "incomplete_tool_call" and end["usage"][0]["outputTokens"] == 4


# -- limits (R7) ------------------------------------------------------------------------------


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 300, 1000])
def test_r7_event_nested_beyond_the_limit_is_malformed(depth: int) -> None:
    """Tool input nested deeper than the limit: RUN_ERROR + rejection, never an orjson/pydantic
    recursion error in the translator or in the worker's serialization."""
    body = _tool_block(0, [])
    body[0]["content_block"]["input"] = "DEEP"  # spliced in as text: Python's encoder recurses
    deep = '{"a":' * depth + "1" + "}" * depth
    outs = _run("anthropic-messages", [line.replace(b'"DEEP"', deep.encode()) for line in _anthropic(*body)])
    events = _events(outs)
    assert_valid_stream(events)
    assert _terminal(events)["code"] == "malformed_event"
    assert any(o.rejection and f"nested deeper than {MAX_NESTING}" in o.rejection.reason for o in outs)


def test_r7_nesting_at_the_limit_passes() -> None:
    body = _tool_block(0, [])
    body[0]["content_block"]["input"] = _deep(MAX_NESTING - 5)  # the event adds its own levels
    events = _events(_run("anthropic-messages", _anthropic(*body)))
    assert_valid_stream(events)
    assert _terminal(events)["type"] == "RUN_FINISHED"


def test_agui204_streamed_arguments_deeper_than_the_limit_are_incomplete() -> None:
    """JSON text inside a string is not limited by the event's nesting: the call is cut off."""
    deep = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    events = _events(_run("anthropic-messages", _anthropic(*_tool_block(0, [deep]))))
    assert_valid_stream(events)
    assert _terminal(events)["code"] == "incomplete_tool_call"


@pytest.mark.parametrize(
    "usage",
    [{"input_tokens": MAX_TOKEN_COUNT + 1}, {"input_tokens": 2**64}, {"output_tokens": -1}, {"cache_read_input_tokens": 10**30}],
)
def test_r7_token_count_outside_agui_range_is_malformed(usage: dict[str, Any]) -> None:
    outs = _run("anthropic-messages", _anthropic(usage=usage))
    events = _events(outs)
    assert_valid_stream(events)
    assert _terminal(events)["code"] == "malformed_event"


def test_usage_total_beyond_range_is_left_out_with_a_warning() -> None:
    """Each count is in range, their sum is not: inputTokens is omitted, never wrapped or clamped."""
    usage = {"input_tokens": MAX_TOKEN_COUNT, "cache_read_input_tokens": 10}
    outs = _run("anthropic-messages", _anthropic(usage=usage))
    events = _events(outs)
    assert_valid_stream(events)
    reported = _terminal(events)["usage"][0]
    assert "inputTokens" not in reported and "totalTokens" not in reported and reported["outputTokens"] == 3
    assert any(w.code == "usage_out_of_range" for o in outs for w in o.warnings)


@pytest.mark.parametrize("field", ["inputTokens", "outputTokens", "cacheReadInputTokens"])
def test_r7_bedrock_negative_token_count_is_malformed(field: str) -> None:
    usage = {"inputTokens": 1, "outputTokens": 1, field: -5}
    lines = [_line({"messageStart": {"role": "assistant"}}), _line({"messageStop": {"stopReason": "end_turn"}}), _line({"metadata": {"usage": usage}})]
    events = _events(_run("bedrock-converse", lines))
    assert _terminal(events)["code"] == "malformed_event"


@pytest.mark.parametrize(("tool_id", "name"), [("", "f"), ("toolu_1", "")])
def test_r7_empty_tool_call_id_or_name_is_malformed(tool_id: str, name: str) -> None:
    outs = _run("anthropic-messages", _anthropic(*_tool_block(0, ["{}"], tool_id=tool_id, name=name)))
    events = _events(outs)
    assert_valid_stream(events)
    assert "TOOL_CALL_START" not in [e["type"] for e in events]
    assert any(o.rejection for o in outs)


# -- routing, encodings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sse_event",
    [
        "response.reasoning_summary_text.delta",
        "response.created",
        "response.completed",
        "response.output_text.done",
        "response.content_part.added",
        "response.web_search_call.searching",
    ],
)
def test_r7_openai_payload_without_type_routed_by_sse_name(sse_event: str) -> None:
    """The worker passes the SSE event name; a payload without ``type`` is routed by it and
    judged on its fields (R7), never a KeyError."""
    outs = _run("openai-responses", [b"{}"], sse=[sse_event])
    assert_valid_stream(_events(outs))


def test_openai_response_start_routed_by_sse_name_is_translated() -> None:
    lines = [_line({"response": {"id": "resp_9", "model": "gpt-5"}}), _line({"response": {"id": "resp_9", "status": "completed"}})]
    events = _events(_run("openai-responses", lines, sse=["response.created", "response.completed"]))
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_FINISHED"]


@pytest.mark.parametrize("kind", [{}, [], 1.5])
def test_r7_container_as_event_type_is_an_unknown_event(kind: Any) -> None:
    events = _events(_run("openai-responses", [_line({"type": kind})]))
    assert_valid_stream(events)


@pytest.mark.parametrize("grammar", ["openai-responses", "anthropic-messages", "gemini-generate-content", "gemini-interactions", "bedrock-converse"])
def test_lone_surrogate_in_first_str_line_without_run_id(grammar: str) -> None:
    """The fallback run id hashes the line as it came, surrogates and all; the line is not JSON (R7)."""
    outs = _run(grammar, ['{"type": "x\ud800"}'], run_id=None)
    events = _events(outs)
    assert_valid_stream(events)
    assert events[0]["runId"].startswith("run-") and outs[0].rejection is not None


def test_bedrock_signature_record_of_an_interrupted_block_keeps_its_text() -> None:
    """The reasoning text is joined once, when the record is made — also for an incomplete record."""
    delta = lambda member, value: _line({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {member: value}}}})  # noqa: E731
    lines = [_line({"messageStart": {"role": "assistant"}}), delta("text", "a"), delta("signature", "s1"), delta("text", "b"), delta("signature", "s2")]
    outs = _run("bedrock-converse", lines, model="anthropic.claude-sonnet-4")
    records = [r for o in outs for r in o.artefacts]
    assert len(records) == 1 and not records[0].complete and records[0].value == "s2"
    assert records[0].native.block == {"reasoningContent": {"reasoningText": {"text": "ab"}}}


# -- the safety net ------------------------------------------------------------------------------


def test_safety_net_turns_an_unexpected_exception_into_run_error_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in a handler never escapes feed(): RUN_ERROR internal_error, the event rejected
    (dead-lettered by the worker), a warning naming the exception type, not its message."""

    def broken(self: Any, obj: dict[str, Any]) -> None:
        self.run.start_text("t", "msg-t")
        raise KeyError("secret provider content")

    monkeypatch.setitem(AnthropicMessagesTranslator.HANDLERS, "ping", broken)
    outs = _run("anthropic-messages", [*_anthropic()[:1], _line({"type": "ping"}), _line({"type": "message_stop"})])
    events = _events(outs)
    assert_valid_stream(events)
    end = _terminal(events)
    assert end["code"] == "internal_error" and "secret" not in end["message"]
    assert outs[1].rejection is not None
    assert [w.code for w in outs[1].warnings] == ["internal_error"] and "KeyError" in outs[1].warnings[0].message
    assert not outs[2].events and not outs[3].events  # the run is over


def test_safety_net_with_broken_bookkeeping_still_ends_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, obj: dict[str, Any]) -> None:
        self.run._open = None  # the discipline itself is broken: closing units fails too
        raise RuntimeError("bug")

    monkeypatch.setitem(AnthropicMessagesTranslator.HANDLERS, "ping", broken)
    outs = _run("anthropic-messages", [*_anthropic()[:1], _line({"type": "ping"})])
    events = _events(outs)
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "internal_error"


def test_fuzz_oracle_reports_safety_net_hits_as_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The safety net must not hide a bug from the fuzzer."""

    def broken(self: Any, obj: dict[str, Any]) -> None:
        raise ValueError("bug")

    monkeypatch.setitem(AnthropicMessagesTranslator.HANDLERS, "ping", broken)
    case = Case("anthropic-messages", [Line(b'{"type":"ping"}')])
    assert [f.kind for f in run_case(case).findings] == ["safety_net"]
