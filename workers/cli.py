"""The ``reasonwire`` command line: the sans-I/O core offline, and the worker entry points.

``reasonwire translate --provider GRAMMAR [FILE|-]`` reads one provider event per
line (or a raw SSE capture), writes AG-UI 1.0 events as JSONL to stdout as each
input line arrives (so ``… | reasonwire translate`` follows a live stream), and
with ``--artefacts PATH`` the artefact records as JSONL. Warnings go to stderr
without content (P8).

Anything a user can get wrong — arguments, input, paths, settings, a service
that is down — ends with one line on stderr and an exit status, never a
traceback (:mod:`reasonwire.workers.ops.errors`). Exit statuses, every command:

* 0 — done (an interrupted or provider-failed run is still a translation);
* 1 — ``translate``: an event was malformed (R7: the run ends with ``RUN_ERROR``
  and the line is named); ``replay``: the provider would reject what is left;
  ``topics apply``: a topic still differs from the plan; ``ingest``: the broker
  refused a record, or an event is malformed (the line named, as ``translate`` names it);
* 2 — unusable arguments, input, path or configuration (any variable of the
  command's settings, the policy file, credentials a service refuses, topics missing
  without ``RW_CREATE_TOPICS``, a gateway port already taken): input with no events,
  a stream of another grammar;
* 3 — a service (the Kafka broker, Redis) is unreachable;
* 130 — interrupted (Ctrl-C), quietly even during the start-up (:mod:`reasonwire.workers.ops.interrupts`).
"""

from __future__ import annotations

if __name__ == "__main__":  # `python -m reasonwire.workers.cli`: quiet Ctrl-C during the imports below
    from reasonwire.workers.ops.interrupts import hold_interrupts

    hold_interrupts()

import argparse
import hashlib
import io
import os
import stat
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, NoReturn, TypeVar


from reasonwire.contracts.artefacts import AGUI_VERSIONS
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.commands import ingest as ingress_cli
from reasonwire.workers.core.translator import Translation, Translator
from reasonwire.workers.core.events import with_value_types
from reasonwire.workers.core.wire import event_json, record_json
from reasonwire.workers.commands import gateway as gateway_command
from reasonwire.workers.ops.interrupts import release_interrupts
from reasonwire.workers.services.ingress.recognition import GrammarGate, NotThisGrammar
from reasonwire.workers.ops.errors import UserError
from reasonwire.workers.commands import replay as replay_command
from reasonwire.workers.io.sse import ProviderEvent, read_events
from reasonwire.workers.ops.settings import (
    DemoSettings,
    EraseSettings,
    GatewaySettings,
    IngestSettings,
    NormalizeSettings,
    ReplaySettings,
    ReplayWorkerSettings,
    Settings,
    settings_epilog,
)
from reasonwire.workers.translators import implemented, translator_for

S = TypeVar("S", bound=Settings)

