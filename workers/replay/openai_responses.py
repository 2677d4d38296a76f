"""OpenAI Responses: the next stateless request's ``input`` items from a conversation.

Theory of operation
-------------------
Items are flat and keep their order (REFERENCE §1.7): user, system and
developer messages as input messages; per assistant turn, every output item as
``output_item.done`` sent it — reasoning items rebuilt from their artefact
records (``id``, ``summary``, ``encrypted_content`` byte for byte, R3),
assistant ``message`` items, ``function_call`` items (``call_id`` is the
tool-call id) — then one ``function_call_output`` per result.

Stateless (``store: false``) continuity rests on ``encrypted_content``: an
``item_reference`` or a reasoning id without its value would be "not found", so
neither is ever produced; a reasoning message without a replayable artefact is
simply not sent. A reasoning item must stay immediately before the item that
followed it ("provided without its required following item", §1.7): the record
names that item (``extra.following_item``), so its id is restored on the
follower, and a reasoning item whose follower is no longer next — or that
had no follower at all, being its response's last output — is dropped with
a warning (``follower_missing``) rather than sent to be rejected.

Item ids of messages and function calls are not opaque state: a follower's id
comes from its reasoning record; other ids (and a message's ``phase``) come
from the ``metadata.reasonwire`` hints a client kept from the start events.
An item with a known id is restated as the output item (``status:
completed``); without one it goes in its minimal input form, which the API
accepts as well.

xAI speaks this grammar for Grok: a target model ``grok-…`` (or ``provider: xai``)
is xAI's, so only xAI-issued ``encrypted_content`` goes to it and xAI's never goes to
OpenAI (core issuer check, R8); and ``status``, which xAI accepts on output only, is
left off every item sent to it (docs.x.ai troubleshooting-reasoning).
"""

from __future__ import annotations

from typing import Any

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.issuers import XAI, responses_provider
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.replay.core import (
    AssistantTurn,
    Call,
    Conversation,
    Instructions,
    Reasoning,
    ReplayBuilder,
    Text,
    ToolResults,
    UserTurn,
    metadata_hint,
)


class OpenAIResponsesReplay(ReplayBuilder):
    grammar = Grammar.OPENAI_RESPONSES
    history_key = "input"  # instructions stay in the history as system/developer items

    def instructions(self, turn: Instructions) -> list[dict[str, Any]]:
        return [{"role": turn.message.role, "content": turn.message.content}]

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        content: Any = turn.texts[0] if turn.plain else [{"type": "input_text", "text": t} for t in turn.texts]
        return [{"role": "user", "content": content}]

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        return [{"type": "function_call_output", "call_id": r.call.entity_id, "output": r.text} for r in turn.results]

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        items = _AssistantItems(conversation).build(turn)
        if conversation.target.provider == XAI:  # xAI refuses the output-only ``status`` on input
            return [{k: v for k, v in item.items() if k != "status"} for item in items]
        return items

    def resolve_target(self, target: ReplayTarget) -> ReplayTarget:
        provider = responses_provider(target.model) if target.provider is None else None
        return target.model_copy(update={"provider": provider}) if provider is not None else target


class _AssistantItems:
    """The output items of one assistant turn, reasoning items kept before their followers."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.items: list[dict[str, Any]] = []
        self.reasoning: list[tuple[int, Reasoning, dict[str, Any] | None]] = []
        """(index in items, unit, the item that followed it in the response)."""

    def build(self, turn: AssistantTurn) -> list[dict[str, Any]]:
        for unit in turn.units:
            if isinstance(unit, Reasoning):
                for record in unit.artefacts:
                    self.reasoning.append((len(self.items), unit, record.native.extra.get("following_item")))
                    self.items.append(record.provider_block())
            elif isinstance(unit, Text):
                self._text(unit)
            else:
                self._call(unit)
        return self._keep_followers()

    def _text(self, unit: Text) -> None:
        if not unit.text:
            return
        hints = unit.message.metadata
        item_id, refusal = metadata_hint(hints, "itemId"), metadata_hint(hints, "contentKind") == "refusal"
        part: dict[str, Any] = (
            {"type": "refusal", "refusal": unit.text}
            if refusal
            else {"type": "output_text", "annotations": [], "text": unit.text}
        )
        previous = self.items[-1] if self.items else None
        if item_id and previous and previous.get("type") == "message" and previous.get("id") == item_id:
            previous["content"].append(part)  # text and refusal parts of one message item
            return
        item: dict[str, Any] = {"type": "message", "role": "assistant", "content": [part]}
        if item_id:
            item |= {"id": item_id, "status": "completed"}
        if metadata_hint(hints, "phase"):
            item["phase"] = metadata_hint(hints, "phase")
        self.items.append(item)

    def _call(self, unit: Call) -> None:
        item: dict[str, Any] = {
            "type": "function_call",
            "call_id": unit.call.id,
            "name": unit.name,
            "arguments": unit.call.function.arguments,
        }
        item_id = metadata_hint(unit.call.metadata, "itemId")
        if item_id:
            item |= {"id": item_id, "status": "completed"}
        self.items.append(item)

    def _keep_followers(self) -> list[dict[str, Any]]:
        """Restore each follower's id from its reasoning record; drop reasoning whose follower is gone."""
        dropped: set[int] = set()
        for index, unit, follower in self.reasoning:
            following = self.items[index + 1] if index + 1 < len(self.items) else None
            # A reasoning item that was its response's last output (follower None) has no following
            # item to be sent with, and the API rejects it without one: left out like a lost follower.
            if follower is None or following is None or not _is_follower(following, follower):
                dropped.add(index)
                why = "was its response's last output" if follower is None else "lost the item that followed it"
                self.conversation.drop(
                    unit,
                    "follower_missing",
                    f"reasoning item of {unit.entity_id} {why}: left out (the API rejects it without its following item)",
                )
                continue
            if "id" not in following and follower.get("id"):
                following["id"] = follower["id"]
                following.setdefault("status", "completed")
                if following.get("type") == "message" and isinstance(following.get("content"), list):
                    for part in following["content"]:
                        if part.get("type") == "output_text":
                            part.setdefault("annotations", [])
        return [item for i, item in enumerate(self.items) if i not in dropped]


def _is_follower(item: dict[str, Any], follower: dict[str, Any]) -> bool:
    kind = follower.get("type")
    if item.get("type", "message") != kind:
        return False
    if kind == "function_call":
        return item.get("call_id") == follower.get("call_id")
    return "id" not in item or item.get("id") == follower.get("id")
