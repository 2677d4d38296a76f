"""A retry is a clean request: the next turn after a cut answer or a failed run inside a tool loop.

Each case translates real fixture streams as the worker does, cut where production cuts them,
applies the AG-UI events the way a client holds them — the real ``@ag-ui/client`` 1.0
(``tests/agui_client.py``, Node) and :class:`AgUiConsumer` — failed runs included, and replays.
The oracle is the conversation without the failed run: a retry must produce the very request the
client would have sent had the failed run never happened (docs/replay.md, "Failed and
interrupted turns"), plus warnings naming what was left out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.replay import FRAGMENT_KEY, replay
from reasonwire.workers.replay.consumer import AgUiConsumer
from tests.agui_client import client_messages
from tests.conformance.oracle import Output
from tests.unit.test_replay_after_failure import (
    ALL,
    ERROR_LINE,
    call_ids,
    cut_after,
    fixture_lines,
    renamed,
    target,
    translate,
    unanswered_calls,
)

USER = {"id": "user-1", "role": "user", "content": "What is the capital of Australia?"}
CLIENTS = ["agui_client", "AgUiConsumer"]


def held(steps: list[dict[str, Any]], client: str) -> list[dict[str, Any]]:
    """The messages a client holds after ``steps`` (``{"add": message}`` or ``{"runId", "events"}``)."""
    if client == "agui_client":
        return client_messages(steps)
    consumer = AgUiConsumer()
    for step in steps:
        if "add" in step:
            consumer.add_message(step["add"])
        else:
            consumer.feed_all(step["events"])
    return consumer.wire_messages()


def run(run_id: str, out: Output) -> dict[str, Any]:
    return {"runId": run_id, "events": out.events}


def results(out: Output) -> list[dict[str, Any]]:
    return [{"add": {"id": f"result-{c}", "role": "tool", "toolCallId": c, "content": '{"rate": 0.92}'}} for c in call_ids(out)]


def cut_answer(grammar: Grammar, *, provider_error: bool, suffix: str = "cut") -> Output:
    """A reasoning-then-answer run cut in the middle of its answer text (connection dropped, or the
    provider's own mid-stream error): the text's end carries ``metadata.reasonwire.incomplete``."""
    lines = cut_after(grammar, renamed(grammar, fixture_lines(grammar, "a_reasoning_then_answer"), suffix), "TEXT_MESSAGE_CONTENT")
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:  # the chunk that opened the text must not also end the turn
        last = json.loads(lines[-1])
        for candidate in last.get("candidates", []):
            candidate.pop("finishReason", None)
        lines[-1] = json.dumps(last)
    if provider_error:
        lines.append(json.dumps(ERROR_LINE[grammar]))
    out = translate(grammar, lines, f"run-{suffix}")
    assert out.events[-1]["type"] == "RUN_ERROR"
    ends = [e for e in out.events if e["type"] == "TEXT_MESSAGE_END"]
    assert ends and ends[-1].get("metadata", {}).get("reasonwire", {}).get("incomplete") is True
    return out


def failed_after_call(grammar: Grammar) -> Output:
    """A run that signed its reasoning, completed a tool call, then failed (the grammar's mid-stream error)."""
    lines = cut_after(grammar, renamed(grammar, fixture_lines(grammar), "fail"), "TOOL_CALL_END")
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:  # the call's chunk also ended the turn: not this time
        last = json.loads(lines[-1])
        for candidate in last["candidates"]:
            candidate.pop("finishReason", None)
        lines[-1] = json.dumps(last)
    out = translate(grammar, [*lines, json.dumps(ERROR_LINE[grammar])], "run-failed")
    assert out.events[-1]["type"] == "RUN_ERROR" and call_ids(out)
    return out


def answer(grammar: Grammar, suffix: str) -> Output:
    return translate(grammar, renamed(grammar, fixture_lines(grammar, "a_reasoning_then_answer"), suffix), f"run-{suffix}")


def cut_text_ids(out: Output) -> list[str]:
    return [
        e["messageId"]
        for e in out.events
        if e["type"] == "TEXT_MESSAGE_END" and e.get("metadata", {}).get("reasonwire", {}).get("incomplete")
    ]


# -- a retry after a cut answer sends no prefill --------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("provider_error", [False, True], ids=["connection_dropped", "provider_error"])
@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_retrying_the_same_messages_after_a_cut_answer_sends_the_conversation_up_to_the_user_message(
    grammar: Grammar, provider_error: bool, client: str
) -> None:
    """Signed reasoning, then the answer is cut ("…is Can", RUN_ERROR); the client runs again with what
    it holds. The cut turn is left out, warned: ending the request with it would be a prefill, which
    Claude refuses with thinking enabled ("You cannot pre-fill responses when thinking is enabled")."""
    cut = cut_answer(grammar, provider_error=provider_error)
    history = held([{"add": USER}, run("run-cut", cut)], client)
    assert any(m["role"] == "assistant" and m.get("content") for m in history), "the client holds the cut text"

    result = replay(history, cut.artefacts, target(grammar))

    assert result.fragment == replay(held([{"add": USER}], client), [], target(grammar)).fragment
    assert [w.entity_id for w in result.warnings if w.code == "interrupted_text"] == cut_text_ids(cut)
    assert result.counters["artefacts_replayed"] == 0


# -- text of an interrupted run that a retry superseded ---------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_a_cut_answer_superseded_by_its_retry_is_left_out_of_the_next_turn(grammar: Grammar, client: str) -> None:
    """user → run cut mid-answer → the retry answers whole → the user goes on. The next request holds
    the retried answer alone, as if the cut run never happened — not one turn merging both answers."""
    cut, retry = cut_answer(grammar, provider_error=False), answer(grammar, "retry")
    thanks = {"id": "user-2", "role": "user", "content": "Thanks. And of New Zealand?"}
    history = held([{"add": USER}, run("run-cut", cut), run("run-retry", retry), {"add": thanks}], client)
    clean = held([{"add": USER}, run("run-retry", retry), {"add": thanks}], client)

    result = replay(history, cut.artefacts + retry.artefacts, target(grammar))

    assert result.fragment == replay(clean, retry.artefacts, target(grammar)).fragment
    assert [w.entity_id for w in result.warnings if w.code == "interrupted_text"] == cut_text_ids(cut)


# -- a failed run inside an open tool loop, then its retry --------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_a_failed_runs_reasoning_goes_with_its_unanswered_call_when_the_retry_calls_again_inside_a_tool_loop(
    grammar: Grammar, client: str
) -> None:
    """user → run 1 (reasoning, call) → result → run 2 signs its reasoning, completes a call and fails
    (RUN_ERROR) → run 3, the retry (reasoning, call) → result. Run 2's call was never run, and what
    it streamed before (reasoning; Anthropic's text too) justified only that call and was answered
    again by the retry: all of it goes, decided per run — the current turn is not
    [run 2 reasoning, run 3 reasoning, call]."""
    first = translate(grammar, fixture_lines(grammar), "run-1")
    failed = failed_after_call(grammar)
    retry = translate(grammar, renamed(grammar, fixture_lines(grammar), "retry"), "run-3")
    steps = [{"add": USER}, run("run-1", first), *results(first), run("run-failed", failed), run("run-3", retry), *results(retry)]
    clean = [{"add": USER}, run("run-1", first), *results(first), run("run-3", retry), *results(retry)]

    result = replay(held(steps, client), first.artefacts + failed.artefacts + retry.artefacts, target(grammar))

    assert result.fragment == replay(held(clean, client), first.artefacts + retry.artefacts, target(grammar)).fragment
    assert unanswered_calls(grammar, result.fragment) == []
    assert [w.entity_id for w in result.warnings if w.code == "unanswered_tool_call"] == call_ids(failed)
    failed_units = [e["messageId"] for e in failed.events if e["type"] in ("REASONING_MESSAGE_START", "TEXT_MESSAGE_START")]
    # each of the failed run's units is said to be left out: superseded by the retry, or — where the
    # grammar keeps one record for the whole turn's reasoning (Chat Completions), closed only by a
    # finished run — cut with its run
    left_out = [w.entity_id for w in result.warnings if w.code in ("superseded_run", "interrupted_reasoning")]
    assert sorted(set(left_out)) == sorted(failed_units)


# -- what stays -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_a_cut_answer_the_user_spoke_after_stays_in_the_history(grammar: Grammar) -> None:
    """Nothing superseded it: the user saw "…is Can" and said "go on". The turn is history the user
    answered, so it goes back (a new user message follows it: no prefill)."""
    cut = cut_answer(grammar, provider_error=True)
    go_on = {"id": "user-2", "role": "user", "content": "Go on."}
    history = held([{"add": USER}, run("run-cut", cut), {"add": go_on}], "agui_client")
    cut_text = next(m["content"] for m in history if m["id"] in cut_text_ids(cut))

    result = replay(history, cut.artefacts, target(grammar))

    assert json.dumps(cut_text) in json.dumps(result.fragment)
    assert "interrupted_text" not in [w.code for w in result.warnings]


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_two_finished_runs_in_one_turn_both_go_back(grammar: Grammar) -> None:
    """Two agents answering in turn (no user message between them) are not a failure and its retry:
    a run is left out only when the history says it failed — nothing is guessed."""
    one, two = answer(grammar, "one"), answer(grammar, "two")
    history = held([{"add": USER}, run("run-one", one), run("run-two", two)], "AgUiConsumer")
    history.append({"id": "user-2", "role": "user", "content": "Thanks."})

    result = replay(history, one.artefacts + two.artefacts, target(grammar))

    texts = [m["content"] for m in history if m["role"] == "assistant"]
    assert len(texts) == 2 and all(json.dumps(t) in json.dumps(result.fragment) for t in texts)
    assert not {"interrupted_text", "superseded_run", "retried_turn"} & {w.code for w in result.warnings}


# -- the same, for a public-audience client and from the command line -------------------------------------


def public(out: Output) -> list[dict[str, Any]]:
    """The run as the audience-filtered stream carries it (summaries only, no encrypted value)."""
    from reasonwire.contracts.policy import Audience, RetentionPolicy
    from reasonwire.workers.core.audience import AudienceFilter

    audience = AudienceFilter(RetentionPolicy().rule(Audience.PUBLIC))
    return [e for e in (audience.admit(e) for e in out.events) if e is not None]


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_a_public_client_retrying_inside_a_tool_loop_gets_the_trusted_clients_clean_request(grammar: Grammar) -> None:
    """The audience-filtered stream carries no value; the store still holds every run's. The failed run
    is left out all the same, and its stored state is not put back as a unit the client never saw."""
    first = translate(grammar, fixture_lines(grammar), "run-1")
    failed = failed_after_call(grammar)
    retry = translate(grammar, renamed(grammar, fixture_lines(grammar), "retry"), "run-3")
    artefacts = first.artefacts + failed.artefacts + retry.artefacts

    def steps(view: Any, *, with_failed: bool = True) -> list[dict[str, Any]]:
        failed_run = [{"runId": "run-failed", "events": view(failed)}] if with_failed else []
        return [
            {"add": USER},
            {"runId": "run-1", "events": view(first)},
            *results(first),
            *failed_run,
            {"runId": "run-3", "events": view(retry)},
            *results(retry),
        ]

    clean = replay(held(steps(lambda out: out.events, with_failed=False), "agui_client"), first.artefacts + retry.artefacts, target(grammar))
    result = replay(held(steps(public), "agui_client"), artefacts, target(grammar))
    assert result.fragment == clean.fragment
    assert unanswered_calls(grammar, result.fragment) == []


@pytest.mark.parametrize("grammar", ALL, ids=lambda g: g.value)
def test_replay_command_after_a_cut_answer_sends_no_prefill(grammar: Grammar, tmp_path: Path) -> None:
    """`reasonwire translate --artefacts` on the cut run, the reference client's history after it,
    `reasonwire replay` with the same messages: exit 0, the request ends with the user's message, the
    cut message's id on stderr (never its text)."""
    lines = cut_after(grammar, fixture_lines(grammar, "a_reasoning_then_answer"), "TEXT_MESSAGE_CONTENT")
    if grammar is Grammar.GEMINI_GENERATE_CONTENT:
        last = json.loads(lines[-1])
        for candidate in last.get("candidates", []):
            candidate.pop("finishReason", None)
        lines[-1] = json.dumps(last)
    capture, artefacts = tmp_path / "capture.jsonl", tmp_path / "art.jsonl"
    capture.write_text("\n".join([*lines, json.dumps(ERROR_LINE[grammar])]) + "\n", encoding="utf-8")
    model = target(grammar).model or ""

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", *args], input=stdin, capture_output=True, text=True, check=False)

    done = cli("translate", "--provider", grammar.value, "--model", model, "--artefacts", str(artefacts), str(capture))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    history = client_messages([{"add": USER}, {"runId": events[0]["runId"], "events": events}])
    cut = next(m for m in history if m["role"] == "assistant")
    done = cli("replay", "--provider", grammar.value, "--model", model, "--artefacts", str(artefacts), "-",
               stdin=json.dumps({"threadId": "thread-1", "runId": "run-2", "messages": history}))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[FRAGMENT_KEY[grammar]] == replay([USER], [], target(grammar)).fragment[FRAGMENT_KEY[grammar]]
    assert cut["id"] in done.stderr and cut["content"] not in done.stderr
