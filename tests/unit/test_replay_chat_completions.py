"""Replay for the Chat Completions family: readable reasoning a provider requires back goes to that
provider verbatim and to no other (R8, P5); OpenRouter's ``reasoning_details`` whole, in ``index``
order, gated by ``format``; xAI's and OpenAI's ``encrypted_content`` kept apart on the Responses API.

The records are built as the Chat Completions translator emits them (``<provider>.reasoning_content``
on the reasoning message, the assistant message minus the value as the native block;
``openrouter.reasoning.*`` one per ``reasoning_details`` item, the item's ``index`` as position).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reasonwire.contracts.artefacts import ArtefactRecord, ArtefactSubtype, Issuer, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.replay import ProviderWouldReject, replay
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import implemented
from tests.conformance.oracle import LOCAL_FIXTURES, translate_file, translate_lines
from tests.unit.test_replay_roundtrip import client_history

CHAT = Grammar.OPENAI_CHAT_COMPLETIONS
THREAD = "thread-chat"

REASONING = [
    "The user wants the weather in Paris first.  I'll call get_weather(city=\"Paris\").\n",
    "Paris: 18 °C. Now Rome — same tool.\r\n\t(trailing space) ",
    "Rome done; the forecast for Oslo is still missing 🌧️ \u200b",
]
"""One turn's whole reasoning text each: spaces, CRLF, tabs, non-ASCII, a zero-width space —
anything a careless round trip would normalise."""

CITIES = ["Paris", "Rome", "Oslo"]


def _call(n: int) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": CITIES[n]})}}


def _held_call(n: int, response: str) -> dict[str, Any]:
    """The call as a client holds it: ``TOOL_CALL_START``'s metadata (the call's index in its
    response) kept on it, as ``@ag-ui/client`` and ``AgUiConsumer`` keep it."""
    return {**_call(n), "metadata": {"reasonwire": {"blockIndex": 0, "responseId": response}}}


def tool_loop(*, with_reasoning: bool = True, closed: bool = False) -> list[dict[str, Any]]:
    """The AG-UI history of a 3-turn DeepSeek tool loop (one call per turn), as the client holds it.
    ``with_reasoning=False``: a client of the audience-filtered stream, which never saw raw reasoning.
    ``closed``: the model answered after the third result and the user asked again."""
    messages: list[dict[str, Any]] = [{"id": "user-1", "role": "user", "content": "Weather in Paris, Rome and Oslo?"}]
    for n in range(3):  # ids as the translator mints them: <response>:<role>:<unit>
        if with_reasoning:
            messages.append({"id": f"resp-{n}:reasoning:0", "role": "reasoning", "content": REASONING[n]})
        messages.append({"id": f"resp-{n}:text:1", "role": "assistant", "toolCalls": [_held_call(n, f"resp-{n}")]})
        messages.append({"id": f"tool-{n}", "role": "tool", "toolCallId": f"call_{n}", "content": f"{CITIES[n]}: fine"})
    if closed:
        messages.append({"id": "resp-3:text:1", "role": "assistant", "content": "All three are fine."})
        messages.append({"id": "user-2", "role": "user", "content": "And tomorrow?"})
    return messages


def readable_record(n: int, *, provider: str = "deepseek", model: str = "deepseek-v4-pro", kind: str | None = None) -> ArtefactRecord:
    """``<provider>.reasoning_content`` of turn ``n``: the assistant message minus the value."""
    return ArtefactRecord(
        kind=kind or f"{provider}.reasoning_content",
        subtype=ArtefactSubtype.MESSAGE,
        entity_id=f"resp-{n}:reasoning:0",
        value=REASONING[n],
        issuer=Issuer(grammar=CHAT, model=model, provider=provider),
        native=NativeBlock(
            response_id=f"resp-{n}",
            position=0,
            block={"role": "assistant"},
            value_path=["reasoning_content"],
        ),
        run_id=f"run-{n}",
        thread_id=THREAD,
    )


def deepseek_records(**kwargs: Any) -> list[ArtefactRecord]:
    return [readable_record(n, **kwargs) for n in range(3)]


def assistant_messages(fragment: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in fragment["messages"] if m["role"] == "assistant"]


def deepseek_rule_broken(messages: list[dict[str, Any]], stored: list[str]) -> list[str]:
    """DeepSeek's documented rule, stated independently of the builder: in thinking mode every
    assistant message of a tool-call turn carries that turn's ``reasoning_content``, fully passed
    back (https://api-docs.deepseek.com/guides/thinking_mode). Returns what breaks it. The request
    is checked as DeepSeek receives it: serialised to JSON and parsed again."""
    sent = json.loads(json.dumps({"messages": messages}, ensure_ascii=False))["messages"]
    tool_turns = [m for m in sent if m["role"] == "assistant" and m.get("tool_calls")]
    problems = []
    if len(tool_turns) != len(stored):
        problems.append(f"{len(tool_turns)} tool-call turns, {len(stored)} expected")
    for index, (message, text) in enumerate(zip(tool_turns, stored, strict=False)):
        value = message.get("reasoning_content")
        if not isinstance(value, str):
            problems.append(f"tool turn {index}: Missing reasoning_content field")
        elif value.encode("utf-8") != text.encode("utf-8"):
            problems.append(f"tool turn {index}: reasoning_content is not the turn's reasoning byte for byte")
    return problems


def target(provider: str | None, model: str | None = None) -> ReplayTarget:
    return ReplayTarget(grammar=CHAT, model=model, provider=provider)


def values_in(fragment: dict[str, Any], records: list[ArtefactRecord]) -> list[str]:
    text = json.dumps(fragment, ensure_ascii=False)
    return [r.value for r in records if r.value in text]


# -- DeepSeek: the next turn of a tool loop ----------------------------------------------------------


@pytest.mark.parametrize("closed", [False, True], ids=["open-loop", "after-a-new-user-turn"])
def test_deepseek_next_turn_carries_every_tool_turns_reasoning_content_byte_exact_R8_P5(closed: bool) -> None:
    """P5: DeepSeek answers 400 "Missing reasoning_content" when an assistant message of a tool-call
    turn lacks it; the store gives every one back verbatim."""
    result = replay(tool_loop(closed=closed), deepseek_records(), target("deepseek", "deepseek-v4-pro"))
    assert deepseek_rule_broken(result.fragment["messages"], REASONING) == []
    assert result.counters["artefacts_replayed"] == 3
    assert not [w for w in result.warnings if w.code == "foreign_issuer"]


def test_deepseek_request_keeps_the_conversation_shape() -> None:
    result = replay(tool_loop(), deepseek_records(), target("deepseek", "deepseek-v4-pro"))
    messages = result.fragment["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"] * 1 + ["assistant", "tool"] * 2
    first = messages[1]
    assert first == {"role": "assistant", "content": None, "tool_calls": [_call(0)], "reasoning_content": REASONING[0]}
    assert messages[2] == {"role": "tool", "tool_call_id": "call_0", "content": "Paris: fine"}


def test_deepseek_reasoning_goes_back_for_a_client_that_never_saw_it_P5() -> None:
    """The public stream removes raw reasoning; the store still gives the issuer its state back,
    on the assistant message of its response (the reasoning is that response's first unit)."""
    result = replay(tool_loop(with_reasoning=False), deepseek_records(), target("deepseek", "deepseek-v4-pro"))
    assert deepseek_rule_broken(result.fragment["messages"], REASONING) == []


def test_deepseek_reasoning_goes_back_to_another_model_of_deepseek() -> None:
    """Readable reasoning is bound to its provider, not to one model: any DeepSeek model reads it."""
    result = replay(tool_loop(), deepseek_records(), target("deepseek", "deepseek-v4-flash"))
    assert deepseek_rule_broken(result.fragment["messages"], REASONING) == []


@pytest.mark.parametrize("provider", [None, "vllm", "qwen", "ollama:qwen3:32b", "glm", "openrouter:anthropic-claude-v1"])
def test_the_same_history_to_another_provider_carries_none_of_the_reasoning_R8(provider: str | None) -> None:
    """R8: switching provider drops the state with a warning, as opaque values are dropped."""
    records = deepseek_records()
    result = replay(tool_loop(closed=True), records, target(provider, "some-model"))
    assert values_in(result.fragment, records) == []
    assert all("reasoning_content" not in m and "reasoning_details" not in m for m in assistant_messages(result.fragment))
    dropped = [w for w in result.warnings if w.code == "foreign_issuer"]
    assert sorted(w.entity_id for w in dropped) == [f"resp-{n}:reasoning:0" for n in range(3)]
    assert not any(r.value in w.message for w in result.warnings for r in records)  # P8


def test_an_open_loop_to_a_provider_that_needs_no_reasoning_goes_through_without_it() -> None:
    """vLLM's template drops earlier reasoning: nothing to refuse, the state is just not sent."""
    records = deepseek_records()
    result = replay(tool_loop(), records, target("vllm", "deepseek-ai/DeepSeek-V3.2"))
    assert values_in(result.fragment, records) == []


def test_an_open_deepseek_loop_without_its_reasoning_fails_before_the_call() -> None:
    """DeepSeek would answer 400 "Missing reasoning_content": refused before the call instead."""
    with pytest.raises(ProviderWouldReject, match="resp-2:reasoning:0"):
        replay(tool_loop(), deepseek_records()[:2], target("deepseek", "deepseek-v4-pro"))


def test_an_open_loop_from_another_provider_to_glm_fails_before_the_call_R8() -> None:
    with pytest.raises(ProviderWouldReject, match="foreign_issuer"):
        replay(tool_loop(), deepseek_records(), target("glm", "glm-4.6"))


def test_glm_preserved_thinking_goes_back_complete_and_unmodified() -> None:
    records = deepseek_records(provider="glm", model="glm-4.6")
    result = replay(tool_loop(), records, target("glm", "glm-4.6"))
    assert deepseek_rule_broken(result.fragment["messages"], REASONING) == []


def test_legacy_deepseek_reasoner_gets_no_reasoning_content_back() -> None:
    """deepseek-reasoner (R1) answered 400 when reasoning_content was sent back."""
    records = deepseek_records()
    result = replay(tool_loop(closed=True), records, target("deepseek", "deepseek-reasoner"))
    assert values_in(result.fragment, records) == []
    assert [w.code for w in result.warnings].count("reasoning_not_wanted") == 3


def test_an_incomplete_reasoning_record_is_never_sent() -> None:
    records = deepseek_records()
    records[0] = records[0].model_copy(update={"complete": False})
    result = replay(tool_loop(closed=True), records, target("deepseek", "deepseek-v4-pro"))
    assert REASONING[0] not in json.dumps(result.fragment, ensure_ascii=False)
    assert "incomplete_artefact" in [w.code for w in result.warnings]


def test_system_and_developer_messages_stay_in_place_as_system() -> None:
    history = [
        {"id": "s", "role": "system", "content": "Be brief."},
        {"id": "d", "role": "developer", "content": "Use metric units."},
        {"id": "u", "role": "user", "content": "Hi"},
    ]
    fragment = replay(history, [], target("deepseek")).fragment
    assert fragment == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": "Use metric units."},
            {"role": "user", "content": "Hi"},
        ]
    }


