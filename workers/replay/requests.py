"""Request translation: a portable reasoning request → each provider's reasoning configuration (P4).

Theory of operation
-------------------
A calling service states what it wants once, portably — a ``reasoning_effort``
and a summary (visibility) wish, in ``RunAgentInput.forwardedProps.reasoning``
(:meth:`PortableReasoning.from_run_input`) — and reasonwire turns it into the
provider's own fields through **one declarative table per grammar**, one row
per model family (:mod:`reasonwire.workers.replay.family` names families). A row lists,
for every value the family supports, exactly the request fields it becomes;
anything not listed is **rejected before the call** with an error naming what
the family does support (:class:`UnsupportedReasoning`) — never forwarded
hoping the provider copes, never silently dropped (P4). A model whose family
has no row is rejected the same way when reasoning is asked for.

Portable vocabulary:

* ``effort``: ``none`` (no reasoning) · ``minimal`` · ``low`` · ``medium`` ·
  ``high`` · ``xhigh`` · ``max``; absent = the provider's default.
* ``summary``: what readable reasoning comes back — ``none`` (no readable
  reasoning) · ``auto`` · ``concise`` · ``detailed`` (OpenAI's levels); absent =
  the provider's default.
* ``store``: whether the provider keeps state server-side. Default ``False``:
  reasonwire replays the history itself (:mod:`reasonwire.workers.replay`), so OpenAI gets
  ``store: false`` with ``include: ["reasoning.encrypted_content"]`` and
  Interactions ``store: false``.
* ``max_output_tokens``: when given, a token budget must fit under it
  (Anthropic: ``budget_tokens`` < ``max_tokens``), checked here, not by a 400.

Token budgets for effort levels on budget-based families are reasonwire's
policy (powers of two inside each family's documented range), stated in the
rows below so an operator can read and change them in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.replay.family import model_family


class Effort(StrEnum):
    NONE = "none"
    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"
    MAX = "max"


class Summary(StrEnum):
    NONE = "none"
    AUTO = "auto"
    CONCISE = "concise"
    DETAILED = "detailed"


class UnsupportedReasoning(ValueError):
    """A reasoning setting the target model does not support: rejected before any call (P4)."""

    def __init__(self, message: str, *, grammar: Grammar, model: str | None, setting: str, supported: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.grammar = grammar
        self.model = model
        self.setting = setting
        self.supported = supported


@dataclass(frozen=True)
class PortableReasoning:
    """What the caller wants, independent of the provider."""

    effort: Effort | None = None
    summary: Summary | None = None
    max_output_tokens: int | None = None
    store: bool = False

    @classmethod
    def from_run_input(cls, run_input: Mapping[str, Any]) -> PortableReasoning:
        """Read ``forwardedProps.reasoning`` (``effort``, ``summary``, ``maxOutputTokens``, ``store``)
        of a ``RunAgentInput`` wire dict; a top-level ``forwardedProps.reasoning_effort`` is accepted too."""
        props = run_input.get("forwardedProps") or run_input.get("forwarded_props") or {}
        wish = props.get("reasoning") if isinstance(props, Mapping) else None
        wish = wish if isinstance(wish, Mapping) else {}
        effort = wish.get("effort", props.get("reasoning_effort") if isinstance(props, Mapping) else None)
        try:
            return cls(
                effort=Effort(effort) if effort is not None else None,
                summary=Summary(wish["summary"]) if wish.get("summary") is not None else None,
                max_output_tokens=wish.get("maxOutputTokens", wish.get("max_output_tokens")),
                store=bool(wish.get("store", False)),
            )
        except ValueError as exc:
            raise ValueError(f"forwardedProps.reasoning: {exc}") from None


Fields = Mapping[str, Any]


@dataclass(frozen=True)
class FamilyRow:
    """One model family's reasoning controls: supported value → the request fields it becomes."""

    families: tuple[str, ...]
    efforts: Mapping[Effort, Fields]
    summaries: Mapping[Summary, Fields] = field(default_factory=dict)
    source: str = ""
    """Where the facts come from (doc page, SDK type, REFERENCE section)."""
    budget_path: tuple[str, ...] = ()
    """Where a token budget sits in the fields, when it must stay below ``max_output_tokens``."""
    summary_needs_thinking: bool = False
    """The summary setting lives inside the thinking config, so it needs an effort that enables it."""


