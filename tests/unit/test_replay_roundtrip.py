"""Round trip, per fixture: provider stream → AG-UI events + artefacts → the client's history
(built by applying the events, as a client does) → replay → the fixture's ``replay`` items.

The oracle is each fixture's ``expected.json`` ``replay`` section, written from the
provider's documented next-turn shape — never our output. Parametrized over every
fixture with a replay section whose grammar has a translator, so a grammar is
covered as soon as its translator lands. Compared: the sha256 of every opaque
value in order (R3), then the items in full, in order (P5).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from tests.conformance.oracle import Output, assert_valid_stream, fixture_paths, translate_file
from reasonwire.workers.replay.consumer import AgUiConsumer
from reasonwire.workers.replay import FRAGMENT_KEY, replay
from reasonwire.workers.translators import implemented

OPAQUE_KEYS = frozenset({"signature", "encrypted_content", "thoughtSignature", "data", "redactedContent"})
"""Where the provider-native shapes of every grammar carry opaque values."""

_REPLAY_KEYS = {
    Grammar.ANTHROPIC_MESSAGES: "append_to_messages",
    Grammar.BEDROCK_CONVERSE: "append_to_messages",
    Grammar.OPENAI_RESPONSES: "append_to_input",
    Grammar.GEMINI_GENERATE_CONTENT: "append_to_contents",
    Grammar.GEMINI_INTERACTIONS: "stateless_input",
}
"""The expected.json ``replay`` key holding the exact provider-native items, per grammar."""


def expected_of(path: Path) -> dict[str, Any]:
    return json.loads(path.with_suffix(".expected.json").read_text())


def replay_items(path: Path) -> list[dict[str, Any]] | None:
    """The fixture's exact next-turn items, or None when its replay section has none."""
    section = expected_of(path).get("replay") or {}
    key = _REPLAY_KEYS.get(Grammar(path.parent.name))
    items = section.get(key) if key else None  # a grammar without a replay builder has none to check
    return items if isinstance(items, list) else None


def replay_fixtures() -> list[Path]:
    return [p for p in fixture_paths() if Grammar(p.parent.name) in implemented() and replay_items(p) is not None]


def fixture_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def request_model(expected: dict[str, Any]) -> str | None:
    request = expected.get("request") or {}
    return request.get("model") or request.get("modelId")


def translate(path: Path, **kwargs: Any) -> Output:
    """Translate a fixture the way the worker does (the model from the request, as rw-model)."""
    expected = expected_of(path)
    kwargs.setdefault("model", request_model(expected))
    out = translate_file(path.parent.name, path, **kwargs)
    assert_valid_stream(out.events)
    return out


# -- the user turn and the tool results, as the fixture states them ---------------------------------


def user_text(grammar: Grammar, expected: dict[str, Any], items: list[dict[str, Any]]) -> str:
    """The user's prompt from the fixture's request (a placeholder when it has none)."""
    request = expected.get("request") or {}
    if grammar is Grammar.GEMINI_INTERACTIONS:
        first = items[0] if items and items[0].get("type") == "user_input" else None
        return first["content"][0]["text"] if first else request.get("input", "Go on.")
    if grammar is Grammar.ANTHROPIC_MESSAGES and request.get("messages"):
        return request["messages"][0]["content"]
    if grammar is Grammar.BEDROCK_CONVERSE and request.get("messages"):
        return request["messages"][0]["content"][0]["text"]
    if grammar is Grammar.GEMINI_GENERATE_CONTENT and request.get("contents"):
        return request["contents"][0]["parts"][0]["text"]
    if grammar is Grammar.OPENAI_RESPONSES and isinstance(request.get("input"), str):
        return request["input"]
    return "Go on."


def user_item(grammar: Grammar, text: str) -> dict[str, Any]:
    """A plain user turn in each grammar's documented request shape."""
    return {
        Grammar.ANTHROPIC_MESSAGES: {"role": "user", "content": text},
        Grammar.BEDROCK_CONVERSE: {"role": "user", "content": [{"text": text}]},
        Grammar.GEMINI_GENERATE_CONTENT: {"role": "user", "parts": [{"text": text}]},
        Grammar.GEMINI_INTERACTIONS: {"type": "user_input", "content": [{"type": "text", "text": text}]},
        Grammar.OPENAI_RESPONSES: {"role": "user", "content": text},
    }[grammar]


