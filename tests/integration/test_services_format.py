"""deploy/services.sh formats Kafka's storage every time: the real StorageTool, a '-' draw forced.

Runs the broker's own ``kafka.tools.StorageTool`` from the jars ``services.sh`` caches (no
broker is started). Skipped where those jars are absent (the testcontainers path).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "deploy" / "services.sh"
KAFKA_HOME = Path(os.environ.get("RW_CACHE", Path.home() / ".cache" / "reasonwire")) / "kafka-4.1.2"

pytestmark = pytest.mark.skipif(not (KAFKA_HOME / ".complete").exists(), reason="no cached Kafka jars (deploy/services.sh up makes them)")


def _format(tmp_path: Path, first_draw: bytes, script: str = "kafka_format") -> subprocess.CompletedProcess[str]:
    draw = tmp_path / "draw"
    draw.write_bytes(first_draw)
    counter = tmp_path / "draws"
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")}
    env |= {"RW_STATE": str(tmp_path / "state"), "KAFKA_PORT": "1", "KAFKA_CONTROLLER_PORT": "2", "KAFKA_HEAP_OPTS": "-Xmx256m"}
    return subprocess.run(
        [
            "bash",
            "-c",
            f"""
            source "{SERVICES}"
            random_16_bytes() {{
                echo x >>"{counter}"
                if [[ $(wc -l <"{counter}") -eq 1 ]]; then cat "{draw}"; else head -c 16 /dev/urandom; fi
            }}
            write_kafka_conf
            {script}
            """,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def test_format_succeeds_when_the_first_draw_begins_with_a_dash(tmp_path: Path) -> None:
    """0xF8… is '-…' in base64url: the 1-in-64 start that failed with "expected one argument"."""
    out = _format(tmp_path, b"\xf8" + bytes(15))
    assert out.returncode == 0, out.stderr[-2000:]
    meta = (tmp_path / "state" / "kafka" / "data" / "meta.properties").read_text()
    cluster_id = next(line.split("=", 1)[1] for line in meta.splitlines() if line.startswith("cluster.id="))
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
    assert (tmp_path / "draws").read_text().count("x") == 2  # the '-' draw was thrown away, not passed on


def test_the_old_invocation_with_a_dash_id_is_what_failed(tmp_path: Path) -> None:
    """Why the redraw matters: `format -t -<id>` is refused by the tool's argument parser."""
    out = _format(
        tmp_path,
        bytes(16),
        script='kafka_cmd; "${KAFKA_CMD[@]}" kafka.tools.StorageTool format -t -ABCDEFGHIJKLMNOPQRSTU -c "$KAFKA_CONF" --standalone',
    )
    assert out.returncode != 0
    assert "expected one argument" in out.stderr + out.stdout
