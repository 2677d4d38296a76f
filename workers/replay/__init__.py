"""Replay: the lossless path back — a thread's history + its artefacts → the next provider input.

Library use::

    from reasonwire.workers.replay import ReplayTarget, replay

    result = replay(run_input, artefacts, ReplayTarget(grammar="anthropic-messages", model="claude-sonnet-4-5"))
    request_body.update(result.fragment)            # {"messages": [...]} for Anthropic
    for warning in result.warnings: log.warning(warning.message)

The shared decisions (issuer matching, ordering, which copy wins, failing
before the call) live in :mod:`reasonwire.workers.replay.core`; one module per grammar
writes the provider-native shapes. :mod:`reasonwire.workers.io.replay_sources` reads
artefacts from Redis or from the file ``reasonwire translate --artefacts``
writes. Documented in ``docs/replay.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.replay.anthropic_messages import AnthropicMessagesReplay
from reasonwire.workers.replay.arguments import artefact_records, check_options, replay_target
from reasonwire.workers.replay.bedrock_converse import BedrockConverseReplay
from reasonwire.workers.replay.core import (
    InvalidHistory,
    ProviderWouldReject,
    ReplayBuilder,
    ReplayError,
    ReplayResult,
    ReplayWarning,
    read_history,
    replay_conversation,
)
from reasonwire.workers.replay.family import model_family, same_family
from reasonwire.workers.replay.gemini_generate_content import GeminiGenerateContentReplay
from reasonwire.workers.replay.gemini_interactions import GeminiInteractionsReplay
from reasonwire.workers.replay.openai_chat_completions import ChatCompletionsReplay
from reasonwire.workers.replay.openai_responses import OpenAIResponsesReplay

BUILDERS: dict[Grammar, ReplayBuilder] = {
    builder.grammar: builder
    for builder in (
        OpenAIResponsesReplay(),
        AnthropicMessagesReplay(),
        GeminiGenerateContentReplay(),
        GeminiInteractionsReplay(),
        BedrockConverseReplay(),
        ChatCompletionsReplay(),
    )
}
"""Grammar → the builder of its provider-native input."""

FRAGMENT_KEY: dict[Grammar, str] = {grammar: builder.history_key for grammar, builder in BUILDERS.items()}
"""Where the history goes in each grammar's request body."""


def replay(
    history: Any,
    artefacts: Iterable[ArtefactRecord | Mapping[str, Any]],
    target: ReplayTarget | str | Mapping[str, Any],
    *,
    tenant: str | None = None,
    honour_client_omissions: bool = False,
) -> ReplayResult:
    """Build the provider-native input for the next request of a thread.

    ``history`` is a ``RunAgentInput`` (model or wire dict) or a messages array as
    the client holds it; ``artefacts`` are the thread's stored records (any
    order): :class:`ArtefactRecord`\\ s or the dicts ``reasonwire translate --artefacts``
    writes; ``target`` a :class:`ReplayTarget`, a grammar name or a dict of its fields.
    An argument of the wrong kind raises ``TypeError`` / ``ValueError`` naming it —
    :class:`InvalidHistory` (a ``ValueError``) for a history replay cannot read — and
    :class:`ProviderWouldReject` when the provider would reject what is left.
    """
    records = artefact_records(artefacts)
    target = replay_target(target)
    check_options(tenant, honour_client_omissions)
    builder = BUILDERS.get(Grammar(target.grammar))
    if builder is None:
        replayable = ", ".join(g.value for g in BUILDERS)
        raise ValueError(f"target grammar {Grammar(target.grammar).value} has no replay yet (replayable: {replayable})")
    return replay_conversation(
        builder,
        history,
        records,
        target,
        tenant=tenant,
        honour_client_omissions=honour_client_omissions,
    )


__all__ = [
    "BUILDERS",
    "FRAGMENT_KEY",
    "InvalidHistory",
    "ProviderWouldReject",
    "ReplayError",
    "ReplayResult",
    "ReplayTarget",
    "ReplayWarning",
    "model_family",
    "read_history",
    "replay",
    "same_family",
]