def tool_results(grammar: Grammar, items: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    """(tool-call id or None, result text) for each tool result the fixture's replay returns, in order."""

    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    out: list[tuple[str | None, str]] = []
    for item in items:
        if grammar is Grammar.OPENAI_RESPONSES and item.get("type") == "function_call_output":
            out.append((item["call_id"], item["output"]))
        elif grammar is Grammar.GEMINI_INTERACTIONS and item.get("type") == "function_result":
            out.append((item["call_id"], text(item["result"])))
        elif item.get("role") == "user":
            for block in item.get("content") or item.get("parts") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_result":
                    out.append((block["tool_use_id"], text(block["content"])))
                elif "toolResult" in block:
                    result = block["toolResult"]
                    [content] = result["content"]
                    out.append((result["toolUseId"], text(content.get("json", content.get("text")))))
                elif "functionResponse" in block:
                    out.append((block["functionResponse"].get("id"), text(block["functionResponse"]["response"])))
    return out


def client_history(out: Output, grammar: Grammar, user: str, results: list[tuple[str | None, str]]) -> list[dict[str, Any]]:
    """The client's messages after the run: the user's prompt, the events applied, then its tool results."""
    consumer = AgUiConsumer()
    consumer.add_message({"id": "user-1", "role": "user", "content": user})
    applied = consumer.feed_all(out.events)
    assert applied.fatal is None and not applied.warnings, applied
    calls = [call.id for m in consumer.messages for call in (getattr(m, "tool_calls", None) or [])]
    for n, (call_id, result) in enumerate(results):
        # Gemini's functionResponse has no id: results answer the calls in order (REFERENCE §3.2)
        consumer.add_message({"id": f"tool-result-{n}", "role": "tool", "toolCallId": call_id or calls[n], "content": result})
    return consumer.wire_messages()


# -- comparison ---------------------------------------------------------------------------------------


def opaque_hashes(value: Any) -> list[str]:
    """sha256 of every opaque value, in document order."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in OPAQUE_KEYS and isinstance(inner, str):
                found.append(hashlib.sha256(inner.encode()).hexdigest())
            else:
                found += opaque_hashes(inner)
    elif isinstance(value, list):
        for inner in value:
            found += opaque_hashes(inner)
    return found


def coalesce_gemini_parts(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gemini only: adjacent *unsigned* text parts of one kind as one part.

    reasonwire does not keep chunk boundaries (the client holds each message's text
    whole), and Google's rules concern signed parts only: never merge a signed part,
    never move a signature (REFERENCE §3.3, §3.5). Signed parts are compared exactly.
    """
    out = []
    for content in contents:
        parts: list[dict[str, Any]] = []
        for part in content.get("parts", []):
            plain = set(part) <= {"text", "thought"}
            if plain and parts and set(parts[-1]) <= {"text", "thought"} and parts[-1].get("thought") == part.get("thought"):
                parts[-1] = {**parts[-1], "text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(dict(part))
        out.append({**content, "parts": parts})
    return out


def comparable(grammar: Grammar, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return coalesce_gemini_parts(items) if grammar is Grammar.GEMINI_GENERATE_CONTENT else items


def expected_request_items(path: Path) -> list[dict[str, Any]]:
    """What the next request's history must be: the user's turn, then the fixture's replay items."""
    grammar = Grammar(path.parent.name)
    items = replay_items(path) or []
    if grammar is Grammar.GEMINI_INTERACTIONS and items and items[0].get("type") == "user_input":
        return items
    return [user_item(grammar, user_text(grammar, expected_of(path), items)), *items]


SYNTHETIC_RESULT = '{"ok":true}'
"""The answer the test gives a call the fixture's replay section leaves unanswered (it lists the
assistant turn only): a call without its result is never sent (every provider rejects it), so the client
answers every call, as it would before its next request."""


def answers(out: Output, grammar: Grammar, items: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    """The fixture's tool results, or one synthetic result per complete call when it states none."""
    stated = tool_results(grammar, items)
    if stated:
        return stated
    calls = [e["toolCallId"] for e in out.events if e["type"] == "TOOL_CALL_END"]
    return [(call_id, SYNTHETIC_RESULT) for call_id in calls]


def without_synthetic_answers(grammar: Grammar, produced: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The fragment without the entries of synthetic results (the fixture's section does not list them)."""
    if tool_results(grammar, replay_items(path) or []):
        return produced
    while produced and tool_results(grammar, produced[-1:]):
        produced = produced[:-1]  # a result item, or the user message holding every result
    return produced


def replay_fixture(path: Path, **target: Any) -> Any:
    grammar = Grammar(path.parent.name)
    expected = expected_of(path)
    items = replay_items(path) or []
    out = translate(path)
    history = client_history(out, grammar, user_text(grammar, expected, items), answers(out, grammar, items))
    target = {"grammar": grammar, "model": request_model(expected), **target}
    return replay(history, out.artefacts, ReplayTarget(**target)), out


# -- the tests --------------------------------------------------------------------------------------------

FIXTURES = replay_fixtures()


def test_replay_fixtures_are_found() -> None:
    assert any(p.parent.name == Grammar.ANTHROPIC_MESSAGES for p in FIXTURES)


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_replay_rebuilds_the_fixtures_provider_native_items_P5_R3(path: Path) -> None:
    grammar = Grammar(path.parent.name)
    result, _ = replay_fixture(path)
    produced = without_synthetic_answers(grammar, result.fragment[FRAGMENT_KEY[grammar]], path)
    want = expected_request_items(path)
    assert opaque_hashes(produced) == opaque_hashes(want), "opaque values differ or moved (R3)"
    assert comparable(grammar, produced) == comparable(grammar, want)
    assert [w.code for w in result.warnings if w.code != "model_assumed"] == []


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_replayed_values_are_the_stored_artefacts_byte_for_byte_R3(path: Path) -> None:
    result, out = replay_fixture(path)
    complete = [r for r in out.artefacts if r.complete]
    sent = opaque_hashes(result.fragment)
    assert sorted(sent) == sorted(hashlib.sha256(r.value.encode()).hexdigest() for r in complete)
    assert result.counters["artefacts_replayed"] == len(complete)


@pytest.mark.parametrize(
    "path", [p for p in FIXTURES if tool_results(Grammar(p.parent.name), replay_items(p) or [])], ids=fixture_id
)
def test_stateless_next_turn_after_one_tool_call_carries_the_state_and_the_result_P9(path: Path) -> None:
    """The tool loop: the assistant turn with its opaque state, then the tool result, no server state."""
    grammar = Grammar(path.parent.name)
    result, _ = replay_fixture(path)
    produced = result.fragment[FRAGMENT_KEY[grammar]]
    assert comparable(grammar, produced) == comparable(grammar, expected_request_items(path))
    assert "item_reference" not in json.dumps(produced)  # store=false: never a reference (REFERENCE §1.7)
