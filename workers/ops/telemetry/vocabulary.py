"""Every name reasonwire's telemetry may carry: span names, attribute keys and their value rules.

This table *is* the allowlist the guards enforce (:mod:`reasonwire.workers.ops.telemetry.guard`):
an attribute whose key is not here is dropped; a value that breaks its key's
rule (wrong type, a string outside its fixed vocabulary or its expected shape)
is dropped. No rule admits free text, so readable reasoning, answer text, tool
arguments and opaque values have nowhere to go (P8).

Sources of the names:

* ``gen_ai.*`` — OpenTelemetry GenAI semantic conventions (registry of the
  ``open-telemetry/semantic-conventions-genai`` repository, status
  *development*; the names in ``opentelemetry-semantic-conventions``'
  ``gen_ai_attributes`` match). ``gen_ai.operation.name`` is deliberately not
  used: reasonwire observes a stream another service requested, it performs no
  inference operation, and a backend that sums ``gen_ai`` operations would count
  the call twice.
* ``messaging.*`` and ``error.type`` — OpenTelemetry messaging (Kafka) and
  general semantic conventions. ``messaging.kafka.message.key`` is deliberately
  absent: a key is the producer's bytes.
* ``reasonwire.*`` — ours, for facts the conventions have no name for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from reasonwire.contracts import topics
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.core.delivery import DeadLetterCode

# -- span names -----------------------------------------------------------------------

SPAN_RUN = "reasonwire.run"
"""One provider run, from its first record on this worker to its end (or hand-over)."""
SPAN_RECORD = f"process {topics.RAW}"
"""One poll's records of one traced run, a child of its run span (messaging convention:
``{operation} {destination}``; docs/telemetry.md says why not one span per record or per poll)."""
SPAN_NAMES = frozenset({SPAN_RUN, SPAN_RECORD})
RENAMED_SPAN = "span"
"""What the guard calls a span whose name is not in :data:`SPAN_NAMES`."""

EVENT_ARTEFACT = "reasonwire.artefact"
"""Span event: one opaque artefact, described by kind, size and hash only."""
EVENT_WARNING = "reasonwire.warning"
"""Span event: a translator warning, by code and line only."""
EVENT_NAMES = frozenset({EVENT_ARTEFACT, EVENT_WARNING})

# -- attribute keys --------------------------------------------------------------------

GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"

MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_DESTINATION_NAME = "messaging.destination.name"
MESSAGING_DESTINATION_PARTITION_ID = "messaging.destination.partition.id"
MESSAGING_CONSUMER_GROUP_NAME = "messaging.consumer.group.name"
MESSAGING_KAFKA_OFFSET = "messaging.kafka.offset"
MESSAGING_BATCH_MESSAGE_COUNT = "messaging.batch.message_count"
ERROR_TYPE = "error.type"

RW_GRAMMAR = "reasonwire.grammar"
RW_TENANT = "reasonwire.tenant"
RW_RUN_ID = "reasonwire.run.id"
RW_RUN_OUTCOME = "reasonwire.run.outcome"
RW_RUN_FIRST_SEQ = "reasonwire.run.first_seq"
RW_RUN_RECORDS = "reasonwire.run.records"
RW_RUN_EVENTS = "reasonwire.run.events"
RW_USAGE_TOTAL_TOKENS = "reasonwire.usage.total_tokens"
RW_USAGE_TIME_TO_FIRST_REASONING_MS = "reasonwire.usage.time_to_first_reasoning_ms"
RW_USAGE_TIME_TO_FIRST_TEXT_MS = "reasonwire.usage.time_to_first_text_ms"
RW_REASONING_MESSAGES = "reasonwire.reasoning.messages"
RW_TOOL_CALLS = "reasonwire.tool_calls"
RW_RECORD_SEQ = "reasonwire.record.seq"
RW_RECORD_OUTCOME = "reasonwire.record.outcome"
RW_RECORD_EVENTS = "reasonwire.record.events"
RW_RECORD_ARTEFACTS = "reasonwire.record.artefacts"
RW_RECORD_UNKNOWN_EVENTS = "reasonwire.record.unknown_events"
RW_DLQ_CAUSE = "reasonwire.dlq.cause"
RW_DLQ_CODE = "reasonwire.dlq.code"
"""The dead letter's ``rw-dlq-code`` header (:class:`reasonwire.workers.core.delivery.DeadLetterCode`)."""
RW_RECORD_DEAD_LETTERS = "reasonwire.record.dead_letters"
RW_ARTEFACT_KIND = "reasonwire.artefact.kind"
RW_ARTEFACT_SUBTYPE = "reasonwire.artefact.subtype"
RW_ARTEFACT_BYTES = "reasonwire.artefact.bytes"
RW_ARTEFACT_SHA256 = "reasonwire.artefact.sha256"
RW_ARTEFACT_COMPLETE = "reasonwire.artefact.complete"
RW_WARNING_CODE = "reasonwire.warning.code"
RW_WARNING_LINE = "reasonwire.warning.line"
RW_REPLAY_DROP_REASON = "reasonwire.replay.drop_reason"
RW_GUARD_SIGNAL = "reasonwire.guard.signal"
RW_COMPONENT = "reasonwire.component"
"""What failed: ``redis``, ``kafka``, ``store`` (lost data), ``network`` or ``worker`` (reasonwire.workers.ops.health)."""
RW_GUARD_DROPPED = "reasonwire.guard.dropped"
RW_TOKEN_TYPE = "reasonwire.token.type"
"""``input``, ``reasoning`` or ``answer`` (output tokens less reasoning): disjoint parts, so a sum
over the types is the run's total (``gen_ai.token.type`` knows only input and output)."""
"""On a span the guard altered: how many attributes, events or texts it removed."""

