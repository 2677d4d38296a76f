"""Gemini generateContent: the next request's ``contents`` (and ``systemInstruction``).

Theory of operation
-------------------
An assistant turn becomes one ``Content(role="model")`` whose parts keep the
order they streamed in (REFERENCE §3.5). A part that carried a
``thoughtSignature`` is rebuilt from its artefact record — the part as it
arrived (unknown fields included) with the signature back on that very part,
byte for byte (R3): a signed ``functionCall`` part, a signed thought part, the
trailing ``{"text": "", "thoughtSignature"}`` part. The text around signed
parts comes from the client's messages: thought text as ``thought: true``
parts, answer text as text parts, each signed part at the offset its record
names (never found by searching the text); a signature-only part goes last in its
message (Gemini puts the signature of a non-call response on the last part,
§3.3). Unsigned calls are rebuilt from the client's tool calls, grouped and
ordered as received.

Chunk boundaries are not kept: consecutive unsigned parts of one kind arrive
as one part. Google's rules are about signed parts (never merge a signed part
with another, never move a signature); thought summaries "may be dropped" and
the model reads signatures, not summary text (§3.5). When a turn's state came
from another model (a model change), its thought parts are dropped as well.

Gemini has no call ids on the wire (``functionCall.id`` is usually absent), so
reasonwire mints them; a minted id is never sent back: the artefact record of a
call group (``extra.callGroup``) and the ``metadata.reasonwire.idMinted`` hint
say which ids were minted, and failing both, an id of the shape ``mint()``
makes (``…:tool:N``) is taken as minted. ``functionResponse`` then matches by
name and position, carrying the id only when the call had one.

Gemini 3 rejects a current turn whose signed call lost its signature (400;
``MISSING_THOUGHT_SIGNATURE``), so in an open tool loop a signed call without a
replayable signature fails the replay before the call. For a Gemini 3 target
that holds for the first call of every step of the open loop, whoever issued
it: switching into Gemini 3 in the middle of another provider's tool loop is
refused the same way (Google's documented bypass signatures are not sent;
``docs/replay.md`` says why). The other way — a Gemini 3 loop continued on Gemini 2.5,
which does not validate call signatures — goes through with the 3 signatures left out.
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
    merge_adjacent,
    metadata_hint,
)

_MINTED_SHAPE = re.compile(r":tool:\d+$")
"""``Translator.mint("tool", n)`` = ``<response>:tool:<n>``."""


class GeminiGenerateContentReplay(ReplayBuilder):
    grammar = Grammar.GEMINI_GENERATE_CONTENT
    history_key, system_key = "contents", "systemInstruction"

    def build(self, conversation: Conversation) -> dict[str, Any]:
        self._minted = _minted_ids(conversation)  # tool-call ids the gateway minted (REFERENCE §3.2)
        return super().build(conversation)

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        return [{"role": "user", "parts": [{"text": t} for t in turn.texts]}]

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        return [{"role": "user", "parts": [_function_response(r, self._minted) for r in turn.results]}]

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        parts = self._model_parts(turn, conversation, self._minted)
        return [{"role": "model", "parts": parts}] if parts else []

    def history(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return merge_adjacent(entries, "parts", list)

    def system(self, instructions: list[str]) -> Any:
        return {"parts": [{"text": t} for t in instructions]}

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        """Only calls are validated, and only those that were signed (the first of each step).

        Gemini 3 validates the first call of each step of the current turn whatever issued
        the history (REFERENCE §3.3): a turn that came from another provider or model has
        no signature to send, so the same refusal applies as when a Gemini one was lost.
        Google's bypass values for foreign history are not used: see ``docs/replay.md``."""
        if not isinstance(unit, Call):
            return False
        validates = validates_call_signatures(conversation.continuity.model_family)
        if unit.excluded and all(e.issuer for e in unit.excluded) and not validates:
            # A model change (Gemini 3 → 2.5) inside the loop: the other model's signature is left out
            # (foreign_issuer) and the call goes unsigned — a target that does not validate call
            # signatures accepts it (REFERENCE §3.3); see docs/replay.md.
            return False
        if unit.excluded or unit.client_value:
            return True
        return validates and _first_call_of_its_step(unit, conversation)

    def _model_parts(self, turn: AssistantTurn, conversation: Conversation, minted: set[str]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for unit in turn.units:
            if isinstance(unit, Reasoning):
                if turn.foreign and not unit.artefacts and unit.message.content:
                    conversation.log.warn(
                        "foreign_thoughts_dropped",
                        f"thought text of {unit.entity_id} came from another model: not sent as thoughts",
                        entity_id=unit.entity_id,
                    )
                    continue
                parts += _text_parts(unit.message.content, unit, thought=True)
            elif isinstance(unit, Text):
                parts += _text_parts(unit.text, unit, thought=False)
            elif unit.artefacts:
                parts += unit.provider_blocks()
            else:
                call: dict[str, Any] = {"name": unit.name, "args": unit.arguments}
                if unit.call.id not in minted:
                    call["id"] = unit.call.id
                parts.append({"functionCall": call})
        return parts


_GENERATION = re.compile(r"^gemini-(\d+)")


def validates_call_signatures(family: str | None) -> bool:
    """Gemini 3 and later reject a current-turn step whose first call has no signature (400,
    ``MISSING_THOUGHT_SIGNATURE``; REFERENCE §3.3). Unknown family: not assumed."""
    match = _GENERATION.match(family or "")
    return match is not None and int(match.group(1)) >= 3


def _first_call_of_its_step(unit: Call, conversation: Conversation) -> bool:
    """Whether ``unit`` is the first call of its assistant turn (one model step) in the open loop."""
    for turn in conversation.current_turns():
        calls = turn.calls
        if calls and calls[0] is unit:
            return True
    return False


def _text_parts(content: str, unit: Reasoning | Text, *, thought: bool) -> list[dict[str, Any]]:
    """The client's text split around the unit's signed parts, each signed part as received."""
    parts: list[dict[str, Any]] = []
    trailing: list[dict[str, Any]] = []
    cursor = 0

    def unsigned(text: str) -> None:
        if text:
            parts.append({"text": text, "thought": True} if thought else {"text": text})

    for record in unit.artefacts:
        block = record.provider_block()
        signed_text = block.get("text") or ""
        if not signed_text:
            trailing.append(block)  # a signature-only part is the last part of its message (§3.3)
            continue
        at = _signed_part_at(content, signed_text, cursor, record.native.extra.get("textOffset"))
        if at < 0:  # the client no longer holds that text (filtered or edited): the signed part as received
            parts.append(block)
            continue
        unsigned(content[cursor:at])
        parts.append(block)
        cursor = at + len(signed_text)
    unsigned(content[cursor:])
    return parts + trailing


def _signed_part_at(content: str, signed_text: str, cursor: int, offset: Any) -> int:
    """Where a signed part's text starts in the client's text.

    The record says where the part streamed (``extra.textOffset``); that place is used when the
    client's text still holds the part's text there. A search would find an earlier occurrence of
    a common chunk (".", "\n", " the") and move the signature into an earlier part. Records
    without the offset (stored before it existed) fall back to the first occurrence after the
    previous signed part."""
    if type(offset) is int and cursor <= offset and content.startswith(signed_text, offset):
        return offset
    if type(offset) is int:
        return -1  # the client's text changed there: the signed part goes as received
    return content.find(signed_text, cursor)


def _minted_ids(conversation: Conversation) -> set[str]:
    """Tool-call ids reasonwire minted (never sent back as ``functionCall.id``)."""
    minted: set[str] = set()
    known: set[str] = set()
    for call in conversation.calls.values():
        for record in call.artefacts + [e.record for e in call.excluded if e.record is not None]:
            for entry in record.native.extra.get("callGroup") or []:
                if isinstance(entry, dict) and isinstance(entry.get("toolCallId"), str):
                    known.add(entry["toolCallId"])
                    if entry.get("idMinted"):
                        minted.add(entry["toolCallId"])
    for call_id, call in conversation.calls.items():
        hint = metadata_hint(call.call.metadata, "idMinted")
        if hint is not None:
            known.add(call_id)
            if hint:
                minted.add(call_id)
        if call_id not in known and _MINTED_SHAPE.search(call_id):
            minted.add(call_id)
    return minted


def _function_response(result: ToolResult, minted: set[str]) -> dict[str, Any]:
    value = result.value()
    response: dict[str, Any] = value if isinstance(value, dict) else {"output": value}
    if result.failed:
        response = {"error": result.message.error, **({"output": value} if result.text else {})}
    body: dict[str, Any] = {"name": result.call.name, "response": response}
    if result.call.entity_id not in minted:
        body["id"] = result.call.entity_id
    return {"functionResponse": body}
