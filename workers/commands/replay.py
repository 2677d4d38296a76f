"""``reasonwire replay``: the next request's provider-native history, from the command line.

``reasonwire replay --provider GRAMMAR [--model M] [--issuer-scope S] [--issuer-provider P] [--artefacts FILE]
[--tenant T] [--thread-id T] [--honour-client-omissions] [FILE|-]`` reads a JSON
``RunAgentInput`` (or a bare messages array) as the client holds it — or the AG-UI events
``reasonwire translate`` wrote (JSONL), folded by :class:`~reasonwire.workers.replay.consumer.AgUiConsumer`
as a client folds them, so ``translate`` → ``replay`` needs no hand-built history — and writes one
JSON object to stdout: OpenAI ``{"input": …}``, Anthropic ``{"messages": …}``,
Gemini generateContent ``{"contents": …}``, Gemini Interactions ``{"input": …}``,
Bedrock ``{"messages": …}``, Chat Completions ``{"messages": …}`` (plus the grammar's system field when the history
has system messages). Artefacts come from ``--artefacts`` (the JSONL ``reasonwire
translate --artefacts`` writes) or else from Redis at ``REDIS_URL`` for
``--tenant`` and the thread (``--thread-id``, default the input's ``threadId``).

Warnings (what was left out and why) go to stderr, never with a value (P8).
Exit status: 0 when the fragment was written; 1 when the provider would reject
what is left (the replay fails before the call); 2 for unusable arguments,
input or configuration; 3 for an unreachable store (``reasonwire.workers.ops.errors``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.ops.errors import UserError
from reasonwire.workers.replay import ProviderWouldReject, ReplayError, read_history, replay
from reasonwire.workers.io.replay_sources import ArtefactFileError, read_artefact_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", required=True, choices=[g.value for g in Grammar], help="the next request's grammar")
    parser.add_argument("--model", help="the next request's model (default: the thread's latest issuer model)")
    parser.add_argument("--issuer-scope", help="account/key/region the next request goes to, as configured")
    parser.add_argument(
        "--issuer-provider",
        help="the provider the next request goes to where many speak the grammar (deepseek, glm, "
        "openrouter:<format>, xai, …; default: the grammar's own)",
    )
    parser.add_argument("--artefacts", metavar="FILE", help="artefact records (JSONL); default: Redis at REDIS_URL")
    parser.add_argument("--tenant", default="default", help="tenant whose Redis artefacts are read (default: default)")
    parser.add_argument("--thread-id", help="thread whose Redis artefacts are read (default: the input's threadId)")
    parser.add_argument(
        "--honour-client-omissions",
        action="store_true",
        help="the client is one that keeps encrypted reasoning values: a message it holds without one had it withdrawn"
        " (by the client, on purpose), so it is not sent back",
    )
    parser.add_argument(
        "input", nargs="?", default="-", help="RunAgentInput or messages JSON, or the AG-UI events `translate` wrote (JSONL); - for stdin"
    )


def run(args: argparse.Namespace) -> int:
    try:
        history = _read_json(args.input)
        _, thread_id = read_history(history)
        artefacts = _artefacts(args, args.thread_id or thread_id)
        target = ReplayTarget(
            grammar=Grammar(args.provider), model=args.model, scope=args.issuer_scope, provider=args.issuer_provider
        )
        result = replay(
            history,
            artefacts,
            target,
            tenant=None if args.artefacts else args.tenant,
            honour_client_omissions=args.honour_client_omissions,
        )
    except ProviderWouldReject as exc:
        return _fail(exc.message, 1)
    except (ReplayError, ArtefactFileError) as exc:
        return _fail(getattr(exc, "message", str(exc)), 2)
    for warning in result.warnings:
        print(f"reasonwire: warning: {warning.message}", file=sys.stderr)
    sys.stdout.write(json.dumps(result.fragment, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


def _read_json(name: str) -> Any:
    """The history: one JSON document (a ``RunAgentInput`` or a messages array), or the AG-UI
    events ``reasonwire translate`` writes (JSONL), folded into messages as a client holds them."""
    try:
        text = sys.stdin.buffer.read().decode("utf-8") if name == "-" else open(name, encoding="utf-8").read()  # noqa: SIM115
    except OSError as exc:
        raise UserError(f"cannot read {name}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{name} is not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        if _first_is_event(text):
            return _fold_events(text, name)
        raise UserError(f"{name} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(document, dict) and isinstance(document.get("type"), str) and "messages" not in document:
        return _fold_events(text, name)  # a stream of one event
    return document


def _first_is_event(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        event = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(event, dict) and isinstance(event.get("type"), str)


def _fold_events(text: str, name: str) -> dict[str, Any]:
    """AG-UI events (one JSON object per line) → the ``RunAgentInput`` a client holding them would
    send next: the folding is :class:`~reasonwire.workers.replay.consumer.AgUiConsumer`'s, the thread id
    the ``RUN_STARTED`` event's. What the consumer drops is said on stderr, never a value (P8)."""
    from reasonwire.workers.replay.consumer import AgUiConsumer

    consumer = AgUiConsumer()
    thread_id: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{name} line {number} is not JSON ({exc.msg}): expected one AG-UI event per line") from None
        if not isinstance(event, dict):
            raise UserError(f"{name} line {number} is not an AG-UI event (a JSON object with a type)")
        if event.get("type") == "RUN_STARTED" and isinstance(event.get("threadId"), str):
            thread_id = thread_id or event["threadId"]
        step = consumer.feed(event)
        for warning in step.warnings:
            print(f"reasonwire: warning: {name} line {number}: {warning.message}", file=sys.stderr)
        if step.fatal is not None:
            raise UserError(f"{name} line {number}: {step.fatal}")
    history: dict[str, Any] = {"messages": consumer.wire_messages()}
    if thread_id is not None:
        history["threadId"] = thread_id
    return history


def _artefacts(args: argparse.Namespace, thread_id: str | None) -> list[Any]:
    if args.artefacts:
        try:
            return read_artefact_file(args.artefacts)
        except OSError as exc:
            raise UserError(f"cannot read {args.artefacts}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UserError(f"{args.artefacts} is not UTF-8 text (not what `reasonwire translate --artefacts` writes)") from None
    if thread_id is None:
        raise UserError("a bare messages array has no threadId: give --thread-id, or --artefacts FILE")
    return asyncio.run(_from_redis(args.tenant, thread_id))


async def _from_redis(tenant: str, thread_id: str) -> list[Any]:
    from redis.exceptions import RedisError

    from reasonwire.workers.io.redis_connect import connect

    from reasonwire.workers.ops.errors import ServiceUnreachable
    from reasonwire.workers.services.preflight import redis_unreachable
    from reasonwire.workers.io.replay_sources import read_thread
    from reasonwire.workers.ops.settings import ReplaySettings
    from reasonwire.workers.io.store import ArtefactStore

    settings = ReplaySettings.from_env()
    redis = connect(settings.redis_url, socket_connect_timeout=10)  # a store that does not answer fails, not hangs
    try:
        store = ArtefactStore(redis, artefact_ttl_s=settings.artefact_ttl_s, journal_ttl_s=settings.journal_ttl_s)
        return await read_thread(store, tenant, thread_id)
    except RedisError as exc:  # the same line as every command's (preflight), and the way around it
        raise ServiceUnreachable(f"{redis_unreachable(settings, exc)}; or give --artefacts FILE") from None
    finally:
        await redis.aclose()


def _fail(message: str, status: int) -> int:
    print(f"reasonwire: error: {message}", file=sys.stderr)
    return status