def _budget(tokens: int, *, wrap: str | None = None) -> Fields:
    thinking = {"thinking": {"type": "enabled", "budget_tokens": tokens}}
    return {wrap: thinking} if wrap else thinking


def _adaptive(effort: str) -> Fields:
    return {"thinking": {"type": "adaptive"}, "output_config": {"effort": effort}}


_ANTHROPIC_BUDGETS = {
    Effort.MINIMAL: 1024,  # the documented floor
    Effort.LOW: 2048,
    Effort.MEDIUM: 4096,
    Effort.HIGH: 16384,
}
"""reasonwire policy for budget-based Claude families (floor 1,024; below max_tokens)."""

_DISPLAY = {Summary.NONE: {"thinking": {"display": "omitted"}}, Summary.AUTO: {"thinking": {"display": "summarized"}}}
"""Claude 4+: ``thinking.display`` (REFERENCE §2.3; SDK ``thinking_config_*_param.py``)."""


def _anthropic_budget_row(*families: str, summaries: Mapping[Summary, Fields] = _DISPLAY) -> FamilyRow:
    return FamilyRow(
        families=families,
        efforts={Effort.NONE: {"thinking": {"type": "disabled"}}, **{e: _budget(b) for e, b in _ANTHROPIC_BUDGETS.items()}},
        summaries=summaries,
        source="platform.claude.com/docs/build-with-claude/extended-thinking (budget_tokens >= 1024, < max_tokens)",
        budget_path=("thinking", "budget_tokens"),
        summary_needs_thinking=True,
    )


def _anthropic_adaptive_row(*families: str, efforts: tuple[Effort, ...], can_disable: bool, source: str) -> FamilyRow:
    table: dict[Effort, Fields] = {e: _adaptive(e.value) for e in efforts}
    if can_disable:
        table[Effort.NONE] = {"thinking": {"type": "disabled"}}
    return FamilyRow(families=families, efforts=table, summaries=_DISPLAY, source=source, summary_needs_thinking=True)


_OPENAI_SUMMARIES: Mapping[Summary, Fields] = {
    Summary.NONE: {},  # no summary is the API's default
    **{s: {"reasoning": {"summary": s.value}} for s in (Summary.AUTO, Summary.CONCISE, Summary.DETAILED)},
}
"""``reasoning.summary`` (REFERENCE §1.4: auto|concise|detailed; absent → ``summary: []``)."""


def _openai_row(families: tuple[str, ...], efforts: tuple[Effort, ...], source: str, *, summaries: bool = True) -> FamilyRow:
    return FamilyRow(
        families=families,
        efforts={e: {"reasoning": {"effort": e.value}} for e in efforts},
        summaries=_OPENAI_SUMMARIES if summaries else {},
        source=source,
    )