# -- OpenRouter reasoning_details ----------------------------------------------------------------------


def openrouter_items(fmt: str = "anthropic-claude-v1") -> list[dict[str, Any]]:
    return [
        {"type": "reasoning.text", "text": "Let me think.", "signature": "sig-0==", "id": None, "format": fmt, "index": 0},
        {"type": "reasoning.encrypted", "data": "ZW5jcnlwdGVk", "id": "rd_1", "format": fmt, "index": 1},
        {"type": "reasoning.text", "text": "Then call.", "signature": "sig-2==", "id": None, "format": fmt, "index": 2},
    ]


def openrouter_records(fmt: str = "anthropic-claude-v1", model: str = "anthropic/claude-sonnet-4.5") -> list[ArtefactRecord]:
    records = []
    for item in openrouter_items(fmt):
        kind = item["type"].removeprefix("reasoning.")
        field = "signature" if kind == "text" else "data"
        records.append(
            ArtefactRecord(
                kind=f"openrouter.reasoning.{kind}",
                subtype=ArtefactSubtype.MESSAGE,
                entity_id="gen-1:reasoning:0",
                value=item[field],
                issuer=Issuer(grammar=CHAT, model=model, provider=f"openrouter:{fmt}"),
                native=NativeBlock(
                    response_id="gen-1",
                    position=item["index"],
                    block={k: v for k, v in item.items() if k != field},
                    value_path=[field],
                ),
                run_id="run-or",
                thread_id=THREAD,
            )
        )
    return records


