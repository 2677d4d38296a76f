"""What the delivery machine tells the adapter to do, and how the adapter says an action failed.

The delivery machine (:mod:`reasonwire.workers.core.delivery_machine`) answers every input with a
list of these small immutable objects. Two kinds:

* *I/O actions* (:class:`ReadOpenRuns`, :class:`ReadJournals`, :class:`Probe`, :class:`Send`,
  :class:`Write`, :class:`Close`, :class:`Commit`, :class:`RecoverStore`): the adapter performs
  each and reports its outcome exactly once, with ``DeliveryMachine.done`` or
  ``DeliveryMachine.failed`` (a journal read with ``journals_read``, an index read with
  ``open_runs_read``). :class:`Seek` is performed at once and reports nothing.
* *Notifications* (:class:`Stepped`, :class:`Acknowledged`, :class:`Retired`, :class:`Forgot`,
  :class:`Adopted`, :class:`BackedOff`, :class:`Recovered`): facts for telemetry and logs; nothing to report back.

:class:`FailureKind` is the closed vocabulary of how an I/O action failed, as far as delivery
cares; the machine's consequence of each is one row of ``delivery_machine.CONSEQUENCES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Union

from reasonwire.workers.core.normalizer import DeadLetter, Outbound, RunInput, RunKey, Step


class FailureKind(Enum):
    """How an I/O action failed (the adapter classifies the exception; the machine decides)."""

    OUTAGE = "outage"
    """Redis, the broker or the network: redo the flights in flight after the backoff."""
    STORE_LOST = "store_lost"
    """The store's epoch vanished or its write count went back: recover it, drop every run."""
    MOVED = "moved"
    """The fence refused a write: another worker wrote for these runs; drop their copies."""


# -- I/O actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Probe:
    """Before stepping again after a store failure: does an empty write go through? ``flight`` 0:
    the idle probe (no poll waits for it; a worker with nothing to redo asks all the same)."""

    flight: int


@dataclass(frozen=True, slots=True, eq=False)
class ReadJournals:
    """Read these runs' journals and ended markers (one round trip); report ``journals_read``.
    ``flight`` 0: the journals of open runs this worker owns but does not hold (adoption)."""

    flight: int
    runs: tuple[RunKey, ...]


@dataclass(frozen=True, slots=True, eq=False)
class ReadOpenRuns:
    """Read the store's index of open runs of these raw partitions; report ``open_runs_read``."""

    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Send:
    """Hand these outputs to the producer, in order; report done when the broker acknowledged all."""

    flight: int
    outbound: tuple[Outbound, ...]
    terminal: bool
    """Sent after the flight's write (a run's end, or a run not yet confirmed by the fence)."""


@dataclass(frozen=True, slots=True, eq=False)
class Write:
    """A part of the flight's store transaction (journal entries, artefacts, fenced heads):
    ``part`` is its index in the flight (0: the runs stepped at once; then those restored)."""

    flight: int
    steps: tuple[Step, ...]
    part: int = 0
    opened: Mapping[RunKey, tuple[int, bytes]] | None = None
    """Runs this part opens here (met without being held): partition and envelope, for the store's
    index of open runs — what a worker that does not hold the run finds it by to end it."""


@dataclass(frozen=True, slots=True, eq=False)
class Close:
    """Write the ended markers of the flight's runs that ended (after their outputs were acknowledged)."""

    flight: int
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Commit:
    """Commit these offsets (partition → next offset). ``membership``: not progress, the expiry's
    question whether the group still counts this worker a member (it commits what it committed)."""

    offsets: Mapping[int, int]
    membership: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Seek:
    """Rewind these partitions to these offsets (the first record not committed)."""

    offsets: Mapping[int, int]


@dataclass(frozen=True, slots=True, eq=False)
class RecoverStore:
    """The store lost data: adopt its new epoch (marked lost) before anything is read or written."""


# -- notifications -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Stepped:
    """These records were stepped, before any I/O quotes them (register their content with the
    telemetry's redaction, P8; log their warnings). ``complete``: the flight's last part —
    ``steps`` of the whole flight are then ``DeliveryMachine.steps_of``."""

    flight: int
    items: tuple[tuple[DeadLetter | RunInput | None, Step], ...]
    complete: bool


@dataclass(frozen=True, slots=True, eq=False)
class Retired:
    """The flight left the pipeline — committed, or rewound (its records come again)."""

    flight: int
    records: int
    committed: bool


@dataclass(frozen=True, slots=True, eq=False)
class Acknowledged:
    """Every output of the flight was acknowledged by the broker and its write accepted (the
    end of its records' end-to-end delay)."""

    flight: int


@dataclass(frozen=True, slots=True, eq=False)
class Forgot:
    """Runs held here were dropped (``why``: revoked, stall, moved, store_lost)."""

    runs: int
    why: str


@dataclass(frozen=True, slots=True, eq=False)
class Adopted:
    """Open runs of owned partitions that no record brought back were taken up from their
    journals (the index of open runs), to be ended by the expiry if their producer vanished."""

    runs: int


@dataclass(frozen=True, slots=True, eq=False)
class BackedOff:
    """A service failed: no poll is stepped before ``retry_at`` (the machine's clock); the health
    is degraded until :class:`Recovered`."""

    delay_s: float
    retry_at: float


@dataclass(frozen=True, slots=True, eq=False)
class Recovered:
    """Work went through end to end after a failure: the backoff is reset."""


Action = Union[
    Probe, ReadJournals, ReadOpenRuns, Stepped, Send, Write, Close, Commit, Seek, RecoverStore, Acknowledged, Retired, Forgot, Adopted, BackedOff, Recovered
]
NOTIFICATIONS = (Stepped, Acknowledged, Retired, Forgot, Adopted, BackedOff, Recovered)
"""Actions that report nothing back (and :class:`Seek`, performed at once)."""
