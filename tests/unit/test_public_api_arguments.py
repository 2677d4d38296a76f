"""The public library API (``from reasonwire import …``) checks its arguments.

A caller's mistake gets one clear ``TypeError`` / ``ValueError`` naming the argument and what it
accepts, before any state is touched — never an ``AttributeError`` from deep inside, nor a run
ended with ``RUN_ERROR internal_error`` as if reasonwire had a bug. The natural forms a caller
holds are taken as they are: artefact records as the dicts ``reasonwire translate --artefacts``
writes, a grammar name (or the target's fields) as the replay target.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reasonwire import AgUiConsumer, Publisher, ReplayTarget, replay, translator_for
from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import LOCAL_FIXTURES

HISTORY = [{"id": "user-1", "role": "user", "content": "Is 391 prime?"}]
FIXTURE = LOCAL_FIXTURES / "anthropic-messages" / "a_reasoning_then_answer.jsonl"


def provider_lines() -> list[bytes]:
    from reasonwire.workers.io.sse import read_events

    with FIXTURE.open(encoding="utf-8") as f:
        return [e.data if isinstance(e.data, bytes) else e.data.encode() for e in read_events(f)]


# -- translator objects ------------------------------------------------------------------------------------


@pytest.mark.parametrize("wrong", [{"type": "message_start"}, None, 7], ids=["dict", "None", "int"])
@pytest.mark.parametrize("when", ["first_event", "mid_run"])
def test_feeding_a_translator_something_other_than_provider_bytes_raises_type_error_and_leaves_the_run_alone(
    wrong: Any, when: str
) -> None:
    """``feed(<dict>)`` raised nothing and ended the run with ``RUN_ERROR internal_error`` (the safety net
    for reasonwire's own bugs). Now: a ``TypeError`` naming what feed takes; the run goes on, and the
    same stream gives the same events as one that never saw the mistake."""
    lines = provider_lines()
    clean, checked = translator_for("anthropic-messages", run_id="run-1"), translator_for("anthropic-messages", run_id="run-1")
    expected = [e for line in lines for e in clean.feed(line).events] + clean.finish().events
    events = []
    for n, line in enumerate(lines):
        if (when == "first_event" and n == 0) or (when == "mid_run" and n == len(lines) // 2):
            with pytest.raises(TypeError, match=r"feed\(\) takes one provider event as received — bytes or str"):
                checked.feed(wrong)
        events += checked.feed(line).events
    events += checked.finish().events
    assert events == expected
    assert checked.counters["internal_errors"] == 0


def test_a_translator_takes_a_bytearray_as_the_bytes_it_holds() -> None:
    """A caller that read the body into a ``bytearray`` gets the same run as with ``bytes``."""
    lines = provider_lines()
    as_bytes, as_bytearray = translator_for("anthropic-messages", run_id="r"), translator_for("anthropic-messages", run_id="r")
    assert [e for line in lines for e in as_bytes.feed(line).events] == [
        e for line in lines for e in as_bytearray.feed(bytearray(line)).events
    ]


def test_translator_for_and_abort_name_the_argument_they_refuse() -> None:
    with pytest.raises(TypeError, match=r"grammar must be a grammar name \(openai-responses"):
        translator_for(Grammar)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown grammar 'anthropic'"):
        translator_for("anthropic")
    with pytest.raises(TypeError, match="unexpected option 'runid'.*run_id"):
        translator_for("anthropic-messages", runid="r")
    with pytest.raises(TypeError, match="run_id must be a string or None, not int"):
        translator_for("anthropic-messages", run_id=5)
    translator = translator_for("anthropic-messages", run_id="r")
    with pytest.raises(TypeError, match="at_ms must be a number|float or None object expected"):  # pure / compiled
        translator.feed(provider_lines()[0], at_ms="now")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="abort\\(\\) reason must be a string"):
        translator.abort(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="abort\\(\\) code must be an ErrorCode \\(interrupted"):
        translator.abort("gone", code="timeout")  # type: ignore[arg-type]
    assert translator.abort("gone", code="inactivity_timeout").events[-1]["code"] == "inactivity_timeout"  # type: ignore[arg-type]


# -- replay ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((HISTORY, None, "anthropic-messages"), TypeError, r"artefacts must be a list \(any iterable\) of ArtefactRecord, or of dicts"),
        ((HISTORY, {"kind": "x"}, "anthropic-messages"), TypeError, "artefacts must be a list .* not dict"),
        ((HISTORY, [{"kind": "x"}], "anthropic-messages"), ValueError, r"artefacts\[0\] is not an artefact record"),
        ((HISTORY, [3], "anthropic-messages"), TypeError, r"artefacts\[0\] must be an ArtefactRecord or a dict of one, not int"),
        ((HISTORY, [], "anthropic"), ValueError, r"target 'anthropic' is not a grammar name \(known: openai-responses"),
        ((HISTORY, [], {"model": "claude-sonnet-4-5"}), ValueError, "target is not a replay target \\(grammar: Field required"),
        ((HISTORY, [], 5), TypeError, "target must be a ReplayTarget, a grammar name"),
        ((None, [], "anthropic-messages"), ValueError, "history must be a RunAgentInput or a messages array, not NoneType"),
        (("hello", [], "anthropic-messages"), ValueError, "history must be .* not str"),
    ],
    ids=["artefacts_None", "artefacts_dict", "record_dict_wrong", "record_int", "grammar_unknown", "target_dict_wrong", "target_int", "history_None", "history_str"],
)
def test_replay_names_the_argument_it_refuses(args: tuple[Any, ...], error: type[Exception], message: str) -> None:
    """``replay(h, None, t)`` was ``'NoneType' object is not iterable``, a dict record
    ``'dict' object has no attribute 'subtype'``, a grammar name ``… has no attribute 'grammar'``.
    A history of the wrong kind is :class:`InvalidHistory`, a ``ValueError`` (what the CLI and the
    replay worker already answer as unusable input)."""
    with pytest.raises(error, match=message):
        replay(*args)


def test_replay_takes_records_as_translate_writes_them_and_a_grammar_name_as_the_target(tmp_path: Path) -> None:
    """`reasonwire translate --artefacts art.jsonl`, each line ``json.loads``-ed: the same request as with
    the records read by the CLI; a grammar name or a dict of the target's fields as the target."""
    from reasonwire.workers.io.replay_sources import read_artefact_file

    capture, artefacts = tmp_path / "capture.jsonl", tmp_path / "art.jsonl"
    capture.write_bytes(b"\n".join(provider_lines()) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "reasonwire.workers.cli", "translate", "--provider", "anthropic-messages", "--artefacts", str(artefacts), str(capture)],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    consumer = AgUiConsumer(messages=HISTORY)
    consumer.feed_all(events)
    consumer.add_message({"id": "user-2", "role": "user", "content": "And 393?"})
    history = consumer.wire_messages()
    dicts = [json.loads(line) for line in artefacts.read_text().splitlines()]
    assert dicts, "translate wrote the run's artefacts"

    wanted = replay(history, read_artefact_file(artefacts), ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model="claude-sonnet-4-5"))
    assert replay(history, dicts, {"grammar": "anthropic-messages", "model": "claude-sonnet-4-5"}).fragment == wanted.fragment
    by_name = replay(history, dicts, "anthropic-messages")
    assert by_name.fragment == wanted.fragment
    assert "model_assumed" in [w.code for w in by_name.warnings]