def openrouter_history() -> list[dict[str, Any]]:
    return [
        {"id": "user-1", "role": "user", "content": "Weather in Paris?"},
        {"id": "gen-1:reasoning:0", "role": "reasoning", "content": "Let me think. Then call."},
        {"id": "gen-1:text:1", "role": "assistant", "toolCalls": [_held_call(0, "gen-1")]},
        {"id": "tool-0", "role": "tool", "toolCallId": "call_0", "content": "Paris: fine"},
    ]


def test_openrouter_reasoning_details_go_back_whole_in_index_order() -> None:
    """OpenRouter: "preserving reasoning blocks" — the items unchanged, in ``index`` order, whatever
    order the store lists them in."""
    records = openrouter_records()
    shuffled = [records[2], records[0], records[1]]
    result = replay(openrouter_history(), shuffled, target("openrouter:anthropic-claude-v1", "anthropic/claude-sonnet-4.5"))
    [message] = assistant_messages(result.fragment)
    assert message["reasoning_details"] == openrouter_items()
    assert [d["index"] for d in message["reasoning_details"]] == [0, 1, 2]
    assert "reasoning_content" not in message


def test_openrouter_details_go_back_for_a_client_that_never_saw_the_reasoning_P5() -> None:
    public = [m for m in openrouter_history() if m["role"] != "reasoning"]
    result = replay(public, openrouter_records(), target("openrouter:anthropic-claude-v1", "anthropic/claude-sonnet-4.5"))
    assert assistant_messages(result.fragment)[0]["reasoning_details"] == openrouter_items()


