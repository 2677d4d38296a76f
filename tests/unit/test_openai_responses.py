"""The OpenAI Responses translator, rule by rule and case by case (P9).

Streams are built from the grammar in REFERENCE §1.2 by :class:`ResponseStream`,
or read from the fixtures; every stream a test produces is checked with
``assert_valid_stream`` (ag-ui-validate, warnings fail).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance.oracle import (
    LOCAL_FIXTURES,
    Output,
    assert_valid_stream,
    facts,
    translate_file,
    translate_lines,
)
from reasonwire.workers.cli import main as cli_main
from reasonwire.workers.translators.openai_responses import ENCRYPTED_CONTENT_KIND

GRAMMAR = "openai-responses"
LOCAL = LOCAL_FIXTURES / GRAMMAR
SECRET = "gAAAAAB-opaque/secret+value=="


# -- helpers -----------------------------------------------------------------------------


def _checked(out: Output) -> Output:
    assert_valid_stream(out.events)
    return out


def _fixture(path: Path) -> tuple[Output, dict[str, Any]]:
    return _checked(translate_file(GRAMMAR, path)), json.loads(path.with_suffix(".expected.json").read_text())


def _translate(events: list[dict[str, Any]]) -> Output:
    return _checked(translate_lines(GRAMMAR, [json.dumps(e).encode() for e in events]))


def _of(out: Output, kind: str) -> list[dict[str, Any]]:
    return [e for e in out.events if e["type"] == kind]


def _index(out: Output, kind: str) -> int:
    return next(i for i, e in enumerate(out.events) if e["type"] == kind)


def _meta(event: dict[str, Any]) -> dict[str, Any]:
    return (event.get("metadata") or {}).get("reasonwire", {})


def _terminal(out: Output) -> dict[str, Any]:
    return out.events[-1]


Chunker = Callable[[str], list[str]]


def _whole(text: str) -> list[str]:
    return [text] if text else []


class ResponseStream:
    """Builds one Responses stream event by event, as REFERENCE §1.2 lays it out.

    Parts are given as their full text; ``chunks`` splits each into the deltas to send
    (``lambda t: []`` sends none: the part then arrives only in its ``.done`` events).
    """

    def __init__(self, response_id: str = "resp_test", model: str = "gpt-5-2025-08-07") -> None:
        self.response_id, self.model = response_id, model
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def add(self, type_: str, **fields: Any) -> ResponseStream:
        self.events.append({"type": type_, "sequence_number": len(self.events), **fields})
        return self

    def response(self, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "status": status,
            "model": self.model,
            "output": list(self.output),
            **fields,
        }

    def start(self) -> ResponseStream:
        return self.add("response.created", response=self.response("in_progress", output=[]))

    def reasoning(
        self,
        index: int,
        item_id: str,
        *,
        summary: tuple[str, ...] = (),
        raw: tuple[str, ...] = (),
        encrypted: str | None = None,
        done: bool = True,
        restate: bool = True,
        chunks: Chunker = _whole,
    ) -> ResponseStream:
        self.add(
            "response.output_item.added", output_index=index, item={"id": item_id, "type": "reasoning", "summary": []}
        )
        summary_texts, raw_texts = list(summary), list(raw)
        for i, text in enumerate(summary_texts):
            common = {"item_id": item_id, "output_index": index, "summary_index": i}
            self.add("response.reasoning_summary_part.added", **common, part={"type": "summary_text", "text": ""})
            for d in chunks(text):
                self.add("response.reasoning_summary_text.delta", **common, delta=d)
            if restate:
                self.add("response.reasoning_summary_text.done", **common, text=summary_texts[i])
                self.add(
                    "response.reasoning_summary_part.done",
                    **common,
                    part={"type": "summary_text", "text": summary_texts[i]},
                )
        for i, text in enumerate(raw_texts):
            common = {"item_id": item_id, "output_index": index, "content_index": i}
            self.add("response.content_part.added", **common, part={"type": "reasoning_text", "text": ""})
            for d in chunks(text):
                self.add("response.reasoning_text.delta", **common, delta=d)
            if restate:
                self.add("response.reasoning_text.done", **common, text=raw_texts[i])
                self.add("response.content_part.done", **common, part={"type": "reasoning_text", "text": raw_texts[i]})
        item: dict[str, Any] = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in summary_texts],
        }
        if raw:
            item["content"] = [{"type": "reasoning_text", "text": t} for t in raw_texts]
        if encrypted is not None:
            item["encrypted_content"] = encrypted
        self.output.append(item)
        if done:
            self.add("response.output_item.done", output_index=index, item=item)
        return self

    def message(
        self,
        index: int,
        item_id: str,
        text: str,
        *,
        phase: str | None = None,
        restate: bool = True,
        chunks: Chunker = _whole,
    ) -> ResponseStream:
        added = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        if phase:
            added["phase"] = phase
        self.add("response.output_item.added", output_index=index, item=added)
        common = {"item_id": item_id, "output_index": index, "content_index": 0}
        self.add("response.content_part.added", **common, part={"type": "output_text", "annotations": [], "text": ""})
        for d in chunks(text):
            self.add("response.output_text.delta", **common, delta=d, logprobs=[])
        part = {"type": "output_text", "annotations": [], "text": text}
        if restate:
            self.add("response.output_text.done", **common, text=text, logprobs=[])
            self.add("response.content_part.done", **common, part=part)
        item = {**added, "status": "completed", "content": [part]}
        self.output.append(item)
        return self.add("response.output_item.done", output_index=index, item=item)

    def call(
        self,
        index: int,
        item_id: str,
        call_id: str,
        name: str,
        arguments: str,
        *,
        restate: bool = True,
        chunks: Chunker = _whole,
    ) -> ResponseStream:
        self.add(
            "response.output_item.added",
            output_index=index,
            item={
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call_id,
                "name": name,
            },
        )
        for d in chunks(arguments):
            self.add("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=d)
        if restate:
            self.add(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                arguments=arguments,
                name=name,
            )
        item = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "arguments": arguments,
            "call_id": call_id,
            "name": name,
        }
        self.output.append(item)
        return self.add("response.output_item.done", output_index=index, item=item)

    def completed(self, usage: dict[str, Any] | None = None) -> ResponseStream:
        return self.add("response.completed", response=self.response("completed", usage=usage))


USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 10},
    "output_tokens": 300,
    "output_tokens_details": {"reasoning_tokens": 250},
    "total_tokens": 400,
}


# -- P9: the article's cases ------------------------------------------------------------------


def test_reasoning_then_answer_P9_P1() -> None:
    out, expected = _fixture(LOCAL / "a_reasoning_then_answer.jsonl")
    got = facts(out.events)
    [(_, reasoning_id), (_, text_id)] = got.ordering
    assert got.reasoning[reasoning_id]["kind"] == "summary"
    assert got.reasoning[reasoning_id]["text"] == expected["reasoning_messages"][0]["text"]
    assert got.texts[text_id]["text"] == expected["final_answer_text"]
    assert _of(out, "RUN_FINISHED")[0]["outcome"] == {"type": "success"}  # an answer turn: nothing pending


def test_encrypted_content_comes_from_item_done_never_from_added_R3() -> None:
    """§1.4: on output_item.added it "may be incomplete"; the fixture carries a truncated prefix there."""
    out, expected = _fixture(LOCAL / "a_reasoning_then_answer.jsonl")
    [event] = _of(out, "REASONING_ENCRYPTED_VALUE")
    assert event["encryptedValue"] == expected["opaque_artifacts"][0]["value"]
    [record] = out.artefacts
    assert record.value == expected["opaque_artifacts"][0]["value"] and record.complete
    assert record.kind == ENCRYPTED_CONTENT_KIND


def test_encrypted_value_rides_the_items_message_inside_its_span_once_R3() -> None:
    out, _ = _fixture(LOCAL / "a_reasoning_then_answer.jsonl")
    [event] = _of(out, "REASONING_ENCRYPTED_VALUE")
    [start] = _of(out, "REASONING_MESSAGE_START")
    assert event["entityId"] == start["messageId"] and event["subtype"] == "message"
    # released once the following item is known, still inside the item's span, before the answer starts
    assert (
        _index(out, "REASONING_MESSAGE_END") < _index(out, "REASONING_ENCRYPTED_VALUE") < _index(out, "REASONING_END")
    )
    assert _index(out, "REASONING_END") < _index(out, "TEXT_MESSAGE_START")


@pytest.mark.parametrize("case", ["a_reasoning_then_answer", "b_reasoning_then_tool_call"])
def test_artefact_rebuilds_the_replay_item_byte_for_byte_P5(case: str) -> None:
    """The record's block plus its value is the input item REFERENCE §1.7 says to send back."""
    out, expected = _fixture(LOCAL / f"{case}.jsonl")
    [record] = out.artefacts
    replay = expected["replay"]["append_to_input"]
    assert record.provider_block() == replay[0]
    following = replay[1]
    assert record.native.extra["following_item"] == {
        k: following[k] for k in ("type", "id", "call_id") if k in following
    }
    assert record.native.item_id == replay[0]["id"] and record.native.position == 0
    assert record.native.response_id == out.translator.response_id


