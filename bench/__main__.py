"""``python -m bench`` (``make bench``): every benchmark in one run, one machine.

Writes ``bench/results/results.json`` (every figure, the machine, the command),
``bench/results/table.md`` (the short table, also printed) and the profiles
next to them. Every figure is a ratio or a percentile measured in this run.

Sections: 1 translator CPU vs the JSON floor (``bench.cpu``), 2 vs LiteLLM
(``bench.litellm_compare``), 3 worker vs passthrough on the real broker and 5
scale-out (``bench.e2e``), 4 memory (``bench.memory``), and the profiles
(``bench.profiles``). Parts 3 and 5 need ``KAFKA_BOOTSTRAP_SERVERS`` and
``REDIS_URL`` (``make bench`` starts the local services); without them they are
skipped and the table says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from bench import ab, cpu, e2e, gateway, hostload, litellm_compare, memory, profiles, targets
from bench.streams import runs, templates
from reasonwire.workers.ops import handoff
from reasonwire.workers.ops import native
from reasonwire.workers.translators import implemented

RESULTS = Path(__file__).resolve().parent / "results"

TARGETS = {
    "translator_to_floor": 2.0,
    "speedup_vs_litellm": 3.0,
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    versions = {}
    for dist in ("pydantic", "pydantic-core", "orjson", "ag-ui-protocol", "faststream", "aiokafka", "redis", "litellm", "pyinstrument", "py-spy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions,
        "kafka_bootstrap": os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        "redis_url": os.environ.get("REDIS_URL"),
        "load_at_start": os.getloadavg()[0],
        "core": native.status(),  # the worker's hot path compiled or pure (workers/ops/native.py)
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every section (figures are noisy)")
    parser.add_argument("--skip", action="append", default=[], choices=["cpu", "litellm", "memory", "e2e", "profile", "gateway"])
    parser.add_argument(
        "--grammar", action="append", choices=[g.value for g in implemented()], help="only this grammar (repeatable; default: every one)"
    )
    args = parser.parse_args()
    quick = args.quick
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.time()
    grammars = args.grammar or [g.value for g in implemented()]
    results: dict[str, Any] = {
        "command": "make bench" + (f" BENCH_ARGS='{' '.join(sys.argv[1:])}'" if len(sys.argv) > 1 else ""),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "grammars": grammars,
    }

    log(f"grammars with a translator: {', '.join(grammars)}")
    n_runs = 200 if quick else 1000
    workloads: dict[str, cpu.Workload] = {}
    template_notes: dict[str, Any] = {}
    for g in grammars:
        tset = templates(g)
        template_notes[g] = {"templates": len(tset.templates), "dropped": tset.dropped}
        workloads[g] = cpu.workload(g, list(runs(tset, n_runs)))
    results["streams"] = template_notes

    if "cpu" not in args.skip:
        results["cpu"] = {}
        for g in grammars:
            log(f"1. translator CPU vs JSON floor: {g}")
            results["cpu"][g] = cpu.measure(workloads[g], rounds=3 if quick else 5)

    if "litellm" not in args.skip:
        log("2. vs LiteLLM's streaming translation")
        subset = {g: _subset(workloads[g], 100 if quick else 300) for g in ("anthropic-messages", "openai-responses") if g in workloads}
        results["litellm"] = litellm_compare.measure(subset, rounds=3 if quick else 5)

    if "profile" not in args.skip:
        results["profile_translator"] = {}
        for g in [g for g in ("anthropic-messages", "openai-responses") if g in workloads]:
            log(f"profile (pyinstrument): translator {g}")
            w = _subset(workloads[g], 300)

            def work(w: cpu.Workload = w) -> None:
                for i, lines in enumerate(w.runs):
                    cpu.translate_run(w.cls, lines, f"run-{i}")

            results["profile_translator"][g] = profiles.translator_profile(work, 1.0 if quick else 2.0, RESULTS / f"profile-translator-{g}.txt")

    if "memory" not in args.skip:
        log("4. memory: open runs and run length")
        results["memory"] = memory.measure(grammars, open_n=300 if quick else 500, k1=300 if quick else 500, k2=1500 if quick else 3000)

    if "e2e" not in args.skip:
        if not (os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and os.environ.get("REDIS_URL")):
            results["e2e"] = {"skipped": "KAFKA_BOOTSTRAP_SERVERS / REDIS_URL not set (make bench starts the services)"}
        else:
            results["e2e"] = asyncio.run(_e2e(grammars, quick))
            if "profile" not in args.skip and "profile_raw" in results["e2e"]:
                results["profile_worker"] = profiles.worker_profile(Path(results["e2e"].pop("profile_raw")))

    if "gateway" not in args.skip:  # 200 SSE clients on one gateway process (bench.gateway)
        if not (os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and os.environ.get("REDIS_URL")):
            results["gateway"] = {"skipped": "KAFKA_BOOTSTRAP_SERVERS / REDIS_URL not set (make bench starts the services)"}
        else:
            log("6. gateway: 200 concurrent SSE clients, raw publish → SSE delivery, memory")
            bootstrap, redis_url = os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"]
            results["gateway"] = asyncio.run(gateway.measure(bootstrap, redis_url, clients=200, runs=10 if quick else 20, logs=RESULTS / "logs"))

    results["elapsed_s"] = time.time() - started
    results["load_at_end"] = os.getloadavg()[0]
    results["summary"] = summarize(results)
    (RESULTS / "results.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    table = render_table(results) + (gateway.render(results["gateway"]) if "gateway" in results else "")
    (RESULTS / "table.md").write_text(table)
    print(table)
    log(f"done in {results['elapsed_s']:.0f}s; results in {RESULTS}/results.json and table.md")
    return 0


def _subset(w: cpu.Workload, n: int) -> cpu.Workload:
    return cpu.Workload(
        grammar=w.grammar,
        cls=w.cls,
        runs=w.runs[:n],
        outputs=w.outputs[:n],
        input_events=sum(len(r) for r in w.runs[:n]),
        output_events=w.output_events,
        input_bytes=sum(len(line) for r in w.runs[:n] for line in r),
    )


THROUGHPUT_KINDS = (
    "passthrough",
    "io-floor",
    "worker",
    "worker-no-telemetry",
    "worker-exporting-sampled",
    "worker-exporting",
    "passthrough-pipelined",
    "faststream-passthrough",
)
"""Every round drains one backlog through each, in a seeded shuffled order (a new one per round): a
ratio is taken within a round, and judged as the median over rounds."""
LATENCY_KINDS = ("passthrough", "worker", "passthrough-pipelined", "worker-no-telemetry")

RATIOS: tuple[tuple[str, str, str, float | None, str], ...] = (
    ("worker_to_passthrough", "worker", "passthrough", None, "worker as shipped (Redis writes, OTel SDK and guards on, no exporter) / bare passthrough (context: throughput is judged against main 1af85a6's worker, verdict below)"),
    ("worker_no_telemetry_to_passthrough", "worker-no-telemetry", "passthrough", None, "worker, telemetry off / bare passthrough"),
    ("io_floor_to_passthrough", "io-floor", "passthrough", None, "I/O-equivalent floor (same outputs and Redis commands, precomputed) / bare passthrough"),
    ("worker_to_io_floor", "worker", "io-floor", None, "worker as shipped / I/O-equivalent floor (the cost of reasonwire's own logic)"),
    ("worker_no_telemetry_to_io_floor", "worker-no-telemetry", "io-floor", None, "worker, telemetry off / I/O-equivalent floor"),
    ("shipped_to_telemetry_off", "worker", "worker-no-telemetry", None, "worker as shipped (no exporter) / telemetry off"),
    ("sampled_to_telemetry_off", "worker-exporting-sampled", "worker-no-telemetry", 0.90, "exporting spans and metrics, 1 % of runs traced (parentbased_traceidratio 0.01) / telemetry off"),
    ("exporting_to_telemetry_off", "worker-exporting", "worker-no-telemetry", 0.60, "exporting every span and metric (console exporter) / telemetry off"),
    ("worker_to_today", "worker", targets.BASELINE_KIND, None, f"worker as shipped / main {targets.BASELINE_COMMIT}'s worker, same round (target ≥ {targets.THROUGHPUT_TO_BASELINE_MIN:g}×, verdict below)"),
    ("faststream_to_passthrough", "faststream-passthrough", "passthrough", None, "FastStream passthrough / bare passthrough"),
    ("pipelined_to_passthrough", "passthrough-pipelined", "passthrough", None, "pipelined bare passthrough / bare passthrough"),
)


def target_rounds(e: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[float, list[dict[str, Any]]]]:
    """The e2e section's figures per round, as :func:`bench.targets.verdicts` takes them."""
    rates, cpus, loads = e.get("throughput_rounds", {}), e.get("cpu_us_per_record_rounds", {}), e.get("round_loads", [])
    drain = [
        {"load": load, "rate": {k: v[i] for k, v in rates.items() if len(v) > i}, "cpu": {k: v[i] for k, v in cpus.items() if len(v) > i}}
        for i, load in enumerate(loads)
    ]
    latency: dict[float, dict[int, dict[str, Any]]] = {}
    for x in e.get("latency", []):
        if "share" not in x or x.get("p50_us") is None or x.get("p99_us") is None:
            continue
        slot = latency.setdefault(x["share"], {}).setdefault(x["round"], {"load": x.get("load", float("inf")), "p50": {}, "p99": {}, "handoff": {}})
        slot["p50"][x["kind"]], slot["p99"][x["kind"]] = x["p50_us"] / 1000, x["p99_us"] / 1000
        if x.get("handoff"):
            slot["handoff"][x["kind"]] = x["handoff"]
    return drain, {share: [rounds[r] for r in sorted(rounds)] for share, rounds in latency.items()}


