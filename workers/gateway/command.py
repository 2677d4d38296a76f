"""``reasonwire gateway [--host H] [--port P]`` and ``reasonwire gateway --hash-key KEY``."""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=os.environ.get("RW_GATEWAY_HOST", "127.0.0.1"), help="bind address (RW_GATEWAY_HOST)")
    parser.add_argument("--port", type=int, default=os.environ.get("RW_GATEWAY_PORT", "8000"), help="port (RW_GATEWAY_PORT, 8000; the worker health probes take 8080)")
    parser.add_argument("--hash-key", metavar="KEY", help="print the SHA-256 digest to put in the key book, and exit")


def run(args: argparse.Namespace) -> int:
    from reasonwire.workers.gateway.keys import KeyBook, KeyBookError, hash_key

    if args.hash_key:
        print(hash_key(args.hash_key))
        return 0
    from reasonwire.workers.gateway.app import serve
    from reasonwire.workers.gateway.settings import GatewaySettings

    settings = GatewaySettings.from_env()  # a bad RW_GATEWAY_* value is the one line to say, before anything else
    try:
        keys = KeyBook.from_env(os.environ)
    except KeyBookError as exc:
        print(f"reasonwire: {exc}", file=sys.stderr)
        return 2
    if not keys:
        print("reasonwire: warning: no API keys (RW_GATEWAY_KEYS_FILE / RW_GATEWAY_KEYS): every /v1 request gets 401", file=sys.stderr)
    return serve(args.host, args.port, settings=settings, keys=keys)