def test_one_tool_call_keeps_call_id_and_is_pending_P9() -> None:
    out, expected = _fixture(LOCAL / "b_reasoning_then_tool_call.jsonl")
    [call] = expected["tool_calls"]
    [start] = _of(out, "TOOL_CALL_START")
    assert start["toolCallId"] == call["id"]  # call_…, not the fc_… item id (§1.3)
    assert _meta(start)["itemId"] == call["provider_item_id"]
    assert facts(out.events).tools[call["id"]]["arguments"] == call["arguments"]
    assert _terminal(out)["outcome"]["pendingToolCallIds"] == [call["id"]]


def test_interleaved_reasoning_items_and_calls_each_keep_their_follower_P9_P5() -> None:
    out, expected = _fixture(LOCAL / "c_interleaved_reasoning_tool_calls.jsonl")
    assert len(_of(out, "REASONING_START")) == 2 and len(_of(out, "REASONING_END")) == 2
    records = out.artefacts
    assert [r.value for r in records] == [a["value"] for a in expected["opaque_artifacts"]]
    assert [r.native.extra["following_item"] for r in records] == [
        a["following_item"] for a in expected["opaque_artifacts"]
    ]
    replay = expected["replay"]["append_to_input"]
    assert [r.provider_block() for r in records] == [replay[0], replay[2]]
    assert _terminal(out)["outcome"]["pendingToolCallIds"] == expected["end"]["pending_tool_calls"]


