"""Replay rules: issuer matching (R8, P5), which copy wins (R3, R5), ordering, failing before
the call, model families, and what an interrupted or edited history leaves out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonwire.workers.replay import BUILDERS
from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from tests.conformance.oracle import LOCAL_FIXTURES, fixture_paths
from tests.unit.test_replay_roundtrip import (
    client_history,
    expected_of,
    opaque_hashes,
    replay_items,
    request_model,
    tool_results,
    translate,
    user_text,
)
from reasonwire.workers.replay import FRAGMENT_KEY, InvalidHistory, ProviderWouldReject, model_family, replay, same_family
from reasonwire.workers.translators import implemented

ANTHROPIC_A = LOCAL_FIXTURES / "anthropic-messages" / "a_reasoning_then_answer.jsonl"
ANTHROPIC_B = LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.jsonl"
OPENAI_B = LOCAL_FIXTURES / "openai-responses" / "b_reasoning_then_tool_call.jsonl"
SONNET = "claude-sonnet-4-5-20250929"

OTHER_FAMILY = {
    Grammar.ANTHROPIC_MESSAGES: "claude-opus-4-1-20250805",
    Grammar.OPENAI_RESPONSES: "o3-2025-04-16",
    Grammar.GEMINI_GENERATE_CONTENT: "gemini-2.5-pro",
    Grammar.GEMINI_INTERACTIONS: "gemini-2.5-pro",
    Grammar.BEDROCK_CONVERSE: "us.anthropic.claude-opus-4-1-20250805-v1:0",
    Grammar.OPENAI_CHAT_COMPLETIONS: "gpt-4.1",  # OpenAI's own: another provider than the samples' DeepSeek
}
"""A model of another family than each sample's, per grammar."""


def implemented_samples(case: str) -> list[Path]:
    """The sample stream of ``case`` for every grammar that has a translator."""
    return [
        LOCAL_FIXTURES / g.value / f"{case}.jsonl"
        for g in Grammar
        if g in implemented() and g in BUILDERS and (LOCAL_FIXTURES / g.value / f"{case}.jsonl").exists()
    ]


def history_of(path: Path, *, with_results: bool = True) -> tuple[list[dict[str, Any]], list[ArtefactRecord]]:
    grammar = Grammar(path.parent.name)
    expected, items = expected_of(path), replay_items(path) or []
    out = translate(path)
    results = tool_results(grammar, items) if with_results else []
    return client_history(out, grammar, user_text(grammar, expected, items), results), out.artefacts


def target(path: Path, model: str | None = "same", **kwargs: Any) -> ReplayTarget:
    grammar = Grammar(path.parent.name)
    return ReplayTarget(grammar=grammar, model=request_model(expected_of(path)) if model == "same" else model, **kwargs)


def then_user(history: list[dict[str, Any]], text: str = "And now?") -> list[dict[str, Any]]:
    return [*history, {"id": f"user-{len(history)}", "role": "user", "content": text}]


def codes(result: Any) -> list[str]:
    return [w.code for w in result.warnings]


def assert_no_value_in_warnings(result: Any, artefacts: list[ArtefactRecord]) -> None:
    """P8: warnings name entities and reasons, never an opaque value."""
    text = json.dumps([w.message for w in result.warnings])
    assert not any(a.value in text for a in artefacts)


