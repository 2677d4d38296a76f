"""``python -m bench.inproc``: the worker's own CPU per raw record, in process, by phase — no broker, no Redis.

The end-to-end figures of ``make bench`` move by ±15 % between rounds on two
shared cores; a change of a few microseconds per record cannot be seen there.
This runs the worker's per-poll work on the benchmark's traffic (every grammar,
64 runs interleaved, polls of ``RW_MAX_BATCH`` records) exactly as
:meth:`reasonwire.workers.services.normalizer.NormalizerWorker.handle` and its pipeline do it, minus
the network:

* ``core`` — ``Normalizer.route`` + ``accept`` (a run met for the first time is
  restored from an empty journal, as a new run is);
* ``register`` — telemetry's ``BatchTrace.stepped``: the poll's content into the P8 registry;
* ``store`` — ``ArtefactStore.apply`` building the poll's Redis commands, and
  packing them into the script call's RESP bytes (what the connection would send);
* ``publish`` — the outputs appended to one aiokafka record batch per topic
  partition and the batches built (what ``NormalizerWorker._send`` hands over);
* ``commit`` — telemetry's ``BatchTrace.__exit__`` (counters, spans of traced runs).

Telemetry as shipped (no exporter), or ``--sampled`` (console exporters into
``/dev/null``, 1 % of runs traced), or ``--off``. Each figure is the median of
``--runs`` passes over the same records, after one warm-up pass, in µs per raw
record (``time.process_time``: CPU of this process only).

The garbage collector (``--gc``): ``worker`` (default) as the worker sets it at start-up
(``tune_gc``: everything alive frozen, young collections every 20 000 allocations); ``paused``
the same, with each poll stepped, stored and batched inside
``reasonwire.workers.ops.gc_pause.collection_paused`` (the collection that comes due runs after the
handoff, counted in ``commit``); ``default`` CPython's settings; ``off`` none. Every phase
includes the collections that ran in it; ``gc`` is their total, and the last figure how many
started while a poll was being stepped, stored or batched (per poll).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

PHASES = ("core", "register", "store", "publish", "commit")
GC_MODES = ("worker", "paused", "default", "off")


def _configure(mode: str) -> None:
    """OTel settings before the SDK is set up (``setup_telemetry`` reads ``OTEL_*``)."""
    exporter = "console" if mode == "sampled" else "none"
    os.environ["OTEL_TRACES_EXPORTER"] = exporter
    os.environ["OTEL_METRICS_EXPORTER"] = exporter
    os.environ["OTEL_LOGS_EXPORTER"] = "none"
    if mode == "sampled":
        os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        os.environ["OTEL_TRACES_SAMPLER_ARG"] = "0.01"


def measure(n_records: int, mode: str, runs: int, batch: int, collector: str = "worker", only: Sequence[str] = ()) -> dict[str, float]:
    """µs per raw record per phase (median of ``runs`` passes) and their sum; ``collector``: ``GC_MODES``."""
    from aiokafka.partitioner import DefaultPartitioner
    from aiokafka.producer.message_accumulator import BatchBuilder
    from redis.asyncio import Redis

    from bench import e2e
    from reasonwire.workers.core.normalizer import DeadLetter, Normalizer, RawRecord, Step
    from reasonwire.workers.ops.gc_pause import collection_paused
    from reasonwire.workers.io.redis_script import WRITE_OPS, ServerScript
    from reasonwire.workers.io.store import ArtefactStore
    from reasonwire.workers.ops.telemetry import setup_telemetry
    from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
    from reasonwire.workers.translators import implemented, translator_for

    grammars = [g.value for g in implemented() if not only or g.value in only]
    traffic = e2e.traffic(grammars, n_records, seed=12, tag="inproc").records
    records = [RawRecord(r.key, r.value, r.headers, i % e2e.PARTITIONS, i, int(time.time() * 1000)) for i, r in enumerate(traffic)]
    store = ArtefactStore(Redis(), artefact_ttl_s=900, journal_ttl_s=900)
    script, partitioner = ServerScript(store.redis, WRITE_OPS), DefaultPartitioner()

    async def send(keys: Sequence[Any], args: Sequence[Any]) -> list[int]:
        script.pack(keys, args)  # the bytes the connection would send
        return [1, 0]  # written; the store's write count

    store._writes = send  # type: ignore[assignment]  # the script call's RESP bytes, not the round trip
    partitions = list(range(e2e.PARTITIONS))
    telemetry = None if mode == "off" else NormalizerTelemetry(setup_telemetry(), group_id="inproc", metric_flush_s=1.0)

    where = ["warm-up"]
    collections: dict[str, list[float]] = {}

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.setdefault(where[0], []).append(-time.process_time())
        elif collections.get(where[0]):
            collections[where[0]][-1] += time.process_time()

    def one_pass(totals: dict[str, float]) -> None:
        normalizer = Normalizer(translators=translator_for)
        clock = time.process_time
        for lo in range(0, len(records), batch):
            poll = records[lo : lo + batch]
            paused = collection_paused() if collector == "paused" else contextlib.nullcontext()
            paused.__enter__()
            where[0] = "core"
            t0 = clock()
            trace = telemetry.batch(poll).__enter__() if telemetry else None
            steps: list[Step] = []
            for record in poll:
                item = normalizer.route(record)
                if isinstance(item, DeadLetter):
                    steps.append(normalizer.reject(item))
                    continue
                if normalizer.needs_restore(item):
                    normalizer.restore(item, [], ended=False)
                steps.append(normalizer.accept(item, now=0.0))
            t1 = clock()
            where[0] = "after"
            if trace is not None:
                trace.stepped(steps)
            t2 = clock()
            _run_to_end(store.apply(steps))
            t3 = clock()
            _batches(steps, BatchBuilder, partitioner, partitions)
            t4 = clock()
            where[0] = "handoff"  # what comes due in the pause starts as it ends
            paused.__exit__(None, None, None)
            if trace is not None:
                trace.acknowledged()
                trace.__exit__(None, None, None)
            t5 = clock()
            for phase, spent in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                totals[phase] += spent

    one_pass(dict.fromkeys(PHASES, 0.0))  # warm-up: lazy imports, first runs of each grammar
    _collector(collector)
    gc.callbacks.append(note)
    samples: dict[str, list[float]] = {p: [] for p in (*PHASES, "gc", "in-poll")}
    try:
        for _ in range(runs):
            totals = dict.fromkeys(PHASES, 0.0)
            collections.clear()
            one_pass(totals)
            for phase, spent in totals.items():
                samples[phase].append(1e6 * spent / len(records))
            samples["gc"].append(1e6 * sum(sum(c) for c in collections.values()) / len(records))
            during = len(collections.get("core", ())) + len(collections.get("after", ()))
            samples["in-poll"].append(during / -(-len(records) // batch))
    finally:
        gc.callbacks.remove(note)
        gc.enable()
    out = {phase: statistics.median(values) for phase, values in samples.items()}
    out["total"] = sum(out[p] for p in PHASES)
    if telemetry is not None:
        telemetry.shutdown()
    return out


def _collector(collector: str) -> None:
    """The garbage collector as ``--gc`` says (``GC_MODES``)."""
    if collector in ("worker", "paused"):
        from reasonwire.workers.ops.gc_pause import tune_gc

        tune_gc()
    elif collector == "off":
        gc.disable()


def _run_to_end(coroutine: Any) -> Any:
    """Drive a coroutine that never suspends (the store with its round trip captured)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended: it did I/O")


