"""Before a command starts work: are Kafka and Redis there? One line if not, within seconds.

Without this, a worker with Redis down starts, joins its group and fails on its
first record, and one with the broker down dies in a traceback from deep in
aiokafka. Each check is bounded (:data:`TIMEOUT_S`), so a broker address that
drops packets fails as fast as a closed port. :func:`service_failure` maps the
same failures met later (the broker gone between the check and the start) to
the same one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from urllib.parse import urlsplit

from reasonwire.workers.ops.errors import ConfigurationError, ServiceUnreachable
from reasonwire.workers.ops.settings import WorkerSettings

TIMEOUT_S = 10.0
"""Upper bound of one check; a healthy service answers in milliseconds."""


async def check_kafka(settings: WorkerSettings, timeout_s: float = TIMEOUT_S) -> None:
    """Bootstrap from ``KAFKA_BOOTSTRAP_SERVERS`` (one metadata round trip) or raise :class:`ServiceUnreachable`."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    from reasonwire.workers.io.kafka_security import KafkaSecurityError, client_kwargs, security_failure, witness

    try:
        security = client_kwargs()  # the same SASL/TLS settings as every other client
    except KafkaSecurityError as exc:
        raise ConfigurationError(str(exc)) from None
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers, request_timeout_ms=int(timeout_s * 1000), **security)
    with _captured("aiokafka") as said, witness() as seen:  # aiokafka logs each failed connection at ERROR: the cause, not for the user
        try:
            await asyncio.wait_for(admin.start(), timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            refused = security_failure(exc, seen.seen)  # wrong credentials / TLS: a settings error, not an outage
            if refused is not None:
                raise ConfigurationError(refused) from None
            raise kafka_unreachable(settings, exc, said) from None
        finally:
            await admin.close()


async def check_redis(settings: WorkerSettings, timeout_s: float = TIMEOUT_S) -> None:
    """``PING`` the store at ``REDIS_URL`` or raise :class:`ServiceUnreachable` (:class:`ConfigurationError`
    when it answers but refuses the URL's credentials or database)."""
    from redis.exceptions import AuthenticationError, RedisError, ResponseError

    from reasonwire.workers.io.redis_connect import connect

    redis = connect(settings.redis_url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        await asyncio.wait_for(redis.ping(), timeout_s)
    except (AuthenticationError, ResponseError) as exc:
        raise ConfigurationError(redis_refusal(settings.redis_url, exc)) from None
    except (RedisError, OSError, TimeoutError) as exc:
        raise redis_unreachable(settings, exc) from None
    finally:
        await redis.aclose()


async def check_services(settings: WorkerSettings, *, kafka: bool = True, redis: bool = True) -> None:
    """The checks a command needs, Redis first (the cheaper one)."""
    if redis:
        await check_redis(settings)
    if kafka:
        await check_kafka(settings)


def service_failure(exc: BaseException, settings: WorkerSettings) -> ServiceUnreachable | None:
    """The one-line failure for a broker or Redis connection error raised after the checks, else None."""
    module = type(exc).__module__
    if module.startswith("aiokafka") and type(exc).__name__ in ("KafkaConnectionError", "NodeNotReadyError", "KafkaTimeoutError"):
        return kafka_unreachable(settings, exc)
    if module.startswith("redis") and type(exc).__name__ in ("ConnectionError", "TimeoutError", "BusyLoadingError"):
        return redis_unreachable(settings, exc)
    return None


def kafka_unreachable(settings: WorkerSettings, exc: BaseException, said: list[str] | None = None) -> ServiceUnreachable:
    why = _why(exc, *(said or ()))
    return ServiceUnreachable(f"cannot reach the Kafka broker at {settings.kafka_bootstrap_servers} (KAFKA_BOOTSTRAP_SERVERS): {why}")


AUTH_REQUIRED = ("NOAUTH", "HELLO must be called with the client already authenticated", "Authentication required")
"""What a Redis that requires a password answers a client that gave none (RESP2 and RESP3 clients)."""


def redis_refusal(url: str, exc: BaseException) -> str:
    """One line for a Redis that answered but refused the URL: no password given where one is
    required (rather than redis-py's two-sentence ``HELLO must be called…``), wrong credentials,
    or another refusal (its first sentence). Never the password."""
    from urllib.parse import urlsplit

    where = redis_location(url)
    text = str(exc)
    try:
        given = bool(urlsplit(url).password)
    except ValueError:
        given = False
    if any(marker in text for marker in AUTH_REQUIRED) and not given:
        return f"Redis at {where} requires a password and REDIS_URL gives none (redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@… for an ACL user)"
    if "WRONGPASS" in text or "invalid username-password" in text or "invalid password" in text:
        return f"Redis at {where} refused REDIS_URL's user name or password"
    return f"Redis at {where} refused REDIS_URL: {text.split('. ')[0].rstrip('.')}"


def redis_unreachable(settings: WorkerSettings, exc: BaseException) -> ServiceUnreachable:
    why = _why(exc)
    return ServiceUnreachable(f"cannot reach Redis at {redis_location(settings.redis_url)} (REDIS_URL): {why}")


def redis_location(url: str) -> str:
    """``host:port/db`` of a Redis URL without its credentials (an error message must not print a password)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 6379}{parts.path or ''}"


def _why(exc: BaseException, *said: str) -> str:
    """The cause in a few words (from the exception and what the client logged on the way); never
    their whole text, which may quote a URL with credentials."""
    text = " ".join((str(exc), *said)).lower()
    if isinstance(exc, TimeoutError) or "timeout" in text or "timed out" in text:
        return "no answer in time"
    if "refused" in text or "errno 111" in text or "error 111" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
        return "unknown host"
    if "unable to bootstrap" in text:
        return "no broker answered"
    return type(exc).__name__


@contextlib.contextmanager
def _captured(name: str) -> Iterator[list[str]]:
    """The messages logger ``name`` emits meanwhile, kept from the user's terminal."""
    logger = logging.getLogger(name)
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
