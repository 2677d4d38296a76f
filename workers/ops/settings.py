"""Configuration: every variable reasonwire reads, typed and validated, in one model.

Each class is a group of variables (Kafka and its security, Redis, the store, the topics,
logs, …); each command's settings class is the union of the groups it reads
(``NormalizeSettings``, ``GatewaySettings``, ``EraseSettings``, …), so a command validates
exactly what it uses and its ``--help`` lists exactly that (:func:`settings_help`, generated
from the model, never restated). Every variable is documented once, in docs/operations.md
("Configuration"). The env name is ``RW_`` + the field name upper-cased, unless the field
names another (``validation_alias``: the services' conventional names, the gateway's
``RW_GATEWAY_*``). A value that cannot be used is refused at start-up with one line naming
the variable (:class:`~reasonwire.workers.ops.errors.ConfigurationError`), before any service is
contacted — not as a traceback, and not minutes later on the first record.

To add a setting: add a field with a default and a ``description`` (and a constraint) to the
group of the commands that read it; the env name, the help text and the validation follow.
Then add its row to docs/operations.md (tests/unit/test_cli_config.py checks both).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reasonwire.contracts.policy import PolicyBook
from reasonwire.workers.ops.errors import ConfigurationError

NonEmpty = Annotated[str, Field(min_length=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis-cluster", "rediss-cluster")
CLUSTER_SCHEMES = {"redis-cluster": "redis", "rediss-cluster": "rediss"}
"""A Redis Cluster URL's scheme → the plain one redis-py parses (``workers/io/redis_connect.py``)."""


