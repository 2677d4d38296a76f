"""Model families: which models may receive each other's opaque reasoning state (R8, P5).

Providers bind opaque state to the model that produced it (Anthropic: thinking
blocks are tied to the producing model; Gemini: signatures are bound to the
model family/tier; OpenAI reports ``model_mismatch`` when it withholds replayed
reasoning — REFERENCE §1.7, §2.5, §3.3). A *dated snapshot* or a preview of the
same model is the same family; a different tier, size or generation is not.

The rule, per grammar — lower-case the id, then strip what names a snapshot,
never what names the model:

* ``anthropic-messages``: a ``-YYYYMMDD`` / ``@YYYYMMDD`` date, ``-latest``
  (``claude-sonnet-4-5-20250929`` → ``claude-sonnet-4-5``);
* ``openai-responses``: a ``-YYYY-MM-DD`` date, ``-latest``
  (``gpt-5-2025-08-07`` → ``gpt-5``);
* ``gemini-generate-content``, ``gemini-interactions``: a ``models/`` prefix,
  ``-preview[-MM-DD|-MM-YYYY]``, ``-exp[-MMDD]``, ``-latest``, a ``-NNN`` version
  (``gemini-2.5-flash-preview-04-17`` → ``gemini-2.5-flash``);
* ``bedrock-converse``: an ARN up to the last ``/``, a geography prefix (``us.``,
  ``eu.``, ``apac.``, ``global.`` …), ``:N`` and ``-vN`` versions, a ``-YYYYMMDD`` date
  (``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` → ``anthropic.claude-sonnet-4-5``);
* ``openai-chat-completions`` (many providers, one grammar): an OpenRouter variant
  (``:free``, ``:thinking``, ``:nitro`` …), a ``-YYYY-MM-DD`` / ``-YYYYMMDD`` date, ``-latest``
  (``anthropic/claude-sonnet-4.5:thinking`` → ``anthropic/claude-sonnet-4.5``). The provider is
  compared apart (``Issuer.provider``), and readable reasoning a provider requires back is bound
  to the provider only (``ReplayBuilder.model_bound``).

So ``claude-sonnet-4-5`` and ``claude-sonnet-4-5-20250929`` share state;
``claude-sonnet-4-5`` and ``claude-opus-4-1`` (or ``claude-sonnet-4``) do not;
``gemini-2.5-flash`` and ``gemini-2.5-flash-lite`` do not. A Bedrock application
inference profile ARN has an opaque id and is its own family. The *region* or
account of a Bedrock or Vertex call is not part of the family: it is the
issuer's scope, compared separately.
"""

from __future__ import annotations

import re

from reasonwire.contracts.grammars import Grammar

_ANTHROPIC = (re.compile(r"[-@]\d{8}$"), re.compile(r"-latest$"))
_OPENAI = (re.compile(r"-\d{4}-\d{2}-\d{2}$"), re.compile(r"-latest$"))
_GEMINI = (
    re.compile(r"^models/"),
    re.compile(r"-latest$"),
    re.compile(r"-preview(-\d{2}-\d{2,4})?$"),
    re.compile(r"-exp(-\d{4})?$"),
    re.compile(r"-\d{3}$"),
)
_BEDROCK = (
    re.compile(r"^arn:.*/"),
    re.compile(r"^(us|us-gov|eu|apac|ap|jp|au|ca|global)\."),
    re.compile(r":\d+(:[0-9a-z]+)?$"),
    re.compile(r"-v\d+$"),
    re.compile(r"-\d{8}$"),
)

_CHAT = (
    re.compile(r":[a-z]+$"),
    re.compile(r"-latest$"),
    re.compile(r"-\d{4}-\d{2}-\d{2}$"),
    re.compile(r"-\d{8}$"),
)

_RULES: dict[Grammar, tuple[re.Pattern[str], ...]] = {
    Grammar.ANTHROPIC_MESSAGES: _ANTHROPIC,
    Grammar.OPENAI_RESPONSES: _OPENAI,
    Grammar.GEMINI_GENERATE_CONTENT: _GEMINI,
    Grammar.GEMINI_INTERACTIONS: _GEMINI,
    Grammar.BEDROCK_CONVERSE: _BEDROCK,
    Grammar.OPENAI_CHAT_COMPLETIONS: _CHAT,
}


def model_family(grammar: Grammar | str, model: str | None) -> str | None:
    """The family of ``model`` under ``grammar``'s rule (see the module docstring); None for None."""
    if model is None:
        return None
    family = model.strip().lower()
    for pattern in _RULES[Grammar(grammar)]:  # in order: a later suffix can only show once an earlier one is gone
        family = pattern.sub("", family)
    return family


def same_family(grammar: Grammar | str, a: str | None, b: str | None) -> bool:
    """Whether two models may share opaque state. Unknown (None) matches only unknown."""
    return model_family(grammar, a) == model_family(grammar, b)