def test_openrouter_format_is_read_from_the_target_model_vendor() -> None:
    result = replay(openrouter_history(), openrouter_records(), target("openrouter", "anthropic/claude-sonnet-4.5:thinking"))
    assert assistant_messages(result.fragment)[0]["reasoning_details"] == openrouter_items()


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openrouter", "openai/gpt-5"),
        ("openrouter:openai-responses-v1", "openai/gpt-5"),
        ("openrouter", "google/gemini-2.5-pro"),
        ("openrouter:anthropic-claude-v1", "anthropic/claude-opus-4.1"),
        ("anthropic-direct", "claude-sonnet-4-5"),
    ],
)
def test_openrouter_items_of_another_format_or_model_stay_behind_R8(provider: str, model: str) -> None:
    """The item ``format`` names its issuer: another model family behind OpenRouter does not get it,
    nor another Claude model (signatures are model-bound)."""
    records = openrouter_records()
    result = replay(openrouter_history(), records, target(provider, model))
    [message] = assistant_messages(result.fragment)
    assert "reasoning_details" not in message
    assert values_in(result.fragment, records) == []
    assert [w.code for w in result.warnings].count("foreign_issuer") == 3


# -- xAI Grok on the Responses API --------------------------------------------------------------------

OPENAI_B = LOCAL_FIXTURES / "openai-responses" / "b_reasoning_then_tool_call.jsonl"


def responses_run(model: str) -> tuple[list[dict[str, Any]], list[ArtefactRecord]]:
    """The OpenAI tool-call fixture as ``model`` streamed it, translated, with its tool result."""
    lines = []
    with OPENAI_B.open(encoding="utf-8") as f:
        for event in read_events(f):
            obj = json.loads(event.data)
            if isinstance(obj.get("response"), dict) and "model" in obj["response"]:
                obj["response"]["model"] = model
            lines.append(json.dumps(obj).encode())
    out = translate_lines(Grammar.OPENAI_RESPONSES.value, lines, model=model)
    calls = [e["toolCallId"] for e in out.events if e["type"] == "TOOL_CALL_START"]
    history = client_history(out, Grammar.OPENAI_RESPONSES, "Go on.", [(c, "done") for c in calls])
    return history, out.artefacts


def encrypted_contents(fragment: dict[str, Any]) -> list[str]:
    return [i["encrypted_content"] for i in fragment["input"] if i.get("type") == "reasoning"]


def test_a_grok_stream_is_issued_by_xai() -> None:
    _, records = responses_run("grok-4-fast-reasoning")
    assert records and {r.issuer.provider for r in records} == {"xai"}
    _, openai = responses_run("gpt-5-2025-08-07")
    assert {r.issuer.provider for r in openai} == {None}


def test_a_stated_provider_is_kept_whatever_the_model_name() -> None:
    with OPENAI_B.open(encoding="utf-8") as f:
        lines = [e.data for e in read_events(f)]
    out = translate_lines(Grammar.OPENAI_RESPONSES.value, lines, issuer_provider="xai")
    assert out.artefacts and {r.issuer.provider for r in out.artefacts} == {"xai"}


