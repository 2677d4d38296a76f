"""``reasonwire gateway [--host H] [--port P]`` and ``reasonwire gateway --hash-key KEY``.

Start-up, in order, each failure one line on stderr and the README's exit status: the settings
(:class:`~reasonwire.workers.ops.settings.GatewaySettings`, exit 2), the key book (exit 2), Kafka and
Redis (exit 3, :mod:`reasonwire.workers.services.preflight`), the run-request topic (missing without
``RW_CREATE_TOPICS``: exit 2), the listening socket (taken: exit 2). Only then does it say where
it serves and hand the bound socket to uvicorn — with no logging configuration of uvicorn's
own, so its records (and the access log, ``RW_GATEWAY_ACCESS_LOG``) go through
:func:`reasonwire.workers.ops.logs.configure`'s one handler, in ``RW_LOG_FORMAT``, without colours.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys

from reasonwire.workers.ops.errors import ServiceUnreachable, UserError
from reasonwire.workers.ops.interrupts import release_interrupts
from reasonwire.workers.ops.settings import GatewaySettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # No default read here: RW_GATEWAY_HOST / RW_GATEWAY_PORT are settings (validated, and named
    # when bad); a flag given overrides them.
    parser.add_argument("--host", help="bind address (default: RW_GATEWAY_HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: RW_GATEWAY_PORT, else 8000; the worker health probes take 8080)")
    parser.add_argument("--hash-key", metavar="KEY", help="print the SHA-256 digest to put in the key book, and exit")


def run(args: argparse.Namespace) -> int:
    from reasonwire.workers.services.gateway.keys import KeyBook, KeyBookError, hash_key

    if args.hash_key:
        print(hash_key(args.hash_key))
        return 0
    settings = GatewaySettings.from_env()  # a bad RW_GATEWAY_* value is the one line to say, before anything else
    overrides = {name: value for name in ("host", "port") if (value := getattr(args, name)) is not None}
    if not 0 <= overrides.get("port", 0) <= 65535:
        raise UserError(f"--port {args.port}: not a port number (0-65535)")
    settings = settings.model_copy(update=overrides)
    from reasonwire.workers.ops.logs import configure

    configure(settings)
    from reasonwire.workers.ops.health import install_log_throttle

    install_log_throttle()  # aiokafka logs every failed connection attempt during an outage
    try:
        keys = KeyBook.from_env(os.environ)
    except KeyBookError as exc:
        raise UserError(str(exc)) from None
    asyncio.run(_ready(settings))
    from reasonwire.workers.ops.health import listen

    listener = listen(settings.host, settings.port, "--port" if "port" in overrides else "RW_GATEWAY_PORT")
    if not keys:  # after the checks: a failure to start stays the one line on stderr
        print("reasonwire: warning: no API keys (RW_GATEWAY_KEYS_FILE / RW_GATEWAY_KEYS): every /v1 request gets 401", file=sys.stderr)
    return serve(settings, keys, listener)


async def _ready(settings: GatewaySettings) -> None:
    """The services answer and the run-request topic is there (or created): what the app's start
    would otherwise fail on inside uvicorn, as a traceback."""
    from aiokafka.errors import KafkaError

    from reasonwire.workers.ops.errors import ConfigurationError
    from reasonwire.workers.services.gateway.app import _ensure_requests_topic
    from reasonwire.workers.io.kafka_security import KafkaSecurityError
    from reasonwire.workers.services.preflight import check_services, kafka_unreachable
    from reasonwire.workers.io.topics_admin import TopicsMissing

    await check_services(settings)
    try:
        await _ensure_requests_topic(settings)
    except (TopicsMissing, KafkaSecurityError) as exc:
        raise ConfigurationError(str(exc)) from None
    except (KafkaError, OSError) as exc:  # the broker went away since the check
        raise kafka_unreachable(settings, exc) from None


def serve(settings: GatewaySettings, keys: object, listener: socket.socket) -> int:
    """Serve on ``listener`` until SIGINT/SIGTERM (uvicorn's graceful shutdown)."""
    import uvicorn

    from reasonwire.workers.services.gateway.app import create_app

    release_interrupts()  # from here uvicorn's own shutdown on SIGINT/SIGTERM
    host, port = listener.getsockname()[:2]
    # through the log handler, so RW_LOG_FORMAT=json has no plain line
    logging.getLogger("reasonwire.gateway").info("reasonwire gateway on http://%s:%d (viewer: /v1/viewer)", host, port)
    config = uvicorn.Config(
        create_app(settings, keys),  # type: ignore[arg-type]
        log_config=None,  # uvicorn's records go through the root handler (workers/ops/logs.py)
        access_log=False,  # the app's own (RW_GATEWAY_ACCESS_LOG): with its duration and bytes, fields in JSON
        use_colors=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    server.run(sockets=[listener])
    if not server.started:  # the app's start failed after the checks (a service lost meanwhile): logged above
        raise ServiceUnreachable("the gateway did not start: its start-up failed after the service checks (the log above says why)")
    return 0
