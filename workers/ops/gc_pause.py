"""Keep the garbage collector out of a poll's stepping (issue 27 item 3).

Stepping a poll of 200 raw records allocates a few thousand containers that live until the poll
is handed over (steps, output records, their header lists, journal entries): more than the
young generation's threshold (then 2 000, ``reasonwire.workers.services.normalizer.tune_gc``; 20 000 now), so with the
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
