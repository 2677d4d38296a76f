"""Certificates made at test time with the ``openssl`` command: a CA, a server certificate
for 127.0.0.1/localhost, a client certificate, and PEM keystore/truststore files for a Kafka
listener (``ssl.keystore.type=PEM``). Nothing is checked in; every run makes its own."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    keystore: Path
    truststore: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(folder: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates (apt-get install openssl)")
    folder.mkdir(parents=True, exist_ok=True)
    c = Certs(*(folder / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key", "server-store.pem", "truststore.pem")))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=reasonwire-test-ca", cwd=folder)
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj", f"/CN=reasonwire-test-{who}", cwd=folder)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", f"{who}.crt", "-days", "2", "-extfile", "san.ext", cwd=folder)
    # Kafka reads PEM stores (ssl.keystore.type=PEM): the key (PKCS#8) and its chain in one file
    c.keystore.write_text(c.server_key.read_text() + c.server_cert.read_text() + c.ca.read_text())
    c.truststore.write_text(c.ca.read_text())
    return c
