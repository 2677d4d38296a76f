"""A secured Kafka broker and a secured Redis, started by the test itself.

* Kafka (KRaft, one node, the classpath ``deploy/services.sh`` caches): a ``SASL_SSL`` listener
  offering SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, with client certificates required (mutual
  TLS), PEM key and trust stores made at test time (:mod:`tests.certs`); SCRAM users are
  written at format time (``--add-scram``). A plaintext listener serves only the
  broker's own inter-broker traffic and the controller.
* Redis: TLS only (``rediss://``, client certificate required) and an ACL user with a
  password; the default user is disabled.

Ports come from ``RW_SECURE_PORT`` (default 19910: Kafka SASL_SSL, +1 controller, +2
inter-broker, +3 Redis TLS). Every process started here is stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.certs import Certs, make_certs

ROOT = Path(__file__).resolve().parents[2]
KAFKA_VERSION = "4.1.2"
USER, PASSWORD = "rw-alice", "alice-s3cret-pw"
REDIS_USER, REDIS_PASSWORD = "rw-worker", "redis-s3cret-pw"


@dataclass(frozen=True)
class SecureServices:
    bootstrap: str
    redis_url: str
    certs: Certs

    def kafka_env(self, mechanism: str = "SCRAM-SHA-512", password: str = PASSWORD) -> dict[str, str]:
        return {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_MECHANISM": mechanism,
            "KAFKA_SASL_USERNAME": USER,
            "KAFKA_SASL_PASSWORD": password,
            "KAFKA_SSL_CAFILE": str(self.certs.ca),
            "KAFKA_SSL_CERTFILE": str(self.certs.client_cert),
            "KAFKA_SSL_KEYFILE": str(self.certs.client_key),
            "REDIS_URL": self.redis_url,
        }


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _kafka_libs() -> Path:
    cache = Path(os.environ.get("RW_CACHE", Path.home() / ".cache" / "reasonwire"))
    libs = cache / f"kafka-{KAFKA_VERSION}" / "libs"
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        # deploy/services.sh gathers the classpath (Maven) the first time it runs
        pytest.skip(f"no Kafka {KAFKA_VERSION} classpath in {libs}: run `bash deploy/services.sh up` once")
    if shutil.which("java") is None:
        pytest.skip("java is needed for the secured broker (apt-get install openjdk-17-jre-headless)")
    return libs


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def secure_kafka(state: Path, certs: Certs, port: int) -> Iterator[str]:
    libs = _kafka_libs()
    controller, internal = port + 1, port + 2
    for p in (port, controller, internal):
        if _port_open(p):
            pytest.skip(f"port {p} is taken: set RW_SECURE_PORT to a free block of four")
    data, logs = state / "kafka-data", state / "kafka-logs"
    data.mkdir(parents=True)
    logs.mkdir()
    conf = state / "server.properties"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    conf.write_text(
        f"""process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller}
controller.listener.names=CONTROLLER
listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller},INTERNAL://127.0.0.1:{internal}
advertised.listeners=SASL_SSL://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram}
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";
listener.name.sasl_ssl.ssl.client.auth=required
ssl.keystore.type=PEM
ssl.keystore.location={certs.keystore}
ssl.truststore.type=PEM
ssl.truststore.location={certs.truststore}
log.dirs={data}
num.partitions=2
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""
    )
    java = ["java", "-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={ROOT / 'deploy' / 'kafka' / 'log4j2.xml'}", f"-Dkafka.logs.dir={logs}", "-cp", f"{libs}/*"]  # fmt: skip
    cluster_id = "rwSecureTestCluster0AA"[:22]
    users = [f"{m}=[name={USER},password={PASSWORD}]" for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
    fmt = [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf), "--standalone"]
    for u in users:
        fmt += ["--add-scram", u]
    subprocess.run(fmt, check=True, capture_output=True, timeout=120)
    with open(state / "kafka.out", "wb") as out:
        proc = subprocess.Popen([*java, "kafka.Kafka", str(conf)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (_port_open(port) and "Kafka Server started" in _read(logs / "server.log")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"secured Kafka did not start: {_read(logs / 'server.log')[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


@contextmanager
def secure_redis(state: Path, certs: Certs, port: int) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is needed (apt-get install redis-server)")
    if _port_open(port):
        pytest.skip(f"port {port} is taken: set RW_SECURE_PORT to a free block of four")
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--dir", str(state), "--save", "",
         "--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
         "--tls-auth-clients", "yes", "--user", "default", "off",
         "--user", REDIS_USER, "on", f">{REDIS_PASSWORD}", "~rw:*", "+@all"],  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not _port_open(port):
            if proc.poll() is not None:
                pytest.skip(f"redis-server without TLS support? {proc.stderr.read().decode()[-300:] if proc.stderr else ''}")
            if time.monotonic() > deadline:
                raise RuntimeError("secured Redis did not start")
            time.sleep(0.1)
        yield (
            f"rediss://{REDIS_USER}:{REDIS_PASSWORD}@127.0.0.1:{port}/0"
            f"?ssl_ca_certs={certs.ca}&ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}"
        )
    finally:
        _stop(proc)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@contextmanager
def secure_services(state: Path) -> Iterator[SecureServices]:
    port = int(os.environ.get("RW_SECURE_PORT", "19910"))
    certs = make_certs(state / "certs")
    with secure_redis(state, certs, port + 3) as redis_url, secure_kafka(state, certs, port) as bootstrap:
        yield SecureServices(bootstrap, redis_url, certs)
