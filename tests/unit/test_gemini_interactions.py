"""gemini-interactions: Interactions API step events → AG-UI (REFERENCE §4).

Every stream produced here passes ``assert_valid_stream`` (ag-ui-validate, warnings fail).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance.oracle import Output, assert_valid_stream, facts, of_type, translate_lines, types
from reasonwire.workers.core.wire import record_json

GRAMMAR = "gemini-interactions"
IID = "v1_unit_interaction"
SIG = "CtUCAaF911YPC4ySHWtZBCKXNv0ZaM3C+4STorzBi4/TA7iPiIhiKXj9GlBzXUYUNBWI1YFG97svV6uM26VE=="
SIG_2 = "Cq0CAVe6RxpIS04S/WE6jETcMF4JQIW7MnehdhSuSJVn/qaPIHOjO4W60zyu4q0ph/v2ZGxV15dr1nAYud=="

USAGE = {
    "total_input_tokens": 500,
    "total_cached_tokens": 300,
    "total_output_tokens": 40,
    "total_thought_tokens": 120,
    "total_tool_use_tokens": 25,
    "total_tokens": 685,
}


def created() -> dict[str, Any]:
    return {"event_type": "interaction.created", "interaction": {"id": IID, "status": "in_progress", "model": "gemini-3-flash-preview"}}


def start(index: int, **step: Any) -> dict[str, Any]:
    return {"event_type": "step.start", "index": index, "step": step}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"event_type": "step.delta", "index": index, "delta": fields}


def summary(index: int, text: str) -> dict[str, Any]:
    return delta(index, type="thought_summary", content={"type": "text", "text": text})


def signature(index: int, value: str = SIG) -> dict[str, Any]:
    return delta(index, type="thought_signature", signature=value)


def text(index: int, value: str) -> dict[str, Any]:
    return delta(index, type="text", text=value)


def arguments(index: int, fragment: str) -> dict[str, Any]:
    return delta(index, type="arguments_delta", arguments=fragment)


def stop(index: int) -> dict[str, Any]:
    return {"event_type": "step.stop", "index": index}


def completed(status: str = "completed", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    interaction: dict[str, Any] = {"id": IID, "status": status}
    if usage is not None:
        interaction["usage"] = usage
    return {"event_type": "interaction.completed", "interaction": interaction}


def translate(*objs: dict[str, Any]) -> Output:
    """Translate, then check the stream is valid AG-UI (R1, R2) — for every test."""
    out = translate_lines(GRAMMAR, [orjson.dumps(o) for o in objs])
    assert_valid_stream(out.events)
    return out


# -- steps ----------------------------------------------------------------------------------------


def test_thought_step_is_a_span_holding_one_summary_message_R1_R2_P1() -> None:
    out = translate(created(), start(0, type="thought"), summary(0, "a"), summary(0, "b"), signature(0), stop(0), completed())
    assert types(out)[1:] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_ENCRYPTED_VALUE",
        "REASONING_END",
        "RUN_FINISHED",
    ]
    [start_event] = of_type(out, "REASONING_MESSAGE_START")
    assert start_event["metadata"]["reasonwire"]["reasoningKind"] == "summary"
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["ab"]


def test_signature_rides_the_thought_step_not_the_call_R3() -> None:
    out = translate(
        created(),
        start(0, type="thought"),
        summary(0, "plan"),
        signature(0),
        stop(0),
        start(1, type="function_call", id="call_1", name="f", arguments={"x": 1}),
        stop(1),
        completed("requires_action"),
    )
    [value] = of_type(out, "REASONING_ENCRYPTED_VALUE")
    reasoning_id = of_type(out, "REASONING_MESSAGE_START")[0]["messageId"]
    assert (value["subtype"], value["entityId"], value["encryptedValue"]) == ("message", reasoning_id, SIG)
    [record] = out.artefacts
    assert record.kind == "gemini.interactions.thought.signature"
    assert (record.native.value_path, record.native.position, record.native.response_id) == (["signature"], 0, IID)
    assert record.provider_block() == {"type": "thought", "summary": [{"type": "text", "text": "plan"}], "signature": SIG}


def test_thought_signature_on_a_call_step_is_malformed_R7() -> None:
    out = translate(created(), start(0, type="function_call", id="c", name="f", arguments={}), signature(0))
    assert out.rejected_lines == [3]
    assert facts(out.events).terminal["code"] == "malformed_event"


def test_complete_thought_in_step_start_is_taken_whole() -> None:
    out = translate(created(), start(0, type="thought", summary=[{"type": "text", "text": "all"}], signature=SIG), stop(0), completed())
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["all"]
    assert [r.value for r in out.artefacts] == [SIG]


def test_opaque_only_thought_is_a_message_without_content_R2_R3_P1() -> None:
    out = translate(created(), start(0, type="thought"), signature(0), stop(0), completed())
    assert of_type(out, "REASONING_MESSAGE_CONTENT") == []
    [message] = of_type(out, "REASONING_MESSAGE_START")
    assert message["metadata"]["reasonwire"]["reasoningKind"] == "none"
    [record] = out.artefacts
    assert record.native.block == {"type": "thought"}


def test_interrupted_after_the_signature_still_names_a_message_that_exists_R6() -> None:
    out = translate(created(), start(0, type="thought"), signature(0))
    [record] = out.artefacts
    assert record.entity_id == of_type(out, "REASONING_MESSAGE_START")[0]["messageId"]


def test_unsigned_thought_is_warned_not_fatal() -> None:
    out = translate(created(), start(0, type="thought"), summary(0, "x"), stop(0), completed())
    assert [w.code for w in out.warnings] == ["unsigned_thought"]
    assert out.artefacts == []
    assert facts(out.events).terminal["type"] == "RUN_FINISHED"


def test_model_output_is_a_text_message() -> None:
    out = translate(created(), start(0, type="model_output"), text(0, "Hel"), text(0, "lo"), stop(0), completed())
    assert [t["text"] for t in facts(out.events).texts.values()] == ["Hello"]


def test_complete_arguments_in_step_start_are_serialised_once() -> None:
    out = translate(created(), start(0, type="function_call", id="c1", name="f", arguments={"b": [1, 2], "a": "é"}), stop(0), completed("requires_action"))
    assert [e["delta"] for e in of_type(out, "TOOL_CALL_ARGS")] == ['{"b":[1,2],"a":"é"}']


def test_arguments_delta_fragments_are_the_arguments_not_the_placeholder() -> None:
    out = translate(
        created(),
        start(0, type="function_call", id="c1", name="f", arguments={}),
        arguments(0, '{"q":'),
        arguments(0, '"x"}'),
        stop(0),
        completed("requires_action"),
    )
    assert [t["arguments"] for t in facts(out.events).tools.values()] == ['{"q":"x"}']


def test_requires_action_finishes_with_the_calls_pending() -> None:
    out = translate(
        created(),
        start(0, type="function_call", id="c1", name="f", arguments={}),
        stop(0),
        start(1, type="function_call", id="c2", name="g", arguments={}),
        stop(1),
        completed("requires_action"),
    )
    terminal = facts(out.events).terminal
    assert terminal["type"] == "RUN_FINISHED"
    assert terminal["outcome"]["pendingToolCallIds"] == ["c1", "c2"]
    assert terminal["metadata"]["reasonwire"]["stopReason"] == "requires_action"


@pytest.mark.parametrize("status", ["incomplete", "cancelled", "budget_exceeded"])
def test_other_terminal_statuses_finish_with_the_status_kept(status: str) -> None:
    out = translate(created(), start(0, type="model_output"), text(0, "cut"), stop(0), completed(status))
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["metadata"]["reasonwire"]["stopReason"]) == ("RUN_FINISHED", status)
    assert "pendingToolCallIds" not in terminal["outcome"]


def test_failed_status_is_run_error_with_the_status_kept() -> None:
    out = translate(created(), start(0, type="thought"), signature(0), completed("failed", USAGE))
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "provider_error")
    assert terminal["metadata"]["reasonwire"]["providerCode"] == "failed"
    assert [r.complete for r in out.artefacts] == [False]
    assert terminal["usage"][0]["outputTokens"] == 160


def test_steps_still_open_at_completion_are_closed_normally_R1() -> None:
    out = translate(created(), start(0, type="thought"), summary(0, "x"), signature(0), completed())
    assert [r.complete for r in out.artefacts] == [True]
    assert "metadata" not in of_type(out, "REASONING_MESSAGE_END")[0]


# -- usage (P6) -----------------------------------------------------------------------------------


def test_usage_counts_thoughts_as_output_and_tool_use_as_input_P6() -> None:
    out = translate(created(), completed("completed", USAGE))
    [reported] = facts(out.events).terminal["usage"]
    assert reported == {
        "provider": "gcp.gemini",
        "model": "gemini-3-flash-preview",
        "inputTokens": 525,
        "outputTokens": 160,
        "totalTokens": 685,
        "reasoningTokens": 120,
        "cachedInputTokens": 300,
    }
    assert out.translator.tokens.provider_raw == USAGE


def test_running_usage_on_deltas_is_not_reported_P6() -> None:
    """Usage only from the terminal event (REFERENCE §6.5)."""
    running = {**text(0, "x"), "metadata": {"total_usage": USAGE}}
    out = translate(created(), start(0, type="model_output"), running)
    assert "usage" not in facts(out.events).terminal


# -- unknowns (P3), errors, interruption ---------------------------------------------------------


def test_unknown_event_type_is_skipped_P3() -> None:
    out = translate(created(), start(0, type="model_output"), {"event_type": "interaction.heartbeat"}, text(0, "a"), stop(0), completed())
    assert [w.code for w in out.warnings] == ["unknown_event"]
    assert out.translator.counters["unknown_events"] == 1


def test_unknown_step_is_skipped_with_its_deltas_and_stop_P3() -> None:
    out = translate(
        created(),
        start(0, type="thought"),
        summary(0, "a"),
        start(1, type="hologram_step"),
        delta(1, type="text", text="ignored"),
        delta(1, type="nonsense"),
        stop(1),
        summary(0, "b"),
        signature(0),
        stop(0),
        completed(),
    )
    assert [w.code for w in out.warnings] == ["unknown_step"]
    assert out.translator.counters["unknown_steps"] == 1
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["ab"]
    assert facts(out.events).texts == {}


def test_builtin_tool_step_is_skipped_as_unsupported() -> None:
    out = translate(created(), start(0, type="google_search_call", id="gs", arguments={}), delta(0, type="google_search_call"), stop(0), completed())
    assert [w.code for w in out.warnings] == ["unsupported_step"]


def test_unknown_delta_on_a_known_step_is_skipped_P3() -> None:
    out = translate(created(), start(0, type="model_output"), text(0, "a"), delta(0, type="sparkle", x=1), delta(0, type="image", data="iVBO"), text(0, "b"), stop(0), completed())
    assert [w.code for w in out.warnings] == ["unknown_delta", "unsupported_delta"]
    assert [t["text"] for t in facts(out.events).texts.values()] == ["ab"]


def test_non_text_summary_content_is_skipped() -> None:
    out = translate(created(), start(0, type="thought"), delta(0, type="thought_summary", content={"type": "image", "data": "x"}), signature(0), stop(0), completed())
    assert [w.code for w in out.warnings] == ["unsupported_content"]


def test_event_name_from_sse_when_event_type_absent() -> None:
    from reasonwire.workers.translators.gemini_interactions import GeminiInteractionsTranslator

    assert GeminiInteractionsTranslator().event_type({"index": 0}, "step.stop") == "step.stop"


def test_error_event_is_run_error_R1() -> None:
    out = translate(created(), start(0, type="thought"), summary(0, "x"), {"event_type": "error", "error": {"code": "quota", "message": "exhausted"}})
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["code"], terminal["message"]) == ("RUN_ERROR", "provider_error", "gemini quota: exhausted")
    assert of_type(out, "REASONING_MESSAGE_END")[0]["metadata"]["reasonwire"]["incomplete"] is True


def test_interrupted_mid_thought_keeps_the_signature_incomplete_R1_P8() -> None:
    out = translate(created(), start(0, type="thought"), summary(0, "x"), signature(0))
    terminal = facts(out.events).terminal
    assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "interrupted")
    assert [r.complete for r in out.artefacts] == [False]
    assert of_type(out, "REASONING_ENCRYPTED_VALUE") == []
    assert SIG not in terminal["message"]


def test_interrupted_call_with_partial_arguments_is_left_unterminated_R1() -> None:
    out = translate(created(), start(0, type="function_call", id="c1", name="f", arguments={}), arguments(0, '{"q":'))
    assert of_type(out, "TOOL_CALL_END") == []
    assert facts(out.events).terminal["metadata"]["reasonwire"]["incompleteToolCallIds"] == ["c1"]


@pytest.mark.parametrize(
    "bad",
    [
        start(0, type="thought"),  # the same index twice
        delta(5, type="text", text="x"),  # never started
        stop(5),
        text(0, "x"),  # a text delta on a thought step
        {"event_type": "step.start", "index": "0", "step": {"type": "thought"}},
        {"event_type": "interaction.completed", "interaction": {"id": IID}},
    ],
)
def test_malformed_known_events_are_fatal_R7(bad: dict[str, Any]) -> None:
    out = translate(created(), start(0, type="thought"), bad)
    assert out.rejected_lines == [3]
    assert facts(out.events).terminal["code"] == "malformed_event"


def test_deltas_after_a_step_stopped_are_malformed_R7() -> None:
    out = translate(created(), start(0, type="model_output"), stop(0), text(0, "late"))
    assert out.rejected_lines == [4]


# -- re-chunking (P2, R3): hypothesis -------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
# Integers stay within what the core's JSON parser (orjson) reads exactly: larger ones become floats.
_ARGS = st.dictionaries(st.text(min_size=1, max_size=6), st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=8), st.none()), max_size=4)


def _pieces(value: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(value) + 1) for c in cuts} | {0, len(value)})
    return [value[a:b] for a, b in zip(points, points[1:]) if b > a]


def _interaction(thought: list[str], signature_at: int, answer: list[str], args: list[str]) -> list[dict[str, Any]]:
    summaries = [summary(0, p) for p in thought]
    summaries.insert(signature_at % (len(summaries) + 1), signature(0))
    return [
        created(),
        start(0, type="thought"),
        *summaries,
        stop(0),
        start(1, type="function_call", id="call_a", name="lookup", arguments={}),
        *(arguments(1, p) for p in args),
        stop(1),
        start(2, type="thought"),
        signature(2, SIG_2),
        stop(2),
        start(3, type="model_output"),
        *(text(3, p) for p in answer),
        stop(3),
        completed("requires_action", USAGE),
    ]


@settings(max_examples=75, deadline=None)
@given(
    thought=_TEXT,
    answer=_TEXT,
    args=_ARGS,
    thought_cuts=st.lists(st.integers(0, 100), max_size=8),
    answer_cuts=st.lists(st.integers(0, 100), max_size=8),
    args_cuts=st.lists(st.integers(0, 100), max_size=8),
    signature_at=st.integers(0, 20),
)
def test_resplitting_deltas_changes_nothing_P2_R3(
    thought: str,
    answer: str,
    args: dict[str, Any],
    thought_cuts: list[int],
    answer_cuts: list[int],
    args_cuts: list[int],
    signature_at: int,
) -> None:
    args_json = json.dumps(args, ensure_ascii=False)
    whole = translate(*_interaction([thought], 1, [answer], [args_json]))
    resplit = translate(*_interaction(_pieces(thought, thought_cuts), signature_at, _pieces(answer, answer_cuts), _pieces(args_json, args_cuts)))
    for out in (whole, resplit):
        got = facts(out.events)
        assert [r["text"] for r in got.reasoning.values()] == [thought, ""]
        assert [t["text"] for t in got.texts.values()] == [answer]
        assert [t["arguments"] for t in got.tools.values()] == [args_json]
    assert [record_json(a) for a in resplit.artefacts] == [record_json(a) for a in whole.artefacts]
    assert [a.value for a in resplit.artefacts] == [SIG, SIG_2]


# -- signatures: empty, before the summary --------------------------------------------------------


def test_empty_thought_signature_is_an_unsigned_thought_R3_P5() -> None:
    out = translate(created(), start(0, type="thought"), summary(0, "plan"), signature(0, ""), stop(0), completed())
    assert not of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert [r.complete for r in out.artefacts] == [False]
    codes = [w.code for w in out.warnings]
    assert "empty_signature" in codes and "unsigned_thought" in codes


def test_signature_before_the_summary_keeps_the_thought_a_summary_P1() -> None:
    out = translate(created(), start(0, type="thought"), signature(0), summary(0, "Readable plan."), stop(0), completed())
    [start_event] = of_type(out, "REASONING_MESSAGE_START")
    assert start_event["metadata"]["reasonwire"]["reasoningKind"] == "summary"
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["Readable plan."]
    [value] = of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert value["entityId"] == start_event["messageId"]
