"""The next request after things go wrong, with the history the real @ag-ui/client holds.

Each case builds the provider streams from a fixture (cut where production cuts them, with the
grammar's own error event), translates them as the worker does, applies the AG-UI events through
``@ag-ui/client`` 1.0 (``tests/agui_client.py``) the way a UI holds them — failed runs included —
and replays. The request must be one the provider's documented rules accept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reasonwire.workers.replay import BUILDERS
from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.replay import FRAGMENT_KEY, ProviderWouldReject, replay
from reasonwire.workers.io.sse import read_events
from tests.agui_client import client_messages
from tests.conformance.oracle import LOCAL_FIXTURES, Output, assert_valid_stream, translate_lines
from tests.unit.test_replay_roundtrip import expected_of, request_model

ALL = [g for g in Grammar if g in BUILDERS]
"""Every grammar with a replay builder."""

ERROR_LINE: dict[Grammar, dict[str, Any]] = {
    Grammar.OPENAI_RESPONSES: {
        "type": "response.failed",
        "sequence_number": 9000,
        "response": {"id": "resp_failed", "status": "failed", "output": [], "error": {"code": "server_error", "message": "failed"}},
    },
    Grammar.ANTHROPIC_MESSAGES: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    Grammar.BEDROCK_CONVERSE: {"modelStreamErrorException": {"message": "interrupted", "originalStatusCode": 529}},
    Grammar.GEMINI_GENERATE_CONTENT: {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}},
    Grammar.GEMINI_INTERACTIONS: {"event_type": "error", "error": {"code": "unavailable", "message": "overloaded"}},
    Grammar.OPENAI_CHAT_COMPLETIONS: {"error": {"message": "overloaded", "type": "service_unavailable_error", "code": "server_overloaded"}},
}
"""Each grammar's mid-stream error (OpenAI ``response.failed``, Anthropic ``overloaded_error``,
Bedrock ``modelStreamErrorException``, Gemini 503, Interactions ``error``; REFERENCE §1.5–§5.2)."""


def fixture_lines(grammar: Grammar, name: str = "b_reasoning_then_tool_call") -> list[str]:
    with (LOCAL_FIXTURES / grammar.value / f"{name}.jsonl").open(encoding="utf-8") as f:
        return [e.data if isinstance(e.data, str) else e.data.decode() for e in read_events(f)]


def translate(grammar: Grammar, lines: list[str], run_id: str) -> Output:
    model = request_model(expected_of(LOCAL_FIXTURES / grammar.value / "b_reasoning_then_tool_call.jsonl"))
    out = translate_lines(grammar.value, [line.encode() for line in lines], model=model, run_id=run_id)
    assert_valid_stream(out.events)
    return out


def cut_after(grammar: Grammar, lines: list[str], event_type: str) -> list[str]:
    """The stream up to (and including) the first provider event that makes ``event_type`` appear."""
    for n in range(1, len(lines) + 1):
        out = translate_lines(grammar.value, [line.encode() for line in lines[:n]])
        if any(e["type"] == event_type for e in out.events[:-1]):  # [:-1]: not the RUN_ERROR finish() adds
            return lines[:n]
    raise AssertionError(f"{grammar.value}: no {event_type}")


def renamed(grammar: Grammar, lines: list[str], suffix: str) -> list[str]:
    """The same stream as another response: its response id and tool-call ids made distinct."""
    out = translate_lines(grammar.value, [line.encode() for line in lines])
    names = [out.translator.response_id] + [e["toolCallId"] for e in out.events if e["type"] == "TOOL_CALL_START"]
    text = "\n".join(lines)
    for name in {n for n in names if n and ":" not in n}:  # minted ids follow the response id
        text = text.replace(name, f"{name}{suffix}")
    return text.split("\n")


def target(grammar: Grammar) -> ReplayTarget:
    """The fixture's own issuer: its grammar, model and (for a grammar many providers speak) provider."""
    expected = expected_of(LOCAL_FIXTURES / grammar.value / "b_reasoning_then_tool_call.jsonl")
    return ReplayTarget(grammar=grammar, model=request_model(expected), provider=(expected.get("issuer") or {}).get("provider"))


