"""``python -m bench.ab``: two or more versions of a consumer, in alternating rounds (A/B).

``make bench`` compares kinds of consumers of *one* tree. A change of a few percent
needs the tree before it beside the tree after it, on the same broker and Redis, in
alternating rounds (the host moves by ±20 % from one minute to the next). Each kind is
one long-lived consumer process (``bench.e2e.start_live``), warmed up once, then every
round measures every kind in turn, in a new order drawn from the round's number (a kind
that always follows the same neighbour inherits its after-effects):

* ``--mode drain``: a backlog of ``--records`` raw records, committed-offset slope
  (records/s) and the consumer's CPU per record;
* ``--mode latency``: ``--rate`` records/s for 4 s, latency per output p50 / p99 (ms); a
  worker kind also records, inside itself, poll → outputs handed to the producer
  (``workers/ops/handoff.py``, ``RW_BENCH_HANDOFF_FILE``), read when it stops.

Every round records how many cores the host's other processes kept busy meanwhile
(``bench/hostload.py``; the 1-minute load average beside it, as context). With
``io-floor`` (CPU) or ``worker@1af85a6`` (throughput) among the kinds in drain mode, or
``passthrough`` in latency mode, the end prints the
targets that the mode measures, judged as ``make bench`` judges them (``bench.targets``:
latency only on rounds whose neighbours kept fewer than 0.5 cores busy, loaded rounds beside them); ``--share`` says
which share of the worker's maximum ``--rate`` is (0.25 or 0.5), for the latency limits.

``io-floor`` (:mod:`bench.io_floor`) works here as in ``make bench``: its table of outputs and
Redis commands is precomputed from this run's backlog, which it gets unchanged every round
(drain mode only).

A kind is ``KIND[@REV][+VAR=value…]``: ``KIND`` as ``make bench`` names it (``worker``,
``passthrough``, ``worker-no-telemetry``, …) or ``passthrough-librdkafka`` (only here: the
pipelined passthrough on librdkafka's C client, :mod:`bench.passthrough_librdkafka` — what the
Kafka client costs); ``@REV`` runs that git revision of this
repository (checked out into a temporary worktree, removed afterwards) instead of the
working tree; ``+VAR=value`` is added to that process's environment. Example — the baseline
worker against the working tree's, at 25 % of the worker's maximum on a host that drains ~12,000
records/s::

    python -m bench.ab "passthrough,worker@1af85a6,worker" --mode latency --rate 3000 --share 0.25

Needs ``KAFKA_BOOTSTRAP_SERVERS`` and ``REDIS_URL`` (``deploy/services.sh up``). Prints a
line per kind per round and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import e2e, hostload, instructions, targets
from bench.profiles import WORKER_BUCKETS, worker_profile
from reasonwire.workers.ops import handoff

IO_FLOOR = "io-floor"  # bench.io_floor: the worker's I/O without its logic, fed a precomputed table
GRAMMARS = ("anthropic-messages", "openai-responses", "gemini-generate-content", "gemini-interactions", "bedrock-converse", "openai-chat-completions")


@dataclass
class Kind:
    spec: str
    kind: str
    rev: str | None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Kind:
        head, *pairs = spec.split("+")
        kind, _, rev = head.partition("@")
        env = dict(pair.split("=", 1) for pair in pairs)
        return cls(spec, kind, rev or None, env)


@contextlib.contextmanager
def worktrees(revs: set[str]) -> Iterator[dict[str, Path]]:
    """Each revision checked out (detached) into a temporary worktree; removed on exit."""
    made: dict[str, Path] = {}
    base = Path(tempfile.mkdtemp(prefix="rw-ab-"))
    try:
        for rev in sorted(revs):
            path = base / rev.replace("/", "_")
            subprocess.run(["git", "-C", str(e2e.ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
            made[rev] = path
            if (path / "tools" / "build_native.py").is_file():  # a revision with a compiled core runs compiled, as its make would
                subprocess.run([sys.executable, "tools/build_native.py"], cwd=path, check=False)
        yield made
    finally:
        for path in made.values():
            subprocess.run(["git", "-C", str(e2e.ROOT), "worktree", "remove", "--force", str(path)], check=False)
        subprocess.run(["git", "-C", str(e2e.ROOT), "worktree", "prune"], check=False)
        shutil.rmtree(base, ignore_errors=True)


async def run(
    kinds: list[Kind], mode: str, rounds: int, records: int, rate: float, grammars: tuple[str, ...] = GRAMMARS, profile: bool = False,
    counted: bool = False,
) -> dict[str, Any]:
    """Every kind measured once per round, in order; returns ``{"figures": {spec: [(a, b) per
    round]}, "rounds": [per round: load, and per spec its figures and hand-off window]}``."""
    bootstrap, redis_url = os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"]
    logs = e2e.ROOT / "bench" / "results" / "ab-logs"
    logs.mkdir(parents=True, exist_ok=True)
    tag = f"ab{int(time.time())}"
    live: list[tuple[Kind, Any, Any]] = []
    meter = hostload.HostMeter()
    created: list[str] = []
    results: dict[str, list[tuple[float, float]]] = {k.spec: [] for k in kinds}
    per_round: list[dict[str, Any]] = []
    handoff_files: dict[str, Path] = {}
    profiles: dict[str, Path] = {}
    base = e2e.traffic(grammars, records if mode == "drain" else int(rate * 4), seed=12, tag=f"{tag}-x", map_events=mode == "latency")
    floor = logs / f"{tag}-io-floor-traffic.pickle"
    floor.write_bytes(pickle.dumps([(r.key, r.value, r.headers) for r in base.records]))
    with worktrees({k.rev for k in kinds if k.rev}) as trees:
        try:
            for i, k in enumerate(kinds):
                stage = e2e.Stage(bootstrap, redis_url, f"{k.kind}{i}")
                created += stage.all_topics()
                saved = e2e.ROOT
                e2e.ROOT = trees[k.rev] if k.rev else saved  # the consumer process runs from that tree
                env = {"RW_BENCH_FLOOR_TRAFFIC": str(floor), **k.env} if k.kind == IO_FLOOR else dict(k.env)
                if k.kind.startswith("worker"):  # poll → hand-off inside the worker, written when it stops
                    handoff_files[k.spec] = logs / f"{tag}-handoff-{i}.json"
                    env[handoff.ENV] = str(handoff_files[k.spec])
                    if profile and mode == "drain":
                        profiles[k.spec] = logs / f"{tag}-profile-{i}.raw"
                try:
                    live.append((k, await e2e.start_live(k.kind, stage, logs, env, counted=counted), stage))
                finally:
                    e2e.ROOT = saved
            for i, (k, consumer, stage) in enumerate(live):  # first-use costs out of every round
                warm = base.records[:3000] if k.kind == IO_FLOOR else e2e.traffic(grammars, 3000, seed=5, tag=f"{tag}-warm{i}").records
                # consumed, not timed: a drain's slope needs two samples inside it, and a consumer
                # that takes 3,000 records in under 50 ms (passthrough-librdkafka) left none
                await e2e.warm_up(stage, consumer, warm)
            for r in range(rounds):
                meter.start()
                this: dict[str, Any] = {"rate": {}, "cpu": {}, "p50": {}, "p99": {}, "cores": {}, "window": {}, "instructions": {}}
                # a new order every round, drawn from the round's number (as make bench does): in one
                # fixed order the kind after worker@1af85a6 drained 1.29× as fast over 7 rounds with
                # the same code, the after-effects of its neighbour
                for i, (k, consumer, stage) in random.Random(r).sample(list(enumerate(live)), len(live)):
                    new = f"{tag}-{r}-{i}"
                    # the floor's table is precomputed for exactly these records: it gets them again
                    # every round (its Redis keys are overwritten, which costs what new ones would)
                    batch = base.records if k.kind == IO_FLOOR else e2e.retag(base.records, f"{tag}-x", new)
                    if mode == "drain":
                        out = await e2e.drain_live(consumer, stage, batch, profiles.get(k.spec))
                        figures = (out["records_per_s"], out["cpu_us_per_record"])
                        this["rate"][k.spec], this["cpu"][k.spec] = figures
                        line = f"{figures[0]:7.0f} records/s, {figures[1]:4.0f} µs CPU per record"
                        if out["instructions_per_record"] is not None:
                            this["instructions"][k.spec] = out["instructions_per_record"]
                            line += f", {out['instructions_per_record']:9.0f} instructions per record"
                    else:
                        sources = {(new + rid[len(f"{tag}-x") :], s): x for (rid, s), x in base.event_source.items()}
                        out = await e2e.latency(stage, k.kind, e2e.Traffic(batch, sources), rate, logs, live=consumer)
                        figures = (out["p50_us"] / 1000, out["p99_us"] / 1000)
                        this["p50"][k.spec], this["p99"][k.spec] = figures
                        this["window"][k.spec] = out["window_perf"]
                        this["cores"][k.spec] = out["consumer_cores"]
                        line = f"p50 {figures[0]:6.1f} ms, p99 {figures[1]:6.1f} ms, {out['consumer_cores']:.2f} cores" + _classes(out["by_class"])
                    results[k.spec].append(figures)
                    print(f"round {r + 1}/{rounds} {k.spec:40s} {line}", flush=True)
                host = meter.stop()
                this.update(host.fields())
                per_round.append(this)
                quiet = "quiet" if targets.is_quiet(host.neighbours) else "loaded"
                print(f"round {r + 1}/{rounds} host: {host.describe()}: {quiet}", flush=True)
        finally:
            for _, consumer, _ in live:
                consumer.stop()  # a worker writes its hand-off samples as it exits
            await e2e.delete_topics(bootstrap, created)
            # and its Redis state, as make bench does: a Redis kept across runs (make services)
            # otherwise grows by every round's artefacts, and its snapshots fork inside later rounds
            await e2e.delete_bench_keys(redis_url)
            floor.unlink(missing_ok=True)
    for spec, path in handoff_files.items():
        samples = orjson.loads(path.read_bytes())["samples"] if path.exists() else []
        for this in per_round:
            if spec in this["window"]:
                this.setdefault("handoff", {})[spec] = targets.handoff_window(samples, *this["window"][spec])
    return {"figures": results, "rounds": per_round, "profiles": {spec: worker_profile(path) for spec, path in profiles.items()}}


def profile_lines(found: dict[str, dict[str, Any]]) -> list[str]:
    """Each worker kind's share of drain samples per bucket (``bench.profiles``), side by side."""
    if not found:
        return []
    specs = list(found)
    buckets = [name for name, _ in WORKER_BUCKETS]
    lines = ["Where the drains' samples went (py-spy, share of each kind's samples): " + ", ".join(
        f"{spec} {found[spec].get('samples', 0)} samples" if "samples" in found[spec] else f"{spec} {found[spec].get('skipped')}" for spec in specs
    )]
    for bucket in buckets:
        shares = [found[spec].get("shares", {}).get(bucket, 0.0) for spec in specs]
        if any(shares):
            lines.append("  " + "  ".join(f"{share:6.1%}" for share in shares) + f"  {bucket}")
    return lines


