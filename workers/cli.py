"""The ``reasonwire`` command line: the sans-I/O core offline, and the worker entry points.

``reasonwire translate --provider GRAMMAR [FILE|-]`` reads one provider event per
line (or a raw SSE capture), writes AG-UI 1.0 events as JSONL to stdout, and
with ``--artefacts PATH`` the artefact records as JSONL. Warnings go to stderr
without content (P8). Exit status: 0 when the input was translated (an
interrupted or provider-failed run is still a translation), 1 when an event was
malformed (R7: the run ends with ``RUN_ERROR`` and the line is named), 2 for
unusable arguments or unreadable input.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

from contracts.grammars import Grammar
from workers import ingress_cli
from workers.core.translator import Translation, Translator
from workers.core.wire import event_json, record_json
from workers.gateway import command as gateway_command
from workers.replay import command as replay_command
from workers.sse import ProviderEvent, read_events
from workers.translators import implemented, translator_for


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "command"):
        parser.print_help()
        return 2
    try:
        return int(args.command(args))
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, like other filters
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reasonwire", description="Reasoning backbone: provider streams → AG-UI.")
    sub = parser.add_subparsers()
    tr = sub.add_parser("translate", help="translate one provider stream to AG-UI events (offline)")
    tr.add_argument("--provider", required=True, choices=[g.value for g in Grammar], help="the stream's grammar")
    tr.add_argument("--artefacts", metavar="PATH", help="write artefact records (JSONL) here")
    tr.add_argument("--run-id", help="run id (default: the provider's response id)")
    tr.add_argument("--thread-id", help="thread id (default: the run id)")
    tr.add_argument("--model", help="model, when the stream does not name it")
    tr.add_argument("--issuer-scope", help="account/key/region the provider binds artefacts to")
    tr.add_argument("input", nargs="?", default="-", help="capture file, or - for stdin (default)")
    tr.set_defaults(command=_translate)
    rp = sub.add_parser("replay", help="the next request's provider-native history from a client's AG-UI history")
    replay_command.add_arguments(rp)
    rp.set_defaults(command=replay_command.run)
    worker = sub.add_parser("worker", help="run a Kafka worker (configured from the environment)")
    worker_sub = worker.add_subparsers(required=True)
    normalize = worker_sub.add_parser("normalize", help="reasoning.raw.v1 → AG-UI events, artefacts in Redis")
    normalize.set_defaults(command=_normalize)
    replay_worker = worker_sub.add_parser("replay", help="reasoning.replay.requests.v1 → replies (request/reply)")
    replay_worker.set_defaults(command=_replay_worker)
    erase = sub.add_parser("erase", help="remove every stored artefact of a thread (REDIS_URL)")
    erase.add_argument("--tenant", default="default")
    erase.add_argument("--thread", required=True, help="thread id")
    erase.set_defaults(command=_erase)
    ingest = sub.add_parser("ingest", help="publish a provider stream (file or live stdin) to reasoning.raw.v1")
    ingress_cli.add_arguments(ingest)
    ingest.set_defaults(command=ingress_cli.run)
    gateway = sub.add_parser("gateway", help="AG-UI over HTTP/SSE: run events, HttpAgent endpoint, HTTP ingress, viewer")
    gateway_command.add_arguments(gateway)
    gateway.set_defaults(command=gateway_command.run)
    demo = sub.add_parser("demo", help="the whole pipeline on the sample streams (needs Kafka and Redis)")
    demo.set_defaults(command=_demo)
    from workers import topics_command

    topics_command.add_topics_arguments(sub.add_parser("topics", help="the topic plan: print it, or create/check the topics"))
    topics_command.add_asyncapi_arguments(sub.add_parser("asyncapi", help="write the AsyncAPI 3.0 document of every topic"))
    return parser


def _erase(args: argparse.Namespace) -> int:
    """Erase a thread's stored state and say what was removed (P7)."""
    import asyncio
    import json

    from redis.asyncio import Redis

    from workers.settings import WorkerSettings
    from workers.store import ArtefactStore

    async def erase() -> dict[str, list[str]]:
        settings = WorkerSettings.from_env()
        redis = Redis.from_url(settings.redis_url)
        try:
            store = ArtefactStore(redis, artefact_ttl_s=settings.artefact_ttl_s, journal_ttl_s=settings.journal_ttl_s)
            return await store.erase_thread(args.tenant, args.thread)
        finally:
            await redis.aclose()

    removed = asyncio.run(erase())
    print(json.dumps({"tenant": args.tenant, "thread": args.thread, "removed_artefacts": removed["artefacts"], "removed_journals": removed["journals"]}))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from workers.demo import main as demo_main

    return demo_main()


def _normalize(args: argparse.Namespace) -> int:
    from workers.normalize import run  # imported here: `translate` needs no Kafka client

    run()
    return 0


def _replay_worker(args: argparse.Namespace) -> int:
    from workers.replay_worker import run  # imported here: `replay` needs no Kafka client

    run()
    return 0


def _translate(args: argparse.Namespace) -> int:
    if Grammar(args.provider) not in implemented():
        print(f"reasonwire: no translator for {args.provider!r} yet", file=sys.stderr)
        return 2
    try:
        source = (
            io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict")
            if args.input == "-"
            else open(args.input, encoding="utf-8")  # noqa: SIM115
        )
    except OSError as exc:
        print(f"reasonwire: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        with source:
            events = list(read_events(source))
    except UnicodeDecodeError as exc:
        print(f"reasonwire: {args.input} is not UTF-8 text ({exc.reason} at byte {exc.start})", file=sys.stderr)
        return 2
    translator = translator_for(
        args.provider,
        run_id=args.run_id,
        thread_id=args.thread_id,
        model=args.model,
        issuer_scope=args.issuer_scope,
        # grammars whose stream names no response (Bedrock) still get a run id per capture
        fallback_run_id="run-" + hashlib.sha256(b"\n".join(e.data for e in events)).hexdigest()[:16],
    )
    artefacts = open(args.artefacts, "wb") if args.artefacts else None  # noqa: SIM115
    try:
        return _run(translator, events, sys.stdout.buffer, artefacts)
    finally:
        if artefacts is not None:
            artefacts.close()


def _run(translator: Translator, events: list[ProviderEvent], out: BinaryIO, artefacts: BinaryIO | None) -> int:
    status = 0
    for event in events:
        translation = translator.feed(event.data, sse_event=event.sse_event)
        status = max(status, _emit(translation, out, artefacts, input_line=event.line))
    status = max(status, _emit(translator.finish(), out, artefacts, input_line=None))
    out.flush()
    return status


def _emit(translation: Translation, out: BinaryIO, artefacts: BinaryIO | None, *, input_line: int | None) -> int:
    for event in translation.events:
        out.write(event_json(event) + b"\n")
    if artefacts is not None:
        for record in translation.artefacts:
            artefacts.write(record_json(record) + b"\n")
    where = f"input line {input_line}" if input_line is not None else "end of input"
    for warning in translation.warnings:
        print(f"reasonwire: warning: {where}: {warning.message}", file=sys.stderr)
    if translation.rejection is not None:
        print(f"reasonwire: error: {where}: {translation.rejection.reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
