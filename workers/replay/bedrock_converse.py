"""Bedrock Converse: the next request's ``messages`` (and ``system``) from a conversation.

Theory of operation
-------------------
An assistant turn becomes one ``{"role": "assistant", "content": [...]}`` in
the order the blocks streamed (REFERENCE §5.3): reasoning blocks rebuilt from
their artefact records — ``{"reasoningContent": {"reasoningText": {"text",
"signature"}}}`` or ``{"reasoningContent": {"redactedContent": …}}``, the value
put back byte for byte (R3; redacted bytes stay the base64 text they arrived
as, which is how boto3 and the JSON wire carry blobs) — then ``{"text"}`` and
``{"toolUse": {"toolUseId", "name", "input"}}``. Tool results become a user
message of ``{"toolResult": {"toolUseId", "content": [{"json"}|{"text"}],
"status"}}``; JSON results ride as ``json``. System messages go to ``system``.

Unsigned reasoning (DeepSeek R1, gpt-oss) has no artefact and is not sent.
Claude on Bedrock validates signatures like the Anthropic API, so in an open
tool loop a Claude target needs its reasoning blocks (core: ``needs_artefact``).
"""

from __future__ import annotations

from typing import Any

from contracts.grammars import Grammar
from workers.replay.core import (
    AssistantTurn,
    Call,
    Conversation,
    Reasoning,
    ReplayBuilder,
    Text,
    ToolResult,
    ToolResults,
    UserTurn,
    merge_adjacent,
)
from workers.replay.family import model_family


class BedrockConverseReplay(ReplayBuilder):
    grammar = Grammar.BEDROCK_CONVERSE

    def build(self, conversation: Conversation) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for turn in conversation.turns:
            if isinstance(turn, UserTurn):
                messages.append({"role": "user", "content": [{"text": t} for t in turn.texts]})
            elif isinstance(turn, ToolResults):
                messages.append({"role": "user", "content": [_tool_result(r) for r in turn.results]})
            elif isinstance(turn, AssistantTurn):
                if all(isinstance(unit, Reasoning) for unit in turn.units):
                    _drop_reasoning_only(turn, conversation)
                    continue
                blocks = [block for unit in turn.units for block in _blocks(unit)]
                if blocks:
                    messages.append({"role": "assistant", "content": blocks})
        fragment: dict[str, Any] = {"messages": merge_adjacent(messages, "content", list)}
        if conversation.instructions:
            fragment["system"] = [{"text": text} for text in conversation.instructions]
        return fragment

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        family = model_family(self.grammar, conversation.target.model) or conversation.continuity.model_family or ""
        return isinstance(unit, Reasoning) and "claude" in family


def _drop_reasoning_only(turn: AssistantTurn, conversation: Conversation) -> None:
    """A turn cut off after its reasoning (interrupted before any answer or call) has nothing the
    reasoning could precede; earlier turns' reasoning is not read by the model anyway."""
    for unit in turn.units:
        if unit.artefacts:
            conversation.drop(unit, "reasoning_only_turn", f"{unit.entity_id} ends a turn with no answer or call: left out")


def _blocks(unit: Reasoning | Text | Call) -> list[dict[str, Any]]:
    if isinstance(unit, Reasoning):
        return [record.provider_block() for record in unit.artefacts]
    if isinstance(unit, Text):
        return [{"text": unit.text}] if unit.text else []
    return [{"toolUse": {"toolUseId": unit.call.id, "name": unit.name, "input": unit.arguments}}]


def _tool_result(result: ToolResult) -> dict[str, Any]:
    value = result.value()
    content = [{"json": value}] if isinstance(value, dict | list) else [{"text": result.text}]
    status = "error" if result.failed else "success"
    return {"toolResult": {"toolUseId": result.call.entity_id, "content": content, "status": status}}
