"""The artefact record (``reasonwire.artefact.v1``): one opaque reasoning value, lossless.

An artefact is a provider's opaque reasoning state — an Anthropic thinking
signature or redacted-thinking ``data``, an OpenAI ``encrypted_content``, a Gemini
``thoughtSignature``, a Bedrock reasoning signature or redacted bytes. R3: the
value is kept exactly as received (a ``str``, never decoded or re-encoded). The
record also keeps the provider-native block the value rode in, minus the value,
plus where the value goes back (``value_path``), so the next turn can rebuild the
provider's own item byte for byte (P5) and only for the issuer that produced it
(R8).
"""

from __future__ import annotations

import copy
import hashlib
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.issuers import family

SCHEMA: Literal["reasonwire.artefact.v1"] = "reasonwire.artefact.v1"


class ArtefactSubtype(StrEnum):
    """What the AG-UI ``entityId`` names (``REASONING_ENCRYPTED_VALUE.subtype``)."""

    MESSAGE = "message"
    TOOL_CALL = "tool-call"


class Issuer(BaseModel):
    """Who may receive the value back (R8): the same grammar, model and scope only."""

    model_config = ConfigDict(frozen=True)

    grammar: Grammar
    """The wire grammar that produced the value; a different grammar never gets it."""
    model: str | None = None
    """The model reported by the stream (or the request); signatures are model-bound."""
    scope: str | None = None
    """Account / key / region / endpoint the provider binds the value to, as configured."""
    provider: str | None = None
    """Which provider and model family issued the value, where one grammar is spoken by many
    (``deepseek``, ``glm``, ``qwen``, ``openrouter:<format>``, ``mistral``, ``ollama:<model>``,
    ``xai``): a value goes back only to the same provider. ``None`` is the grammar's own
    provider (OpenAI for ``openai-responses``, Anthropic for ``anthropic-messages``, …)."""


class NativeBlock(BaseModel):
    """The provider-native unit the value rode in, rebuilt on replay (P5)."""

    response_id: str | None = None
    """Provider response / message / interaction id: groups blocks of one assistant turn."""
    position: int
    """Index of the block / item / part / step within the assistant turn, for ordering."""
    item_id: str | None = None
    """The provider's own id of the unit (OpenAI ``rs_…``), where it has one."""
    block: dict[str, Any]
    """The provider-native block exactly as it must be resent, *without* the value."""
    value_path: list[str]
    """Where the value goes back into ``block`` (e.g. ``["signature"]``)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Grammar-specific continuity facts (e.g. OpenAI's following item)."""


class ArtefactRecord(BaseModel):
    """One opaque reasoning artefact with everything needed to return it (R3, R8, P5)."""

    schema_: Literal["reasonwire.artefact.v1"] = Field(default=SCHEMA, alias="schema")
    """Contract version, so a reader can refuse a record it does not understand."""
    kind: str
    """Provider-specific name, e.g. ``anthropic.thinking.signature``; for policy and metrics."""
    subtype: ArtefactSubtype
    """Whether ``entity_id`` names a message or a tool call."""
    entity_id: str
    """The AG-UI messageId / toolCallId the value belongs to."""
    value: str
    """The opaque value exactly as received. Never parsed, logged or traced (R3, P8)."""
    issuer: Issuer
    """Who may receive it back (R8)."""
    native: NativeBlock
    """The provider-native block to rebuild on the next turn (P5)."""
    run_id: str
    """The run that produced it."""
    thread_id: str
    """The conversation; replay looks artefacts up by thread."""
    tenant: str | None = None
    """Storage namespace; set by the worker, never crossed on replay."""
    complete: bool = True
    """False when the stream broke before the unit closed: never replayable."""
    created_at_ms: int | None = None
    """When the worker stored it (ms since epoch); absent offline."""

    model_config = ConfigDict(populate_by_name=True)

    def provider_block(self) -> dict[str, Any]:
        """The provider-native block with the value put back in place, byte for byte."""
        block = copy.deepcopy(self.native.block)
        target = block
        for key in self.native.value_path[:-1]:
            target = target.setdefault(key, {})
        target[self.native.value_path[-1]] = self.value
        return block

    def describe(self) -> dict[str, Any]:
        """A log- and trace-safe description: kind, size and a hash, never the value (P8)."""
        return {
            "kind": self.kind,
            "subtype": self.subtype.value,
            "bytes": len(self.value.encode()),
            "sha256": hashlib.sha256(self.value.encode()).hexdigest()[:16],
            "complete": self.complete,
        }

    def __repr__(self) -> str:  # keeps the value out of tracebacks and debug logs (P8)
        return f"ArtefactRecord({self.describe()!r}, entity_id={self.entity_id!r})"

    __str__ = __repr__


AGUI_VERSIONS = ("1.0", "1.1")
"""AG-UI versions reasonwire emits (``RW_AGUI_VERSION``): 1.1 only adds ``encryptedValueType``."""

ENCRYPTED_VALUE_TYPES: dict[str, str] = {
    "anthropic.thinking.signature": "anthropic.thinking_signature",
    "anthropic.redacted_thinking.data": "anthropic.redacted_thinking",
    "openai.reasoning.encrypted_content": "openai.encrypted_content",
    "gemini.part.thoughtSignature": "gemini.thought_signature",
    "gemini.interactions.thought.signature": "gemini.interactions.thought_signature",
    "bedrock.reasoningContent.signature": "bedrock.reasoning_signature",
    "bedrock.reasoningContent.redactedContent": "bedrock.redacted_content",
    "openrouter.reasoning.text": "openrouter.reasoning.text",
    "openrouter.reasoning.summary": "openrouter.reasoning.summary",
    "openrouter.reasoning.encrypted": "openrouter.reasoning.encrypted",
}
"""Artefact kind → AG-UI 1.1 ``encryptedValueType``: what the value is, prefixed with the provider
that issued it (the spec's own examples are ``anthropic.redacted_thinking`` and
``openai.encrypted_content``). A consumer stores it with the value and returns both unmodified;
a kind not listed (and not ``<provider>.reasoning_content``) has no type, and its value goes
without one, which a 1.1 consumer must accept. Never a type without a value."""


def encrypted_value_type(kind: str, provider: str | None = None) -> str | None:
    """The ``encryptedValueType`` of a value of ``kind`` issued by ``provider`` (``Issuer.provider``):
    the table's type, its prefix replaced by the issuing provider where one grammar is spoken by
    several (Grok's ``encrypted_content`` is ``xai.encrypted_content``)."""
    known = ENCRYPTED_VALUE_TYPES.get(kind)
    if known is None:
        head, _, tail = kind.partition(".")
        known = kind if tail == "reasoning_content" and head else None  # <provider>.reasoning_content
    if known is None or provider is None:
        return known
    return f"{family(provider)}{known[known.index('.') :]}"
