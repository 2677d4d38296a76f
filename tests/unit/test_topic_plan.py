"""The topic plan (contracts/topic_plan.py): pure data and a pure diff."""

from __future__ import annotations

import pytest

from reasonwire.contracts import topic_plan, topics
from reasonwire.contracts.topic_plan import ActualTopic, Difference, diff, plan


def _topic_constants() -> set[str]:
    return {v for k, v in vars(topics).items() if k.isupper() and isinstance(v, str) and v.startswith("reasoning.")}


def test_plan_names_every_topic_of_contracts_once() -> None:
    names = [s.name for s in plan(4)]
    assert len(names) == len(set(names))
    assert set(names) == _topic_constants()


def test_usage_is_compacted_keyed_state_and_streams_are_deleted() -> None:
    specs = {s.name: s for s in plan(4)}
    assert specs[topics.USAGE].config["cleanup.policy"] == "compact,delete"
    for name in (topics.RAW, topics.EVENTS, topics.EVENTS_PUBLIC, topics.DLQ):
        assert specs[name].config["cleanup.policy"] == "delete"
        assert int(specs[name].config["retention.ms"]) > 0


@pytest.mark.parametrize(("replication", "min_isr"), [(1, "1"), (2, "1"), (3, "2"), (5, "2")])
def test_min_insync_follows_replication(replication: int, min_isr: str) -> None:
    assert {s.config["min.insync.replicas"] for s in plan(8, replication)} == {min_isr}
    assert {(s.partitions, s.replication) for s in plan(8, replication)} == {(8, replication)}


def test_plan_refuses_zero() -> None:
    with pytest.raises(ValueError):
        plan(0)


def _as_actual(specs: list[topic_plan.TopicSpec]) -> dict[str, ActualTopic]:
    return {s.name: ActualTopic(s.partitions, s.replication, dict(s.config)) for s in specs}


def test_diff_of_a_matching_cluster_is_empty() -> None:
    specs = plan(4, 3)
    actual = _as_actual(specs)
    actual[topics.USAGE] = ActualTopic(4, 3, {**actual[topics.USAGE].config, "cleanup.policy": "delete,compact"})
    assert diff(specs, actual) == []


def test_diff_names_missing_partitions_replication_and_config() -> None:
    specs = plan(4, 3)
    actual = _as_actual(specs)
    del actual[topics.DLQ]
    actual[topics.RAW] = ActualTopic(1, 3, actual[topics.RAW].config)
    actual[topics.EVENTS] = ActualTopic(4, 1, actual[topics.EVENTS].config)
    actual[topics.USAGE] = ActualTopic(4, 3, {**actual[topics.USAGE].config, "cleanup.policy": "delete"})
    found = diff(specs, actual)
    assert found == [
        Difference(topics.RAW, "partitions", "4", "1"),
        Difference(topics.EVENTS, "replication", "3", "1"),
        Difference(topics.USAGE, "cleanup.policy", "compact,delete", "delete"),
        Difference(topics.DLQ, "missing"),
    ]
    assert topic_plan.missing(found) == [topics.DLQ]
    assert str(found[0]) == "reasoning.raw.v1: partitions is 1, plan says 4"
    assert str(found[-1]) == "reasoning.dlq.v1: missing"


def test_render_lists_every_topic_with_its_policy() -> None:
    text = topic_plan.render(plan(6, 3))
    lines = text.splitlines()
    assert lines[0].split()[:6] == ["topic", "partitions", "replication", "min.insync", "retention", "cleanup.policy"]
    usage = next(line for line in lines if line.startswith(topics.USAGE))
    assert usage.split()[1:6] == ["6", "3", "2", "30d", "compact,delete"]
    assert len(lines) == 1 + len(topic_plan.ROLES)


def test_apply_grows_partitions_and_refuses_a_decrease_or_another_replication_in_one_line() -> None:
    """``topics apply``: more partitions than the topic has is the change it makes; fewer, or
    another replication factor, is refused — eight topics at the same count in one clause."""
    from reasonwire.contracts.topic_plan import ActualTopic, changes, diff, plan, refusal

    at8 = {s.name: ActualTopic(8, 1, s.config) for s in plan(8)}
    grow = changes(diff(plan(12), at8))
    assert grow.grow == {s.name: 12 for s in plan(12)} and grow.refused == []
    assert changes(diff(plan(8), at8)) == changes([])
    shrink = changes(diff(plan(4, 3), at8))
    assert shrink.grow == {}
    line = refusal(shrink.refused)
    assert "\n" not in line and line.startswith("refused, nothing changed: ")
    assert "reasoning.raw.v1 and 7 more topics: partitions is 8, the plan says 4" in line
    assert "replication is 1, the plan says 3" in line and "RW_REPLICATION_FACTOR=1" in line
