"""The campaign: N events per grammar, in chunks over worker processes, tallied per grammar.

Each chunk is reproducible on its own: its cases come from
``random.Random(f"{seed}/{grammar}/{chunk}")``. A worker returns counts, the
slowest case, its peak RSS and the first case of every new finding signature;
the parent dedupes signatures, minimizes one case per signature and writes it
to ``fuzz/findings/``.
"""

from __future__ import annotations

import random
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from fuzz.mutate import Mutator
from fuzz.oracle import Case, Finding, run_case

CHUNK_EVENTS = 25_000


@dataclass
class Tally:
    """What a chunk (or a whole grammar) came to."""

    grammar: str
    events: int = 0
    events_out: int = 0
    streams: int = 0
    crashes: int = 0
    violations: int = 0
    safety_net: int = 0
    cpu_s: float = 0.0
    """CPU seconds of the worker processes (the machine is shared: wall time alone misleads)."""
    slowest_s: float = 0.0
    slowest_case: str = ""
    peak_rss_kib: int = 0
    seconds: float = 0.0
    examples: dict[str, tuple[Finding, Case]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        self.events += other.events
        self.events_out += other.events_out
        self.streams += other.streams
        self.crashes += other.crashes
        self.violations += other.violations
        self.safety_net += other.safety_net
        self.cpu_s += other.cpu_s
        if other.slowest_s > self.slowest_s:
            self.slowest_s, self.slowest_case = other.slowest_s, other.slowest_case
        self.peak_rss_kib = max(self.peak_rss_kib, other.peak_rss_kib)
        for sig, example in other.examples.items():
            self.examples.setdefault(sig, example)
        for sig, n in other.hits.items():
            self.hits[sig] = self.hits.get(sig, 0) + n


def run_chunk(args: tuple[int, str, int, int]) -> Tally:
    """Fuzz ``events`` input events of one grammar; the chunk's own RNG makes it replayable."""
    seed, grammar, chunk, events = args
    rng = random.Random(f"{seed}/{grammar}/{chunk}")
    mutator = Mutator(grammar, rng)
    tally = Tally(grammar)
    started = time.perf_counter()
    cpu = time.process_time()
    n = 0
    while tally.events < events:
        case = mutator.case()
        result = run_case(case)
        tally.streams += 1
        tally.events += result.events_in
        tally.events_out += result.events_out
        if result.seconds > tally.slowest_s:
            tally.slowest_s = result.seconds
            tally.slowest_case = f"seed {seed} chunk {chunk} case {n}, {len(case.lines)} events"
        for finding in result.findings:
            if finding.kind == "crash":
                tally.crashes += 1
            elif finding.kind == "safety_net":
                tally.safety_net += 1
            else:
                tally.violations += 1
            tally.hits[finding.signature] = tally.hits.get(finding.signature, 0) + 1
            tally.examples.setdefault(finding.signature, (finding, case))
        n += 1
    tally.seconds = time.perf_counter() - started
    tally.cpu_s = time.process_time() - cpu
    tally.peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return tally


def chunks(seed: int, grammar: str, events: int, chunk_events: int = CHUNK_EVENTS) -> list[tuple[int, str, int, int]]:
    return [(seed, grammar, i, min(chunk_events, events - done)) for i, done in enumerate(range(0, events, chunk_events))]


def fuzz_grammar(grammar: str, *, events: int, seed: int, workers: int, pool: Any = None) -> Tally:
    """All chunks of one grammar, on ``pool`` (a multiprocessing pool) or inline."""
    tally = Tally(grammar)
    started = time.perf_counter()
    work = chunks(seed, grammar, events)
    results = pool.imap_unordered(run_chunk, work) if pool is not None and workers > 1 else map(run_chunk, work)
    for part in results:
        tally.add(part)
    tally.seconds = time.perf_counter() - started
    return tally