async def _e2e(grammars: list[str], quick: bool) -> dict[str, Any]:
    """Throughput in alternating rounds on consumer processes that stay up, then latency rounds on
    the same processes, then 2 workers vs 1 (a context figure, fresh processes)."""
    import pickle
    import statistics

    bootstrap, redis_url = os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"]
    logs = RESULTS / "logs"
    logs.mkdir(exist_ok=True)
    created: list[str] = []
    rounds = 5 if quick else 7
    latency_rounds = 3 if quick else 5
    # the drain backlogs are sized from the rates the warm-up round measures (targets.backlog_size):
    # a fixed 40 000 outran the producer on a fast idle host and took minutes on a slow one
    window_s, max_produce_s = (1.0, 3.0) if quick else (3.0, 6.0)
    floor_records, warm_records = (4000, 2000) if quick else (30000, 6000)
    send_s = 2.0 if quick else 3.0
    out: dict[str, Any] = {
        "partitions": e2e.PARTITIONS,
        "concurrent_runs": e2e.CONCURRENT_RUNS,
        "broker_on_same_machine": True,
        "rounds": rounds,
        "latency_rounds": latency_rounds,
        "quiet_load": targets.QUIET_LOAD,
    }
    tag = f"r{int(time.time())}"

    def stage(name: str) -> e2e.Stage:
        s = e2e.Stage(bootstrap, redis_url, name)
        created.extend(s.all_topics())
        return s

    live: dict[str, tuple[e2e.Consumer, e2e.Stage]] = {}
    trees = contextlib.ExitStack()
    try:
        out["fanout"] = e2e.fanout(e2e.traffic(grammars, 5000, seed=9, tag=f"{tag}-fan").records)
        base_floor = e2e.traffic(grammars, floor_records, seed=12, tag=f"{tag}-f").records
        floor_file = logs / "io-floor-traffic.pickle"
        floor_file.write_bytes(pickle.dumps([(r.key, r.value, r.headers) for r in base_floor]))
        kinds = list(THROUGHPUT_KINDS)
        today = _todays_tree(trees)  # throughput is judged against main 1af85a6's worker, in the same rounds
        if isinstance(today, Path):
            kinds.append(targets.BASELINE_KIND)
        else:
            out["baseline_missing"] = today
            log(f"3. no {targets.BASELINE_KIND} beside the worker: {today}")
        for kind in kinds:
            log(f"3. starting {kind} (stays up for every round)")
            if kind == targets.BASELINE_KIND:  # the worker as shipped, run from a worktree of that commit
                st, saved = stage("worker-today"), e2e.ROOT
                e2e.ROOT = today  # type: ignore[assignment]
                try:
                    live[kind] = (await e2e.start_live("worker", st, logs), st)
                finally:
                    e2e.ROOT = saved
                continue
            st = stage(kind)
            extra = {"RW_BENCH_FLOOR_TRAFFIC": str(floor_file)} if kind == "io-floor" else {}
            if kind in LATENCY_KINDS and kind.startswith("worker"):
                extra["RW_BENCH_PHASES"] = str(logs / f"phases-{kind}.json")  # per-phase timestamps (bench.phases), read per latency run
                handoff_file = logs / f"handoff-{kind}.json"  # poll → producer inside the worker, written as it exits
                handoff_file.unlink(missing_ok=True)
                extra[handoff.ENV] = str(handoff_file)
            live[kind] = (await e2e.start_live(kind, st, logs, extra), st)

        log("3. warm-up round (not counted): lazy imports and each grammar's first runs; it measures the rates the backlogs are sized from")
        warm = e2e.traffic(grammars, warm_records, seed=5, tag=f"{tag}-warm").records
        warm_rates: dict[str, float] = {}
        produce_rates: list[float] = []
        for kind, (consumer, st) in live.items():
            records = base_floor[: len(warm)] if kind == "io-floor" else e2e.retag(warm, f"{tag}-warm", f"{tag}-warm-{kind}")
            try:
                result = await e2e.drain_live(consumer, st, records)
                warm_rates[kind] = result["records_per_s"]
            except RuntimeError as exc:  # drained between two samples: faster than the warm-up can tell
                if "between two samples" not in str(exc):
                    raise
                warm_rates[kind], result = float("inf"), {"produce_s": 0.0}
            if result["produce_s"] > 0:
                produce_rates.append(len(records) / result["produce_s"])
        produce_rate = statistics.median(produce_rates) if produce_rates else 0.0
        sizes = {k: targets.backlog_size(v, produce_rate, window_s=window_s, max_produce_s=max_produce_s) for k, v in warm_rates.items()}
        sizes["io-floor"] = min(sizes["io-floor"], len(base_floor))
        # a worker's runs must end inside its backlog (a cut run stays open until the inactivity
        # timeout expires it in a later round): the worker kinds share one backlog, the largest they
        # need; the stateless kinds take a prefix of theirs
        n_workers = max(n for k, n in sizes.items() if k.startswith("worker"))
        n_passthroughs = max(n for k, n in sizes.items() if "passthrough" in k)
        base_w = e2e.traffic(grammars, n_workers, seed=12, tag=f"{tag}-w").records
        base_pt = e2e.traffic(grammars, n_passthroughs, seed=11, tag=f"{tag}-pt").records
        for k in sizes:
            sizes[k] = len(base_w) if k.startswith("worker") else sizes[k]
        out["backlog"] = {"warm_up_records_per_s": warm_rates, "produce_records_per_s": produce_rate, "window_s": window_s, "max_produce_s": max_produce_s, "records": sizes}
        log("3. backlog per round: " + ", ".join(f"{k} {n}" for k, n in sizes.items()) + f" (harness produces {produce_rate:.0f} records/s)")

        def backlog(kind: str, label: str) -> list[e2e.Record]:
            if kind == "io-floor":
                return base_floor[: sizes[kind]]  # its table is precomputed for exactly these records
            if kind.startswith("worker"):
                return e2e.retag(base_w, f"{tag}-w", f"{tag}-{label}-{kind}")
            return e2e.retag(base_pt[: sizes[kind]], f"{tag}-pt", f"{tag}-{label}-{kind}")
        per_round: dict[str, list[float]] = {k: [] for k in kinds}
        cpu_per_record: dict[str, list[float]] = {k: [] for k in kinds}
        out["round_orders"] = []
        out["round_loads"] = []
        meter = hostload.HostMeter()
        for r in range(rounds):
            meter.start()
            # Each round drains every kind once, in a new order: with one fixed order a kind always
            # followed the same neighbour and inherited its after-effects (the broker's segment
            # flushes, Redis's AOF rewrite), a bias the median of rounds does not remove.
            order = random.Random(r).sample(kinds, len(kinds))
            out["round_orders"].append(order)
            for kind in order:
                consumer, st = live[kind]
                records = backlog(kind, f"t{r}")
                spy = None
                if kind == "worker" and r == rounds - 1:
                    spy = e2e._py_spy(consumer.proc.pid, 3.0 if quick else 5.0, logs / "profile.pyspy.txt")
                result = await e2e.drain_live(consumer, st, records)
                if spy is not None:
                    spy.wait(40)
                    out["profile_raw"] = str(logs / "profile.pyspy.txt")
                per_round[kind].append(result["records_per_s"])
                cpu_per_record[kind].append(result["cpu_us_per_record"])
            host = meter.stop()
            out["round_loads"].append(host.neighbours)
            out.setdefault("round_load_averages", []).append((host.load_start, host.load_end))
            log(f"3. round {r + 1}/{rounds} ({host.describe()}): " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in per_round.items()))
        out["throughput_rounds"] = per_round
        out["cpu_us_per_record_rounds"] = cpu_per_record

        w_max = statistics.median(per_round["worker"])
        out["latency"] = []
        await _settle(30.0 if quick else 60.0)
        for label, share in (("50% of worker max", 0.5), ("25% of worker max", 0.25)):
            rate = share * w_max
            n_records = int(rate * (send_s + 1.0))
            base = e2e.traffic(grammars, n_records, seed=30, tag=f"{tag}-lat", map_events=True)
            for r in range(latency_rounds):
                meter.start()
                this_round = len(out["latency"])
                for kind in LATENCY_KINDS:
                    consumer, st = live[kind]
                    new = f"{tag}-l{int(rate)}-{r}-{kind}"
                    tr = e2e.Traffic(
                        e2e.retag(base.records, f"{tag}-lat", new),
                        {(new + rid[len(f"{tag}-lat") :], seq): i for (rid, seq), i in base.event_source.items()},
                    )
                    log(f"3. latency at {rate:.0f} records/s ({label}), round {r + 1}/{latency_rounds}: {kind}")
                    phases_file = logs / f"phases-{kind}.json"
                    if kind.startswith("worker"):
                        consumer.proc.send_signal(signal.SIGUSR1)  # phases from here on
                    res = await e2e.latency(st, kind, tr, rate, logs, live=consumer)
                    if kind.startswith("worker"):
                        consumer.proc.send_signal(signal.SIGUSR1)
                        await asyncio.sleep(0.5)
                        res["phases"] = orjson.loads(phases_file.read_bytes()) if phases_file.exists() else None
                    out["latency"].append({"label": label, "share": share, "round": r, **res})
                host = meter.stop()
                for x in out["latency"][this_round:]:
                    x.update(host.fields())
                log(f"3. latency round {r + 1}/{latency_rounds} at {label}: {host.describe()} ({'quiet' if targets.is_quiet(host.neighbours) else 'loaded'})")
        for kind in LATENCY_KINDS:  # the workers write their hand-off samples as they exit
            handoff_file = logs / f"handoff-{kind}.json"
            if kind.startswith("worker"):
                live[kind][0].stop()
                samples = orjson.loads(handoff_file.read_bytes())["samples"] if handoff_file.exists() else []
                for x in out["latency"]:
                    if x["kind"] == kind:
                        x["handoff"] = targets.handoff_window(samples, *x["window_perf"])

        if not quick:
            log(f"5. drain {len(base_w)} records: 2 x worker-no-telemetry (fresh processes; context)")
            tr = e2e.traffic(grammars, len(base_w), seed=14, tag=f"{tag}-two")
            out["worker-no-telemetry_drain_2"] = await e2e.drain(stage("worker-no-telemetry2"), "worker-no-telemetry", 2, tr.records, logs)
    finally:
        for consumer, _ in live.values():
            consumer.stop()
        trees.close()
        await e2e.delete_topics(bootstrap, created)
        out["redis_keys_removed"] = await e2e.delete_bench_keys(redis_url)
    return out