def test_xai_encrypted_content_goes_back_to_xai_only_R8() -> None:
    history, records = responses_run("grok-4-fast-reasoning")
    to_xai = replay(history, records, ReplayTarget(grammar=Grammar.OPENAI_RESPONSES, model="grok-4-fast-reasoning"))
    assert encrypted_contents(to_xai.fragment) == [r.value for r in records]
    assert all("status" not in item for item in to_xai.fragment["input"])  # output-only on xAI
    to_openai = replay(history, records, ReplayTarget(grammar=Grammar.OPENAI_RESPONSES, model="gpt-5"))
    assert encrypted_contents(to_openai.fragment) == []
    assert values_in(to_openai.fragment, records) == []
    assert "foreign_issuer" in [w.code for w in to_openai.warnings]


def test_openai_encrypted_content_never_goes_to_xai_R8() -> None:
    history, records = responses_run("gpt-5-2025-08-07")
    to_openai = replay(history, records, ReplayTarget(grammar=Grammar.OPENAI_RESPONSES, model="gpt-5"))
    assert encrypted_contents(to_openai.fragment) == [r.value for r in records]
    for xai in (
        ReplayTarget(grammar=Grammar.OPENAI_RESPONSES, model="grok-4"),
        ReplayTarget(grammar=Grammar.OPENAI_RESPONSES, model="gpt-5", provider="xai"),
    ):
        result = replay(history, records, xai)
        assert values_in(result.fragment, records) == []
        assert "foreign_issuer" in [w.code for w in result.warnings]


# -- the command line and the replay worker ---------------------------------------------------------


def test_the_replay_command_takes_the_target_provider(tmp_path: Path) -> None:
    from reasonwire.workers.core.wire import record_json
    from tests.unit.test_replay_from_events import _main

    history, artefacts = tmp_path / "history.json", tmp_path / "art.jsonl"
    history.write_text(json.dumps({"threadId": THREAD, "runId": "next", "messages": tool_loop()}))
    artefacts.write_bytes(b"".join(record_json(r) + b"\n" for r in deepseek_records()))
    base = ["replay", "--provider", "openai-chat-completions", "--model", "deepseek-v4-pro", "--artefacts", str(artefacts)]
    status, out, err = _main([*base, "--issuer-provider", "deepseek", str(history)])
    assert status == 0, err
    assert deepseek_rule_broken(json.loads(out)["messages"], REASONING) == []
    status, out, err = _main([*base, "--issuer-provider", "qwen", str(history)])
    assert status == 0 and "reasoning_content" not in out
    assert "left out (R8)" in err and not any(text in err for text in REASONING)  # P8
    status, _, err = _main([*base, str(history)])  # no provider: OpenAI's own Chat Completions
    assert status == 0, err


def test_the_replay_worker_answers_for_the_requests_target_provider() -> None:
    from reasonwire.contracts.replay import ReplayRequest
    from reasonwire.workers.services.replay_worker import reply_for

    request = ReplayRequest(
        request_id="q1",
        target=target("deepseek", "deepseek-v4-pro"),
        history={"threadId": THREAD, "runId": "next", "messages": tool_loop()},
    )
    reply = reply_for(request, deepseek_records())
    assert reply.ok and reply.fragment is not None
    assert deepseek_rule_broken(reply.fragment["messages"], REASONING) == []
    refused = reply_for(request.model_copy(update={"target": target("glm", "glm-4.6")}), deepseek_records())
    assert not refused.ok and refused.error is not None and refused.error.code == "provider_would_reject"


# -- request translation (P4) -------------------------------------------------------------------------


def test_deepseek_reasoning_settings_and_the_replayed_history_in_one_request() -> None:
    """P4: the portable effort becomes DeepSeek's thinking switch and reasoning_effort; an effort it
    does not list is refused before the call, naming what it takes."""
    from reasonwire.workers.replay.requests import UnsupportedReasoning, next_request

    run_input = {"threadId": THREAD, "runId": "next", "messages": tool_loop(), "forwardedProps": {"reasoning": {"effort": "high"}}}
    body, _ = next_request(run_input, target("deepseek", "deepseek-v4-pro"), deepseek_records())
    assert body["model"] == "deepseek-v4-pro"
    assert body["thinking"] == {"type": "enabled"} and body["reasoning_effort"] == "high"
    assert deepseek_rule_broken(body["messages"], REASONING) == []
    with pytest.raises(UnsupportedReasoning, match="supported: none, low, high, max"):
        next_request({**run_input, "forwardedProps": {"reasoning": {"effort": "medium"}}}, target("deepseek", "deepseek-v4-pro"), [])