TABLES: dict[Grammar, tuple[FamilyRow, ...]] = {
    Grammar.OPENAI_RESPONSES: (
        # openai SDK ReasoningEffort docstring: "All models before gpt-5.1 default to medium and do not
        # support none"; o-series: low|medium|high.
        _openai_row(
            ("o1", "o1-pro", "o3", "o3-mini", "o3-pro", "o4-mini"),
            (Effort.LOW, Effort.MEDIUM, Effort.HIGH),
            "platform.openai.com/docs/api-reference/responses (reasoning.effort: o-series low|medium|high)",
        ),
        _openai_row(
            ("gpt-5", "gpt-5-mini", "gpt-5-nano"),
            (Effort.MINIMAL, Effort.LOW, Effort.MEDIUM, Effort.HIGH),
            "openai SDK types/shared/reasoning_effort.py (before gpt-5.1: no none; gpt-5 adds minimal)",
        ),
        _openai_row(("gpt-5-pro",), (Effort.HIGH,), "openai SDK ReasoningEffort: 'gpt-5-pro ... only supports high'"),
        _openai_row(
            ("gpt-5.1",),
            (Effort.NONE, Effort.LOW, Effort.MEDIUM, Effort.HIGH),
            "openai SDK ReasoningEffort: 'supported values for gpt-5.1 are none, low, medium, and high'",
        ),
        _openai_row(
            ("gpt-5.2", "gpt-5.2-pro"),
            (Effort.NONE, Effort.LOW, Effort.MEDIUM, Effort.HIGH, Effort.XHIGH),
            "openai SDK ReasoningEffort: 'xhigh is supported for all models after gpt-5.1-codex-max'",
        ),
        # gpt-oss streams its raw reasoning text (REFERENCE §1.4): no summary setting.
        _openai_row(
            ("gpt-oss-20b", "gpt-oss-120b"),
            (Effort.LOW, Effort.MEDIUM, Effort.HIGH),
            "openai.com/index/introducing-gpt-oss (reasoning effort low|medium|high)",
            summaries=False,
        ),
    ),
    Grammar.ANTHROPIC_MESSAGES: (
        # Claude 3.7 streams its raw reasoning (REFERENCE §2.3): there is no summary to configure.
        _anthropic_budget_row("claude-3-7-sonnet", summaries={}),
        _anthropic_budget_row(
            "claude-sonnet-4", "claude-opus-4", "claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"
        ),
        _anthropic_adaptive_row(
            "claude-opus-4-6",
            "claude-sonnet-4-6",
            efforts=(Effort.LOW, Effort.MEDIUM, Effort.HIGH, Effort.MAX),
            can_disable=True,
            source="platform.claude.com/docs/about-claude/models/whats-new-claude-4-6 (adaptive thinking; effort GA; max)",
        ),
        _anthropic_adaptive_row(
            "claude-opus-4-7",
            "claude-opus-4-8",
            efforts=(Effort.LOW, Effort.MEDIUM, Effort.HIGH, Effort.XHIGH, Effort.MAX),
            can_disable=True,
            source="platform.claude.com/docs/build-with-claude/effort (xhigh from Opus 4.7; budget_tokens removed)",
        ),
        _anthropic_adaptive_row(
            "claude-opus-5-5",
            "claude-fable-5-1",
            efforts=(Effort.LOW, Effort.MEDIUM, Effort.HIGH),
            can_disable=False,
            source="platform.claude.com/docs/about-claude/models (Thinking: 'Adaptive (always on)')",
        ),
    ),
    Grammar.GEMINI_GENERATE_CONTENT: (
        # ai.google.dev/gemini-api/docs/thinking: 2.5 budgets (Pro 128-32768, cannot turn off; Flash
        # 0-24576; Flash-Lite 512-24576, 0 = off); Gemini 3 thinkingLevel (Pro low|high, Flash
        # minimal|low|medium|high); level and budget never together. includeThoughts = summaries.
        FamilyRow(
            families=("gemini-2.5-pro",),
            efforts={
                Effort.MINIMAL: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 128}}},
                Effort.LOW: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}},
                Effort.MEDIUM: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 8192}}},
                Effort.HIGH: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 32768}}},
            },
            summaries={
                Summary.NONE: {"generationConfig": {"thinkingConfig": {"includeThoughts": False}}},
                Summary.AUTO: {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
            },
            source="ai.google.dev/gemini-api/docs/thinking (thinkingBudget ranges)",
        ),
        *(
            FamilyRow(
                families=(family,),
                efforts={
                    Effort.NONE: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}},
                    Effort.MINIMAL: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 512}}},
                    Effort.LOW: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}},
                    Effort.MEDIUM: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 8192}}},
                    Effort.HIGH: {"generationConfig": {"thinkingConfig": {"thinkingBudget": 24576}}},
                },
                summaries={
                    Summary.NONE: {"generationConfig": {"thinkingConfig": {"includeThoughts": False}}},
                    Summary.AUTO: {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
                },
                source="ai.google.dev/gemini-api/docs/thinking (thinkingBudget ranges)",
            )
            for family in ("gemini-2.5-flash", "gemini-2.5-flash-lite")
        ),
        *(
            FamilyRow(
                families=(family,),
                efforts={e: {"generationConfig": {"thinkingConfig": {"thinkingLevel": e.value}}} for e in levels},
                summaries={
                    Summary.NONE: {"generationConfig": {"thinkingConfig": {"includeThoughts": False}}},
                    Summary.AUTO: {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
                },
                source="ai.google.dev/gemini-api/docs/thinking (thinkingLevel per model)",
            )
            for family, levels in (
                ("gemini-3-pro", (Effort.LOW, Effort.HIGH)),
                ("gemini-3-flash", (Effort.MINIMAL, Effort.LOW, Effort.MEDIUM, Effort.HIGH)),
            )
        ),
    ),
    Grammar.GEMINI_INTERACTIONS: tuple(
        # ai.google.dev/gemini-api/docs/interactions/thinking; SDK GenerationConfig: thinking_level,
        # thinking_summaries auto|none. Interactions has no thinking budget: 2.5 families have no row.
        FamilyRow(
            families=(family,),
            efforts={e: {"generation_config": {"thinking_level": e.value}} for e in levels},
            summaries={
                Summary.NONE: {"generation_config": {"thinking_summaries": "none"}},
                Summary.AUTO: {"generation_config": {"thinking_summaries": "auto"}},
            },
            source="ai.google.dev/gemini-api/docs/interactions/thinking (thinking_level, thinking_summaries)",
        )
        for family, levels in (
            ("gemini-3-pro", (Effort.LOW, Effort.HIGH)),
            ("gemini-3-flash", (Effort.MINIMAL, Effort.LOW, Effort.MEDIUM, Effort.HIGH)),
        )
    ),
    Grammar.BEDROCK_CONVERSE: (
        # REFERENCE §5.3: thinking goes in additionalModelRequestFields, Claude's own shape; reasoning
        # is off unless enabled. No thinking display setting is documented for Bedrock.
        FamilyRow(
            families=tuple(
                f"anthropic.{f}"
                for f in (
                    "claude-3-7-sonnet",
                    "claude-sonnet-4",
                    "claude-opus-4",
                    "claude-opus-4-1",
                    "claude-sonnet-4-5",
                    "claude-haiku-4-5",
                    "claude-opus-4-5",
                )
            ),
            efforts={
                Effort.NONE: {},
                **{e: _budget(b, wrap="additionalModelRequestFields") for e, b in _ANTHROPIC_BUDGETS.items()},
            },
            source="docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-extended-thinking.html",
            budget_path=("additionalModelRequestFields", "thinking", "budget_tokens"),
        ),
        FamilyRow(
            families=("amazon.nova-2-lite", "amazon.nova-2-pro"),
            efforts={
                Effort.NONE: {"additionalModelRequestFields": {"reasoningConfig": {"type": "disabled"}}},
                **{
                    e: {"additionalModelRequestFields": {"reasoningConfig": {"type": "enabled", "maxReasoningEffort": e.value}}}
                    for e in (Effort.LOW, Effort.MEDIUM, Effort.HIGH)
                },
            },
            source="docs.aws.amazon.com/nova/latest/nova2-userguide/extended-thinking.html (reasoningConfig)",
        ),
        FamilyRow(
            families=("deepseek.r1",),
            efforts={},
            source="DeepSeek-R1 on Bedrock always reasons; it has no reasoning setting",
        ),
    ),
    Grammar.OPENAI_CHAT_COMPLETIONS: (
        # DeepSeek V4: thinking on or off (extra_body ``thinking``), and ``reasoning_effort`` low|high|max
        # while it is on; no summary setting (the reasoning streams raw, as reasoning_content).
        FamilyRow(
            families=("deepseek-v4-pro", "deepseek-v4-flash"),
            efforts={
                Effort.NONE: {"thinking": {"type": "disabled"}},
                **{e: {"thinking": {"type": "enabled"}, "reasoning_effort": e.value} for e in (Effort.LOW, Effort.HIGH, Effort.MAX)},
            },
            source="api-docs.deepseek.com/guides/thinking_mode (thinking: enabled|disabled; reasoning_effort low|high|max)",
        ),
        FamilyRow(
            families=("deepseek-reasoner",),
            efforts={},
            source="api-docs.deepseek.com/guides/reasoning_model: deepseek-reasoner always reasons; it has no reasoning setting",
        ),
    ),
}
"""Grammar → its family rows (P4). Read top to bottom against the cited sources. The Chat Completions
family lists the providers whose settings are documented where this table's facts come from; a model
of another (a vLLM- or Ollama-served one) is refused when reasoning settings are asked for, as any
family without a row is."""


