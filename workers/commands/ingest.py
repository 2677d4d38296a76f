"""``reasonwire ingest``: publish a capture file or a live stdin stream, line by line as it arrives.

``curl -N … | reasonwire ingest --provider openai-responses --run-id r1`` publishes
each provider event the moment its line (or SSE frame) is complete — the pipe may
stay open for as long as the provider streams. End of input publishes ``end``;
SIGINT/SIGTERM publish ``abort``. One JSON line on stdout says what was published.
Exit status: 0 published, 1 the broker refused a record or an event is malformed (not JSON, not
the grammar: the line named as ``translate`` names it — a capture file is checked whole before
anything is published; on a live stream the events before it are published and the run is
aborted, and stdout says ``"outcome": "abort"``), 2 unusable input: an id outside the id
grammar (``reasonwire.contracts.ids``), a stream of another grammar or one without events —
refused with ``translate``'s wording before anything is published; 3 the broker is unreachable
(checked before anything is read), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import stat
import sys
import threading
from typing import BinaryIO

from reasonwire.contracts.grammars import Grammar

_EOF = b""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", required=True, choices=[g.value for g in Grammar], help="the stream's grammar")
    parser.add_argument("--run-id", required=True, help="the run (also the record key)")
    parser.add_argument("--thread-id", help="the conversation (default: the run id)")
    parser.add_argument("--tenant", default="default", help="tenant namespace (default: default)")
    parser.add_argument("--model", help="the requested model: artefacts are bound to it and replayed only to it")
    parser.add_argument("--issuer-scope", help="account/key/region the provider binds artefacts to")
    parser.add_argument(
        "--issuer-provider", help="who issued the stream where a grammar has many providers (openai-chat-completions: deepseek, glm, ollama:<model>, …)"
    )
    parser.add_argument("input", nargs="?", default="-", help="capture file (SSE or JSONL), or - for stdin (default)")


def run(args: argparse.Namespace) -> int:
    from reasonwire.contracts.ids import BadId, check_id

    try:
        check_id("run id", args.run_id)
        check_id("thread id", args.thread_id or args.run_id)
        if args.issuer_provider is not None:
            check_id("issuer provider", args.issuer_provider)
    except BadId as exc:
        print(f"reasonwire: error: {exc}", file=sys.stderr)
        return 2
    try:
        source: BinaryIO = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"reasonwire: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    refused = _check_file(args.provider, source)
    if refused is not None:
        return refused
    try:
        return asyncio.run(_ingest(args, source))
    except KeyboardInterrupt:  # abort was already published by the cancelled run
        return 130


def _check_file(provider: str, source: BinaryIO) -> int | None:
    """A capture file is checked whole before anything is published, as ``translate`` checks it: the
    exit status of a refusal (one line on stderr), or None. A pipe cannot be read ahead: its events
    are checked one by one as they are published (:class:`~reasonwire.workers.services.ingress.publisher.RunPublisher`)."""
    from reasonwire.workers.services.ingress.publisher import MalformedEvent, NotThisGrammar, check_capture

    if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
        return None
    try:
        check_capture(provider, source.read())
    except NotThisGrammar as exc:
        print(f"reasonwire: error: {exc}", file=sys.stderr)
        return 2
    except MalformedEvent as exc:
        print(f"reasonwire: error: {exc}; nothing was published", file=sys.stderr)
        return 1
    finally:
        source.seek(0)
    return None


def _reader(source: BinaryIO, loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue[bytes]) -> None:
    """A daemon thread: a blocking read of an open pipe must not keep the process alive at exit.
    ``os.read`` on the descriptor returns whatever has arrived (no waiting for a full buffer) and,
    unlike a buffered reader, holds no lock the interpreter needs at shutdown after Ctrl-C."""
    try:
        while chunk := os.read(source.fileno(), 65536):
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)
    except OSError:
        pass
    finally:
        loop.call_soon_threadsafe(chunks.put_nowait, _EOF)


async def _ingest(args: argparse.Namespace, source: BinaryIO) -> int:
    from aiokafka.errors import KafkaError

    from reasonwire.workers.services.ingress.publisher import IngressError, MalformedEvent, NotThisGrammar, Publisher
    from reasonwire.workers.ops.settings import IngestSettings

    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    threading.Thread(target=_reader, args=(source, loop, chunks), daemon=True).start()
    settings = IngestSettings.from_env()
    publisher = Publisher(settings.kafka_bootstrap_servers, request_timeout_ms=15000)
    try:
        await publisher.start()
    except KafkaError as exc:  # the broker went away since the CLI's check: the same one line, exit 3
        await publisher.stop()
        from reasonwire.workers.services.preflight import kafka_unreachable

        raise kafka_unreachable(settings, exc) from None
    except BaseException:  # Ctrl-C while connecting: close what was opened ("Unclosed AIOKafkaProducer" otherwise)
        await publisher.stop()
        raise
    try:
        async with publisher.run(
            provider=args.provider,
            run_id=args.run_id,
            thread_id=args.thread_id,
            tenant=args.tenant,
            model=args.model,
            issuer_scope=args.issuer_scope,
            issuer_provider=args.issuer_provider,
            check_grammar=True,  # the first events are held until recognised, as `translate` does
        ) as run:
            while (chunk := await chunks.get()) != _EOF:
                await run.feed(chunk)  # each line (SSE field or payload) goes out as soon as it is complete
    except NotThisGrammar as exc:
        print(f"reasonwire: error: {exc}", file=sys.stderr)  # translate's line; nothing was published
        return 2
    except MalformedEvent as exc:  # refused before its record; the events before it, if any, end in `abort`
        if not run.published:
            print(f"reasonwire: error: {exc}; nothing was published", file=sys.stderr)
            return 1
        print(f"reasonwire: error: {exc}; run {args.run_id} aborted after {run.published} events", file=sys.stderr)
        print(json.dumps({"run_id": args.run_id, "published": run.published, "outcome": "abort"}), flush=True)
        return 1
    except IngressError as exc:
        print(f"reasonwire: {exc}", file=sys.stderr)
        return 1
    except asyncio.CancelledError:
        print(json.dumps({"run_id": args.run_id, "published": run.published, "outcome": "abort"}), flush=True)
        return 130
    finally:
        await publisher.stop()
    print(json.dumps({"run_id": args.run_id, "published": run.published, "outcome": str(run.outcome)}), flush=True)
    return 0
