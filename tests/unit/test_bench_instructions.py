"""``bench.instructions``: a process's instructions counted between two moments, under callgrind.

The count is what ``python -m bench.ab --instructions`` judges two trees by, so it must follow
the work done in the window and nothing before it: twice the work, about twice the count.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import instructions
from bench.ab import instruction_lines

_CHILD = """
import sys
def unit():
    return sum(i * i for i in range(200))
print("ready", flush=True)
for line in sys.stdin:
    for _ in range(int(line)):
        unit()
    print("done", flush=True)
"""


def test_totals_reads_the_instructions_of_a_dump(tmp_path: Path) -> None:
    dump = tmp_path / "out.1"
    dump.write_text("version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=(1) main\n0 12\nsummary: 1234567\ntotals: 1234567\n")
    assert instructions.totals(dump) == 1234567


def test_a_file_without_totals_is_refused_with_its_name(tmp_path: Path) -> None:
    dump = tmp_path / "out.1"
    dump.write_text("not a dump\n")
    with pytest.raises(RuntimeError, match="out.1: no totals line"):
        instructions.totals(dump)


def test_the_ratio_is_per_round_against_the_first_kind() -> None:
    rounds = [{"instructions": {"a": 100.0, "b": 110.0}}, {"instructions": {"a": 200.0, "b": 200.0}}, {"instructions": {"a": 100.0, "b": 105.0}}]
    lines = instruction_lines(rounds, ["a", "b"])
    assert "a" in lines[0] and "÷" not in lines[0]
    assert "median 1.050 (1.000–1.100)" in lines[1]  # per round: 1.10, 1.00, 1.05 — not 155/133


@pytest.mark.skipif(instructions.available() is not None, reason=str(instructions.available()))
def test_the_count_follows_the_work_done_while_counting(tmp_path: Path) -> None:
    """Start-up is not counted; a window with twice the work counts about twice as much."""
    out = tmp_path / "child.callgrind"
    child = subprocess.Popen(
        [*instructions.wrapper(out), sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        counts = []
        for units in (200, 400):
            instructions.start(child.pid)
            child.stdin.write(f"{units}\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"
            counts.append(instructions.stop(child.pid, out))
    finally:
        child.kill()
        child.wait()
    assert counts[0] > 200 * 200  # at least an instruction per loop step
    assert 1.8 < counts[1] / counts[0] < 2.2, counts