# -- the translator's own DeepSeek tool loop: the next request is the one DeepSeek documents ----------

DEEPSEEK_LOOP = [LOCAL_FIXTURES / CHAT.value / f"c{n}_deepseek_tool_loop_turn{n}.jsonl" for n in (1, 2, 3)]
needs_translator = pytest.mark.skipif(
    CHAT not in implemented() or not all(p.exists() for p in DEEPSEEK_LOOP),
    reason="the openai-chat-completions translator and its DeepSeek tool-loop fixtures are not in this tree",
)


def deepseek_loop_history(turns: int, *, audience: str) -> tuple[list[dict[str, Any]], list[ArtefactRecord]]:
    """The client's history after ``turns`` runs of the fixtures' tool loop — the events of each run
    applied (all of them, or only what the public audience gets), then each call's result as the next
    fixture's request states it — and the records the worker stored."""
    from reasonwire.contracts.policy import PolicyBook
    from reasonwire.workers.core.audience import AudienceFilter
    from reasonwire.workers.replay.consumer import AgUiConsumer

    rule = PolicyBook().for_tenant("default").public
    consumer, records = AgUiConsumer(), []
    request = json.loads(DEEPSEEK_LOOP[turns].with_suffix(".expected.json").read_text())["request"]
    consumer.add_message({"id": "user-1", "role": "user", "content": request["messages"][0]["content"]})
    results = [m for m in request["messages"] if m["role"] == "tool"]
    for n in range(turns):
        out = translate_file(CHAT.value, DEEPSEEK_LOOP[n], model="deepseek-v4-pro")
        events = out.events if audience == "trusted" else [e for e in map(AudienceFilter(rule).admit, out.events) if e]
        assert consumer.feed_all(events).fatal is None
        records += out.artefacts
        result = results[n]
        consumer.add_message({"id": f"tool-{n}", "role": "tool", "toolCallId": result["tool_call_id"], "content": result["content"]})
    return consumer.wire_messages(), records


@needs_translator
@pytest.mark.parametrize("audience", ["trusted", "public"])
@pytest.mark.parametrize("turns", [1, 2])
def test_the_deepseek_next_turn_is_the_request_deepseek_documents_R8_P5(turns: int, audience: str) -> None:
    """After each turn of a DeepSeek thinking-mode tool loop, the replayed ``messages`` are exactly the
    next request the fixture states — every assistant message with its ``reasoning_content``, byte for
    byte — whether the client saw the raw reasoning or only the public stream (P5)."""
    history, records = deepseek_loop_history(turns, audience=audience)
    assert {r.issuer.provider for r in records} == {"deepseek"}
    expected = json.loads(DEEPSEEK_LOOP[turns].with_suffix(".expected.json").read_text())["request"]["messages"]
    result = replay(history, records, target("deepseek", "deepseek-v4-pro"))
    assert result.fragment["messages"] == expected
    stored = [r.value for r in sorted(records, key=lambda r: r.run_id)]
    assert deepseek_rule_broken(result.fragment["messages"], [m["reasoning_content"] for m in expected if m["role"] == "assistant"]) == []
    assert sorted(m["reasoning_content"] for m in assistant_messages(result.fragment)) == sorted(stored)


@needs_translator
def test_the_translators_deepseek_loop_to_another_provider_carries_none_of_it_R8() -> None:
    history, records = deepseek_loop_history(2, audience="trusted")
    expected = json.loads(DEEPSEEK_LOOP[2].with_suffix(".expected.json").read_text())["request"]["messages"]
    result = replay(history, records, target("vllm", "Qwen/Qwen3-32B"))
    assert result.fragment["messages"] == [{k: v for k, v in m.items() if k != "reasoning_content"} for m in expected]
    assert [w.code for w in result.warnings].count("foreign_issuer") == len(records)


def test_replay_sends_back_what_the_translator_keeps_and_nothing_else() -> None:
    """The translator keeps readable reasoning as replay state for exactly the providers whose rule
    sends it back (contracts/issuers.py), so nothing is stored that no request would carry (P7)."""
    from reasonwire.contracts.issuers import READABLE_REASONING_REQUIRED
    from reasonwire.workers.replay.openai_chat_completions import PROVIDER_RULES, Policy

    assert {p for p, rule in PROVIDER_RULES.items() if rule.policy is Policy.READABLE} == READABLE_REASONING_REQUIRED