def test_summary_only_has_no_opaque_state_P9() -> None:
    out, _ = _fixture(LOCAL / "e1_summary_only.jsonl")
    assert not _of(out, "REASONING_ENCRYPTED_VALUE") and not out.artefacts
    assert [_meta(e)["reasoningKind"] for e in _of(out, "REASONING_MESSAGE_START")] == ["summary"]


def test_opaque_only_item_gets_a_message_to_carry_its_value_P9_R3() -> None:
    out, expected = _fixture(LOCAL / "e2_opaque_only.jsonl")
    [start] = _of(out, "REASONING_MESSAGE_START")
    assert _meta(start)["reasoningKind"] == "none"
    assert not _of(out, "REASONING_MESSAGE_CONTENT")  # R2: no empty deltas
    [event] = _of(out, "REASONING_ENCRYPTED_VALUE")
    assert event["entityId"] == start["messageId"]
    assert event["encryptedValue"] == expected["opaque_artifacts"][0]["value"]
    assert out.artefacts[0].provider_block() == {
        "id": "rs_e2000000000000000000000000000000000000000000000001",
        "type": "reasoning",
        "summary": [],
        "encrypted_content": expected["opaque_artifacts"][0]["value"],
    }


def test_raw_reasoning_text_is_marked_raw_P1() -> None:
    out, expected = _fixture(LOCAL / "e4_raw_reasoning_text.jsonl")
    [start] = _of(out, "REASONING_MESSAGE_START")
    assert _meta(start)["reasoningKind"] == "raw"
    assert facts(out.events).reasoning[start["messageId"]]["text"] == expected["reasoning_messages"][0]["text"]


def test_summary_and_raw_text_of_one_item_stay_apart_in_one_span_P1() -> None:
    stream = (
        ResponseStream()
        .start()
        .reasoning(0, "rs_both", summary=("Summary.",), raw=("Raw thoughts.",), encrypted=SECRET)
        .message(1, "msg_1", "Done.")
        .completed(USAGE)
    )
    out = _translate(stream.events)
    assert len(_of(out, "REASONING_START")) == 1
    starts = _of(out, "REASONING_MESSAGE_START")
    assert [_meta(s)["reasoningKind"] for s in starts] == ["summary", "raw"]
    got = facts(out.events).reasoning
    assert [got[s["messageId"]]["text"] for s in starts] == ["Summary.", "Raw thoughts."]
    # the item's first message stands for the item and carries its value
    assert _of(out, "REASONING_ENCRYPTED_VALUE")[0]["entityId"] == starts[0]["messageId"]


def test_summary_parts_join_into_one_message_per_item() -> None:
    """The fixture's convention: one reasoning message per item, parts joined with a blank line."""
    stream = ResponseStream().start().reasoning(0, "rs_1", summary=("One.", "", "Two."), encrypted=SECRET).completed()
    out = _translate(stream.events)
    [start] = _of(out, "REASONING_MESSAGE_START")
    assert facts(out.events).reasoning[start["messageId"]]["text"] == "One.\n\nTwo."


def test_interrupted_mid_reasoning_marks_it_incomplete_P9_R1() -> None:
    out, _ = _fixture(LOCAL / "d_interrupted_mid_reasoning.jsonl")
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "interrupted"
    assert _meta(_of(out, "REASONING_MESSAGE_END")[0])["incomplete"] is True
    assert _meta(_of(out, "REASONING_END")[0])["incomplete"] is True
    assert not out.artefacts  # encrypted_content only ever arrives on output_item.done


def test_interrupted_before_the_following_item_keeps_value_unannounced_P5() -> None:
    out, expected = _fixture(LOCAL / "d2_interrupted_before_following_item.jsonl")
    assert not _of(out, "REASONING_ENCRYPTED_VALUE")
    [record] = out.artefacts
    assert record.value == expected["opaque_artifacts"][0]["value"] and record.complete is False
    assert "following_item" not in record.native.extra


def test_unknown_events_are_counted_and_skipped_P3() -> None:
    out, expected = _fixture(LOCAL / "f_unknown_event_types.jsonl")
    unknown = [w for w in out.warnings if w.code.startswith("unknown")]
    assert [w.line for w in unknown] == expected["unknown_lines"]
    assert out.translator.counters["unknown_events"] == 3  # two keepalives, one unknown type
    assert facts(out.events).reasoning  # the open summary part was not disturbed
    assert _terminal(out)["type"] == "RUN_FINISHED"