def reasoning_request(grammar: Grammar | str, model: str | None, reasoning: PortableReasoning) -> dict[str, Any]:
    """The request fields that carry ``reasoning`` to ``model`` under ``grammar``.

    Raises :class:`UnsupportedReasoning` — naming what is supported — for a value
    the model's family does not take, or a family with no row when reasoning is
    asked for. Storage fields (OpenAI ``store``/``include``, Interactions
    ``store``) come with every reasoning family of those grammars.
    """
    grammar = Grammar(grammar)
    asked = reasoning.effort is not None or reasoning.summary is not None
    row = _row(grammar, model)
    if row is None:
        if not asked:
            return dict(_storage(grammar, reasoning, reasoning_model=False))
        family = model_family(grammar, model)
        known = sorted(f for r in TABLES[grammar] for f in r.families)
        raise UnsupportedReasoning(
            f"{grammar.value}: no reasoning settings are known for model {model!r} (family {family!r}); "
            f"families with reasoning settings: {', '.join(known)}",
            grammar=grammar,
            model=model,
            setting="model",
            supported=known,
        )
    fields: dict[str, Any] = {}
    if reasoning.effort is not None:
        _merge(fields, _pick(row, grammar, model, "reasoning_effort", reasoning.effort, row.efforts))
        _check_budget(row, grammar, model, reasoning, fields)
    if reasoning.summary is not None:
        chosen = _pick(row, grammar, model, "summary", reasoning.summary, row.summaries)
        if row.summary_needs_thinking and chosen and not _thinking_on(fields):
            raise UnsupportedReasoning(
                f"{grammar.value} {model}: summary {reasoning.summary.value!r} applies to thinking, which "
                f"reasoning_effort {getattr(reasoning.effort, 'value', None)!r} does not turn on; "
                "ask for an effort other than 'none'",
                grammar=grammar,
                model=model,
                setting="summary",
                supported=[e.value for e in row.efforts if e is not Effort.NONE],
            )
        _merge(fields, chosen)
    _merge(fields, _storage(grammar, reasoning, reasoning_model=True))
    return fields


