"""Topics as a plan against the real broker: create, describe, diff, check-only."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid

import pytest

from reasonwire.contracts import topic_plan
from reasonwire.contracts.topic_plan import Difference
from reasonwire.workers.io.topics_admin import TopicsMissing, apply, ensure


def _scratch_plan(partitions: int = 3) -> list[topic_plan.TopicSpec]:
    """The real plan under scratch names, so the test owns its topics on a shared broker."""
    tag = uuid.uuid4().hex[:8]
    return [dataclasses.replace(s, name=f"rwtest.{tag}.{s.name}") for s in topic_plan.plan(partitions, 1)]


async def test_apply_creates_the_plan_then_finds_no_difference(services: dict[str, str]) -> None:
    specs = _scratch_plan()
    created, differences = await apply(services["KAFKA_BOOTSTRAP_SERVERS"], specs, create=True)
    assert created == [s.name for s in specs]
    assert differences == []  # partitions, replication, cleanup.policy, retention.ms, min.insync as planned
    created, differences = await apply(services["KAFKA_BOOTSTRAP_SERVERS"], specs, create=True)
    assert (created, differences) == ([], [])


async def test_check_names_what_differs_and_what_is_missing(services: dict[str, str]) -> None:
    specs = _scratch_plan()
    await apply(services["KAFKA_BOOTSTRAP_SERVERS"], specs[:2], create=True)
    wanted = [dataclasses.replace(specs[0], partitions=5), dataclasses.replace(specs[1], config={**specs[1].config, "retention.ms": "1000"}), specs[2]]
    created, differences = await apply(services["KAFKA_BOOTSTRAP_SERVERS"], wanted, create=False)
    assert created == []
    assert differences == [
        Difference(specs[0].name, "partitions", "5", "3"),
        Difference(specs[1].name, "retention.ms", "1000", specs[1].config["retention.ms"]),
        Difference(specs[2].name, "missing"),
    ]


async def test_worker_start_up_without_create_says_which_topics_are_missing(services: dict[str, str]) -> None:
    specs = _scratch_plan()
    await apply(services["KAFKA_BOOTSTRAP_SERVERS"], specs[:1], create=True)
    with pytest.raises(TopicsMissing) as err:
        await ensure(services["KAFKA_BOOTSTRAP_SERVERS"], specs, create=False)
    assert err.value.names == [s.name for s in specs[1:]]
    assert "\n" not in str(err.value) and "RW_CREATE_TOPICS=true" in str(err.value)
    partitions = await ensure(services["KAFKA_BOOTSTRAP_SERVERS"], specs, create=True)
    assert partitions == {s.name: 3 for s in specs}


def test_cli_topics_apply_check_reports_one_line_per_difference(services: dict[str, str]) -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": services["KAFKA_BOOTSTRAP_SERVERS"], "RW_PARTITIONS": "97"}
    out = subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", "topics", "apply", "--check"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith("differs reasoning.") for line in lines)
    # 97 partitions differs from any topic that exists: every topic of the plan is named, as missing or by its partitions
    named = {line.split()[1].rstrip(":") for line in lines if line.endswith(": missing") or "partitions is" in line and "plan says 97" in line}
    assert named == {r.name for r in topic_plan.ROLES}


def test_cli_topics_apply_unreachable_broker_is_one_line() -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    out = subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", "topics", "apply"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 3
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
