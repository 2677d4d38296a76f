"""Gemini Interactions: the next stateless (``store: false``) request's ``input`` steps.

Theory of operation
-------------------
A stateless interaction resends the whole step history (REFERENCE §4.4): a
``user_input`` step per user message, every model step in the order it
streamed — ``thought`` steps rebuilt from their artefact records (summary as
streamed, ``signature`` byte for byte, R3; the signature rides the thought
step, never the call, §4.2), ``model_output`` steps of text, ``function_call``
steps with their own ids and argument objects — and a ``function_result`` step
per result (``call_id`` = the call's id). System messages go to
``system_instruction``.

The thought signature is documented as always present, so a thought step
without one is not sent, and in an open tool loop a thought step of the
current turn without its signature fails the replay before the call
[inferred: the stateless docs require resending thought steps with their
signatures; the exact server check is not documented].
"""

from __future__ import annotations

from typing import Any

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.replay.core import (
    AssistantTurn,
    Call,
    Conversation,
    Reasoning,
    ReplayBuilder,
    Text,
    ToolResult,
    ToolResults,
    UserTurn,
)


class GeminiInteractionsReplay(ReplayBuilder):
    grammar = Grammar.GEMINI_INTERACTIONS
    history_key, system_key = "input", "system_instruction"

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        return [{"type": "user_input", "content": [{"type": "text", "text": t} for t in turn.texts]}]

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        return [_function_result(r) for r in turn.results]

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        return [step for unit in turn.units for step in _steps(unit)]


    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        return isinstance(unit, Reasoning)


def _steps(unit: Reasoning | Text | Call) -> list[dict[str, Any]]:
    if isinstance(unit, Reasoning):
        return unit.provider_blocks()
    if isinstance(unit, Text):
        return [{"type": "model_output", "content": [{"type": "text", "text": unit.text}]}] if unit.text else []
    return [{"type": "function_call", "id": unit.call.id, "name": unit.name, "arguments": unit.arguments}]


def _function_result(result: ToolResult) -> dict[str, Any]:
    step: dict[str, Any] = {
        "type": "function_result",
        "call_id": result.call.entity_id,
        "name": result.call.name,
        "result": result.value(),
    }
    if result.failed:
        step["is_error"] = True
    return step
