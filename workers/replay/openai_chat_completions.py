"""OpenAI Chat Completions, as many providers speak it: the next request's ``messages``.

Theory of operation
-------------------
One grammar, many providers (DeepSeek, GLM, Qwen, Kimi, vLLM, SGLang, OpenRouter,
Mistral, Ollama …): the target's ``provider`` (``ReplayTarget.provider``, the same
names as ``Issuer.provider``) decides what reasoning state goes back, from one table
(:data:`PROVIDER_RULES`, each row citing its source):

* **readable** — DeepSeek, GLM, Kimi: the assistant message carries its turn's
  reasoning text verbatim in ``reasoning_content`` (the record's ``value_path``), byte
  for byte from the store. DeepSeek answers 400 "Missing reasoning_content" when an
  assistant message of a tool-call turn lacks it; GLM's preserved thinking wants the
  complete, unmodified sequence. The text is bound to the provider, not to one model
  of it (:meth:`ChatCompletionsReplay.model_bound`): it is plain text any of the
  provider's models reads.
* **details** — OpenRouter: the turn's ``reasoning_details`` items go back whole, in
  ``index`` order, on the assistant message. Each item's ``format`` names the model
  family that issued it (``Issuer.provider`` ``openrouter:<format>``), so when the next
  turn targets another model behind OpenRouter only items of the target's format go
  back; the others are left out with a warning like any foreign state (core, R8).
* **none** — vLLM, SGLang, Qwen3, Ollama, Mistral, OpenAI itself: nothing is sent; the
  served model's chat template drops earlier reasoning, or the provider ignores it.

Switching provider drops the state with a warning (``foreign_issuer``), exactly as
opaque values are dropped (core issuer check). In an open tool loop a provider that
rejects a tool-call turn without its reasoning (DeepSeek, GLM) makes a current-turn
reasoning message with no replayable record fail the replay before the call
(``ProviderWouldReject``), as for Anthropic.

Messages: system and developer messages stay in place as ``system`` messages (every
provider of the family takes ``system``; not all take ``developer``); a user message
keeps a plain string; an assistant turn is one ``assistant`` message — its text as
``content`` (``None`` beside tool calls when there is none), its calls as
``tool_calls`` with the arguments string as streamed; each tool result is a ``tool``
message naming its ``tool_call_id``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.issuers import OPENROUTER, family, openrouter_provider
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
    drop_reasoning_only,
)


class Policy(StrEnum):
    """What reasoning state a provider of the family wants back."""

    NONE = "none"
    READABLE = "readable"
    DETAILS = "details"


@dataclass(frozen=True)
class ProviderRule:
    policy: Policy
    required_in_tool_loop: bool
    """The provider rejects a tool-call turn sent back without its reasoning."""
    source: str


PROVIDER_RULES: dict[str | None, ProviderRule] = {
    "deepseek": ProviderRule(Policy.READABLE, True, "https://api-docs.deepseek.com/guides/thinking_mode"),
    "glm": ProviderRule(Policy.READABLE, True, "https://docs.z.ai/guides/capabilities/thinking-mode"),
    "kimi": ProviderRule(Policy.READABLE, False, "https://docs.together.ai/docs/kimi-k2-thinking-quickstart"),
    "openrouter": ProviderRule(Policy.DETAILS, False, "https://openrouter.ai/docs/use-cases/reasoning-tokens"),
    "vllm": ProviderRule(Policy.NONE, False, "https://docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/"),
    "sglang": ProviderRule(Policy.NONE, False, "https://github.com/sgl-project/sglang/pull/15562"),
    "qwen": ProviderRule(Policy.NONE, False, "https://docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/"),
    "ollama": ProviderRule(Policy.NONE, False, "https://ollama.com/blog/thinking"),
    "mistral": ProviderRule(Policy.NONE, False, "https://docs.mistral.ai/fr/studio-api/conversations/reasoning"),
    None: ProviderRule(Policy.NONE, False, "https://platform.openai.com/docs/api-reference/chat"),
}
"""Provider (``Issuer.provider`` before any ``:``) → its replay rule. A provider not listed gets
nothing back: reasonwire sends reasoning only where a documented rule asks for it (P7)."""

NONE_FOR_MODEL: dict[tuple[str, str], str] = {
    # Legacy R1 answered 400 when reasoning_content was sent back: the rule flipped with V3.2.
    ("deepseek", "deepseek-reasoner"): "https://api-docs.deepseek.com/guides/reasoning_model",
}
"""(provider, model) → the source saying that model must not get readable reasoning back."""

OPENROUTER_FORMATS: dict[str, str] = {
    "anthropic": "anthropic-claude-v1",
    "openai": "openai-responses-v1",
    "google": "google-gemini-v1",
    "x-ai": "xai-responses-v1",
}
"""OpenRouter model vendor (``<vendor>/<model>``) → the ``reasoning_details`` ``format`` its
items carry, for a target named ``openrouter`` without a format."""

READABLE_KIND = re.compile(r"^[a-z0-9_-]+\.reasoning_content$")
"""``<provider>.reasoning_content``: readable reasoning a provider requires back."""


def rule_for(target: ReplayTarget) -> ProviderRule:
    """The rule for the target's provider, and model where a model of it differs."""
    key = family(target.provider)  # openrouter:<format> → openrouter, ollama:<model> → ollama
    if key is not None and target.model is not None:
        source = NONE_FOR_MODEL.get((key, target.model.strip().lower()))
        if source is not None:
            return ProviderRule(Policy.NONE, False, source)
    return PROVIDER_RULES.get(key, ProviderRule(Policy.NONE, False, "no documented rule"))


