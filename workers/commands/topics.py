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
import sys

from reasonwire.contracts import topic_plan
from reasonwire.workers.ops.errors import ConfigurationError, ServiceUnreachable, UserError
from reasonwire.workers.ops.settings import AsyncApiSettings, TopicPlanSettings, TopicsApplySettings, settings_epilog, settings_help


def _plan(settings: TopicPlanSettings) -> list[topic_plan.TopicSpec]:
    return topic_plan.plan(settings.partitions, settings.replication_factor)


def add_topics_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(required=True)
    show = sub.add_parser(
        "plan", help="print every topic with partitions, replication, retention, cleanup policy", **settings_epilog(TopicPlanSettings)
    )
    show.add_argument("--json", action="store_true", help="the plan as JSON")
    show.set_defaults(command=_plan_command)
    apply = sub.add_parser("apply", help="create the missing topics (KAFKA_BOOTSTRAP_SERVERS) and say which differ", **settings_epilog(TopicsApplySettings))
    apply.add_argument("--check", action="store_true", help="create nothing; only report")
    apply.set_defaults(command=_apply_command)


def add_asyncapi_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = settings_help(AsyncApiSettings)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--output", "-o", metavar="PATH", help="write here instead of stdout")
    parser.set_defaults(command=_asyncapi_command)


def _plan_command(args: argparse.Namespace) -> int:
    specs = _plan(TopicPlanSettings.from_env())
    if args.json:
        doc = {"version": topic_plan.VERSION, "topics": [{"name": s.name, "partitions": s.partitions, "replication": s.replication, "config": dict(s.config)} for s in specs]}
        print(json.dumps(doc, indent=2))
    else:
        print(topic_plan.render(specs))
    return 0


def _apply_command(args: argparse.Namespace) -> int:
    from reasonwire.workers.io.kafka_security import KafkaSecurityError, describe_failure, security_failure, witness
    from reasonwire.workers.io.topics_admin import apply

    from reasonwire.workers.services.preflight import check_kafka

    settings = TopicsApplySettings.from_env()
    asyncio.run(check_kafka(settings))  # the same one line as every command when the broker is not there
    try:
        with witness(quiet=True) as seen:  # our one line says what failed, not aiokafka's per retry
            created, differences = asyncio.run(apply(settings.kafka_bootstrap_servers, _plan(settings), create=not args.check))
    except KafkaSecurityError as exc:
        raise ConfigurationError(str(exc)) from None
    except Exception as exc:
        if refused := security_failure(exc, seen.seen):  # wrong credentials / TLS: the settings, not an outage
            raise ConfigurationError(refused) from None
        line = describe_failure(exc, seen.seen) or f"Kafka admin request failed ({type(exc).__name__})"
        raise ServiceUnreachable(line) from None
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
    settings = AsyncApiSettings.from_env()
    doc = document(version=ours, servers=settings.kafka_bootstrap_servers, partitions=settings.partitions, replication=settings.replication_factor)
    text = json.dumps(doc, indent=2) + "\n"
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            raise UserError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
