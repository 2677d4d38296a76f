"""Request translation (P4): each grammar's effort table — accepted values, what they map to,
and rejected combinations with messages that name what is supported."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from tests.conformance.oracle import LOCAL_FIXTURES
from reasonwire.workers.replay.requests import (
    TABLES,
    Effort,
    PortableReasoning,
    Summary,
    UnsupportedReasoning,
    next_request,
    reasoning_request,
    supported,
)


def fields(grammar: str, model: str, effort: str | None = None, summary: str | None = None, **kw: Any) -> dict[str, Any]:
    wish = PortableReasoning(
        effort=Effort(effort) if effort else None, summary=Summary(summary) if summary else None, **kw
    )
    return reasoning_request(grammar, model, wish)


def rejected(grammar: str, model: str, effort: str | None = None, summary: str | None = None, **kw: Any) -> UnsupportedReasoning:
    with pytest.raises(UnsupportedReasoning) as raised:
        fields(grammar, model, effort, summary, **kw)
    return raised.value


# -- the fixtures' recorded requests are rows of the tables --------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "effort", "summary"),
    [
        ("openai-responses", "medium", "detailed"),
        ("anthropic-messages", "medium", None),
        ("gemini-generate-content", "high", "auto"),
        ("gemini-interactions", "high", "auto"),
        ("bedrock-converse", "medium", None),
    ],
)
def test_the_sample_streams_requests_are_what_the_table_maps_P4(grammar: str, effort: str, summary: str | None) -> None:
    """The fixtures record the provider requests that produced them; their reasoning fields are
    the table's mapping of a portable request (effort + summary wish)."""
    request = json.loads((LOCAL_FIXTURES / grammar / "a_reasoning_then_answer.expected.json").read_text())["request"]
    model = request.get("model") or request["modelId"]
    produced = fields(grammar, model, effort, summary)
    assert produced == {key: request[key] for key in produced}


# -- OpenAI Responses ---------------------------------------------------------------------------------------


