"""The README's in-process library snippets run as written (translate, then replay, no Kafka).

They are taken from README.md itself, so the documentation cannot drift from the code:
every ```python block of the "In-process library" section, in order, in one fresh
interpreter started from the repository root, as a user would paste them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## In-process library"


def library_snippets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start : end if end != -1 else None], re.S)


def expected_outputs(snippet: str) -> list[str]:
    """What each print is documented to show: the comment on (or right after) the print line."""
    lines = snippet.splitlines()
    out = []
    for n, line in enumerate(lines):
        if line.startswith("print("):
            comment = line.partition("  # ")[2] or lines[n + 1].removeprefix("# ")
            out.append(comment.split(":")[0].strip())
    return out


def test_readme_has_a_translate_and_a_replay_snippet_of_about_ten_lines() -> None:
    snippets = library_snippets()
    assert len(snippets) == 2
    assert "translator_for(" in snippets[0] and "replay(" in snippets[1]
    assert all(len(s.strip().splitlines()) <= 16 for s in snippets)


def test_readme_library_snippets_run_and_print_what_they_say() -> None:
    snippets = library_snippets()
    out = subprocess.run(
        [sys.executable, "-c", "\n".join(snippets)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    printed = out.stdout.splitlines()
    expected = [e for s in snippets for e in expected_outputs(s)]
    assert printed == expected