class ChatCompletionsReplay(ReplayBuilder):
    grammar = Grammar.OPENAI_CHAT_COMPLETIONS
    history_key = "messages"  # system messages stay in the history

    def instructions(self, turn: Instructions) -> list[dict[str, Any]]:
        return [{"role": "system", "content": turn.message.content}]

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        content: Any = turn.texts[0] if turn.plain else [{"type": "text", "text": t} for t in turn.texts]
        return [{"role": "user", "content": content}]

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": r.call.entity_id, "content": r.text} for r in turn.results]

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        if drop_reasoning_only(turn, conversation):
            return []
        texts = [u.text for u in turn.units if isinstance(u, Text) and u.text]
        calls = [u for u in turn.units if isinstance(u, Call)]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
        if calls:
            message["tool_calls"] = [_tool_call(call) for call in calls]
        self._reasoning(message, [u for u in turn.units if isinstance(u, Reasoning)], conversation)
        return [message]

    def _reasoning(self, message: dict[str, Any], units: list[Reasoning], conversation: Conversation) -> None:
        with_state = [u for u in units if u.artefacts]
        if not with_state:
            return
        rule = rule_for(conversation.target)
        if rule.policy is Policy.NONE:
            for unit in with_state:
                conversation.drop(
                    unit,
                    "reasoning_not_wanted",
                    f"reasoning of {unit.entity_id}: {_named(conversation.target)} does not take reasoning back "
                    f"({rule.source}): not sent",
                )
            return
        records = sorted((r for u in with_state for r in u.artefacts), key=lambda r: r.native.position)
        if rule.policy is Policy.DETAILS:
            message["reasoning_details"] = [record.provider_block() for record in records]
            return
        for record in records:
            _put(message, record)

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        # DeepSeek: "Missing reasoning_content field in the assistant message" (400) on a tool turn
        # sent back without it; GLM preserved thinking wants the complete sequence.
        return isinstance(unit, Reasoning) and rule_for(conversation.target).required_in_tool_loop

    def resolve_target(self, target: ReplayTarget) -> ReplayTarget:
        """``openrouter`` with a ``<vendor>/<model>`` target model names the format its items carry."""
        if target.provider == OPENROUTER and target.model is not None:
            vendor = target.model.split("/", 1)[0].strip().lower()
            if vendor in OPENROUTER_FORMATS:
                return target.model_copy(update={"provider": openrouter_provider(OPENROUTER_FORMATS[vendor])})
        return target

    def model_bound(self, record: ArtefactRecord) -> bool:
        # Readable reasoning is plain text the provider's models read, not a model-bound signature.
        return READABLE_KIND.match(record.kind) is None


def _tool_call(call: Call) -> dict[str, Any]:
    return {"id": call.call.id, "type": "function", "function": {"name": call.name, "arguments": call.call.function.arguments}}


def _put(message: dict[str, Any], record: ArtefactRecord) -> None:
    """The record's value at its ``value_path`` in the message: verbatim, never re-encoded (R3)."""
    target = message
    for key in record.native.value_path[:-1]:
        target = target.setdefault(key, {})
    last = record.native.value_path[-1]
    target[last] = target[last] + record.value if isinstance(target.get(last), str) else record.value


def _named(target: ReplayTarget) -> str:
    return repr(target.provider) if target.provider is not None else "OpenAI Chat Completions"