def _classes(by_class: dict[str, dict[str, Any]]) -> str:
    """``  (first 4% p50 27 p99 56; …)``: the outputs' latency by their raw record's place in its
    run (``bench.e2e.RECORD_CLASSES``) — which outputs make the tail."""
    parts = [
        f"{name} {c['share']:.0%} p50 {c['p50_us'] / 1000:.0f} p99 {c['p99_us'] / 1000:.0f}"
        for name, c in by_class.items()
        if c["n"] and c["p99_us"] is not None
    ]
    return f"  ({'; '.join(parts)} ms)" if parts else ""


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    parser.add_argument("kinds", help="comma-separated KIND[@REV][+VAR=value...]")
    parser.add_argument("--mode", choices=("drain", "latency"), default="drain")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=10_000, help="backlog per drain round")
    parser.add_argument("--rate", type=float, default=1120.0, help="records/s in latency rounds")
    parser.add_argument(
        "--profile", action="store_true",
        help="drain mode: py-spy samples each worker kind's drains (needs py-spy beside python); with RW_SPY_NATIVE=1 the compiled"
        " core's C frames too (py-spy then stops the worker for each sample: that run's CPU figures do not compare)",
    )
    parser.add_argument(
        "--instructions", action="store_true",
        help="drain mode: every kind under valgrind's callgrind, each drain's instructions per record counted (bench/instructions.py):"
        " a figure the host's speed does not move; counted drains run 50-100x slower (use --records 3000), their timings mean nothing",
    )
    parser.add_argument(
        "--grammars", default=",".join(GRAMMARS),
        help="comma-separated grammars of the traffic (default: all); against a tree that predates a grammar, the ones both know"
        " (a worker dead-letters a grammar it does not know: cheaper work, not a fair comparison)",
    )
    parser.add_argument(
        "--share", type=float, choices=sorted(targets.E2E_ADDED_P99_MS), help="the share of the worker's maximum --rate is (latency targets; 0.25 also the hand-off's)"
    )
    args = parser.parse_args()
    if not (os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and os.environ.get("REDIS_URL")):
        print("python -m bench.ab: set KAFKA_BOOTSTRAP_SERVERS and REDIS_URL (deploy/services.sh up)", file=sys.stderr)
        return 2
    kinds = [Kind.parse(spec) for spec in args.kinds.split(",") if spec]
    if args.mode == "latency" and any(k.kind == IO_FLOOR for k in kinds):
        print("python -m bench.ab: io-floor has no latency mode (it replays one precomputed backlog); use --mode drain", file=sys.stderr)
        return 2
    grammars = tuple(g for g in args.grammars.split(",") if g)
    if not grammars or set(grammars) - set(GRAMMARS):
        print(f"python -m bench.ab: --grammars takes some of {', '.join(GRAMMARS)}", file=sys.stderr)
        return 2
    if args.instructions and (args.mode != "drain" or instructions.available() is not None):
        print(f"python -m bench.ab: --instructions needs --mode drain and valgrind ({instructions.available() or 'drain only'})", file=sys.stderr)
        return 2
    results = asyncio.run(run(kinds, args.mode, args.rounds, args.records, args.rate, grammars, args.profile, args.instructions))
    unit = ("records/s", "µs CPU per record") if args.mode == "drain" else ("p50 ms", "p99 ms")
    for spec, figures in results["figures"].items():
        first, second = statistics.median(f[0] for f in figures), statistics.median(f[1] for f in figures)
        print(f"median of {len(figures)} {spec:40s} {unit[0]} {first:.1f}, {unit[1]} {second:.1f}" + _cores(results["rounds"], spec))
    if args.instructions:  # the timings of counted drains say nothing: no verdicts on them
        for line in instruction_lines(results["rounds"], [k.spec for k in kinds]):
            print(line)
        return 0
    for line in report(results["rounds"], [k.spec for k in kinds], args.mode, args.share) + profile_lines(results["profiles"]):
        print(line)
    return 0


