"""The producer discipline refuses every stream that would break R1/R2."""

from __future__ import annotations

import json

import pytest

from reasonwire.contracts.artefacts import ArtefactSubtype
from tests.conformance.oracle import assert_valid_stream
from reasonwire.workers.core.discipline import DisciplineViolation, StreamDiscipline
from reasonwire.workers.core.wire import event_json


def _started() -> StreamDiscipline:
    run = StreamDiscipline(run_id="r", thread_id="t")
    run.start_run()
    return run


def _wire(run: StreamDiscipline) -> list[dict]:
    return [json.loads(event_json(e)) for e in run.drain()]


def test_never_opens_an_open_span_R1() -> None:
    run = _started()
    run.open_span("s", "span-1")
    with pytest.raises(DisciplineViolation, match="already open"):
        run.open_span("s", "span-2")


def test_never_reuses_an_id_even_after_close_R1() -> None:
    run = _started()
    run.open_span("s", "span-1")
    run.close_span("s")
    with pytest.raises(DisciplineViolation, match="already used"):
        run.open_span("s2", "span-1")


def test_never_closes_what_was_not_opened_R1() -> None:
    run = _started()
    with pytest.raises(DisciplineViolation, match="not open"):
        run.close_span("nope")
    run.start_text("m", "text-1")
    with pytest.raises(DisciplineViolation, match="not a span"):
        run.close_span("m")


def test_reasoning_message_needs_an_open_span_R2() -> None:
    run = _started()
    with pytest.raises(DisciplineViolation, match="span"):
        run.start_reasoning("m", "msg-1", span="missing")


def test_empty_deltas_are_never_emitted_R2() -> None:
    run = _started()
    run.open_span("s", "span-1")
    run.start_reasoning("m", "msg-1", span="s")
    run.reasoning_content("m", "")
    run.start_text("t", "text-1")
    run.text_content("t", "")
    run.start_tool_call("c", "call-1", "f")
    run.tool_call_args("c", "")
    kinds = [e["type"] for e in _wire(run)]
    assert "REASONING_MESSAGE_CONTENT" not in kinds
    assert "TEXT_MESSAGE_CONTENT" not in kinds
    assert "TOOL_CALL_ARGS" not in kinds


def test_finish_closes_every_span_and_message_first_R1() -> None:
    run = _started()
    run.open_span("s", "span-1")
    run.start_reasoning("m1", "msg-1", span="s")
    run.reasoning_content("m1", "a")
    run.end_reasoning("m1")
    run.start_reasoning("m2", "msg-2", span="s")  # a span may hold several messages
    run.reasoning_content("m2", "b")
    run.start_text("t", "text-1")
    run.finish_run()
    events = _wire(run)
    kinds = [e["type"] for e in events]
    assert kinds[-4:] == ["TEXT_MESSAGE_END", "REASONING_MESSAGE_END", "REASONING_END", "RUN_FINISHED"]
    assert_valid_stream(events)


def test_closing_a_span_closes_its_messages_first_R1() -> None:
    run = _started()
    run.open_span("s", "span-1")
    run.start_reasoning("m", "msg-1", span="s")
    run.close_span("s")
    kinds = [e["type"] for e in _wire(run)]
    assert kinds[-2:] == ["REASONING_MESSAGE_END", "REASONING_END"]


def test_failed_run_marks_forced_closes_incomplete_and_leaves_partial_tool_args_R1_R7() -> None:
    run = _started()
    run.open_span("s", "span-1")
    run.start_reasoning("m", "msg-1", span="s")
    run.reasoning_content("m", "partial")
    run.start_tool_call("whole", "call-1", "f")
    run.tool_call_args("whole", '{"a": 1}')
    run.start_tool_call("part", "call-2", "f")
    run.tool_call_args("part", '{"a": ')
    run.fail_run(message="interrupted", code="interrupted")
    events = _wire(run)
    ends = {e.get("toolCallId") or e.get("messageId"): e for e in events if e["type"].endswith("_END")}
    assert "call-2" not in ends  # TOOL_CALL_END would assert its arguments are whole JSON
    assert ends["call-1"]["metadata"]["reasonwire"]["incomplete"] is True
    assert ends["msg-1"]["metadata"]["reasonwire"]["incomplete"] is True
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["metadata"]["reasonwire"]["incompleteToolCallIds"] == ["call-2"]
    assert_valid_stream(events)


def test_nothing_after_the_terminal_event() -> None:
    run = _started()
    run.finish_run()
    with pytest.raises(DisciplineViolation):
        run.start_text("t", "x")
    with pytest.raises(DisciplineViolation):
        run.fail_run(message="late", code="x")


def test_encrypted_value_must_name_an_entity_of_this_run_R6() -> None:
    run = _started()
    with pytest.raises(DisciplineViolation, match="unknown"):
        run.encrypted_value(ArtefactSubtype.MESSAGE, "never-opened", "opaque")
