"""What the two Gemini grammars share: thought spans, usage accounting, provider errors.

Theory of operation
-------------------
``gemini-generate-content`` (``GenerateContentResponse`` chunks) and
``gemini-interactions`` (step events) are different wire grammars with their own
translators, but the same model family behind them makes the same promises:

* Readable reasoning is always a *thought summary*, never the raw chain of
  thought (P1): a Gemini reasoning message says ``reasoningKind: summary``, or
  ``none`` when the thought had no readable text.
* One thought (a run of ``thought: true`` parts; a ``thought`` step) is one
  reasoning span holding one reasoning message; its signatures are released
  inside that span, after the message ends, before the span closes.
* Usage accounting (P6): the output count *excludes* thought tokens
  (``candidatesTokenCount`` / ``total_output_tokens``), so normalized
  ``output_tokens`` = output + thoughts, as AG-UI ``TokenUsage`` counts reasoning
  as part of output; input includes cached tokens (reported apart, never added)
  and the tool-use prompt tokens (built-in tool results fed back to the model),
  so ``input + output`` equals the provider's own total. Gemini serialises
  usage as proto3 JSON, which *omits zero counts*: once a usage object is
  present, an absent count is 0, not "unknown".
* A provider error in the stream is ``{"error": {code, message[, status]}}`` in
  both grammars.

:class:`GeminiTranslator` is the base both translators derive from; each still
owns its ``HANDLERS`` table and its own unit bookkeeping.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from reasonwire.contracts.usage import TokenCounts
from reasonwire.workers.core.errors import optional, require, token_count
from reasonwire.workers.core.translator import Translator

THOUGHT_KIND = "summary"
"""Provenance of Gemini's readable reasoning (P1): thought summaries, never raw reasoning."""
OPAQUE_KIND = "none"
"""A thought with no readable text: only its signature, or nothing at all."""


@dataclass(frozen=True)
class UsageFields:
    """Where one Gemini grammar reports each count (names differ, accounting does not)."""

    input: str
    """Prompt tokens, cached ones included."""
    cached: str
    """The cached share of ``input``."""
    tool_use: str
    """Tokens of built-in tool results fed back to the model: charged as input."""
    output: str
    """Generated answer / call tokens, thoughts *excluded*."""
    thoughts: str
    """Thought (reasoning) tokens."""


class GeminiTranslator(Translator):
    """Behaviour both Gemini grammars share; subclasses supply ``HANDLERS`` and ``usage_fields``."""

    usage_fields: ClassVar[UsageFields]

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._unstarted_thoughts: dict[Hashable, str] = {}
        self._signed_thoughts: set[Hashable] = set()
        """Thoughts holding a signature whose message has not started (no text yet)."""

    # -- thoughts: one span, one reasoning message ----------------------------------

    def open_thought(self, key: Hashable, unit: object) -> str:
        """Open the span of one thought; returns its reasoning message id.

        The message itself starts with the thought's first text (``reasoningKind:
        summary``), or — when the thought ends with none — with no readable text
        (``reasoningKind: none``, as the other translators label opaque-only
        reasoning), because its provenance is only known then (P1). A signature that
        arrives before the text does not decide it: it is held and names the message
        when it is released, after the message ended.
        """
        self.run.open_span(("span", key), self.mint("span", unit))
        message_id = self.mint("reasoning", unit)
        self._unstarted_thoughts[key] = message_id
        return message_id

    def thought_text(self, key: Hashable, text: str) -> None:
        if text:
            self._start_thought_message(key, THOUGHT_KIND)
            self.run.reasoning_content(key, text)

    def thought_signed(self, key: Hashable) -> None:
        """A signature names the thought's message; the message starts with the text that
        follows (P1) or, if the run ends abnormally first, then (R6: it must exist)."""
        if key in self._unstarted_thoughts:
            self._signed_thoughts.add(key)

    def thought_message_id(self, key: Hashable) -> str:
        """The id of the thought's reasoning message, started or not yet."""
        return self._unstarted_thoughts.get(key) or self.run.agui_id(key)

    def before_abnormal_end(self) -> None:
        """A held signature's record names its message: start those that never got text (R6)."""
        for key in list(self._signed_thoughts):
            self._start_thought_message(key, OPAQUE_KIND)
        super().before_abnormal_end()

    def close_thought(self, key: Hashable, signatures: Iterable[Hashable], **native_updates: Any) -> None:
        """End the message, release its held signatures inside its span, close the span (R1, R3)."""
        self._start_thought_message(key, OPAQUE_KIND)
        self.run.end_reasoning(key)
        for signature in signatures:
            self.artefacts.release(signature, **native_updates)
        self.run.close_span(("span", key))

    def _start_thought_message(self, key: Hashable, kind: str) -> None:
        message_id = self._unstarted_thoughts.pop(key, None)
        self._signed_thoughts.discard(key)
        if message_id is not None:
            self.run.start_reasoning(key, message_id, span=("span", key), metadata={"reasoningKind": kind})

    # -- usage (P6) -----------------------------------------------------------------

    def take_usage(self, usage: dict[str, Any]) -> None:
        """Replace the run's counts with this report: Gemini reports running totals, never sum.

        Every chunk repeats the running totals; an unchanged report is not parsed again."""
        if usage == self.tokens.provider_raw:
            return
        fields = self.usage_fields
        names = (fields.input, fields.cached, fields.tool_use, fields.output, fields.thoughts)
        # proto3 JSON omits zero values, so an absent count is 0 here
        prompt, cached, tool_use, output, thoughts = (token_count(usage, n, where="usage", absent=0) or 0 for n in names)
        total_input = prompt + tool_use
        total_output = output + thoughts
        self.tokens = TokenCounts(
            input_tokens=total_input,
            output_tokens=total_output,
            reasoning_tokens=thoughts,
            cached_input_tokens=cached,
            total_tokens=total_input + total_output,
            provider_raw=dict(usage),
        )

    # -- provider error -------------------------------------------------------------

    def _on_error(self, obj: dict[str, Any]) -> None:
        """``{"error": {code, message[, status]}}``: ``RUN_ERROR`` after closing what is open."""
        error = require(obj, "error", dict, where="error")
        # generateContent names the canonical status ("UNAVAILABLE") beside the HTTP code;
        # Interactions has only ``code``.
        code = optional(error, "status", str, where="error.error") or optional(error, "code", (str, int), where="error.error")
        message = optional(error, "message", str, where="error.error") or "provider error"
        label = str(code) if code is not None else None
        self.provider_error(f"gemini {label or 'error'}: {message}", provider_code=label)


def arguments_json(args: dict[str, Any]) -> str:
    """A complete arguments object serialised once, keys in the order received (REFERENCE §6.4)."""
    return orjson.dumps(args).decode()