def supported(grammar: Grammar | str, model: str | None) -> dict[str, list[str]]:
    """What ``model`` accepts under ``grammar`` (empty lists when its family has no row)."""
    row = _row(Grammar(grammar), model)
    if row is None:
        return {"reasoning_effort": [], "summary": []}
    return {"reasoning_effort": [e.value for e in row.efforts], "summary": [s.value for s in row.summaries]}


def _row(grammar: Grammar, model: str | None) -> FamilyRow | None:
    family = model_family(grammar, model)
    return next((row for row in TABLES[grammar] if family in row.families), None)


def _pick(
    row: FamilyRow, grammar: Grammar, model: str | None, setting: str, value: StrEnum, table: Mapping[Any, Fields]
) -> Fields:
    if value in table:
        return table[value]
    names = [v.value for v in table] or ["(none: this model has no such setting)"]
    raise UnsupportedReasoning(
        f"{grammar.value} {model} (family {model_family(grammar, model)}) does not support {setting} "
        f"{value.value!r}; supported: {', '.join(names)}",
        grammar=grammar,
        model=model,
        setting=setting,
        supported=[v.value for v in table],
    )


def _check_budget(
    row: FamilyRow, grammar: Grammar, model: str | None, reasoning: PortableReasoning, fields: dict[str, Any]
) -> None:
    if not row.budget_path or reasoning.max_output_tokens is None:
        return
    budget: Any = fields
    for key in row.budget_path:
        budget = budget.get(key) if isinstance(budget, dict) else None
    if isinstance(budget, int) and budget >= reasoning.max_output_tokens:
        raise UnsupportedReasoning(
            f"{grammar.value} {model}: reasoning_effort {reasoning.effort.value!r} means a thinking budget of "  # type: ignore[union-attr]
            f"{budget} tokens, which must be below max_output_tokens ({reasoning.max_output_tokens}); "
            "raise max_output_tokens or lower the effort",
            grammar=grammar,
            model=model,
            setting="max_output_tokens",
            supported=[f"> {budget}"],
        )


