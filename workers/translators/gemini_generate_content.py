"""Gemini ``streamGenerateContent?alt=sse`` (``gemini-generate-content``) → AG-UI.

Theory of operation
-------------------
A run is one streamed model turn. Every SSE ``data:`` payload is a whole
``GenerateContentResponse`` chunk and there is no event-type field, so
:meth:`~GeminiGenerateContentTranslator.event_type` classifies chunks by shape:
``{"error": …}`` is ``error``, an object with any response field is ``chunk``,
anything else falls out of the ``HANDLERS`` table as an unknown event (P3).

The parts of ``candidates[0].content`` continue the model turn chunk after
chunk; they are numbered across chunks (the *part index*, which is where a
signature goes back on the next turn). Consecutive parts of one kind form one
AG-UI unit:

* ``thought: true`` parts — a *thought run*: one reasoning span holding one
  reasoning message (Gemini gives thoughts no ids; ids are minted per unit);
* ``text`` parts — one text message;
* ``functionCall`` parts — a *call group* (Gemini's parallel calls). Each call is
  whole in its part, so ``TOOL_CALL_START``/``ARGS``/``END`` come at once and the
  ``args`` object is serialised once. ``functionCall.id`` is the tool-call id
  when present; otherwise an id is minted from the call's ordinal in the turn
  and marked minted (the next turn matches ``functionResponse`` by name and
  position, REFERENCE §3.2).

A ``thoughtSignature`` is opaque state of the part it rides (R3, REFERENCE
§3.3): on a functionCall part it names the tool call (subtype ``tool-call``);
on a thought or text part it names the message that part belongs to (subtype
``message``). It is held until its unit closes and then released: inside the
thought's span, or — text and calls are not reasoning — on its own after the
unit ends, in no span: the event "opens nothing, closes nothing" (draft
chapter), and an empty span would render as an empty thinking block.
An empty ``thoughtSignature`` is no signature: warned, never
announced, kept only as an incomplete record of its part.
The trailing ``{text: "", thoughtSignature}`` part is a text part: it belongs to
the open text message, or, when none is open, opens a text message with no
content — the part exists and goes back in its place. A part whose data field
is unknown is skipped, its signature reported lost, even when it has no other
field. A text or thought part
with neither content nor signature carries nothing and changes no unit.

Parallel calls: only the first call of a group is signed. A signed call's
record is held until its group ends, so its ``extra`` can list the whole group
in the order received with each tool-call id ↔ functionCall mapping: the next
turn must resend the calls grouped and ordered as they came.

Artefact record: ``native.block`` is the part without ``thoughtSignature``,
``value_path`` ``["thoughtSignature"]``, ``position`` the part index, for a signed text or
thought part ``extra.textOffset`` (where its text starts in its message: replay puts the
part back there, even when the same text occurs earlier),
``response_id`` the ``responseId``.

End: the chunk whose candidate has a ``finishReason`` (``STOP`` also ends tool-
call turns). Open units close, ``RUN_FINISHED`` keeps the reason verbatim and,
for ``STOP``, lists the turn's calls as pending. A prompt blocked before any
candidate (``promptFeedback.blockReason``) ends the run the same way. No
finishReason before EOF is an interrupted run, handled by the base. Usage is
the last ``usageMetadata`` (running values, never summed; accounting in
``_gemini_common``).

Only candidate 0 is translated — a run is one assistant turn; other candidates
(``candidateCount`` > 1) are skipped with a warning. Unsupported part kinds
(inline data, code execution, …) and unknown ones are skipped without closing
the open unit (REFERENCE §6.6); a signature on such a part has no AG-UI entity
to name and is reported lost (R4). Function-argument streaming (``partialArgs``)
is refused with ``RUN_ERROR``: serialising a partial object would emit wrong
arguments silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from reasonwire.contracts.artefacts import ArtefactSubtype, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.core.artefacts import HeldArtefact
from reasonwire.workers.core.errors import ProviderGrammarError, optional, optional_index, require
from reasonwire.workers.translators._gemini_common import GeminiTranslator, UsageFields, arguments_json

SIGNATURE_KIND = "gemini.part.thoughtSignature"

_RESPONSE_FIELDS = frozenset(
    {"candidates", "usageMetadata", "promptFeedback", "responseId", "modelVersion", "createTime", "modelStatus"}
)
"""Top-level fields of ``GenerateContentResponse``: any of them makes an object a chunk."""

_UNSUPPORTED_PARTS = frozenset(
    {"inlineData", "fileData", "executableCode", "codeExecutionResult", "functionResponse", "toolCall", "toolResponse"}
)
"""``Part`` data members reasonwire does not translate (no AG-UI unit for them)."""


class PartKind(Enum):
    THOUGHT = "thought"
    TEXT = "text"
    CALL = "call"


@dataclass
class _Unit:
    """The AG-UI unit consecutive parts of one kind are translated into."""

    kind: PartKind
    ordinal: int
    message_id: str | None = None
    """The reasoning / text message; None for a call group."""
    signatures: list[tuple[str, int]] = field(default_factory=list)
    """Ledger keys of the signatures held on this unit, in part order."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """Call groups only: tool-call id ↔ functionCall mapping, in the order received."""
    chars: int = 0
    """Text and thought units: characters of text streamed so far, where the next part's text starts."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.kind.value, self.ordinal)