# -- value vocabularies ----------------------------------------------------------------

PROVIDER_NAMES = frozenset(g.provider_name for g in Grammar)
GRAMMARS = frozenset(g.value for g in Grammar)
RUN_OUTCOMES = frozenset({"finished", "error", "interrupted", "handed_over", "evicted", "worker_stopped"})
RECORD_OUTCOMES = frozenset({"translated", "control", "skipped_duplicate", "skipped_run_ended", "skipped", "dead_lettered", "rejected"})
DLQ_CODES = frozenset(code.value for code in DeadLetterCode)
DLQ_CAUSES = frozenset({"envelope"}) | DLQ_CODES
"""``envelope``: no run could be named (the headers break ``reasoning.raw.v1``); else the core's
code, e.g. ``malformed_event``: the run's translator rejected it (R7)."""
REPLAY_DROP_REASONS = frozenset({"foreign_issuer", "foreign_tenant", "incomplete_artefact", "withdrawn_by_client", "unverified_client_value", "other"})
GUARD_SIGNALS = frozenset({"span_attribute", "span_event", "span_name", "span_status", "span_link", "log"})
TOPICS = frozenset(topics.ALL)
COMPONENTS = frozenset({"redis", "kafka", "store", "network", "worker"})
TOKEN_TYPES = frozenset({"input", "reasoning", "answer"})

# -- value rules -----------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{0,127}")
"""Ids (run, thread, tenant, consumer group) and model names: one token, no spaces."""
_CODE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
"""Provider stop reasons, warning codes, exception type names."""
_KIND = re.compile(r"[a-z][a-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*){1,4}")
"""Artefact kinds (``anthropic.thinking.signature``)."""
_HEX16 = re.compile(r"[0-9a-f]{16}")
_DIGITS = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class Rule:
    """What one attribute key admits; ``check`` returns the value to keep or None."""

    check: Callable[[Any], Any]
    closed: bool = False
    """Admits only words this code defines (topic names, grammar names, outcomes): no content
    can pass ``check``, so the guard does not scan such a value for registered content."""


def _count(value: Any) -> Any:
    return value if type(value) is int and value >= 0 else None


def _number(value: Any) -> Any:
    return float(value) if type(value) in (int, float) and value >= 0 else None


def _flag(value: Any) -> Any:
    return value if type(value) is bool else None


def _one_of(words: Iterable[str]) -> Rule:
    allowed = frozenset(words)
    return Rule(lambda value: value if type(value) is str and value in allowed else None, closed=True)


def _shaped(pattern: re.Pattern[str]) -> Callable[[Any], Any]:
    return lambda value: value if type(value) is str and pattern.fullmatch(value) else None


def _list_of(item: Callable[[Any], Any], limit: int = 8) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) > limit:
            return None
        kept = tuple(item(v) for v in value)
        return kept if None not in kept else None

    return check


COUNT, NUMBER, FLAG = Rule(_count), Rule(_number), Rule(_flag)
IDENTIFIER, CODE = Rule(_shaped(_IDENTIFIER)), Rule(_shaped(_CODE))

