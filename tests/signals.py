"""Ctrl-C for a child process, whatever the test run inherited.

A shell without job control starts background jobs with SIGINT ignored, and an ignored
signal stays ignored across ``exec``: Python then installs no ``KeyboardInterrupt``
handler, so a test that sends SIGINT to a command would see it run on and exit 0 (a
clean-clone CI run started with ``… &`` from a script showed this). A user's terminal
delivers Ctrl-C with the default disposition; the tests' children start with it too.
"""

from __future__ import annotations

import signal


def ctrl_c_as_in_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts: SIGINT back to its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