REPEATS_SHOWN = 10
"""``translate`` names this many warnings of one kind line by line, then only counts them (said at the end)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "command"):
        parser.print_help()
        return 2
    if not getattr(args, "starts_services", False):
        release_interrupts()  # the command's own Ctrl-C handling from here (workers: after their checks)
    try:
        return int(args.command(args))
    except UserError as exc:
        print(f"reasonwire: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, like other filters
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasonwire")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """One line for an argument a user got wrong, as for every other mistake (exit 2): the usage
    block argparse prints first buried the line that says what was wrong; ``--help`` has it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reasonwire", description="Reasoning backbone: provider streams → AG-UI.")
    parser.add_argument("--version", action="version", version=f"reasonwire {_version()}")
    sub = parser.add_subparsers()
    tr = sub.add_parser("translate", help="translate one provider stream to AG-UI events (offline)", **settings_epilog())
    tr.add_argument("--provider", required=True, choices=[g.value for g in Grammar], help="the stream's grammar")
    tr.add_argument("--artefacts", metavar="PATH", help="write artefact records (JSONL) here")
    tr.add_argument(
        "--agui-version",
        choices=AGUI_VERSIONS,
        default="1.0",
        help="AG-UI version of the events (default 1.0); 1.1 adds encryptedValueType to every encrypted value",
    )
    tr.add_argument("--run-id", help="run id (default: the provider's response id)")
    tr.add_argument("--thread-id", help="thread id (default: the run id)")
    tr.add_argument("--model", help="model, when the stream does not name it")
    tr.add_argument("--issuer-scope", help="account/key/region the provider binds artefacts to")
    tr.add_argument(
        "--issuer-provider", help="who issued the stream where a grammar has many providers (openai-chat-completions: deepseek, glm, ollama:<model>, …)"
    )
    tr.add_argument("input", nargs="?", default="-", help="capture file, or - for stdin (default)")
    tr.set_defaults(command=_translate)
    rp = sub.add_parser(
        "replay", help="the next request's provider-native history from a client's AG-UI history", **settings_epilog(ReplaySettings)
    )
    replay_command.add_arguments(rp)
    rp.set_defaults(command=_replay)
    worker = sub.add_parser("worker", help="run a Kafka worker (configured from the environment)")
    worker_sub = worker.add_subparsers(required=True)
    normalize = worker_sub.add_parser(
        "normalize", help="reasoning.raw.v1 → AG-UI events, artefacts in Redis", description=_PROBES, **settings_epilog(NormalizeSettings)
    )
    normalize.set_defaults(starts_services=True, command=_normalize)
    replay_worker = worker_sub.add_parser(
        "replay", help="reasoning.replay.requests.v1 → replies (request/reply)", description=_PROBES, **settings_epilog(ReplayWorkerSettings)
    )
    replay_worker.set_defaults(starts_services=True, command=_replay_worker)
    erase = sub.add_parser("erase", help="remove every stored artefact of a thread from Redis", **settings_epilog(EraseSettings))
    erase.add_argument("--tenant", help="the thread's tenant (default: default, said on stderr)")
    erase.add_argument("--thread", required=True, help="thread id")
    erase.set_defaults(starts_services=True, command=_erase)
    ingest = sub.add_parser("ingest", help="publish a provider stream (file or live stdin) to reasoning.raw.v1", **settings_epilog(IngestSettings))
    ingress_cli.add_arguments(ingest)
    ingest.set_defaults(starts_services=True, command=_ingest)
    gateway = sub.add_parser(
        "gateway", help="AG-UI over HTTP/SSE: run events, HttpAgent endpoint, HTTP ingress, viewer", **settings_epilog(GatewaySettings)
    )
    gateway_command.add_arguments(gateway)
    gateway.set_defaults(starts_services=True, command=gateway_command.run)
    demo = sub.add_parser("demo", help="the whole pipeline on the sample streams (needs Kafka and Redis)", **settings_epilog(DemoSettings))
    demo.set_defaults(starts_services=True, command=_demo)
    from reasonwire.workers.commands import topics as topics_command

    topics_command.add_topics_arguments(sub.add_parser("topics", help="the topic plan: print it, or create/check the topics"))
    topics_command.add_asyncapi_arguments(sub.add_parser("asyncapi", help="write the AsyncAPI 3.0 document of every topic"))
    return parser


_PROBES = (
    "Probes on RW_HEALTH_HOST:RW_HEALTH_PORT: GET /healthz, GET /readyz, and GET /metrics (Prometheus) — served "
    "only with OTEL_METRICS_EXPORTER=prometheus (or otlp,prometheus); without it /metrics answers 404 and no "
    "metric is aggregated (docs/operations.md, \"Metrics\"). An address that cannot be bound stops the worker (exit 2)."
)


# -- commands that need the services ---------------------------------------------------


def _with_services(kind: type[S], body: Callable[[S], int], *, kafka: bool = True, redis: bool = True) -> int:
    """Settings validated (``kind``: exactly the variables the command reads), logging set up, the
    services checked (bounded), then ``body(settings)``; a connection lost later, or a path the
    command cannot write, is still one line (:class:`UserError`)."""
    import asyncio

    from reasonwire.workers.ops.logs import configure
    from reasonwire.workers.services.preflight import check_services, service_failure
    from reasonwire.workers.ops.settings import LogSettings

    settings = kind.from_env()
    if isinstance(settings, LogSettings):
        configure(settings)  # before any consumer joins a group: its start-up transient is not an ERROR
    asyncio.run(check_services(settings, kafka=kafka, redis=redis))  # type: ignore[arg-type]
    release_interrupts()
    try:
        return body(settings)
    except Exception as exc:
        failure = service_failure(exc, settings)  # type: ignore[arg-type]
        if failure is None and isinstance(exc, OSError) and exc.filename is not None:
            failure = UserError(f"cannot use {exc.filename}: {exc.strerror}")
        if failure is None:
            raise
        raise failure from None


