"""Anthropic Messages: the next request's ``messages`` (and ``system``) from a conversation.

Theory of operation
-------------------
An assistant turn becomes one ``{"role": "assistant", "content": [...]}`` whose
blocks keep the order the units streamed in (REFERENCE §2.5): a ``thinking``
block (text + signature) or ``redacted_thinking`` block (``data``) exactly as
received — rebuilt from its artefact record, value put back byte for byte
(R3) — ``text`` blocks, and ``tool_use`` blocks with the parsed input. Tool
results become a user message of ``tool_result`` blocks; a user message that
follows them joins that same user message (the API wants roles to alternate).
System and developer messages go to the top-level ``system``.

A thinking message without a replayable artefact is not sent (unsigned or
partial thinking cannot be replayed, REFERENCE §2.5). In an open tool loop the
API rejects the current assistant turn without its thinking blocks, so a
missing one fails the replay before the call (core: ``needs_artefact``).
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
    ToolResults,
    UserTurn,
    merge_adjacent,
)


class AnthropicMessagesReplay(ReplayBuilder):
    grammar = Grammar.ANTHROPIC_MESSAGES

    def build(self, conversation: Conversation) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for turn in conversation.turns:
            if isinstance(turn, UserTurn):
                content: Any = turn.texts[0] if turn.plain else [_text(t) for t in turn.texts]
                messages.append({"role": "user", "content": content})
            elif isinstance(turn, ToolResults):
                results = [_tool_result(r.call.entity_id, r.text, r.failed) for r in turn.results]
                messages.append({"role": "user", "content": results})
            elif isinstance(turn, AssistantTurn):
                if all(isinstance(unit, Reasoning) for unit in turn.units):
                    _drop_reasoning_only(turn, conversation)
                    continue
                blocks = [block for unit in turn.units for block in _blocks(unit)]
                if blocks:
                    messages.append({"role": "assistant", "content": blocks})
        fragment: dict[str, Any] = {"messages": merge_adjacent(messages, "content", _as_blocks)}
        if conversation.instructions:
            fragment["system"] = "\n\n".join(conversation.instructions)
        return fragment

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        # "a final assistant message must start with a thinking block" while thinking is on,
        # and a tool loop keeps one thinking configuration (REFERENCE §2.5).
        return isinstance(unit, Reasoning)


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
        return [_text(unit.text)] if unit.text else []
    return [{"type": "tool_use", "id": unit.call.id, "name": unit.name, "input": unit.arguments}]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_result(tool_use_id: str, text: str, failed: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if failed:
        block["is_error"] = True
    return block


def _as_blocks(content: Any) -> list[Any]:
    return [_text(content)] if isinstance(content, str) else list(content)
