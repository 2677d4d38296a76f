"""Gemini Interactions API streaming (``gemini-interactions``) → AG-UI.

Theory of operation
-------------------
A run is one interaction: ``interaction.created``, ``interaction.status_update``*,
then its steps — each ``step.start`` → ``step.delta``* → ``step.stop``, addressed
by ``index`` (the step's position in the interaction's ``steps``) — and finally
``interaction.completed`` (``status``, ``usage``) or ``error``. The discriminator
is ``event_type`` (also the SSE ``event:`` name).

Step → AG-UI mapping:

* ``thought`` — one reasoning span holding one reasoning message;
  ``thought_summary`` deltas (``content.text``) are its content. The
  ``thought_signature`` delta (documented as always present) is held and, when
  the step stops, released as ``REASONING_ENCRYPTED_VALUE`` subtype ``message``
  on that reasoning message: the signature rides the thought step, never the
  call (``FunctionCallStep`` has no signature field; REFERENCE §4.2).
* ``model_output`` — a text message of ``text`` deltas.
* ``function_call`` — ``TOOL_CALL_*`` with the step's own ``id``. Arguments are
  either complete in ``step.start`` (an object, serialised once when the step
  stops) or streamed as ``arguments_delta`` string fragments, concatenated as
  received; once a fragment came, the start's placeholder ``{}`` is not used.
* Built-in tool steps (``google_search_call`` …) are skipped as unsupported and
  unknown step types as unknown; both are warned and counted, and the index is
  remembered so the step's deltas and stop are ignored. Unknown delta types on a
  known step and unknown event types are skipped the same way: the Interactions
  union is open and its documentation tells clients to skip what they do not
  know (REFERENCE §4.3, §6.6).

Artefact record: ``native.block`` is the thought step as a stateless next turn
resends it, without the signature — ``{"type": "thought", "summary": [{"type":
"text", "text": …}]}`` (``summary`` omitted when none streamed) — with
``value_path`` ``["signature"]``, ``position`` the step index and
``response_id`` the interaction id.

End: ``interaction.completed``. Steps still open are closed first. Status
``completed`` finishes; ``requires_action`` finishes a tool-call turn with its
calls pending; ``incomplete``, ``cancelled`` and any other status finish with
the status kept as the stop reason; ``failed`` is ``RUN_ERROR`` with the status
as provider code — a consumer must not read a failed interaction as a success.
Usage comes from ``interaction.usage`` (accounting in ``_gemini_common``);
running ``total_usage`` on deltas is not used (REFERENCE §6.5).
``continuation_token`` is a resume token, not reasoning state: not an artefact,
never logged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reasonwire.contracts.artefacts import ArtefactSubtype, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.core.artefacts import HeldArtefact
from reasonwire.workers.core.errors import ProviderGrammarError, optional, require, require_index
from reasonwire.workers.translators._gemini_common import GeminiTranslator, UsageFields, arguments_json

SIGNATURE_KIND = "gemini.interactions.thought.signature"

_BUILTIN_TOOL_STEPS = frozenset(
    {
        "code_execution_call",
        "code_execution_result",
        "file_search_call",
        "file_search_result",
        "function_result",
        "google_maps_call",
        "google_maps_result",
        "google_search_call",
        "google_search_result",
        "mcp_server_tool_call",
        "mcp_server_tool_result",
        "processing_call",
        "processing_result",
        "retrieval_call",
        "retrieval_result",
        "tool_search_call",
        "tool_search_result",
        "url_context_call",
        "url_context_result",
        "user_input",
    }
)
"""Step types of the SDK union that reasonwire does not translate (no AG-UI unit for them)."""

_UNSUPPORTED_DELTAS = frozenset({"audio", "document", "image", "video"}) | _BUILTIN_TOOL_STEPS
"""Delta types of the SDK union that carry media or built-in tool traffic."""


@dataclass
class _Step:
    """One step by index. ``kind`` is the step type we translate, 'skipped' or 'closed'."""

    kind: str
    summary: list[str] = field(default_factory=list)
    """Thought steps: the summary text as streamed, for the replay block."""
    start_arguments: dict[str, Any] | None = None
    """Function calls: the arguments object of ``step.start``."""
    saw_arguments_delta: bool = False


class GeminiInteractionsTranslator(GeminiTranslator):
    """Translator for the Gemini Interactions API stream grammar."""

    grammar = Grammar.GEMINI_INTERACTIONS
    usage_fields = UsageFields(
        input="total_input_tokens",
        cached="total_cached_tokens",
        tool_use="total_tool_use_tokens",
        output="total_output_tokens",
        thoughts="total_thought_tokens",
    )

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._steps: dict[int, _Step] = {}
        self._tool_call_ids: list[str] = []

    def event_type(self, obj: dict[str, Any], sse_event: str | None) -> str | None:
        value = obj.get("event_type", sse_event)
        return value if isinstance(value, str) else None

    def stream_identity(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        interaction = obj.get("interaction")
        if isinstance(interaction, dict):
            iid, model = interaction.get("id"), interaction.get("model")
            return (iid if isinstance(iid, str) else None, model if isinstance(model, str) else None)
        iid = obj.get("interaction_id")
        return (iid if isinstance(iid, str) else None, None)

    # -- interaction lifecycle --------------------------------------------------------

    def _on_created(self, obj: dict[str, Any]) -> None:
        interaction = require(obj, "interaction", dict, where="interaction.created")
        self.model = optional(interaction, "model", str, where="interaction.created.interaction") or self.model

    def _on_status_update(self, obj: dict[str, Any]) -> None:
        """Progress only: the outcome comes with ``interaction.completed``, and the
        ``continuation_token`` here is a resume token, not reasoning state."""

    def _on_completed(self, obj: dict[str, Any]) -> None:
        interaction = require(obj, "interaction", dict, where="interaction.completed")
        status = require(interaction, "status", str, where="interaction.completed.interaction")
        usage = optional(interaction, "usage", dict, where="interaction.completed.interaction")
        if usage is not None:
            self.take_usage(usage)
        if status == "failed":
            self.provider_error("gemini interaction failed", provider_code=status)
            return
        for index in sorted(i for i, step in self._steps.items() if step.kind in _STEP_STARTS):
            self._close_step(index, self._steps[index])
        pending = self._tool_call_ids if status == "requires_action" else None
        self.finish_run(stop_reason=status, pending_tool_call_ids=pending or None)

    # -- steps ----------------------------------------------------------------------

    def _on_step_start(self, obj: dict[str, Any]) -> None:
        index = require_index(obj, "index", where="step.start")
        step = require(obj, "step", dict, where="step.start")
        kind = require(step, "type", str, where="step.start.step")
        if index in self._steps:
            raise ProviderGrammarError(f"step.start: step {index} started twice")
        start = _STEP_STARTS.get(kind)
        if start is None:
            self._steps[index] = _Step("skipped")
            label = "unsupported" if kind in _BUILTIN_TOOL_STEPS else "unknown"
            self.counters[f"{label}_steps"] += 1
            self._warn(f"{label}_step", f"{label} step type {kind!r} at index {index} skipped")
            return
        self._steps[index] = _Step(kind)
        start(self, index, step)

    def _start_thought(self, index: int, step: dict[str, Any]) -> None:
        where = "step.start.step(thought)"
        self.open_thought(index, index)
        for content in optional(step, "summary", list, where=where) or []:
            self._summary(index, content)
        signature = optional(step, "signature", str, where=where)
        if signature is not None:
            self._hold_signature(index, signature)

    def _start_model_output(self, index: int, step: dict[str, Any]) -> None:
        self.run.start_text(index, self.mint("text", index))
        for content in optional(step, "content", list, where="step.start.step(model_output)") or []:
            if isinstance(content, dict) and content.get("type") == "text":
                self.run.text_content(index, require(content, "text", str, where="step.start.step.content"))
            else:
                self._skip_content(index, content)

    def _start_function_call(self, index: int, step: dict[str, Any]) -> None:
        where = "step.start.step(function_call)"
        tool_call_id = require(step, "id", str, where=where)
        name = require(step, "name", str, where=where)
        self._steps[index].start_arguments = optional(step, "arguments", dict, where=where)
        self.run.start_tool_call(index, tool_call_id, name)

    def _on_step_delta(self, obj: dict[str, Any]) -> None:
        index = require_index(obj, "index", where="step.delta")
        delta = require(obj, "delta", dict, where="step.delta")
        kind = require(delta, "type", str, where="step.delta.delta")
        entry = self._step(index, "step.delta")
        if entry.kind == "skipped":
            return
        accepted = _DELTAS.get(kind)
        if accepted is None:
            label = "unsupported" if kind in _UNSUPPORTED_DELTAS else "unknown"
            self.counters[f"{label}_deltas"] += 1
            self._warn(f"{label}_delta", f"{label} delta type {kind!r} on step {index} skipped")
            return
        step_kind, apply = accepted
        if entry.kind != step_kind:
            raise ProviderGrammarError(f"step.delta: {kind} on a {entry.kind} step ({index})")
        apply(self, index, entry, delta)

    def _thought_summary(self, index: int, entry: _Step, delta: dict[str, Any]) -> None:
        self._summary(index, require(delta, "content", dict, where="step.delta.delta(thought_summary)"))

    def _thought_signature(self, index: int, entry: _Step, delta: dict[str, Any]) -> None:
        self._hold_signature(index, require(delta, "signature", str, where="step.delta.delta(thought_signature)"))

    def _text(self, index: int, entry: _Step, delta: dict[str, Any]) -> None:
        self.run.text_content(index, require(delta, "text", str, where="step.delta.delta(text)"))

    def _text_annotation(self, index: int, entry: _Step, delta: dict[str, Any]) -> None:
        """Citation metadata of the answer text, not content."""
        self.counters["text_annotations"] += 1

    def _arguments_delta(self, index: int, entry: _Step, delta: dict[str, Any]) -> None:
        fragment = require(delta, "arguments", str, where="step.delta.delta(arguments_delta)")
        entry.saw_arguments_delta = entry.saw_arguments_delta or bool(fragment)
        self.run.tool_call_args(index, fragment)

    def _on_step_stop(self, obj: dict[str, Any]) -> None:
        index = require_index(obj, "index", where="step.stop")
        entry = self._step(index, "step.stop")
        if entry.kind != "skipped":
            self._close_step(index, entry)

    def _close_step(self, index: int, entry: _Step) -> None:
        if entry.kind == "thought":
            self._close_thought_step(index, entry)
        elif entry.kind == "model_output":
            self.run.end_text(index)
        else:
            if not entry.saw_arguments_delta:  # complete in step.start: the object is the arguments
                self.run.tool_call_args(index, arguments_json(entry.start_arguments or {}))
            self._tool_call_ids.append(self.run.agui_id(index))
            self.run.end_tool_call(index)
        entry.kind = "closed"

    # -- thought helpers ------------------------------------------------------------

    def _summary(self, index: int, content: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "text":
            self._skip_content(index, content)
            return
        text = require(content, "text", str, where="thought summary content")
        self._steps[index].summary.append(text)
        self.thought_text(index, text)

    def _hold_signature(self, index: int, signature: str) -> None:
        native = NativeBlock(
            response_id=self.response_id, position=index, block={"type": "thought"}, value_path=["signature"]
        )
        held = HeldArtefact(
            kind=SIGNATURE_KIND,
            subtype=ArtefactSubtype.MESSAGE,
            entity_id=self.thought_message_id(index),
            value=signature,
            native=native,
        )
        if self.hold_artefact(index, held, where=f"thought step {index}"):
            self.thought_signed(index)

    def _close_thought_step(self, index: int, entry: _Step) -> None:
        block: dict[str, Any] = {"type": "thought"}
        if entry.summary:
            block["summary"] = [{"type": "text", "text": "".join(entry.summary)}]
        if self.artefacts.held(index) is None:
            self.counters["unsigned_thoughts"] += 1
            self._warn("unsigned_thought", f"thought step {index} ended without a signature: not replayable")
        self.close_thought(index, [index], block=block)  # an empty signature leaves an incomplete record

    def _skip_content(self, index: int, content: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        self.counters["unsupported_content"] += 1
        self._warn("unsupported_content", f"content of type {kind!r} in step {index} skipped")

    def _step(self, index: int, where: str) -> _Step:
        entry = self._steps.get(index)
        if entry is None or entry.kind == "closed":
            raise ProviderGrammarError(f"{where}: step {index} is not open")
        return entry


# set after the class body (see Translator.HANDLERS)
GeminiInteractionsTranslator.HANDLERS = {
    "interaction.created": GeminiInteractionsTranslator._on_created,
    "interaction.status_update": GeminiInteractionsTranslator._on_status_update,
    "step.start": GeminiInteractionsTranslator._on_step_start,
    "step.delta": GeminiInteractionsTranslator._on_step_delta,
    "step.stop": GeminiInteractionsTranslator._on_step_stop,
    "interaction.completed": GeminiInteractionsTranslator._on_completed,
    "error": GeminiTranslator._on_error,
}


_STEP_STARTS: dict[str, Callable[[GeminiInteractionsTranslator, int, dict[str, Any]], None]] = {
    "thought": GeminiInteractionsTranslator._start_thought,
    "model_output": GeminiInteractionsTranslator._start_model_output,
    "function_call": GeminiInteractionsTranslator._start_function_call,
}

_DELTAS: dict[str, tuple[str, Callable[[GeminiInteractionsTranslator, int, _Step, dict[str, Any]], None]]] = {
    "thought_summary": ("thought", GeminiInteractionsTranslator._thought_summary),
    "thought_signature": ("thought", GeminiInteractionsTranslator._thought_signature),
    "text": ("model_output", GeminiInteractionsTranslator._text),
    "text_annotation_delta": ("model_output", GeminiInteractionsTranslator._text_annotation),
    "arguments_delta": ("function_call", GeminiInteractionsTranslator._arguments_delta),
}
"""Delta type → (the step type it extends, handler)."""
