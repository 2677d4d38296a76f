"""The gateway's settings: one typed, validated object read from ``RW_GATEWAY_*`` (and the
services' conventional names), refused at start-up with one line naming the variable.

Kept here, beside the gateway, until the one configuration model (issue 23 item 8) takes
them in; every field's env name is ``RW_GATEWAY_`` + the field name upper-cased unless it
names another (``validation_alias``). docs/gateway.md lists them with the limits they set.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, PositiveFloat, PositiveInt, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from reasonwire.workers.errors import ConfigurationError

KIB = 1024
MIB = 1024 * KIB


class GatewaySettings(BaseSettings):
    """What ``reasonwire gateway`` reads from the environment."""

    model_config = SettingsConfigDict(
        env_prefix="RW_GATEWAY_", frozen=True, populate_by_name=True, extra="ignore", env_ignore_empty=True, validate_default=True
    )

    kafka_bootstrap_servers: str = Field("127.0.0.1:9092", min_length=1, validation_alias="KAFKA_BOOTSTRAP_SERVERS")
    redis_url: str = Field("redis://127.0.0.1:6379/0", min_length=1, validation_alias="REDIS_URL")
    partitions: PositiveInt = Field(8, validation_alias=AliasChoices("RW_PARTITIONS", "partitions"))
    """Partitions of ``reasoning.requests.v1`` when the gateway creates it."""
    keepalive_s: PositiveFloat = Field(15.0, allow_inf_nan=False)
    """A comment is sent when a run is quiet this long (proxies close idle streams)."""
    first_event_timeout_s: PositiveFloat = Field(30.0, allow_inf_nan=False)
    """How long a request waits for a run that has not started; a run that does not exist (or is
    another tenant's) is answered 404 after exactly this wait (issue 26 item 7)."""
    lookback_s: PositiveFloat = Field(3600.0, allow_inf_nan=False)
    """How far back a partition reader starts (ended runs served whole)."""
    max_runs: PositiveInt = 2_000
    """Runs kept per partition reader (ended ones evicted first)."""
    client_chunk_bytes: PositiveInt = Field(64 * KIB, ge=4 * KIB)
    """The most one reader is written at once: a reader that does not read holds at most this
    (plus the transport's 64 KiB high-water mark) — never a copy of the run (issue 26 item 2)."""
    client_stall_s: PositiveFloat = Field(30.0, allow_inf_nan=False)
    """A reader whose write has not completed for this long is disconnected without a clean end
    (its ``Last-Event-ID`` resumes it): a stalled client cannot hold the gateway's memory."""
    max_buffered_bytes: PositiveInt = Field(64 * MIB, ge=64 * KIB)
    """All readers' writes in flight at once, together: a write waits (backpressure) while the
    total is reached, and counts as a stall while it waits."""
    publish_timeout_s: PositiveFloat = Field(5.0, allow_inf_nan=False)
    """How long an ingest or run request waits for the broker's acknowledgement before 503
    (``Retry-After``): an outage is answered, not waited out (issue 26 item 6)."""
    max_event_bytes: PositiveInt | None = None
    """A provider event larger than this is refused 413; unset: what ``reasoning.raw.v1``'s
    ``max.message.bytes`` (capped by the producer's 1 MiB request size) leaves after the envelope."""
    cors_origins: str = ""
    """Comma-separated browser origins allowed to call the gateway (``*`` for any); empty: none (issue 23 item 11)."""

    @classmethod
    def from_env(cls) -> GatewaySettings:
        """The settings from the environment, or a :class:`ConfigurationError` naming each bad variable."""
        try:
            return cls()
        except ValidationError as exc:
            raise ConfigurationError(describe(exc)) from None

    @classmethod
    def env_name(cls, field: str) -> str:
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, str):
            return alias
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
        return f"RW_GATEWAY_{field}".upper()

    @property
    def origins(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


def describe(exc: ValidationError) -> str:
    """One line naming each bad variable and why (a value only where it cannot be a secret)."""
    problems = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        field = next((f for f in GatewaySettings.model_fields if key in (f, GatewaySettings.env_name(f))), key)
        name = GatewaySettings.env_name(field) if field in GatewaySettings.model_fields else key
        message = str(error["msg"]).splitlines()[0].removeprefix("Value error, ")
        value = error.get("input")
        shown = f" (got {value!r})" if isinstance(value, str) and field != "redis_url" and len(value) <= 80 else ""
        problems.append(f"{name}: {message[:1].lower() + message[1:]}{shown}")
    return "bad configuration: " + "; ".join(problems)
