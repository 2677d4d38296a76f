"""Log levels that say what an operator must act on: known start-up transients are not errors.

aiokafka logs ``Group Coordinator Request failed: [Error 15]
GroupCoordinatorNotAvailableError`` at ERROR while a consumer looks up its
group's coordinator and the broker has not finished creating
``__consumer_offsets`` — every first start on a fresh broker, and harmless:
aiokafka retries every ``retry_backoff_ms`` and the join succeeds. An operator
reading ERROR there chases nothing (a fresh broker gave 36 such lines in 2 s).
:class:`TransientCoordinatorFilter` logs the first of them at INFO and the
repeats at DEBUG (dropped unless the logger is at DEBUG) — only while the
condition is young (:data:`GRACE_S`): a coordinator that stays unavailable
longer is a real problem and is logged at ERROR as aiokafka meant. Every other
record passes unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

COORDINATOR_LOGGER = "aiokafka.consumer.group_coordinator"
GRACE_S = 30.0
"""How long the coordinator may stay unavailable before it is an ERROR again."""


class TransientCoordinatorFilter(logging.Filter):
    """Demote ``GroupCoordinatorNotAvailableError`` lookups during the first :data:`GRACE_S` of an episode:
    the first to INFO, the repeats to DEBUG."""

    def __init__(self, grace_s: float = GRACE_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.grace_s = grace_s
        self.clock = clock
        self._since: float | None = None
        self._last: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and _is_coordinator_unavailable(record):
            now = self.clock()
            first = self._last is None or now - self._last > self.grace_s
            if first:
                self._since = now  # a new episode (the last one ended: no repeat for a while)
            self._last = now
            if self._since is not None and now - self._since <= self.grace_s:
                level = logging.INFO if first else logging.DEBUG
                record.levelno, record.levelname = level, logging.getLevelName(level)
                return first or logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _is_coordinator_unavailable(record: logging.LogRecord) -> bool:
    from aiokafka.errors import GroupCoordinatorNotAvailableError

    args = record.args if isinstance(record.args, tuple) else ()
    return any(isinstance(arg, GroupCoordinatorNotAvailableError) for arg in args)


def install() -> TransientCoordinatorFilter:
    """Attach the filter to aiokafka's coordinator logger (idempotent); returns the one installed."""
    logger = logging.getLogger(COORDINATOR_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, TransientCoordinatorFilter):
            return existing
    installed = TransientCoordinatorFilter()
    logger.addFilter(installed)
    return installed
