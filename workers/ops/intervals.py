"""Intervals the normalizer derives from its settings (one place: the worker, its app and its tests read them here)."""

from __future__ import annotations

from reasonwire.workers.ops.settings import WorkerSettings


def expiry_interval(settings: WorkerSettings) -> float:
    """Seconds between expiry ticks: a quarter of the inactivity timeout, between 0.05 and 5."""
    return max(0.05, min(settings.inactivity_timeout_s / 4, 5.0))


def metadata_max_age_ms(settings: WorkerSettings) -> int:
    """How old the consumer's view of the raw topic may grow: an eighth of the inactivity
    timeout, between 1 and 30 s. Partitions added to the raw topic are read only once the group
    rebalances, which its leader starts when its metadata shows them; with aiokafka's default
    (5 min, the default timeout too) runs whose ingress moved to a new partition went silent
    on the old one for longer than the timeout and were ended ``inactivity_timeout`` (make
    chaos ``raw_partitions``). One small metadata request per interval and worker."""
    return int(1000 * max(1.0, min(settings.inactivity_timeout_s / 8, 30.0)))
