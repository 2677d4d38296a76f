"""Every fenced shell and Python block of README.md and docs/ is either run by
tests/integration/test_docs_run.py or marked, on the line before its fence,
``<!-- not run: <reason> -->`` with a reason. What can be checked without services is checked
here: the markers, and that each block is valid shell or Python as written."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, Block, blocks, documents, stray_markers

ALL = [b for path in documents() for b in blocks(path)]


def test_the_documents_hold_blocks_that_run_and_blocks_marked_not_run() -> None:
    """The extraction finds both kinds (an extractor that found nothing would pass everything)."""
    assert any(b.not_run is None for b in ALL) and any(b.not_run for b in ALL)
    assert {"sh", "python"} <= {b.kind for b in ALL if b.not_run is None}


@pytest.mark.parametrize("block", [b for b in ALL if b.not_run is not None], ids=lambda b: b.where)
def test_a_block_marked_not_run_says_why(block: Block) -> None:
    assert block.not_run, f"{block.where}: `<!-- not run: -->` needs a reason after the colon"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_not_run_marker_is_on_the_line_before_a_shell_or_python_fence(path: Path) -> None:
    assert stray_markers(path) == [], f"{path.relative_to(ROOT)}: a not-run marker must be the line just before a ```sh/```bash/```python fence"


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "python"], ids=lambda b: b.where)
def test_python_blocks_are_python(block: Block) -> None:
    """A block that runs must be a module as written (no top-level ``await``); a block marked not
    run may be a fragment of a coroutine, but still valid Python."""
    flags = 0 if block.not_run is None else ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        compile(block.code, block.where, "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:
        pytest.fail(f"{block.where}: {exc.msg} (block line {exc.lineno})")


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "sh"], ids=lambda b: b.where)
def test_shell_blocks_are_shell(block: Block) -> None:
    done = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{block.where}: {done.stderr.strip()}"
