"""Which Kafka and Redis the integration tests run against.

Three paths, decided by :func:`choose` (pure, so it is unit-tested without Docker):

* ``given`` — ``KAFKA_BOOTSTRAP_SERVERS`` and ``REDIS_URL`` both name servers (``make test``
  on the local path exports a private pair; a developer may point at their own);
* ``testcontainers`` — a Docker engine answers (or ``RW_SERVICES=testcontainers``): the
  fixtures start Kafka and Redis containers with testcontainers' kafka and redis modules;
* ``local`` — no Docker engine (or ``RW_SERVICES=local``): ``deploy/services.sh`` runs a
  real broker JVM and ``redis-server`` as plain processes, on spare ports.

``python -m tests.integration.service_choice`` prints the choice for this environment;
the Makefile asks it whether ``make test`` must start the local services first.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Literal
from urllib.parse import urlparse

Choice = Literal["given", "testcontainers", "local"]
RW_SERVICES_VALUES: tuple[str, ...] = ("testcontainers", "local")


class ServiceChoiceError(ValueError):
    """RW_SERVICES holds a value that names no path."""


def choose(env: Mapping[str, str], docker_answers: Callable[[], bool]) -> Choice:
    """The service path for ``env``; ``docker_answers`` is only asked when nothing decides first.

    Named servers win: they are what the caller wants tested, and probing Docker would
    only cost time. Then ``RW_SERVICES``; then whether a Docker engine answers.
    """
    if env.get("KAFKA_BOOTSTRAP_SERVERS") and env.get("REDIS_URL"):
        return "given"
    wanted = env.get("RW_SERVICES", "").strip()
    if wanted:
        if wanted not in RW_SERVICES_VALUES:
            raise ServiceChoiceError(f"RW_SERVICES={wanted!r}: use one of {', '.join(RW_SERVICES_VALUES)} (or leave it unset)")
        return wanted  # type: ignore[return-value]
    return "testcontainers" if docker_answers() else "local"


def docker_answers(env: Mapping[str, str] | None = None, timeout: float = 1.0) -> bool:
    """True if the Docker engine at ``DOCKER_HOST`` (default: the local socket) answers ``/_ping``.

    A quick probe, not a client: an absent socket or a refused/slow connection means no.
    """
    env = os.environ if env is None else env
    host = env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    url = urlparse(host)
    try:
        if url.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(url.path)
        elif url.scheme in ("tcp", "http") and url.hostname:
            sock = socket.create_connection((url.hostname, url.port or 2375), timeout=timeout)
        else:
            return False
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256).split(b"\r\n", 1)[0] + b" "
    except OSError:
        return False


def main() -> int:
    try:
        print(choose(os.environ, docker_answers))
    except ServiceChoiceError as exc:
        print(f"reasonwire tests: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
