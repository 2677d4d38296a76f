"""Start-up noise: aiokafka's GroupCoordinatorNotAvailableError during a group join is
a retried transient, logged at INFO while young; every other error keeps its level."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from aiokafka.errors import GroupCoordinatorNotAvailableError, NodeNotReadyError

from reasonwire.workers.ops.logs import COORDINATOR_LOGGER, GRACE_S, TransientCoordinatorFilter, install


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.levels: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.levels.append((record.levelname, record.getMessage()))


@pytest.fixture
def coordinator_log() -> Iterator[tuple[logging.Logger, Seen, Clock]]:
    """aiokafka's own coordinator logger with a fresh filter on a fake clock, and what a handler sees."""
    logger = logging.getLogger(COORDINATOR_LOGGER)
    clock = Clock()
    filt = TransientCoordinatorFilter(clock=clock)
    seen = Seen()
    saved = logger.filters[:], logger.level, logger.propagate
    logger.filters = [filt]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(seen)
    yield logger, seen, clock
    logger.removeHandler(seen)
    logger.filters, logger.level, logger.propagate = saved[0], saved[1], saved[2]


def _lookup_failed(logger: logging.Logger, err: Exception) -> None:
    """Exactly the call aiokafka makes in GroupCoordinator.ensure_coordinator_known."""
    logger.error("Group Coordinator Request failed: %s", err)


def test_coordinator_not_available_at_start_is_info_once_not_error(coordinator_log: tuple[logging.Logger, Seen, Clock]) -> None:
    logger, seen, clock = coordinator_log
    logger.setLevel(logging.INFO)  # as the worker runs
    for _ in range(36):  # aiokafka retries every retry_backoff_ms: 36 lines on a fresh broker
        _lookup_failed(logger, GroupCoordinatorNotAvailableError())
        clock.now += 0.05
    assert [level for level, _ in seen.levels] == ["INFO"]
    assert "GroupCoordinatorNotAvailableError" in seen.levels[0][1]  # demoted, not hidden


def test_the_repeats_are_there_at_debug(coordinator_log: tuple[logging.Logger, Seen, Clock]) -> None:
    logger, seen, clock = coordinator_log
    for _ in range(3):
        _lookup_failed(logger, GroupCoordinatorNotAvailableError())
        clock.now += 0.1
    assert [level for level, _ in seen.levels] == ["INFO", "DEBUG", "DEBUG"]


def test_other_errors_keep_their_level(coordinator_log: tuple[logging.Logger, Seen, Clock]) -> None:
    logger, seen, _ = coordinator_log
    _lookup_failed(logger, NodeNotReadyError())
    logger.error("Heartbeat session expired - marking coordinator dead")
    logger.error("LeaveGroup request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError")  # text only: not the error
    assert [level for level, _ in seen.levels] == ["ERROR", "ERROR", "ERROR"]


def test_a_coordinator_that_stays_unavailable_is_an_error_again(coordinator_log: tuple[logging.Logger, Seen, Clock]) -> None:
    logger, seen, clock = coordinator_log
    _lookup_failed(logger, GroupCoordinatorNotAvailableError())
    while clock.now < 1000.0 + GRACE_S + 1:
        clock.now += 1
        _lookup_failed(logger, GroupCoordinatorNotAvailableError())
    assert seen.levels[0][0] == "INFO" and seen.levels[-1][0] == "ERROR"


def test_a_later_episode_gets_its_grace_again(coordinator_log: tuple[logging.Logger, Seen, Clock]) -> None:
    logger, seen, clock = coordinator_log
    _lookup_failed(logger, GroupCoordinatorNotAvailableError())
    clock.now += GRACE_S * 10  # the broker restarted much later
    _lookup_failed(logger, GroupCoordinatorNotAvailableError())
    assert [level for level, _ in seen.levels] == ["INFO", "INFO"]  # each the first of its episode


def test_every_worker_command_installs_the_filter_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed by the CLI once the settings are read, before any service is contacted: any worker
    process started from it has it (the log settings are settings too)."""
    import socket

    from reasonwire.workers import cli

    logger = logging.getLogger(COORDINATOR_LOGGER)
    monkeypatch.setattr(logger, "filters", [])
    with socket.socket() as nowhere:  # bound, not listening: Redis "down", so it stops right after the install
        nowhere.bind(("127.0.0.1", 0))
        monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{nowhere.getsockname()[1]}/0")
        assert cli.main(["worker", "normalize"]) == 3
    assert any(isinstance(f, TransientCoordinatorFilter) for f in logger.filters)
    assert install() is next(f for f in logger.filters if isinstance(f, TransientCoordinatorFilter))  # idempotent
