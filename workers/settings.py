"""Worker configuration: one typed, validated object read from the environment.

Every field is one documented variable (docs/operations.md, "Configuration"):
the env name is ``RW_`` + the field name upper-cased, unless the field names
another (``validation_alias``, for the services' conventional names). A value
that cannot be used is refused at start-up with one line naming the variable
(:class:`~reasonwire.workers.errors.ConfigurationError`), before any service is
contacted — not as a traceback, and not minutes later on the first record.
``reasonwire worker normalize --help`` lists the fields from this model
(:func:`settings_help`), so the help cannot drift from the code.

To add a setting: add a field with a default and a ``description`` (and a
constraint); the env name, the help text and the validation follow. Then add its
row to docs/operations.md.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reasonwire.contracts.policy import PolicyBook
from reasonwire.workers.errors import ConfigurationError

NonEmpty = Annotated[str, Field(min_length=1)]

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis-cluster", "rediss-cluster")


class WorkerSettings(BaseSettings):
    """What a worker (and ``demo``, ``erase``, ``replay`` without ``--artefacts``) needs to run."""

    model_config = SettingsConfigDict(
        env_prefix="RW_",
        frozen=True,
        populate_by_name=True,  # WorkerSettings(partitions=4): tests and benchmarks build it by field name
        extra="ignore",  # other RW_* variables (RW_STATE, RW_SAMPLES, …) belong to other tools
        env_ignore_empty=True,  # VAR= means "unset", as it did before this model
        validate_default=True,
    )

    kafka_bootstrap_servers: NonEmpty = Field(
        "127.0.0.1:9092", validation_alias="KAFKA_BOOTSTRAP_SERVERS", description="the Kafka broker(s): host:port, comma-separated"
    )
    redis_url: NonEmpty = Field(
        "redis://127.0.0.1:6379/0", validation_alias="REDIS_URL", description="the artefact store: redis://, rediss:// or unix:// URL"
    )
    group_id: NonEmpty = Field("reasonwire-normalizer", description="the normalizer's consumer group; every replica shares it")
    replay_group_id: NonEmpty = Field("reasonwire-replay", description="the replay workers' consumer group; every replica shares it")
    partitions: PositiveInt = Field(8, description="partitions of the topics reasonwire creates; caps the number of useful replicas")
    artefact_ttl_s: PositiveInt = Field(7 * 24 * 3600, description="fallback TTL (s) of stored opaque state (P7); the tenant's policy sets the real one")
    journal_ttl_s: PositiveInt = Field(24 * 3600, description="TTL (s) of an open run's journal and of ended-run markers")
    inactivity_timeout_s: PositiveFloat = Field(
        300.0, allow_inf_nan=False, description="a run with no input for this long (s) ends with RUN_ERROR inactivity_timeout"
    )
    max_batch: PositiveInt = Field(200, description="raw records per poll: one Redis transaction and one offset commit per batch")
    max_in_flight: PositiveInt = Field(8, description="polls whose writes may be in flight at once (1 = no overlap); polls still commit in order")
    policy_file: str | None = Field(None, description="JSON retention/audience policy (contracts/policy.py); unset: the default policy")
    health_port: int = Field(8080, ge=0, le=65535, description="port of /healthz and /readyz (0 disables; docs/reliability.md)")
    redis_dedicated: bool = Field(
        False, description="Redis is dedicated to reasonwire and sized never to reach maxmemory: an evicting maxmemory-policy is then accepted (docs/reliability.md)"
    )
    backoff_initial_s: PositiveFloat = Field(
        0.1, allow_inf_nan=False, description="first wait (s) after a failed poll; doubles per failure, with jitter"
    )
    backoff_max_s: PositiveFloat = Field(
        5.0, allow_inf_nan=False, description="the longest wait (s) between retries: service resumes at most this long after a recovery"
    )

    @classmethod
    def from_env(cls) -> WorkerSettings:
        """The settings from the environment, or a :class:`ConfigurationError` naming every bad variable."""
        try:
            return cls()
        except ValidationError as exc:
            raise ConfigurationError(describe(exc)) from None

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Field name → the environment variable it is read from."""
        prefix = cls.model_config.get("env_prefix", "")
        return {
            name: field.validation_alias if isinstance(field.validation_alias, str) else f"{prefix}{name}".upper()
            for name, field in cls.model_fields.items()
        }

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for server in value.split(","):
            host, colon, port = server.strip().rpartition(":")
            if not colon:
                host, port = port, "9092"
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{server.strip()!r} is not host:port")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError(f"the URL must start with {', '.join(s + '://' for s in REDIS_SCHEMES)}")
        if parts.scheme.endswith("-cluster"):  # host:port,host:port… (workers/redis_connect.py)
            from reasonwire.workers.redis_connect import cluster_nodes

            try:
                cluster_nodes(value)
            except ValueError:
                raise ValueError("a cluster URL lists host:port pairs with numeric ports") from None
            return value
        try:
            parts.port  # noqa: B018 — raises on a port that is not a number
        except ValueError:
            raise ValueError("the URL's port is not a number") from None
        return value

    @field_validator("policy_file")
    @classmethod
    def _policy(cls, value: str | None) -> str | None:
        """Load the policy now: an unreadable or invalid one stops the start, not the first record."""
        if value:
            load_policy(value)
        return value


def _replaceable(cls: type[WorkerSettings]) -> None:
    """``dataclasses.replace(settings, inactivity_timeout_s=120)`` keeps working: tests and tools
    derived settings that way when this was a dataclass, and the result is validated like any
    construction (``replace`` calls ``WorkerSettings(**fields)``). Only what ``replace`` reads is
    declared: a named, init field per model field."""
    fields = {}
    for name in cls.model_fields:
        f = dataclasses.field()
        f.name = name
        fields[name] = f
    cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]


_replaceable(WorkerSettings)

SECRET_FIELDS = frozenset({"redis_url"})
"""Fields whose value may carry a credential: an error names the variable, never the value."""


def load_policy(path: str) -> PolicyBook:
    """The policy book in ``path``; a :class:`ValueError` with one line saying what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        return PolicyBook.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "policy"
        raise ValueError(f"{path} is not a valid policy ({where}: {_first_line(error['msg'])})") from None


def describe(exc: ValidationError) -> str:
    """One line naming each bad variable and why; values shown only where they cannot be secret."""
    names = WorkerSettings.env_names()
    by_alias = {alias: field for field, alias in names.items()}
    problems = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        field = by_alias.get(key, key)
        message = _first_line(error["msg"]).removeprefix("Value error, ")
        message = message[:1].lower() + message[1:]
        value = error.get("input")
        visible = isinstance(value, str | int | float) and field not in SECRET_FIELDS and len(str(value)) <= 80
        shown = f" (got {value!r})" if visible and str(value) not in message else ""
        problems.append(f"{names.get(field, key)}: {message}{shown}")
    return "bad configuration: " + "; ".join(problems)


def settings_help() -> str:
    """The settings as ``--help`` lists them: variable, default, meaning (generated, never restated)."""
    names = WorkerSettings.env_names()
    width = max(len(n) for n in names.values())
    lines = ["settings (environment variables):"]
    for name, field in WorkerSettings.model_fields.items():
        default = "unset" if field.default is None else str(field.default)
        lines.append(f"  {names[name]:<{width}}  {field.description} (default: {default})")
    return "\n".join(lines)


def _first_line(text: str) -> str:
    return " ".join(text.split())
