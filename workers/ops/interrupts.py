"""Ctrl-C during start-up: quiet from the first instant, given back to Python once a command starts.

Importing the command line (pydantic models, aiokafka, the translators) takes a second or more
on a loaded machine, and a ``KeyboardInterrupt`` raised anywhere in there printed a traceback
from deep inside an import (or pydantic turned it into a ``SchemaError``, exit 1). So the console
script (:mod:`reasonwire.workers.launch`) calls :func:`hold_interrupts` before any heavy import:
Ctrl-C ends the process at once with status 130 and no output. Once a command has checked its
settings and services and starts its real work, :func:`release_interrupts` gives SIGINT back to
Python (``KeyboardInterrupt``), which the commands handle themselves: a worker or the gateway
shuts down cleanly, ``ingest`` publishes ``abort``, ``translate`` flushes what it wrote.

It lives here, below every command, because both the launcher and the commands use it: the
launcher imports the command line, so the commands cannot import the launcher.
"""

from __future__ import annotations

import os
import signal
from types import FrameType


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    os._exit(130)  # nothing to clean up yet: nothing was started, nothing written


def hold_interrupts() -> None:
    """Ctrl-C ends the process at once (130), quietly — unless SIGINT is ignored (a background job)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_interrupted)


def release_interrupts() -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` again (only if :func:`hold_interrupts` had changed it)."""
    if signal.getsignal(signal.SIGINT) is _exit_interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)