def instruction_lines(rounds: list[dict[str, Any]], specs: list[str]) -> list[str]:
    """Per kind the median instructions per record, and against the first kind the median of
    the per-round ratios (the kinds of one round drained the same backlog)."""
    lines = []
    first = specs[0]
    for spec in specs:
        counts = [r["instructions"][spec] for r in rounds if spec in r["instructions"]]
        if not counts:
            continue
        line = f"instructions per record, median of {len(counts)} {spec:40s} {statistics.median(counts):9.0f} ({min(counts):.0f}–{max(counts):.0f})"
        ratios = [r["instructions"][spec] / r["instructions"][first] for r in rounds if {spec, first} <= r["instructions"].keys()]
        if spec != first and ratios:
            line += f", ÷ {first} per round: median {statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})"
        lines.append(line)
    return lines


def _cores(rounds: list[dict[str, Any]], spec: str) -> str:
    """``, cores 0.68 (0.61–0.72)``: the consumer's cores at the rate over the latency rounds
    (none in drain mode, where the CPU per record is the figure)."""
    cores = [r["cores"][spec] for r in rounds if spec in r["cores"]]
    return f", cores {statistics.median(cores):.2f} ({min(cores):.2f}–{max(cores):.2f})" if cores else ""


def report(rounds: list[dict[str, Any]], specs: list[str], mode: str, share: float | None) -> list[str]:
    """The hand-off figures of each worker kind, and the verdicts of the targets this
    run measures, for each worker kind against the ``passthrough`` (and ``io-floor``) of its rounds."""
    lines = []
    for spec in specs:
        windows = [r["handoff"][spec] for r in rounds if spec in r.get("handoff", {})]
        if windows:
            fig = lambda key: "/".join("—" if w[key] is None else f"{w[key]:.1f}" for w in windows)  # noqa: E731
            lines.append(
                f"{spec}: poll → handed to the producer per round, ms: continuing p50 {fig('continuing_p50')}, p99 {fig('continuing_p99')}; "
                f"terminal p50 {fig('terminal_p50')}, p99 {fig('terminal_p99')}"
            )
    workers = [s for s in specs if Kind.parse(s).kind == "worker"]
    if mode == "latency" and share is None:
        lines.append("(no --share: the latency figures are not judged; --share 0.25 or 0.5 names the share of the worker's maximum --rate is)")
        return lines
    drain = rounds if mode == "drain" else []
    latency = {share: rounds} if mode == "latency" and share is not None else {}
    verdicts = [v for w in workers for v in targets.verdicts(drain, latency, worker=w, every=False)]
    if verdicts:
        lines += ["Targets measured here:", *(v.line() for v in verdicts)]
    return lines


if __name__ == "__main__":
    sys.exit(main())