def test_builtin_tool_events_are_skipped_with_a_count_never_a_crash_P3() -> None:
    out, _ = _fixture(LOCAL / "f_unknown_event_types.jsonl")
    assert out.translator.counters["unsupported_events"] == 3
    assert [w.code for w in out.warnings].count("unsupported_event") == 3  # one per event type
    assert [w.code for w in out.warnings].count("unsupported_item") == 1
    # the reasoning item's follower is the web search call, whatever we make of it
    assert out.artefacts[0].native.extra["following_item"]["type"] == "web_search_call"


def test_unknown_content_part_is_skipped_and_the_rest_of_the_message_kept_P3() -> None:
    stream = ResponseStream().start()
    stream.add(
        "response.output_item.added",
        output_index=0,
        item={"id": "msg_1", "type": "message", "role": "assistant", "content": []},
    )
    stream.add(
        "response.content_part.added",
        item_id="msg_1",
        output_index=0,
        content_index=0,
        part={"type": "output_hologram"},
    )
    stream.add(
        "response.content_part.done", item_id="msg_1", output_index=0, content_index=0, part={"type": "output_hologram"}
    )
    stream.add(
        "response.content_part.added",
        item_id="msg_1",
        output_index=0,
        content_index=1,
        part={"type": "output_text", "text": ""},
    )
    stream.add("response.output_text.delta", item_id="msg_1", output_index=0, content_index=1, delta="Hi.")
    item = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_hologram"}, {"type": "output_text", "text": "Hi."}],
    }
    stream.add("response.output_item.done", output_index=0, item=item)
    out = _translate(stream.completed().events)
    assert [w.code for w in out.warnings] == ["unknown_part"]
    assert [t["text"] for t in facts(out.events).texts.values()] == ["Hi."]


# -- terminal events -----------------------------------------------------------------------------


def test_response_failed_is_a_run_error_with_the_provider_code() -> None:
    out, expected = _fixture(LOCAL / "g3_response_failed.jsonl")
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "provider_error"
    assert _meta(terminal)["providerCode"] == expected["end"]["provider_code"]
    assert [r.complete for r in out.artefacts] == [True]  # the item was whole before the failure


@pytest.mark.parametrize("case", ["g_error_event_flat", "g2_error_event_midstream_nested"])
def test_error_event_is_read_flat_and_nested(case: str) -> None:
    """§1.5: documented flat, production nested — both end the run the same way."""
    out, expected = _fixture(LOCAL / f"{case}.jsonl")
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "provider_error"
    assert _meta(terminal)["providerCode"] == expected["end"]["provider_code"]
    assert "The server had an error" in terminal["message"]
    assert _meta(_of(out, "REASONING_MESSAGE_END")[0])["incomplete"] is True


def test_error_event_without_code_still_ends_the_run() -> None:
    out = _translate(ResponseStream().start().add("error", message="boom").events)
    assert _terminal(out)["type"] == "RUN_ERROR" and _terminal(out)["code"] == "provider_error"


def test_incomplete_finishes_with_its_reason_and_everything_closed() -> None:
    out, expected = _fixture(LOCAL / "h_incomplete_max_output_tokens.jsonl")
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_FINISHED"
    assert _meta(terminal)["stopReason"] == expected["end"]["reason"]
    assert out.translator.stop_reason == "max_output_tokens"
    assert out.translator.counters["incomplete_reasoning_items"] == 1
    [record] = out.artefacts  # the last output item: no follower, released at the terminal event
    assert record.complete and record.native.extra == {"following_item": None}
    assert record.native.block["status"] == "incomplete"


def test_incomplete_closes_units_left_open() -> None:
    stream = ResponseStream().start().reasoning(0, "rs_1", summary=("Partial",), restate=False, done=False)
    stream.add(
        "response.incomplete",
        response=stream.response("incomplete", incomplete_details={"reason": "max_output_tokens"}, output=[]),
    )
    out = _translate(stream.events)
    assert _terminal(out)["type"] == "RUN_FINISHED"
    assert len(_of(out, "REASONING_MESSAGE_END")) == 1 and len(_of(out, "REASONING_END")) == 1


def test_terminal_response_output_stands_in_for_a_missing_item_done_P2() -> None:
    """§1.4: encrypted_content is on output_item.done *or* response.completed.response.output."""
    stream = ResponseStream().start().reasoning(0, "rs_1", summary=("Thinking.",), encrypted=SECRET, done=False)
    out = _translate(stream.completed(USAGE).events)
    [event] = _of(out, "REASONING_ENCRYPTED_VALUE")
    assert event["encryptedValue"] == SECRET
    assert out.artefacts[0].complete and out.artefacts[0].native.extra == {"following_item": None}
    assert [r["text"] for r in facts(out.events).reasoning.values()] == ["Thinking."]


