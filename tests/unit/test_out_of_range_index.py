"""An index field out of range is a malformed event (R7), in every grammar.

An OpenAI stream whose ``output_index`` is a huge negative number ends as ``RUN_ERROR``
``malformed_event`` naming the line, never through the translator's safety net
(``internal_error``, an IndexError). Each grammar's index fields — OpenAI ``output_index`` /
``content_index`` / ``summary_index``, Anthropic and Interactions ``index``, Bedrock
``contentBlockIndex``, Gemini ``candidates[].index`` — are taken from a real fixture, set out
of range, and the run must end as malformed at that very line, never as an internal error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream, translate_lines
from reasonwire.workers.io.sse import read_events

OUT_OF_RANGE = (-1, -(2**31), -(2**63), -(10**30), 2**31, 2**63, 10**30)

CASES: list[tuple[str, str, str, str]] = [
    # grammar, fixture, the event carrying the field (its discriminator value), the field's path
    ("openai-responses", "b_reasoning_then_tool_call", "response.output_item.added", "output_index"),
    ("openai-responses", "b_reasoning_then_tool_call", "response.output_item.done", "output_index"),
    ("openai-responses", "a_reasoning_then_answer", "response.reasoning_summary_part.added", "summary_index"),
    ("openai-responses", "a_reasoning_then_answer", "response.content_part.added", "content_index"),
    ("anthropic-messages", "b_reasoning_then_tool_call", "content_block_start", "index"),
    ("anthropic-messages", "b_reasoning_then_tool_call", "content_block_delta", "index"),
    ("gemini-interactions", "b_reasoning_then_tool_call", "step.start", "index"),
    ("gemini-interactions", "b_reasoning_then_tool_call", "step.stop", "index"),
    ("bedrock-converse", "b_reasoning_then_tool_call", "contentBlockDelta", "contentBlockIndex"),
    ("bedrock-converse", "b_reasoning_then_tool_call", "contentBlockStart", "contentBlockIndex"),
    ("gemini-generate-content", "b_reasoning_then_tool_call", "candidates", "index"),
]


def _lines(grammar: str, fixture: str) -> list[bytes | str]:
    path: Path = LOCAL_FIXTURES / grammar / f"{fixture}.jsonl"
    with path.open(encoding="utf-8") as f:
        return [e.data for e in read_events(f)]


def _carrier(grammar: str, obj: dict[str, Any], event: str) -> dict[str, Any] | None:
    """The object holding the index field if ``obj`` is the event named, else None."""
    if grammar == "bedrock-converse":
        return obj.get(event)
    if grammar == "gemini-generate-content":
        candidates = obj.get("candidates")
        return candidates[0] if candidates else None
    kind = obj.get("event_type" if grammar == "gemini-interactions" else "type")
    return obj if kind == event else None


def _mutated(grammar: str, fixture: str, event: str, field: str, value: int) -> tuple[list[bytes | str], int]:
    lines = _lines(grammar, fixture)
    for n, raw in enumerate(lines):
        obj = json.loads(raw)
        carrier = _carrier(grammar, obj, event)
        if carrier is not None and field in carrier:
            carrier[field] = value
            lines[n] = json.dumps(obj)
            return lines, n + 1
    raise AssertionError(f"{grammar}/{fixture} has no {event} with {field}")


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize(("grammar", "fixture", "event", "field"), CASES, ids=lambda v: str(v))
def test_out_of_range_index_is_a_malformed_event_naming_the_line_R7(
    grammar: str, fixture: str, event: str, field: str, value: int
) -> None:
    lines, line = _mutated(grammar, fixture, event, field, value)
    out = translate_lines(grammar, lines)
    assert not [w for w in out.warnings if w.code == "internal_error"], out.warnings
    terminal = out.events[-1]
    assert terminal["type"] == "RUN_ERROR", terminal
    assert terminal["code"] == "malformed_event", terminal
    assert f"line {line}" in terminal["message"], terminal["message"]
    assert out.rejected_lines == [line]
    assert_valid_stream(out.events)
