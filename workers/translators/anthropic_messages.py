"""Anthropic Messages streaming (``anthropic-messages``) → AG-UI.

Theory of operation
-------------------
A run is one streamed assistant message: ``message_start``, then content blocks
in index order (blocks never interleave), each ``content_block_start`` →
``content_block_delta``* → ``content_block_stop``, then ``message_delta`` (stop
reason, *cumulative* usage) and ``message_stop``. ``ping`` may come anywhere;
``error`` ends the stream.

Block → AG-UI mapping:

* ``thinking`` — one reasoning span holding one reasoning message; each
  ``thinking_delta`` is a ``REASONING_MESSAGE_CONTENT``. The ``signature_delta``
  (one whole value, sent just before the block stops; the SDK *assigns* it) is
  held and emitted when the block stops as ``REASONING_ENCRYPTED_VALUE``
  (subtype ``message``, entityId = the reasoning message), byte for byte (R3).
  A block with empty text and only a signature (``display: "omitted"``) is kept.
  An empty ``signature_delta`` is no signature: the block is unsigned (warned,
  no value announced, an incomplete record only).
* ``redacted_thinking`` — complete in ``content_block_start``, no deltas: a
  reasoning message with no content whose ``data`` is the encrypted value.
* ``text`` — ``TEXT_MESSAGE_*``. ``tool_use`` — ``TOOL_CALL_*`` with the
  provider's ``toolu_…`` id; ``input_json_delta`` fragments are the arguments.
* server-tool blocks and unknown block types are skipped with a warning; their
  deltas and stop are ignored too (REFERENCE §6.6).

Provenance (P1): on Claude 4+ the thinking text is a summary of the reasoning,
on Claude 3.7 it is the raw reasoning; ``REASONING_MESSAGE_START.metadata``
says which (``reasonwire.reasoningKind``).

Usage: ``message_start.message.usage`` then cumulative ``message_delta.usage``;
the latest value of each field wins — never summed, and a null in the delta
(optional in ``MessageDeltaUsage``) leaves the earlier value in place (P6). Anthropic's
``input_tokens`` excludes cache reads and writes, so normalized input adds them.
``output_tokens_details.thinking_tokens`` is optional; absent → reasoning unknown.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import orjson

from reasonwire.contracts.artefacts import ArtefactSubtype, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.usage import TokenCounts
from reasonwire.workers.core.artefacts import HeldArtefact
from reasonwire.workers.core.errors import ProviderGrammarError, optional, require, require_index, token_count
from reasonwire.workers.core.translator import Translator

_SKIPPED_BLOCKS = frozenset(
    {
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)


_TRUNCATING_STOPS = frozenset({"max_tokens", "model_context_window_exceeded"})
"""Stop reasons that cut the message off: a block still open then was truncated (REFERENCE §2.2)."""


@dataclass
class _Block:
    """One open content block. ``kind`` is the Anthropic block type we handle, or 'skipped'."""

    kind: str
    agui_id: str | None = None
    thinking: list[str] = field(default_factory=list)
    initial_input: dict[str, Any] | None = None
    saw_args: bool = False


class AnthropicMessagesTranslator(Translator):
    """Translator for the Anthropic Messages stream grammar."""

    grammar = Grammar.ANTHROPIC_MESSAGES

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._blocks: dict[int, _Block] = {}
        self._usage_raw: dict[str, Any] = {}
        self._tool_call_ids: list[str] = []

    def stream_identity(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        message = obj.get("message") if obj.get("type") == "message_start" else None
        if isinstance(message, dict):
            mid, model = message.get("id"), message.get("model")
            return (mid if isinstance(mid, str) else None, model if isinstance(model, str) else None)
        return None, None

    def delivery_key(self, obj: dict[str, Any]) -> Hashable | None:
        """A block stops once: the same ``content_block_stop`` again, byte for byte, is a duplicate
        delivery. Deltas may legitimately repeat, and a second start is a grammar error (R7)."""
        index = obj.get("index")
        if obj.get("type") == "content_block_stop" and type(index) is int:  # any other index is the handler's R7 error
            return ("content_block_stop", index)
        return None

    # -- message lifecycle ---------------------------------------------------------

    def _on_message_start(self, obj: dict[str, Any]) -> None:
        message = require(obj, "message", dict, where="message_start")
        if self.response_id is None:
            self.response_id = optional(message, "id", str, where="message_start.message")
        self.model = optional(message, "model", str, where="message_start.message") or self.model
        self._merge_usage(optional(message, "usage", dict, where="message_start.message"))

    def _on_message_delta(self, obj: dict[str, Any]) -> None:
        delta = require(obj, "delta", dict, where="message_delta")
        self.stop_reason = optional(delta, "stop_reason", str, where="message_delta.delta") or self.stop_reason
        self._merge_usage(optional(obj, "usage", dict, where="message_delta"))

    def _on_message_stop(self, obj: dict[str, Any]) -> None:
        pending = self._tool_call_ids if self.stop_reason == "tool_use" else None
        truncated = self.stop_reason in _TRUNCATING_STOPS
        self.finish_run(stop_reason=self.stop_reason, pending_tool_call_ids=pending, truncated=truncated)

    def _on_ping(self, obj: dict[str, Any]) -> None:
        """Keep-alive; carries nothing (the SDK drops it by SSE event name)."""

    def _on_error(self, obj: dict[str, Any]) -> None:
        error = require(obj, "error", dict, where="error")
        kind = optional(error, "type", str, where="error.error")
        message = optional(error, "message", str, where="error.error") or "provider error"
        self.provider_error(f"anthropic {kind or 'error'}: {message}", provider_code=kind)

    # -- content blocks ------------------------------------------------------------

    def _on_block_start(self, obj: dict[str, Any]) -> None:
        index = require_index(obj, "index", where="content_block_start")
        block = require(obj, "content_block", dict, where="content_block_start")
        kind = require(block, "type", str, where="content_block_start.content_block")
        if index in self._blocks:
            raise ProviderGrammarError(f"content_block_start: block {index} started twice")
        start = _BLOCK_STARTS.get(kind)
        if start is None:
            self._blocks[index] = _Block("skipped")
            self.counters["skipped_blocks"] += 1
            known = "unsupported" if kind in _SKIPPED_BLOCKS else "unknown"
            self._warn(f"{known}_block", f"{known} content block type {kind!r} at index {index} skipped")
            return
        start(self, index, block)

    def _start_thinking(self, index: int, block: dict[str, Any]) -> None:
        where = "content_block_start.content_block(thinking)"
        entry = self._open_reasoning(index, "thinking")
        self._thinking_delta(index, entry, optional(block, "thinking", str, where=where) or "")
        signature = optional(block, "signature", str, where=where)
        if signature:
            self._hold_signature(index, entry, signature)

    def _start_redacted(self, index: int, block: dict[str, Any]) -> None:
        data = require(block, "data", str, where="content_block_start.content_block(redacted_thinking)")
        entry = self._open_reasoning(index, "redacted_thinking", reasoning_kind="redacted")
        self.hold_artefact(
            index,
            HeldArtefact(
                kind="anthropic.redacted_thinking.data",
                subtype=ArtefactSubtype.MESSAGE,
                entity_id=entry.agui_id or "",
                value=data,
                native=self._native(index, {"type": "redacted_thinking"}, "data"),
            ),
            where=f"block {index}",
        )

    def _start_text(self, index: int, block: dict[str, Any]) -> None:
        agui_id = self.mint("text", index)
        self._blocks[index] = _Block("text", agui_id)
        self.run.start_text(index, agui_id)
        self.run.text_content(index, optional(block, "text", str, where="content_block_start.content_block(text)") or "")

    def _start_tool_use(self, index: int, block: dict[str, Any]) -> None:
        where = "content_block_start.content_block(tool_use)"
        tool_id = require(block, "id", str, where=where)
        name = require(block, "name", str, where=where)
        entry = _Block("tool_use", tool_id, initial_input=optional(block, "input", dict, where=where))
        self._blocks[index] = entry
        self.run.start_tool_call(index, tool_id, name, metadata=self.block_hint(index))

    def _on_block_delta(self, obj: dict[str, Any]) -> None:
        index = require_index(obj, "index", where="content_block_delta")
        delta = require(obj, "delta", dict, where="content_block_delta")
        kind = require(delta, "type", str, where="content_block_delta.delta")
        entry = self._block(index, "content_block_delta")
        if entry.kind == "skipped":
            return
        expected_block = _DELTA_BLOCK.get(kind)
        if expected_block is None:
            self.counters["unknown_deltas"] += 1
            self._warn("unknown_delta", f"unknown delta type {kind!r} on block {index} skipped")
            return
        if entry.kind not in expected_block:
            raise ProviderGrammarError(f"content_block_delta: {kind} on a {entry.kind} block ({index})")
        where = f"content_block_delta.delta({kind})"
        if kind == "thinking_delta":
            self._thinking_delta(index, entry, require(delta, "thinking", str, where=where))
        elif kind == "signature_delta":
            self._hold_signature(index, entry, require(delta, "signature", str, where=where))
        elif kind == "text_delta":
            self.run.text_content(index, require(delta, "text", str, where=where))
        elif kind == "input_json_delta":
            fragment = require(delta, "partial_json", str, where=where)
            entry.saw_args = entry.saw_args or bool(fragment)
            self.run.tool_call_args(index, fragment)
        else:  # citations_delta: citation metadata of a text block, not content
            self.counters["citations"] += 1

    def _on_block_stop(self, obj: dict[str, Any]) -> None:
        index = require_index(obj, "index", where="content_block_stop")
        entry = self._block(index, "content_block_stop")
        if entry.kind in ("thinking", "redacted_thinking"):
            self._stop_reasoning(index, entry)
        elif entry.kind == "text":
            self.run.end_text(index)
        elif entry.kind == "tool_use":
            if not entry.saw_args:  # no fragments streamed: the start's input is the whole input
                self.run.tool_call_args(index, orjson.dumps(entry.initial_input or {}).decode())
            self.run.end_tool_call(index)
            self._tool_call_ids.append(entry.agui_id or "")
        entry.kind = "closed" if entry.kind != "skipped" else entry.kind

    # -- reasoning helpers -----------------------------------------------------------

    def _open_reasoning(self, index: int, kind: str, *, reasoning_kind: str | None = None) -> _Block:
        entry = _Block(kind, self.mint("reasoning", index))
        self._blocks[index] = entry
        span = ("span", index)
        self.run.open_span(span, self.mint("span", index))
        provenance = reasoning_kind or self._thinking_provenance()
        self.run.start_reasoning(index, entry.agui_id or "", span=span, metadata={"reasoningKind": provenance})
        return entry

    def _thinking_provenance(self) -> str:
        """Claude 3.7 streams its raw reasoning; Claude 4+ streams a summary (REFERENCE §2.3)."""
        return "raw" if self.model and "claude-3-7" in self.model else "summary"

    def _thinking_delta(self, index: int, entry: _Block, text: str) -> None:
        if text:
            entry.thinking.append(text)
            self.run.reasoning_content(index, text)

    def _hold_signature(self, index: int, entry: _Block, signature: str) -> None:
        self.hold_artefact(
            index,
            HeldArtefact(
                kind="anthropic.thinking.signature",
                subtype=ArtefactSubtype.MESSAGE,
                entity_id=entry.agui_id or "",
                value=signature,
                native=self._native(index, {"type": "thinking"}, "signature"),
            ),
            where=f"block {index}",
        )

    def _stop_reasoning(self, index: int, entry: _Block) -> None:
        self.run.end_reasoning(index)
        if entry.kind == "thinking":
            if self.artefacts.held(index) is None:
                self.counters["unsigned_thinking"] += 1
                self._warn("unsigned_thinking", f"thinking block {index} ended without a signature: not replayable")
                self.artefacts.release(index)  # an empty signature's incomplete record, if one came
            else:
                block = {"type": "thinking", "thinking": "".join(entry.thinking)}
                self.artefacts.release(index, block=block)
        else:
            self.artefacts.release(index)
        entry.thinking = []
        self.run.close_span(("span", index))

    def _native(self, index: int, block: dict[str, Any], value_field: str) -> NativeBlock:
        return NativeBlock(response_id=self.response_id, position=index, block=block, value_path=[value_field])

    def _block(self, index: int, where: str) -> _Block:
        entry = self._blocks.get(index)
        if entry is None or entry.kind == "closed":
            raise ProviderGrammarError(f"{where}: block {index} is not open")
        return entry

    # -- usage (P6) ----------------------------------------------------------------

    def _merge_usage(self, usage: dict[str, Any] | None) -> None:
        """Cumulative: each report replaces the fields it carries; nothing is summed.

        ``MessageDeltaUsage`` types everything but ``output_tokens`` as optional: a null
        field is not restated, so ``message_start``'s value stays (never erased)."""
        if not usage:
            return
        self._usage_raw.update((k, v) for k, v in usage.items() if v is not None)
        raw = self._usage_raw
        details = raw.get("output_tokens_details")
        base_input = token_count(raw, "input_tokens", where="usage")
        cache_read = token_count(raw, "cache_read_input_tokens", where="usage")
        cache_write = token_count(raw, "cache_creation_input_tokens", where="usage")
        output = token_count(raw, "output_tokens", where="usage")
        total_input = None if base_input is None else base_input + (cache_read or 0) + (cache_write or 0)
        self.tokens = TokenCounts(
            input_tokens=total_input,
            output_tokens=output,
            reasoning_tokens=token_count(details, "thinking_tokens", where="usage.output_tokens_details"),
            cached_input_tokens=cache_read,
            cache_write_input_tokens=cache_write,
            total_tokens=None if total_input is None or output is None else total_input + output,
            provider_raw=dict(raw),
        )


# set after the class body (see Translator.HANDLERS)
AnthropicMessagesTranslator.HANDLERS = {
    "message_start": AnthropicMessagesTranslator._on_message_start,
    "content_block_start": AnthropicMessagesTranslator._on_block_start,
    "content_block_delta": AnthropicMessagesTranslator._on_block_delta,
    "content_block_stop": AnthropicMessagesTranslator._on_block_stop,
    "message_delta": AnthropicMessagesTranslator._on_message_delta,
    "message_stop": AnthropicMessagesTranslator._on_message_stop,
    "ping": AnthropicMessagesTranslator._on_ping,
    "error": AnthropicMessagesTranslator._on_error,
}


_BLOCK_STARTS = {
    "thinking": AnthropicMessagesTranslator._start_thinking,
    "redacted_thinking": AnthropicMessagesTranslator._start_redacted,
    "text": AnthropicMessagesTranslator._start_text,
    "tool_use": AnthropicMessagesTranslator._start_tool_use,
}

_DELTA_BLOCK = {
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
    "text_delta": ("text",),
    "citations_delta": ("text",),
    "input_json_delta": ("tool_use",),
}
