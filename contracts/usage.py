"""The usage record (``reasonwire.usage.v1``): token accounting per run, provider detail kept (P6).

Normalized counts follow AG-UI ``TokenUsage`` accounting: ``input_tokens`` is every
prompt token charged (cache reads and writes included), ``output_tokens`` every
generated token (reasoning included), ``reasoning_tokens`` / ``cached_input_tokens``
/ ``cache_write_input_tokens`` are parts of those totals, never additions. A count
the provider does not report stays ``None`` — never a made-up 0. ``provider_raw``
keeps the provider's own usage object so nothing is lost in normalization.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reasonwire.contracts.grammars import Grammar

SCHEMA: Literal["reasonwire.usage.v1"] = "reasonwire.usage.v1"


class TokenCounts(BaseModel):
    """Normalized token counts for one model call (see the module docstring). Immutable:
    a new report replaces the counts, so one empty instance can be shared."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    """Reasoning share of output; None where the provider reports none (Bedrock, older Anthropic)."""
    cached_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None
    total_tokens: int | None = None
    """input_tokens + output_tokens under the accounting above."""
    provider_raw: dict[str, Any] | None = None
    """The provider's usage object as last reported, unmodified."""

    def inconsistencies(self) -> list[str]:
        """Breaches of the accounting above (P6): parts larger than their totals, a total
        that is not the sum. Empty when consistent; counts never appear, only field names."""
        problems = []
        parts = (
            ("reasoning_tokens", self.reasoning_tokens, "output_tokens", self.output_tokens),
            ("cached_input_tokens", self.cached_input_tokens, "input_tokens", self.input_tokens),
            ("cache_write_input_tokens", self.cache_write_input_tokens, "input_tokens", self.input_tokens),
        )
        for part, value, whole, total in parts:
            if value is not None and total is not None and value > total:
                problems.append(f"{part} exceeds {whole}")
        if None not in (self.total_tokens, self.input_tokens, self.output_tokens) and self.total_tokens != (
            (self.input_tokens or 0) + (self.output_tokens or 0)
        ):
            problems.append("total_tokens is not input_tokens + output_tokens")
        return problems


NO_TOKENS = TokenCounts()
"""Counts before the provider reported any."""


class UsageRecord(BaseModel):
    """One record per finished run on ``reasoning.usage.v1``."""

    schema_: Literal["reasonwire.usage.v1"] = Field(default=SCHEMA, alias="schema")
    run_id: str
    thread_id: str
    tenant: str | None = None
    grammar: Grammar
    model: str | None = None
    tokens: TokenCounts
    end: Literal["finished", "error", "interrupted"]
    """How the run ended; usage of an interrupted run may be partial or absent."""
    stop_reason: str | None = None
    """The provider's own stop / finish reason, verbatim."""
    reasoning_blocks: int = 0
    """Reasoning messages emitted (one per provider reasoning unit)."""
    tool_calls: int = 0
    time_to_first_reasoning_ms: float | None = None
    """From the run's first raw event to its first reasoning event, when timed."""
    time_to_first_text_ms: float | None = None
    """From the run's first raw event to its first visible answer text, when timed."""

    model_config = {"populate_by_name": True}
