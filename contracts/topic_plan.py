"""The topic plan (``reasonwire.topics.v1``): every topic reasonwire reads or writes, as data.

``reasonwire topics plan`` prints it, ``reasonwire topics apply`` creates what is missing,
adds the partitions the plan has more of (:func:`changes`; never removes one, never changes a
replication factor: :func:`refusal`) and says what else differs; the worker creates topics itself only with ``RW_CREATE_TOPICS=true``
(``make run`` and the tests), and otherwise checks they exist. Where topics are managed by
ACLs or a platform team, the plan is what to hand over.

Cleanup policy. Every topic is an event stream (``delete``) except usage: one
:class:`reasonwire.contracts.usage.UsageRecord` per finished run, keyed by run id, i.e. keyed state —
an at-least-once retry may publish a run's usage twice, and compaction keeps the last one
per run (``compact,delete``: compacted, and still dropped after the retention).

Retention (ms) is a default for a deployment to adjust; it never bounds what a replay can
use — replay reads Redis, not Kafka.

The plan is pure: :func:`plan` builds it from the partition count and replication factor,
:func:`diff` compares it with what a broker reports. The admin I/O is in
:mod:`reasonwire.workers.io.topics_admin`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from reasonwire.contracts import topics

VERSION: Final = "reasonwire.topics.v1"

HOUR_MS: Final = 3600 * 1000
DAY_MS: Final = 24 * HOUR_MS


@dataclass(frozen=True)
class TopicRole:
    """What a topic is for (the part of the plan that does not depend on the cluster)."""

    name: str
    key: str
    """What the record key is: it decides the partition, so what stays in order."""
    retention_ms: int
    cleanup_policy: str = "delete"
    summary: str = ""


ROLES: Final[tuple[TopicRole, ...]] = (
    TopicRole(topics.RAW, "run id", 3 * DAY_MS, summary="provider event bytes, one event per record (ingress → normalizer)"),
    TopicRole(topics.EVENTS, "run id", 7 * DAY_MS, summary="full AG-UI event stream for trusted services"),
    TopicRole(topics.EVENTS_PUBLIC, "run id", 7 * DAY_MS, summary="audience-filtered AG-UI stream for end-user UIs"),
    TopicRole(topics.USAGE, "run id", 30 * DAY_MS, "compact,delete", "one usage record per finished run (keyed state)"),
    TopicRole(topics.DLQ, "original key", 14 * DAY_MS, summary="bad input: original bytes and headers plus a reason"),
    TopicRole(topics.REPLAY_REQUESTS, "thread id", 1 * HOUR_MS, summary="replay requests (request/reply)"),
    TopicRole(topics.REPLAY_REPLIES, "request id", 1 * HOUR_MS, summary="replay replies"),
    TopicRole(topics.REQUESTS, "thread id", 1 * DAY_MS, summary="run requests from the gateway to agent services"),
)
"""Every topic of :mod:`reasonwire.contracts.topics`, once (a test holds the two together)."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic as it should be on a cluster."""

    name: str
    partitions: int
    replication: int
    config: Mapping[str, str] = field(default_factory=dict)


def plan(partitions: int, replication: int = 1) -> list[TopicSpec]:
    """The plan for a cluster: every role with ``partitions`` partitions and ``replication``
    replicas; ``min.insync.replicas`` is 2 where there are at least 3 replicas (one broker
    may be down and an ``acks=all`` write still needs a second copy), else 1."""
    if partitions < 1 or replication < 1:
        raise ValueError("partitions and replication must be at least 1")
    min_isr = 2 if replication >= 3 else 1
    return [
        TopicSpec(
            role.name,
            partitions,
            replication,
            {"cleanup.policy": role.cleanup_policy, "retention.ms": str(role.retention_ms), "min.insync.replicas": str(min_isr)},
        )
        for role in ROLES
    ]


@dataclass(frozen=True)
class ActualTopic:
    """What a broker reports for one topic."""

    partitions: int
    replication: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    """One way a topic differs from the plan; ``wanted``/``actual`` are ``None`` for a missing topic."""

    topic: str
    what: str
    """``missing``, ``partitions``, ``replication`` or a config name."""
    wanted: str | None = None
    actual: str | None = None

    def __str__(self) -> str:
        if self.what == "missing":
            return f"{self.topic}: missing"
        return f"{self.topic}: {self.what} is {self.actual}, plan says {self.wanted}"


