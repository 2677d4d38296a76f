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
A ``toolUseId`` is 1–64 characters of ``[a-zA-Z0-9_-]``: an id outside that is
rewritten the same way for the call and its result (core: ``ReplayBuilder.call_id``).
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
    ToolResult,
    ToolResults,
    UserTurn,
    drop_reasoning_only,
    merge_adjacent,
)
from reasonwire.workers.replay.family import model_family


class BedrockConverseReplay(ReplayBuilder):
    grammar = Grammar.BEDROCK_CONVERSE
    history_key, system_key = "messages", "system"
    call_id_pattern = re.compile(r"[a-zA-Z0-9_-]+")  # toolUseId: 1-64 of [a-zA-Z0-9_-]
    call_id_limit = 64

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"text": t} for t in turn.texts]}]

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [_tool_result(r, self.call_id(r.call.entity_id, conversation)) for r in turn.results]}]

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        if drop_reasoning_only(turn, conversation):
            return []
        blocks = [block for unit in turn.units for block in self._blocks(unit, conversation)]
        return [{"role": "assistant", "content": blocks}] if blocks else []

    def _blocks(self, unit: Reasoning | Text | Call, conversation: Conversation) -> list[dict[str, Any]]:
        if isinstance(unit, Reasoning):
            return unit.provider_blocks()
        if isinstance(unit, Text):
            return [{"text": unit.text}] if unit.text else []
        call_id = self.call_id(unit.call.id, conversation)  # the id the grammar accepts
        return [{"toolUse": {"toolUseId": call_id, "name": unit.name, "input": unit.arguments}}]

    def history(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return merge_adjacent(entries, "content", list)

    def system(self, instructions: list[str]) -> Any:
        return [{"text": text} for text in instructions]

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        family = model_family(self.grammar, conversation.target.model) or conversation.continuity.model_family or ""
        return isinstance(unit, Reasoning) and "claude" in family


def _tool_result(result: ToolResult, call_id: str) -> dict[str, Any]:
    value = result.value()
    content = [{"json": value}] if isinstance(value, dict | list) else [{"text": result.text}]
    status = "error" if result.failed else "success"
    return {"toolResult": {"toolUseId": call_id, "content": content, "status": status}}
