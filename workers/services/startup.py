"""The normalizer's start-up checks: its topics, their size limits, the group's committed store
witness, and a store that may drop or lose what the worker writes (an evicting policy, no AOF).

Each answers one question before the worker takes a poll; ``create_app``
(:mod:`reasonwire.workers.services.normalizer_app`) runs them in order, and ``/readyz`` says what
the worker waits for.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from reasonwire.contracts import topics
from reasonwire.contracts.topic_plan import plan
from reasonwire.workers.core.delivery import DEFAULT_MAX_MESSAGE_BYTES, OutputLimits
from reasonwire.workers.core.fence import witnessed
from reasonwire.workers.io import topics_admin
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.io.topics_admin import replication_factor
from reasonwire.workers.ops.settings import WorkerSettings

log = logging.getLogger("reasonwire.normalize")


async def ensure_topics(settings: WorkerSettings) -> dict[str, int]:
    """The normalizer's topics as the plan has them (contracts/topic_plan.py: partitions
    ``RW_PARTITIONS``, replicas ``RW_REPLICATION_FACTOR``, retention, cleanup policy): created
    only with ``RW_CREATE_TOPICS=true`` — else checked, and :class:`~reasonwire.workers.io.topics_admin.TopicsMissing`
    names every absent one. Returns every topic's actual partition count."""
    specs = [s for s in plan(settings.partitions, replication_factor()) if s.name in topics.ALL]
    return await topics_admin.ensure(settings.kafka_bootstrap_servers, specs, create=topics_admin.create_enabled())


async def output_limits(settings: WorkerSettings, max_request_size: int = DEFAULT_MAX_MESSAGE_BYTES) -> OutputLimits:
    """The largest record each output topic takes: its ``max.message.bytes`` (read once, at
    start-up), capped by the producer's ``max.request.size``. The core checks every output
    against it before sending, so an oversized output ends its run (``too_large``) instead of
    failing the poll on every retry. A topic whose config cannot be read keeps Kafka's default."""
    admin = topics_admin.admin_client(settings.kafka_bootstrap_servers)
    await admin.start()
    limits: dict[str, int] = {}
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics.ALL if t != topics.RAW]
        for response in await admin.describe_configs(resources):
            for error_code, _, _, name, entries in response.resources:
                value = next((e[1] for e in entries if e[0] == "max.message.bytes"), None) if not error_code else None
                if value is not None and str(value).isdigit():
                    limits[name] = min(int(value), max_request_size)
    finally:
        await admin.close()
    return OutputLimits(default=max_request_size, per_topic=limits)


async def committed_witness(settings: WorkerSettings) -> tuple[bool, dict[str, int]]:
    """Whether the consumer group committed offsets before — then a store without an epoch is a
    store that lost its data, not a new one — and the highest store write count in the commits'
    metadata, per store epoch id: a store below the count of its own id was restored from an
    older copy (docs/reliability.md)."""
    admin = topics_admin.admin_client(settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(settings.group_id)
    except Exception:  # no such group yet (or an old broker): nothing was committed
        return False, {}
    finally:
        await admin.close()
    return bool(offsets), witnessed(committed.metadata for committed in offsets.values())


async def adopt_committed_witness(settings: WorkerSettings, store: ArtefactStore) -> None:
    """Partitions were assigned: raise the store's witness to the highest write count the
    group's commits carry for its epoch. At start-up the worker reads them once; a worker
    that has been running since then knows only the counts its own writes saw, so a store
    restored to a copy taken after its last write — but before the writes of a worker that
    died and whose partitions it now takes over — would pass. One admin request
    per rebalance; if it fails, the check waits for the worker's own writes, as before."""
    try:
        _, counts = await asyncio.wait_for(committed_witness(settings), 5.0)
    except Exception as exc:
        log.info("could not read the group's committed store write counts (%s)", type(exc).__name__)
        return
    witness = store.witness
    if witness.epoch is not None:
        witness.saw(counts.get(witness.epoch))


async def group_has_offsets(settings: WorkerSettings) -> bool:
    """Whether the consumer group committed offsets before (:func:`committed_witness`)."""
    return (await committed_witness(settings))[0]


EVICTING_POLICIES_OK = ("noeviction",)
"""The ``maxmemory-policy`` values that never drop a key to make room."""


async def refuse_evicting_store(store: ArtefactStore, settings: WorkerSettings) -> str | None:
    """Why the worker must not run on this Redis, or ``None``.

    A Redis that evicts (``allkeys-*``, or ``volatile-*``: every journal and artefact has a
    TTL) drops open runs' journals and stored artefacts without a word: a run resumed from a
    journal that lost entries would be renumbered, and a replay would miss artefacts of runs
    reported finished. Accepted only when the operator says the store is dedicated to
    reasonwire and sized so ``maxmemory`` is never reached (``RW_REDIS_DEDICATED=true``).
    Managed Redis that refuses ``CONFIG`` is not judged (a warning says so)."""
    try:
        policy = (await store.redis.config_get("maxmemory-policy")).get("maxmemory-policy")
    except Exception:
        log.warning("could not read Redis's maxmemory-policy: make sure it is noeviction (docs/reliability.md)")
        return None
    if policy is None or policy in EVICTING_POLICIES_OK or settings.redis_dedicated:
        return None
    return (
        f"Redis maxmemory-policy is {policy}: it may evict open runs' journals and stored artefacts; set it to noeviction, "
        "or set RW_REDIS_DEDICATED=true if this Redis is dedicated to reasonwire and sized never to reach maxmemory"
    )


async def evicting_store(store: ArtefactStore, settings: WorkerSettings) -> tuple[str, dict[str, str]] | None:
    """:func:`refuse_evicting_store` as a start-up obstacle: the worker waits not ready until
    the policy changes (``CONFIG SET maxmemory-policy noeviction`` needs no restart)."""
    refusal = await refuse_evicting_store(store, settings)
    return None if refusal is None else (refusal, {"store_refused": refusal})


async def warn_unless_durable(store: ArtefactStore) -> None:
    """Say at start when Redis would lose acknowledged writes on a crash (no AOF, or
    ``appendfsync`` other than ``always``); managed Redis may refuse ``CONFIG``: then say nothing."""
    try:
        config = await store.redis.config_get("append*")
    except Exception:
        return
    appendonly, fsync = config.get("appendonly"), config.get("appendfsync")
    if appendonly != "yes" or fsync != "always":
        log.warning(
            "Redis persistence is appendonly=%s appendfsync=%s: a Redis crash can lose artefacts of runs already "
            "reported finished (docs/reliability.md recommends appendonly yes, appendfsync always)", appendonly, fsync
        )
