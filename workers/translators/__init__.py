"""One translator per provider grammar, and the registry the adapters choose from.

The registry names each grammar's module and class; a module is imported the
first time its grammar is asked for, so a process that only speaks one grammar
never loads the others.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.core.arguments import expect, expect_optional_str
from reasonwire.workers.core.translator import Translator

_REGISTRY: dict[Grammar, tuple[str, str]] = {
    Grammar.ANTHROPIC_MESSAGES: ("reasonwire.workers.translators.anthropic_messages", "AnthropicMessagesTranslator"),
    Grammar.OPENAI_RESPONSES: ("reasonwire.workers.translators.openai_responses", "OpenAIResponsesTranslator"),
    Grammar.GEMINI_GENERATE_CONTENT: ("reasonwire.workers.translators.gemini_generate_content", "GeminiGenerateContentTranslator"),
    Grammar.GEMINI_INTERACTIONS: ("reasonwire.workers.translators.gemini_interactions", "GeminiInteractionsTranslator"),
    Grammar.BEDROCK_CONVERSE: ("reasonwire.workers.translators.bedrock_converse", "BedrockConverseTranslator"),
    Grammar.OPENAI_CHAT_COMPLETIONS: ("reasonwire.workers.translators.openai_chat_completions", "OpenAIChatCompletionsTranslator"),
}


def implemented() -> list[Grammar]:
    """The grammars whose translator module is present."""
    return [g for g, (module, _) in _REGISTRY.items() if importlib.util.find_spec(module) is not None]


@cache
def translator_class(grammar: Grammar | str) -> type[Translator]:
    """The translator class for ``grammar``; ValueError naming the known ones if none."""
    try:
        module, name = _REGISTRY[Grammar(grammar)]
    except (ValueError, KeyError):
        raise ValueError(f"unknown grammar {str(grammar)!r} (known: {', '.join(g.value for g in Grammar)})") from None
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"no translator for grammar {str(grammar)!r} yet")
    cls: type[Translator] = getattr(importlib.import_module(module), name)
    return cls


TRANSLATOR_OPTIONS = ("run_id", "thread_id", "model", "issuer_scope", "issuer_provider", "fallback_run_id")
"""The keyword arguments a translator takes, each a string or None."""

_GRAMMAR_NAME = f"a grammar name ({', '.join(g.value for g in Grammar)})"
"""What ``grammar`` accepts, for its message: built once, as the worker calls
:func:`translator_for` for every run it opens and iterating an Enum is dear."""


def translator_for(grammar: Grammar | str, **kwargs: object) -> Translator:
    """A fresh translator for one run of ``grammar`` (a :class:`Grammar` or its name).

    Raises ``TypeError`` / ``ValueError`` naming the argument for a grammar that is not a name of
    one, an option the translator does not take, or an option that is not a string or None."""
    expect(grammar, str, name="grammar", accepts=_GRAMMAR_NAME)
    for name, value in kwargs.items():
        if name not in TRANSLATOR_OPTIONS:
            raise TypeError(f"translator_for() got an unexpected option {name!r} (takes: {', '.join(TRANSLATOR_OPTIONS)})")
        expect_optional_str(value, name=name)
    return translator_class(grammar)(**kwargs)  # type: ignore[arg-type]
