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

``tool_use.id`` must match ``^[a-zA-Z0-9_-]+$``: an id that does not (reasonwire's
minted Gemini ids, another provider's) is rewritten the same way for the call and its
``tool_result`` (core: ``ReplayBuilder.call_id``).
"""

from __future__ import annotations

import re
from typing import Any

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.replay.core import (
    AssistantTurn,
    Call,
    Conversation,
    Reasoning,
    ReplayBuilder,
    Text,
    ToolResults,
    UserTurn,
    drop_reasoning_only,
    merge_adjacent,
)


class AnthropicMessagesReplay(ReplayBuilder):
    grammar = Grammar.ANTHROPIC_MESSAGES
    history_key, system_key = "messages", "system"
    call_id_pattern = re.compile(r"[a-zA-Z0-9_-]+")  # tool_use.id: ^[a-zA-Z0-9_-]+$

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        content: Any = turn.texts[0] if turn.plain else [_text(t) for t in turn.texts]
        return [{"role": "user", "content": content}]

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        results = [_tool_result(self.call_id(r.call.entity_id, conversation), r.text, r.failed) for r in turn.results]
        return [{"role": "user", "content": results}]

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        if drop_reasoning_only(turn, conversation):
            return []
        blocks = [block for unit in turn.units for block in self._blocks(unit, conversation)]
        return [{"role": "assistant", "content": blocks}] if blocks else []

    def _blocks(self, unit: Reasoning | Text | Call, conversation: Conversation) -> list[dict[str, Any]]:
        if isinstance(unit, Reasoning):
            return unit.provider_blocks()
        if isinstance(unit, Text):
            return [_text(unit.text)] if unit.text else []
        call_id = self.call_id(unit.call.id, conversation)  # the id the grammar accepts
        return [{"type": "tool_use", "id": call_id, "name": unit.name, "input": unit.arguments}]

    def history(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return merge_adjacent(entries, "content", _as_blocks)

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        # "a final assistant message must start with a thinking block" while thinking is on,
        # and a tool loop keeps one thinking configuration (REFERENCE §2.5).
        return isinstance(unit, Reasoning)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_result(tool_use_id: str, text: str, failed: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if failed:
        block["is_error"] = True
    return block


def _as_blocks(content: Any) -> list[Any]:
    return [_text(content)] if isinstance(content, str) else list(content)