def _batches(steps: Sequence[Any], builder: Any, partitioner: Any, partitions: list[int]) -> None:
    """The poll's outputs in one record batch per topic partition, built (``NormalizerWorker._send``)."""
    batches: dict[tuple[str, int], list[Any]] = {}
    chosen: dict[tuple[str, bytes | None], int] = {}
    for step in steps:
        for out in step.outbound:
            partition = chosen.get((out.topic, out.key))
            if partition is None:
                partition = chosen[(out.topic, out.key)] = partitioner(out.key, partitions, partitions)
            slot = batches.get((out.topic, partition))
            if slot is None:
                slot = batches[(out.topic, partition)] = [builder(16384, 0)]
            if slot[-1].append(key=out.key, value=out.value, timestamp=None, headers=out.headers) is None:
                slot.append(builder(16384, 0))
                slot[-1].append(key=out.key, value=out.value, timestamp=None, headers=out.headers)
    for slot in batches.values():
        for batch in slot:
            batch.close()
            batch._builder.build()  # noqa: SLF001 - what the sender does before the request


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inproc", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200, help="records per poll (RW_MAX_BATCH)")
    parser.add_argument("--gc", choices=GC_MODES, default="worker", help="the garbage collector's settings (see above)")
    parser.add_argument("--grammars", default="", help="comma-separated grammars of the traffic (default: every one implemented)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sampled", action="store_const", const="sampled", dest="mode", help="exporters on, 1 %% of runs traced")
    mode.add_argument("--off", action="store_const", const="off", dest="mode", help="no telemetry at all")
    args = parser.parse_args()
    chosen = args.mode or "shipped"
    _configure(chosen)
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):  # the console exporters
        figures = measure(args.records, chosen, args.runs, args.batch, args.gc, [g for g in args.grammars.split(",") if g])
    print(f"telemetry {chosen}, gc {args.gc}, {args.records} records, polls of {args.batch}, median of {args.runs} passes, µs of CPU per raw record:")
    print("  " + ", ".join(f"{phase} {figures[phase]:.1f}" for phase in (*PHASES, "total", "gc")) + f", collections per poll while it was stepped, stored or batched {figures['in-poll']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