# -- P2: incremental and completed parts are not emitted twice ---------------------------------------


def test_done_events_that_restate_the_deltas_add_nothing_P2() -> None:
    out, _ = _fixture(LOCAL / "a_reasoning_then_answer.jsonl")
    lines = (LOCAL / "a_reasoning_then_answer.jsonl").read_text().splitlines()
    deltas = sum('"response.reasoning_summary_text.delta"' in line for line in lines)
    # one content event per delta, plus nothing for text.done, part.done, item.done and response.output
    assert len(_of(out, "REASONING_MESSAGE_CONTENT")) == deltas


def test_done_without_deltas_fills_the_gap_exactly_once_P2() -> None:
    out, expected = _fixture(LOCAL / "j_done_without_deltas_fills_gap.jsonl")
    got = facts(out.events)
    assert [r["text"] for r in got.reasoning.values()] == [expected["reasoning_messages"][0]["text"]]
    assert len(_of(out, "REASONING_MESSAGE_CONTENT")) == 1  # text.done filled it; part/item.done added nothing
    assert [t["text"] for t in got.texts.values()] == [expected["text_messages"][0]["text"]]
    assert [a["arguments"] for a in got.tools.values()] == [expected["tool_calls"][0]["arguments"]]
    assert len(_of(out, "TOOL_CALL_ARGS")) == 1


def test_prefix_deltas_get_only_the_missing_suffix_P2() -> None:
    out, _ = _fixture(LOCAL / "j_done_without_deltas_fills_gap.jsonl")
    text_deltas = [e["delta"] for e in _of(out, "TEXT_MESSAGE_CONTENT")]
    assert text_deltas == ["The answ", "er is fo", "rty-two."]


@pytest.mark.parametrize(
    ("streamed", "restated", "gap"),
    [
        ("Grüße, 🌍", "Grüße, 🌍 und mehr", " und mehr"),  # multi-byte and astral characters before the gap
        ("same text", "same text", ""),
    ],
)
def test_a_restatement_is_judged_without_keeping_the_text_P2(streamed: str, restated: str, gap: str) -> None:
    """The part keeps a length and a digest, not its text: the gap is still exact."""
    stream = ResponseStream().start()
    stream.message(0, "msg_1", streamed, restate=False)
    stream.events[-1]["item"]["content"][0]["text"] = restated
    out = _translate(stream.completed().events)
    deltas = [e["delta"] for e in _of(out, "TEXT_MESSAGE_CONTENT")]
    assert deltas == ([streamed, gap] if gap else [streamed])
    assert _terminal(out)["type"] == "RUN_FINISHED"


def test_done_that_disagrees_with_its_deltas_is_a_grammar_error_R7_P8() -> None:
    stream = ResponseStream().start()
    stream.message(0, "msg_1", "Hello", restate=False)
    stream.events[-1]["item"]["content"][0]["text"] = "Goodbye, private words"
    out = _translate(stream.completed().events)
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "malformed_event"
    assert out.rejected_lines == [len(stream.events) - 1]
    assert "private" not in terminal["message"] and "Hello" not in terminal["message"]  # sizes only, no content


# -- refusals, phases, usage ------------------------------------------------------------------------


def test_refusal_is_answer_content_not_reasoning_P1() -> None:
    out, expected = _fixture(LOCAL / "k_refusal.jsonl")
    got = facts(out.events)
    [refusal] = [e for e in _of(out, "TEXT_MESSAGE_START") if _meta(e).get("contentKind") == "refusal"]
    assert got.texts[refusal["messageId"]]["text"] == expected["text_messages"][0]["text"]
    assert all(expected["text_messages"][0]["text"] not in r["text"] for r in got.reasoning.values())


def test_commentary_phase_is_kept_on_the_text_message() -> None:
    out, _ = _fixture(LOCAL / "i_commentary_phase_then_tool_call.jsonl")
    [start] = _of(out, "TEXT_MESSAGE_START")
    assert _meta(start)["phase"] == "commentary"


def test_usage_keeps_reasoning_inside_output_never_added_P6() -> None:
    out = _translate(ResponseStream().start().message(0, "msg_1", "Hi.").completed(USAGE).events)
    [usage] = _terminal(out)["usage"]
    assert usage["inputTokens"] == 100 and usage["outputTokens"] == 300
    assert usage["reasoningTokens"] == 250 and usage["totalTokens"] == 400
    assert usage["cachedInputTokens"] == 40 and usage["cacheWriteInputTokens"] == 10
    assert out.translator.tokens.provider_raw == USAGE
    assert out.translator.usage_record().tokens.reasoning_tokens == 250


def test_usage_on_a_failed_response_rides_the_run_error_P6() -> None:
    stream = ResponseStream().start()
    stream.add(
        "response.failed",
        response=stream.response("failed", usage=USAGE, error={"code": "server_error", "message": "x"}),
    )
    out = _translate(stream.events)
    assert _terminal(out)["usage"][0]["outputTokens"] == 300


