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

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from reasonwire.contracts.topic_plan import ActualTopic, Difference, TopicSpec, diff, missing
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


async def _until_visible(admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec], created: list[str], timeout_s: float = 15.0) -> dict[str, ActualTopic]:
    """The cluster after a create: a new topic shows in the metadata only once its partitions
    have leaders, so ask again (briefly) rather than report it missing."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        actual = await describe(admin, (s.name for s in specs))
        if all(name in actual for name in created) or asyncio.get_running_loop().time() > deadline:
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
