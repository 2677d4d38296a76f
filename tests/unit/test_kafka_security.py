"""One function builds every Kafka client's security arguments."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from faststream.kafka.security import parse_security
from faststream.security import SASLPlaintext, SASLScram256, SASLScram512

from tests.certs import Certs, make_certs
from reasonwire.workers.io.kafka_security import KafkaSecurity, KafkaSecurityError, broker_security, client_kwargs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_plaintext_by_default_adds_nothing() -> None:
    assert client_kwargs(KafkaSecurity.from_env({})) == {}
    assert broker_security(KafkaSecurity.from_env({})) is None


@pytest.mark.parametrize(("mechanism", "cls"), [("PLAIN", SASLPlaintext), ("SCRAM-SHA-256", SASLScram256), ("scram-sha-512", SASLScram512)])
def test_sasl_ssl_kwargs_and_the_faststream_object_agree(certs: Certs, mechanism: str, cls: type) -> None:
    env = {
        "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "KAFKA_SASL_MECHANISM": mechanism,
        "KAFKA_SASL_USERNAME": "alice",
        "KAFKA_SASL_PASSWORD": "s3cret",
        "KAFKA_SSL_CAFILE": str(certs.ca),
        "KAFKA_SSL_CERTFILE": str(certs.client_cert),
        "KAFKA_SSL_KEYFILE": str(certs.client_key),
    }
    kwargs = client_kwargs(KafkaSecurity.from_env(env))
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == mechanism.upper()
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("alice", "s3cret")
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    security = broker_security(KafkaSecurity.from_env(env))
    assert isinstance(security, cls)
    parsed = parse_security(security)  # what FastStream hands aiokafka
    assert {k: parsed[k] for k in ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password")} == {
        k: kwargs[k] for k in ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password")
    }


def test_ssl_only(certs: Certs) -> None:
    kwargs = client_kwargs(KafkaSecurity(protocol="SSL", ssl_cafile=str(certs.ca)))
    assert set(kwargs) == {"security_protocol", "ssl_context"}
    assert parse_security(broker_security(KafkaSecurity(protocol="SSL", ssl_cafile=str(certs.ca))))["security_protocol"] == "SSL"


@pytest.mark.parametrize(
    ("security", "names"),
    [
        (KafkaSecurity(protocol="TLS"), "KAFKA_SECURITY_PROTOCOL"),
        (KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="GSSAPI", sasl_username="u", sasl_password="p"), "KAFKA_SASL_MECHANISM"),
        (KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u"), "KAFKA_SASL_PASSWORD"),
        (KafkaSecurity(protocol="PLAINTEXT", sasl_mechanism="PLAIN"), "KAFKA_SASL_MECHANISM"),
        (KafkaSecurity(protocol="PLAINTEXT", ssl_cafile="/x"), "KAFKA_SSL_"),
        (KafkaSecurity(protocol="SSL", ssl_certfile="/x"), "KAFKA_SSL_KEYFILE"),
        (KafkaSecurity(protocol="SSL", ssl_cafile="/nonexistent/ca.pem"), "KAFKA_SSL_CAFILE"),
    ],
)
def test_settings_that_cannot_work_are_one_line_naming_the_variable(security: KafkaSecurity, names: str) -> None:
    with pytest.raises(KafkaSecurityError) as err:
        client_kwargs(security)
    message = str(err.value)
    assert names in message and "\n" not in message


def test_a_password_is_never_in_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("hunter2-secret")
    with pytest.raises(KafkaSecurityError) as err:
        client_kwargs(KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="hunter2-secret", ssl_cafile=str(bad)))
    assert "hunter2" not in str(err.value)
    assert "KAFKA_SSL_CAFILE" in str(err.value)