def test_missing_usage_is_unknown_not_zero_P6() -> None:
    out = _translate(ResponseStream().start().message(0, "msg_1", "Hi.").completed(None).events)
    assert "usage" not in _terminal(out)
    assert out.translator.tokens.reasoning_tokens is None


# -- R7: malformed known events ------------------------------------------------------------------


def test_malformed_known_event_ends_the_run_and_names_the_line_R7() -> None:
    out, expected = _fixture(LOCAL / "m_malformed_known_event.jsonl")
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "malformed_event"
    assert out.rejected_lines == [expected["end"]["malformed_line"]]
    assert f"line {expected['end']['malformed_line']}" in terminal["message"]
    assert [w.code for w in out.warnings] == ["event_after_end"]
    assert facts(out.events).texts  # what was streamed before is kept


def _started_with_items() -> ResponseStream:
    stream = ResponseStream().start()
    stream.add("response.output_item.added", output_index=0, item={"id": "rs_1", "type": "reasoning", "summary": []})
    return stream


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_9",
                "output_index": 9,
                "summary_index": 0,
                "delta": "x",
            },
            "never added",
        ),
        (
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "delta": 7,
            },
            "'delta'",
        ),
        (
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_2",
                "output_index": 0,
                "summary_index": 0,
                "delta": "x",
            },
            "item_id",
        ),
        (
            {
                "type": "response.output_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "x",
            },
            "not a message",
        ),
        (
            {"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "message"}},
            "added as reasoning",
        ),
        (
            {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning"}},
            "added twice",
        ),
        (
            {"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "name": "f"}},
            "'call_id'",
        ),
        ({"type": "response.completed"}, "'response'"),
        ({"type": "error", "error": "not an object"}, "'error'"),
    ],
)
def test_malformed_known_events_are_fatal_R7(event: dict[str, Any], reason: str) -> None:
    out = _translate([*_started_with_items().events, event])
    terminal = _terminal(out)
    assert terminal["type"] == "RUN_ERROR" and terminal["code"] == "malformed_event", terminal
    assert reason in terminal["message"]
    assert out.rejected_lines == [3]


def test_a_malformed_following_item_settles_nothing_R7_P5() -> None:
    """The held value must not name a follower that failed validation: it stays incomplete, unannounced."""
    stream = ResponseStream().start().reasoning(0, "rs_1", summary=("Plan.",), encrypted=SECRET)
    stream.add("response.output_item.added", output_index=1, item={"id": "fc_1", "type": "function_call", "name": "f"})
    out = _translate(stream.events)
    assert _terminal(out)["code"] == "malformed_event"
    assert not _of(out, "REASONING_ENCRYPTED_VALUE")
    [record] = out.artefacts
    assert record.complete is False and "following_item" not in record.native.extra


def test_a_restated_part_of_non_string_type_is_skipped_never_a_crash_P3() -> None:
    stream = ResponseStream().start().message(0, "msg_1", "Hi.")
    item = json.loads(json.dumps(stream.events[-1]["item"]))
    item["content"][0] = {"type": ["output_text"], "text": "Hi. And more."}
    stream.events[-1]["item"] = item
    out = _translate(stream.completed().events)
    assert _terminal(out)["type"] == "RUN_FINISHED"  # a part of no known type restates nothing
    assert [t["text"] for t in facts(out.events).texts.values()] == ["Hi."]


def test_opaque_values_never_reach_warnings_or_errors_P8() -> None:
    stream = ResponseStream().start().reasoning(0, "rs_1", encrypted=SECRET)
    stream.add(
        "response.output_item.done",
        output_index=0,
        item={"id": "rs_1", "type": "reasoning", "encrypted_content": SECRET},
    )
    out = _translate(stream.events)
    assert _terminal(out)["code"] == "malformed_event"
    assert all(SECRET not in w.message for w in out.warnings)
    assert SECRET not in _terminal(out)["message"]
    assert all(SECRET not in repr(r) for r in out.artefacts)


# -- the CLI ---------------------------------------------------------------------------------------


def test_translate_command_speaks_openai_responses(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    artefacts = tmp_path / "artefacts.jsonl"
    status = cli_main(
        [
            "translate",
            "--provider",
            GRAMMAR,
            "--artefacts",
            str(artefacts),
            str(LOCAL / "b_reasoning_then_tool_call.jsonl"),
        ]
    )
    assert status == 0
    events = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert_valid_stream(events)
    assert events[-1]["type"] == "RUN_FINISHED"
    [record] = [json.loads(line) for line in artefacts.read_text().splitlines()]
    assert record["kind"] == ENCRYPTED_CONTENT_KIND


# -- property: re-splitting deltas changes nothing (P2, R3) -----------------------------------------


_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def _resplittable_stream(
    summary: list[str], raw: str, answer: str, arguments: str, cuts: list[int] | None
) -> list[dict[str, Any]]:
    """``cuts=None``: no deltas at all — every part arrives only in its ``.done`` events."""
    chunks: Chunker = (lambda t: []) if cuts is None else (lambda t: _split(t, cuts))
    stream = ResponseStream().start()
    stream.reasoning(0, "rs_1", summary=tuple(summary), raw=(raw,), encrypted=SECRET, chunks=chunks)
    stream.call(1, "fc_1", "call_1", "lookup", arguments, chunks=chunks)
    stream.reasoning(2, "rs_2", summary=(summary[0],), encrypted=SECRET[::-1], chunks=chunks)
    stream.message(3, "msg_1", answer, chunks=chunks)
    return stream.completed(USAGE).events


@settings(max_examples=60, deadline=None)
@given(
    summary=st.lists(_TEXT, min_size=1, max_size=3),
    raw=_TEXT,
    answer=_TEXT,
    arguments=st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=10), max_size=4).map(json.dumps),
    cuts_a=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
    cuts_b=st.lists(st.integers(min_value=0, max_value=200), max_size=12) | st.none(),
)
def test_resplit_deltas_give_identical_output_and_artefacts_P2_R3(
    summary: list[str], raw: str, answer: str, arguments: str, cuts_a: list[int], cuts_b: list[int] | None
) -> None:
    one = _translate(_resplittable_stream(summary, raw, answer, arguments, cuts_a))
    two = _translate(_resplittable_stream(summary, raw, answer, arguments, cuts_b))
    for out in (one, two):
        got = facts(out.events)
        texts = [r["text"] for r in got.reasoning.values()]
        assert texts == ["\n\n".join(summary), raw, summary[0]]
        assert [t["arguments"] for t in got.tools.values()] == [arguments]
        assert [t["text"] for t in got.texts.values()] == [answer]
    assert facts(one.events).ordering == facts(two.events).ordering
    assert [r.model_dump_json() for r in one.artefacts] == [r.model_dump_json() for r in two.artefacts]
    assert [r.value for r in one.artefacts] == [SECRET, SECRET[::-1]]