ATTRIBUTES: dict[str, Rule] = {
    GEN_AI_PROVIDER_NAME: _one_of(PROVIDER_NAMES),
    GEN_AI_REQUEST_MODEL: IDENTIFIER,
    GEN_AI_RESPONSE_MODEL: IDENTIFIER,
    GEN_AI_RESPONSE_FINISH_REASONS: Rule(_list_of(_shaped(_CODE))),
    GEN_AI_CONVERSATION_ID: IDENTIFIER,
    GEN_AI_USAGE_INPUT_TOKENS: COUNT,
    GEN_AI_USAGE_OUTPUT_TOKENS: COUNT,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: COUNT,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: COUNT,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: COUNT,
    MESSAGING_SYSTEM: _one_of({"kafka"}),
    MESSAGING_OPERATION_TYPE: _one_of({"process", "receive"}),
    MESSAGING_DESTINATION_NAME: _one_of(TOPICS),
    MESSAGING_DESTINATION_PARTITION_ID: Rule(_shaped(_DIGITS)),
    MESSAGING_CONSUMER_GROUP_NAME: IDENTIFIER,
    MESSAGING_KAFKA_OFFSET: COUNT,
    MESSAGING_BATCH_MESSAGE_COUNT: COUNT,
    ERROR_TYPE: CODE,
    RW_GRAMMAR: _one_of(GRAMMARS),
    RW_TENANT: IDENTIFIER,
    RW_RUN_ID: IDENTIFIER,
    RW_RUN_OUTCOME: _one_of(RUN_OUTCOMES),
    RW_RUN_FIRST_SEQ: COUNT,
    RW_RUN_RECORDS: COUNT,
    RW_RUN_EVENTS: COUNT,
    RW_USAGE_TOTAL_TOKENS: COUNT,
    RW_USAGE_TIME_TO_FIRST_REASONING_MS: NUMBER,
    RW_USAGE_TIME_TO_FIRST_TEXT_MS: NUMBER,
    RW_REASONING_MESSAGES: COUNT,
    RW_TOOL_CALLS: COUNT,
    RW_RECORD_SEQ: COUNT,
    RW_RECORD_OUTCOME: _one_of(RECORD_OUTCOMES),
    RW_RECORD_EVENTS: COUNT,
    RW_RECORD_ARTEFACTS: COUNT,
    RW_RECORD_UNKNOWN_EVENTS: COUNT,
    RW_DLQ_CAUSE: _one_of(DLQ_CAUSES),
    RW_DLQ_CODE: _one_of(DLQ_CODES),
    RW_RECORD_DEAD_LETTERS: COUNT,
    RW_ARTEFACT_KIND: Rule(_shaped(_KIND)),
    RW_ARTEFACT_SUBTYPE: _one_of({"message", "tool-call"}),
    RW_ARTEFACT_BYTES: COUNT,
    RW_ARTEFACT_SHA256: Rule(_shaped(_HEX16)),
    RW_ARTEFACT_COMPLETE: FLAG,
    RW_WARNING_CODE: CODE,
    RW_WARNING_LINE: COUNT,
    RW_REPLAY_DROP_REASON: _one_of(REPLAY_DROP_REASONS),
    RW_GUARD_SIGNAL: _one_of(GUARD_SIGNALS),
    RW_GUARD_DROPPED: COUNT,
    RW_COMPONENT: _one_of(COMPONENTS),
    RW_TOKEN_TYPE: _one_of(TOKEN_TYPES),
}

METRIC_ATTRIBUTES = frozenset(
    {
        GEN_AI_PROVIDER_NAME,
        MESSAGING_DESTINATION_NAME,
        RW_RECORD_OUTCOME,
        RW_DLQ_CAUSE,
        RW_DLQ_CODE,
        RW_ARTEFACT_KIND,
        RW_REPLAY_DROP_REASON,
        RW_GUARD_SIGNAL,
        RW_WARNING_CODE,
        RW_COMPONENT,
        ERROR_TYPE,
        MESSAGING_DESTINATION_PARTITION_ID,
        GEN_AI_RESPONSE_MODEL,
        RW_RUN_OUTCOME,
        RW_TOKEN_TYPE,
    }
)
"""The only attribute keys a metric data point may carry (enforced by an SDK View)."""

STATUS_DESCRIPTION = _shaped(_CODE)
"""A span status description is at most an exception type name."""
