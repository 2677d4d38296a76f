"""Worker configuration from the environment (documented in docs/operations.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSettings:
    kafka_bootstrap_servers: str = "127.0.0.1:9092"
    """``KAFKA_BOOTSTRAP_SERVERS``."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    """``REDIS_URL``."""
    group_id: str = "reasonwire-normalizer"
    """``RW_GROUP_ID``: the consumer group; every replica of the normalizer shares it."""
    partitions: int = 8
    """``RW_PARTITIONS``: partitions for topics reasonwire creates; caps the number of useful replicas."""
    artefact_ttl_s: int = 7 * 24 * 3600
    """``RW_ARTEFACT_TTL_S``: how long opaque state is kept for continuity (P7)."""
    journal_ttl_s: int = 24 * 3600
    """``RW_JOURNAL_TTL_S``: how long an open run's journal and an ended-run marker live."""
    inactivity_timeout_s: float = 300.0
    """``RW_INACTIVITY_TIMEOUT_S``: a run with no input for this long is closed as interrupted."""
    max_batch: int = 200
    """``RW_MAX_BATCH``: raw records handled per poll (one Redis transaction, one commit)."""
    max_in_flight: int = 4
    """``RW_MAX_IN_FLIGHT``: polls whose writes may be in flight at once (pipelined, committed in order)."""
    policy_file: str | None = None
    """``RW_POLICY_FILE``: JSON retention/audience policy (contracts.policy.PolicyBook); default policy if unset."""
    health_port: int = 8080
    """``RW_HEALTH_PORT``: port of ``/healthz`` and ``/readyz`` (0 disables; docs/reliability.md)."""
    backoff_initial_s: float = 0.1
    """``RW_BACKOFF_INITIAL_S``: first wait after a failed poll (doubles per failure, with jitter)."""
    backoff_max_s: float = 5.0
    """``RW_BACKOFF_MAX_S``: the longest wait; service resumes at most this long after a recovery."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> WorkerSettings:
        env = dict(os.environ if env is None else env)
        d = cls()
        return cls(
            kafka_bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS", d.kafka_bootstrap_servers),
            redis_url=env.get("REDIS_URL", d.redis_url),
            group_id=env.get("RW_GROUP_ID", d.group_id),
            partitions=int(env.get("RW_PARTITIONS", d.partitions)),
            artefact_ttl_s=int(env.get("RW_ARTEFACT_TTL_S", d.artefact_ttl_s)),
            journal_ttl_s=int(env.get("RW_JOURNAL_TTL_S", d.journal_ttl_s)),
            inactivity_timeout_s=float(env.get("RW_INACTIVITY_TIMEOUT_S", d.inactivity_timeout_s)),
            max_batch=int(env.get("RW_MAX_BATCH", d.max_batch)),
            max_in_flight=int(env.get("RW_MAX_IN_FLIGHT", d.max_in_flight)),
            policy_file=env.get("RW_POLICY_FILE") or None,
            health_port=int(env.get("RW_HEALTH_PORT", d.health_port)),
            backoff_initial_s=float(env.get("RW_BACKOFF_INITIAL_S", d.backoff_initial_s)),
            backoff_max_s=float(env.get("RW_BACKOFF_MAX_S", d.backoff_max_s)),
        )