def _thinking_on(fields: Mapping[str, Any]) -> bool:
    thinking = fields.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive")


def _storage(grammar: Grammar, reasoning: PortableReasoning, *, reasoning_model: bool) -> Fields:
    if grammar is Grammar.OPENAI_RESPONSES:
        if reasoning.store:
            return {"store": True}
        # store=false: the encrypted reasoning must come back to be replayed (REFERENCE §1.4, §1.7);
        # only reasoning models accept the include.
        return {"store": False, "include": ["reasoning.encrypted_content"]} if reasoning_model else {"store": False}
    if grammar is Grammar.GEMINI_INTERACTIONS:
        return {"store": reasoning.store}
    return {}


def _merge(into: dict[str, Any], fields: Fields) -> None:
    for key, value in fields.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


MODEL_FIELD: dict[Grammar, str | None] = {
    Grammar.OPENAI_RESPONSES: "model",
    Grammar.ANTHROPIC_MESSAGES: "model",
    Grammar.GEMINI_GENERATE_CONTENT: None,  # the model is in the URL (models/<model>:streamGenerateContent)
    Grammar.GEMINI_INTERACTIONS: "model",
    Grammar.BEDROCK_CONVERSE: "modelId",
    Grammar.OPENAI_CHAT_COMPLETIONS: "model",
}


def next_request(
    run_input: Mapping[str, Any],
    target: Any,
    artefacts: Any,
    *,
    tenant: str | None = None,
    honour_client_omissions: bool = False,
) -> tuple[dict[str, Any], Any]:
    """The next request body for ``target``: model, reasoning configuration, replayed history.

    The reasoning settings are checked first (P4), so an unsupported one fails
    before anything else is done; then :func:`reasonwire.workers.replay.replay` builds the
    history. Returns the body and the :class:`~reasonwire.workers.replay.ReplayResult`.
    Tools and sampling settings are the caller's to add.
    """
    from reasonwire.workers.replay import replay  # the replay package imports nothing from here

    grammar = Grammar(target.grammar)
    fields = reasoning_request(grammar, target.model, PortableReasoning.from_run_input(run_input))
    result = replay(run_input, artefacts, target, tenant=tenant, honour_client_omissions=honour_client_omissions)
    body: dict[str, Any] = {}
    model_field = MODEL_FIELD[grammar]
    if model_field and target.model:
        body[model_field] = target.model
    _merge(body, fields)
    _merge(body, result.fragment)
    return body, result
