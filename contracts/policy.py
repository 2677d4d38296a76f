"""Retention and audience policy (``reasonwire.policy.v1``), per tenant with a default (P7).

A policy decides, per data class, whether it is streamed and to which audience,
whether it is stored, for how long, and whether it may cross a provider or
region boundary. The default is purpose limitation: keep the minimum that
continuity needs.

| data class | default |
|---|---|
| readable reasoning | streamed to trusted services in full; end-user UIs (``public``) see summaries only; not stored by reasonwire — except where the issuer requires it back (below) |
| opaque state | streamed to trusted services only (never to ``public``); stored for ``ttl_s`` (7 days) for replay; never crosses a provider boundary |
| readable reasoning the issuer requires back | DeepSeek / GLM / Kimi ``reasoning_content``, OpenRouter unsigned or summary ``reasoning_details`` (``reasonwire.contracts.issuers``): replay state, so the *opaque state* rule — stored, same TTL, issuer-bound, never announced as an encrypted value, never in telemetry; still streamed only as reasoning, to the audiences above |
| raw provider events | never forwarded (no ``rawEvent``); kept only in the open-run journal while a run is open |
| usage | published on ``reasoning.usage.v1`` |

Rules that refuse a policy (:class:`PolicyError`), because honouring it would
break a protocol rule:

* opaque state visible to ``public`` — R3/R8: an encrypted value goes only to
  the producer that issued it, never to an end-user UI;
* opaque state allowed to cross a provider boundary — R8, P5;
* raw events forwarded — P8: raw provider events carry opaque state;
* ``drop_bound_text`` — Anthropic and Bedrock signatures verify the thinking
  text they were issued with; a stored signature without its text cannot be
  replayed, so the text that a signature binds is kept with it as part of the
  opaque state, whatever the readable-reasoning rule says.

Rules that warn (:meth:`RetentionPolicy.warnings`): opaque state not stored (the
next turn then depends on the client returning ``encryptedValue``s — R4: a path
that cannot carry an artefact is losing content).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA: Literal["reasonwire.policy.v1"] = "reasonwire.policy.v1"


class PolicyError(ValueError):
    """A policy that would break a protocol rule; the message names the rule."""


class Audience(StrEnum):
    TRUSTED = "trusted"
    """Services on ``reasoning.events.v1``: agents, gateways, the replay path."""
    PUBLIC = "public"
    """End-user UIs on ``reasoning.events.public.v1``."""


class ReasoningVisibility(StrEnum):
    """Which readable reasoning an audience sees (provenance from ``reasoningKind``, P1)."""

    ALL = "all"
    """Summaries and raw reasoning text."""
    SUMMARY = "summary"
    """Only provider-written summaries; raw reasoning, redacted and unlabelled reasoning removed."""
    NONE = "none"
    """No reasoning events at all."""


class AudienceRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reasoning: ReasoningVisibility
    """What readable reasoning this audience may see."""
    encrypted_values: bool
    """Whether ``REASONING_ENCRYPTED_VALUE`` events reach this audience."""


class StoreRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    store: bool
    ttl_s: int | None = Field(default=None, gt=0)
    """How long stored data lives; None only when not stored."""
    cross_boundary: bool = False
    """Whether the data may be sent to another provider or region than the one that produced it."""


class RetentionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["reasonwire.policy.v1"] = Field(default=SCHEMA, alias="schema")
    trusted: AudienceRule = AudienceRule(reasoning=ReasoningVisibility.ALL, encrypted_values=True)
    public: AudienceRule = AudienceRule(reasoning=ReasoningVisibility.SUMMARY, encrypted_values=False)
    opaque_state: StoreRule = StoreRule(store=True, ttl_s=7 * 24 * 3600)
    readable_reasoning: StoreRule = StoreRule(store=False)
    forward_raw_events: bool = False
    drop_bound_text: bool = False
    publish_usage: bool = True

    @model_validator(mode="after")
    def _protocol_rules(self) -> RetentionPolicy:
        if self.public.encrypted_values:
            raise PolicyError("public.encrypted_values: an encrypted value never reaches an end-user UI (R3, R8)")
        if self.opaque_state.cross_boundary:
            raise PolicyError("opaque_state.cross_boundary: opaque state goes back only to its issuer (R8, P5)")
        if self.forward_raw_events:
            raise PolicyError("forward_raw_events: raw provider events carry opaque state and are never forwarded (P8)")
        if self.drop_bound_text:
            raise PolicyError(
                "drop_bound_text: Anthropic and Bedrock signatures verify the thinking text they were issued "
                "with; without it a stored signature cannot be replayed (P5)"
            )
        for name, rule in (("opaque_state", self.opaque_state), ("readable_reasoning", self.readable_reasoning)):
            if rule.store and rule.ttl_s is None:
                raise PolicyError(f"{name}.ttl_s: stored data needs a TTL (P7: purpose limitation)")
        return self

    def warnings(self) -> list[str]:
        """Legal choices that lose something; logged at start-up."""
        out = []
        if not self.opaque_state.store:
            out.append("opaque_state.store is false: replay depends on clients returning encryptedValue (R4)")
        if self.readable_reasoning.store:
            out.append("readable_reasoning.store is true: reasonwire stores readable reasoning only as continuity needs it")
        return out

    def rule(self, audience: Audience) -> AudienceRule:
        return self.trusted if audience is Audience.TRUSTED else self.public


class PolicyBook(BaseModel):
    """The default policy and per-tenant overrides (``RW_POLICY_FILE``, JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: RetentionPolicy = RetentionPolicy()
    tenants: dict[str, RetentionPolicy] = Field(default_factory=dict)

    def for_tenant(self, tenant: str) -> RetentionPolicy:
        return self.tenants.get(tenant, self.default)

    @classmethod
    def load(cls, path: str | Path | None) -> PolicyBook:
        """Read and validate a policy file; no file means the default policy."""
        if not path:
            return cls()
        try:
            return cls.model_validate(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise PolicyError(f"policy file {path}: {exc}") from None
