"""One number, one event (issue 24), sans-I/O: how long a run has been silent, who may write
for a run, and whether the store went back in time.

Theory of operation
-------------------
Every output's number (``rw-event-seq``) is a function of the run's accepted input and of the
decisions journaled beside it. Outputs derived from the same records and the same journal are
identical, so a worker that sends them twice (a redelivery, a worker that lost its partitions
and has not noticed yet) sends harmless duplicates. The danger is a decision that is *not*
derived from the records — an expiry, a sequence gap judged against a journal that another
worker was still writing, a run rebuilt from a store that lost or rolled back its data — made
by a worker whose copy of the run is stale. Three mechanisms close it, each a pure object here
that the adapter (``workers/normalize.py``) and the store's write script only perform:

* :class:`SilenceClock` — silence is measured in *stream time*: time during which the worker
  had consumed its partition to the end the broker reported, confirmed by two fetch responses.
  A paused, starved or lagging worker's clock does not advance, so it never expires a run whose
  records are waiting (item 1).
* :class:`Heads` — the fence (items 2, 3). Every write for a run (a poll's journal entries,
  an expiry, a run's end) carries the run's journal *head* this worker last saw and the head it
  writes (``"<n>.<worker token>"``). The store's write script applies a poll only if every run's
  head is still the expected one (or already the new one: our own write whose reply was lost)
  and the run has no ended marker — else it writes nothing and names the runs that moved. The
  worker then drops its stale copies and redoes the poll from the journal, and a terminal
  output is sent only after its write was accepted. Rebalances, partition-count changes and
  expiry ticks all go through that one check, so no listener call or timing has to be right.
* :class:`Witness` — rollback detection (item 4). The store counts its writes (``w`` in the
  epoch hash, incremented by every poll's script); the worker puts the count it saw into the
  metadata of every offset commit. A store whose count is below the highest count the worker
  has seen — its own writes, or the committed metadata read at start-up — went back in time
  (a restored backup, an old AOF, a promoted lagging replica): it is treated as a store that
  lost data before anything is read from it or written into it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

COMMIT_METADATA_PREFIX: Final = "rw-w="
"""Offset-commit metadata: ``rw-w=<store epoch id>:<store write count>`` (Kafka keeps it beside the offset)."""


class SilenceClock:
    """Per partition, the seconds of *confirmed caught-up* time: stream time.

    The adapter calls :meth:`observe` on every expiry tick with whether the partition is caught
    up (every record below the broker's high watermark has been stepped) and when the fetch
    that reported that high watermark answered. The time between two such confirmations is
    credited (at most ``step`` seconds per tick, so a wall-clock jump credits no more than a
    tick); anything else — a tick without a fresh fetch response (the process was paused and
    the consumer has not fetched since), a partition with records waiting — credits nothing.
    A run's silence is the credit since its last record; the record is taken to have come at
    the end of the current tick (``step`` ahead), so credit earned before it never counts.
    """

    def __init__(self, step: float = 0.0) -> None:
        self.step = step
        self._credited: dict[int, float] = {}
        self._anchor: dict[int, float] = {}

    def at(self, partition: int) -> float:
        """The partition's stream time (seconds of confirmed caught-up time so far)."""
        return self._credited.get(partition, 0.0)

    def seen(self, partition: int) -> float:
        """The stream time to record as a run's last input on ``partition``."""
        return self.at(partition) + self.step

    def observe(self, partition: int, *, caught_up: bool, fetched_at: float | None) -> None:
        """One tick's view of ``partition``: credit the time since the previous confirmation."""
        if not caught_up or fetched_at is None:
            self._anchor.pop(partition, None)
            return
        anchor = self._anchor.get(partition)
        self._anchor[partition] = fetched_at
        if anchor is not None and fetched_at > anchor:
            self._credited[partition] = self.at(partition) + min(fetched_at - anchor, self.step or (fetched_at - anchor))

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: their stream time is the next owner's."""
        for partition in partitions:
            self._credited.pop(partition, None)
            self._anchor.pop(partition, None)


def next_head(head: str, token: str) -> str:
    """The head a write replaces ``head`` with: one more write, by the worker ``token``."""
    count, _, _ = head.partition(".")
    return f"{int(count) + 1 if count.isdigit() else 1}.{token}"


STALL_S: Final = 3.0
"""A worker whose event loop did not run for this long may have lost its partitions without its
rebalance listener being called (Kafka's default session timeout is 10 s): it drops every run it
holds before stepping again, so what it publishes next is derived from the journals as they are."""


def stalled(gap_s: float) -> bool:
    """Whether a gap between two beats of the event loop is a stall (see :data:`STALL_S`)."""
    return gap_s >= STALL_S


def journal_complete(seqs: Iterable[int], upto: int) -> bool:
    """Whether a journal holds every accepted record before ``upto`` (``0 … upto-1``): inside a
    loss window only such a journal may resume its run (negative fields are bookkeeping)."""
    have = set(seqs)
    return all(s in have for s in range(upto))


def fence_accepts(current: str, expected: str, new: str, ended: bool) -> bool:
    """The write script's rule, for tests and the simulation: a write for a run is applied only
    if the run has not ended and its head is the one the writer last saw (or the writer's own
    new head: its previous attempt landed and only the reply was lost)."""
    return not ended and current in (expected, new)


class Witness:
    """The highest write count this worker knows the store reached under one epoch id (see the
    module doc). A count only witnesses its own epoch: a store whose id changed is a store that
    lost its data (the epoch check), not one that went back in time."""

    def __init__(self) -> None:
        self.epoch: str | None = None
        self.count = 0

    def adopt(self, epoch: str, count: int) -> None:
        """The store's epoch as claimed: a new id starts its own count."""
        if epoch != self.epoch:
            self.epoch, self.count = epoch, 0
        self.saw(count)

    def saw(self, count: int | None) -> None:
        if count is not None and count > self.count:
            self.count = count

    def rolled_back(self, epoch: str, store_count: int) -> bool:
        """Whether a store at ``store_count`` writes under ``epoch`` is behind what was acknowledged."""
        return epoch == self.epoch and store_count < self.count

    def metadata(self) -> str:
        """What each offset commit carries: ``rw-w=<epoch id>:<count>``."""
        return f"{COMMIT_METADATA_PREFIX}{self.epoch or ''}:{self.count}"


def parse_metadata(metadata: str | bytes | None) -> tuple[str, int] | None:
    """(epoch id, store write count) from one commit's metadata (``None``: none, or not ours)."""
    if isinstance(metadata, bytes):
        metadata = metadata.decode("ascii", "replace")
    if not metadata or not metadata.startswith(COMMIT_METADATA_PREFIX):
        return None
    epoch, _, count = metadata[len(COMMIT_METADATA_PREFIX) :].rpartition(":")
    return (epoch, int(count)) if epoch and count.isdigit() else None


def witnessed(commits: Iterable[str | bytes | None]) -> dict[str, int]:
    """Per epoch id, the highest write count the commits' metadata carry."""
    out: dict[str, int] = {}
    for metadata in commits:
        parsed = parse_metadata(metadata)
        if parsed is not None:
            epoch, count = parsed
            out[epoch] = max(count, out.get(epoch, 0))
    return out