def _erase(args: argparse.Namespace) -> int:
    """Erase a thread's stored state and say what was removed. Without ``--tenant`` the thread is
    the ``default`` tenant's, and stderr says so: a thread of another tenant is not touched, and an
    erase that found nothing must not pass for one that worked."""
    import asyncio
    import json

    from reasonwire.workers.io.redis_connect import connect
    from reasonwire.workers.io.store import ArtefactStore

    tenant = args.tenant if args.tenant is not None else "default"

    def erase(settings: EraseSettings) -> int:
        async def go() -> dict[str, list[str]]:
            store = ArtefactStore(connect(settings.redis_url), artefact_ttl_s=settings.artefact_ttl_s, journal_ttl_s=settings.journal_ttl_s)
            try:
                return await store.erase_thread(tenant, args.thread)  # across slots on a Redis Cluster
            finally:
                await store.aclose()

        removed = asyncio.run(go())
        if args.tenant is None:
            found = "" if removed["artefacts"] or removed["journals"] else " (nothing was stored there; give --tenant for another tenant's thread)"
            print(f"reasonwire: erased thread {args.thread!r} of tenant 'default' (no --tenant given){found}", file=sys.stderr)
        print(json.dumps({"tenant": tenant, "thread": args.thread, "removed_artefacts": removed["artefacts"], "removed_journals": removed["journals"]}))
        return 0

    return _with_services(EraseSettings, erase, kafka=False)


def _demo(args: argparse.Namespace) -> int:
    from reasonwire.workers.commands.demo import main as demo_main

    return _with_services(DemoSettings, demo_main)


def _normalize(args: argparse.Namespace) -> int:
    from reasonwire.workers.services.normalizer_app import run  # imported here: `translate` needs no Kafka client

    return _with_services(NormalizeSettings, lambda settings: run(settings) or 0)  # type: ignore[arg-type]


def _replay_worker(args: argparse.Namespace) -> int:
    from reasonwire.workers.services.replay_worker import run  # imported here: `replay` needs no Kafka client

    return _with_services(ReplayWorkerSettings, lambda settings: run(settings) or 0)  # type: ignore[arg-type]


def _ingest(args: argparse.Namespace) -> int:
    """The broker checked first (exit 3, one line), as for every command that needs it."""
    return _with_services(IngestSettings, lambda settings: ingress_cli.run(args), redis=False)


def _replay(args: argparse.Namespace) -> int:
    return int(replay_command.run(args))


# -- translate ----------------------------------------------------------------------------


def _translate(args: argparse.Namespace) -> int:
    if Grammar(args.provider) not in implemented():
        raise UserError(f"no translator for {args.provider!r} yet")
    source = _open_input(args.input)
    artefacts = None
    try:
        artefacts = _open_for_writing(args.artefacts) if args.artefacts else None
        digest = _capture_digest(source, args.input)
        translator = translator_for(
            args.provider,
            run_id=args.run_id,
            thread_id=args.thread_id,
            model=args.model,
            issuer_scope=args.issuer_scope,
            issuer_provider=args.issuer_provider,
            # grammars whose stream names no response (Bedrock) still get a run id per capture
            fallback_run_id="run-" + digest,
        )
        text = io.TextIOWrapper(source, encoding="utf-8-sig", errors="strict")
        try:
            return _run(translator, read_events(text), sys.stdout.buffer, artefacts, agui_version=args.agui_version)
        except UnicodeDecodeError as exc:
            raise UserError(f"{_name(args.input)} is not UTF-8 text ({exc.reason} at byte {exc.start} of a read)") from None
    finally:
        source.close()
        if artefacts is not None:
            artefacts.close()