# -- edge cases: call order, split surrogates, failures, duplicates, empty values ----------------


def _numbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``sequence_number`` strictly increasing from 0, as every Responses event carries (§1.1)."""
    return [{"type": e["type"], "sequence_number": n, **{k: v for k, v in e.items() if k != "type"}} for n, e in enumerate(events)]


def _created(rid: str = "resp_i14") -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": rid, "object": "response", "status": "in_progress", "model": "gpt-5", "output": []}}


def _call_added(index: int, call_id: str) -> dict[str, Any]:
    item = {"id": f"fc_{index}", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": call_id, "name": "lookup"}
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _call_done(index: int, call_id: str, arguments: str) -> dict[str, Any]:
    item = {"id": f"fc_{index}", "type": "function_call", "status": "completed", "arguments": arguments, "call_id": call_id, "name": "lookup"}
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def _args(index: int, delta: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "item_id": f"fc_{index}", "output_index": index, "delta": delta}


def _text_item(index: int, *deltas: str, done_text: str | None = None) -> list[dict[str, Any]]:
    common = {"item_id": "msg_1", "output_index": index, "content_index": 0}
    added = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    events = [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.content_part.added", **common, "part": {"type": "output_text", "annotations": [], "text": ""}},
    ]
    events += [{"type": "response.output_text.delta", **common, "delta": d, "logprobs": []} for d in deltas]
    if done_text is not None:
        part = {"type": "output_text", "annotations": [], "text": done_text}
        events += [
            {"type": "response.output_text.done", **common, "text": done_text, "logprobs": []},
            {"type": "response.content_part.done", **common, "part": part},
            {"type": "response.output_item.done", "output_index": index, "item": {**added, "status": "completed", "content": [part]}},
        ]
    return events


def _completed(status: str = "completed", **fields: Any) -> dict[str, Any]:
    return {"type": f"response.{status}", "response": {"id": "resp_i14", "object": "response", "status": status, "model": "gpt-5", **fields}}


def test_pending_tool_calls_are_in_call_order_when_done_events_interleave_P9() -> None:
    events = _numbered([
        _created(),
        _call_added(0, "call_A"),
        _call_added(1, "call_B"),
        _args(1, '{"q":"b"}'),
        _args(0, '{"q":"a"}'),
        _call_done(1, "call_B", '{"q":"b"}'),  # the second call completes first
        _call_done(0, "call_A", '{"q":"a"}'),
        _completed(),
    ])
    out = _translate(events)
    started = [e["toolCallId"] for e in _of(out, "TOOL_CALL_START")]
    assert started == ["call_A", "call_B"]
    assert _terminal(out)["outcome"]["pendingToolCallIds"] == started


def test_escaped_surrogate_halves_split_across_deltas_join_into_one_character() -> None:
    """``"\\ud83d"`` then ``"\\ude00"``: valid JSON the SDKs accept; the text is the emoji (R2: no empty delta)."""
    events = _numbered([_created(), *_text_item(0, "Hi \ud83d", "\ude00!", done_text="Hi 😀!"), _completed()])
    lines = [json.dumps(e).encode() for e in events]
    assert b"\\ud83d" in lines[3] and b"\\ude00" in lines[4]  # escaped halves, each alone in its event
    out = _checked(translate_lines(GRAMMAR, lines))
    assert [t["text"] for t in facts(out.events).texts.values()] == ["Hi 😀!"]
    assert all(e["delta"] for e in _of(out, "TEXT_MESSAGE_CONTENT"))
    assert _terminal(out)["type"] == "RUN_FINISHED"


def test_reasoning_item_done_before_response_failed_keeps_its_value_complete_R3_P5() -> None:
    item = {"id": "rs_F", "type": "reasoning", "summary": [], "encrypted_content": SECRET}
    events = _numbered([
        _created(),
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_F", "type": "reasoning", "summary": []}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        _completed("failed", error={"code": "server_error", "message": "boom"}),
    ])
    out = _translate(events)
    [record] = out.artefacts
    assert record.value == SECRET and record.complete
    assert record.native.extra["following_item"] is None  # replay decides (a reasoning item with no following item is left out)
    assert [e["encryptedValue"] for e in _of(out, "REASONING_ENCRYPTED_VALUE")] == [SECRET]
    assert _terminal(out)["type"] == "RUN_ERROR" and _terminal(out)["code"] == "provider_error"
    assert SECRET not in _terminal(out)["message"]


def test_a_duplicated_delta_with_the_same_sequence_number_is_dropped_with_a_warning_P2() -> None:
    events = _numbered([_created(), *_text_item(0, "Hel", "lo", done_text="Hello"), _completed()])
    lines = [json.dumps(e).encode() for e in events]
    lines.insert(4, lines[3])  # the first delta delivered twice: same sequence_number, same bytes
    out = _checked(translate_lines(GRAMMAR, lines))
    assert [t["text"] for t in facts(out.events).texts.values()] == ["Hello"]
    assert _terminal(out)["type"] == "RUN_FINISHED"
    assert [(w.code, w.line) for w in out.warnings] == [("duplicate_event", 5)]


def test_response_incomplete_marks_the_units_it_truncated_incomplete_R1() -> None:
    events = _numbered([
        _created(),
        *_text_item(0, "The answer is"),  # cut by max_output_tokens: no .done events
        _completed("incomplete", incomplete_details={"reason": "max_output_tokens"}),
    ])
    out = _translate(events)
    [end] = _of(out, "TEXT_MESSAGE_END")
    assert _meta(end) == {"incomplete": True}
    assert _terminal(out)["type"] == "RUN_FINISHED"
    assert _meta(_terminal(out))["stopReason"] == "max_output_tokens"


@pytest.mark.parametrize("summary", [(), ("Thinking it over.",)])
def test_empty_encrypted_content_is_unsigned_like_every_grammar_R3_P5(summary: tuple[str, ...]) -> None:
    stream = ResponseStream().start().reasoning(0, "rs_E", summary=summary, encrypted="").message(1, "msg_E", "ok").completed()
    out = _translate(stream.events)
    assert not _of(out, "REASONING_ENCRYPTED_VALUE")
    assert all(not r.complete for r in out.artefacts)
    assert "empty_signature" in [w.code for w in out.warnings]
    assert [m["kind"] for m in facts(out.events).reasoning.values()] == (["summary"] if summary else [])


def test_a_half_whose_partner_never_comes_ends_as_a_replacement_character() -> None:
    events = _numbered([_created(), *_text_item(0, "cut \ud83d"), _completed("incomplete", incomplete_details={"reason": "max_output_tokens"})])
    out = _checked(translate_lines(GRAMMAR, [json.dumps(e).encode() for e in events]))
    assert [t["text"] for t in facts(out.events).texts.values()] == ["cut \ufffd"]


def test_a_lone_surrogate_outside_a_text_field_is_still_malformed_R7() -> None:
    events = _numbered([_created(), _call_added(0, "call_\ud83d"), _completed()])
    out = _checked(translate_lines(GRAMMAR, [json.dumps(e).encode() for e in events]))
    assert out.rejected_lines == [2] and _terminal(out)["code"] == "malformed_event"


def test_a_retried_batch_repeating_several_events_is_dropped_event_by_event_P2() -> None:
    """A producer that retries a batch repeats several events, so a duplicate is not always adjacent."""
    events = _numbered([_created(), *_text_item(0, "Hel", "lo", done_text="Hello"), _completed()])
    lines = [json.dumps(e).encode() for e in events]
    lines[5:5] = lines[3:5]  # both deltas delivered again after the second one
    out = _checked(translate_lines(GRAMMAR, lines))
    assert [t["text"] for t in facts(out.events).texts.values()] == ["Hello"]
    assert [(w.code, w.line) for w in out.warnings] == [("duplicate_event", 6), ("duplicate_event", 7)]
    assert _terminal(out)["type"] == "RUN_FINISHED"
