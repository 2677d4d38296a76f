"""Clean CLI failures that need a real service on one side: the broker down while
Redis answers, and the commands still working when both answer.

Pure cases (bad settings, Redis down, translate input) are in tests/unit/test_cli_errors.py.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.unit.test_cli_errors import NOWHERE, one_line, run


@pytest.mark.parametrize("command", [["worker", "normalize"], ["worker", "replay"], ["demo"]], ids=" ".join)
def test_broker_down_is_one_line_naming_kafka_bootstrap_servers_exit_3_within_seconds(
    command: list[str], services: dict[str, str]
) -> None:
    env = {"REDIS_URL": services["REDIS_URL"], "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{NOWHERE}"}
    started = time.monotonic()
    done = run(*command, env=env, timeout=45)
    line = one_line(done)
    assert done.returncode == 3
    assert "Kafka" in line and "KAFKA_BOOTSTRAP_SERVERS" in line and f"127.0.0.1:{NOWHERE}" in line
    assert time.monotonic() - started < 45


def test_a_bad_setting_is_refused_before_any_service_is_touched(services: dict[str, str]) -> None:
    """Both services answer: the bad value is still the one line, and no topic or group was made."""
    done = run("worker", "normalize", env={**services, "RW_PARTITIONS": "eight", "RW_GROUP_ID": f"never-{uuid.uuid4().hex[:6]}"})
    assert done.returncode == 2 and "RW_PARTITIONS" in one_line(done)


def test_erase_and_replay_still_work_when_the_services_answer(services: dict[str, str]) -> None:
    """The checks let a healthy command through (a control for the failures above)."""
    thread = f"cli-{uuid.uuid4().hex[:8]}"
    erased = run("erase", "--tenant", "cli-test", "--thread", thread, env=services)
    assert erased.returncode == 0, erased.stderr
    assert json.loads(erased.stdout) == {"tenant": "cli-test", "thread": thread, "removed_artefacts": [], "removed_journals": []}
    replayed = run("replay", "--provider", "anthropic-messages", "--tenant", "cli-test", "--thread-id", thread, "-", env=services, stdin=b"[]")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == {"messages": []}