def cluster_nodes(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The URL redis-py can parse (first node, plain scheme) and every listed ``host:port``."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme, parts.scheme)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = port, "6379"
        nodes.append((host.strip("[]"), int(port)))
    first = f"{userinfo + '@' if userinfo else ''}{nodes[0][0]}:{nodes[0][1]}"
    return urlunsplit((scheme, first, parts.path, parts.query, "")), nodes


class Settings(BaseSettings):
    """The base of every settings class: ``RW_`` + field name, unless a field names its variable.

    Each class below is one group of variables; a command's settings class is the union of the
    groups it reads, so its ``--help`` (:func:`settings_help`) lists exactly those."""

    model_config = SettingsConfigDict(
        env_prefix="RW_",
        frozen=True,
        populate_by_name=True,  # WorkerSettings(partitions=4): tests and benchmarks build it by field name
        extra="ignore",  # the other commands' variables are not this one's business
        env_ignore_empty=True,  # VAR= means "unset", as it did before this model
        validate_default=True,
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        """The settings from the environment (or ``env``), or a :class:`ConfigurationError` naming
        every bad variable."""
        try:
            return cls() if env is None else cls.from_mapping(env)
        except ValidationError as exc:
            raise ConfigurationError(describe(exc, cls)) from None

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> Self:
        """Validated from ``env`` alone (not the process environment): for helpers that take one."""
        names = cls.env_names()
        values = {field: env[name] for field, name in names.items() if env.get(name, "") != ""}
        return cls.model_validate(values)

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Field name → the environment variable it is read from."""
        prefix = cls.model_config.get("env_prefix", "")
        return {
            name: field.validation_alias if isinstance(field.validation_alias, str) else f"{prefix}{name}".upper()
            for name, field in cls.model_fields.items()
        }


class LogSettings(Settings):
    """How a command logs (``workers/ops/logs.py``): every command that logs reads these."""

    log_format: Literal["text", "json"] = Field(
        "text", description="text: one readable line per record; json: one JSON object per line (for log collectors)"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the lowest level logged; DEBUG includes the Kafka client's group-coordinator messages"
    )

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return value.strip().upper() if value.strip().lower() in ("debug", "info", "warning", "error") else value.strip().lower()


def bootstrap_servers(value: str) -> str:
    """``value`` if every comma-separated item is ``host:port`` (or a bare host: port 9092)."""
    for server in value.split(","):
        host, colon, port = server.strip().rpartition(":")
        if not colon:
            host, port = port, "9092"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{server.strip()!r} is not host:port")
    return value


PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class KafkaSecurityError(ValueError):
    """A security setting that cannot work; the message names the variable, not its value."""


@dataclass(frozen=True)
class KafkaSecurity:
    """The security settings of a Kafka client, as :class:`KafkaSettings` reads them (its fields name
    the variables); :mod:`reasonwire.workers.io.kafka_security` turns them into client arguments."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """The settings as given, not yet checked (:meth:`check`); their variables are the fields of
        :class:`KafkaSettings`, named there once."""
        env = os.environ if env is None else env
        names = KafkaSettings.env_names()

        def get(field: str) -> str | None:
            return (env.get(names[field]) or "").strip() or None

        return cls(
            protocol=(get("kafka_security_protocol") or "PLAINTEXT").upper(),
            sasl_mechanism=(get("kafka_sasl_mechanism") or "").upper() or None,
            sasl_username=get("kafka_sasl_username"),
            sasl_password=get("kafka_sasl_password"),
            ssl_cafile=get("kafka_ssl_cafile"),
            ssl_certfile=get("kafka_ssl_certfile"),
            ssl_keyfile=get("kafka_ssl_keyfile"),
        )

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def check(self) -> None:
        """Raise :class:`KafkaSecurityError` for a combination that cannot work."""
        if self.protocol not in PROTOCOLS:
            raise KafkaSecurityError(f"KAFKA_SECURITY_PROTOCOL must be one of {', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            if self.sasl_mechanism not in MECHANISMS:
                raise KafkaSecurityError(f"KAFKA_SASL_MECHANISM must be one of {', '.join(MECHANISMS)} with {self.protocol}")
            if not self.sasl_username or not self.sasl_password:
                raise KafkaSecurityError(f"KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required with {self.protocol}")
        elif self.sasl_mechanism:
            raise KafkaSecurityError(f"KAFKA_SASL_MECHANISM is set but KAFKA_SECURITY_PROTOCOL is {self.protocol} (use SASL_SSL or SASL_PLAINTEXT)")
        files = {"KAFKA_SSL_CAFILE": self.ssl_cafile, "KAFKA_SSL_CERTFILE": self.ssl_certfile, "KAFKA_SSL_KEYFILE": self.ssl_keyfile}
        if not self.uses_tls and any(files.values()):
            named = ", ".join(name for name, path in files.items() if path)
            raise KafkaSecurityError(f"{named} set but KAFKA_SECURITY_PROTOCOL is {self.protocol} (use SSL or SASL_SSL)")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise KafkaSecurityError("KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE go together")
        for name, path in (("KAFKA_SSL_CAFILE", self.ssl_cafile), ("KAFKA_SSL_CERTFILE", self.ssl_certfile), ("KAFKA_SSL_KEYFILE", self.ssl_keyfile)):
            if path and not os.access(path, os.R_OK):
                raise KafkaSecurityError(f"{name}: cannot read {path}")


class KafkaSettings(Settings):
    """The broker and how every Kafka client of the package reaches it (``workers/io/kafka_security.py``)."""

    kafka_bootstrap_servers: NonEmpty = Field(
        "127.0.0.1:9092", validation_alias="KAFKA_BOOTSTRAP_SERVERS", description="the Kafka broker(s): host:port, comma-separated"
    )
    kafka_security_protocol: str = Field(
        "PLAINTEXT", validation_alias="KAFKA_SECURITY_PROTOCOL", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_mechanism: str | None = Field(
        None, validation_alias="KAFKA_SASL_MECHANISM", description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with a SASL_* protocol"
    )
    kafka_sasl_username: str | None = Field(None, validation_alias="KAFKA_SASL_USERNAME", description="SASL user name")
    kafka_sasl_password: str | None = Field(None, validation_alias="KAFKA_SASL_PASSWORD", description="SASL password (never printed)")
    kafka_ssl_cafile: str | None = Field(
        None, validation_alias="KAFKA_SSL_CAFILE", description="PEM file of the CA(s) that signed the brokers' certificates (unset: the system's)"
    )
    kafka_ssl_certfile: str | None = Field(None, validation_alias="KAFKA_SSL_CERTFILE", description="client certificate, PEM (mutual TLS)")
    kafka_ssl_keyfile: str | None = Field(None, validation_alias="KAFKA_SSL_KEYFILE", description="client key, PEM (mutual TLS)")

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _hosts(cls, value: str) -> str:
        return bootstrap_servers(value)

    @field_validator("kafka_security_protocol", "kafka_sasl_mechanism")
    @classmethod
    def _upper(cls, value: str | None) -> str | None:
        return value.strip().upper() if value else value

    @model_validator(mode="after")
    def _security_works(self) -> Self:
        """A combination that cannot work (a mechanism without credentials, an unreadable CA file)
        is refused at start-up; the message names the variable, never a value."""
        try:
            self.kafka_security().check()
        except KafkaSecurityError as exc:
            raise ValueError(str(exc)) from None
        return self

    def kafka_security(self) -> KafkaSecurity:
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=self.kafka_sasl_password,
            ssl_cafile=self.kafka_ssl_cafile,
            ssl_certfile=self.kafka_ssl_certfile,
            ssl_keyfile=self.kafka_ssl_keyfile,
        )


class RedisSettings(Settings):
    """Where Redis is (``workers/io/redis_connect.py``)."""

    redis_url: NonEmpty = Field(
        "redis://127.0.0.1:6379/0", validation_alias="REDIS_URL", description="the artefact store: redis://, rediss:// or unix:// URL"
    )
    redis_cluster: bool = Field(False, description="treat a redis:// URL as a Redis Cluster (redis-cluster:// URLs always are)")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError(f"the URL must start with {', '.join(s + '://' for s in REDIS_SCHEMES)}")
        if parts.scheme.endswith("-cluster"):  # host:port,host:port… (workers/io/redis_connect.py)
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


class StoreSettings(Settings):
    """How long stored state lives (``workers/io/store.py``)."""

    artefact_ttl_s: PositiveInt = Field(7 * 24 * 3600, description="fallback TTL (s) of stored opaque state; the tenant's policy sets the real one")
    journal_ttl_s: PositiveInt = Field(24 * 3600, description="TTL (s) of an open run's journal and of ended-run markers")


class RedisWaitSettings(Settings):
    """The store's ``WAIT`` on a Redis Cluster (``workers/io/redis_connect.py``, :func:`redis_wait`)."""

    redis_wait_replicas: NonNegativeInt = Field(
        1, description="on a Redis Cluster: replicas that must acknowledge a batch that ends a run before its terminal event (0: off)"
    )
    redis_wait_timeout_ms: NonNegativeInt = Field(1000, description="how long (ms) that WAIT may take; past it the event goes out and the worker logs it")


class TopicPlanSettings(Settings):
    """The shape of the topics reasonwire creates (``reasonwire topics plan``)."""

    partitions: PositiveInt = Field(8, description="partitions of the topics reasonwire creates; caps the number of useful replicas")
    replication_factor: PositiveInt = Field(1, description="replicas of the topics reasonwire creates; 3 or more sets min.insync.replicas=2")


class TopicSettings(TopicPlanSettings):
    """A process that needs topics: create them, or only check they exist."""

    create_topics: bool = Field(
        False, description="create the missing topics at start-up (else only check they exist, and name the missing ones)"
    )


class _WorkerBase(LogSettings, StoreSettings, TopicSettings, RedisSettings, KafkaSettings):
    """What both workers read: the services, the topics, the store, the logs, probes and backoff."""

    health_host: NonEmpty = Field("0.0.0.0", description="bind address of /healthz, /readyz and /metrics")  # noqa: S104 (probes are scraped from outside the pod)
    health_port: int = Field(
        8080, ge=0, le=65535, description="port of /healthz, /readyz and /metrics (0 disables; taken: the worker stops, exit 2; docs/reliability.md)"
    )
    backoff_initial_s: PositiveFloat = Field(
        0.1, allow_inf_nan=False, description="first wait (s) after a failed poll; doubles per failure, with jitter"
    )
    backoff_max_s: PositiveFloat = Field(
        5.0, allow_inf_nan=False, description="the longest wait (s) between retries: service resumes at most this long after a recovery"
    )


class ReplayWorkerSettings(_WorkerBase):
    """What ``worker replay`` reads (``workers/services/replay_worker.py``)."""

    replay_group_id: NonEmpty = Field("reasonwire-replay", description="the replay workers' consumer group; every replica shares it")


class AgUiSettings(Settings):
    """The AG-UI version the events are emitted in."""

    agui_version: Literal["1.0", "1.1"] = Field(
        "1.0", description="AG-UI version of the events: 1.1 adds encryptedValueType to every encrypted value (docs/replay.md)"
    )


class GroupSettings(Settings):
    """The normalizer's consumer group: its workers share it, and ``topics apply`` waits for its
    lag on the raw topic before adding partitions (docs/scaling.md)."""

    group_id: NonEmpty = Field("reasonwire-normalizer", description="the normalizer's consumer group; every replica shares it")


class NormalizeSettings(_WorkerBase, RedisWaitSettings, AgUiSettings, GroupSettings):
    """What ``worker normalize`` reads (``workers/services/normalizer.py``)."""

    inactivity_timeout_s: PositiveFloat = Field(
        300.0, allow_inf_nan=False, description="a run with no input for this long (s) ends with RUN_ERROR inactivity_timeout"
    )
    max_batch: PositiveInt = Field(200, description="raw records per poll: one Redis transaction and one offset commit per batch")
    max_in_flight: PositiveInt = Field(8, description="polls whose writes may be in flight at once (1 = no overlap); polls still commit in order")
    # at most 10 s: a fetch the broker holds longer than the consumer's request timeout (40 s,
    # FastStream's) is abandoned and sent again, so the partition would never be read
    fetch_max_wait_ms: int = Field(
        500, ge=0, le=10_000, description="how long the broker may hold a fetch until fetch_min_bytes are there (ms, 0–10000); only with fetch_min_bytes > 1"
    )
    fetch_min_bytes: PositiveInt = Field(
        1, description="bytes a fetch waits for, up to fetch_max_wait_ms: larger trades latency for fewer, fuller polls (docs/operations.md)"
    )
    policy_file: str | None = Field(None, description="JSON retention/audience policy (contracts/policy.py); unset: the default policy")
    redis_dedicated: bool = Field(
        False, description="Redis is dedicated to reasonwire and sized never to reach maxmemory: an evicting maxmemory-policy is then accepted (docs/reliability.md)"
    )
    debug_invariants: bool = Field(
        False, description="check the delivery machine's invariants after every input (slower; a broken rule stops the worker with its name)"
    )

    @field_validator("policy_file")
    @classmethod
    def _policy(cls, value: str | None) -> str | None:
        """Load the policy now: an unreadable or invalid one stops the start, not the first record."""
        if value:
            load_policy(value)
        return value


class WorkerSettings(NormalizeSettings, ReplayWorkerSettings):
    """Both workers' settings in one object: what tests, benchmarks and ``demo`` build and pass to
    either worker's ``create_app``."""


class DemoSettings(NormalizeSettings):
    """``reasonwire demo``: a worker's settings (it starts one) and where the samples come from."""

    samples: str | None = Field(None, description="a folder of <grammar>/*.jsonl streams to publish (unset: the samples the package ships)")
    gateway_url: str | None = Field(None, description="a running gateway: print each run's viewer URL on it (`make run` sets it)")
    demo_key: str | None = Field(None, description="the API key put in the viewer URLs' fragment (`make run` sets it)")


class EraseSettings(LogSettings, StoreSettings, RedisSettings):
    """``reasonwire erase``: Redis only."""


class ReplaySettings(StoreSettings, RedisSettings):
    """``reasonwire replay`` without ``--artefacts``: the artefacts come from Redis."""


class IngestSettings(LogSettings, KafkaSettings):
    """``reasonwire ingest``: the broker only."""


class TopicsApplySettings(TopicPlanSettings, KafkaSettings, GroupSettings):
    """``reasonwire topics apply``: the plan, the broker it is applied to, and the normalizer group
    whose lag on the raw topic must be 0 before partitions are added."""


class AsyncApiSettings(TopicPlanSettings):
    """``reasonwire asyncapi``: the plan, and the server the document names."""

    kafka_bootstrap_servers: NonEmpty = Field(
        "127.0.0.1:9092", validation_alias="KAFKA_BOOTSTRAP_SERVERS", description="the broker(s) the document names as its server"
    )

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _hosts(cls, value: str) -> str:
        return bootstrap_servers(value)


class GatewaySettings(LogSettings, TopicSettings, RedisSettings, KafkaSettings):
    """``reasonwire gateway`` (``workers/services/gateway``): the services, and how it serves.

    The application reads the fields by their short names (``settings.keepalive_s``)."""

    host: NonEmpty = Field("127.0.0.1", validation_alias="RW_GATEWAY_HOST", description="bind address (--host)")
    port: int = Field(8000, ge=0, le=65535, validation_alias="RW_GATEWAY_PORT", description="port (--port); the worker health probes take 8080")
    keepalive_s: Seconds = Field(
        15.0, validation_alias="RW_GATEWAY_KEEPALIVE_S", description="a comment is sent when a run is quiet this long (s): proxies close idle streams"
    )
    first_event_timeout_s: Seconds = Field(
        30.0, validation_alias="RW_GATEWAY_FIRST_EVENT_TIMEOUT_S", description="how long (s) a request waits for a run that has not started"
    )
    lookback_s: Seconds = Field(
        3600.0, validation_alias="RW_GATEWAY_LOOKBACK_S", description="how far back (s) a partition reader starts: ended runs are served whole"
    )
    max_runs: PositiveInt = Field(2000, validation_alias="RW_GATEWAY_MAX_RUNS", description="runs kept per partition reader (ended ones evicted first)")
    keys_file: str | None = Field(None, validation_alias="RW_GATEWAY_KEYS_FILE", description="the API key book, a JSON file (docs/gateway.md)")
    keys: str | None = Field(None, validation_alias="RW_GATEWAY_KEYS", description="the same key book as a JSON string, when there is no file")
    access_log: bool = Field(False, validation_alias="RW_GATEWAY_ACCESS_LOG", description="log one line per HTTP request with its status, duration and bytes (JSON fields with RW_LOG_FORMAT=json)")
    client_chunk_bytes: int = Field(
        64 * 1024,
        ge=4 * 1024,
        validation_alias="RW_GATEWAY_CLIENT_CHUNK_BYTES",
        description="the largest piece (bytes) written to one reader at once: a reader that does not read holds this, never a copy of the run",
    )
    client_stall_s: Seconds = Field(
        30.0,
        validation_alias="RW_GATEWAY_CLIENT_STALL_S",
        description="a reader whose write has not completed for this long (s) is cut off without a clean end (Last-Event-ID resumes it)",
    )
    max_buffered_bytes: int = Field(
        64 * 1024 * 1024,
        ge=64 * 1024,
        validation_alias="RW_GATEWAY_MAX_BUFFERED_BYTES",
        description="all readers' writes in flight together (bytes): a write waits for room (backpressure), and waiting counts as a stall",
    )
    publish_timeout_s: Seconds = Field(
        5.0,
        validation_alias="RW_GATEWAY_PUBLISH_TIMEOUT_S",
        description="the longest wait (s) for the broker's acknowledgement of an ingest or a run request before 503 with Retry-After",
    )
    max_event_bytes: PositiveInt | None = Field(
        None,
        validation_alias="RW_GATEWAY_MAX_EVENT_BYTES",
        description="a provider event above this (bytes) is refused 413; unset: what reasoning.raw.v1's max.message.bytes leaves after the envelope",
    )
    cors_origins: str = Field(
        "", validation_alias="RW_GATEWAY_CORS_ORIGINS", description="comma-separated browser origins allowed to call the gateway (* for any); empty: none"
    )

    @property
    def origins(self) -> list[str]:
        """``cors_origins`` as a list (CORS allow-list)."""
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


SETTINGS_CLASSES: tuple[type[Settings], ...] = (
    NormalizeSettings,
    ReplayWorkerSettings,
    DemoSettings,
    EraseSettings,
    ReplaySettings,
    IngestSettings,
    TopicsApplySettings,
    AsyncApiSettings,
    GatewaySettings,
)
"""Every command's settings class: together, every variable reasonwire reads (docs/operations.md)."""


def all_env_names() -> dict[str, str]:
    """Every variable any command reads → its description (the first class to declare it)."""
    out: dict[str, str] = {}
    for cls in SETTINGS_CLASSES:
        names = cls.env_names()
        for name, field in cls.model_fields.items():
            out.setdefault(names[name], field.description or "")
    return out


def _replaceable(cls: type[Settings]) -> None:
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


for _cls in (NormalizeSettings, ReplayWorkerSettings, WorkerSettings):
    _replaceable(_cls)

SECRET_FIELDS = frozenset({"redis_url", "kafka_sasl_password", "kafka_sasl_username", "keys"})
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


def describe(exc: ValidationError, cls: type[Settings] = WorkerSettings) -> str:
    """One line naming each bad variable and why; values shown only where they cannot be secret."""
    names = cls.env_names()
    by_alias = {alias: field for field, alias in names.items()}
    problems = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        field = by_alias.get(key, key)
        message = _first_line(error["msg"]).removeprefix("Value error, ")
        if field not in names:  # a cross-field check: its message names its variables
            problems.append(message)
            continue
        message = message[:1].lower() + message[1:]
        value = error.get("input")
        visible = isinstance(value, str | int | float) and field not in SECRET_FIELDS and len(str(value)) <= 80
        shown = f" (got {value!r})" if visible and str(value) not in message else ""
        problems.append(f"{names[field]}: {message}{shown}")
    return "bad configuration: " + "; ".join(problems)


def settings_help(*classes: type[Settings]) -> str:
    """The variables ``classes`` read as ``--help`` lists them: variable, meaning, default
    (generated from the models, never restated; a variable two classes share is listed once)."""
    rows: dict[str, str] = {}
    for cls in classes:
        names = cls.env_names()
        for name, field in cls.model_fields.items():
            rows.setdefault(names[name], f"{field.description} (default: {show_default(field.default)})")
    if not rows:
        return "settings: none (no environment variable is read)"
    rows = dict(sorted(rows.items(), key=lambda row: _GROUPS.index(next(g for g in _GROUPS if row[0].startswith(g)))))
    width = max(len(n) for n in rows)
    return "\n".join(["settings (environment variables; docs/operations.md):", *(f"  {n:<{width}}  {text}" for n, text in rows.items())])


def settings_epilog(*classes: type[Settings]) -> dict[str, Any]:
    """The ``add_parser`` keywords that put the variables ``classes`` read under a command's ``--help``."""
    return {"epilog": settings_help(*classes), "formatter_class": argparse.RawDescriptionHelpFormatter}


_GROUPS = ("KAFKA_", "REDIS_URL", "RW_REDIS_", "")
"""``--help`` lists the broker's variables first, then Redis's, then the rest in model order."""


def show_default(value: object) -> str:
    """A default as an operator would write it: ``unset``, ``empty``, ``true``/``false``, ``8``, ``0.1``."""
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _first_line(text: str) -> str:
    return " ".join(text.split())
