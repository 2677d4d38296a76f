"""Memory of the sans-I/O normalizer: per open run, and against run length (``make bench`` section 4).

Everything goes through :class:`reasonwire.workers.core.normalizer.Normalizer` (``route`` +
``accept`` on real ``reasoning.raw.v1`` records), in this process, outputs
dropped as the worker drops them once published:

* **open runs** — N runs of a grammar each stopped halfway (a reasoning or text
  unit open); ``tracemalloc`` gives the bytes the run table holds per open run.
  The process RSS (psutil, no tracemalloc) is also read for growing N on one
  grammar, to show the curve in the unit an operator sees.
* **run length** — one run fed K delta events of one unit (reasoning, answer
  text, tool arguments) of ~16 characters each; the slope of traced memory
  between K1 and K2 is what the run keeps per event. Zero means the state does
  not grow with run length.

The worker also keeps each open run's raw events in its Redis journal (by
design: a takeover re-feeds them); that is Redis memory, bounded by the open
runs' lengths and deleted when the run ends — not measured here.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterable
from typing import Any

import orjson

from bench.streams import Segment, _set, templates
from reasonwire.workers.core.normalizer import Normalizer, RawRecord
from reasonwire.workers.services.ingress.records import RunEnvelope
from reasonwire.workers.translators import translator_for


def _records(grammar: str, run_id: str, lines: Iterable[bytes], start_seq: int = 0) -> Iterable[RawRecord]:
    env = RunEnvelope(grammar=grammar, run_id=run_id, thread_id=run_id, tenant="bench")
    key = run_id.encode()
    for seq, raw in enumerate(lines, start=start_seq):
        yield RawRecord(key=key, value=raw, headers=tuple(env.headers(seq)))


def _feed(normalizer: Normalizer, records: Iterable[RawRecord]) -> None:
    for record in records:
        routed = normalizer.route(record)
        assert not hasattr(routed, "reason"), getattr(routed, "reason", "")
        normalizer.accept(routed, now=0.0)  # type: ignore[arg-type]


def _half_run(grammar: str) -> list[bytes]:
    """The first half of the grammar's first finished fixture: units are open there."""
    tset = templates(grammar)
    base = next(t for t in tset.templates if t.scale == 1)
    lines = [orjson.dumps(o) for seg in base.segments for o in seg.lines]
    return lines[: max(1, len(lines) // 2)]


def open_runs(grammar: str, n: int = 2000) -> dict[str, Any]:
    half = _half_run(grammar)
    gc.collect()
    tracemalloc.start()
    normalizer = Normalizer(translators=translator_for)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        _feed(normalizer, _records(grammar, f"open-{i}", half))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert normalizer.open_runs == n
    return {"open_runs": n, "events_fed_per_run": len(half), "bytes_per_open_run": (after - before) / n}


def rss_curve(grammar: str, counts: tuple[int, ...] = (0, 1000, 4000)) -> list[dict[str, float]]:
    import psutil

    proc = psutil.Process()
    half = _half_run(grammar)
    normalizer = Normalizer(translators=translator_for)
    gc.collect()
    base = proc.memory_info().rss
    out, fed = [], 0
    for target in counts:
        while fed < target:
            _feed(normalizer, _records(grammar, f"rss-{fed}", half))
            fed += 1
        gc.collect()
        out.append({"open_runs": target, "rss_mib_over_empty": (proc.memory_info().rss - base) / 2**20})
    return out


def _long_unit(grammar: str, kind: str) -> tuple[list[bytes], Segment] | None:
    """Lines before the first delta run of ``kind`` in any finished fixture, and that run."""
    for t in templates(grammar).templates:
        if t.scale != 1:
            continue
        prefix: list[bytes] = []
        for seg in t.segments:
            if seg.delta is not None and seg.delta.kind == kind and seg.text:
                return prefix, seg
            prefix += [orjson.dumps(o) for o in seg.lines]
    return None


def run_length(grammar: str, kind: str, k1: int = 1000, k2: int = 10000) -> dict[str, Any] | None:
    found = _long_unit(grammar, kind)
    if found is None:
        return None
    prefix, seg = found
    assert seg.delta is not None
    alphabet = "the quick brown fox jumps over the lazy dog 0123456789 "

    def delta(i: int) -> bytes:
        obj = orjson.loads(orjson.dumps(seg.lines[0]))
        piece = (alphabet[i % 40 :] + alphabet)[:16]
        if kind == "args":  # keep the arguments one growing JSON string value
            piece = piece.replace('"', "")
        _set(obj, seg.delta.path, piece)  # type: ignore[union-attr]
        return orjson.dumps(obj)

    normalizer = Normalizer(translators=translator_for)
    run_id = f"long-{grammar}-{kind}"
    gc.collect()
    tracemalloc.start()
    _feed(normalizer, _records(grammar, run_id, prefix))
    seq = len(prefix)
    _feed(normalizer, _records(grammar, run_id, (delta(i) for i in range(k1)), seq))
    gc.collect()
    m1 = tracemalloc.get_traced_memory()[0]
    _feed(normalizer, _records(grammar, run_id, (delta(i) for i in range(k1, k2)), seq + k1))
    gc.collect()
    m2 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert normalizer.open_runs == 1, "the long run ended early: the generated deltas were rejected"
    per_event = (m2 - m1) / (k2 - k1)
    return {"kind": kind, "k1": k1, "k2": k2, "bytes_per_event": per_event, "delta_chars": 16}


def measure(grammars: list[str], *, open_n: int = 1000, k1: int = 1000, k2: int = 5000) -> dict[str, Any]:
    out: dict[str, Any] = {"open_runs": {}, "run_length": {}}
    for g in grammars:
        out["open_runs"][g] = open_runs(g, open_n)
        out["run_length"][g] = [r for kind in ("reasoning", "text", "args") if (r := run_length(g, kind, k1, k2)) is not None]
    if grammars:
        first = "anthropic-messages" if "anthropic-messages" in grammars else grammars[0]
        out["rss_curve"] = {"grammar": first, "points": _rss_curve_in_fresh_process(first)}
    return out


def _rss_curve_in_fresh_process(grammar: str) -> list[dict[str, float]] | str:
    """RSS never shrinks after tracemalloc's runs, so the curve is read in a new interpreter."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bench.memory", grammar], capture_output=True, timeout=300)
    if done.returncode != 0:
        return f"failed: {done.stderr.decode(errors='replace')[-500:]}"
    points: list[dict[str, float]] = orjson.loads(done.stdout)
    return points


if __name__ == "__main__":  # python -m bench.memory GRAMMAR: the RSS curve, as JSON on stdout
    import sys

    sys.stdout.write(orjson.dumps(rss_curve(sys.argv[1])).decode() + "\n")

