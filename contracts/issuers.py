"""Issuer providers of grammars that many providers speak (``Issuer.provider``, ``ReplayTarget.provider``).

One wire format — OpenAI Chat Completions — is streamed by DeepSeek, Z.ai (GLM), Qwen,
Moonshot (Kimi), Mistral, OpenRouter, vLLM, SGLang, Together, DeepInfra and Ollama. What
a run's reasoning state is, and who may receive it back (R8), depends on which of them
issued it, so the run names its *provider*:

* stated by the producer: the ``rw-issuer-provider`` header of ``reasoning.raw.v1``
  (``contracts/envelope.py``), ``--issuer-provider`` of ``translate`` / ``ingest``, the
  ``RW-Issuer-Provider`` header of ``POST /v1/ingest/{provider}``, or
  ``Publisher.run(issuer_provider=…)``;
* otherwise derived from the stream and the model name (:func:`provider_from_stream`, the
  documented fallback, docs/mapping/openai-chat-completions.md).

The Responses API has a second provider too: xAI serves Grok through it (:func:`responses_provider`).

A provider value is a lower-case family name (``deepseek``, ``glm``, ``qwen``, ``kimi``,
``mistral``, ``minimax``, ``vllm``, ``sglang``, ``together``, ``deepinfra``, ``openrouter``), or
``<family>:<detail>`` where the family serves many issuers: ``openrouter:<format>`` (the
``format`` of a ``reasoning_details`` item: ``anthropic-claude-v1``, ``openai-responses-v1``, …)
and ``ollama:<model>``. Values are compared as they are.
"""

from __future__ import annotations

from typing import Final

READABLE_REASONING_REQUIRED: Final = frozenset({"deepseek", "glm", "kimi"})
"""Providers whose API wants the assistant turn's readable reasoning back, verbatim, in
``reasoning_content`` of that assistant message on later requests — so it is replay state,
stored like an opaque value (R3, R8):

* ``deepseek`` — V3.2 / V4 thinking mode: "reasoning_content must be fully passed back to the
  API in all subsequent requests" on tool-call turns, else 400 "Missing reasoning_content"
  (api-docs.deepseek.com/guides/thinking_mode); V4 is reported to want it on every assistant
  message (kimi-cli #2141);
* ``glm`` — Z.ai thinking mode: thinking "should be explicitly preserved and returned together
  with the tool results"; preserved thinking needs the complete, unmodified sequence
  (docs.z.ai/guides/capabilities/thinking-mode);
* ``kimi`` — Kimi K2 Thinking: reasoning_content is kept across a tool loop (Moonshot /
  Together quickstart; the pydantic-ai Moonshot profile sends it back, pydantic-ai #3536).

Not here, so nothing of their readable reasoning is stored: ``qwen`` (Qwen3's template drops
earlier thinking by default), the R1 family on vLLM / SGLang / Together (``deepseek-reasoner``
even answered 400 when it was sent back), ``ollama:*`` and ``mistral`` (whose thinking chunks
*may* go back, but need not)."""

OPENROUTER: Final = "openrouter"
OLLAMA: Final = "ollama"
XAI: Final = "xai"
"""Grok, which xAI serves through the Responses API (``openai-responses``): its ``encrypted_content``
is bound to xAI — another provider's blob "could not be verified" either way
(docs.x.ai/developers/advanced-api-usage/troubleshooting-reasoning)."""

_MODEL_FAMILIES: Final = (
    ("deepseek", "deepseek"),
    ("glm", "glm"),
    ("chatglm", "glm"),
    ("qwen", "qwen"),
    ("qwq", "qwen"),
    ("kimi", "kimi"),
    ("moonshot", "kimi"),
    ("magistral", "mistral"),
    ("mistral", "mistral"),
    ("ministral", "mistral"),
    ("devstral", "mistral"),
    ("codestral", "mistral"),
    ("minimax", "minimax"),
)
"""Model-name prefix → provider, for names a vendor's own API uses (``deepseek-v4-pro``,
``glm-4.6``, ``kimi-k2-thinking``, ``magistral-medium-latest``)."""


def family(provider: str | None) -> str | None:
    """The provider's family: ``openrouter:anthropic-claude-v1`` → ``openrouter``."""
    return provider.split(":", 1)[0] if provider else None


def keeps_readable_reasoning(provider: str | None) -> bool:
    """Whether this provider's readable reasoning is replay state (:data:`READABLE_REASONING_REQUIRED`)."""
    return family(provider) in READABLE_REASONING_REQUIRED


def openrouter_provider(fmt: str | None) -> str:
    """The issuer of one OpenRouter ``reasoning_details`` item: ``openrouter:<format>``."""
    return f"{OPENROUTER}:{fmt or 'unknown'}"


def ollama_provider(model: str | None) -> str:
    """The issuer of an Ollama run: ``ollama:<model>`` (a local model, bound to that machine's weights)."""
    return f"{OLLAMA}:{model or 'unknown'}"


def provider_from_model(model: str | None) -> str | None:
    """The provider a vendor's own model name points to, or None.

    A name with an organisation prefix (``deepseek-ai/DeepSeek-R1``, ``deepseek/deepseek-chat``)
    is a hosted or self-served copy of open weights (vLLM, SGLang, Together, DeepInfra,
    OpenRouter): the name says whose weights, not whose API, so it names no provider."""
    if not model or "/" in model:
        return None
    name = model.lower()
    for prefix, provider in _MODEL_FAMILIES:
        if name.startswith(prefix):
            return provider
    return None


def provider_from_stream(*, model: str | None, reasoning_field: str | None, openrouter: bool, ollama: bool) -> str | None:
    """The documented fallback when the producer states no provider (in this order):

    1. an Ollama ``/api/chat`` stream → ``ollama:<model>``;
    2. an OpenRouter stream (``gen-…`` completion ids or a ``provider`` field) → ``openrouter``;
    3. the vendor's model name (:func:`provider_from_model`) — except that a name pointing to a
       provider whose readable reasoning is replay state counts only when the stream carries it
       in that provider's own field, ``reasoning_content``: ``deepseek-r1`` served by vLLM streams
       ``delta.reasoning`` and is not DeepSeek's API;
    4. None: an OpenAI-compatible server the stream does not name (vLLM, SGLang, Together, …)."""
    if ollama:
        return ollama_provider(model)
    if openrouter:
        return OPENROUTER
    provider = provider_from_model(model)
    if provider in READABLE_REASONING_REQUIRED and reasoning_field not in (None, "reasoning_content"):
        return None
    return provider


def responses_provider(model: str | None) -> str | None:
    """The provider of an ``openai-responses`` stream or request that its model names: ``grok-…`` is
    xAI's (:data:`XAI`); None is OpenAI, the grammar's own."""
    return XAI if model is not None and model.strip().lower().startswith("grok-") else None
