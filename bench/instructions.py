"""Instructions per record: a consumer run under Valgrind's callgrind, counted over each drain.

CPU time per record on this two-core host moves by ±15 % between rounds of the same code (the
host's speed drifts under it: in process, the same pass measured 15–25 µs per record within a
minute), so a change of a few percent takes dozens of alternating rounds to see. The number of
instructions a process executes for the same backlog barely moves: it does not depend on the
host's speed, only on the work (and a little on how the records fell into polls). This is the
figure ``python -m bench.ab --instructions`` reports beside the rates.

The consumer starts under ``valgrind --tool=callgrind --instr-atstart=no``: uninstrumented (about
five times slower) through start-up, group join and warm-up; each drain switches counting on
before its backlog is produced and reads the count once its last offset is committed
(``callgrind_control``: zero, instrumentation on, dump, off). Counted, the consumer runs 50–100×
slower, so keep backlogs small (``--records 3000``); every process's count is its own, threads
included (aiokafka's and OpenTelemetry's are idle in a drain). Timing figures of such a run mean
nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SLOWDOWN = 100
"""How much longer a counted drain may take than a plain one (its deadline is scaled by this)."""

SLOWDOWN_UNCOUNTED = 10
"""The same for start-up, the group join and the warm-up, run under callgrind but not counted."""


def available() -> str | None:
    """``None`` when valgrind and callgrind_control are on PATH, else what is missing."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    return None if not missing else f"{' and '.join(missing)} not found (apt-get install valgrind)"


def wrapper(out: Path) -> list[str]:
    """The command prefix that starts a consumer under callgrind, counting nothing yet; its dumps
    go to ``out.1``, ``out.2``, … (one per drain)."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", "--quiet"]


def start(pid: int) -> None:
    """Counting on, from zero (the process must be running: a stopped one never answers)."""
    _control("--zero", pid)
    _control("--instr=on", pid)


def stop(pid: int, out: Path) -> int:
    """Counting off; the instructions executed since :func:`start` (from the dump it writes)."""
    before = set(out.parent.glob(f"{out.name}.*"))
    _control("--dump", pid)
    _control("--instr=off", pid)
    dumps = sorted(set(out.parent.glob(f"{out.name}.*")) - before, key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump for pid {pid} ({out}.*)")
    return totals(dumps[-1])


def totals(dump: Path) -> int:
    """The ``totals:`` line of a callgrind dump: instructions executed (event ``Ir``)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line (not a callgrind dump?)")


def _control(command: str, pid: int) -> None:
    done = subprocess.run(["callgrind_control", command, str(pid)], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or "OK" not in done.stdout:
        raise RuntimeError(f"callgrind_control {command} {pid}: {(done.stdout + done.stderr).strip()[-300:]}")