def test_replay_options_are_checked() -> None:
    with pytest.raises(TypeError, match="tenant must be a string or None, not int"):
        replay(HISTORY, [], "anthropic-messages", tenant=3)
    with pytest.raises(TypeError, match="honour_client_omissions must be True or False, not str"):
        replay(HISTORY, [], "anthropic-messages", honour_client_omissions="yes")


# -- AgUiConsumer ------------------------------------------------------------------------------------------


def test_the_consumer_names_the_argument_it_refuses_and_keeps_what_it_holds() -> None:
    """``add_message("hello")`` was ``AttributeError``; ``feed("<json line>")`` ended the consumer's run
    (R7 is for what a producer sends, not for a caller passing the wrong type)."""
    consumer = AgUiConsumer(messages=HISTORY)
    with pytest.raises(TypeError, match=r"message must be an AG-UI message \(an ag_ui.core message or its wire dict\), not str"):
        consumer.add_message("hello")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"message is not an AG-UI 1.0 message \(id: Field required\)"):
        consumer.add_message({"role": "user", "content": "hi"})
    with pytest.raises(TypeError, match=r"feed\(\) takes one AG-UI event as a dict or an ag_ui.core event, not str \(parse the JSON line first"):
        consumer.feed('{"type": "RUN_STARTED"}')  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"feed_all\(\) takes an iterable of AG-UI events, not dict \(one event: feed\(\)\)"):
        consumer.feed_all({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    with pytest.raises(TypeError, match="max_value_bytes must be a number of bytes"):
        AgUiConsumer(max_value_bytes="1k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[0\] must be an AG-UI message"):
        AgUiConsumer(messages=["hello"])  # type: ignore[list-item]
    assert consumer.failed is None and consumer.wire_messages() == HISTORY


def test_the_consumer_takes_ag_ui_event_models() -> None:
    from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

    consumer = AgUiConsumer()
    consumer.feed_all(
        [
            TextMessageStartEvent(message_id="m1", role="assistant"),
            TextMessageContentEvent(message_id="m1", delta="Hello"),
            TextMessageEndEvent(message_id="m1"),
        ]
    )
    assert consumer.wire_messages() == [{"id": "m1", "role": "assistant", "content": "Hello"}]


# -- Publisher ---------------------------------------------------------------------------------------------


class _Producer:
    """Takes records and acknowledges them at once (argument checks only; the broker paths are
    tested against real Kafka in tests/integration)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, topic: str, value: bytes | None, *, key: bytes, headers: list[Any]) -> asyncio.Future[None]:
        self.sent.append(value)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


def test_the_publisher_names_the_argument_it_refuses_before_publishing_anything() -> None:
    with pytest.raises(TypeError, match="bootstrap_servers must be 'host:port"):
        Publisher(9092)  # type: ignore[arg-type]
    producer = _Producer()
    publisher = Publisher(producer=producer)  # type: ignore[arg-type]

    async def scenario() -> None:
        with pytest.raises(ValueError, match=r"provider 'anthropic' is not a grammar name \(known: openai-responses"):
            async with publisher.run(provider="anthropic", run_id="r"):
                pass
        with pytest.raises(TypeError, match="run_id must be a string, not int"):
            async with publisher.run(provider="anthropic-messages", run_id=1):  # type: ignore[arg-type]
                pass
        with pytest.raises(TypeError, match="tenant must be a string, not None"):
            async with publisher.run(provider="anthropic-messages", run_id="r", tenant=None):  # type: ignore[arg-type]
                pass
        async with publisher.run(provider="anthropic-messages", run_id="r") as run:
            with pytest.raises(TypeError, match=r"send\(\) data must be the provider's raw lines as bytes or str, not dict"):
                await run.send({"type": "ping"})  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"feed\(\) chunk must be bytes"):
                await run.feed("data: {}\n\n")  # type: ignore[arg-type]
            await run.send(b'data: {"type": "ping"}')

    asyncio.run(scenario())
    assert producer.sent[0] == b'{"type": "ping"}'  # nothing of the refused calls went out