def _todays_tree(stack: contextlib.ExitStack) -> Path | str:
    """A worktree of main 1af85a6 (:data:`targets.BASELINE_COMMIT`) for the rest of the section, or
    why there is none (a copy without the git history: the throughput target is then not judged)."""
    rev = targets.BASELINE_COMMIT
    found = subprocess.run(["git", "-C", str(e2e.ROOT), "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        return f"commit {rev} is not in this repository's history"
    return stack.enter_context(ab.worktrees({rev}))[rev]


SETTLED_LOAD_AVERAGE = 1.0
"""The 1-minute load average the latency rounds wait for after the drain rounds (:func:`_settle`)."""


async def _settle(longest_s: float) -> None:
    """Before the latency rounds: wait (at most ``longest_s``) for the 1-minute load average to
    drop below :data:`SETTLED_LOAD_AVERAGE` — the after-effects of the drain rounds just before (the broker's and Redis's
    flushes) are out of the first latency round. (Rounds are judged quiet by their neighbours'
    CPU, ``bench/hostload.py``, not by this average.)"""
    deadline = time.monotonic() + longest_s
    while os.getloadavg()[0] >= SETTLED_LOAD_AVERAGE and time.monotonic() < deadline:
        await asyncio.sleep(2.0)
    log(f"3. latency rounds start at load average {os.getloadavg()[0]:.2f}")


spread = targets.spread


# -- summary and table -------------------------------------------------------------------------


def summarize(r: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {}
    if "cpu" in r:
        s["translator_to_floor"] = {g: v["ratio_to_floor"] for g, v in r["cpu"].items()}
        s["translator_marginal_to_floor"] = {g: v["decomposed"]["marginal_ratio_to_floor"] for g, v in r["cpu"].items()}
    lite = r.get("litellm", {}).get("grammars", {})
    if lite:
        s["speedup_vs_litellm"] = {g: v["speedup_vs_litellm_wire"] for g, v in lite.items()}
        s["speedup_vs_litellm_parser_only"] = {g: v["speedup_vs_litellm_parser_only"] for g, v in lite.items()}
    e = r.get("e2e", {})
    rounds = e.get("throughput_rounds")
    if rounds:
        s["throughput"] = {kind: spread(v) for kind, v in rounds.items() if v}
        s["cpu_us_per_record"] = {kind: spread(v) for kind, v in e.get("cpu_us_per_record_rounds", {}).items() if v}
        for name, num, den, target, _ in RATIOS:
            if rounds.get(num) and rounds.get(den):
                ratios = [a / b for a, b in zip(rounds[num], rounds[den], strict=True)]
                s[name] = {**spread(ratios), "target": target, "met": None if target is None else spread(ratios)["median"] >= target}
        if "worker-no-telemetry_drain_2" in e:
            s["two_workers_to_one"] = e["worker-no-telemetry_drain_2"]["records_per_s"] / spread(rounds["worker-no-telemetry"])["median"]
    lat = e.get("latency")
    if lat:
        by: dict[tuple[str, int, str], dict[str, Any]] = {(x["label"], x["round"], x["kind"]): x for x in lat}
        labels = sorted({x["label"] for x in lat}, reverse=True)
        s["latency"] = {}
        for label in labels:
            n = 1 + max(x["round"] for x in lat if x["label"] == label)
            row: dict[str, Any] = {"rate": next(x["target_rate"] for x in lat if x["label"] == label), "share": next((x.get("share") for x in lat if x["label"] == label), None)}
            for kind in LATENCY_KINDS:
                mine = [by.get((label, i, kind)) for i in range(n)]
                row[kind] = {p: spread([m[f"{p}_us"] / 1000 for m in mine if m and m[f"{p}_us"] is not None] or [float("nan")]) for p in ("p50", "p99")}
                cores = [m["consumer_cores"] for m in mine if m and "consumer_cores" in m]
                if cores:  # what the rate costs the consumer (results of older runs have none)
                    row[kind]["cores"] = spread(cores)
                for base in ("passthrough", "passthrough-pipelined"):
                    if kind == base or (base == "passthrough-pipelined" and not kind.startswith("worker")):
                        continue
                    diffs = {
                        p: [
                            (m[f"{p}_us"] - b[f"{p}_us"]) / 1000
                            for m, b in ((by.get((label, i, kind)), by.get((label, i, base))) for i in range(n))
                            if m and b and m[f"{p}_us"] is not None and b[f"{p}_us"] is not None
                        ]
                        for p in ("p50", "p99")
                    }
                    row[kind][f"added_over_{base}"] = {p: spread(d) for p, d in diffs.items() if d}
            s["latency"][label] = row
        s["phases"] = {}
        for x in lat:
            if x.get("phases"):
                for phase, v in x["phases"].items():
                    slot = s["phases"].setdefault(x["label"], {}).setdefault(x["kind"], {}).setdefault(phase, {"p50": [], "p99": [], "max": [], "n": []})
                    for q in ("p50", "p99", "max", "n"):
                        slot[q].append(v[q])
        for label, kinds in s["phases"].items():
            for kind, phases in kinds.items():
                for phase, v in phases.items():
                    phases[phase] = {q: sorted(vals)[len(vals) // 2] for q, vals in v.items()}  # median over rounds
    if "e2e" in r and "skipped" not in r["e2e"]:
        drain, latency = target_rounds(e)
        s["target_verdicts"] = [dataclasses.asdict(v) for v in targets.verdicts(drain, latency)]
    return s


def _met(ok: bool | None) -> str:
    return "—" if ok is None else ("yes" if ok else "**no**")


def render_table(r: dict[str, Any]) -> str:
    s, m = r["summary"], r["machine"]
    lines = [
        f"reasonwire benchmarks — {r['started']} — {m['nproc']} × {m['cpu_model']}, Python {m['python']}, core {m.get('core', '?')} — `{r['command']}` "
        f"— load average at start {m['load_at_start']:.2f}, at end {r.get('load_at_end', float('nan')):.2f}",
        "",
        "| measure | result (this run) | target | met |",
        "|---|---|---|---|",
    ]
    if "translator_to_floor" in s:
        worst = max(s["translator_to_floor"].values())
        per = ", ".join(f"{g} {v:.1f}×" for g, v in s["translator_to_floor"].items())
        lines.append(f"| translator CPU / JSON floor (per event) | {per} | ≤ {TARGETS['translator_to_floor']:.1f}× | {_met(worst <= TARGETS['translator_to_floor'])} |")
        per = ", ".join(f"{g} {v:.1f}×" for g, v in s["translator_marginal_to_floor"].items())
        lines.append(f"| same, one more event in a run (fitted slope, fixed cost per run apart) | {per} | (context) | — |")
    if "speedup_vs_litellm" in s:
        per = ", ".join(f"{g} {v:.1f}× (parser-only {s['speedup_vs_litellm_parser_only'][g]:.1f}×)" for g, v in s["speedup_vs_litellm"].items())
        lines.append(f"| reasonwire speed / LiteLLM's streaming path | {per} | ≥ {TARGETS['speedup_vs_litellm']:.0f}× | {_met(min(s['speedup_vs_litellm'].values()) >= TARGETS['speedup_vs_litellm'])} |")
    if "throughput" in s:
        e = r["e2e"]
        fan = e.get("fanout", {})
        lines.append(
            f"| records/s per consumer, median (min–max) over {e['rounds']} alternating rounds | "
            + "; ".join(f"{k} {v['median']:.0f} ({v['min']:.0f}–{v['max']:.0f})" for k, v in s["throughput"].items())
            + f" | — | — |"
        )
        if s.get("cpu_us_per_record"):
            lines.append(
                "| consumer process CPU per raw record, µs, median (min–max) of the rounds (user + system, from producing the backlog to its last commit) | "
                + "; ".join(f"{k} {v['median']:.0f} ({v['min']:.0f}–{v['max']:.0f})" for k, v in s["cpu_us_per_record"].items())
                + " | — | — |"
            )
        if fan:
            lines.append(f"| outputs per raw record | worker and I/O floor {fan.get('worker_outputs_per_record', 0):.2f}, passthroughs 1 | — | — |")
        for name, _, _, target, title in RATIOS:
            x = s.get(name)
            if x:
                goal = f"≥ {target:.0%}" if target is not None else "(context)"
                lines.append(f"| {title} | {x['median']:.0%} ({x['min']:.0%}–{x['max']:.0%}; IQR {x['q1']:.0%}–{x['q3']:.0%}) | {goal} | {_met(x['met'])} |")
        for label, row in s.get("latency", {}).items():
            for kind in ("worker", "worker-no-telemetry", "passthrough-pipelined"):
                k = row.get(kind, {})
                added = k.get("added_over_passthrough", {})
                if not added:
                    continue
                who = {"worker": "worker as shipped", "worker-no-telemetry": "worker, telemetry off", "passthrough-pipelined": "pipelined passthrough"}[kind]
                limit = targets.E2E_ADDED_P99_MS.get(row.get("share"))  # type: ignore[arg-type]
                goal = f"p50 ≤ +0 ms, p99 ≤ {limit:g} ms, on quiet rounds" if kind == "worker" and limit is not None else "(context)"
                met = "see the verdicts" if kind == "worker" and limit is not None else "—"
                base = row["passthrough"]
                lines.append(
                    f"| added latency @ {row['rate']:.0f}/s ({label}, {who}) over the bare passthrough, median (min–max) of {e['latency_rounds']} rounds | "
                    f"p50 {added['p50']['median']:+.1f} ms ({added['p50']['min']:+.1f}…{added['p50']['max']:+.1f}), "
                    f"p99 {added['p99']['median']:+.1f} ms ({added['p99']['min']:+.1f}…{added['p99']['max']:+.1f}); "
                    f"it: p50 {k['p50']['median']:.1f} / p99 {k['p99']['median']:.1f} ms, bare passthrough {base['p50']['median']:.1f} / {base['p99']['median']:.1f} ms"
                    + (f"; CPU: it {k['cores']['median']:.2f} cores, bare passthrough {base['cores']['median']:.2f}" if "cores" in k and "cores" in base else "")
                    + (
                        f"; over the pipelined passthrough p50 {k['added_over_passthrough-pipelined']['p50']['median']:+.1f} / p99 {k['added_over_passthrough-pipelined']['p99']['median']:+.1f} ms"
                        if k.get("added_over_passthrough-pipelined")
                        else ""
                    )
                    + f" | {goal} | {met} |"
                )
        if e.get("round_loads"):
            lines.append(f"| neighbours' CPU per drain round (cores; the host's busy time less the bench's own processes) | {', '.join(f'{x:.2f}' for x in e['round_loads'])} | (context) | — |")
        for label in s.get("latency", {}):
            loads = sorted({(x["round"], x["load"]) for x in e.get("latency", []) if x["label"] == label and "load" in x})
            if loads:
                quiet = sum(1 for _, x in loads if targets.is_quiet(x))
                lines.append(
                    f"| neighbours' CPU per latency round @ {label} (cores) | {', '.join(f'{x:.2f}' for _, x in loads)} ({quiet} quiet, below {targets.QUIET_LOAD:g}) | latency judged on quiet rounds | — |"
                )
            for kind in ("worker", "worker-no-telemetry"):
                hands = [x["handoff"] for x in e.get("latency", []) if x["label"] == label and x["kind"] == kind and x.get("handoff")]
                if hands:
                    med = lambda key: statistics.median([h[key] for h in hands if h[key] is not None] or [float("nan")])  # noqa: E731
                    lines.append(
                        f"| poll → outputs handed to the producer, inside {kind} @ {label}, ms, median of {len(hands)} rounds (all loads) | "
                        f"continuing runs p50 {med('continuing_p50'):.1f} / p99 {med('continuing_p99'):.1f}; terminal outputs p50 {med('terminal_p50'):.1f} / p99 {med('terminal_p99'):.1f} "
                        f"({sum(h['continuing_n'] for h in hands)} + {sum(h['terminal_n'] for h in hands)} hand-offs) | "
                        + ("continuing p50 ≤ 2, p99 ≤ 10; terminal p99 ≤ 20, on quiet rounds | see the verdicts |" if kind == "worker" and "25%" in label else "(context) | — |")
                    )
        for label, kinds in s.get("phases", {}).items():
            for kind, phases in kinds.items():
                order = ("between_polls", "poll_size", "step", "journal_read", "redis_tx", "early_acked", "after_write_acked", "close_runs", "commit", "gc0", "gc1", "gc2", "loop_lag")
                parts = [
                    f"{ph} {phases[ph]['p50']:.1f}/{phases[ph]['p99']:.1f}" + (f" (n {phases[ph]['n']:.0f}, max {phases[ph]['max']:.1f})" if ph.startswith("gc") else "")
                    for ph in order
                    if ph in phases
                ]
                lines.append(f"| phases of {kind} @ {label}, ms p50/p99 (poll_size: records), median of rounds | {'; '.join(parts)} | (context) | — |")
        if "two_workers_to_one" in s:
            lines.append(f"| 2 workers / 1 worker, telemetry off (one drain, fresh processes; 2 cores shared with broker and Redis) | {s['two_workers_to_one']:.2f}× | — | — |")
    elif "e2e" in r and "skipped" in r["e2e"]:
        lines.append(f"| end to end | skipped: {r['e2e']['skipped']} | | |")
    mem = r.get("memory")
    if mem:
        per_run = ", ".join(f"{g} {v['bytes_per_open_run'] / 1024:.1f} KiB" for g, v in mem["open_runs"].items())
        lines.append(f"| memory per open run (Normalizer, tracemalloc) | {per_run} | — | — |")
        growth = []
        for g, rows in mem["run_length"].items():
            growth.append(f"{g} " + "/".join(f"{x['bytes_per_event']:.0f}" for x in rows))
        lines.append(f"| state growth per delta event, bytes (reasoning/text/args) | {'; '.join(growth)} | 0 | {_met(all(x['bytes_per_event'] < 1 for rows in mem['run_length'].values() for x in rows))} |")
        curve = mem.get("rss_curve")
        if curve:
            pts = ", ".join(f"{p['open_runs']}: +{p['rss_mib_over_empty']:.0f} MiB" for p in curve["points"])
            lines.append(f"| RSS vs open runs ({curve['grammar']}) | {pts} | — | — |")
    if "cpu" in r:
        lines += [
            "",
            "| grammar | runs | events (median/max per run) | reasonwire events/s | floor events/s | ratio "
            "| per extra event µs (floor) | fixed per run µs (floor) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for g, v in r["cpu"].items():
            d = v["decomposed"]
            lines.append(
                f"| {g} | {v['runs']} | {v['input_events']} ({v['events_per_run_median']:.0f}/{v['events_per_run_max']}) "
                f"| {v['reasonwire_events_per_s']:.0f} | {v['floor_events_per_s']:.0f} | {v['ratio_to_floor']:.1f}× "
                f"| {d['us_per_event']:.2f} ({d['floor_us_per_event']:.2f}) | {d['fixed_us_per_run']:.0f} ({d['floor_fixed_us_per_run']:.0f}) |"
            )
    lite = r.get("litellm", {}).get("grammars", {})
    if lite:
        lines += ["", f"| LiteLLM {r['litellm']['litellm_version']} | reasonwire events/s | LiteLLM parse+parser+serialize events/s | LiteLLM parser only events/s |", "|---|---|---|---|"]
        for g, v in lite.items():
            lines.append(f"| {g} | {v['reasonwire_events_per_s']:.0f} | {v['litellm_wire_events_per_s']:.0f} | {v['litellm_parser_only_events_per_s']:.0f} |")
    for key, title in (("profile_translator", "translator profile (pyinstrument)"), ("profile_worker", "worker profile (py-spy)")):
        p = r.get(key)
        if not p:
            continue
        groups = p.items() if key == "profile_translator" else [("worker", p)]
        for name, prof in groups:
            if "shares" not in prof:
                continue
            lines += ["", f"{title}, {name}: " + "; ".join(f"{k} {v:.0%}" for k, v in prof["shares"].items())]
    lines += ["", *verdicts(s)]
    lines.append("")
    return "\n".join(lines)


def verdicts(s: dict[str, Any]) -> list[str]:
    """The targets (bench.targets), then the telemetry targets, each judged on the
    median of its per-round values, with the spread."""
    out = []
    if s.get("target_verdicts"):
        out += [f"Targets (medians of rounds; latency judged only on rounds whose neighbours kept fewer than {targets.QUIET_LOAD:g} cores busy):"]
        out += ["- " + targets.Verdict(**v).line() for v in s["target_verdicts"]]
    telemetry = []
    for name, _, _, target, title in RATIOS:
        x = s.get(name)
        if x and target is not None:
            telemetry.append(
                f"- {'MET' if x['met'] else 'NOT MET'}: {title} ≥ {target:.0%} — median {x['median']:.1%} "
                f"(min–max {x['min']:.1%}–{x['max']:.1%}, {x['n']} rounds)"
            )
    if telemetry:
        out += [*([""] if out else []), "Telemetry targets:", *telemetry]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