# -- model families -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "model", "family"),
    [
        ("anthropic-messages", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic-messages", "claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic-messages", "claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("anthropic-messages", "claude-opus-4-1@20250805", "claude-opus-4-1"),
        ("openai-responses", "gpt-5-2025-08-07", "gpt-5"),
        ("openai-responses", "gpt-5-mini-2025-08-07", "gpt-5-mini"),
        ("openai-responses", "gpt-5.1", "gpt-5.1"),
        ("gemini-generate-content", "gemini-3-flash-preview", "gemini-3-flash"),
        ("gemini-generate-content", "models/gemini-2.5-flash-preview-04-17", "gemini-2.5-flash"),
        ("gemini-generate-content", "gemini-2.5-flash-lite-preview-09-2025", "gemini-2.5-flash-lite"),
        ("gemini-interactions", "gemini-1.5-pro-002", "gemini-1.5-pro"),
        ("bedrock-converse", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic.claude-sonnet-4-5"),
        ("bedrock-converse", "anthropic.claude-3-7-sonnet-20250219-v1:0", "anthropic.claude-3-7-sonnet"),
        (
            "bedrock-converse",
            "arn:aws:bedrock:eu-west-1::foundation-model/anthropic.claude-opus-4-1-20250805-v1:0",
            "anthropic.claude-opus-4-1",
        ),
        ("bedrock-converse", "amazon.nova-2-lite-v1:0:256k", "amazon.nova-2-lite"),
    ],
)
def test_model_family_strips_the_snapshot_never_the_model(grammar: str, model: str, family: str) -> None:
    assert model_family(grammar, model) == family


def test_a_dated_snapshot_shares_state_another_family_does_not_P5() -> None:
    assert same_family("anthropic-messages", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5")
    assert not same_family("anthropic-messages", "claude-sonnet-4-5", "claude-sonnet-4")
    assert not same_family("anthropic-messages", "claude-sonnet-4-5", "claude-opus-4-1")
    assert not same_family("gemini-generate-content", "gemini-2.5-flash", "gemini-2.5-flash-lite")


def test_replay_to_a_dated_snapshot_of_the_same_family_keeps_the_state_P5() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    result = replay(then_user(history), artefacts, target(ANTHROPIC_A, "claude-sonnet-4-5"))
    assert result.counters["artefacts_replayed"] == 1
    assert "foreign_issuer" not in codes(result)


# -- issuer matching (R8, P5) ------------------------------------------------------------------------


@pytest.mark.parametrize("path", implemented_samples("a_reasoning_then_answer"), ids=lambda p: p.parent.name)
def test_model_change_between_turns_drops_foreign_state_with_a_warning_R8_P5(path: Path) -> None:
    grammar = Grammar(path.parent.name)
    history, artefacts = history_of(path)
    result = replay(then_user(history), artefacts, target(path, OTHER_FAMILY[grammar]))
    assert opaque_hashes(result.fragment) == []  # nothing of the old model goes to the new one
    assert "foreign_issuer" in codes(result)
    assert result.counters["foreign_issuer"] == len([a for a in artefacts if a.complete])
    assert result.counters["artefacts_replayed"] == 0
    assert result.fragment[FRAGMENT_KEY[grammar]], "the conversation itself still goes"
    assert_no_value_in_warnings(result, artefacts)


def test_model_change_drops_gemini_thought_text_as_well() -> None:
    path = LOCAL_FIXTURES / "gemini-generate-content" / "a_reasoning_then_answer.jsonl"
    if Grammar.GEMINI_GENERATE_CONTENT not in implemented():
        pytest.skip("no gemini-generate-content translator yet")
    history, artefacts = history_of(path)
    result = replay(then_user(history), artefacts, target(path, "gemini-2.5-pro"))
    parts = [p for c in result.fragment["contents"] for p in c["parts"]]
    assert not any(p.get("thought") for p in parts)
    assert "foreign_thoughts_dropped" in codes(result)


def test_artefacts_of_another_grammar_never_cross_R8() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    bedrock = ReplayTarget(grammar=Grammar.BEDROCK_CONVERSE, model="us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    result = replay(then_user(history), artefacts, bedrock)
    assert opaque_hashes(result.fragment) == []
    assert any("issued by anthropic-messages" in w.message for w in result.warnings)


def test_artefacts_of_another_scope_are_left_out_R8() -> None:
    path = ANTHROPIC_A
    out = translate(path, issuer_scope="acct-1/us-east-1")
    expected, items = expected_of(path), replay_items(path) or []
    history = client_history(out, Grammar.ANTHROPIC_MESSAGES, user_text(Grammar.ANTHROPIC_MESSAGES, expected, items), [])
    same = replay(then_user(history), out.artefacts, target(path, scope="acct-1/us-east-1"))
    other = replay(then_user(history), out.artefacts, target(path, scope="acct-2/eu-west-1"))
    unscoped = replay(then_user(history), out.artefacts, target(path))
    assert same.counters["artefacts_replayed"] == 1
    assert other.counters["artefacts_replayed"] == 0 and "foreign_issuer" in codes(other)
    assert unscoped.counters["artefacts_replayed"] == 0


def test_artefacts_of_another_tenant_are_never_crossed_R8() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    theirs = [a.model_copy(update={"tenant": "globex"}) for a in artefacts]
    result = replay(then_user(history), theirs, target(ANTHROPIC_A), tenant="acme")
    assert opaque_hashes(result.fragment) == []
    assert "foreign_tenant" in codes(result)


def test_model_change_inside_an_open_tool_loop_fails_before_the_call_for_anthropic_R8() -> None:
    history, artefacts = history_of(ANTHROPIC_B)
    with pytest.raises(ProviderWouldReject) as raised:
        replay(history, artefacts, target(ANTHROPIC_B, "claude-opus-4-1"))
    assert raised.value.code == "provider_would_reject"
    assert "tool-use" in raised.value.message and "foreign_issuer" in raised.value.message
    assert not any(a.value in raised.value.message for a in artefacts)


def test_model_change_inside_an_open_tool_loop_drops_openai_reasoning_without_failing_R8() -> None:
    history, artefacts = history_of(OPENAI_B)
    result = replay(history, artefacts, target(OPENAI_B, "o3"))
    items = result.fragment["input"]
    assert [i.get("type") for i in items[1:]] == ["function_call", "function_call_output"]
    assert "foreign_issuer" in codes(result)


def test_no_target_model_assumes_the_threads_latest_issuer_and_says_so() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    result = replay(then_user(history), artefacts, target(ANTHROPIC_A, None))
    assert result.counters["artefacts_replayed"] == 1
    assert "model_assumed" in codes(result)


# -- which copy wins (R3, R5, R8) ---------------------------------------------------------------------------


def _with_client_value(history: list[dict[str, Any]], value: str | None) -> list[dict[str, Any]]:
    edited = json.loads(json.dumps(history))
    for message in edited:
        if message["role"] == "reasoning":
            if value is None:
                message.pop("encryptedValue", None)
            else:
                message["encryptedValue"] = value
    return edited


def test_stored_copy_wins_when_the_client_value_differs_R3() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    edited = _with_client_value(history, "tampered-or-foreign")
    result = replay(then_user(edited), artefacts, target(ANTHROPIC_A))
    [thinking] = [b for m in result.fragment["messages"] for b in m["content"] if isinstance(b, dict) and b["type"] == "thinking"]
    assert thinking["signature"] == artefacts[0].value
    assert "client_value_differs" in codes(result)
    assert "tampered-or-foreign" not in json.dumps(result.fragment)


def test_a_client_value_with_no_stored_artefact_is_never_sent_R8() -> None:
    history, _ = history_of(ANTHROPIC_A)
    result = replay(then_user(history), [], target(ANTHROPIC_A))
    assert opaque_hashes(result.fragment) == []
    assert "unverified_client_value" in codes(result)


def test_a_client_value_with_no_stored_artefact_fails_an_open_anthropic_tool_loop() -> None:
    history, _ = history_of(ANTHROPIC_B)
    with pytest.raises(ProviderWouldReject, match="no stored artefact"):
        replay(history, [], target(ANTHROPIC_B))


def test_stored_copy_is_used_when_the_client_keeps_no_values() -> None:
    """Clients of the audience-filtered stream never see encrypted values: the store carries them."""
    history, artefacts = history_of(ANTHROPIC_B)
    result = replay(_with_client_value(history, None), artefacts, target(ANTHROPIC_B))
    assert result.counters["artefacts_replayed"] == 1
    assert result.warnings == []


def test_a_value_the_client_withdrew_is_not_resurrected_from_the_store_R5() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    withdrawn = _with_client_value(history, None)
    result = replay(then_user(withdrawn), artefacts, target(ANTHROPIC_A), honour_client_omissions=True)
    assert opaque_hashes(result.fragment) == []
    assert "withdrawn_by_client" in codes(result)


# -- ordering, turns, edited and interrupted histories ---------------------------------------------------------


def test_several_turns_keep_their_order_and_each_turns_state() -> None:
    """b (tool call) → tool result → a (answer) → a new user turn: two assistant turns, in order."""
    first, first_artefacts = history_of(ANTHROPIC_B)
    out = translate(ANTHROPIC_A)
    second = client_history(out, Grammar.ANTHROPIC_MESSAGES, "ignored", [])[1:]  # its own prompt is not part of this thread
    result = replay(then_user(first + second), first_artefacts + out.artefacts, target(ANTHROPIC_A))
    roles = [m["role"] for m in result.fragment["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    kinds = [[b["type"] for b in m["content"]] for m in result.fragment["messages"] if m["role"] == "assistant"]
    assert kinds == [["thinking", "text", "tool_use"], ["thinking", "text"]]
    assert result.replayed == [a.entity_id for a in first_artefacts + out.artefacts]


def test_tool_results_then_a_user_message_share_one_anthropic_user_message() -> None:
    history, artefacts = history_of(ANTHROPIC_B)
    result = replay(then_user(history, "Thanks. Tomorrow?"), artefacts, target(ANTHROPIC_B))
    last = result.fragment["messages"][-1]
    assert last["role"] == "user"
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]


@pytest.mark.parametrize(
    "path",
    [p for p in fixture_paths() if Grammar(p.parent.name) in implemented() and Grammar(p.parent.name) in BUILDERS and expected_of(p)["end"]["kind"] == "interrupted"],
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_an_interrupted_turns_partial_reasoning_is_not_replayed_P5(path: Path) -> None:
    grammar = Grammar(path.parent.name)
    out = translate(path)
    history = client_history(out, grammar, "Go on.", [])
    result = replay(then_user(history), out.artefacts, ReplayTarget(grammar=grammar, model=request_model(expected_of(path))))
    sent = json.dumps(result.fragment)
    for record in out.artefacts:
        if not record.complete:
            assert record.value not in sent
            assert "incomplete_artefact" in codes(result)
    assert_no_value_in_warnings(result, out.artefacts)


def test_a_reasoning_item_whose_following_item_is_gone_is_left_out_for_openai() -> None:
    if Grammar.OPENAI_RESPONSES not in implemented():
        pytest.skip("no openai-responses translator yet")
    history, artefacts = history_of(OPENAI_B, with_results=False)
    edited = [m for m in history if m["role"] != "assistant"]  # the client dropped the function call
    result = replay(then_user(edited), artefacts, target(OPENAI_B))
    assert not any(i.get("type") == "reasoning" for i in result.fragment["input"])
    assert "follower_missing" in codes(result)
    assert result.replayed == []


def test_openai_items_without_metadata_hints_still_pair_reasoning_with_its_follower() -> None:
    """A client that drops event metadata: the follower's id still comes from the reasoning record."""
    if Grammar.OPENAI_RESPONSES not in implemented():
        pytest.skip("no openai-responses translator yet")
    history, artefacts = history_of(OPENAI_B)
    for message in history:
        message.pop("metadata", None)
        for call in message.get("toolCalls") or []:
            call.pop("metadata", None)
    result = replay(history, artefacts, target(OPENAI_B))
    want = replay_items(OPENAI_B)
    assert result.fragment["input"][1:] == want


def test_an_interrupted_tool_call_and_its_result_are_left_out() -> None:
    history, artefacts = history_of(ANTHROPIC_B)
    for message in history:
        for call in message.get("toolCalls") or []:
            call["function"]["arguments"] = '{"location": "Par'
    result = replay(then_user(history), artefacts, target(ANTHROPIC_B))
    assert "tool_use" not in json.dumps(result.fragment) and "tool_result" not in json.dumps(result.fragment)
    assert {"incomplete_tool_call", "orphan_tool_result"} <= set(codes(result))


# -- bad histories ------------------------------------------------------------------------------------------------


def test_a_history_that_is_not_agui_messages_is_refused_clearly() -> None:
    with pytest.raises(InvalidHistory, match="not AG-UI 1.0 messages"):
        replay([{"id": "1", "role": "wizard"}], [], ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES))
    with pytest.raises(InvalidHistory, match="RunAgentInput or a messages array"):
        replay("hello", [], ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES))


def test_media_content_is_refused_rather_than_dropped() -> None:
    image = {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}
    history = [{"id": "u", "role": "user", "content": [{"type": "text", "text": "Look"}, image]}]
    with pytest.raises(InvalidHistory, match="'image' part"):
        replay(history, [], ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES))


def test_run_agent_input_and_bare_messages_replay_the_same() -> None:
    history, artefacts = history_of(ANTHROPIC_A)
    bare = replay(then_user(history), artefacts, target(ANTHROPIC_A))
    wrapped = replay({"threadId": "t", "runId": "r", "messages": then_user(history)}, artefacts, target(ANTHROPIC_A))
    assert bare.fragment == wrapped.fragment


def test_system_messages_go_where_each_grammar_wants_them() -> None:
    history = [
        {"id": "s", "role": "system", "content": "Be brief."},
        {"id": "u", "role": "user", "content": "Hi"},
    ]
    fragments = {g: replay(history, [], ReplayTarget(grammar=g)).fragment for g in BUILDERS}
    assert fragments[Grammar.ANTHROPIC_MESSAGES] == {"messages": [{"role": "user", "content": "Hi"}], "system": "Be brief."}
    assert fragments[Grammar.BEDROCK_CONVERSE]["system"] == [{"text": "Be brief."}]
    assert fragments[Grammar.GEMINI_GENERATE_CONTENT]["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert fragments[Grammar.GEMINI_INTERACTIONS]["system_instruction"] == "Be brief."
    assert fragments[Grammar.OPENAI_RESPONSES]["input"][0] == {"role": "system", "content": "Be brief."}


# -- chunking does not matter ---------------------------------------------------------------------------------------


def _rechunk_anthropic(lines: list[str], cuts: list[int]) -> list[bytes]:
    """Re-split every thinking / text / input_json delta of an Anthropic stream at ``cuts``."""
    out: list[bytes] = []
    kinds = {"thinking_delta": "thinking", "text_delta": "text", "input_json_delta": "partial_json"}
    for line in lines:
        event = json.loads(line)
        delta = event.get("delta") or {}
        field = kinds.get(delta.get("type"))
        if event.get("type") != "content_block_delta" or field is None:
            out.append(line.encode())
            continue
        text = delta[field]
        points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
        for start, end in zip(points, points[1:], strict=False):
            out.append(json.dumps({**event, "delta": {**delta, field: text[start:end]}}).encode())
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_rechunked_deltas_replay_to_the_same_provider_items_R3_P5(cuts: list[int]) -> None:
    from tests.conformance.oracle import translate_lines

    grammar = Grammar.ANTHROPIC_MESSAGES
    lines = ANTHROPIC_B.read_text().splitlines()
    expected, items = expected_of(ANTHROPIC_B), replay_items(ANTHROPIC_B) or []
    out = translate_lines(grammar, _rechunk_anthropic(lines, cuts), model=SONNET)
    history = client_history(out, grammar, user_text(grammar, expected, items), tool_results(grammar, items))
    result = replay(history, out.artefacts, target(ANTHROPIC_B))
    assert result.fragment["messages"][1:] == items


# -- a client of the audience-filtered stream ---------------------------------------------------------------------------


def _public_history(out: Any, grammar: Grammar) -> list[dict[str, Any]]:
    """What an end-user UI holds: the public stream (summaries only, no encrypted values) applied."""
    from reasonwire.contracts.policy import Audience, RetentionPolicy
    from reasonwire.workers.core.audience import AudienceFilter

    audience = AudienceFilter(RetentionPolicy().rule(Audience.PUBLIC))
    public = [e for e in (audience.admit(e) for e in out.events) if e is not None]
    return client_history(type(out)(public, out.artefacts, out.warnings, [], out.translator), grammar, "Go on.", [])


@pytest.mark.parametrize(
    "path",
    [p for p in fixture_paths() if Grammar(p.parent.name) in implemented() and Grammar(p.parent.name) in BUILDERS and expected_of(p)["end"]["kind"] == "finished"],
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_a_public_stream_client_gets_the_same_next_turn_as_a_trusted_one_P5_P7(path: Path) -> None:
    """The public stream hides raw and redacted reasoning and every encrypted value; the store
    still holds the state, so the hidden units are put back where they streamed."""
    grammar = Grammar(path.parent.name)
    out = translate(path)
    wanted = ReplayTarget(grammar=grammar, model=request_model(expected_of(path)))
    trusted = replay(then_user(client_history(out, grammar, "Go on.", [])), out.artefacts, wanted)
    public = replay(then_user(_public_history(out, grammar)), out.artefacts, wanted)
    assert public.fragment == trusted.fragment
    assert "unseen_unit_not_placed" not in codes(public)


def test_hidden_redacted_thinking_is_put_back_before_the_text_it_preceded() -> None:
    path = Path(__file__).parents[1] / "fixtures" / "anthropic-messages" / "e3_redacted_thinking.jsonl"
    out = translate(path)
    history = _public_history(out, Grammar.ANTHROPIC_MESSAGES)
    assert not any(m["role"] == "reasoning" and "encryptedValue" in m for m in history)
    result = replay(then_user(history), out.artefacts, target(path))
    [assistant] = [m for m in result.fragment["messages"] if m["role"] == "assistant"]
    kinds = [b["type"] for b in assistant["content"]]
    assert kinds.index("redacted_thinking") < kinds.index("text")
    assert result.counters["unseen_units_restored"] >= 1


def test_state_of_a_turn_the_client_trimmed_away_is_not_restored() -> None:
    first, first_artefacts = history_of(ANTHROPIC_A)
    second = [{"id": "u9", "role": "user", "content": "New topic."}]
    result = replay(second, first_artefacts, target(ANTHROPIC_A))
    assert result.fragment["messages"] == [{"role": "user", "content": "New topic."}]
    assert result.counters["artefacts_not_in_history"] == 1
    assert result.warnings == []


def test_an_unseen_unit_whose_place_is_ambiguous_is_left_out_and_fails_an_open_loop() -> None:
    """The client holds no reasoning message and its tool call (without the start event's
    blockIndex hint: a client that keeps no metadata) before the text: where did the thinking
    block stream? Not certain — so it is not guessed."""
    history, artefacts = history_of(ANTHROPIC_B)
    no_reasoning = [m for m in history if m["role"] != "reasoning"]
    text = next(m for m in no_reasoning if m["role"] == "assistant" and m.get("content"))
    call = next(m for m in no_reasoning if m.get("toolCalls"))
    call["toolCalls"] = [{k: v for k, v in c.items() if k != "metadata"} for c in call["toolCalls"]]
    reordered = [m for m in no_reasoning if m is not text and m is not call]
    reordered[1:1] = [call, text]
    with pytest.raises(ProviderWouldReject, match="not in the client's history"):
        replay(reordered, artefacts, target(ANTHROPIC_B))
    closed = [m for m in reordered if m["role"] != "tool" and not m.get("toolCalls")]
    result = replay(then_user(closed), artefacts, target(ANTHROPIC_B))
    assert "unseen_unit_not_placed" not in codes(result)  # with no call before it, its place is certain again
    result = replay(then_user(reordered), artefacts, target(ANTHROPIC_B))
    assert "unseen_unit_not_placed" in codes(result) and opaque_hashes(result.fragment) == []


# -- what is left out or refused: a last reasoning item, empty signatures, Gemini 3 switches ------

OPENAI_H = Path(__file__).resolve().parents[1] / "fixtures" / "openai-responses" / "h_incomplete_max_output_tokens.jsonl"


def test_a_reasoning_item_that_was_the_turns_last_output_is_left_out_P5() -> None:
    """The Responses API rejects a reasoning item "provided without its required following item"
    (REFERENCE §1.7): one with no follower at all is left out, as when its follower was lost."""
    history, artefacts = history_of(OPENAI_H, with_results=False)
    [record] = artefacts
    assert record.complete and record.native.extra["following_item"] is None
    result = replay(then_user(history), artefacts, target(OPENAI_H))
    assert not any(i.get("type") == "reasoning" for i in result.fragment["input"])
    assert record.value not in json.dumps(result.fragment)
    assert "follower_missing" in codes(result)
    assert result.replayed == []
    assert_no_value_in_warnings(result, artefacts)


def _lines(objs: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(o).encode() for o in objs]


def _anthropic_tool_turn(signature: str) -> list[bytes]:
    """A hand-written Claude tool turn (REFERENCE §2.2): thinking + signature, then a tool_use."""
    return _lines([
        {"type": "message_start", "message": {"id": "msg_L", "type": "message", "role": "assistant", "model": SONNET, "content": [], "usage": {"input_tokens": 9, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Need the weather."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_L", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city":"Paris"}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}},
        {"type": "message_stop"},
    ])


def _openai_tool_turn() -> list[bytes]:
    reasoning = {"id": "rs_L", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA-openai-opaque=="}
    call = {"id": "fc_L", "type": "function_call", "status": "completed", "arguments": '{"city":"Paris"}', "call_id": "call_L", "name": "get_weather"}
    response = {"id": "resp_L", "object": "response", "status": "in_progress", "model": "gpt-5", "output": []}
    events = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_L", "type": "reasoning", "summary": []}},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.added", "output_index": 1, "item": {**call, "status": "in_progress", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_L", "output_index": 1, "delta": '{"city":"Paris"}'},
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {"type": "response.completed", "response": {**response, "status": "completed", "output": [reasoning, call]}},
    ]
    return _lines([{**e, "sequence_number": n} for n, e in enumerate(events)])


def _gemini_tool_turn(signature: str | None, model: str = "gemini-3-flash-preview") -> list[bytes]:
    call: dict[str, Any] = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    if signature is not None:
        call["thoughtSignature"] = signature
    chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Need the weather.", "thought": True}, call]}, "finishReason": "STOP", "index": 0}], "modelVersion": model, "responseId": "gc_L"}
    return _lines([chunk])


def _open_loop(grammar: str, lines: list[bytes]) -> tuple[list[dict[str, Any]], list[ArtefactRecord]]:
    """The client's history after a tool turn, its tool result appended: the loop is open."""
    from tests.conformance.oracle import translate_lines

    out = translate_lines(grammar, lines)
    assert out.rejected_lines == []
    call_id = next(e["toolCallId"] for e in out.events if e["type"] == "TOOL_CALL_START")
    return client_history(out, Grammar(grammar), "Weather in Paris?", [(call_id, '{"temp": 21}')]), out.artefacts


def test_an_empty_anthropic_signature_is_never_replayed_and_refuses_an_open_loop_R3_P5() -> None:
    history, artefacts = _open_loop("anthropic-messages", _anthropic_tool_turn(""))
    assert [(r.value, r.complete) for r in artefacts] == [("", False)]
    with pytest.raises(ProviderWouldReject, match="unsigned_artefact"):
        replay(history, artefacts, ReplayTarget(grammar="anthropic-messages", model=SONNET))
    result = replay(then_user(history), artefacts, ReplayTarget(grammar="anthropic-messages", model=SONNET))
    assert '"signature": ""' not in json.dumps(result.fragment) and "unsigned_artefact" in codes(result)


def test_an_empty_gemini_call_signature_refuses_an_open_loop_R3_P5() -> None:
    history, artefacts = _open_loop("gemini-generate-content", _gemini_tool_turn(""))
    with pytest.raises(ProviderWouldReject, match="unsigned_artefact"):
        replay(history, artefacts, ReplayTarget(grammar="gemini-generate-content", model="gemini-3-flash-preview"))


@pytest.mark.parametrize(("grammar", "lines"), [("anthropic-messages", _anthropic_tool_turn("EqQBsig==")), ("openai-responses", _openai_tool_turn())])
def test_switching_into_gemini_3_mid_tool_loop_is_refused_like_a_lost_signature_R8_P5(grammar: str, lines: list[bytes]) -> None:
    history, artefacts = _open_loop(grammar, lines)
    gemini_3 = ReplayTarget(grammar="gemini-generate-content", model="gemini-3-flash-preview")
    with pytest.raises(ProviderWouldReject, match="tool call toolu_L|tool call call_L") as refused:
        replay(history, artefacts, gemini_3)
    assert "start a new user turn" in refused.value.message
    assert not any(a.value in refused.value.message for a in artefacts)
    # the same history after a new user turn (the loop closed) is sent, foreign state left out
    result = replay(then_user(history), artefacts, gemini_3)
    assert "thoughtSignature" not in json.dumps(result.fragment) and "foreign_issuer" in codes(result)
    # Gemini 2.5 does not validate call signatures: the open loop goes through
    gemini_25 = replay(history, artefacts, ReplayTarget(grammar="gemini-generate-content", model="gemini-2.5-flash"))
    assert any("functionCall" in p for c in gemini_25.fragment["contents"] for p in c["parts"])


def test_a_gemini_3_native_call_without_any_stored_signature_is_refused() -> None:
    """Nothing marks the call as signed (no record, the client keeps no values): the first call of
    a Gemini 3 step is validated anyway, so the loop is refused rather than sent to a 400."""
    history, _ = _open_loop("gemini-generate-content", _gemini_tool_turn("CsMBsig=="))
    for message in history:
        message.pop("encryptedValue", None)
        for tool_call in message.get("toolCalls") or []:
            tool_call.pop("encryptedValue", None)
    with pytest.raises(ProviderWouldReject):
        replay(history, [], ReplayTarget(grammar="gemini-generate-content", model="gemini-3-flash-preview"))


@pytest.mark.parametrize(("target", "refused"), [("anthropic-messages", True), ("openai-responses", False)])
def test_switching_out_of_gemini_3_mid_tool_loop_follows_the_targets_rule_R8_P5(target: str, refused: bool) -> None:
    """The other direction: Gemini 3 history → Anthropic (thinking required in the loop: refused)
    or OpenAI (reasoning state is optional: sent without the foreign signatures, warned)."""
    history, artefacts = _open_loop("gemini-generate-content", _gemini_tool_turn("CsMBsig=="))
    model = {"anthropic-messages": SONNET, "openai-responses": "gpt-5"}[target]
    if refused:
        with pytest.raises(ProviderWouldReject):
            replay(history, artefacts, ReplayTarget(grammar=target, model=model))
        return
    result = replay(history, artefacts, ReplayTarget(grammar=target, model=model))
    assert "CsMBsig==" not in json.dumps(result.fragment) and "foreign_issuer" in codes(result)
