"""Keep the garbage collector out of a poll's stepping.

Stepping a poll of 200 raw records allocates a few thousand containers that live until the poll
is handed over (steps, output records, their header lists, journal entries): more than the
young generation's threshold (then 2 000, ``reasonwire.workers.ops.gc_pause.tune_gc``; 20 000 now), so with the
collector left on about two polls in three were interrupted by a collection (in process:
0.67 per poll, 0.3 ms each, up to 3.6 ms; a middle one every ~15 polls) — on the path of every
output of that poll. Inside :func:`collection_paused` no automatic collection starts; the one
that came due starts at the first allocation after the block, which is what the adapter does
next once the poll's outputs are handed to the producer: between polls. CPython still chooses
which generation to collect (its own rule for middle and full collections, unchanged), and
reference counting frees everything that is not in a cycle as usual — only the cycle detector
waits, for the few milliseconds a poll takes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic garbage collection inside the block; a collection that came due during it
    runs at the first allocation after it. Nested use, or a collector already off, changes nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


GC_GEN0_THRESHOLD = 20_000
"""Container allocations (net of frees) between two young collections; CPython's default is 700."""


def tune_gc() -> None:
    """Keep the garbage collector off the CPU and out of the latency tail.

    Once started, the worker holds ~90 000 long-lived objects (modules, translators' tables,
    clients). CPython's full collection walks all of them: 0.1–0.5 s paused twice per ~30 000
    raw records with the default thresholds. After start-up everything alive is moved out of
    the collector's sight (``gc.freeze``: never scanned, never freed — it lives as long as the
    process anyway).

    Young collections come every 20 000 net allocations. A record's garbage is freed by
    reference counting (a live drain of 43 000 raw records left ~800 objects in cycles), so
    a collection finds almost nothing and costs what it examines: the young objects still
    alive, i.e. the polls in flight. Stepping a poll allocates a few thousand such objects at
    once (:func:`~reasonwire.workers.ops.gc_pause.collection_paused`), so at 2 000 nearly every
    poll ended with a young collection over its own fresh objects and every tenth with a
    middle one over ten polls' worth (5–34 ms): 250–290 young and 26–36 middle collections,
    ~0.5 s or ~12 µs per raw record, ~12 % of the worker's CPU (py-spy). At 20 000
    the allocations of one poll are mostly freed again (its retirement decrements the count)
    before the next poll adds its own, so the count reaches the threshold only as objects
    accumulate: 13 young collections (p50 ~7 ms, max 20 ms) and 1 middle one in the same
    drain, ~0.13 s. (Before the poll's message stopped being a reference cycle, every poll's
    200 records waited in the young generation and a collection at 20 000 took 37–130 ms:
    the "fourth pass" of docs/benchmarks-history.md, which lowered it to 2 000 then.)"""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), gen1, gen2)
