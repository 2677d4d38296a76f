"""Arguments a user gets wrong are one line, like every other mistake (exit 2); ``worker --help``
says what ``/metrics`` needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "reasonwire.workers.cli"]


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--provider", "openai-response", "x.jsonl"],
        ["ingest", "--provider", "claude", "--run-id", "r"],
        ["replay", "--provider", "nope"],
        ["translate"],
        ["topics", "apply", "--drain-timeout", "soon"],
    ],
)
def test_a_wrong_argument_is_one_line_naming_it_not_a_usage_block(argv: list[str]) -> None:
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"reasonwire {argv[0]}") and ": error: " in done.stderr and "usage:" not in done.stderr
    assert done.stderr.rstrip().endswith("--help)")


def test_a_wrong_grammar_names_the_grammars() -> None:
    done = subprocess.run([*CLI, "translate", "--provider", "openai-response", "x.jsonl"], capture_output=True, text=True, timeout=60)
    assert "invalid choice: 'openai-response'" in done.stderr and "'openai-responses'" in done.stderr


@pytest.mark.parametrize("kind", ["normalize", "replay"])
def test_worker_help_says_metrics_need_the_prometheus_exporter(kind: str) -> None:
    done = subprocess.run([*CLI, "worker", kind, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "/metrics" in text and "OTEL_METRICS_EXPORTER=prometheus" in text and "RW_HEALTH_HOST" in text
