"""Translator CPU cost per provider event, against the JSON floor (``make bench`` section 1).

What is measured, per grammar, over the same generated runs (``bench.streams``):

* **reasonwire** — what the worker does with a run's bytes, minus I/O: a fresh
  translator per run, ``feed(raw)`` for every provider event (``orjson.loads``
  inside), ``finish()``, and every output serialized the way it goes on the wire:
  each AG-UI event with ``reasonwire.workers.core.wire.event_json``, each artefact record
  and the run's usage record with ``record_json``.
* **floor** — the same JSON work and nothing else: ``orjson.loads`` of every raw
  line, and ``orjson.dumps`` of every output the translator produced for that
  run (events, artefact records, usage record), pre-built as plain dicts from
  the wire bytes. Same library, same number of parses and dumps, same bytes.

Both passes run alternately several times (ABAB…), timed in process CPU time;
the reported ratio is the median of the per-round ratios, so drift on a shared
machine hits both sides. Events/s are per CPU-second of one core.

The ratio mixes two costs a run has: a fixed one (start, artefact and usage
records, the terminal event) and one per provider event. :func:`decompose` times
every run on its own and fits ``time = fixed + per_event × events`` for both
sides, so the table can say what an extra event costs against what it costs the
floor (the steady state of a long run) apart from what a run costs at all.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from reasonwire.workers.core.wire import event_json, record_json
from reasonwire.workers.translators import translator_class


def translate_run(cls: type, lines: Sequence[bytes], run_id: str) -> int:
    """One run through a translator with its output serialized; returns bytes written."""
    translator = cls(run_id=run_id, thread_id=run_id)
    written = 0
    for raw in lines:
        out = translator.feed(raw)
        for event in out.events:
            written += len(event_json(event))
        for record in out.artefacts:
            written += len(record_json(record))
    out = translator.finish()
    for event in out.events:
        written += len(event_json(event))
    for record in out.artefacts:
        written += len(record_json(record))
    written += len(record_json(translator.usage_record()))
    return written


def run_outputs(cls: type, lines: Sequence[bytes], run_id: str) -> tuple[list[dict[str, Any]], int]:
    """The run's outputs as plain dicts (for the floor), and how many were AG-UI events."""
    translator = cls(run_id=run_id, thread_id=run_id)
    blobs: list[bytes] = []
    events = 0
    for out in [*(translator.feed(raw) for raw in lines), translator.finish()]:
        blobs += [event_json(e) for e in out.events]
        events += len(out.events)
        blobs += [record_json(r) for r in out.artefacts]
    blobs.append(record_json(translator.usage_record()))
    return [orjson.loads(b) for b in blobs], events


def floor_run(lines: Sequence[bytes], outputs: Sequence[dict[str, Any]]) -> int:
    written = 0
    for raw in lines:
        orjson.loads(raw)
    for obj in outputs:
        written += len(orjson.dumps(obj))
    return written


def timed(fn: Callable[[], Any]) -> float:
    """CPU seconds of this process (not wall time): other processes on a shared machine
    steal wall time from one side or the other, not CPU time."""
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


@dataclass
class Workload:
    grammar: str
    cls: type
    runs: list[list[bytes]]
    outputs: list[list[dict[str, Any]]]
    input_events: int
    output_events: int
    input_bytes: int


def workload(grammar: str, runs: list[list[bytes]]) -> Workload:
    cls = translator_class(grammar)
    outputs, out_events = [], 0
    for i, lines in enumerate(runs):
        objs, n = run_outputs(cls, lines, f"run-{i}")
        outputs.append(objs)
        out_events += n
    return Workload(
        grammar=grammar,
        cls=cls,
        runs=runs,
        outputs=outputs,
        input_events=sum(len(r) for r in runs),
        output_events=out_events,
        input_bytes=sum(len(line) for r in runs for line in r),
    )


def decompose(w: Workload, *, rounds: int = 3) -> dict[str, Any]:
    """Least-squares ``CPU time = fixed + per_event × input events`` per run, both sides.

    Each run is timed alone (the fastest of ``rounds``, ABAB), so a run's fixed cost and
    its per-event cost can be told apart; see the module docstring."""
    clock = time.process_time
    n = len(w.runs)
    ours, floor = [float("inf")] * n, [float("inf")] * n
    for _ in range(rounds):
        gc.collect()
        for i, (lines, outs) in enumerate(zip(w.runs, w.outputs)):
            t0 = clock()
            floor_run(lines, outs)
            t1 = clock()
            translate_run(w.cls, lines, f"run-{i}")
            t2 = clock()
            floor[i] = min(floor[i], t1 - t0)
            ours[i] = min(ours[i], t2 - t1)
    events = [float(len(r)) for r in w.runs]
    fit_ours = statistics.linear_regression(events, ours)
    fit_floor = statistics.linear_regression(events, floor)
    return {
        "fixed_us_per_run": fit_ours.intercept * 1e6,
        "floor_fixed_us_per_run": fit_floor.intercept * 1e6,
        "us_per_event": fit_ours.slope * 1e6,
        "floor_us_per_event": fit_floor.slope * 1e6,
        "marginal_ratio_to_floor": fit_ours.slope / fit_floor.slope,
    }


def measure(w: Workload, *, rounds: int = 5) -> dict[str, Any]:
    run_ids = [f"run-{i}" for i in range(len(w.runs))]

    def ours() -> None:
        for rid, lines in zip(run_ids, w.runs):
            translate_run(w.cls, lines, rid)

    def floor() -> None:
        for lines, outs in zip(w.runs, w.outputs):
            floor_run(lines, outs)

    ours()  # warm caches, imports, pydantic validators
    floor()
    t_ours, t_floor = [], []
    for _ in range(rounds):
        t_floor.append(timed(floor))
        t_ours.append(timed(ours))
    ratios = [o / f for o, f in zip(t_ours, t_floor)]
    med_ours, med_floor = statistics.median(t_ours), statistics.median(t_floor)
    return {
        "grammar": w.grammar,
        "runs": len(w.runs),
        "input_events": w.input_events,
        "output_events": w.output_events,
        "events_per_run_median": statistics.median(len(r) for r in w.runs),
        "events_per_run_max": max(len(r) for r in w.runs),
        "input_bytes_per_event": w.input_bytes / w.input_events,
        "reasonwire_events_per_s": w.input_events / med_ours,
        "floor_events_per_s": w.input_events / med_floor,
        "reasonwire_us_per_event": med_ours / w.input_events * 1e6,
        "floor_us_per_event": med_floor / w.input_events * 1e6,
        "ratio_to_floor": statistics.median(ratios),
        "ratio_to_floor_rounds": ratios,
        "decomposed": decompose(w, rounds=max(2, rounds - 2)),
    }