def run_step(run_id: str, out: Output) -> dict[str, Any]:
    return {"runId": run_id, "events": out.events}


def call_ids(out: Output) -> list[str]:
    return [e["toolCallId"] for e in out.events if e["type"] == "TOOL_CALL_START"]


def unanswered_calls(grammar: Grammar, fragment: dict[str, Any]) -> list[str]:
    """Calls in the fragment with no result after them: what every provider rejects.
    Gemini generateContent pairs by position: a model call count above the following responses'."""
    items = fragment[FRAGMENT_KEY[grammar]]
    text = json.dumps(items)
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:
        calls = sum(1 for c in items if c["role"] == "model" for p in c["parts"] if "functionCall" in p)
        answers = sum(1 for c in items if c["role"] == "user" for p in c["parts"] if "functionResponse" in p)
        return ["call"] * (calls - answers)
    found = []
    for item in items:
        if grammar is Grammar.OPENAI_RESPONSES and item.get("type") == "function_call":
            found.append(item["call_id"])
        elif grammar is Grammar.GEMINI_INTERACTIONS and item.get("type") == "function_call":
            found.append(item["id"])
        for block in item.get("content") or [] if isinstance(item.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                found.append(block["id"])
            elif isinstance(block, dict) and "toolUse" in block:
                found.append(block["toolUse"]["toolUseId"])
    return [c for c in found if text.count(json.dumps(c)) < 2]


# -- retry after a run that failed (or was cut) after a complete tool call ----------------------------


def failed_after_call(grammar: Grammar, *, interrupted: bool = False) -> tuple[Output, list[ArtefactRecord]]:
    lines = cut_after(grammar, fixture_lines(grammar), "TOOL_CALL_END")
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:  # the call's chunk also ended the turn: not this time
        last = json.loads(lines[-1])
        for candidate in last["candidates"]:
            candidate.pop("finishReason", None)
        lines[-1] = json.dumps(last)
    if not interrupted:
        lines.append(json.dumps(ERROR_LINE[grammar]))
    out = translate(grammar, lines, "run-failed")
    assert out.events[-1]["type"] == "RUN_ERROR"
    assert call_ids(out), "the failed run emitted a complete tool call"
    return out, out.artefacts


@pytest.mark.parametrize("interrupted", [False, True], ids=["provider_error", "interrupted"])
@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_retrying_the_same_messages_after_a_failed_tool_call_turn_sends_no_unanswered_call(
    grammar: Grammar, interrupted: bool
) -> None:
    """The client got RUN_ERROR, ran no tool, and runs the agent again with what it holds."""
    out, artefacts = failed_after_call(grammar, interrupted=interrupted)
    user = {"id": "user-1", "role": "user", "content": "What is 250 USD in EUR?"}
    history = client_messages([{"add": user}, run_step("run-failed", out)])
    assert any(m.get("toolCalls") for m in history), "the reference client holds the failed run's call"
    result = replay(history, artefacts, target(grammar))
    items = result.fragment[FRAGMENT_KEY[grammar]]
    assert unanswered_calls(grammar, result.fragment) == []
    assert len(items) == 1, items  # the user's message alone: the retry produces the turn again
    warned = [w for w in result.warnings if w.code == "unanswered_tool_call"]
    assert [w.entity_id for w in warned] == call_ids(out)
    assert all(call_id in w.message for w, call_id in zip(warned, call_ids(out), strict=True))


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_a_new_user_turn_after_a_failed_tool_call_turn_leaves_the_call_and_its_reasoning_out(
    grammar: Grammar,
) -> None:
    """The user says "try again": the failed turn stays history, its unanswered call (and the reasoning
    that led only to it, e.g. OpenAI's reasoning item before the function_call) does not."""
    out, artefacts = failed_after_call(grammar)
    history = client_messages(
        [
            {"add": {"id": "user-1", "role": "user", "content": "What is 250 USD in EUR?"}},
            run_step("run-failed", out),
            {"add": {"id": "user-2", "role": "user", "content": "Try again."}},
        ]
    )
    result = replay(history, artefacts, target(grammar))
    assert unanswered_calls(grammar, result.fragment) == []
    sent = json.dumps(result.fragment)
    for call_id in call_ids(out):
        assert json.dumps(call_id) not in sent
    if not any(e["type"] == "TEXT_MESSAGE_START" for e in out.events):
        assert result.counters["artefacts_replayed"] == 0  # the failed run's state justified only the call
    if grammar is Grammar.OPENAI_RESPONSES:  # the reasoning item before the function_call goes with it
        assert '"type": "reasoning"' not in sent
    assert "Try again." in sent


# -- a run cut off mid-reasoning inside an open tool loop, then retried -------------------------------


LOOP_GRAMMARS = [Grammar.ANTHROPIC_MESSAGES, Grammar.BEDROCK_CONVERSE, Grammar.GEMINI_INTERACTIONS]


@pytest.mark.parametrize("grammar", LOOP_GRAMMARS, ids=lambda g: g.value)
def test_partial_reasoning_of_a_run_cut_inside_a_tool_loop_is_left_out_of_the_retried_request(
    grammar: Grammar,
) -> None:
    """user → run 1 (reasoning, call) → result → run 2 cut mid-reasoning (RUN_ERROR interrupted) →
    run 3, the retry (signed reasoning, call) → result. The client holds run 2's partial reasoning
    marked incomplete; the request goes out without it, with runs 1 and 3 whole."""
    base = fixture_lines(grammar)
    first = translate(grammar, base, "run-1")
    cut = translate(grammar, cut_after(grammar, renamed(grammar, base, "cut"), "REASONING_MESSAGE_CONTENT"), "run-2")
    assert cut.events[-1]["type"] == "RUN_ERROR" and not cut.artefacts or not any(a.complete for a in cut.artefacts)
    retry = translate(grammar, renamed(grammar, base, "retry"), "run-3")
    steps: list[dict[str, Any]] = [{"add": {"id": "user-1", "role": "user", "content": "What is 250 USD in EUR?"}}]
    for run_id, out in (("run-1", first), ("run-2", cut), ("run-3", retry)):
        steps.append(run_step(run_id, out))
        steps += [{"add": {"id": f"result-{c}", "role": "tool", "toolCallId": c, "content": '{"rate": 0.92}'}} for c in call_ids(out)]
    history = client_messages(steps)
    partial = [m for m in history if m["role"] == "reasoning" and (m.get("metadata") or {}).get("reasonwire", {}).get("incomplete")]
    assert len(partial) == 1, "the reference client holds the cut run's reasoning, marked incomplete"

    result = replay(history, first.artefacts + cut.artefacts + retry.artefacts, target(grammar))

    sent = json.dumps(result.fragment)
    assert json.dumps(partial[0]["content"]) not in sent  # as a whole text (runs 1 and 3 share its words)
    assert [w.entity_id for w in result.warnings if w.code == "interrupted_reasoning"] == [partial[0]["id"]]
    complete = [a for a in first.artefacts + retry.artefacts if a.complete]
    assert result.counters["artefacts_replayed"] == len(complete)
    assert all(json.dumps(a.value) in sent for a in complete)
    assert unanswered_calls(grammar, result.fragment) == []


@pytest.mark.parametrize("grammar", LOOP_GRAMMARS, ids=lambda g: g.value)
def test_partial_reasoning_in_the_open_loop_is_left_out_for_a_client_that_kept_no_metadata(
    grammar: Grammar,
) -> None:
    """A client that drops event metadata still gets the request out when the store holds the cut
    unit's record as incomplete; and never when its unit was only the retried one's (no guess)."""
    base = fixture_lines(grammar)
    first = translate(grammar, base, "run-1")
    cut = translate(grammar, cut_after(grammar, renamed(grammar, base, "cut"), "REASONING_MESSAGE_CONTENT"), "run-2")
    retry = translate(grammar, renamed(grammar, base, "retry"), "run-3")
    steps: list[dict[str, Any]] = [{"add": {"id": "user-1", "role": "user", "content": "Go."}}]
    for run_id, out in (("run-1", first), ("run-2", cut), ("run-3", retry)):
        steps.append(run_step(run_id, out))
        steps += [{"add": {"id": f"result-{c}", "role": "tool", "toolCallId": c, "content": "{}"}} for c in call_ids(out)]
    history = [{k: v for k, v in m.items() if k != "metadata"} for m in client_messages(steps)]
    if not any(not a.complete for a in cut.artefacts):
        with pytest.raises(ProviderWouldReject):  # nothing says the unit was cut: refused, not guessed
            replay(history, first.artefacts + cut.artefacts + retry.artefacts, target(grammar))
        return
    result = replay(history, first.artefacts + cut.artefacts + retry.artefacts, target(grammar))
    assert unanswered_calls(grammar, result.fragment) == []


def test_fixture_streams_exist() -> None:
    for grammar in ALL:
        assert Path(LOCAL_FIXTURES / grammar.value / "b_reasoning_then_tool_call.jsonl").exists()


# -- minted tool-call ids in every target grammar -----------------------------------------------------

ID_RULES: dict[Grammar, tuple[str, int | None]] = {
    Grammar.ANTHROPIC_MESSAGES: (r"[a-zA-Z0-9_-]+", None),  # tool_use.id ^[a-zA-Z0-9_-]+$
    Grammar.BEDROCK_CONVERSE: (r"[a-zA-Z0-9_-]+", 64),  # toolUseId: 1–64 of [a-zA-Z0-9_-]
    Grammar.OPENAI_RESPONSES: (r".+", None),  # call_id: no documented constraint
    Grammar.GEMINI_INTERACTIONS: (r".+", None),  # function_call.id: no documented constraint
    Grammar.GEMINI_GENERATE_CONTENT: (r".+", None),  # minted ids are never sent
    Grammar.OPENAI_CHAT_COMPLETIONS: (r".+", None),  # tool_calls[].id: no documented constraint
}
TARGET_MODELS = {
    Grammar.ANTHROPIC_MESSAGES: "claude-sonnet-4-5",
    Grammar.BEDROCK_CONVERSE: "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    Grammar.OPENAI_RESPONSES: "gpt-5",
    Grammar.GEMINI_INTERACTIONS: "gemini-3-flash-preview",
    Grammar.GEMINI_GENERATE_CONTENT: "gemini-2.5-flash",
    Grammar.OPENAI_CHAT_COMPLETIONS: "deepseek-v4-pro",
}


def call_and_result_ids(grammar: Grammar, items: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    calls: list[str] = []
    results: list[str] = []
    for item in items:
        kind = item.get("type")
        calls += [call["id"] for call in item.get("tool_calls") or []]  # Chat Completions
        if item.get("role") == "tool":
            results.append(item["tool_call_id"])
        if kind == "function_call":
            calls.append(item.get("call_id", item.get("id")))
        elif kind in ("function_call_output", "function_result"):
            results.append(item["call_id"])
        for block in item.get("content") or [] if isinstance(item.get("content"), list) else []:
            if block.get("type") == "tool_use":
                calls.append(block["id"])
            elif block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
            elif "toolUse" in block:
                calls.append(block["toolUse"]["toolUseId"])
            elif "toolResult" in block:
                results.append(block["toolResult"]["toolUseId"])
        for part in item.get("parts") or []:
            if "functionCall" in part and "id" in part["functionCall"]:
                calls.append(part["functionCall"]["id"])
            if "functionResponse" in part and "id" in part["functionResponse"]:
                results.append(part["functionResponse"]["id"])
    return calls, results


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_a_minted_gemini_call_id_is_valid_in_every_target_grammar_call_and_result_alike(
    grammar: Grammar,
) -> None:
    """Gemini 2.5 calls carry no id; reasonwire mints ``<responseId>:tool:0``. After the loop closed,
    the user switches to another provider: each grammar's id rule holds, the result still pairs."""
    gemini = Grammar.GEMINI_GENERATE_CONTENT
    out = translate(gemini, fixture_lines(gemini), "run-gemini")
    minted = call_ids(out)
    assert minted and all(":" in c for c in minted)
    steps: list[dict[str, Any]] = [{"add": {"id": "user-1", "role": "user", "content": "250 USD in EUR?"}}, run_step("run-gemini", out)]
    steps += [{"add": {"id": f"result-{c}", "role": "tool", "toolCallId": c, "content": '{"rate": 0.92}'}} for c in minted]
    steps += [
        {"add": {"id": "answer-1", "role": "assistant", "content": "About 230 EUR."}},
        {"add": {"id": "user-2", "role": "user", "content": "And in GBP?"}},
    ]
    history = client_messages(steps)
    result = replay(history, out.artefacts, ReplayTarget(grammar=grammar, model=TARGET_MODELS[grammar]))
    calls, results = call_and_result_ids(grammar, result.fragment[FRAGMENT_KEY[grammar]])
    pattern, limit = ID_RULES[grammar]
    assert calls == results  # call and result alike
    for call_id in calls:
        assert __import__("re").fullmatch(pattern, call_id), call_id
        assert limit is None or len(call_id) <= limit
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:
        assert calls == []  # a minted id is never sent back to Gemini
    else:
        assert len(calls) == len(minted)


@pytest.mark.parametrize("grammar", [Grammar.ANTHROPIC_MESSAGES, Grammar.BEDROCK_CONVERSE], ids=lambda g: g.value)
def test_a_call_id_too_long_or_with_foreign_characters_is_rewritten_consistently(grammar: Grammar) -> None:
    """Any id the target refuses (another provider's, 80 characters, dots) goes out rewritten, the
    same for the call and its result, distinct for distinct ids; a valid id is left alone."""
    long_id, dotted, valid = "call_" + "x" * 80, "fc.1/a b", "toolu_01ABCdef-_9"
    history = [{"id": "u", "role": "user", "content": "Go."}]
    for call_id in (long_id, dotted, valid):
        history += [
            {"id": f"a-{call_id}", "role": "assistant", "toolCalls": [{"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"id": f"t-{call_id}", "role": "tool", "toolCallId": call_id, "content": "{}"},
        ]
    history.append({"id": "u2", "role": "user", "content": "Thanks."})
    result = replay(history, [], ReplayTarget(grammar=grammar, model=TARGET_MODELS[grammar]))
    calls, results = call_and_result_ids(grammar, result.fragment[FRAGMENT_KEY[grammar]])
    assert calls == results and len(set(calls)) == 3
    assert calls[2] == valid
    pattern, limit = ID_RULES[grammar]
    for call_id in calls:
        assert __import__("re").fullmatch(pattern, call_id) and (limit is None or len(call_id) <= limit), call_id
    refused = [long_id, dotted] if limit is not None else [dotted]  # Anthropic sets no length in the rule
    assert [w.entity_id for w in result.warnings if w.code == "call_id_rewritten"] == refused


# -- a Gemini text signature stays on the part it rode ------------------------------------------------


def gemini_chunk(parts: list[dict[str, Any]], *, last: bool = False) -> str:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if last:
        candidate["finishReason"] = "STOP"
    chunk: dict[str, Any] = {"candidates": [candidate], "responseId": "resp-item4", "modelVersion": "gemini-2.5-flash"}
    if last:
        chunk["usageMetadata"] = {"promptTokenCount": 5, "candidatesTokenCount": 9, "totalTokenCount": 14}
    return json.dumps(chunk, ensure_ascii=False)


@pytest.mark.parametrize(
    ("before", "signed", "thought"),
    [
        ("It is 21.5 °C in Paris", ".", False),
        ("Line one\nLine two", "\n", False),
        ("In the end the answer", " the", False),
        ("**Weighing**\n\nThe rate is 0.92. So", ".", True),
    ],
    ids=["period", "newline", "word", "thought"],
)
def test_a_signed_gemini_chunk_whose_text_occurs_earlier_goes_back_on_its_own_part(
    before: str, signed: str, thought: bool
) -> None:
    """Google: a text response's signature rides its last part, parts go back verbatim. A signed
    last chunk "." (or "\\n", " the") also found earlier in the answer must not be located by a search."""
    grammar = Grammar.GEMINI_GENERATE_CONTENT
    flag = {"thought": True} if thought else {}
    lines = [gemini_chunk([{"text": before, **flag}]), gemini_chunk([{"text": signed, **flag, "thoughtSignature": "Q2lnbmVk+sig=="}])]
    if thought:
        lines.append(gemini_chunk([{"text": "About 230 EUR."}]))
    lines.append(gemini_chunk([], last=True))
    out = translate_lines(grammar.value, [line.encode() for line in lines], model="gemini-2.5-flash", run_id="run-4")
    assert_valid_stream(out.events)
    history = client_messages([{"add": {"id": "user-1", "role": "user", "content": "Weather?"}}, run_step("run-4", out)])
    history.append({"id": "user-2", "role": "user", "content": "Thanks."})
    result = replay(history, out.artefacts, ReplayTarget(grammar=grammar, model="gemini-2.5-flash"))
    model = [c for c in result.fragment["contents"] if c["role"] == "model"]
    assert len(model) == 1
    parts = model[0]["parts"]
    want = [{"text": before, **flag}, {"text": signed, **flag, "thoughtSignature": "Q2lnbmVk+sig=="}]
    assert parts[:2] == want


# -- a public-audience client, a redacted block after thinking ----------------------------------------

SIG, REDACTED = "EqQBCkYIBRgCKkB+thinking/sig==", "RWRhY3RlZCBieXRlcw+opaque=="
ITEM3_STREAMS: dict[Grammar, list[dict[str, Any]]] = {
    # Anthropic's own documented order: thinking, redacted_thinking, tool_use (REFERENCE §2.5)
    Grammar.ANTHROPIC_MESSAGES: [
        {"type": "message_start", "message": {"id": "msg_item3", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I need the rate."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": SIG}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": REDACTED}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_item3", "name": "get_rate", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"base": "USD"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ],
    Grammar.BEDROCK_CONVERSE: [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"reasoningContent": {"text": "I need the rate."}}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"reasoningContent": {"signature": SIG}}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"reasoningContent": {"redactedContent": REDACTED}}, "contentBlockIndex": 1}},
        {"contentBlockStop": {"contentBlockIndex": 1}},
        {"contentBlockStart": {"start": {"toolUse": {"toolUseId": "tooluse_item3", "name": "get_rate"}}, "contentBlockIndex": 2}},
        {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"base": "USD"}'}}, "contentBlockIndex": 2}},
        {"contentBlockStop": {"contentBlockIndex": 2}},
        {"messageStop": {"stopReason": "tool_use"}},
        {"metadata": {"usage": {"inputTokens": 10, "outputTokens": 40, "totalTokens": 50}, "metrics": {"latencyMs": 100}}},
    ],
}
ITEM3_MODELS = {Grammar.ANTHROPIC_MESSAGES: "claude-sonnet-4-5", Grammar.BEDROCK_CONVERSE: "us.anthropic.claude-sonnet-4-5-20250929-v1:0"}


@pytest.mark.parametrize("grammar", list(ITEM3_STREAMS), ids=lambda g: g.value)
def test_a_public_client_gets_the_trusted_clients_turn_when_redacted_thinking_follows_thinking(
    grammar: Grammar,
) -> None:
    """The public stream hides the redacted block; the store holds it. The tool call's start event
    carries its block index, so the hidden block is put back between the thinking and the call —
    the same open-loop request the trusted client gets, not "place … ambiguous"."""
    from reasonwire.contracts.policy import Audience, RetentionPolicy
    from reasonwire.workers.core.audience import AudienceFilter

    model = ITEM3_MODELS[grammar]
    lines = [json.dumps(e) for e in ITEM3_STREAMS[grammar]]
    out = translate_lines(grammar.value, [line.encode() for line in lines], model=model, run_id="run-3")
    assert_valid_stream(out.events)
    audience = AudienceFilter(RetentionPolicy().rule(Audience.PUBLIC))
    public_events = [e for e in (audience.admit(e) for e in out.events) if e is not None]
    assert len(public_events) < len(out.events)  # the redacted block was hidden

    def held(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        steps = [{"add": {"id": "user-1", "role": "user", "content": "Rate?"}}, {"runId": "run-3", "events": events}]
        steps += [{"add": {"id": f"r-{c}", "role": "tool", "toolCallId": c, "content": '{"rate": 0.92}'}} for c in call_ids(out)]
        return client_messages(steps)

    wanted = ReplayTarget(grammar=grammar, model=model)
    trusted = replay(held(out.events), out.artefacts, wanted)
    public = replay(held(public_events), out.artefacts, wanted)
    assert public.fragment == trusted.fragment
    assistant = trusted.fragment["messages"][1]["content"]
    assert len(assistant) == 3 and REDACTED in json.dumps(assistant[1]) and SIG in json.dumps(assistant[0])
    assert "unseen_unit_not_placed" not in [w.code for w in public.warnings]


# -- decision: Gemini 3 → 2.5 inside a tool loop ---------------------------------------------------------------


def test_a_gemini_3_tool_loop_continued_on_gemini_2_5_goes_through_unsigned() -> None:
    """Gemini 2.5 does not validate call signatures (REFERENCE §3.3: Gemini 3 does): the 3 signature is
    another model's (foreign_issuer, left out) and the call goes unsigned instead of a refusal that
    blocks a fallback from an overloaded Gemini 3. Into Gemini 3 the loop stays refused."""
    grammar = Grammar.GEMINI_GENERATE_CONTENT
    out = translate_lines(grammar.value, [line.encode() for line in fixture_lines(grammar)], model="gemini-3-flash-preview", run_id="run-g3")
    assert out.translator.model.startswith("gemini-3")
    steps: list[dict[str, Any]] = [{"add": {"id": "user-1", "role": "user", "content": "250 USD in EUR?"}}, run_step("run-g3", out)]
    steps += [{"add": {"id": f"r-{c}", "role": "tool", "toolCallId": c, "content": '{"rate": 0.92}'}} for c in call_ids(out)]
    history = client_messages(steps)
    result = replay(history, out.artefacts, ReplayTarget(grammar=grammar, model="gemini-2.5-flash"))
    assert "thoughtSignature" not in json.dumps(result.fragment)
    assert "foreign_issuer" in [w.code for w in result.warnings]
    assert unanswered_calls(grammar, result.fragment) == []
    with pytest.raises(ProviderWouldReject):
        replay(history, out.artefacts, ReplayTarget(grammar=grammar, model="gemini-3-pro-preview"))


# -- from the command line: `reasonwire replay` after a failed run ------------------------------------


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_replay_command_after_a_failed_tool_call_turn_exits_0_with_a_request_the_provider_accepts(
    grammar: Grammar, tmp_path: Path
) -> None:
    """`reasonwire translate --artefacts` on the failed run, the client's history after it plus "try
    again", `reasonwire replay`: exit 0, no unanswered call in the fragment, the call id on stderr."""
    import subprocess
    import sys

    lines = cut_after(grammar, fixture_lines(grammar), "TOOL_CALL_END")
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:
        last = json.loads(lines[-1])
        last["candidates"][0].pop("finishReason", None)
        lines[-1] = json.dumps(last)
    capture = tmp_path / "capture.jsonl"
    capture.write_text("\n".join([*lines, json.dumps(ERROR_LINE[grammar])]) + "\n", encoding="utf-8")
    artefacts = tmp_path / "artefacts.jsonl"
    model = target(grammar).model or ""

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", *args], input=stdin, capture_output=True, text=True, check=False)

    done = cli("translate", "--provider", grammar.value, "--model", model, "--artefacts", str(artefacts), str(capture))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["type"] == "RUN_ERROR"
    calls = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"]
    history = client_messages(
        [
            {"add": {"id": "user-1", "role": "user", "content": "What is 250 USD in EUR?"}},
            {"runId": events[0]["runId"], "events": events},
            {"add": {"id": "user-2", "role": "user", "content": "Try again."}},
        ]
    )
    done = cli("replay", "--provider", grammar.value, "--model", model, "--artefacts", str(artefacts), "-",
               stdin=json.dumps({"threadId": "thread-1", "runId": "run-2", "messages": history}))
    assert done.returncode == 0, done.stderr
    assert unanswered_calls(grammar, json.loads(done.stdout)) == []
    assert all(call_id in done.stderr for call_id in calls)
