"""How every command logs: one format (text or JSON lines), one level, and levels that say
what an operator must act on.

:func:`configure` (``RW_LOG_FORMAT``, ``RW_LOG_LEVEL``; :class:`~reasonwire.workers.ops.settings.LogSettings`)
gives the root logger one handler on stderr. Every library's records go through it:
FastStream's loggers write ANSI colours even to a file or a pipe (its handlers are made with
``use_colors=True``), so theirs are replaced by :class:`_ToRoot`; uvicorn is started with no
logging configuration of its own (``workers/services/gateway``), so its records propagate here. aiokafka's
group-coordinator messages (discovered coordinator, joined group, revoking, assigned — most of
a worker's log at start and at every rebalance) are DEBUG: shown only with ``RW_LOG_LEVEL=DEBUG``.

Known start-up transients are not errors.

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

import json
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reasonwire.workers.ops.settings import LogSettings

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


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CHATTY = ("aiokafka.consumer.group_coordinator", "aiokafka.consumer.subscription_state")
"""aiokafka loggers whose INFO records are membership bookkeeping: below INFO unless DEBUG is asked."""
FASTSTREAM = ("faststream", "faststream.access.kafka")
"""FastStream's loggers that come with a colouring handler of their own."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, and
    ``exception`` (the formatted traceback) when there is one — what log collectors parse. A
    record with ``rw_fields`` (``extra=``) adds them as keys (the gateway's access log)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "rw_fields", None)
        if isinstance(fields, dict):  # a structured line (the gateway's access log): its fields as keys
            entry.update({k: v for k, v in fields.items() if k not in entry})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _ToRoot(logging.StreamHandler):  # type: ignore[type-arg]
    """Forwards a library logger's records to the root handlers (one format, one stream).

    It is a ``StreamHandler`` on ``sys.stdout`` only so that FastStream, which adds its colouring
    handler unless it finds one on stdout, adds none; it never writes there itself."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger().handle(record)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever ``sys.stderr`` is when a record is written (a test harness may swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def configure(settings: LogSettings, stream: object = None) -> logging.Handler:
    """Log as ``settings`` say, to ``stream`` (default stderr), for the whole process; returns the
    handler. Called once by each command before any client is made; calling again replaces it."""
    level = logging.getLevelName(settings.log_level)
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()  # type: ignore[arg-type]
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.setLevel(level)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_reasonwire", False)]:
        root.removeHandler(old)
    handler._reasonwire = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)
    for name in FASTSTREAM:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]:
            logger.removeHandler(old)
        logger.addHandler(_ToRoot())
    install()
    return handler
