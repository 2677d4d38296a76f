"""Worker settings: one typed, validated object whose fields are the documented variables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from reasonwire.workers.ops.errors import ConfigurationError
from reasonwire.workers.ops.settings import SETTINGS_CLASSES, WorkerSettings, all_env_names, describe, show_default

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: `make test` exports KAFKA_BOOTSTRAP_SERVERS / REDIS_URL."""
    import os

    for name in list(os.environ):
        if name.startswith("RW_") or name in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"):
            monkeypatch.delenv(name)


def test_the_fields_are_exactly_the_documented_variables() -> None:
    """Every variable of every command's settings, and only those, documented once."""
    table = (ROOT / "docs" / "operations.md").read_text().split("## Configuration (environment)")[1].split("\n## ")[0]
    documented = re.findall(r"^\| `([A-Z_]+)` \|", table, flags=re.M)
    assert len(documented) == len(set(documented))
    assert set(documented) == set(all_env_names())


def test_documented_defaults_are_the_model_defaults() -> None:
    table = (ROOT / "docs" / "operations.md").read_text().split("## Configuration (environment)")[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]+) \|", table, flags=re.M))
    for kind in SETTINGS_CLASSES:
        for name, variable in kind.env_names().items():
            documented = rows[variable].strip().strip("`")
            assert documented == show_default(kind.model_fields[name].default), variable


def test_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("REDIS_URL", "rediss://r:6380/2")
    monkeypatch.setenv("RW_PARTITIONS", "12")
    monkeypatch.setenv("RW_INACTIVITY_TIMEOUT_S", "2.5")
    monkeypatch.setenv("RW_REPLAY_GROUP_ID", "replayers")
    monkeypatch.setenv("RW_POLICY_FILE", "")  # empty = unset, as before the model
    s = WorkerSettings.from_env()
    assert (s.kafka_bootstrap_servers, s.redis_url, s.partitions, s.inactivity_timeout_s) == ("k1:9092,k2:9092", "rediss://r:6380/2", 12, 2.5)
    assert (s.replay_group_id, s.policy_file, s.group_id) == ("replayers", None, "reasonwire-normalizer")


def test_keyword_construction_by_field_name_still_works_and_is_frozen() -> None:
    s = WorkerSettings(kafka_bootstrap_servers="h:1", redis_url="redis://h:2/0", group_id="g", partitions=4, inactivity_timeout_s=30)
    assert (s.partitions, s.group_id) == (4, "g")
    with pytest.raises(ValidationError):
        s.partitions = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RW_PARTITIONS", "eight"),
        ("RW_PARTITIONS", "0"),
        ("RW_ARTEFACT_TTL_S", "-5"),
        ("RW_JOURNAL_TTL_S", "1.5"),
        ("RW_INACTIVITY_TIMEOUT_S", "inf"),
        ("RW_MAX_BATCH", "many"),
        ("RW_MAX_IN_FLIGHT", "0"),
        ("KAFKA_BOOTSTRAP_SERVERS", "h:99999"),
        ("KAFKA_BOOTSTRAP_SERVERS", ":9092"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("REDIS_URL", "redis://h:port/0"),
        ("RW_POLICY_FILE", "/no/such/policy.json"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        WorkerSettings.from_env()
    message = str(caught.value)
    assert "\n" not in message and variable in message


def test_every_bad_variable_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RW_PARTITIONS", "eight")
    monkeypatch.setenv("RW_MAX_BATCH", "0")
    with pytest.raises(ConfigurationError, match="RW_PARTITIONS.*RW_MAX_BATCH"):
        WorkerSettings.from_env()


def test_a_redis_url_is_never_quoted_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "http://:s3cret@cache:6379/0")
    with pytest.raises(ConfigurationError) as caught:
        WorkerSettings.from_env()
    assert "REDIS_URL" in str(caught.value) and "s3cret" not in str(caught.value)


def test_a_valid_policy_file_is_accepted_and_an_invalid_one_refused(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text('{"default": {"opaque_state": {"store": true, "ttl_s": 3600}}, "tenants": {}}')
    assert WorkerSettings(policy_file=str(good)).policy_file == str(good)
    bad = tmp_path / "bad.json"
    bad.write_text('{"default": {"public": {"reasoning": "all", "encrypted_values": true}}}')
    with pytest.raises(ValidationError) as caught:
        WorkerSettings(policy_file=str(bad))
    message = describe(caught.value)
    assert "RW_POLICY_FILE" in message and "is not a valid policy" in message and "\n" not in message


def test_dataclasses_replace_still_derives_validated_settings() -> None:
    """Tests and tools derive settings with `dataclasses.replace`, as when this was a dataclass."""
    import dataclasses

    base = WorkerSettings(group_id="g", partitions=4)
    derived = dataclasses.replace(base, inactivity_timeout_s=120)
    assert (derived.group_id, derived.partitions, derived.inactivity_timeout_s) == ("g", 4, 120.0)
    with pytest.raises(ValidationError):
        dataclasses.replace(base, partitions=0)