def diff(wanted: Iterable[TopicSpec], actual: Mapping[str, ActualTopic]) -> list[Difference]:
    """How the cluster differs from the plan, in plan order. Fewer partitions than planned is a
    difference (it caps the useful workers); more is one too — the key → partition mapping, and
    so a run's order across a resize, is not something to change silently."""
    out: list[Difference] = []
    for spec in wanted:
        have = actual.get(spec.name)
        if have is None:
            out.append(Difference(spec.name, "missing"))
            continue
        if have.partitions != spec.partitions:
            out.append(Difference(spec.name, "partitions", str(spec.partitions), str(have.partitions)))
        if have.replication != spec.replication:
            out.append(Difference(spec.name, "replication", str(spec.replication), str(have.replication)))
        for name, value in spec.config.items():
            if _normal(name, have.config.get(name)) != _normal(name, value):
                out.append(Difference(spec.name, name, value, have.config.get(name)))
    return out


@dataclass(frozen=True)
class Changes:
    """What ``reasonwire topics apply`` does about the differences of a topic that exists."""

    grow: Mapping[str, int]
    """Topic → the plan's partition count, where the topic has fewer: the one change Kafka makes
    in place (partitions are only ever added) and the workers follow (docs/scaling.md)."""
    refused: list[Difference]
    """Differences no apply may make: fewer partitions (Kafka cannot remove one; a run's key would
    map elsewhere and its records be read out of order) and another replication factor (a
    reassignment of every partition's replicas, for an operator with ``kafka-reassign-partitions``)."""


def changes(differences: Iterable[Difference]) -> Changes:
    """Sort the differences into the partitions to add and the changes refused (the rest — a
    config value — is only reported)."""
    grow: dict[str, int] = {}
    refused: list[Difference] = []
    for d in differences:
        if d.what == "partitions" and int(d.wanted or 0) > int(d.actual or 0):
            grow[d.topic] = int(d.wanted or 0)
        elif d.what in ("partitions", "replication"):
            refused.append(d)
    return Changes(grow, refused)


def refusal(refused: Iterable[Difference]) -> str:
    """One line for every refused change, grouped by what and by the values (eight topics at the
    same count are one clause, not eight lines)."""
    groups: dict[tuple[str, str | None, str | None], list[str]] = {}
    for d in refused:
        groups.setdefault((d.what, d.actual, d.wanted), []).append(d.topic)
    clauses = []
    for (what, actual, wanted), names in groups.items():
        where = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more topics"
        if what == "partitions":
            why = f"Kafka cannot remove partitions: set RW_PARTITIONS={actual}, or recreate the topics"
        else:
            why = f"apply does not move replicas: set RW_REPLICATION_FACTOR={actual}, or reassign them with kafka-reassign-partitions"
        clauses.append(f"{where}: {what} is {actual}, the plan says {wanted} ({why})")
    return "refused, nothing changed: " + "; ".join(clauses)


def missing(differences: Iterable[Difference]) -> list[str]:
    return [d.topic for d in differences if d.what == "missing"]


def _normal(name: str, value: str | None) -> str | None:
    """``compact,delete`` and ``delete,compact`` are the same policy."""
    if value is None or name != "cleanup.policy":
        return value
    return ",".join(sorted(p.strip() for p in value.split(",")))


def render(specs: Iterable[TopicSpec]) -> str:
    """The plan as a table (``reasonwire topics plan``)."""
    roles = {r.name: r for r in ROLES}
    rows = [("topic", "partitions", "replication", "min.insync", "retention", "cleanup.policy", "key")]
    for s in specs:
        rows.append(
            (
                s.name,
                str(s.partitions),
                str(s.replication),
                s.config.get("min.insync.replicas", "-"),
                _duration(int(s.config.get("retention.ms", "-1"))),
                s.config.get("cleanup.policy", "delete"),
                roles[s.name].key if s.name in roles else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _duration(ms: int) -> str:
    if ms < 0:
        return "forever"
    if ms % DAY_MS == 0:
        return f"{ms // DAY_MS}d"
    if ms % HOUR_MS == 0:
        return f"{ms // HOUR_MS}h"
    return f"{ms}ms"
