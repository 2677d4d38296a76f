"""``reasonwire topics plan|apply`` and ``reasonwire asyncapi`` (issue 16).

``topics plan`` prints the plan (:mod:`reasonwire.contracts.topic_plan`) for ``RW_PARTITIONS`` partitions
and ``RW_REPLICATION_FACTOR`` replicas, needing no broker. ``topics apply`` creates the missing
topics and lists every remaining difference, one line each (exit 1 when any is left);
``--check`` creates nothing. ``asyncapi`` writes the AsyncAPI 3.0 document
(:mod:`reasonwire.contracts.asyncapi`) to stdout or ``--output``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from reasonwire.contracts import topic_plan


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name) or str(default)
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"reasonwire: {name} must be a positive integer")
    return int(value)


def _plan() -> list[topic_plan.TopicSpec]:
    return topic_plan.plan(_int_env("RW_PARTITIONS", 8), _int_env("RW_REPLICATION_FACTOR", 1))


def add_topics_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(required=True)
    show = sub.add_parser("plan", help="print every topic with partitions, replication, retention, cleanup policy")
    show.add_argument("--json", action="store_true", help="the plan as JSON")
    show.set_defaults(command=_plan_command)
    apply = sub.add_parser("apply", help="create the missing topics (KAFKA_BOOTSTRAP_SERVERS) and say which differ")
    apply.add_argument("--check", action="store_true", help="create nothing; only report")
    apply.set_defaults(command=_apply_command)


def add_asyncapi_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", metavar="PATH", help="write here instead of stdout")
    parser.set_defaults(command=_asyncapi_command)


def _plan_command(args: argparse.Namespace) -> int:
    specs = _plan()
    if args.json:
        doc = {"version": topic_plan.VERSION, "topics": [{"name": s.name, "partitions": s.partitions, "replication": s.replication, "config": dict(s.config)} for s in specs]}
        print(json.dumps(doc, indent=2))
    else:
        print(topic_plan.render(specs))
    return 0


def _apply_command(args: argparse.Namespace) -> int:
    from reasonwire.workers.kafka_security import KafkaSecurityError, describe_failure, witness
    from reasonwire.workers.topics_admin import apply

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    try:
        with witness(quiet=True) as seen:  # our one line says what failed, not aiokafka's per retry
            created, differences = asyncio.run(apply(bootstrap, _plan(), create=not args.check))
    except KafkaSecurityError as exc:
        print(f"reasonwire: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = describe_failure(exc, seen.seen) or f"Kafka admin request failed ({type(exc).__name__})"
        print(f"reasonwire: {line}", file=sys.stderr)
        return 3
    for name in created:
        print(f"created {name}")
    for difference in differences:
        print(f"differs {difference}")
    if not differences:
        print(f"all {len(topic_plan.ROLES)} topics match the plan")
    return 1 if differences else 0


def _asyncapi_command(args: argparse.Namespace) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from reasonwire.contracts.asyncapi import document

    try:
        ours = version("reasonwire")
    except PackageNotFoundError:  # run from a source tree that was not installed
        ours = "0.0.0"
    doc = document(
        version=ours,
        servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
        partitions=_int_env("RW_PARTITIONS", 8),
        replication=_int_env("RW_REPLICATION_FACTOR", 1),
    )
    text = json.dumps(doc, indent=2) + "\n"
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            print(f"reasonwire: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0
