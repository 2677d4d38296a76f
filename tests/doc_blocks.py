"""The fenced shell and Python blocks of README.md and docs/, and how a reader runs them.

Every ```sh / ```bash / ```python block of those documents is executed by
tests/integration/test_docs_run.py, unless the line just before its fence is
``<!-- not run: <reason> -->``. A document is run as a reader follows it: top to bottom, its
Python blocks in one interpreter (a later block may use what an earlier one defined), its shell
blocks one after another in one working folder (a later command may read what an earlier one
wrote). Run as a script, this module is that reader: ``python tests/doc_blocks.py PLAN.json``
runs the blocks the plan lists and stops at the first that fails, naming it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
"""Fence info string → how the block runs; any other language (or none) is text, not run."""
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: where it is, how it runs, its code, and why it is not run (if marked)."""

    path: Path
    line: int  # the fence's line, 1-based
    kind: str  # "sh" or "python"
    code: str
    not_run: str | None  # the marker's reason; "" for a marker without one (refused by the tests)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(path: Path) -> Iterator[Block]:
    """The shell and Python blocks of ``path``, in document order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    n = 0
    while n < len(lines):
        opening = FENCE.match(lines[n])
        if not opening:
            n += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = n + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        kind = RUN_LANGUAGES.get(opening["info"].lower())
        if kind is not None:
            marker = NOT_RUN.match(lines[n - 1].strip()) if n else None
            code = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[n + 1 : end]) + "\n"
            yield Block(path, n + 1, kind, code, marker["reason"] if marker else None)
        n = end + 1


def stray_markers(path: Path) -> list[int]:
    """Lines holding a not-run marker that is not right before a shell or Python fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    marked = {b.line - 1 for b in blocks(path) if b.not_run is not None}
    return [n + 1 for n, line in enumerate(lines) if NOT_RUN.match(line.strip()) and n + 1 not in marked]


def run_plan(plan: list[dict[str, str]]) -> int:
    """Run each block in order (Python in this interpreter, sharing one namespace; shell with
    ``bash -e``); the first failure prints its place and ends the run with status 1."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in plan:
        print(f"--- {block['where']}", flush=True)
        if block["kind"] == "python":
            try:
                exec(compile(block["code"], block["where"], "exec"), namespace)  # noqa: S102 — the documented code, run as written
            except BaseException:  # noqa: BLE001 — whatever the block raised is the finding
                traceback.print_exc()
                print(f"FAILED {block['where']}", flush=True)
                return 1
            sys.stdout.flush()
        else:
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["code"]], check=False)
            if done.returncode:
                print(f"FAILED {block['where']}: exit status {done.returncode}", flush=True)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_plan(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
