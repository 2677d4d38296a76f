"""``translate`` → ``replay`` with no Python in between: ``reasonwire replay``
takes the AG-UI events ``translate`` wrote, folds them as a client holds them (AgUiConsumer),
and gives back each opaque artefact byte for byte (R3, P5)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from reasonwire.workers.replay import BUILDERS
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers import cli
from reasonwire.workers.replay.consumer import AgUiConsumer
from tests.conformance.oracle import LOCAL_FIXTURES


def _main(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(argv)
        out.flush()
    finally:
        sys.stdin = saved
    return status, out.buffer.getvalue().decode(), err.getvalue()  # type: ignore[attr-defined]


def _translate(grammar: str, tmp_path: Path) -> tuple[Path, Path]:
    # A finished answer: a capture that ends in a tool call has no result yet, and replay leaves
    # an unanswered call (and the turn it ends) out, as every provider rejects it.
    events, artefacts = tmp_path / "events.jsonl", tmp_path / "artefacts.jsonl"
    status, out, _ = _main(["translate", "--provider", grammar, "--artefacts", str(artefacts), str(LOCAL_FIXTURES / grammar / "a_reasoning_then_answer.jsonl")])
    assert status == 0
    events.write_text(out)
    return events, artefacts


@pytest.mark.parametrize("grammar", [g.value for g in Grammar if g in BUILDERS])
def test_replay_takes_the_events_translate_wrote_and_gives_every_artefact_back(grammar: str, tmp_path: Path) -> None:
    events, artefacts = _translate(grammar, tmp_path)
    records = [json.loads(line) for line in artefacts.read_text().splitlines()]
    # the provider the next request goes to: the one that issued them (a grammar many providers speak)
    issuer = {"--issuer-provider": p for p in {r["issuer"].get("provider") for r in records} if p}
    status, out, err = _main(["replay", "--provider", grammar, *[a for pair in issuer.items() for a in pair], "--artefacts", str(artefacts), str(events)])
    assert status == 0, err
    fragment = out
    values = [r["value"] for r in records]
    assert values
    for value in values:  # each opaque value back, unmodified, and never on stderr
        assert json.dumps(value, ensure_ascii=False)[1:-1] in fragment
        assert value not in err


@pytest.mark.parametrize("grammar", ["anthropic-messages", "openai-responses"])
def test_the_events_give_the_same_fragment_as_the_history_a_client_folds(grammar: str, tmp_path: Path) -> None:
    """The CLI folds with AgUiConsumer, so the events and the RunAgentInput a client built from
    them are one history."""
    events, artefacts = _translate(grammar, tmp_path)
    consumer = AgUiConsumer()
    wire = [json.loads(line) for line in events.read_text().splitlines()]
    assert consumer.feed_all(wire).fatal is None
    history = tmp_path / "history.json"
    history.write_text(json.dumps(consumer.run_input(thread_id=wire[0]["threadId"], run_id="next")))
    from_events = _main(["replay", "--provider", grammar, "--artefacts", str(artefacts), str(events)])
    from_history = _main(["replay", "--provider", grammar, "--artefacts", str(artefacts), str(history)])
    assert from_events[0] == from_history[0] == 0
    assert json.loads(from_events[1]) == json.loads(from_history[1])


def test_translate_piped_into_replay_reads_the_events_from_stdin(tmp_path: Path) -> None:
    events, artefacts = _translate("anthropic-messages", tmp_path)
    status, out, err = _main(["replay", "--provider", "anthropic-messages", "--artefacts", str(artefacts), "-"], stdin=events.read_bytes())
    assert status == 0, err
    assert json.loads(out)["messages"][0]["role"] == "assistant"


def test_a_broken_event_line_is_one_error_naming_the_line(tmp_path: Path) -> None:
    events, artefacts = _translate("anthropic-messages", tmp_path)
    lines = events.read_text().splitlines()
    events.write_text("\n".join([*lines[:3], "{not json", *lines[3:]]) + "\n")
    status, _, err = _main(["replay", "--provider", "anthropic-messages", "--artefacts", str(artefacts), str(events)])
    assert status == 2
    assert err.splitlines() == [f"reasonwire: error: {events} line 4 is not JSON (Expecting property name enclosed in double quotes): expected one AG-UI event per line"]
