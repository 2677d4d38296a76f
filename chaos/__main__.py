"""``python -m chaos`` (``make chaos``): see chaos/__init__.py."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from chaos.harness import Chaos, Scenario, cluster_scenarios, collect, machine, scan_logs, scenarios, verify, verify_bad
from chaos.load import bad_cases, huge_case, templates
from chaos.services import Services

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--kafka-port", type=int, default=int(os.environ.get("CHAOS_KAFKA_PORT", "19710")),
                        help="the chaos broker's port (controller: +1); default 19710")
    parser.add_argument("--redis-port", type=int, default=int(os.environ.get("CHAOS_REDIS_PORT", "19712")),
                        help="the chaos Redis's port (health probes: +3, +4); default 19712")
    parser.add_argument("--state", default=os.environ.get("CHAOS_STATE", "/tmp/rw-chaos"), help="state dir for the services")
    parser.add_argument("--out", default=str(ROOT / "out" / "chaos"), help="worker logs and the table")
    parser.add_argument("--scale", type=float, default=float(os.environ.get("CHAOS_SCALE", "1")), help="multiply the runs per scenario")
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all, then bad_input)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each selected scenario this many times in a row (the k-th as <name>_r<k>): "
                             "a distribution, e.g. --only redis_outage --repeat 5 for the /readyz recovery time")
    parser.add_argument("--keep-services", action="store_true", help="leave Kafka and Redis running afterwards")
    parser.add_argument("--kafka-brokers", type=int, default=1,
                        help="1: the single-node scenarios; 3: a replicated cluster (deploy/cluster.sh) and broker kills")
    parser.add_argument("--worker-tree", default=None,
                        help="run the workers from this source tree (e.g. `git archive <commit>` unpacked) for a before/after")
    args = parser.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    services = Services(Path(args.state), args.kafka_port, args.redis_port, out / "services.log", kafka_brokers=args.kafka_brokers)
    services.down()
    services.wipe_redis()
    try:
        return asyncio.run(_main(services, out, args))
    finally:
        if not args.keep_services:
            services.down()


async def _main(services: Services, out: Path, args: argparse.Namespace) -> int:
    started = time.monotonic()
    print(f"[chaos] services on Kafka :{services.kafka_port}, Redis :{services.redis_port} (state {services.state})", flush=True)
    await asyncio.to_thread(services.up)
    chaos = Chaos(out, services, scale=args.scale, tree=Path(args.worker_tree) if args.worker_tree else None)
    await chaos.start_producer()
    chaos.start_worker("A")
    only = {s for s in args.only.split(",") if s}
    try:
        for scenario in cluster_scenarios() if args.kafka_brokers > 1 else scenarios():
            if only and scenario.name not in only:
                continue
            extra = None
            if scenario.name.startswith("bad_"):  # binary headers apart: today they take their whole poll with them
                cases = [c for c in bad_cases(templates()) if c.name.startswith("binary") == (scenario.name == "bad_binary")]
                chaos.bad += cases
                extra = [c.run for c in cases]
            for k in range(1, max(1, args.repeat) + 1):
                await chaos.run_scenario(scenario if k == 1 else replace(scenario, name=f"{scenario.name}_r{k}"), extra=extra if k == 1 else None)
        if args.kafka_brokers == 1 and (not only or "bad_huge" in only):  # last: it once wedged the partitions of its polls
            huge = huge_case(templates(), await chaos.huge_value_size())
            chaos.bad.append(huge)
            await chaos.run_scenario(Scenario("bad_huge", 20, 5), extra=[huge.run])
        lag = await chaos.settle(90)
        seen = await collect(services.bootstrap)
    finally:
        assert chaos.producer is not None
        await chaos.producer.stop()
        for worker in chaos.workers.values():
            worker.stop()
    diagnostics: list[str] = []
    rows = verify(chaos, seen, diagnostics)
    (out / "incomplete_runs.txt").write_text("\n".join(diagnostics) + "\n")
    opaque, checked = scan_logs(chaos)
    wedged = sorted(p for p, n in lag.items() if n) if lag else ["?"]
    table = _table(chaos, rows, seen, opaque, checked, wedged, time.monotonic() - started)
    (out / "table.md").write_text(table)
    print(table, flush=True)
    failed = (any(r.verdict != "PASS" for r in rows) or opaque or wedged or chaos.unsent or any(m.ok is False for m in chaos.measures)
              or any(verify_bad(c, seen)[0] != "PASS" for c in chaos.bad))
    return 1 if failed else 0


def _table(chaos: Chaos, rows: list, seen, opaque: int, checked: int, wedged: list, elapsed: float) -> str:  # type: ignore[no-untyped-def]
    lines = [
        f"chaos run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed:.0f} s, {machine()}",
        "",
        "| scenario | runs | complete | lost runs (events) | duplicate copies | inconsistent numbers | runs with two events under one number "
        "| runs ended twice | store_lost (accounted) | wedged partitions | runs missing an artefact | worker log | worker CPU | DLQ by reason | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        dlq = ", ".join(f"{k} {n}" for k, n in sorted(r.dlq.items())) or "-"
        log = "-" if r.usage is None else f"{r.usage.log_bytes:,} B" + (f" (≤ {r.log_budget:,})" if r.log_budget is not None else "")
        cpu = "-" if r.usage is None else f"{r.usage.cpu_pct:.0f} % ({r.usage.span_s:.0f} s)"
        artefacts = "-" if r.artefacts_missing is None else str(r.artefacts_missing)
        lines.append(f"| {r.scenario} | {r.runs} | {r.complete} | {r.lost_runs} ({r.lost_events}) | {r.duplicates} | {r.inconsistent} | "
                     f"{r.renumbered} | {r.ended_twice} | {r.refused} | {len(r.wedged)} | {artefacts} | {log} | {cpu} | {dlq} | {r.verdict} |")
    total = sum(r.runs for r in rows)
    lines.append(f"| **all** | {total} | {sum(r.complete for r in rows)} | {sum(r.lost_runs for r in rows)} ({sum(r.lost_events for r in rows)}) | "
                 f"{sum(r.duplicates for r in rows)} | {sum(r.inconsistent for r in rows)} | {sum(r.renumbered for r in rows)} | "
                 f"{sum(r.ended_twice for r in rows)} | {sum(r.refused for r in rows)} | | {sum(r.artefacts_missing or 0 for r in rows)} | "
                 f"{sum(r.usage.log_bytes for r in rows if r.usage):,} B | | {sum(len(v) for v in seen.dlq.values())} DLQ records in all | |")
    lines += ["", "| bad input | must hold | observed | verdict |", "|---|---|---|---|"]
    for case in chaos.bad:
        verdict, observed = verify_bad(case, seen)
        lines.append(f"| {case.name} | {case.must} | {observed} | {verdict} |")
    lines += ["", "| figure | measured | target | verdict |", "|---|---|---|---|"]
    lines.append(f"| wedged partitions (raw, uncommitted after the final 90 s drain) | {len(wedged)} {wedged if wedged else ''} | 0 | "
                 f"{'PASS' if not wedged else 'FAIL'} |")
    lines.append(f"| raw records the load producer failed to publish (would look lost) | {chaos.unsent} | 0 | {'PASS' if not chaos.unsent else 'FAIL'} |")
    lines.append(f"| opaque values found in worker logs | {opaque} of {checked} | 0 | {'PASS' if not opaque else 'FAIL'} |")
    for m in chaos.measures:
        lines.append(f"| {m.name} | {m.value} | {m.target} | {'PASS' if m.ok else 'FAIL' if m.ok is False else '-'} |")
    if len(chaos.readyz_recoveries) > 1:
        waits = sorted(chaos.readyz_recoveries)
        lines.append(f"| /readyz after Redis is back, {len(waits)} outages (s) | " + ", ".join(f"{w:.1f}" for w in waits)
                     + f" (median {waits[len(waits) // 2]:.1f}) | each as above | - |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
