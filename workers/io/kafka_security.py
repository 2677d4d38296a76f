"""SASL and TLS for every Kafka client reasonwire creates — one place.

The settings have the usual names (fields of :class:`reasonwire.workers.ops.settings.KafkaSettings`,
so every command that talks to Kafka validates them at start-up and lists them in ``--help``):

| variable | meaning |
|---|---|
| ``KAFKA_SECURITY_PROTOCOL`` | ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` |
| ``KAFKA_SASL_MECHANISM`` | ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (with a ``SASL_*`` protocol) |
| ``KAFKA_SASL_USERNAME`` / ``KAFKA_SASL_PASSWORD`` | the SASL credentials |
| ``KAFKA_SSL_CAFILE`` | PEM file of the CA(s) that signed the brokers' certificates (default: the system's) |
| ``KAFKA_SSL_CERTFILE`` / ``KAFKA_SSL_KEYFILE`` | client certificate and key (mutual TLS) |

:func:`client_kwargs` turns them into the keyword arguments of aiokafka's
``AIOKafkaConsumer`` / ``AIOKafkaProducer`` / ``AIOKafkaAdminClient``; every client the
package creates passes ``**client_kwargs(...)`` (the worker's consumer, producer and
admin, the replay worker, ``demo``, the ingress client, the gateway).
:func:`broker_security` gives FastStream's ``KafkaBroker`` the same, as its ``security``
object. A setting that cannot work (a mechanism without credentials, an unreadable CA
file) is one line naming the variable, never a value (a password is never printed).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

# The settings and their check are configuration (the fields of KafkaSettings); named here too,
# beside the clients they configure.
from reasonwire.workers.ops.settings import KafkaSecurity as KafkaSecurity, KafkaSecurityError as KafkaSecurityError


def ssl_context(security: KafkaSecurity) -> ssl.SSLContext:
    """A verifying TLS context: the given CA (else the system's), the client certificate if any."""
    try:
        context = ssl.create_default_context(cafile=security.ssl_cafile)
        if security.ssl_certfile:
            context.load_cert_chain(security.ssl_certfile, security.ssl_keyfile)
    except (OSError, ssl.SSLError) as exc:
        which = "KAFKA_SSL_CERTFILE/KAFKA_SSL_KEYFILE" if security.ssl_certfile else "KAFKA_SSL_CAFILE"
        raise KafkaSecurityError(f"{which}: not a usable PEM file ({type(exc).__name__})") from None
    return context


def client_kwargs(security: KafkaSecurity | None = None) -> dict[str, Any]:
    """The security keyword arguments of an aiokafka client; empty for plaintext (the default)."""
    security = security if security is not None else KafkaSecurity.from_env()
    security.check()
    if security.protocol == "PLAINTEXT":
        return {}
    kwargs: dict[str, Any] = {"security_protocol": security.protocol}
    if security.uses_tls:
        kwargs["ssl_context"] = ssl_context(security)
    if security.uses_sasl:
        kwargs.update(
            sasl_mechanism=security.sasl_mechanism,
            sasl_plain_username=security.sasl_username,
            sasl_plain_password=security.sasl_password,
        )
    return kwargs


def servers(bootstrap_servers: str) -> list[str]:
    """``KAFKA_BOOTSTRAP_SERVERS`` as a list: FastStream's ``KafkaBroker`` wraps a string in a list
    whole, so ``a:9092,b:9092`` reached aiokafka as one unresolvable host name."""
    return [s.strip() for s in bootstrap_servers.split(",") if s.strip()]


def broker_security(security: KafkaSecurity | None = None) -> Any:
    """FastStream's ``security=`` object for :func:`client_kwargs`' settings (``None`` for plaintext).

    FastStream's ``KafkaBroker`` takes no ``security_protocol``/``sasl_*`` arguments, only one of its
    ``faststream.security`` classes, which it turns back into exactly these aiokafka arguments."""
    from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512

    kwargs = client_kwargs(security)
    if not kwargs:
        return None
    use_ssl = kwargs["security_protocol"] in ("SSL", "SASL_SSL")
    context = kwargs.get("ssl_context")
    mechanism = kwargs.get("sasl_mechanism")
    if mechanism is None:
        return BaseSecurity(ssl_context=context, use_ssl=use_ssl)
    cls = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}[mechanism]
    return cls(username=kwargs["sasl_plain_username"], password=kwargs["sasl_plain_password"], ssl_context=context, use_ssl=use_ssl)


class FailureWitness(logging.Filter):
    """Keeps the exceptions aiokafka logs while bootstrapping: it raises only
    ``KafkaConnectionError("Unable to bootstrap …")`` and logs the cause (a refused SASL
    handshake, a TLS error) as an argument of its "Unable connect" line. The filter keeps the
    exception objects, never the formatted text; with ``quiet`` it also drops the records (a
    one-shot command says what failed in one line of its own)."""

    def __init__(self, quiet: bool = False) -> None:
        super().__init__()
        self.quiet = quiet
        self.seen: deque[BaseException] = deque(maxlen=16)  # a long-running process keeps the latest only

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        self.seen.extend(a for a in args if isinstance(a, BaseException))
        return not self.quiet


@contextlib.contextmanager
def witness(quiet: bool = False) -> Iterator[FailureWitness]:
    """Watch aiokafka's client logger for the causes of a failed start (see :class:`FailureWitness`)."""
    found = FailureWitness(quiet)
    logger = logging.getLogger("aiokafka")
    logger.addFilter(found)
    try:
        yield found
    finally:
        logger.removeFilter(found)


def describe_failure(exc: BaseException, seen: Iterable[BaseException] = ()) -> str | None:
    """One line for a failure that is the settings' fault (wrong credentials, TLS refused, no
    broker there), else ``None``; ``seen`` are the causes :func:`witness` caught. Never quotes
    an exception's text (it may carry a value)."""
    from aiokafka.errors import KafkaConnectionError

    line = security_failure(exc, seen)
    if line is None and isinstance(exc, KafkaConnectionError):
        return "cannot connect to Kafka at KAFKA_BOOTSTRAP_SERVERS (check the address and KAFKA_SECURITY_PROTOCOL)"
    return line


def security_failure(exc: BaseException, seen: Iterable[BaseException] = ()) -> str | None:
    """The line of :func:`describe_failure` when the cause is the security settings, else ``None``."""
    from aiokafka.errors import AuthenticationFailedError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

    for cause in (exc, exc.__cause__, *seen):
        if isinstance(cause, (SaslAuthenticationFailed, AuthenticationFailedError)):
            return "Kafka refused the SASL credentials (check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD, KAFKA_SASL_MECHANISM)"
        if isinstance(cause, UnsupportedSaslMechanismError):
            return "Kafka does not offer KAFKA_SASL_MECHANISM on this listener"
        if isinstance(cause, ssl.SSLError):
            return "TLS handshake with Kafka failed (check KAFKA_SECURITY_PROTOCOL, KAFKA_SSL_CAFILE and the client certificate)"
    return None
