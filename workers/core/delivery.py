"""Record accounting for the normalizer, sans-I/O: why a raw record is dead-lettered, and how
every output is kept inside the broker's size limit.

Theory of operation
-------------------
Every raw record the worker consumes ends in exactly one of three ways: it is *processed*
(translated into a run's events, or a control record that closes a run or confirms its end),
it is *dead-lettered* (a record on ``reasoning.dlq.v1`` with the original key, value and headers
plus ``rw-dlq-reason`` and a machine-readable ``rw-dlq-code``), or it is *counted* as a
redelivery of a record already processed (same offset of the same partition, or a re-sent copy
byte-identical to the accepted one). :class:`DeadLetterCode` is the closed vocabulary of why.

A record whose outputs cannot be published is a poison pill: the broker refuses a record larger
than the topic's ``max.message.bytes`` (``MessageSizeTooLargeError``) every time, and a retried
poll would be refused again forever. So sizes are checked here, before anything is sent
(:class:`OutputLimits`): an event too large for its topic ends its run with ``RUN_ERROR`` code
``too_large`` instead, and a dead letter too large for the DLQ is cut to fit
(:func:`fit_dead_letter`) with the original size and SHA-256 in headers, so an operator can
still match it against the producer's copy. Nothing here does I/O: the worker reads the limits
from the broker once and hands them in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

HEADER_DLQ_CODE: Final = "rw-dlq-code"
"""On ``reasoning.dlq.v1``: why, as a :class:`DeadLetterCode` (``rw-dlq-reason`` says it in prose)."""
HEADER_ORIGINAL_SIZE: Final = "rw-dlq-original-size"
"""On a truncated dead letter: the original value's length in bytes."""
HEADER_SHA256: Final = "rw-dlq-sha256"
"""On a truncated dead letter: hex SHA-256 of the original value."""
HEADER_TRUNCATED: Final = "rw-dlq-truncated"
"""On a truncated dead letter: what was cut (``value``, ``headers``, ``key``, comma-separated)."""

DLQ_HEADERS: Final = frozenset({HEADER_DLQ_CODE, HEADER_ORIGINAL_SIZE, HEADER_SHA256, HEADER_TRUNCATED})
"""Headers the worker sets on a dead letter: copies arriving on a raw record are replaced, not kept."""


class DeadLetterCode(StrEnum):
    """``rw-dlq-code``: why a raw record was dead-lettered (docs/operations.md)."""

    INVALID_ENVELOPE = "invalid_envelope"
    """Headers break the ``reasoning.raw.v1`` contract (missing, not UTF-8, key ≠ run id, no value)."""
    UNREADABLE = "unreadable"
    """Reading the record failed in a way the contract checks did not foresee."""
    UNKNOWN_RUN = "unknown_run"
    """A control record (end / abort) for a run that has no accepted input: no phantom run is made."""
    RUN_ENDED = "run_ended"
    """A provider event after its run ended (finished, failed, timed out or closed by a gap)."""
    SEQUENCE_GAP = "sequence_gap"
    """The record's ``rw-seq`` skipped one: it ended its run with ``RUN_ERROR`` ``sequence_gap``."""
    DUPLICATE_CONFLICT = "duplicate_conflict"
    """An ``rw-seq`` already accepted, with different content."""
    MALFORMED_EVENT = "malformed_event"
    """The translator rejected the event (R7); its run ended with ``RUN_ERROR`` ``malformed_event``."""
    TOO_LARGE = "too_large"
    """An output of this record exceeds its topic's size limit; the run ended ``too_large``."""
    INTERNAL_ERROR = "internal_error"
    """Translating or serializing this record raised; the run ended ``internal_error``."""
    STORE_LOST = "store_lost"
    """The run's journal vanished with the store (a Redis that lost data): resuming it would
    renumber events already published, so nothing is published for it (docs/reliability.md)."""


DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_576
"""Kafka's defaults: topic ``max.message.bytes`` 1,048,588 and producer ``max.request.size`` 1,048,576."""
_BATCH_OVERHEAD: Final = 61 + 64
"""A record batch's header (61 bytes, magic v2) plus slack for the record's own varints."""
_HEADER_OVERHEAD: Final = 10
"""Two varint lengths per header, at most five bytes each."""
_TRUNCATED_KEY: Final = 1024


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """An upper bound of the bytes one record takes in a batch of its own (what the broker checks)."""
    size = len(key or b"") + len(value or b"")
    for name, hvalue in headers:
        size += len(name.encode("utf-8", "surrogatepass")) + len(hvalue or b"") + _HEADER_OVERHEAD
    return size + _BATCH_OVERHEAD


@dataclass(frozen=True)
class OutputLimits:
    """The largest record each output topic takes (``max.message.bytes``, capped by the producer's
    ``max.request.size``), as the worker read them from the broker at start-up."""

    default: int = DEFAULT_MAX_MESSAGE_BYTES
    per_topic: Mapping[str, int] = field(default_factory=dict)

    def limit(self, topic: str) -> int:
        return self.per_topic.get(topic, self.default)

    def fits(self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> bool:
        return record_size(key, value, headers) <= self.limit(topic)


def dead_letter_headers(
    original: Sequence[tuple[str, bytes | None]], reason_header: str, reason: str, code: DeadLetterCode
) -> list[tuple[str, bytes | None]]:
    """The original headers byte for byte (even ones that are not UTF-8, even null values), minus
    any the worker sets itself, then the reason and its code."""
    ours = DLQ_HEADERS | {reason_header}
    headers = [(name, value) for name, value in original if name not in ours]
    headers.append((reason_header, reason.encode()))
    headers.append((HEADER_DLQ_CODE, code.value.encode()))
    return headers


def fit_dead_letter(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]], limit: int
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """The dead letter as it is when it fits ``limit``; otherwise a truncated copy that does.

    The reason, the code, the original size and the SHA-256 of the original value always
    survive; then as many of the original headers as fit (in order), then the head of the value.
    A value is never re-encoded: the copy is a byte prefix of the original.
    """
    if record_size(key, value, headers) <= limit:
        return key, value, headers
    cut: list[str] = []
    data = value or b""
    own = [h for h in headers if h[0] in DLQ_HEADERS or h[0] == "rw-dlq-reason"]
    kept_headers = [h for h in headers if h not in own]
    if key is not None and len(key) > _TRUNCATED_KEY:
        key = key[:_TRUNCATED_KEY]
        cut.append("key")
    marks = [(HEADER_ORIGINAL_SIZE, str(len(data)).encode()), (HEADER_SHA256, hashlib.sha256(data).hexdigest().encode())]
    fixed = [*own, *marks, (HEADER_TRUNCATED, b"key,headers,value")]
    room = limit - record_size(key, b"", fixed)
    survivors: list[tuple[str, bytes | None]] = []
    for header in kept_headers:
        cost = record_size(None, None, [header]) - _BATCH_OVERHEAD
        if cost > room // 2:  # keep half the room for the value's head at least
            cut.append("headers")
            continue
        survivors.append(header)
        room -= cost
    if len(survivors) < len(kept_headers) and "headers" not in cut:
        cut.append("headers")
    head = data[: max(0, room)]
    if len(head) < len(data):
        cut.append("value")
    final = [*survivors, *own, *marks, (HEADER_TRUNCATED, ",".join(dict.fromkeys(cut)).encode())]
    return key, head if value is not None else None, final
