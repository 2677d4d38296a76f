"""How the normalizer's raw-topic consumer is built.

It sees partitions added to the raw topic well within the inactivity timeout: otherwise a run whose ingress moved to a new partition is silent on
its old one for longer than the timeout and ends ``inactivity_timeout``, its remaining records
dead-lettered ``run_ended``. And it fetches with the operator's ``RW_FETCH_*`` settings."""

from __future__ import annotations

import pytest

from reasonwire.workers.ops.intervals import metadata_max_age_ms
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings


@pytest.mark.parametrize(("timeout_s", "expected_ms"), [(300.0, 30_000), (8.0, 1_000), (0.5, 1_000), (80.0, 10_000)])
def test_metadata_age_is_an_eighth_of_the_timeout_between_1_and_30_s(timeout_s: float, expected_ms: int) -> None:
    assert metadata_max_age_ms(WorkerSettings(inactivity_timeout_s=timeout_s)) == expected_ms


def test_the_raw_topic_consumer_is_built_with_that_metadata_age() -> None:
    """The consumer FastStream builds for the raw subscriber (not aiokafka's 5 min default, which
    equals the default inactivity timeout)."""
    app, _ = create_app(WorkerSettings(inactivity_timeout_s=8.0))
    builders = [config.builder for config in app.broker.config.configs if getattr(config, "builder", None) is not None]
    assert builders and all(b.keywords["metadata_max_age_ms"] == 1_000 for b in builders)


def test_the_raw_topic_consumer_fetches_with_the_settings_wait_and_size() -> None:
    """RW_FETCH_MAX_WAIT_MS / RW_FETCH_MIN_BYTES reach the consumer (an operator may trade
    latency for fewer, fuller polls at moderate rates); the defaults are Kafka's, as docs/operations.md
    states."""
    app, _ = create_app(WorkerSettings(fetch_max_wait_ms=7, fetch_min_bytes=1234))
    (subscriber,) = app.broker.subscribers
    assert (subscriber._connection_args["fetch_max_wait_ms"], subscriber._connection_args["fetch_min_bytes"]) == (7, 1234)
    defaults = WorkerSettings()
    assert (defaults.fetch_max_wait_ms, defaults.fetch_min_bytes) == (500, 1)