def _open_for_writing(path: str) -> BinaryIO:
    """Opened before any input is read: a path that cannot be written fails before any output."""
    try:
        return open(path, "wb")  # noqa: SIM115
    except OSError as exc:
        raise UserError(f"cannot write --artefacts {path}: {exc.strerror}") from None


def _open_input(name: str) -> BinaryIO:
    if name == "-":
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)  # unbuffered: a line is handled as it arrives
    try:
        return open(name, "rb")  # noqa: SIM115
    except OSError as exc:
        raise UserError(f"cannot read {name}: {exc.strerror}") from None


def _capture_digest(source: BinaryIO, name: str) -> str:
    """A run id seed for streams that name none (Bedrock): the events of a capture file, as
    before streaming; a live stream (a pipe) cannot be read ahead, so it gets a random one."""
    if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
        return uuid.uuid4().hex[:16]
    data = source.read()
    source.seek(0)
    try:
        events = list(read_events(io.StringIO(data.decode("utf-8-sig"), newline=None)))
    except UnicodeDecodeError as exc:
        raise UserError(f"{_name(name)} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return hashlib.sha256(b"\n".join(e.data for e in events)).hexdigest()[:16]


def _name(input_name: str) -> str:
    return "stdin" if input_name == "-" else input_name


@dataclass
class _Progress:
    """What ``translate`` has written so far: warnings per code and the exit status."""

    warnings: Counter[str] = field(default_factory=Counter)
    """Warnings met per code: each code is named :data:`REPEATS_SHOWN` times, then only counted."""
    status: int = 0
    agui_version: str = "1.0"
    """The version the events are written in (``--agui-version``)."""


def _run(
    translator: Translator, events: Iterable[ProviderEvent], out: BinaryIO, artefacts: BinaryIO | None, *, agui_version: str = "1.0"
) -> int:
    """Feed each event as it is read and write its output at once (flushed per line).

    Until an event is recognised (handled, or rejected as malformed), the output (``RUN_STARTED``)
    and unknown-event warnings are held (:class:`~reasonwire.workers.services.ingress.recognition.GrammarGate`,
    the same recognition ``ingest`` and ``POST /v1/ingest`` use): a stream of another grammar
    then ends with one line, "this is not an X stream", and exit 2 — never with an invented run.
    A stream with no event at all says so (exit 2)."""
    progress = _Progress(agui_version=agui_version)
    gate: GrammarGate[int | None] = GrammarGate(translator, hold=None)
    try:
        for event in events:
            for translation, line in gate.feed(event, event.line):
                _emit(translation, out, artefacts, input_line=line, progress=progress)
            out.flush()
        for translation, line in gate.finish():
            _emit(translation, out, artefacts, input_line=line, progress=progress)
    except NotThisGrammar as exc:
        raise UserError(str(exc)) from None
    _emit(translator.finish(), out, artefacts, input_line=None, progress=progress)
    for code, count in progress.warnings.items():
        if count > REPEATS_SHOWN:
            print(f"reasonwire: warning: {count - REPEATS_SHOWN} more {code} warnings not shown", file=sys.stderr)
    out.flush()
    return progress.status


def _emit(translation: Translation, out: BinaryIO, artefacts: BinaryIO | None, *, input_line: int | None, progress: _Progress) -> None:
    events = translation.events
    if progress.agui_version != "1.0" and translation.artefacts:
        events = with_value_types(events, translation.artefacts)
    for event in events:
        out.write(event_json(event) + b"\n")
    if artefacts is not None:
        for record in translation.artefacts:
            artefacts.write(record_json(record) + b"\n")
    where = f"input line {input_line}" if input_line is not None else "end of input"
    for warning in translation.warnings:
        progress.warnings[warning.code] += 1
        if progress.warnings[warning.code] > REPEATS_SHOWN:
            continue
        print(f"reasonwire: warning: {where}: {warning.message}", file=sys.stderr)
    if translation.rejection is not None:
        print(f"reasonwire: error: {where}: {translation.rejection.reason}", file=sys.stderr)
        progress.status = max(progress.status, 1)


if __name__ == "__main__":
    raise SystemExit(main())
