"""``reasonwire topics plan|apply`` and ``reasonwire asyncapi``.

``topics plan`` prints the plan (:mod:`reasonwire.contracts.topic_plan`) for ``RW_PARTITIONS`` partitions
and ``RW_REPLICATION_FACTOR`` replicas, needing no broker. ``topics apply`` creates the missing
topics, adds partitions where the plan has more (the raw topic's once the normalizer group has
consumed it), refuses a decrease or another replication factor in one line before changing
anything (exit 2), and lists every remaining difference, one line each (exit 1 when any is
left, or when the raw topic did not drain in time); ``--check`` changes nothing. ``asyncapi`` writes the AsyncAPI 3.0 document
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
    apply = sub.add_parser(
        "apply",
        help="create the missing topics, add the partitions the plan has more of, say what else differs",
        description="Create the missing topics and add partitions where the plan has more (never fewer: a decrease or another "
        "replication factor is refused in one line, nothing changed). Partitions are added to reasoning.raw.v1 only once the "
        "normalizer group (RW_GROUP_ID) has consumed it (lag 0): stop the ingresses first (docs/scaling.md).",
        **settings_epilog(TopicsApplySettings),
    )
    apply.add_argument("--check", action="store_true", help="change nothing; only report")
    apply.add_argument("--live", action="store_true", help="add partitions without waiting for the normalizer group's lag to be 0 (runs caught mid-move end sequence_gap)")
    apply.add_argument("--drain-timeout", type=float, default=60.0, metavar="S", help="how long to wait for that lag to reach 0 (default: 60)")
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
    from reasonwire.workers.io.topics_admin import NotDrained, UnsafeChange, apply_plan

    from reasonwire.workers.services.preflight import check_kafka

    settings = TopicsApplySettings.from_env()
    asyncio.run(check_kafka(settings))  # the same one line as every command when the broker is not there
    try:
        with witness(quiet=True) as seen:  # our one line says what failed, not aiokafka's per retry
            done = asyncio.run(
                apply_plan(
                    settings.kafka_bootstrap_servers, _plan(settings), check=args.check, group=settings.group_id,
                    live=args.live, drain_timeout_s=args.drain_timeout,
                )
            )
    except UnsafeChange as exc:
        raise ConfigurationError(str(exc)) from None
    except NotDrained as exc:
        raise Unfinished(str(exc)) from None
    except KafkaSecurityError as exc:
        raise ConfigurationError(str(exc)) from None
    except Exception as exc:
        if refused := security_failure(exc, seen.seen):  # wrong credentials / TLS: the settings, not an outage
            raise ConfigurationError(refused) from None
        line = describe_failure(exc, seen.seen) or f"Kafka admin request failed ({type(exc).__name__})"
        raise ServiceUnreachable(line) from None
    for name in done.created:
        print(f"created {name}")
    for name, (before, after) in done.grown.items():
        print(f"added partitions to {name}: {before} → {after}")
    for difference in done.differences:
        if difference.what == "partitions":  # --check: what apply would add
            print(f"differs {difference} (apply adds {int(difference.wanted or 0) - int(difference.actual or 0)})")
        else:
            print(f"differs {difference}")
    if not done.differences:
        print(f"all {len(topic_plan.ROLES)} topics match the plan")
    return 1 if done.differences else 0


class Unfinished(UserError):
    """``topics apply`` stopped before a change it was asked to make (exit 1, as a difference left)."""

    exit_status = 1


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
