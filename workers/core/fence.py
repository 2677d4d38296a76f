"""One number, one event, sans-I/O: how long a run has been silent, who may write
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
that the adapter (``workers/services/normalizer.py``) and the store's write script only perform:

* :class:`SilenceClock` — silence is measured in *stream time*: time during which the worker
  had consumed its partition to the end the broker reported, confirmed by two fetch responses.
  A paused, starved or lagging worker's clock does not advance, so it never expires a run whose
  records are waiting.
* :class:`Heads` — the fence. Every write for a run (a poll's journal entries,
  an expiry, a run's end) carries the run's journal *head* this worker last saw and the head it
  writes (``"<n>.<worker token>"``). The store's write script applies a poll only if every run's
  head is still the expected one (or already the new one: our own write whose reply was lost)
  and the run has no ended marker — else it writes nothing and names the runs that moved. The
  worker then drops its stale copies and redoes the poll from the journal, and a terminal
  output is sent only after its write was accepted. Rebalances, partition-count changes and
  expiry ticks all go through that one check, so no listener call or timing has to be right.
* :class:`Witness` — rollback detection. The store counts its writes (``w`` in the
  epoch hash, incremented by every poll's script); the worker puts the count it saw into the
  metadata of every offset commit. A store whose count is below the highest count the worker
  has seen — its own writes, or the committed metadata read at start-up — went back in time
  (a restored backup, an old AOF, a promoted lagging replica): it is treated as a store that
  lost data before anything is read from it or written into it. On a Redis Cluster one shard can
  go back alone (its replica promoted without the master's last writes) while the epoch hash, on
  another shard, stays intact: there each worker also counts its own writes *per master*
  (:class:`ShardCount`, a counter key on that master incremented after the poll's writes to it,
  on the same connection), and the witness keeps those counts too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

COMMIT_METADATA_PREFIX: Final = "rw-w="
"""Offset-commit metadata: ``rw-w=<store epoch id>:<store write count>`` (Kafka keeps it beside the
offset), on a Redis Cluster followed by ``|<worker token>@<ms>|<slot>=<count>~<age s>,…``: the
worker's own write count per master, each master named by the *anchor* slot its counter key lives
in, and when the worker last saw each (``<ms>`` minus its age; :class:`ShardCount`)."""

MAX_METADATA_SHARDS: Final = 64
"""At most this many per-master counts ride in one commit's metadata (Kafka's default
``offset.metadata.max.bytes`` is 4096; 64 counts take under 1.2 kB): the most recently written win."""


class SilenceClock:
    """Per partition, the seconds of *confirmed caught-up* time: stream time.

    The adapter calls :meth:`observe` on every clock tick with whether the partition is caught
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


def journal_resumable(seqs: Iterable[int], *, ended: object, upto: int, doubtful: bool) -> bool:
    """Whether a run may be resumed from its journal at record ``upto``: always, unless the store
    is in a loss window (``doubtful``) and the run has not ended — then only from a journal that
    holds every accepted record before it (:func:`journal_complete`); resuming from one that lost
    entries would renumber events already published."""
    return bool(ended) or not doubtful or journal_complete(seqs, upto)


def fence_accepts(current: str, expected: str, new: str, ended: bool) -> bool:
    """The write script's rule, for tests and the simulation: a write for a run is applied only
    if the run has not ended and its head is the one the writer last saw (or the writer's own
    new head: its previous attempt landed and only the reply was lost)."""
    return not ended and current in (expected, new)


def epoch_refused(expected: str | None, current: str | None, count: int = 0, witness: int = 0) -> bool:
    """The store check before every write and journal read (the store's scripts state it once in
    Lua, ``EPOCH_RULE`` in workers/io/redis_script.py): with an epoch claimed (``expected``;
    ``None``: unchecked), a store whose id is missing or another lost its data, and one with that
    id whose write ``count`` is below ``witness`` (the highest count known acknowledged under it)
    went back in time. Either is refused before anything is read from it or written into it."""
    return expected is not None and (current != expected or count < witness)


@dataclass(frozen=True)
class ShardCount:
    """One worker's write count on one Redis Cluster master, as a commit's metadata carries it.

    The counter key lives in the master's *anchor* slot (the lowest slot it serves) and is named
    by the worker's token; the worker increments it after its writes to that master, on the same
    connection, so a copy of the shard holding count ``n`` holds every write the worker made there
    before its ``n``-th increment (a replica, an AOF, a snapshot are prefixes of the master's
    history). A shard whose counter is below a count the worker saw went back in time. ``seen_ms``
    (wall clock) dates the count: the counter key expires (twice the journal TTL after its last
    increment), so a count older than the journal TTL is not judged — nothing it witnessed is left."""

    epoch: str
    token: str
    slot: int
    count: int
    seen_ms: int


class Witnessed(dict[str, int]):
    """:func:`witnessed`'s answer: per epoch id the highest store write count (one server), and in
    :attr:`shards` the per-master counts of a Redis Cluster, highest per (epoch, token, slot)."""

    def __init__(self, counts: Mapping[str, int] | None = None, shards: Iterable[ShardCount] = ()) -> None:
        super().__init__(counts or {})
        self.shards: list[ShardCount] = list(shards)


def shards_behind(shards: Iterable[ShardCount], epoch: str, stored: Mapping[tuple[str, int], int], now_ms: int, horizon_ms: int) -> list[ShardCount]:
    """The witnessed per-master counts a cluster went back from: of epoch ``epoch``, seen within
    ``horizon_ms`` (the journal TTL) of ``now_ms``, above the counter the store holds now
    (``stored``: (token, slot) → count; a missing key counts 0)."""
    return [s for s in shards if s.epoch == epoch and now_ms - s.seen_ms < horizon_ms and stored.get((s.token, s.slot), 0) < s.count]


