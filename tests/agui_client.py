"""The conversation as the real ``@ag-ui/client`` 1.0 holds it (Node, ``tests/e2e_node/apply_runs.mjs``).

A test hands over the client's own messages and each run's AG-UI events (reasonwire's
translated stream, valid by construction); the reference client applies them through its
verifier and ``defaultApplyEvents`` and returns its ``messages`` — what a UI sends back as the
next ``RunAgentInput.messages``, after a failed run included. ``make e2e-deps`` installs Node and
the pinned packages; without them the test skips, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).resolve().parent / "e2e_node"


def node() -> str:
    """The node binary, with the pinned ``@ag-ui/client`` installed (else the test skips)."""
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node not installed: the @ag-ui/client history tests need Node.js 18+ (make e2e-deps)")
    if not (NODE_DIR / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.skip("tests/e2e_node/node_modules missing: run `make e2e-deps` (npm ci of the pinned @ag-ui/client)")
    return binary


def client_messages(steps: list[dict[str, Any]], *, thread_id: str = "thread-1") -> list[dict[str, Any]]:
    """The reference client's messages after ``steps``: ``{"add": message}`` (the client's own) or
    ``{"runId": …, "events": [...]}`` (a run applied, failed ones included)."""
    done = subprocess.run(
        [node(), "apply_runs.mjs"],
        cwd=NODE_DIR,
        input=json.dumps({"threadId": thread_id, "steps": steps}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    held = json.loads(done.stdout)
    return held["messages"]
