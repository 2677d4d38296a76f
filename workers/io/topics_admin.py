"""The topic plan against a real cluster: read what exists, create what is missing (thin I/O).

Decisions live in :mod:`reasonwire.contracts.topic_plan` (the plan, the diff); this module only talks to
the broker's admin API. ``reasonwire topics apply`` and the worker's start-up (with
``RW_CREATE_TOPICS=true``) create; everything else only checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from reasonwire.contracts import topics
from reasonwire.contracts.topic_plan import ActualTopic, Difference, TopicSpec, changes, diff, missing, refusal
from reasonwire.workers.io.kafka_security import client_kwargs
from reasonwire.workers.ops.health import HealthServer, wait_until_allowed

T = TypeVar("T")


class TopicsMissing(RuntimeError):
    """Topics the plan needs are absent and this process may not create them."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        super().__init__(
            f"missing Kafka topics: {', '.join(self.names)} (create them with `reasonwire topics apply`, or set RW_CREATE_TOPICS=true)"
        )


def create_enabled(env: Mapping[str, str] | None = None) -> bool:
    """``RW_CREATE_TOPICS=true``: this process may create the topics it needs (``make run``, the
    tests); unset (the default), it only checks they exist."""
    from reasonwire.workers.ops.settings import TopicSettings

    return TopicSettings.from_env(env).create_topics


def replication_factor(env: Mapping[str, str] | None = None) -> int:
    """``RW_REPLICATION_FACTOR`` (default 1): replicas of the topics a process creates."""
    from reasonwire.workers.ops.settings import TopicSettings

    return TopicSettings.from_env(env).replication_factor


def admin_client(bootstrap_servers: str) -> AIOKafkaAdminClient:
    """The admin client, secured like every other client (:func:`reasonwire.workers.io.kafka_security.client_kwargs`)."""
    return AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **client_kwargs())


async def describe(admin: AIOKafkaAdminClient, names: Iterable[str]) -> dict[str, ActualTopic]:
    """Partitions, replication and the planned config keys of the named topics that exist."""
    wanted = list(names)
    existing = set(await admin.list_topics())
    present = [n for n in wanted if n in existing]
    if not present:
        return {}
    described = {d["topic"]: d for d in await admin.describe_topics(present) if d.get("partitions")}
    configs = await _configs(admin, list(described))
    return {
        name: ActualTopic(len(d["partitions"]), max((len(p["replicas"]) for p in d["partitions"]), default=0), configs.get(name, {}))
        for name, d in described.items()
    }


async def _until_visible(
    admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec], created: list[str], timeout_s: float = 15.0, *, grown: Mapping[str, int] | None = None
) -> dict[str, ActualTopic]:
    """The cluster after a create (or added partitions): a new topic or partition shows in the
    metadata only once it has a leader, so ask again (briefly) rather than report it missing."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        actual = await describe(admin, (s.name for s in specs))
        seen = all(name in actual for name in created) and all(name in actual and actual[name].partitions >= n for name, n in (grown or {}).items())
        if seen or asyncio.get_running_loop().time() > deadline:
            return actual
        await asyncio.sleep(0.2)


async def _configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.resources:
            _error, _message, _type, name, entries = resource[:5]
            out[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
    return out


async def apply(bootstrap_servers: str, specs: Sequence[TopicSpec], *, create: bool) -> tuple[list[str], list[Difference]]:
    """Create the missing topics when ``create``; returns (created, differences left)."""
    admin = admin_client(bootstrap_servers)
    await admin.start()
    try:
        actual = await describe(admin, (s.name for s in specs))
        created: list[str] = []
        absent = [s for s in specs if s.name not in actual]
        if create and absent:
            new = [NewTopic(s.name, s.partitions, s.replication, topic_configs=dict(s.config)) for s in absent]
            with contextlib.suppress(TopicAlreadyExistsError):  # another replica created them first
                await admin.create_topics(new)
            created = [s.name for s in absent]
            actual = await _until_visible(admin, specs, created)
        return created, diff(specs, actual)
    finally:
        await admin.close()


async def ensure(bootstrap_servers: str, specs: Sequence[TopicSpec], *, create: bool) -> dict[str, int]:
    """A worker's start-up: create (``create``) or check the topics; raise :class:`TopicsMissing`
    naming every absent one. Other differences (retention, replication) are for ``topics apply``
    to report — a worker runs on a topic with a different retention. Returns partitions per topic."""
    _, differences = await apply(bootstrap_servers, specs, create=create)
    absent = missing(differences)
    if absent:
        raise TopicsMissing(absent)
    wanted = {s.name: s.partitions for s in specs}
    changed = {d.topic: int(d.actual or 0) for d in differences if d.what == "partitions"}
    return {name: changed.get(name, n) for name, n in wanted.items()}


class UnsafeChange(RuntimeError):
    """The plan asks for a change ``topics apply`` refuses (fewer partitions, another replication
    factor): one line naming them all; nothing was changed."""


class NotDrained(RuntimeError):
    """Partitions would be added to the raw topic while the normalizer group has not consumed it."""

    def __init__(self, group: str, lag: int, waited_s: float) -> None:
        super().__init__(
            f"not adding partitions: the normalizer group {group!r} still has {lag} records of {topics.RAW} to consume "
            f"after {waited_s:g}s — stop the ingresses until its lag is 0 (docs/scaling.md), or pass --live "
            "(runs caught mid-move then end sequence_gap)"
        )
        self.lag = lag


@dataclass
class Applied:
    """What ``topics apply`` did and what still differs."""

    created: list[str] = field(default_factory=list)
    grown: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Topic → (partitions before, after)."""
    differences: list[Difference] = field(default_factory=list)