class Witness:
    """The highest write count this worker knows the store reached under one epoch id (see the
    module doc). A count only witnesses its own epoch: a store whose id changed is a store that
    lost its data (the epoch check), not one that went back in time.

    On a Redis Cluster the count of the epoch hash says nothing about the other shards; there
    :attr:`shards` keeps, per master (its anchor slot), this worker's own write count there and
    when it was seen (:class:`ShardCount`)."""

    def __init__(self, token: str = "") -> None:
        self.epoch: str | None = None
        self.count = 0
        self.token = token
        """This worker's name in its per-master counter keys (a cluster only)."""
        self.shards: dict[int, tuple[int, int]] = {}
        """Anchor slot → (this worker's count on that master, wall-clock ms it was seen)."""

    def adopt(self, epoch: str, count: int) -> None:
        """The store's epoch as claimed: a new id starts its own counts (a cluster's counters go
        on, but what they were before the new epoch is no longer witnessed)."""
        if epoch != self.epoch:
            self.epoch, self.count = epoch, 0
            self.shards = {}
        self.saw(count)

    def saw_shard(self, slot: int, count: int, now_ms: int) -> None:
        """A cluster master answered an increment of this worker's counter with ``count``."""
        before = self.shards.get(slot, (0, 0))[0]
        self.shards[slot] = (max(before, count), now_ms)

    def shard_behind(self, slot: int, count: int, now_ms: int, horizon_ms: int) -> bool:
        """Whether a master whose counter (before this worker's increment, or as read) is ``count``
        lost writes this worker saw acknowledged there within ``horizon_ms`` (the journal TTL)."""
        seen = self.shards.get(slot)
        return seen is not None and now_ms - seen[1] < horizon_ms and count < seen[0]

    def saw(self, count: int | None) -> None:
        if count is not None and count > self.count:
            self.count = count

    def rolled_back(self, epoch: str, store_count: int) -> bool:
        """Whether a store at ``store_count`` writes under ``epoch`` is behind what was acknowledged
        (a count only witnesses its own epoch: :func:`epoch_refused` with the ids equal)."""
        return epoch == self.epoch and epoch_refused(epoch, epoch, store_count, self.count)

    def metadata(self) -> str:
        """What each offset commit carries: ``rw-w=<epoch id>:<count>``, and on a cluster this
        worker's per-master counts (``|<token>@<ms>|<slot>=<count>~<age s>,…``, the newest first)."""
        base = f"{COMMIT_METADATA_PREFIX}{self.epoch or ''}:{self.count}"
        if not self.shards or not self.token:
            return base
        newest = sorted(self.shards.items(), key=lambda item: -item[1][1])[:MAX_METADATA_SHARDS]
        seen_ms = newest[0][1][1]
        return f"{base}|{self.token}@{seen_ms}|" + ",".join(f"{slot}={count}~{(seen_ms - ms) // 1000}" for slot, (count, ms) in newest)


def _parts(metadata: str | bytes | None) -> list[str] | None:
    if isinstance(metadata, bytes):
        metadata = metadata.decode("ascii", "replace")
    if not metadata or not metadata.startswith(COMMIT_METADATA_PREFIX):
        return None
    return metadata[len(COMMIT_METADATA_PREFIX) :].split("|")


def parse_metadata(metadata: str | bytes | None) -> tuple[str, int] | None:
    """(epoch id, store write count) from one commit's metadata (``None``: none, or not ours)."""
    parts = _parts(metadata)
    if parts is None:
        return None
    epoch, _, count = parts[0].rpartition(":")
    return (epoch, int(count)) if epoch and count.isdigit() else None


def parse_shards(metadata: str | bytes | None) -> list[ShardCount]:
    """The per-master counts of one commit's metadata (a cluster; ``[]`` when none, or malformed)."""
    parsed, parts = parse_metadata(metadata), _parts(metadata)
    if parsed is None or parts is None or len(parts) != 3:
        return []
    token, _, seen = parts[1].rpartition("@")
    if not token or not seen.isdigit():
        return []
    out = []
    for item in parts[2].split(","):
        slot, _, rest = item.partition("=")
        count, _, age = rest.partition("~")
        if slot.isdigit() and count.isdigit() and (age.isdigit() or not age):
            out.append(ShardCount(parsed[0], token, int(slot), int(count), int(seen) - 1000 * int(age or 0)))
    return out


def witnessed(commits: Iterable[str | bytes | None]) -> Witnessed:
    """Per epoch id, the highest write count the commits' metadata carry; on a cluster also the
    per-master counts (:attr:`Witnessed.shards`), the highest per (epoch, token, slot)."""
    out = Witnessed()
    shards: dict[tuple[str, str, int], ShardCount] = {}
    for metadata in commits:
        parsed = parse_metadata(metadata)
        if parsed is not None:
            epoch, count = parsed
            out[epoch] = max(count, out.get(epoch, 0))
        for shard in parse_shards(metadata):
            key = (shard.epoch, shard.token, shard.slot)
            if key not in shards or shard.count > shards[key].count:
                shards[key] = shard
    out.shards = list(shards.values())
    return out


class StoreLost(Exception):
    """The store's epoch is missing or changed, or its write count went back (:class:`Witness`):
    Redis lost (some of) its data. The store raises it; the worker's failure handling and health
    (below the store) name it, so it lives with the rule that defines it."""

    def __init__(self, message: str = "the store's epoch is missing or changed, or its write count went back: Redis lost data") -> None:
        super().__init__(message)
