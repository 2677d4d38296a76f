"""OpenAI Chat Completions streaming (``openai-chat-completions``) → AG-UI.

Theory of operation
-------------------
A run is one streamed assistant turn of one choice: ``chat.completion.chunk`` objects
(SSE ``data:`` lines, ``data: [DONE]`` a transport sentinel the framing drops), each with
``choices[].delta`` fragments, then a chunk whose choice carries ``finish_reason``, and —
with ``stream_options.include_usage`` — a last chunk of ``usage`` with ``choices: []``.
Ollama's ``/api/chat`` streams the same turn as NDJSON lines (``message``, ``done``); each
line is one event too (read by the same JSONL / SSE framing everywhere). Chunks carry no
event type: the dispatch key is ``object`` (``chat.completion.chunk``, ``error``), or the
shape — ``choices`` is a chunk, ``done`` an Ollama line, ``error`` an error.

Many providers speak it, with their own fields for reasoning (first match wins):

* ``delta.reasoning_content`` — DeepSeek, SGLang, Qwen, GLM, Kimi, DeepInfra;
* ``delta.reasoning`` — vLLM (its rename of ``reasoning_content``), Together, OpenRouter;
* ``delta.content`` as an array — Mistral: ``{type: "thinking", thinking: [{type: "text",
  text}]}`` chunks are reasoning, ``{type: "text", text}`` chunks are answer text;
* ``message.thinking`` — Ollama, beside ``message.content``;
* ``delta.reasoning_details[]`` — OpenRouter: items ``reasoning.text`` (``text``,
  ``signature``), ``reasoning.summary`` (``summary``), ``reasoning.encrypted`` (``data``), each
  with ``id``, ``index``, ``format``, streamed as fragments merged by ``index`` (text
  appended, ``signature`` / ``data`` assigned whole). Their text is shown only when the same
  delta carries no ``reasoning`` string (OpenRouter sends both: the text is shown once).

Unit → AG-UI mapping: consecutive reasoning fragments are one reasoning span holding one
reasoning message (``reasoningKind`` ``raw``; ``summary`` for OpenRouter summary items);
consecutive ``content`` fragments one text message; ``refusal`` a text message with
``contentKind: "refusal"``; a switch from one to the other closes the first. Each
``tool_calls[]`` index is one tool call (the provider's ``id``, else a minted one; ``name``
on its first fragment; ``function.arguments`` fragments are the arguments), open until
the turn ends, so parallel calls may interleave.

The turn ends at ``finish_reason`` (Ollama: ``done: true`` with ``done_reason``): open
units close, the turn's replay state is emitted (below), and the run finishes — at once
when the chunk carried ``usage``, else on the usage chunk that follows or at the end of
input. ``length`` and ``content_filter`` cut the output: what is still open closes with the
``incomplete`` marker (``RUN_FINISHED``; a tool call with cut-off arguments makes it
``RUN_ERROR`` ``incomplete_tool_call``, as in every grammar). Calls made on a turn that
finishes are its pending tool calls. A stream that ends without ``finish_reason`` is
interrupted; an ``error`` object ends the run with ``RUN_ERROR`` ``provider_error``.

Replay state (R3, R8, P5) — the exact kinds, blocks and issuers are listed in
docs/mapping/openai-chat-completions.md:

* the whole reasoning text of the turn, byte for byte, when the run's provider wants it back
  (``reasonwire.contracts.issuers.READABLE_REASONING_REQUIRED``: DeepSeek, GLM, Kimi): one
  record ``<provider>.reasoning_content`` on the turn's first reasoning message, block
  ``{"role": "assistant"}``, value path ``["reasoning_content"]``; stored like an opaque value,
  never announced as ``REASONING_ENCRYPTED_VALUE`` (it is not encrypted, and its text already
  went out as reasoning events to the audiences allowed to read it);
* one record per OpenRouter ``reasoning_details`` item, in ``index`` order, issuer
  ``openrouter:<format>``: ``signature`` / ``data`` are announced as encrypted values; an
  unsigned text or a summary is kept as readable replay state (OpenRouter wants the whole
  array back).

A stream cut before ``finish_reason`` keeps them as incomplete records (never replayed).

The provider of the run is the producer's ``rw-issuer-provider``, else the documented
fallback (``issuers.provider_from_stream``). Usage (P6): ``prompt_tokens`` includes cached
input and ``completion_tokens`` includes reasoning (shares, never added): normalized input
= ``prompt_tokens``, output = ``completion_tokens``, reasoning =
``completion_tokens_details.reasoning_tokens``, cached = ``prompt_tokens_details
.cached_tokens`` (DeepSeek: ``prompt_cache_hit_tokens``); the latest report wins. Ollama:
``prompt_eval_count`` / ``eval_count``. Delta fields this module does not know are warned
once per name (``unknown_field``), counted and skipped; content parts and detail items of
unknown types likewise (``unknown_part``, ``unknown_detail``); an object of no known shape
is an unknown event (P3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from reasonwire.contracts.artefacts import ArtefactSubtype, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.issuers import (
    READABLE_REASONING_REQUIRED,
    family,
    keeps_readable_reasoning,
    openrouter_provider,
    provider_from_model,
    provider_from_stream,
)
from reasonwire.contracts.usage import TokenCounts
from reasonwire.workers.core.artefacts import HeldArtefact
from reasonwire.workers.core.errors import ProviderGrammarError, optional, optional_index, require, token_count
from reasonwire.workers.core.surrogates import whole
from reasonwire.workers.core.translator import Translator

CHUNK = "chat.completion.chunk"
OLLAMA_LINE = "ollama.chat"
"""The dispatch name of an Ollama ``/api/chat`` line (it has no type field of its own)."""
ERROR = "error"

_TRUNCATING = frozenset({"length", "content_filter"})
"""Finish reasons that cut the output: what is still open was cut (marked incomplete)."""

_DELTA_FIELDS = frozenset(
    {"role", "content", "reasoning_content", "reasoning", "reasoning_details", "tool_calls", "refusal", "function_call", "name"}
)
"""Delta fields this module reads or knows to carry nothing (``function_call`` is the legacy
form, null beside ``tool_calls``); any other non-null field is warned once and skipped."""

_DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}
_DETAIL_VALUE = {"reasoning.text": "signature", "reasoning.encrypted": "data"}
_DETAIL_STREAMED = frozenset({"text", "summary", "signature", "data"})

_NONE, _REASONING, _TEXT, _REFUSAL = 0, 1, 2, 3
"""The stream unit open at a time (reasoning, answer text or refusal)."""


@dataclass
class _Detail:
    """One OpenRouter ``reasoning_details`` item, merged from its fragments."""

    kind: str
    index: int
    fields: dict[str, Any]
    """Every field but the streamed ones, first value seen (``id``, ``format``, ``index``, …)."""
    text: list[str] = field(default_factory=list)
    value: str | None = None
    """``signature`` (text) or ``data`` (encrypted), assigned whole."""


class OpenAIChatCompletionsTranslator(Translator):
    """Translator for the OpenAI Chat Completions stream grammar (and Ollama's NDJSON)."""

    grammar = Grammar.OPENAI_CHAT_COMPLETIONS

    def _init_grammar_state(self) -> None:
        super()._init_grammar_state()
        self._open = _NONE
        self._open_key: tuple[str, int] = ("", 0)
        self._units = 0
        """Stream units opened so far: each one's index in its minted ids."""
        self._carrier: str | None = None
        """The turn's first reasoning message: the entity of its replay state."""
        self._reasoning: list[str] | None = None
        """The turn's whole reasoning text, kept only when its provider may want it back."""
        self._reasoning_field: str | None = None
        self._calls: dict[int, str] = {}
        """Tool-call index → toolCallId, in the order the calls started."""
        self._details: dict[int, _Detail] = {}
        self._turn_done = False
        self._kept = False
        """The turn's replay state was emitted (complete) or held (for an abnormal end)."""
        self._openrouter = False
        self._seen_chunk = False
        self._ollama = False
        self._warned: set[str] = set()

    # -- identity and dispatch --------------------------------------------------------

    def event_type(self, obj: dict[str, Any], sse_event: str | None) -> str | None:
        kind = obj.get("object")
        if kind is not None:
            return kind if isinstance(kind, str) else None
        if "choices" in obj:
            return CHUNK  # servers that leave ``object`` out (the SDK does not require it)
        if "done" in obj and "model" in obj:
            return OLLAMA_LINE
        if "error" in obj:
            return ERROR
        return None

    def stream_identity(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        rid, model = obj.get("id"), obj.get("model")
        if "done" in obj and "choices" not in obj:
            rid = None  # Ollama names no completion: the run id stands for it
        return (rid if isinstance(rid, str) and rid else None, model if isinstance(model, str) and model else None)

    def usage_provider(self) -> str:
        return family(self.provider()) or self.grammar.provider_name

    def provider(self) -> str | None:
        """The run's provider: the producer's word, else the documented fallback (``issuers``)."""
        if self.issuer_provider:
            return self.issuer_provider
        return provider_from_stream(
            model=self.model, reasoning_field=self._reasoning_field, openrouter=self._openrouter, ollama=self._ollama
        )

    # -- chunks -------------------------------------------------------------------------

    def _on_chunk(self, obj: dict[str, Any]) -> None:
        """The hot path (one call per chunk): plain lookups first, the checks that name a field
        (R7) only off the common shape."""
        if not self._seen_chunk:  # the first chunk says whether OpenRouter sent it
            self._seen_chunk = True
            rid = obj.get("id")
            self._openrouter = (isinstance(rid, str) and rid.startswith("gen-")) or "provider" in obj
        choices = obj.get("choices")
        if type(choices) is not list:
            choices = optional(obj, "choices", list, where=CHUNK)
        if choices:
            for choice in choices:
                if type(choice) is not dict:
                    raise ProviderGrammarError(f"{CHUNK}: a choice is not an object")
                index = choice.get("index")
                if index is not None and index != 0 and optional_index(choice, "index", where=f"{CHUNK}.choices[]") != 0:
                    self._warn_once("unsupported_choice", "choices other than index 0 (n > 1) are not translated; skipped")
                    continue
                self._on_choice(choice)
        usage = obj.get("usage")
        if usage is not None:
            if type(usage) is not dict:
                raise ProviderGrammarError(f"{CHUNK}: field 'usage' is not an object")
            if usage:
                self._take_usage(usage)
                self.complete_deferred_finish()  # the usage trailer after finish_reason, or usage on it

    def _on_choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if delta is not None and type(delta) is not dict:
            raise ProviderGrammarError(f"{CHUNK}.choices[0]: field 'delta' is not an object")
        if delta:
            if self._turn_done:
                if any(v not in (None, "", []) for k, v in delta.items() if k != "role"):
                    raise ProviderGrammarError(f"{CHUNK}: delta after finish_reason")
            else:
                self._on_delta(delta)
        finish = choice.get("finish_reason")
        if finish is not None and type(finish) is not str:
            raise ProviderGrammarError(f"{CHUNK}.choices[0]: field 'finish_reason' is not a string")
        if finish and not self._turn_done:
            self._end_turn(finish)

    def _on_delta(self, delta: dict[str, Any]) -> None:
        where = f"{CHUNK}.choices[0].delta"
        if not _DELTA_FIELDS.issuperset(delta):
            self._unknown_fields(delta)
        text = delta.get("reasoning_content")
        name = "reasoning_content"
        if text is None:
            text, name = delta.get("reasoning"), "reasoning"
        if text is not None and type(text) is not str:
            raise ProviderGrammarError(f"{where}: field {name!r} is not a string")
        details = delta.get("reasoning_details")
        if details is not None:
            self._on_details(details, show=not text)
        if text:
            self._reasoning_delta(text, name)
        content = delta.get("content")
        if type(content) is str:
            if content:
                self._answer_delta(_TEXT, content)
        elif type(content) is list:
            self._on_parts(content)
        elif content is not None:
            raise ProviderGrammarError(f"{where}: field 'content' is neither a string nor an array")
        refusal = delta.get("refusal")
        if refusal is not None:
            if type(refusal) is not str:
                raise ProviderGrammarError(f"{where}: field 'refusal' is not a string")
            if refusal:
                self._answer_delta(_REFUSAL, refusal)
        calls = delta.get("tool_calls")
        if calls is not None:
            self._on_tool_calls(require(delta, "tool_calls", list, where=where), where)

    def _on_parts(self, parts: list[Any]) -> None:
        """Mistral: content chunks in order — ``thinking`` (reasoning) and ``text`` (answer)."""
        where = f"{CHUNK}.choices[0].delta.content[]"
        for part in parts:
            kind = require(part, "type", str, where=where)
            if kind == "text":
                text = require(part, "text", str, where=f"{where}(text)")
                if text:
                    self._answer_delta(_TEXT, text)
            elif kind == "thinking":
                for piece in require(part, "thinking", list, where=f"{where}(thinking)"):
                    if optional(piece, "type", str, where=f"{where}(thinking).thinking[]") not in (None, "text"):
                        self._warn_once("unknown_part", "unknown thinking chunk type skipped", key=f"thinking:{piece.get('type')}")
                        continue
                    text = require(piece, "text", str, where=f"{where}(thinking).thinking[]")
                    if text:
                        self._reasoning_delta(text, "thinking")
            else:
                self.counters["skipped_parts"] += 1
                self._warn_once("unknown_part", f"unknown content chunk type {kind[:40]!r} skipped", key=f"part:{kind}")

    # -- Ollama -------------------------------------------------------------------------

    def _on_ollama(self, obj: dict[str, Any]) -> None:
        where = "ollama /api/chat line"
        self._ollama = True
        message = optional(obj, "message", dict, where=where)
        if self._turn_done:
            if message and (message.get("content") or message.get("thinking") or message.get("tool_calls")):
                raise ProviderGrammarError(f"{where}: content after done")
            return
        if message:
            thinking = optional(message, "thinking", str, where=f"{where}.message")
            if thinking:
                self._reasoning_delta(thinking, "thinking")
            content = optional(message, "content", str, where=f"{where}.message")
            if content:
                self._answer_delta(_TEXT, content)
            calls = optional(message, "tool_calls", list, where=f"{where}.message")
            if calls:
                self._on_tool_calls(calls, f"{where}.message", whole_calls=True)
        if obj.get("done") is True:
            self._take_ollama_usage(obj)
            self._end_turn(optional(obj, "done_reason", str, where=where) or "stop")
            self.complete_deferred_finish()  # no trailer follows an Ollama done line

    # -- errors ---------------------------------------------------------------------------

    def _on_error(self, obj: dict[str, Any]) -> None:
        """``{"error": {message, type, code}}`` (OpenAI-compatible servers mid-stream), ``{"object":
        "error", message, type, code}`` (vLLM) or ``{"error": "<message>"}`` (Ollama)."""
        error = obj.get("error")
        source = error if isinstance(error, dict) else obj
        message = error if isinstance(error, str) else source.get("message")
        code = source.get("code")
        if code is None:
            code = source.get("type")
        code_text = str(code) if isinstance(code, (str, int)) and not isinstance(code, bool) else None
        text = message if isinstance(message, str) and message else "provider error"
        self.provider_error(f"{family(self.provider()) or 'provider'} {code_text or 'error'}: {text}", provider_code=code_text)

    # -- stream units -------------------------------------------------------------------

    def _reasoning_delta(self, text: str, source: str, kind: str = "raw") -> None:
        if self._open != _REASONING:
            self._close_stream()
            n = self._units
            self._units += 1
            key = ("reasoning", n)
            self.run.open_span(("span", n), self.mint("span", n))
            message_id = self.mint("reasoning", n)
            self.run.start_reasoning(key, message_id, span=("span", n), metadata={"reasoningKind": kind})
            self._open, self._open_key = _REASONING, key
            if self._carrier is None:
                self._carrier = message_id
                self._reasoning_field = source
                if self._may_keep_reasoning():
                    self._reasoning = []
        self.run.reasoning_content(self._open_key, text)
        if self._reasoning is not None:
            self._reasoning.append(text)

    def _answer_delta(self, kind: int, text: str) -> None:
        if self._open != kind:
            self._close_stream()
            n = self._units
            self._units += 1
            key = ("text", n)
            meta = {"contentKind": "refusal"} if kind == _REFUSAL else None
            self.run.start_text(key, self.mint("text", n), metadata=meta)
            self._open, self._open_key = kind, key
        self.run.text_content(self._open_key, text)

    def _close_stream(self) -> None:
        if self._open == _REASONING:
            n = self._open_key[1]
            self.run.end_reasoning(self._open_key)
            self.run.close_span(("span", n))
        elif self._open != _NONE:
            self.run.end_text(self._open_key)
        self._open = _NONE

    def _may_keep_reasoning(self) -> bool:
        """Whether the reasoning text may be replay state, known once the first delta names its
        field: only the turn's text of such a provider is kept in memory."""
        if self.issuer_provider:
            return keeps_readable_reasoning(self.issuer_provider)
        return provider_from_model(self.model) in READABLE_REASONING_REQUIRED

    # -- tool calls ---------------------------------------------------------------------

    def _on_tool_calls(self, calls: list[Any], where: str, *, whole_calls: bool = False) -> None:
        """Fragments by ``index`` (Chat Completions), or whole calls (Ollama: ``whole_calls``,
        arguments an object, numbered in arrival order)."""
        for position, fragment in enumerate(calls):
            if type(fragment) is not dict:
                raise ProviderGrammarError(f"{where}.tool_calls: a call is not an object")
            function = optional(fragment, "function", dict, where=f"{where}.tool_calls[]") or {}
            if whole_calls:
                index = len(self._calls)
            else:
                given = optional_index(fragment, "index", where=f"{where}.tool_calls[]")
                index = given if given is not None else position
            key = ("call", index)
            if index not in self._calls:
                self._close_stream()
                call_id = optional(fragment, "id", str, where=f"{where}.tool_calls[]") or self.mint("call", index)
                name = require(function, "name", str, where=f"{where}.tool_calls[].function")
                self.run.start_tool_call(key, call_id, name, metadata=self.block_hint(index))
                self._calls[index] = call_id
            arguments = function.get("arguments")
            if type(arguments) is str:
                if arguments:
                    self.run.tool_call_args(key, arguments)
            elif type(arguments) is dict:  # Ollama (and some compatible servers): already parsed
                self.run.tool_call_args(key, orjson.dumps(arguments).decode())
            elif arguments is not None:
                raise ProviderGrammarError(f"{where}.tool_calls[].function: field 'arguments' is not a string")

    # -- OpenRouter reasoning_details -----------------------------------------------------

    def _on_details(self, details: Any, *, show: bool) -> None:
        where = f"{CHUNK}.choices[0].delta.reasoning_details[]"
        if type(details) is not list:
            raise ProviderGrammarError(f"{where[:-2]}: not an array")
        for fragment in details:
            kind = require(fragment, "type", str, where=where)
            if kind not in _DETAIL_TEXT and kind not in _DETAIL_VALUE:
                self.counters["skipped_details"] += 1
                self._warn_once("unknown_detail", f"unknown reasoning_details type {kind[:40]!r} skipped", key=f"detail:{kind}")
                continue
            item = self._detail(fragment, kind, where)
            text_field = _DETAIL_TEXT.get(kind)
            if text_field is not None:
                text = optional(fragment, text_field, str, where=where)
                if text:
                    item.text.append(text)
                    if show:
                        self._reasoning_delta(text, "reasoning_details", "summary" if kind == "reasoning.summary" else "raw")
            value_field = _DETAIL_VALUE.get(kind)
            if value_field is not None:
                value = optional(fragment, value_field, str, where=where)
                if value is not None:
                    item.value = value  # assigned whole, never appended (as Anthropic signatures)

    def _detail(self, fragment: dict[str, Any], kind: str, where: str) -> _Detail:
        index = optional_index(fragment, "index", where=where)
        if index is None:  # no index: the item with the same id, else the last one of its type, else a new one
            item_id = fragment.get("id")
            last = self._details.get(len(self._details) - 1)
            known = [d for d in self._details.values() if item_id is not None and d.fields.get("id") == item_id]
            if known:
                index = known[0].index
            elif last is not None and last.kind == kind and item_id is None and last.fields.get("id") is None:
                index = last.index
            else:
                index = len(self._details)
        item = self._details.get(index)
        if item is None:
            item = _Detail(kind, index, {})
            self._details[index] = item
        elif item.kind != kind:
            raise ProviderGrammarError(f"{where}: item {index} changed type from {item.kind} to {kind}")
        for name, value in fragment.items():
            if name in _DETAIL_STREAMED:
                if value is None and name in _DETAIL_VALUE.values():
                    item.fields.setdefault(name, None)  # an explicit null stays in the block (unsigned)
            elif item.fields.get(name) is None:
                item.fields[name] = value  # the first value given (fragments repeat id, format, index)
        return item

    # -- end of the turn --------------------------------------------------------------

    def _end_turn(self, finish_reason: str) -> None:
        self._turn_done = True
        truncated = finish_reason in _TRUNCATING
        if not truncated:  # a cut turn leaves its open units to the finish, which marks them incomplete
            self._close_stream()
            for index in sorted(self._calls):
                self.run.end_tool_call(("call", index))
        self._keep_turn(complete=True, finish_reason=finish_reason)
        pending = None if truncated else (list(self._calls.values()) or None)
        self.defer_finish(stop_reason=finish_reason, pending_tool_call_ids=pending, truncated=truncated)

    def before_abnormal_end(self) -> None:
        if not self._turn_done:
            self._keep_turn(complete=False, finish_reason=None)

    def _keep_turn(self, *, complete: bool, finish_reason: str | None) -> None:
        """Emit the turn's replay state (complete), or hold it for the ledger to keep incomplete."""
        if self._kept:
            return
        self._kept = True
        provider = self.provider()
        if self._reasoning and keeps_readable_reasoning(provider):
            text = "".join(self._reasoning)
            if self.run.join_surrogates:  # deltas cut a character between its halves: joined
                text = whole(text)
            extra = {"reasoning_field": self._reasoning_field, "finish_reason": finish_reason, "tool_call_ids": list(self._calls.values())}
            native = NativeBlock(response_id=self.response_id, position=0, block={"role": "assistant"}, value_path=["reasoning_content"], extra=extra)
            held = HeldArtefact(
                kind=f"{family(provider)}.reasoning_content",
                subtype=ArtefactSubtype.MESSAGE,
                entity_id=self._carrier or "",
                value=text,
                native=native,
                announce=False,
                provider=provider,
            )
            self._put(("reasoning_content",), held, complete)
        if self._details:
            self._keep_details(complete)

    def _keep_details(self, complete: bool) -> None:
        # an incomplete record is never announced: it needs no message opened at an abnormal end
        carrier = self._carrier or (self._open_carrier() if complete else self.mint("reasoning", "opaque"))
        for index in sorted(self._details):
            item = self._details[index]
            block = dict(item.fields)
            block["type"] = item.kind
            text = "".join(item.text)
            if self.run.join_surrogates:
                text = whole(text)
            text_field = _DETAIL_TEXT.get(item.kind)
            if item.value:  # signature / data: opaque, announced
                value, path, announce = item.value, _DETAIL_VALUE[item.kind], True
                if text_field is not None:
                    block[text_field] = text
            elif text_field is not None and text:  # unsigned text, summary: readable replay state
                value, path, announce = text, text_field, False
            else:
                value, path, announce = "", _DETAIL_VALUE.get(item.kind, text_field or "text"), True
                self.empty_signature(f"reasoning_details {item.kind}", f"item {index}", "no value, never replayed")
            block.pop(path, None)
            item_id = block.get("id")
            held = HeldArtefact(
                kind=f"openrouter.{item.kind}",
                subtype=ArtefactSubtype.MESSAGE,
                entity_id=carrier,
                value=value,
                native=NativeBlock(
                    response_id=self.response_id,
                    position=index,
                    item_id=item_id if isinstance(item_id, str) else None,
                    block=block,
                    value_path=[path],
                ),
                announce=announce,
                provider=openrouter_provider(block.get("format") if isinstance(block.get("format"), str) else None),
            )
            self._put(("detail", index), held, complete)

    def _put(self, key: tuple[str, ...] | tuple[str, int], held: HeldArtefact, complete: bool) -> None:
        if complete:
            self.artefacts.emit(held)
        else:
            self.artefacts.hold(key, held)

    def _open_carrier(self) -> str:
        """Encrypted-only reasoning still gets a message to carry its values (as OpenAI's)."""
        n = self._units
        self._units += 1
        message_id = self.mint("reasoning", n)
        self.run.open_span(("span", n), self.mint("span", n))
        self.run.start_reasoning(("reasoning", n), message_id, span=("span", n), metadata={"reasoningKind": "none"})
        self.run.end_reasoning(("reasoning", n))
        self.run.close_span(("span", n))
        self._carrier = message_id
        return message_id

    # -- usage (P6) ----------------------------------------------------------------------

    def _take_usage(self, usage: dict[str, Any]) -> None:
        """The latest report wins (vLLM may report on every chunk); details are shares."""
        where = f"{CHUNK}.usage"
        out_details = usage.get("completion_tokens_details")
        in_details = usage.get("prompt_tokens_details")
        prompt = token_count(usage, "prompt_tokens", where=where)
        completion = token_count(usage, "completion_tokens", where=where)
        reasoning = token_count(out_details, "reasoning_tokens", where=f"{where}.completion_tokens_details")
        if reasoning is None:  # SGLang's early top-level field
            reasoning = token_count(usage, "reasoning_tokens", where=where)
        cached = token_count(in_details, "cached_tokens", where=f"{where}.prompt_tokens_details")
        if cached is None:  # DeepSeek's own cache fields
            cached = token_count(usage, "prompt_cache_hit_tokens", where=where)
        total = prompt + completion if prompt is not None and completion is not None else token_count(usage, "total_tokens", where=where)
        self.tokens = TokenCounts(
            input_tokens=prompt,
            output_tokens=completion,
            reasoning_tokens=reasoning,
            cached_input_tokens=cached,
            total_tokens=total,
            provider_raw=dict(usage),
        )

    def _take_ollama_usage(self, obj: dict[str, Any]) -> None:
        where = "ollama /api/chat line"
        prompt = token_count(obj, "prompt_eval_count", where=where)
        completion = token_count(obj, "eval_count", where=where)
        if prompt is None and completion is None:
            return
        total = prompt + completion if prompt is not None and completion is not None else None
        raw: dict[str, Any] = {k: obj[k] for k in ("prompt_eval_count", "eval_count") if k in obj}
        self.tokens = TokenCounts(input_tokens=prompt, output_tokens=completion, total_tokens=total, provider_raw=raw)

    # -- unknowns ------------------------------------------------------------------------

    def _unknown_fields(self, delta: dict[str, Any]) -> None:
        for name, value in delta.items():
            if name not in _DELTA_FIELDS and value is not None:
                self.counters["unknown_fields"] += 1
                self._warn_once("unknown_field", f"unknown delta field {name[:40]!r} skipped", key=f"field:{name}")

    def _warn_once(self, code: str, message: str, *, key: str | None = None) -> None:
        key = key or code
        if key not in self._warned:
            self._warned.add(key)
            self._warn(code, message)


# set after the class body (see Translator.HANDLERS)
OpenAIChatCompletionsTranslator.HANDLERS = {
    CHUNK: OpenAIChatCompletionsTranslator._on_chunk,
    OLLAMA_LINE: OpenAIChatCompletionsTranslator._on_ollama,
    ERROR: OpenAIChatCompletionsTranslator._on_error,
}