async def raw_lag(bootstrap_servers: str, group: str) -> int:
    """Records of the raw topic the normalizer group has not committed (from the start of the
    log for a partition it never committed): 0 means every record was consumed — and so journaled
    — by its owner."""
    admin = admin_client(bootstrap_servers)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, **client_kwargs())
    await admin.start()
    await consumer.start()
    try:
        parts = [TopicPartition(topics.RAW, p) for p in consumer.partitions_for_topic(topics.RAW) or await _partitions(consumer)]
        committed = await _committed(admin, group, parts)
        ends, starts = await consumer.end_offsets(parts), await consumer.beginning_offsets(parts)
        lag = 0
        for tp in parts:
            done = committed.get(tp)
            position = done.offset if done is not None and done.offset >= 0 else starts[tp]
            lag += max(0, ends[tp] - position)
        return lag
    finally:
        await consumer.stop()
        await admin.close()


async def _committed(admin: AIOKafkaAdminClient, group: str, parts: list[TopicPartition], timeout_s: float = 20.0) -> dict[TopicPartition, Any]:
    """The group's committed offsets; asked again while the broker is still electing the group's
    coordinator (a fresh cluster creates ``__consumer_offsets`` on the first such request)."""
    from aiokafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError

    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            return dict(await admin.list_consumer_group_offsets(group, partitions=parts))
        except (CoordinatorNotAvailableError, CoordinatorLoadInProgressError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _partitions(consumer: AIOKafkaConsumer) -> set[int]:
    await consumer._client.force_metadata_update()  # noqa: SLF001 - a consumer's first metadata
    return consumer.partitions_for_topic(topics.RAW) or set()


async def wait_drained(bootstrap_servers: str, group: str, timeout_s: float) -> None:
    """Until the normalizer group's lag on the raw topic is 0 (:class:`NotDrained` after ``timeout_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (lag := await raw_lag(bootstrap_servers, group)) > 0:
        if loop.time() >= deadline:
            raise NotDrained(group, lag, timeout_s)
        await asyncio.sleep(1.0)


async def apply_plan(
    bootstrap_servers: str, specs: Sequence[TopicSpec], *, check: bool, group: str, live: bool = False, drain_timeout_s: float = 60.0
) -> Applied:
    """``reasonwire topics apply``: refuse an unsafe change (:class:`UnsafeChange`, before anything
    is changed); unless ``check``, create the missing topics and add the partitions the plan has
    more of — the raw topic's only once the normalizer group has consumed it (:func:`wait_drained`;
    ``live`` skips the wait). Returns what was done and what still differs."""
    admin = admin_client(bootstrap_servers)
    await admin.start()
    try:
        actual = await describe(admin, (s.name for s in specs))
        todo = changes(diff(specs, actual))
        if todo.refused:
            raise UnsafeChange(refusal(todo.refused))
        done = Applied()
        if check:
            done.differences = diff(specs, actual)
            return done
        if todo.grow:
            if topics.RAW in todo.grow and not live:
                await wait_drained(bootstrap_servers, group, drain_timeout_s)
            await admin.create_partitions({name: NewPartitions(total_count=n) for name, n in todo.grow.items()})
            done.grown = {name: (actual[name].partitions, n) for name, n in todo.grow.items()}
        absent = [s for s in specs if s.name not in actual]
        if absent:
            with contextlib.suppress(TopicAlreadyExistsError):  # another replica created them first
                await admin.create_topics([NewTopic(s.name, s.partitions, s.replication, topic_configs=dict(s.config)) for s in absent])
            done.created = [s.name for s in absent]
        done.differences = diff(specs, await _until_visible(admin, specs, done.created, grown=todo.grow))
        return done
    finally:
        await admin.close()
async def wait_for_topics(ensure: Callable[[], Awaitable[T]], health: HealthServer | None = None, *, interval_s: float = 5.0) -> T:
    """``ensure()`` (create or check the topics), again every ``interval_s`` while it finds
    topics missing: one warning line when the wait starts, ``/readyz`` 503 naming them meanwhile,
    one line when they are there. ``RW_CREATE_TOPICS=true`` creates them on the first call."""
    result: list[T] = []

    async def obstacle() -> tuple[str, dict[str, Any]] | None:
        try:
            result.append(await ensure())
        except TopicsMissing as exc:
            return f"{exc}; waiting for them", {"topics_missing": exc.names}
        return None

    await wait_until_allowed(obstacle, health, interval_s=interval_s, resumed="the topics are there: starting")
    return result[-1]


@contextlib.contextmanager
def start_failures(logger: logging.Logger) -> Iterator[None]:
    """A start-up the settings doomed — topics missing, SASL refused, TLS failed, no broker —
    ends with one line naming the cause (exit 2 for settings, 3 for an unreachable service),
    not a traceback: :func:`reasonwire.workers.io.kafka_security.describe_failure` says which."""
    from aiokafka.errors import KafkaConnectionError

    from reasonwire.workers.io.kafka_security import KafkaSecurityError, describe_failure, witness

    with witness() as seen:
        try:
            yield
        except (TopicsMissing, KafkaSecurityError) as exc:
            logger.error("%s", exc)
            raise SystemExit(2) from None
        except KafkaConnectionError as exc:
            logger.error("%s", describe_failure(exc, seen.seen))
            raise SystemExit(3) from None