def test_openai_maps_effort_and_summary_and_asks_for_encrypted_reasoning_when_not_stored_P4() -> None:
    assert fields("openai-responses", "gpt-5-2025-08-07", "minimal", "auto") == {
        "reasoning": {"effort": "minimal", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    assert fields("openai-responses", "o3", "high", store=True) == {"reasoning": {"effort": "high"}, "store": True}
    assert fields("openai-responses", "gpt-5.1", "none") == {
        "reasoning": {"effort": "none"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    assert fields("openai-responses", "gpt-5.2", "xhigh")["reasoning"] == {"effort": "xhigh"}


@pytest.mark.parametrize(
    ("model", "effort", "summary", "names"),
    [
        ("gpt-5", "none", None, "supported: minimal, low, medium, high"),
        ("o3-2025-04-16", "minimal", None, "supported: low, medium, high"),
        ("gpt-5-pro", "medium", None, "supported: high"),
        ("gpt-5.1", "xhigh", None, "supported: none, low, medium, high"),
        ("gpt-5", "max", None, "reasoning_effort 'max'"),
        ("gpt-oss-120b", "low", "detailed", "no such setting"),
    ],
)
def test_openai_rejects_what_a_model_does_not_support_naming_what_it_does_P4(
    model: str, effort: str, summary: str | None, names: str
) -> None:
    assert names in rejected("openai-responses", model, effort, summary).message


def test_openai_without_reasoning_asked_for_a_non_reasoning_model_adds_no_include() -> None:
    assert fields("openai-responses", "gpt-4o") == {"store": False}


# -- Anthropic Messages ---------------------------------------------------------------------------------------


def test_anthropic_budget_families_map_effort_to_a_budget_and_summary_to_display_P4() -> None:
    assert fields("anthropic-messages", "claude-sonnet-4-5-20250929", "high", "none") == {
        "thinking": {"type": "enabled", "budget_tokens": 16384, "display": "omitted"}
    }
    assert fields("anthropic-messages", "claude-opus-4-1", "minimal") == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert fields("anthropic-messages", "claude-haiku-4-5", "none") == {"thinking": {"type": "disabled"}}


def test_anthropic_adaptive_families_map_effort_to_output_config_P4() -> None:
    assert fields("anthropic-messages", "claude-opus-4-6", "max", "auto") == {
        "thinking": {"type": "adaptive", "display": "summarized"},
        "output_config": {"effort": "max"},
    }
    assert fields("anthropic-messages", "claude-opus-4-7", "xhigh")["output_config"] == {"effort": "xhigh"}


@pytest.mark.parametrize(
    ("model", "effort", "summary", "names"),
    [
        ("claude-sonnet-4-5", "max", None, "supported: none, minimal, low, medium, high"),
        ("claude-opus-4-6", "minimal", None, "supported: low, medium, high, max, none"),
        ("claude-opus-5-5", "none", None, "supported: low, medium, high"),
        ("claude-sonnet-4-5", "high", "detailed", "supported: none, auto"),
        ("claude-3-7-sonnet-20250219", "low", "auto", "no such setting"),
        ("claude-sonnet-4-5", "none", "auto", "does not turn on"),
        ("claude-sonnet-4-5", None, "auto", "does not turn on"),
        ("claude-2.1", "low", None, "no reasoning settings are known"),
    ],
)
def test_anthropic_rejects_unsupported_combinations_naming_what_is_supported_P4(
    model: str, effort: str | None, summary: str | None, names: str
) -> None:
    assert names in rejected("anthropic-messages", model, effort, summary).message


def test_a_thinking_budget_must_fit_under_max_output_tokens_P4() -> None:
    error = rejected("anthropic-messages", "claude-sonnet-4-5", "high", max_output_tokens=8000)
    assert "16384" in error.message and "max_output_tokens (8000)" in error.message
    fitting = fields("anthropic-messages", "claude-sonnet-4-5", "medium", max_output_tokens=8000)
    assert fitting["thinking"]["budget_tokens"] == 4096


# -- Gemini generateContent and Interactions ------------------------------------------------------------------------


def test_gemini_maps_levels_on_gemini_3_and_budgets_on_2_5_P4() -> None:
    assert fields("gemini-generate-content", "gemini-3-pro-preview", "low", "none") == {
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "low", "includeThoughts": False}}
    }
    assert fields("gemini-generate-content", "gemini-2.5-flash", "none") == {
        "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}
    }
    assert fields("gemini-generate-content", "gemini-2.5-pro", "high") == {
        "generationConfig": {"thinkingConfig": {"thinkingBudget": 32768}}
    }
    assert fields("gemini-generate-content", "gemini-3-flash", None, "auto") == {
        "generationConfig": {"thinkingConfig": {"includeThoughts": True}}
    }


@pytest.mark.parametrize(
    ("grammar", "model", "effort", "summary", "names"),
    [
        ("gemini-generate-content", "gemini-3-pro-preview", "medium", None, "supported: low, high"),
        ("gemini-generate-content", "gemini-2.5-pro", "none", None, "supported: minimal, low, medium, high"),
        ("gemini-generate-content", "gemini-3-flash-preview", "xhigh", None, "supported: minimal, low, medium, high"),
        ("gemini-generate-content", "gemini-3-flash-preview", "high", "detailed", "supported: none, auto"),
        ("gemini-interactions", "gemini-3-pro-preview", "minimal", None, "supported: low, high"),
        ("gemini-interactions", "gemini-2.5-flash", "low", None, "no reasoning settings are known"),
    ],
)
def test_gemini_rejects_unsupported_combinations_naming_what_is_supported_P4(
    grammar: str, model: str, effort: str, summary: str | None, names: str
) -> None:
    assert names in rejected(grammar, model, effort, summary).message


def test_interactions_maps_level_and_summaries_and_stays_stateless_P4() -> None:
    assert fields("gemini-interactions", "gemini-3-flash-preview", "minimal", "none") == {
        "generation_config": {"thinking_level": "minimal", "thinking_summaries": "none"},
        "store": False,
    }


# -- Bedrock Converse ----------------------------------------------------------------------------------------------------


def test_bedrock_maps_claude_budgets_and_nova_efforts_into_additional_fields_P4() -> None:
    assert fields("bedrock-converse", "us.anthropic.claude-opus-4-1-20250805-v1:0", "low") == {
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    }
    assert fields("bedrock-converse", "us.amazon.nova-2-lite-v1:0", "high") == {
        "additionalModelRequestFields": {"reasoningConfig": {"type": "enabled", "maxReasoningEffort": "high"}}
    }
    assert fields("bedrock-converse", "anthropic.claude-sonnet-4-5-20250929-v1:0", "none") == {}


@pytest.mark.parametrize(
    ("model", "effort", "summary", "names"),
    [
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "max", None, "supported: none, minimal, low, medium, high"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "low", "auto", "no such setting"),
        ("amazon.nova-2-lite-v1:0", "minimal", None, "supported: none, low, medium, high"),
        ("us.deepseek.r1-v1:0", "high", None, "no such setting"),
        ("meta.llama3-70b-instruct-v1:0", "high", None, "no reasoning settings are known"),
    ],
)
def test_bedrock_rejects_unsupported_combinations_naming_what_is_supported_P4(
    model: str, effort: str, summary: str | None, names: str
) -> None:
    assert names in rejected("bedrock-converse", model, effort, summary).message


# -- the tables and the portable request ------------------------------------------------------------------------------------


def test_every_grammar_has_a_table_and_every_row_cites_its_source() -> None:
    assert set(TABLES) == set(Grammar)
    for rows in TABLES.values():
        assert rows and all(row.source for row in rows)


def test_supported_lists_what_a_model_takes() -> None:
    assert supported("gemini-generate-content", "gemini-3-pro") == {
        "reasoning_effort": ["low", "high"],
        "summary": ["none", "auto"],
    }
    assert supported("openai-responses", "gpt-4o") == {"reasoning_effort": [], "summary": []}


def test_the_portable_request_rides_in_forwarded_props() -> None:
    wish = PortableReasoning.from_run_input(
        {"forwardedProps": {"reasoning": {"effort": "low", "summary": "auto", "maxOutputTokens": 9000}}}
    )
    assert wish == PortableReasoning(effort=Effort.LOW, summary=Summary.AUTO, max_output_tokens=9000)
    assert PortableReasoning.from_run_input({"forwardedProps": {"reasoning_effort": "high"}}).effort is Effort.HIGH
    with pytest.raises(ValueError, match="forwardedProps.reasoning"):
        PortableReasoning.from_run_input({"forwardedProps": {"reasoning": {"effort": "extreme"}}})


def test_next_request_checks_reasoning_before_building_anything_P4() -> None:
    run_input = {
        "threadId": "t",
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": "Hi"}],
        "forwardedProps": {"reasoning": {"effort": "high", "summary": "auto"}},
    }
    body, result = next_request(run_input, ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model="claude-opus-4-6"), [])
    assert body == {
        "model": "claude-opus-4-6",
        "thinking": {"type": "adaptive", "display": "summarized"},
        "output_config": {"effort": "high"},
        "messages": [{"role": "user", "content": "Hi"}],
    }
    run_input["forwardedProps"] = {"reasoning": {"effort": "minimal"}}
    with pytest.raises(UnsupportedReasoning, match="supported: low, medium, high, max, none"):
        next_request(run_input, ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model="claude-opus-4-6"), [])
