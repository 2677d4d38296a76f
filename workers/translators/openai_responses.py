"""OpenAI Responses streaming (``openai-responses``) → AG-UI.

Theory of operation
-------------------
A run is one streamed response: ``response.created`` / ``response.in_progress``
(``response.queued`` for background runs), then *output items* in
``output_index`` order — each ``response.output_item.added`` → its part events →
``response.output_item.done``; items never interleave — then one terminal event:
``response.completed``, ``response.incomplete`` (finished, the reason kept),
``response.failed`` or ``error`` (REFERENCE §1.2, §1.5). Every event names its item
by ``output_index`` (and ``item_id``); parts by ``summary_index`` /
``content_index``.

Item → AG-UI mapping:

* ``reasoning`` (``rs_…``) — one reasoning span, opened on ``output_item.added``.
  Inside it, at most one reasoning message per *provenance* (P1), tagged with
  ``REASONING_MESSAGE_START.metadata.reasonwire.reasoningKind``:

  - ``"summary"`` — the item's summary parts (``reasoning_summary_part.*``,
    ``reasoning_summary_text.*``), joined with ``"\\n\\n"`` into one message
    (the separator goes in front of each later non-empty part);
  - ``"raw"`` — its raw reasoning text parts (``content_part.*`` of type
    ``reasoning_text``, ``reasoning_text.*``; gpt-oss behind compatible servers),
    joined the same way;
  - ``"none"`` — an empty message opened only to carry ``encrypted_content`` when
    the item has no readable text (``summary: []``, REFERENCE §1.4).

  The item's *first* reasoning message stands for the item: it is the entity of
  the item's ``REASONING_ENCRYPTED_VALUE``. The value is read only from
  ``output_item.done`` (on ``.added`` it "may be incomplete", §1.4) and held in the
  ledger until the item that *follows* the reasoning item is known — the next
  ``output_item.added``, or the terminal event — because a reasoning item replayed
  without its following item is rejected (§1.7). Then it is released once, inside
  the still-open span, with the following item's identity in
  ``NativeBlock.extra["following_item"]`` (``None`` when the reasoning item was the
  last output), and the span closes. The record's ``block`` is the item exactly as
  ``output_item.done`` sent it, minus the value (R3, P5).
* ``message`` (``msg_…``) — its ``output_text`` parts form one text message
  (``TEXT_MESSAGE_*``); its ``refusal`` parts form a second one whose start carries
  ``contentKind: "refusal"``: refusals are answer content, never reasoning (P1).
  ``phase`` (``commentary`` / ``final_answer``) rides the start's metadata.
* ``function_call`` (``fc_…``) — ``TOOL_CALL_*``; the toolCallId is the provider's
  ``call_id`` (the identity the next turn needs, §1.3), the arguments are the
  ``function_call_arguments.delta`` fragments.
* built-in tool items (web search, code interpreter, MCP, …) and their events are
  known but not translated: skipped and counted, one warning per type; item or
  part types the SDK does not know are skipped as unknown (P3).

Incremental vs completed (P2): every ``.done`` event — ``*_text.done``,
``*_part.done``, ``function_call_arguments.done``, ``output_item.done``, and the
terminal ``response.output`` for an item still open — restates what its deltas
should already have delivered. It is compared with what was streamed for that
part: equal → nothing is emitted; the streamed text is a prefix → only the
missing suffix is emitted, once; anything else is a provider grammar error (R7):
the deltas were already published and AG-UI cannot retract them, so the run ends
with ``RUN_ERROR`` rather than carry two versions of the same text.

Usage (P6): ``response.usage`` on the terminal event. ``input_tokens`` already
includes cached input; ``output_tokens`` already includes reasoning — the details
(``cached_tokens``, ``cache_write_tokens``, ``reasoning_tokens``) are shares, never
added on top. The provider object is kept as ``provider_raw``.

The stop reason is the provider's own word: ``status`` (``completed``) or
``incomplete_details.reason`` (``max_output_tokens``, …). A completed response
that contains function calls lists their call ids as pending on ``RUN_FINISHED``,
in the order the calls were made (their ``TOOL_CALL_START`` order), whatever
order their ``.done`` events came in. ``response.incomplete`` cut what it closes:
units still open then end with the ``incomplete`` marker. ``response.failed`` or
``error`` after a reasoning item's ``output_item.done`` keeps that whole item's
value complete (no following item; replay leaves it out). A byte-identical repeat
of the previous event (same ``sequence_number``) is a duplicate delivery, dropped
with a warning.

xAI serves Grok through this same grammar. A stream whose model is ``grok-…`` has the
issuer provider ``xai`` (:func:`reasonwire.contracts.issuers.responses_provider`) unless the producer
stated one (``rw-issuer-provider``): its
``encrypted_content`` goes back to xAI only, and OpenAI's never goes to xAI (R8).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reasonwire.contracts.artefacts import ArtefactSubtype, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.issuers import responses_provider
from reasonwire.contracts.usage import TokenCounts
from reasonwire.workers.core.artefacts import HeldArtefact
from reasonwire.workers.core.errors import ProviderGrammarError, optional, require, require_index, token_count
from reasonwire.workers.core.translator import Translator

ENCRYPTED_CONTENT_KIND = "openai.reasoning.encrypted_content"
PART_SEPARATOR = "\n\n"
"""Between the parts of one reasoning message (the fixture's "summary parts joined with \\n\\n")."""

_UNSUPPORTED_ITEMS = frozenset(
    {
        "additional_tools",
        "apply_patch_call",
        "code_interpreter_call",
        "compaction",
        "computer_call",
        "custom_tool_call",
        "file_search_call",
        "image_generation_call",
        "local_shell_call",
        "mcp_approval_request",
        "mcp_call",
        "mcp_list_tools",
        "program",
        "shell_call",
        "tool_search_call",
        "web_search_call",
    }
)
"""Output item types of the SDK union that reasonwire does not translate (sdk_catalog.md)."""

_UNSUPPORTED_EVENTS = frozenset(
    {
        "response.audio.delta",
        "response.audio.done",
        "response.audio.transcript.delta",
        "response.audio.transcript.done",
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.compaction.compacting",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.file_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.image_generation_call.completed",
        "response.image_generation_call.generating",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.partial_image",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.mcp_list_tools.in_progress",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.web_search_call.completed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
    }
)
"""Events of the SDK union for built-in tools and audio: known, not translated, counted."""


class Channel(StrEnum):
    """One stream of text inside an output item; each becomes (part of) one AG-UI unit."""

    SUMMARY = "summary"
    RAW = "raw"
    OUTPUT_TEXT = "output_text"
    REFUSAL = "refusal"
    ARGUMENTS = "arguments"


_CHANNEL_ITEM = {
    Channel.SUMMARY: "reasoning",
    Channel.RAW: "reasoning",
    Channel.OUTPUT_TEXT: "message",
    Channel.REFUSAL: "message",
    Channel.ARGUMENTS: "function_call",
}
"""The item type each channel belongs to; a part event on another item type is R7."""

_PART_CHANNELS = {"output_text": Channel.OUTPUT_TEXT, "refusal": Channel.REFUSAL, "reasoning_text": Channel.RAW}
"""``content_part`` types → channel. Other part types are unknown: skipped (P3)."""

_PART_TEXT_FIELD = {Channel.OUTPUT_TEXT: "text", Channel.REFUSAL: "refusal", Channel.RAW: "text"}

_REASONING_CHANNELS = (Channel.SUMMARY, Channel.RAW)


@dataclass
class _Part:
    """What the deltas of one part delivered so far, to judge its ``.done`` (P2).

    Not the text itself: its length and a running digest, so a part's state stays
    the same size however long it streams. A restatement agrees with the deltas
    when its first ``length`` code units hash the same; what follows is the gap.
    Counted in UTF-16 code units: a character the deltas cut between its surrogate
    halves (``"\\ud83d"`` then ``"\\ude00"``) is the same two units as the whole
    character in the ``.done`` text.
    """

    length: int = 0
    digest: Any = field(default_factory=lambda: hashlib.blake2b(digest_size=16))

    def add(self, text: str) -> None:
        units = text.encode("utf-16-le", "surrogatepass")
        self.digest.update(units)
        self.length += len(units) // 2

    def rest_of(self, full: str) -> str | None:
        """What ``full`` holds beyond what the deltas streamed (a surrogate half, if they cut one),
        or ``None`` when ``full`` does not start with exactly what they streamed. One encoding of
        ``full`` serves both the check and the rest."""
        units = full.encode("utf-16-le", "surrogatepass")
        cut = 2 * self.length
        if len(units) < cut or hashlib.blake2b(units[:cut], digest_size=16).digest() != self.digest.digest():
            return None
        return units[cut:].decode("utf-16-le", "surrogatepass")


@dataclass
class _Item:
    """One output item. ``kind`` is the item type we translate, or ``skipped``."""

    index: int
    kind: str
    item_id: str | None = None
    phase: str | None = None
    call_id: str | None = None
    name: str | None = None
    done: bool = False
    parts: dict[tuple[Channel, int], _Part] = field(default_factory=dict)
    skipped_parts: set[int] = field(default_factory=set)
    units: dict[Channel, tuple[int, str]] = field(default_factory=dict)
    """Channel → discipline key of the AG-UI unit opened for it, in opening order."""
    has_text: set[Channel] = field(default_factory=set)
    """Channels whose unit already carries text (the reasoning separator goes before the next part)."""
    carrier: str | None = None
    """Reasoning items: the messageId that stands for the item (its encrypted value's entity)."""

    @property
    def unit_name(self) -> str:
        return self.item_id or f"output{self.index}"


class OpenAIResponsesTranslator(Translator):
    """Translator for the OpenAI Responses stream grammar."""

    grammar = Grammar.OPENAI_RESPONSES

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._items: dict[int, _Item] = {}
        self._awaiting_follower: _Item | None = None
        """The last finished reasoning item whose following item is not known yet (§1.7)."""
        self._call_ids: list[str] = []
        self._warned_types: set[str] = set()
        self._truncating = False
        """``response.incomplete`` is closing the run: what it closes was cut off, marked incomplete."""

    def _start(self, obj: dict[str, Any] | None, raw: bytes | str | bytearray) -> None:
        if self.issuer_provider is None and obj is not None:  # Grok: its values go back to xAI only (R8)
            self.issuer_provider = responses_provider(self.stream_identity(obj)[1] or self.model)
        super()._start(obj, raw)

    def stream_identity(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        kind = obj.get("type")
        response = obj.get("response") if isinstance(kind, str) and kind in _RESPONSE_STARTS else None
        if isinstance(response, dict):
            rid, model = response.get("id"), response.get("model")
            return (rid if isinstance(rid, str) else None, model if isinstance(model, str) else None)
        return None, None

    def delivery_key(self, obj: dict[str, Any]) -> Hashable | None:
        """Every event carries a strictly increasing ``sequence_number`` (§1.1): the same number
        with the same bytes is the same event delivered twice."""
        seq = obj.get("sequence_number")
        return seq if type(seq) is int else None

    # -- response lifecycle --------------------------------------------------------

    def _on_response_start(self, obj: dict[str, Any]) -> None:
        where = self.event_name
        response = require(obj, "response", dict, where=where)
        if self.response_id is None:
            self.response_id = optional(response, "id", str, where=f"{where}.response")
        self.model = optional(response, "model", str, where=f"{where}.response") or self.model

    def _on_completed(self, obj: dict[str, Any]) -> None:
        response = self._terminal_response(obj)
        status = optional(response, "status", str, where="response.completed.response")
        self.finish_run(stop_reason=status or "completed", pending_tool_call_ids=list(self._call_ids) or None)

    def _on_incomplete(self, obj: dict[str, Any]) -> None:
        self._truncating = True  # the units this terminal event closes were cut off (§1.5)
        response = self._terminal_response(obj)
        where = "response.incomplete.response"
        details = optional(response, "incomplete_details", dict, where=where)
        reason = optional(details, "reason", str, where=f"{where}.incomplete_details")
        stop_reason = reason or optional(response, "status", str, where=where) or "incomplete"
        self.finish_run(stop_reason=stop_reason, truncated=True)

    def _on_failed(self, obj: dict[str, Any]) -> None:
        where = "response.failed.response"
        response = require(obj, "response", dict, where="response.failed")
        self._take_usage(response, where=where)
        self._keep_finished_reasoning()
        error = optional(response, "error", dict, where=where) or {}
        code = optional(error, "code", str, where=f"{where}.error")
        message = optional(error, "message", str, where=f"{where}.error") or "response failed"
        self.provider_error(f"openai {code or 'error'}: {message}", provider_code=code)

    def _on_error(self, obj: dict[str, Any]) -> None:
        """Documented flat ``{code, message}``; production sends ``{error: {type, code, message}}`` (§1.5)."""
        nested = optional(obj, "error", dict, where="error")
        if nested is not None:
            code = optional(nested, "code", str, where="error.error") or optional(
                nested, "type", str, where="error.error"
            )
            message = optional(nested, "message", str, where="error.error")
        else:
            code = optional(obj, "code", str, where="error")
            message = optional(obj, "message", str, where="error")
        self._keep_finished_reasoning()
        self.provider_error(f"openai {code or 'error'}: {message or 'provider error'}", provider_code=code)

    def _terminal_response(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Usage, then the final state of items still open, then the last reasoning item's follower."""
        where = self.event_name
        response: dict[str, Any] = require(obj, "response", dict, where=where)
        self._take_usage(response, where=f"{where}.response")
        output = optional(response, "output", list, where=f"{where}.response") or []
        for entry in [e for _, e in sorted(self._items.items()) if not e.done]:
            restated = output[entry.index] if entry.index < len(output) else None
            if isinstance(restated, dict):  # its output_item.done never came: the response restates it (P2)
                self._finish_item(entry, restated, where=f"{where}.response.output[{entry.index}]")
        waiting = self._awaiting_follower
        if waiting is not None:
            after = output[waiting.index + 1] if waiting.index + 1 < len(output) else None
            self._settle_follower(_identity(after) if isinstance(after, dict) else None)
        return response

    def _keep_finished_reasoning(self) -> None:
        """The provider failed the response after a reasoning item finished: that item was whole
        (``output_item.done`` carried its value), so its value is released and its record complete,
        with no following item; replay decides (it leaves out an item without a follower, §1.7)."""
        if self._awaiting_follower is not None:
            self._settle_follower(None)

    # -- output items ----------------------------------------------------------------

    def _on_item_added(self, obj: dict[str, Any]) -> None:
        where = "response.output_item.added"
        index = require_index(obj, "output_index", where=where)
        item = require(obj, "item", dict, where=where)
        kind = require(item, "type", str, where=f"{where}.item")
        if index in self._items:
            raise ProviderGrammarError(f"{where}: output item {index} added twice")
        read = _ITEM_READERS.get(kind)
        entry = read(index, item) if read is not None else _Item(index, "skipped")
        # Only a well-formed item settles its predecessor's follower: a malformed one ends the run (R7)
        # and leaves the held value incomplete rather than naming an item that never existed.
        self._settle_follower(_identity(item))
        self._items[index] = entry
        if entry.kind == "reasoning":
            self.run.open_span(("span", index), self.mint("span", entry.unit_name))
        elif entry.kind == "function_call":
            key = (index, Channel.ARGUMENTS.value)
            self.run.start_tool_call(key, entry.call_id or "", entry.name or "", metadata={"itemId": entry.item_id})
            self._call_ids.append(entry.call_id or "")  # in the order the calls were made, as TOOL_CALL_START
            entry.units[Channel.ARGUMENTS] = key
            self._stream(entry, Channel.ARGUMENTS, 0, item.get("arguments") or "")
        elif entry.kind == "skipped":
            self.counters["skipped_items"] += 1
            known = "unsupported" if kind in _UNSUPPORTED_ITEMS else "unknown"
            self._warn(f"{known}_item", f"{known} output item type {kind!r} at output_index {index} skipped")

    def _on_item_done(self, obj: dict[str, Any]) -> None:
        where = "response.output_item.done"
        index = require_index(obj, "output_index", where=where)
        item = require(obj, "item", dict, where=where)
        self._finish_item(self._entry(index, where), item, where=f"{where}.item")

    def _finish_item(self, entry: _Item, item: dict[str, Any], *, where: str) -> None:
        """The item's final state: fill what the deltas missed (P2), then close its units."""
        if entry.kind == "skipped":
            entry.done = True
            return
        kind = require(item, "type", str, where=where)
        if kind != entry.kind:
            raise ProviderGrammarError(
                f"{where}: output item {entry.index} was added as {entry.kind}, restated as {kind}"
            )
        where = f"{where}({kind})"
        if entry.kind == "reasoning":
            self._finish_reasoning(entry, item, where)
        elif entry.kind == "message":
            self._finish_message(entry, item, where)
        elif entry.kind == "function_call":
            arguments = require(item, "arguments", str, where=where)
            self._settle(entry, Channel.ARGUMENTS, 0, arguments, where)
        cut = self._truncating
        for channel, key in entry.units.items():
            if not self.run.is_open(key):
                continue
            if channel in _REASONING_CHANNELS:
                self.run.end_reasoning(key, incomplete=cut)
            elif channel is Channel.ARGUMENTS:
                self.run.end_tool_call(key, incomplete=cut)
            else:
                self.run.end_text(key, incomplete=cut)
        entry.done = True

    def _finish_reasoning(self, entry: _Item, item: dict[str, Any], where: str) -> None:
        for i, part in enumerate(optional(item, "summary", list, where=where) or []):
            self._settle(entry, Channel.SUMMARY, i, require(part, "text", str, where=f"{where}.summary[{i}]"), where)
        for i, part in enumerate(optional(item, "content", list, where=where) or []):
            if isinstance(part, dict) and part.get("type") == "reasoning_text":
                self._settle(entry, Channel.RAW, i, require(part, "text", str, where=f"{where}.content[{i}]"), where)
        value = optional(item, "encrypted_content", str, where=where)
        if item.get("status") == "incomplete":
            self.counters["incomplete_reasoning_items"] += 1
        # The follower of an earlier reasoning item is this one, if items ever overlapped.
        self._settle_follower(_identity(item))
        if value == "" and entry.carrier is None:  # empty = no state, and no message to name
            self.empty_signature("encrypted_content", f"output item {entry.index}", "nothing to keep")
        elif value is not None:  # an empty one on a message is kept unsigned by the ledger, never announced
            carrier = entry.carrier or self._open_carrier(entry)
            block = {k: v for k, v in item.items() if k != "encrypted_content"}
            self.hold_artefact(
                ("span", entry.index),
                HeldArtefact(
                    kind=ENCRYPTED_CONTENT_KIND,
                    subtype=ArtefactSubtype.MESSAGE,
                    entity_id=carrier,
                    value=value,
                    native=NativeBlock(
                        response_id=self.response_id,
                        position=entry.index,
                        item_id=entry.item_id,
                        block=block,
                        value_path=["encrypted_content"],
                    ),
                ),
                where=f"output item {entry.index}",
            )
        self._awaiting_follower = entry

    def _finish_message(self, entry: _Item, item: dict[str, Any], where: str) -> None:
        for i, part in enumerate(optional(item, "content", list, where=where) or []):
            kind = part.get("type") if isinstance(part, dict) else None
            channel = _PART_CHANNELS.get(kind) if isinstance(kind, str) else None
            if channel in (Channel.OUTPUT_TEXT, Channel.REFUSAL) and i not in entry.skipped_parts:
                text = require(part, _PART_TEXT_FIELD[channel], str, where=f"{where}.content[{i}]")
                self._settle(entry, channel, i, text, where)

    def _settle_follower(self, following: dict[str, str] | None) -> None:
        """The item after the last reasoning item is known: release its value, close its span (§1.7)."""
        entry, self._awaiting_follower = self._awaiting_follower, None
        if entry is None:
            return
        self.artefacts.release(("span", entry.index), extra={"following_item": following})
        self.run.close_span(("span", entry.index))

    # -- parts -----------------------------------------------------------------------

    def _on_summary_part_added(self, obj: dict[str, Any]) -> None:
        self._part_added(obj, Channel.SUMMARY, "summary_index", "text")

    def _on_summary_part_done(self, obj: dict[str, Any]) -> None:
        where = "response.reasoning_summary_part.done"
        entry, index = self._part_event(obj, Channel.SUMMARY, "summary_index", where)
        if entry is None:
            return
        part = require(obj, "part", dict, where=where)
        if optional(obj, "status", str, where=where) == "incomplete":
            self.counters["incomplete_summary_parts"] += 1
        self._settle(entry, Channel.SUMMARY, index, require(part, "text", str, where=f"{where}.part"), where)

    def _on_content_part_added(self, obj: dict[str, Any]) -> None:
        where = "response.content_part.added"
        part = require(obj, "part", dict, where=where)
        channel = self._content_channel(obj, part, where)
        if channel is not None:
            self._part_added(obj, channel, "content_index", _PART_TEXT_FIELD[channel])

    def _on_content_part_done(self, obj: dict[str, Any]) -> None:
        where = "response.content_part.done"
        part = require(obj, "part", dict, where=where)
        channel = self._content_channel(obj, part, where)
        if channel is None:
            return
        entry, index = self._part_event(obj, channel, "content_index", where)
        if entry is not None:
            text = require(part, _PART_TEXT_FIELD[channel], str, where=f"{where}.part")
            self._settle(entry, channel, index, text, where)

    def _content_channel(self, obj: dict[str, Any], part: dict[str, Any], where: str) -> Channel | None:
        """The channel of a content part, or None for a part that is skipped (P3)."""
        kind = require(part, "type", str, where=f"{where}.part")
        entry = self._entry(require_index(obj, "output_index", where=where), where)
        index = require_index(obj, "content_index", where=where)
        if entry.kind == "skipped" or index in entry.skipped_parts:
            return None
        channel = _PART_CHANNELS.get(kind)
        if channel is None:
            entry.skipped_parts.add(index)
            self.counters["skipped_parts"] += 1
            self._warn("unknown_part", f"unknown content part type {kind!r} of output item {entry.index} skipped")
            return None
        return channel

    def _part_added(self, obj: dict[str, Any], channel: Channel, index_field: str, text_field: str) -> None:
        where = self.event_name
        entry, index = self._part_event(obj, channel, index_field, where)
        if entry is None:
            return
        part = require(obj, "part", dict, where=where)
        self._open_unit(entry, channel)
        self._stream(entry, channel, index, optional(part, text_field, str, where=f"{where}.part") or "")

    # -- deltas and their restatements (P2) ----------------------------------------------

    def _on_delta(self, obj: dict[str, Any]) -> None:
        where = self.event_name
        channel, index_field, _ = _TEXT_EVENTS[where]
        entry, index = self._part_event(obj, channel, index_field, where)
        if entry is not None:
            self._stream(entry, channel, index, require(obj, "delta", str, where=where))

    def _on_text_done(self, obj: dict[str, Any]) -> None:
        where = self.event_name
        channel, index_field, text_field = _TEXT_EVENTS[where]
        entry, index = self._part_event(obj, channel, index_field, where)
        if entry is not None:
            self._settle(entry, channel, index, require(obj, text_field, str, where=where), where)

    def _stream(self, entry: _Item, channel: Channel, index: int, text: str) -> None:
        """Emit new text of one part on its channel's unit, opening the unit on first use."""
        if not text:
            return
        part = entry.parts.setdefault((channel, index), _Part())
        key = self._open_unit(entry, channel)
        delta = text
        if channel in _REASONING_CHANNELS:
            if part.length == 0 and channel in entry.has_text:
                delta = PART_SEPARATOR + text
            self.run.reasoning_content(key, delta)
        elif channel is Channel.ARGUMENTS:
            self.run.tool_call_args(key, delta)
        else:
            self.run.text_content(key, delta)
        entry.has_text.add(channel)
        part.add(text)

    def _settle(self, entry: _Item, channel: Channel, index: int, full: str, where: str) -> None:
        """A ``.done`` restates a part: emit only what its deltas missed, never twice (P2)."""
        part = entry.parts.get((channel, index))
        if part is None:
            if full:
                self._stream(entry, channel, index, full)
            return
        rest = part.rest_of(full)
        if rest is None:
            # No content in the reason (P8): sizes only.
            raise ProviderGrammarError(
                f"{where}: {channel.value} part {index} of output item {entry.index} restates "
                f"{len(full)} characters that disagree with the {part.length} its deltas streamed"
            )
        if rest:
            self._stream(entry, channel, index, rest)

    # -- units -----------------------------------------------------------------------

    def _open_unit(self, entry: _Item, channel: Channel) -> tuple[int, str]:
        key = entry.units.get(channel)
        if key is not None:
            return key
        key = (entry.index, channel.value)
        meta: dict[str, Any] = {"itemId": entry.item_id}
        if channel in _REASONING_CHANNELS:
            message_id = self.mint("reasoning", f"{entry.unit_name}/{channel.value}")
            self.run.start_reasoning(
                key, message_id, span=("span", entry.index), metadata={"reasoningKind": channel.value, **meta}
            )
            entry.carrier = entry.carrier or message_id
        elif channel is Channel.OUTPUT_TEXT:
            self.run.start_text(key, self.mint("text", entry.unit_name), metadata={"phase": entry.phase, **meta})
        elif channel is Channel.REFUSAL:
            message_id = self.mint("text", f"{entry.unit_name}/refusal")
            self.run.start_text(key, message_id, metadata={"contentKind": "refusal", "phase": entry.phase, **meta})
        else:  # unreachable: a function_call's tool call opens with its item (_start_function_call)
            raise ProviderGrammarError(f"output item {entry.index}: function_call arguments before the call opened")
        entry.units[channel] = key
        return key

    def _open_carrier(self, entry: _Item) -> str:
        """A reasoning item with no readable text still gets a message to carry its value (§6.3)."""
        key = (entry.index, "opaque")
        message_id = self.mint("reasoning", f"{entry.unit_name}/opaque")
        self.run.start_reasoning(
            key, message_id, span=("span", entry.index), metadata={"reasoningKind": "none", "itemId": entry.item_id}
        )
        self.run.end_reasoning(key)
        entry.carrier = message_id
        return message_id

    # -- lookups -----------------------------------------------------------------------

    def _entry(self, index: int, where: str) -> _Item:
        entry = self._items.get(index)
        if entry is None:
            raise ProviderGrammarError(f"{where}: output item {index} was never added")
        if entry.done:
            raise ProviderGrammarError(f"{where}: output item {index} is already done")
        return entry

    def _part_event(
        self, obj: dict[str, Any], channel: Channel, index_field: str, where: str
    ) -> tuple[_Item | None, int]:
        """The open item a part event addresses (None when the item is skipped) and the part index."""
        entry = self._entry(require_index(obj, "output_index", where=where), where)
        index = require_index(obj, index_field, where=where) if index_field else 0
        if entry.kind == "skipped" or (channel is not Channel.ARGUMENTS and index in entry.skipped_parts):
            return None, index
        if entry.kind != _CHANNEL_ITEM[channel]:
            raise ProviderGrammarError(
                f"{where}: output item {entry.index} is a {entry.kind}, not a {_CHANNEL_ITEM[channel]}"
            )
        item_id = optional(obj, "item_id", str, where=where)
        if item_id is not None and entry.item_id is not None and item_id != entry.item_id:
            raise ProviderGrammarError(f"{where}: item_id does not match output item {entry.index}")
        return entry, index

    # -- usage (P6) and the rest --------------------------------------------------------------

    def _take_usage(self, response: dict[str, Any], *, where: str) -> None:
        """``output_tokens`` includes reasoning and ``input_tokens`` cached input: shares, never added."""
        usage = optional(response, "usage", dict, where=where)
        if not usage:
            return
        input_details = usage.get("input_tokens_details")
        input_details = input_details if isinstance(input_details, dict) else {}
        output_details = usage.get("output_tokens_details")
        output_details = output_details if isinstance(output_details, dict) else {}
        input_tokens = token_count(usage, "input_tokens", where="response.usage")
        output_tokens = token_count(usage, "output_tokens", where="response.usage")
        if input_tokens is not None and output_tokens is not None:
            total_tokens: int | None = input_tokens + output_tokens
        else:
            total_tokens = token_count(usage, "total_tokens", where="response.usage")
        self.tokens = TokenCounts(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            reasoning_tokens=token_count(output_details, "reasoning_tokens", where="response.usage.output_tokens_details"),
            cached_input_tokens=token_count(input_details, "cached_tokens", where="response.usage.input_tokens_details"),
            cache_write_input_tokens=token_count(input_details, "cache_write_tokens", where="response.usage.input_tokens_details"),
            total_tokens=total_tokens,
            provider_raw=dict(usage),
        )

    def _on_annotation(self, obj: dict[str, Any]) -> None:
        """Citation metadata of an output_text part, not content."""
        self.counters["annotations"] += 1

    def _on_unsupported_event(self, obj: dict[str, Any]) -> None:
        """Built-in tool / audio events: known, not translated; counted, warned once per type."""
        kind = self.event_name
        self.counters["unsupported_events"] += 1
        if kind not in self._warned_types:
            self._warned_types.add(kind)
            self._warn("unsupported_event", f"{self.grammar.value} event type {kind!r} is not translated; skipped")


# set after the class body (see Translator.HANDLERS)
OpenAIResponsesTranslator.HANDLERS = {
    "response.created": OpenAIResponsesTranslator._on_response_start,
    "response.in_progress": OpenAIResponsesTranslator._on_response_start,
    "response.queued": OpenAIResponsesTranslator._on_response_start,
    "response.output_item.added": OpenAIResponsesTranslator._on_item_added,
    "response.output_item.done": OpenAIResponsesTranslator._on_item_done,
    "response.reasoning_summary_part.added": OpenAIResponsesTranslator._on_summary_part_added,
    "response.reasoning_summary_part.done": OpenAIResponsesTranslator._on_summary_part_done,
    "response.reasoning_summary_text.delta": OpenAIResponsesTranslator._on_delta,
    "response.reasoning_summary_text.done": OpenAIResponsesTranslator._on_text_done,
    "response.reasoning_text.delta": OpenAIResponsesTranslator._on_delta,
    "response.reasoning_text.done": OpenAIResponsesTranslator._on_text_done,
    "response.content_part.added": OpenAIResponsesTranslator._on_content_part_added,
    "response.content_part.done": OpenAIResponsesTranslator._on_content_part_done,
    "response.output_text.delta": OpenAIResponsesTranslator._on_delta,
    "response.output_text.done": OpenAIResponsesTranslator._on_text_done,
    "response.output_text.annotation.added": OpenAIResponsesTranslator._on_annotation,
    "response.refusal.delta": OpenAIResponsesTranslator._on_delta,
    "response.refusal.done": OpenAIResponsesTranslator._on_text_done,
    "response.function_call_arguments.delta": OpenAIResponsesTranslator._on_delta,
    "response.function_call_arguments.done": OpenAIResponsesTranslator._on_text_done,
    "response.completed": OpenAIResponsesTranslator._on_completed,
    "response.incomplete": OpenAIResponsesTranslator._on_incomplete,
    "response.failed": OpenAIResponsesTranslator._on_failed,
    "error": OpenAIResponsesTranslator._on_error,
    **dict.fromkeys(_UNSUPPORTED_EVENTS, OpenAIResponsesTranslator._on_unsupported_event),
}


_RESPONSE_STARTS = frozenset({"response.created", "response.in_progress", "response.queued"})



def _read_reasoning(index: int, item: dict[str, Any]) -> _Item:
    # encrypted_content on .added "may be incomplete" (§1.4): ignored here, read on .done.
    return _Item(index, "reasoning", require(item, "id", str, where="response.output_item.added.item(reasoning)"))


def _read_message(index: int, item: dict[str, Any]) -> _Item:
    where = "response.output_item.added.item(message)"
    entry = _Item(index, "message", require(item, "id", str, where=where))
    entry.phase = optional(item, "phase", str, where=where)
    return entry


def _read_function_call(index: int, item: dict[str, Any]) -> _Item:
    where = "response.output_item.added.item(function_call)"
    entry = _Item(index, "function_call", optional(item, "id", str, where=where))  # the SDK makes fc ids optional
    entry.call_id = require(item, "call_id", str, where=where)
    entry.name = require(item, "name", str, where=where)
    optional(item, "arguments", str, where=where)
    return entry


_ITEM_READERS = {"reasoning": _read_reasoning, "message": _read_message, "function_call": _read_function_call}
"""Item types we translate → a reader that validates ``output_item.added.item`` before anything is emitted."""

_TEXT_EVENTS: dict[str, tuple[Channel, str, str]] = {
    "response.reasoning_summary_text.delta": (Channel.SUMMARY, "summary_index", "text"),
    "response.reasoning_summary_text.done": (Channel.SUMMARY, "summary_index", "text"),
    "response.reasoning_text.delta": (Channel.RAW, "content_index", "text"),
    "response.reasoning_text.done": (Channel.RAW, "content_index", "text"),
    "response.output_text.delta": (Channel.OUTPUT_TEXT, "content_index", "text"),
    "response.output_text.done": (Channel.OUTPUT_TEXT, "content_index", "text"),
    "response.refusal.delta": (Channel.REFUSAL, "content_index", "refusal"),
    "response.refusal.done": (Channel.REFUSAL, "content_index", "refusal"),
    "response.function_call_arguments.delta": (Channel.ARGUMENTS, "", "arguments"),
    "response.function_call_arguments.done": (Channel.ARGUMENTS, "", "arguments"),
}
"""Text-bearing events → (channel, the field naming the part, the field of the full text on ``.done``)."""


def _identity(item: dict[str, Any] | None) -> dict[str, str] | None:
    """What the next turn needs to know about the item that follows a reasoning item (§1.7)."""
    if item is None:
        return None
    return {k: item[k] for k in ("type", "id", "call_id") if isinstance(item.get(k), str)}