class GeminiGenerateContentTranslator(GeminiTranslator):
    """Translator for the Gemini ``streamGenerateContent`` chunk grammar."""

    grammar = Grammar.GEMINI_GENERATE_CONTENT
    usage_fields = UsageFields(
        input="promptTokenCount",
        cached="cachedContentTokenCount",
        tool_use="toolUsePromptTokenCount",
        output="candidatesTokenCount",
        thoughts="thoughtsTokenCount",
    )

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._part_index = 0
        self._units = 0
        self._unit: _Unit | None = None
        self._tool_call_ids: list[str] = []

    def event_type(self, obj: dict[str, Any], sse_event: str | None) -> str | None:
        """No discriminator on the wire: every payload is a response chunk, or an error."""
        if "error" in obj:
            return "error"
        if not _RESPONSE_FIELDS.isdisjoint(obj):
            return "chunk"
        return None

    def stream_identity(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        response_id, model = obj.get("responseId"), obj.get("modelVersion")
        return (response_id if isinstance(response_id, str) else None, model if isinstance(model, str) else None)

    # -- chunks ---------------------------------------------------------------------

    def _on_chunk(self, obj: dict[str, Any]) -> None:
        usage = optional(obj, "usageMetadata", dict, where="chunk")
        if usage is not None:  # before any finishReason in this chunk: the terminal event carries it
            self.take_usage(usage)
        for candidate in optional(obj, "candidates", list, where="chunk") or []:
            if not isinstance(candidate, dict):
                raise ProviderGrammarError("chunk: a candidates[] entry is not an object")
            self._on_candidate(candidate)
            if self.ended:
                return
        feedback = optional(obj, "promptFeedback", dict, where="chunk")
        blocked = optional(feedback, "blockReason", str, where="chunk.promptFeedback") if feedback else None
        if blocked:
            self._end_turn(blocked)

    def _on_candidate(self, candidate: dict[str, Any]) -> None:
        index = optional_index(candidate, "index", where="candidate") or 0  # proto3 JSON omits index 0
        if index != 0:
            self.counters["skipped_candidates"] += 1
            self._warn("extra_candidate", f"candidate {index} skipped: a run translates candidate 0 only")
            return
        content = optional(candidate, "content", dict, where="candidate")
        for part in (optional(content, "parts", list, where="candidate.content") if content else None) or []:
            if not isinstance(part, dict):
                raise ProviderGrammarError(f"candidate.content: part {self._part_index} is not an object")
            self._on_part(part, self._part_index)
            self._part_index += 1
        reason = optional(candidate, "finishReason", str, where="candidate")
        if reason:
            self._end_turn(reason)

    def _end_turn(self, reason: str) -> None:
        self._close_unit()
        pending = self._tool_call_ids if reason == "STOP" else None
        self.finish_run(stop_reason=reason, pending_tool_call_ids=pending or None)

    # -- parts ----------------------------------------------------------------------

    def _on_part(self, part: dict[str, Any], position: int) -> None:
        where = f"part {position}"
        signature = optional(part, "thoughtSignature", str, where=where)
        kind = _part_kind(part)
        if kind is None:
            self._skip_part(part, position, signature)
            return
        if kind is PartKind.CALL:
            unit = self._unit_for(kind)
            entity_id, subtype = self._call(unit, part, position), ArtefactSubtype.TOOL_CALL
        else:
            text = optional(part, "text", str, where=where) or ""
            if not text and not signature:  # an empty signature is no signature
                if signature == "":
                    self.empty_signature("thoughtSignature", f"part {position}", "carries nothing")
                return
            unit = self._unit_for(kind)
            offset, unit.chars = unit.chars, unit.chars + len(text)
            if kind is PartKind.THOUGHT:
                self.thought_text(unit.key, text)
            else:
                self.run.text_content(unit.key, text)
            entity_id, subtype = unit.message_id or "", ArtefactSubtype.MESSAGE
            if signature is not None:  # where the part's text starts in its message: replay splits there
                self._hold_signature(unit, part, position, signature, entity_id, subtype, {"textOffset": offset})
            return
        if signature is not None:
            self._hold_signature(unit, part, position, signature, entity_id, subtype)

    def _call(self, unit: _Unit, part: dict[str, Any], position: int) -> str:
        where = f"part {position}.functionCall"
        call = require(part, "functionCall", dict, where=f"part {position}")
        name = require(call, "name", str, where=where)
        if "partialArgs" in call or call.get("willContinue"):
            raise ProviderGrammarError(f"{where}: streamed function-call arguments (partialArgs) are not supported")
        args = optional(call, "args", dict, where=where) or {}
        provider_id = optional(call, "id", str, where=where)
        tool_call_id = provider_id or self.mint("tool", len(self._tool_call_ids))
        minted = provider_id is None
        key = ("call", position)
        self.run.start_tool_call(key, tool_call_id, name, metadata={"partIndex": position, "idMinted": minted or None})
        self.run.tool_call_args(key, arguments_json(args))
        self.run.end_tool_call(key)
        self._tool_call_ids.append(tool_call_id)
        unit.calls.append({"toolCallId": tool_call_id, "name": name, "position": position, "idMinted": minted})
        return tool_call_id

    def _hold_signature(
        self,
        unit: _Unit,
        part: dict[str, Any],
        position: int,
        signature: str,
        entity_id: str,
        subtype: ArtefactSubtype,
        extra: dict[str, Any] | None = None,
    ) -> None:
        key = ("part", position)
        native = NativeBlock(
            response_id=self.response_id,
            position=position,
            block={name: value for name, value in part.items() if name != "thoughtSignature"},
            value_path=["thoughtSignature"],
            extra=extra or {},
        )
        held = HeldArtefact(kind=SIGNATURE_KIND, subtype=subtype, entity_id=entity_id, value=signature, native=native)
        if self.hold_artefact(key, held, where=f"part {position}") and unit.kind is PartKind.THOUGHT:
            self.thought_signed(unit.key)
        unit.signatures.append(key)

    def _skip_part(self, part: dict[str, Any], position: int, signature: str | None) -> None:
        """P3 / REFERENCE §6.6: skipped without closing or corrupting the open unit."""
        label = "unknown" if _UNSUPPORTED_PARTS.isdisjoint(part) else "unsupported"
        fields = sorted(name for name in part if name != "thoughtSignature")
        self.counters[f"{label}_parts"] += 1
        self._warn(f"{label}_part", f"{label} part at part {position} (fields {fields}) skipped")
        if signature:  # R4: nothing to carry it on; say so, never show it (P8)
            self.counters["lost_signatures"] += 1
            self._warn("signature_lost", f"thoughtSignature of skipped part {position} not carried (R4)")

    # -- units ----------------------------------------------------------------------

    def _unit_for(self, kind: PartKind) -> _Unit:
        """The open unit for a part of ``kind``: the current one, or a new one after closing it."""
        if self._unit is not None and self._unit.kind is kind:
            return self._unit
        self._close_unit()
        unit = _Unit(kind, self._units)
        self._units += 1
        if kind is PartKind.THOUGHT:
            unit.message_id = self.open_thought(unit.key, unit.ordinal)
        elif kind is PartKind.TEXT:
            unit.message_id = self.mint("text", unit.ordinal)
            self.run.start_text(unit.key, unit.message_id)
        self._unit = unit
        return unit

    def _close_unit(self) -> None:
        unit, self._unit = self._unit, None
        if unit is None:
            return
        if unit.kind is PartKind.THOUGHT:
            self.close_thought(unit.key, unit.signatures)
            return
        if unit.kind is PartKind.TEXT:
            self.run.end_text(unit.key)
        self._release_standalone(unit)

    def _release_standalone(self, unit: _Unit) -> None:
        """Signatures on answer text or calls, after their unit ended: on their own, in no span.

        ``REASONING_ENCRYPTED_VALUE`` "opens nothing, closes nothing" (draft chapter), and no
        thinking of the turn is open here (units close in order); an empty reasoning span
        around it would render as an empty thinking block."""
        updates = {"extra": {"callGroup": list(unit.calls)}} if unit.kind is PartKind.CALL else {}
        for key in unit.signatures:
            self.artefacts.release(key, **updates)


# set after the class body (see Translator.HANDLERS)
GeminiGenerateContentTranslator.HANDLERS = {
    "chunk": GeminiGenerateContentTranslator._on_chunk,
    "error": GeminiTranslator._on_error,
}


_PART_METADATA = frozenset({"thoughtSignature", "thought", "partMetadata"})
"""``Part`` fields that describe a part rather than being its data."""


def _part_kind(part: dict[str, Any]) -> PartKind | None:
    """What a part is; None for a part reasonwire does not translate.

    A part with no data field at all (only a signature) is an empty text part whose
    ``""`` was omitted; a part whose data field is one we do not know is unknown,
    signature or not: never read as an empty text part."""
    if "functionCall" in part:
        return PartKind.CALL
    if "text" in part or _PART_METADATA.issuperset(part):
        return PartKind.THOUGHT if part.get("thought") is True else PartKind.TEXT
    return None
