"""AWS Bedrock ConverseStream (``bedrock-converse``) → AG-UI.

Theory of operation
-------------------
Bedrock streams ``application/vnd.amazon.eventstream`` frames whose
``:event-type`` (or ``:exception-type``) header names the union member. The
raw record is the boto3-style object ``{"<member>": payload}`` — blobs are
base64 strings in this JSON — so the discriminator is the single top-level key
(:meth:`BedrockConverseTranslator.event_type`). ``{}`` is what botocore makes of
an unknown ``:event-type``: an unknown event like any other key not in
``HANDLERS`` (P3). More than one key is not a union member at all (R7).

A run is one assistant message: ``messageStart``, then content blocks addressed
by ``contentBlockIndex``, each ``[contentBlockStart] contentBlockDelta*
contentBlockStop``, then ``messageStop {stopReason}`` and — *after* it —
``metadata {usage, metrics}``. Only ``toolUse`` (and the server-side
``toolResult`` / ``image``) blocks have a start event; a text or reasoning
block is opened by its first delta. Every delta is a one-member union, and so
is ``reasoningContent`` inside it: ``text`` | ``signature`` |
``redactedContent``. botocore turns a member it does not know into
``{"SDK_UNKNOWN_MEMBER": {"name": …}}``; any member not handled here is skipped
and counted (P3) without touching the block.

Block → AG-UI mapping:

* reasoning (``reasoningContent.text`` / ``.signature``) — one span holding one
  reasoning message; text deltas are ``REASONING_MESSAGE_CONTENT``. The
  signature is held and emitted when the block stops as
  ``REASONING_ENCRYPTED_VALUE`` (subtype ``message``, entityId = the reasoning
  message), byte for byte (R3). Its record rebuilds
  ``{"reasoningContent": {"reasoningText": {"text", "signature"}}}`` (P5).
  A block that stops without a signature is readable only; it has no artefact.
  An empty signature is no signature: warned, never announced, kept only as an
  incomplete record.
* redacted (``reasoningContent.redactedContent``) — a reasoning message with no
  content (``reasoningKind: redacted``); the value is the base64 text of the
  bytes exactly as it arrived, never decoded (R3), rebuilt as
  ``{"reasoningContent": {"redactedContent": …}}``.
* ``text`` — ``TEXT_MESSAGE_*``; ``citation`` deltas are metadata, counted.
* ``toolUse`` — ``TOOL_CALL_*`` with the provider's ``toolUseId``; the
  ``input`` fragments are the arguments, concatenated exactly.
* ``toolResult`` / ``image`` blocks and ``toolUse`` of type ``server_tool_use``
  are produced and consumed server-side: skipped with a warning, deltas and
  stop included (REFERENCE §6.6).

A held signature whose block never stops (interruption, exception frame, a
``messageStop`` with the block open) is kept by the ledger as an incomplete,
never-replayable record (P5).

End: ``messageStop`` defers the finish because usage trails it; ``metadata``
completes it, and input that ends after ``messageStop`` without ``metadata`` is
still a finished run (without usage). Every ``stopReason`` — ``max_tokens``,
``guardrail_intervened``, … — finishes the run and is kept verbatim. An
exception frame ends the run with ``RUN_ERROR`` (``provider_error``).

Provenance (P1): the stream never names the model, so summary vs raw comes
from the model the caller passes (the worker's ``rw-model`` header, the CLI's
``--model``; REFERENCE §7.11): Claude 4+ streams a summary, Claude 3.7 its raw
reasoning, every other model (DeepSeek R1, gpt-oss, …) raw reasoning. With no
model at all the kind is ``summary``, the Anthropic translator's default, and
``REASONING_MESSAGE_START.metadata.reasonwire.reasoningKindAssumed`` says it was
not known, so an audience filter can treat it as strictly as raw reasoning; a
``provenance_assumed`` warning names the missing header once per run.

Usage (P6): one ``metadata.usage`` per run. ``inputTokens`` excludes cache reads
and writes (AWS prompt caching: total input = inputTokens + cacheRead +
cacheWrite), so normalized input adds them. The cache counters are optional
fields sent when prompt caching is in play, so an absent one means 0 — unlike
the reasoning count, which the shape has no field for: ``reasoning_tokens``
stays unknown, never 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reasonwire.contracts.artefacts import ArtefactSubtype, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.usage import TokenCounts
from reasonwire.workers.core.artefacts import HeldArtefact
from reasonwire.workers.core.errors import ProviderGrammarError, optional, require, require_index, token_count
from reasonwire.workers.core.translator import Translator

_SEVERAL_MEMBERS = "(several event members)"
"""``event_type`` of a line with more than one top-level key: its handler rejects it (R7)."""

_SIGNATURE_PATH = ["reasoningContent", "reasoningText", "signature"]
_REDACTED_PATH = ["reasoningContent", "redactedContent"]

_SERVER_BLOCKS = frozenset({"toolResult", "image"})
"""Content the service produces and consumes itself (server tools, generated images)."""


class _Kind(StrEnum):
    """What a content block turned out to be; text and reasoning blocks learn it from their first delta."""

    UNDETERMINED = "undetermined"
    """Only skipped members (unknown, citation) so far: nothing opened."""
    TEXT = "text"
    REASONING = "reasoning"
    REDACTED = "redacted reasoning"
    TOOL_USE = "toolUse"
    SKIPPED = "skipped"
    CLOSED = "closed"


@dataclass
class _Block:
    kind: _Kind
    agui_id: str | None = None
    reasoning: list[str] = field(default_factory=list)
    saw_args: bool = False


class BedrockConverseTranslator(Translator):
    """Translator for the Bedrock ConverseStream grammar (boto3-style event objects)."""

    grammar = Grammar.BEDROCK_CONVERSE

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._blocks: dict[int, _Block] = {}
        self._tool_call_ids: list[str] = []
        self._message_stopped = False

    def event_type(self, obj: dict[str, Any], sse_event: str | None) -> str | None:
        """The union member: the object's single key (``{}`` → unknown, P3)."""
        if len(obj) > 1:
            return _SEVERAL_MEMBERS
        return next(iter(obj), None)

    # -- message lifecycle ---------------------------------------------------------

    def _on_several_members(self, obj: dict[str, Any]) -> None:
        raise ProviderGrammarError(f"an event is one union member, this line has {len(obj)} top-level keys")

    def _on_message_start(self, obj: dict[str, Any]) -> None:
        require(_payload(obj, "messageStart"), "role", str, where="messageStart")

    def _on_message_stop(self, obj: dict[str, Any]) -> None:
        event = _payload(obj, "messageStop")
        stop_reason = require(event, "stopReason", str, where="messageStop")
        if self._message_stopped:
            raise ProviderGrammarError("messageStop: the message already stopped")
        self._message_stopped = True
        pending = self._tool_call_ids if stop_reason == "tool_use" else None
        self.defer_finish(stop_reason=stop_reason, pending_tool_call_ids=pending)  # usage trails in metadata

    def _on_metadata(self, obj: dict[str, Any]) -> None:
        usage = require(_payload(obj, "metadata"), "usage", dict, where="metadata")
        self.tokens = _token_counts(usage)
        self.complete_deferred_finish()

    def _on_exception(self, obj: dict[str, Any]) -> None:
        """An exception frame (``:message-type: exception``): the stream failed (REFERENCE §5.1)."""
        name = next(iter(obj))
        message = optional(_payload(obj, name), "message", str, where=name) or "no message"
        self.provider_error(f"bedrock {name}: {message}", provider_code=name)

    # -- content blocks ------------------------------------------------------------

    def _on_block_start(self, obj: dict[str, Any]) -> None:
        event, index = self._block_event(obj, "contentBlockStart")
        if index in self._blocks:
            raise ProviderGrammarError(f"contentBlockStart: block {index} started twice")
        start_union = require(event, "start", dict, where="contentBlockStart")
        member, start = _union_member(start_union, "contentBlockStart.start")
        where = f"contentBlockStart.start.{member}"
        if member == "toolUse" and optional(start, "type", str, where=where) != "server_tool_use":
            tool_id = require(start, "toolUseId", str, where=where)
            self._blocks[index] = _Block(_Kind.TOOL_USE, tool_id)
            self.run.start_tool_call(index, tool_id, require(start, "name", str, where=where), metadata=self.block_hint(index))
        elif member == "toolUse" or member in _SERVER_BLOCKS:
            self._skip_block(index, "unsupported", "server_tool_use" if member == "toolUse" else member)
        else:
            self._skip_block(index, "unknown", _member_name(member, start))

    def _on_block_delta(self, obj: dict[str, Any]) -> None:
        event, index = self._block_event(obj, "contentBlockDelta")
        delta = require(event, "delta", dict, where="contentBlockDelta")
        member, value = _union_member(delta, "contentBlockDelta.delta")
        entry = self._blocks.get(index)
        if entry is not None and entry.kind is _Kind.CLOSED:
            raise ProviderGrammarError(f"contentBlockDelta: block {index} already stopped")
        if entry is not None and entry.kind is _Kind.SKIPPED:
            return
        apply = _DELTAS.get(member)
        if apply is None:
            self._skip_member(index, _member_name(member, value))
            return
        apply(self, index, entry, value)

    def _on_block_stop(self, obj: dict[str, Any]) -> None:
        _, index = self._block_event(obj, "contentBlockStop")
        entry = self._blocks.get(index)
        if entry is None or entry.kind is _Kind.CLOSED:
            raise ProviderGrammarError(f"contentBlockStop: block {index} is not open")
        if entry.kind is _Kind.TEXT:
            self.run.end_text(index)
        elif entry.kind in (_Kind.REASONING, _Kind.REDACTED):
            self._stop_reasoning(index, entry)
        elif entry.kind is _Kind.TOOL_USE:
            if not entry.saw_args:  # no input fragment: ToolUseBlock.input is a document, so {}
                self.run.tool_call_args(index, "{}")
            self.run.end_tool_call(index)
            self._tool_call_ids.append(entry.agui_id or "")
        entry.kind = _Kind.CLOSED
        entry.reasoning = []

    # -- deltas (one per ContentBlockDelta member) ---------------------------------------

    def _text_delta(self, index: int, entry: _Block | None, text: Any) -> None:
        if not isinstance(text, str):
            raise ProviderGrammarError("contentBlockDelta.delta: member 'text' is not str")
        self._block_as(index, entry, _Kind.TEXT, "text")
        self.run.text_content(index, text)

    def _tool_use_delta(self, index: int, entry: _Block | None, tool_use: Any) -> None:
        where = "contentBlockDelta.delta.toolUse"
        fragment = require(_member_object(tool_use, "toolUse"), "input", str, where=where)
        if entry is None or entry.kind is _Kind.UNDETERMINED:  # id and name only come with a start
            raise ProviderGrammarError(f"contentBlockDelta: toolUse delta on block {index} without contentBlockStart")
        if entry.kind is not _Kind.TOOL_USE:
            raise ProviderGrammarError(f"contentBlockDelta: toolUse delta on a {entry.kind.value} block ({index})")
        entry.saw_args = entry.saw_args or bool(fragment)
        self.run.tool_call_args(index, fragment)

    def _reasoning_delta(self, index: int, entry: _Block | None, content: Any) -> None:
        where = "contentBlockDelta.delta.reasoningContent"
        member, value = _union_member(_member_object(content, "reasoningContent"), where)
        if member not in ("text", "signature", "redactedContent"):
            self._skip_member(index, f"reasoningContent.{_member_name(member, value)}")
            return
        if not isinstance(value, str):  # redactedContent is a blob: base64 text in JSON
            raise ProviderGrammarError(f"{where}: member {member!r} is not str")
        if member == "redactedContent":
            entry = self._block_as(index, entry, _Kind.REDACTED, f"reasoningContent.{member}")
            native = self._native(index, {"reasoningContent": {}}, _REDACTED_PATH)
            self._hold(index, entry, "bedrock.reasoningContent.redactedContent", value, native)
            return
        entry = self._block_as(index, entry, _Kind.REASONING, f"reasoningContent.{member}")
        if member == "text":
            if value:
                entry.reasoning.append(value)
                self.run.reasoning_content(index, value)
        else:  # the block's text is joined once, when the record is made (not per signature)
            native = self._native(index, {"reasoningContent": {"reasoningText": {}}}, _SIGNATURE_PATH)
            text_now = lambda: {"block": _reasoning_text_block(entry)}  # noqa: E731
            self._hold(index, entry, "bedrock.reasoningContent.signature", value, native, text_now)

    def _citation_delta(self, index: int, entry: _Block | None, citation: Any) -> None:
        """Citation metadata of a text block, not content."""
        self.counters["citations"] += 1
        if entry is None:
            self._blocks[index] = _Block(_Kind.UNDETERMINED)

    def _server_delta(self, index: int, entry: _Block | None, value: Any) -> None:
        """toolResult / image content normally follows its own start; without one, skip the block."""
        if entry is not None and entry.kind is not _Kind.UNDETERMINED:
            raise ProviderGrammarError(f"contentBlockDelta: server content on a {entry.kind.value} block ({index})")
        self._skip_block(index, "unsupported", "server-side content")

    # -- block helpers -------------------------------------------------------------

    def _block_event(self, obj: dict[str, Any], name: str) -> tuple[dict[str, Any], int]:
        event = _payload(obj, name)
        index = require_index(event, "contentBlockIndex", where=name)
        if self._message_stopped:
            raise ProviderGrammarError(f"{name}: content after messageStop")
        return event, index

    def _block_as(self, index: int, entry: _Block | None, kind: _Kind, member: str) -> _Block:
        """The block ``member`` belongs to, opened by this first delta if need be (no start event)."""
        if entry is not None and entry.kind is not _Kind.UNDETERMINED:
            if entry.kind is not kind:
                raise ProviderGrammarError(f"contentBlockDelta: {member} delta on a {entry.kind.value} block ({index})")
            return entry
        entry = _Block(kind, self.mint("text" if kind is _Kind.TEXT else "reasoning", index))
        self._blocks[index] = entry
        if kind is _Kind.TEXT:
            self.run.start_text(index, entry.agui_id or "")
            return entry
        span = ("span", index)
        self.run.open_span(span, self.mint("span", index))
        metadata = {"reasoningKind": "redacted"} if kind is _Kind.REDACTED else self._provenance()
        self.run.start_reasoning(index, entry.agui_id or "", span=span, metadata=metadata)
        return entry

    def _skip_block(self, index: int, known: str, what: str) -> None:
        self._blocks[index] = _Block(_Kind.SKIPPED)
        self.counters["skipped_blocks"] += 1
        self._warn(f"{known}_block", f"{known} content block {what!r} at index {index} skipped")

    def _skip_member(self, index: int, member: str) -> None:
        """An unknown union member (``SDK_UNKNOWN_MEMBER`` from botocore): the block stays as it was (P3)."""
        self.counters["unknown_deltas"] += 1
        self._warn("unknown_delta", f"unknown delta member {member!r} on block {index} skipped")
        self._blocks.setdefault(index, _Block(_Kind.UNDETERMINED))  # so its contentBlockStop is expected

    # -- reasoning helpers -----------------------------------------------------------

    def _provenance(self) -> dict[str, Any]:
        """Summary vs raw from the model id (REFERENCE §7.11); the stream never names the model."""
        if self.model is None:
            if not self.counters["provenance_assumed"]:
                self._warn("provenance_assumed", "no model given: reasoning labelled summary (assumed)")
            self.counters["provenance_assumed"] += 1
            return {"reasoningKind": "summary", "reasoningKindAssumed": True}
        model = self.model.lower()
        summarised = "claude" in model and "claude-3-" not in model  # Claude 4+; 3.7 streams raw reasoning
        return {"reasoningKind": "summary" if summarised else "raw"}

    def _native(self, index: int, block: dict[str, Any], value_path: list[str]) -> NativeBlock:
        """The block as the next request sends it, minus the value; Converse streams carry no message id."""
        return NativeBlock(response_id=self.response_id, position=index, block=block, value_path=value_path)

    def _hold(
        self,
        index: int,
        entry: _Block,
        kind: str,
        value: str,
        native: NativeBlock,
        refresh: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """Until contentBlockStop: the ledger emits it then, or keeps it incomplete if the block never stops."""
        if value and self.artefacts.held(index) is not None:  # R4: a second value replaces the first, so say so
            self.counters["replaced_artefacts"] += 1
            self._warn("opaque_value_replaced", f"a second opaque value on block {index} replaced the first")
        entity_id = entry.agui_id or ""
        held = HeldArtefact(kind, ArtefactSubtype.MESSAGE, entity_id, value, native, refresh)
        self.hold_artefact(index, held, where=f"block {index}")

    def _stop_reasoning(self, index: int, entry: _Block) -> None:
        self.run.end_reasoning(index)
        if entry.kind is _Kind.REDACTED:
            self.artefacts.release(index)
        elif self.artefacts.held(index) is None:
            self.counters["unsigned_reasoning"] += 1  # normal for DeepSeek R1, gpt-oss: nothing opaque to keep
            self.artefacts.release(index)  # an empty signature's incomplete record, if one came
        else:
            self.artefacts.release(index)  # its refresh fills in the block's text
        self.run.close_span(("span", index))


# set after the class body (see Translator.HANDLERS)
BedrockConverseTranslator.HANDLERS = {
    "messageStart": BedrockConverseTranslator._on_message_start,
    "contentBlockStart": BedrockConverseTranslator._on_block_start,
    "contentBlockDelta": BedrockConverseTranslator._on_block_delta,
    "contentBlockStop": BedrockConverseTranslator._on_block_stop,
    "messageStop": BedrockConverseTranslator._on_message_stop,
    "metadata": BedrockConverseTranslator._on_metadata,
    "internalServerException": BedrockConverseTranslator._on_exception,
    "modelStreamErrorException": BedrockConverseTranslator._on_exception,
    "validationException": BedrockConverseTranslator._on_exception,
    "throttlingException": BedrockConverseTranslator._on_exception,
    "serviceUnavailableException": BedrockConverseTranslator._on_exception,
    _SEVERAL_MEMBERS: BedrockConverseTranslator._on_several_members,
}


_DELTAS: dict[str, Callable[[BedrockConverseTranslator, int, _Block | None, Any], None]] = {
    "text": BedrockConverseTranslator._text_delta,
    "toolUse": BedrockConverseTranslator._tool_use_delta,
    "reasoningContent": BedrockConverseTranslator._reasoning_delta,
    "citation": BedrockConverseTranslator._citation_delta,
    "toolResult": BedrockConverseTranslator._server_delta,
    "image": BedrockConverseTranslator._server_delta,
}
"""ContentBlockDelta member → handler. Anything else is an unknown member (P3)."""


def _payload(obj: dict[str, Any], name: str) -> dict[str, Any]:
    payload: dict[str, Any] = require(obj, name, dict, where=name)
    return payload


def _member_object(value: Any, member: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProviderGrammarError(f"contentBlockDelta.delta: member {member!r} is not an object")
    return value


def _union_member(union: dict[str, Any], where: str) -> tuple[str, Any]:
    """The one member a Smithy union sets (null members are absent, as botocore parses them)."""
    members = [(name, value) for name, value in union.items() if value is not None]
    if len(members) != 1:
        raise ProviderGrammarError(f"{where}: a union sets exactly one member, found {len(members)}")
    return members[0]


def _member_name(member: str, value: Any) -> str:
    """A union member's name for a warning; botocore files unknown ones under ``SDK_UNKNOWN_MEMBER``."""
    name = value.get("name") if member == "SDK_UNKNOWN_MEMBER" and isinstance(value, dict) else None
    return f"{member}({name})" if isinstance(name, str) else member


def _reasoning_text_block(entry: _Block) -> dict[str, Any]:
    """The native reasoning block minus its signature, text as streamed so far."""
    return {"reasoningContent": {"reasoningText": {"text": "".join(entry.reasoning)}}}


def _token_counts(usage: dict[str, Any]) -> TokenCounts:
    where = "metadata.usage"
    base_input = token_count(usage, "inputTokens", where=where)
    output = token_count(usage, "outputTokens", where=where)
    if base_input is None or output is None:
        raise ProviderGrammarError(f"{where}: inputTokens and outputTokens are required")
    cache_read = token_count(usage, "cacheReadInputTokens", where=where, absent=0) or 0
    cache_write = token_count(usage, "cacheWriteInputTokens", where=where, absent=0) or 0
    total_input = base_input + cache_read + cache_write
    return TokenCounts(
        input_tokens=total_input,
        output_tokens=output,
        reasoning_tokens=None,  # Converse TokenUsage has no reasoning field: unknown, never 0
        cached_input_tokens=cache_read,
        cache_write_input_tokens=cache_write,
        total_tokens=total_input + output,
        provider_raw=dict(usage),
    )
