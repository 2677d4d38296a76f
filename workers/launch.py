"""The ``reasonwire`` console script: quiet Ctrl-C from the first instant.

Importing the command line takes a second or more on a loaded machine; this module imports
nothing heavy, holds Ctrl-C (:mod:`reasonwire.workers.ops.interrupts`: the process ends at once
with status 130 and no output), then imports the command line, whose commands give SIGINT back
to Python once they start their real work.
"""

from __future__ import annotations

from reasonwire.workers.ops.interrupts import hold_interrupts


def main() -> int:
    hold_interrupts()
    from reasonwire.workers.cli import main as cli_main

    return cli_main()
