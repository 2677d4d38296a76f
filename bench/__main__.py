"""``python -m bench`` (``make bench``): every benchmark of issue 8 in one run, one machine.

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
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from bench import cpu, e2e, gateway, litellm_compare, memory, profiles
from bench.streams import runs, templates
from workers.translators import implemented

RESULTS = Path(__file__).resolve().parent / "results"

TARGETS = {
    "translator_to_floor": 2.0,
    "speedup_vs_litellm": 3.0,
    "worker_to_passthrough": 0.80,
    "added_p99_ms": 1.0,
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
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every section (figures are noisy)")
    parser.add_argument("--skip", action="append", default=[], choices=["cpu", "litellm", "memory", "e2e", "profile", "gateway"])
    args = parser.parse_args()
    quick = args.quick
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.time()
    grammars = [g.value for g in implemented()]
    results: dict[str, Any] = {
        "command": "make bench" + (" BENCH_ARGS=--quick" if quick else ""),
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

    if "gateway" not in args.skip:  # issue 15: 200 SSE clients on one gateway process (bench.gateway)
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


async def _e2e(grammars: list[str], quick: bool) -> dict[str, Any]:
    bootstrap, redis_url = os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"]
    logs = RESULTS / "logs"
    logs.mkdir(exist_ok=True)
    created: list[str] = []
    out: dict[str, Any] = {"partitions": e2e.PARTITIONS, "concurrent_runs": e2e.CONCURRENT_RUNS, "broker_on_same_machine": True}
    tag = f"r{int(time.time())}"
    backlog_pt, backlog_w = (15000, 6000) if quick else (40000, 20000)
    send_s = 2.0 if quick else 4.0

    def stage(name: str) -> e2e.Stage:
        s = e2e.Stage(bootstrap, redis_url, name)
        created.extend(s.all_topics())
        return s

    try:
        out["fanout"] = e2e.fanout(e2e.traffic(grammars, 5000, seed=9, tag=f"{tag}-fan").records)
        log(f"3. drain {backlog_pt} records: bare aiokafka passthrough")
        tr = e2e.traffic(grammars, backlog_pt, seed=11, tag=f"{tag}-pt")
        out["passthrough_drain"] = await e2e.drain(stage("passthrough"), "passthrough", 1, tr.records, logs)
        log(f"3. drain {backlog_pt} records: the same passthrough, pipelined (acks and commits in the background)")
        tr = e2e.traffic(grammars, backlog_pt, seed=11, tag=f"{tag}-ptp")
        out["passthrough-pipelined_drain"] = await e2e.drain(stage("pt-pipelined"), "passthrough-pipelined", 1, tr.records, logs)
        log(f"3. drain {backlog_pt} records: the same passthrough as a FastStream app")
        tr = e2e.traffic(grammars, backlog_pt, seed=11, tag=f"{tag}-fs")
        out["faststream-passthrough_drain"] = await e2e.drain(stage("fs-passthrough"), "faststream-passthrough", 1, tr.records, logs)
        for kind, n in (("worker-no-telemetry", 1), ("worker", 1), ("worker-exporting", 1), ("worker-exporting-sampled", 1), ("worker-no-telemetry", 2)):
            log(f"3/5. drain {backlog_w} records: {n} x {kind}")
            tr = e2e.traffic(grammars, backlog_w, seed=12 + n, tag=f"{tag}-{kind}-{n}")
            out[f"{kind}_drain_{n}"] = await e2e.drain(stage(f"{kind}{n}"), kind, n, tr.records, logs)
        log("profile (py-spy): one worker as shipped, draining a backlog")
        tr = e2e.traffic(grammars, backlog_w // 2, seed=20, tag=f"{tag}-prof")
        out["profile_drain"] = await e2e.drain(stage("profile"), "worker", 1, tr.records, logs, profile_s=3.0 if quick else 5.0)
        raw = logs / "profile.pyspy.txt"
        if raw.exists():
            out["profile_raw"] = str(raw)

        pt_max = out["passthrough_drain"]["records_per_s"]
        w_max = out["worker-no-telemetry_drain_1"]["records_per_s"]
        out["latency"] = []
        plan = (
            ("50% of passthrough max", 0.5 * pt_max, ("passthrough", "worker-no-telemetry", "worker")),
            ("50% of worker max", 0.5 * w_max, ("passthrough", "passthrough-pipelined", "faststream-passthrough", "worker-no-telemetry", "worker")),
            ("25% of worker max", 0.25 * w_max, ("passthrough", "passthrough-pipelined", "faststream-passthrough", "worker-no-telemetry", "worker")),
        )
        for label, rate, kinds in plan:
            n_records = int(rate * (send_s + 1.0))
            for kind in kinds:
                log(f"3. latency at {rate:.0f} records/s ({label}): {kind}")
                tr = e2e.traffic(grammars, n_records, seed=30, tag=f"{tag}-lat-{kind}-{int(rate)}", map_events=kind.startswith("worker"))
                warm = e2e.traffic(grammars, 500 if quick else 2000, seed=31, tag=f"{tag}-warm-{kind}-{int(rate)}").records
                r = await e2e.latency(stage(f"lat-{kind}"), kind, tr, rate, logs, warm=warm)
                out["latency"].append({"label": label, **r})
    finally:
        await e2e.delete_topics(bootstrap, created)
        out["redis_keys_removed"] = await e2e.delete_bench_keys(redis_url)
    return out


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
    if "worker-no-telemetry_drain_1" in e:
        pt = e["passthrough_drain"]["records_per_s"]
        w0 = e["worker-no-telemetry_drain_1"]["records_per_s"]
        shipped = e["worker_drain_1"]["records_per_s"]
        s["worker_to_passthrough"] = shipped / pt  # the worker: Redis writes and OTel on
        s["worker_no_telemetry_to_passthrough"] = w0 / pt
        s["telemetry_cost"] = 1 - shipped / w0
        if "worker-exporting_drain_1" in e:
            exporting = e["worker-exporting_drain_1"]["records_per_s"]
            s["worker_exporting_to_passthrough"] = exporting / pt
            s["exporting_cost"] = 1 - exporting / w0
        if "worker-exporting-sampled_drain_1" in e:
            sampled = e["worker-exporting-sampled_drain_1"]["records_per_s"]
            s["worker_exporting_sampled_to_passthrough"] = sampled / pt
            s["exporting_sampled_cost"] = 1 - sampled / w0
        s["two_workers_to_one"] = e["worker-no-telemetry_drain_2"]["records_per_s"] / w0
        if "passthrough-pipelined_drain" in e:
            s["passthrough_pipelined_to_passthrough"] = e["passthrough-pipelined_drain"]["records_per_s"] / pt
        if "faststream-passthrough_drain" in e:
            fs = e["faststream-passthrough_drain"]["records_per_s"]
            s["faststream_passthrough_to_passthrough"] = fs / pt
            s["worker_to_faststream_passthrough"] = w0 / fs
        by = {(x["label"], x["kind"]): x for x in e.get("latency", [])}
        for label in ("50% of passthrough max", "50% of worker max", "25% of worker max"):
            p = by.get((label, "passthrough"))
            for kind in ("faststream-passthrough", "worker-no-telemetry", "worker"):
                w = by.get((label, kind))
                if w and p and w["p99_us"] is not None and p["p99_us"] is not None:
                    s[f"added_latency_ms @ {label} ({kind})"] = {
                        "rate": w["target_rate"],
                        "p50": (w["p50_us"] - p["p50_us"]) / 1000,
                        "p99": (w["p99_us"] - p["p99_us"]) / 1000,
                        "worker_p50": w["p50_us"] / 1000,
                        "worker_p99": w["p99_us"] / 1000,
                        "passthrough_p50": p["p50_us"] / 1000,
                        "passthrough_p99": p["p99_us"] / 1000,
                        "worker_outputs_seen": f"{w['outputs_seen']}/{w['outputs_expected']}",
                        "worker_median_ms_per_half_second": w.get("median_ms_per_half_second"),
                    }
            q = by.get((label, "passthrough-pipelined"))
            for kind in ("worker-no-telemetry", "worker"):
                w = by.get((label, kind))
                if w and q and w["p99_us"] is not None and q["p99_us"] is not None:
                    s[f"added_latency_vs_pipelined_ms @ {label} ({kind})"] = {
                        "rate": w["target_rate"],
                        "p50": (w["p50_us"] - q["p50_us"]) / 1000,
                        "p99": (w["p99_us"] - q["p99_us"]) / 1000,
                        "pipelined_passthrough_p50": q["p50_us"] / 1000,
                        "pipelined_passthrough_p99": q["p99_us"] / 1000,
                    }
    return s


def _met(ok: bool | None) -> str:
    return "—" if ok is None else ("yes" if ok else "**no**")


def render_table(r: dict[str, Any]) -> str:
    s, m = r["summary"], r["machine"]
    lines = [
        f"reasonwire benchmarks — {r['started']} — {m['nproc']} × {m['cpu_model']}, Python {m['python']} — `{r['command']}` "
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
    if "worker_to_passthrough" in s:
        e = r["e2e"]
        pt = e["passthrough_drain"]["records_per_s"]
        fan = e.get("fanout", {})
        fan_txt = f"; outputs per raw record: worker {fan.get('worker_outputs_per_record', 0):.2f}, passthrough 1" if fan else ""
        lines.append(
            f"| worker throughput / bare passthrough (1 process each; worker as shipped: Redis writes, OTel SDK and guards on, no exporter) "
            f"| {s['worker_to_passthrough']:.0%} ({e['worker_drain_1']['records_per_s']:.0f} vs {pt:.0f} raw records/s{fan_txt}) "
            f"| ≥ {TARGETS['worker_to_passthrough']:.0%} | {_met(s['worker_to_passthrough'] >= TARGETS['worker_to_passthrough'])} |"
        )
        lines.append(
            f"| same, telemetry off (workers.telemetry replaced by a null object) | {s['worker_no_telemetry_to_passthrough']:.0%} "
            f"({e['worker-no-telemetry_drain_1']['records_per_s']:.0f} records/s; telemetry as shipped costs {s['telemetry_cost']:.0%} of it) | — | — |"
        )
        if "worker_exporting_to_passthrough" in s:
            lines.append(
                f"| same, exporting every span and metric (console exporter into the log) | {s['worker_exporting_to_passthrough']:.0%} "
                f"({e['worker-exporting_drain_1']['records_per_s']:.0f} records/s; {s['exporting_cost']:.0%} below telemetry off) | — | — |"
            )
        if "worker_exporting_sampled_to_passthrough" in s:
            lines.append(
                f"| same, exporting with 1 % of runs traced (OTEL_TRACES_SAMPLER=parentbased_traceidratio, ARG 0.01) | "
                f"{s['worker_exporting_sampled_to_passthrough']:.0%} ({e['worker-exporting-sampled_drain_1']['records_per_s']:.0f} records/s; "
                f"{s['exporting_sampled_cost']:.0%} below telemetry off) | — | — |"
            )
        if "faststream_passthrough_to_passthrough" in s:
            lines.append(
                f"| FastStream passthrough / bare passthrough (framework alone); worker (telemetry off) / FastStream passthrough | "
                f"{s['faststream_passthrough_to_passthrough']:.0%} ({e['faststream-passthrough_drain']['records_per_s']:.0f} records/s); "
                f"{s['worker_to_faststream_passthrough']:.0%} | — | — |"
            )
        for label in ("50% of passthrough max", "50% of worker max", "25% of worker max"):
            for kind in ("worker-no-telemetry", "worker", "faststream-passthrough"):
                a = s.get(f"added_latency_ms @ {label} ({kind})")
                if not a:
                    continue
                headline = label.endswith("passthrough max") and kind == "worker"
                target = f"≤ {TARGETS['added_p99_ms']:.0f} ms" if headline else "(context)"
                met = _met(a["p99"] <= TARGETS["added_p99_ms"]) if headline else "—"
                who = {"worker-no-telemetry": "worker, telemetry off", "worker": "worker as shipped"}.get(kind, "FastStream passthrough")
                lines.append(
                    f"| added latency per event @ {a['rate']:.0f}/s ({label}, {who}) | p50 {a['p50']:+.1f} ms, p99 {a['p99']:+.1f} ms "
                    f"(it: p50 {a['worker_p50']:.1f} / p99 {a['worker_p99']:.1f} ms; bare passthrough {a['passthrough_p50']:.1f} / {a['passthrough_p99']:.1f} ms) | {target} | {met} |"
                )
        for label in ("50% of worker max", "25% of worker max"):
            for kind in ("worker-no-telemetry", "worker"):
                a = s.get(f"added_latency_vs_pipelined_ms @ {label} ({kind})")
                if a:
                    who = {"worker-no-telemetry": "worker, telemetry off", "worker": "worker as shipped"}[kind]
                    lines.append(
                        f"| same vs the pipelined passthrough @ {a['rate']:.0f}/s ({label}, {who}) | p50 {a['p50']:+.1f} ms, p99 {a['p99']:+.1f} ms "
                        f"(pipelined passthrough p50 {a['pipelined_passthrough_p50']:.1f} / p99 {a['pipelined_passthrough_p99']:.1f} ms) | (context) | — |"
                    )
        if "passthrough_pipelined_to_passthrough" in s:
            lines.append(
                f"| pipelined bare passthrough / bare passthrough (throughput) | {s['passthrough_pipelined_to_passthrough']:.0%} "
                f"({e['passthrough-pipelined_drain']['records_per_s']:.0f} records/s) | — | — |"
            )
        w2 = e["worker-no-telemetry_drain_2"]["records_per_s"]
        lines.append(
            f"| 2 workers / 1 worker (2 cores, broker + Redis on the same machine) | {s['two_workers_to_one']:.2f}× "
            f"({w2:.0f} vs {e['worker-no-telemetry_drain_1']['records_per_s']:.0f} records/s) | — | — |"
        )
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
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
