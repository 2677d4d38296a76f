"""deploy/services.sh and deploy/with-services.sh without starting a broker: cluster ids, strangers, spare ports.

Each of these runs the real scripts (bash) against real sockets; none needs Kafka or Redis.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "deploy" / "services.sh"
WITH_SERVICES = ROOT / "deploy" / "with-services.sh"
UUID_CHARS = re.compile(r"^[A-Za-z0-9_-]{22}$")


def bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash with services.sh sourced (functions only, no command)."""
    return subprocess.run(
        ["bash", "-c", f'source "{SERVICES}"\n{script}'],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a caller who names no services and a state dir of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "RW_STATE", "KEEP_SERVICES")}
    return {**env, "RW_STATE": str(tmp_path / "state"), **extra}


@pytest.fixture
def stranger() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that services.sh did not start (this test process holds it)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def spare_ports(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(["bash", str(SERVICES), "spare-ports"], capture_output=True, text=True, env=env, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


# ------------------------------------------------------------------ cluster id


def test_cluster_id_is_redrawn_when_a_draw_begins_with_a_dash(tmp_path: Path) -> None:
    """0xF8… encodes to '-…' in base64url: exactly the draw `kafka-storage format` took for an option."""
    dash_first = tmp_path / "dash"
    dash_first.write_bytes(b"\xf8" + bytes(15))
    assert base64.urlsafe_b64encode(dash_first.read_bytes()).startswith(b"-")
    counter = tmp_path / "draws"
    out = bash(
        f"""
        random_16_bytes() {{   # first draw begins with '-', later ones are random
            echo x >>"{counter}"
            if [[ $(wc -l <"{counter}") -eq 1 ]]; then cat "{dash_first}"; else head -c 16 /dev/urandom; fi
        }}
        kafka_cluster_id
        """
    )
    assert out.returncode == 0, out.stderr
    cluster_id = out.stdout.strip()
    assert UUID_CHARS.match(cluster_id) and not cluster_id.startswith("-")
    assert counter.read_text().count("x") >= 2, "the dash-first draw was not the one rejected"


def test_cluster_ids_never_begin_with_a_dash_over_many_draws() -> None:
    """500 draws: ~8 would begin with '-' if the generator did not redraw (P(none) ≈ 4e-4)."""
    out = bash("for i in $(seq 500); do kafka_cluster_id; done")
    assert out.returncode == 0, out.stderr
    ids = out.stdout.split()
    assert len(ids) == 500
    assert all(UUID_CHARS.match(i) for i in ids)
    assert not [i for i in ids if i.startswith("-")]
    assert len({i[0] for i in ids}) > 40, "the first character is not random any more"
    for i in ids[:50]:  # each is a 16-byte Kafka Uuid
        assert len(base64.urlsafe_b64decode(i + "==")) == 16


def test_format_passes_the_id_as_one_argument() -> None:
    """Belt and braces: `--cluster-id=<id>` cannot be split into an option and a value."""
    text = SERVICES.read_text()
    assert '"--cluster-id=$cluster_id"' in text
    assert not re.search(r"format -t ", text)


# ------------------------------------------------------------------ strangers


def test_up_refuses_a_redis_port_it_did_not_take(tmp_path: Path, stranger: int) -> None:
    env = clean_env(tmp_path, **{**spare_ports(clean_env(tmp_path)), "REDIS_PORT": str(stranger)})
    out = subprocess.run(["bash", str(SERVICES), "up"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1
    assert out.stdout == ""  # no env lines: nothing to eval into a caller's shell
    errors = [line for line in out.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1
    assert f"127.0.0.1:{stranger}" in errors[0] and "set REDIS_PORT" in errors[0]
    assert not (tmp_path / "state" / "redis" / "redis.pid").exists()


@pytest.mark.parametrize("variable", ["KAFKA_PORT", "KAFKA_CONTROLLER_PORT"])
def test_up_refuses_a_kafka_port_it_did_not_take_before_starting_anything(tmp_path: Path, stranger: int, variable: str) -> None:
    env = clean_env(tmp_path, **{**spare_ports(clean_env(tmp_path)), variable: str(stranger)})
    out = subprocess.run(["bash", str(SERVICES), "up"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1
    assert f"127.0.0.1:{stranger} is taken by a process this script did not start; set {variable}" in out.stderr
    assert "Redis: starting" not in out.stderr  # refused before Redis was started
    assert not (tmp_path / "state" / "kafka").exists()


def test_status_does_not_count_a_stranger_as_ours(tmp_path: Path, stranger: int) -> None:
    env = clean_env(tmp_path, REDIS_PORT=str(stranger))
    out = subprocess.run(["bash", str(SERVICES), "status", "redis"], capture_output=True, text=True, env=env)
    assert out.returncode == 3
    assert out.stdout.startswith("Redis  not ours:") and str(stranger) in out.stdout


def test_status_of_a_caller_supplied_service_is_up(tmp_path: Path) -> None:
    env = clean_env(tmp_path, REDIS_URL="redis://10.0.0.1:6379/0")
    out = subprocess.run(["bash", str(SERVICES), "status", "redis"], capture_output=True, text=True, env=env)
    assert (out.returncode, out.stdout.split()[:3]) == (0, ["Redis", "supplied", "by"])


def test_unknown_service_name_is_a_usage_error(tmp_path: Path) -> None:
    out = subprocess.run(["bash", str(SERVICES), "down", "zookeeper"], capture_output=True, text=True, env=clean_env(tmp_path))
    assert out.returncode == 2 and "unknown service 'zookeeper'" in out.stderr


def test_with_services_does_not_run_the_command_when_a_port_is_a_strangers(tmp_path: Path, stranger: int) -> None:
    marker = tmp_path / "ran"
    env = clean_env(tmp_path, **{**spare_ports(clean_env(tmp_path)), "KAFKA_PORT": str(stranger)})
    out = subprocess.run(["bash", str(WITH_SERVICES), "touch", str(marker)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1 and "set KAFKA_PORT" in out.stderr
    assert not marker.exists()


def test_with_services_uses_named_services_and_starts_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in clean_env(tmp_path).items() if k != "RW_STATE"}
    env |= {"KAFKA_BOOTSTRAP_SERVERS": "10.0.0.1:9092", "REDIS_URL": "redis://10.0.0.1:6379/0", "TMPDIR": str(tmp_path)}
    out = subprocess.run(
        ["bash", str(WITH_SERVICES), "bash", "-c", 'echo "$KAFKA_BOOTSTRAP_SERVERS $REDIS_URL"; exit 7'],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 7  # the command's own status
    assert out.stdout == "10.0.0.1:9092 redis://10.0.0.1:6379/0\n"
    assert list(tmp_path.iterdir()) == []  # no private state dir was made


# ------------------------------------------------------------------ spare ports


def test_spare_ports_are_distinct_free_and_outside_the_ephemeral_range(tmp_path: Path) -> None:
    ports = spare_ports(clean_env(tmp_path))
    assert list(ports) == ["KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "REDIS_PORT"]
    numbers = [int(p) for p in ports.values()]
    assert len(set(numbers)) == 3 and all(20000 <= p < 32768 for p in numbers)
    for port in numbers:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: the bind succeeds


def _steered_spare_port(candidates: list[int], extra: str = "") -> subprocess.CompletedProcess[str]:
    """spare_ports with the random picks replaced by ``candidates``, in order."""
    listing = " ".join(map(str, candidates))
    return bash(
        f"""
        picks=({listing}); n=0
        next_candidate_port() {{ CANDIDATE=${{picks[n]}}; n=$((n + 1)); }}
        {extra}
        spare_ports ONE TWO
        """
    )


def test_spare_ports_skip_a_listening_port(stranger: int, tmp_path: Path) -> None:
    free = [int(p) for p in spare_ports(clean_env(tmp_path)).values()]
    out = _steered_spare_port([stranger, free[0], free[0], free[1]])
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"ONE={free[0]}\nTWO={free[1]}\n"  # the stranger's port, then a repeat, skipped


def test_spare_ports_skip_a_port_the_kernel_lists_even_if_nothing_answers(stranger: int, tmp_path: Path) -> None:
    """The /proc/net/tcp check alone (connection probe disabled) keeps a used port out."""
    free = [int(p) for p in spare_ports(clean_env(tmp_path)).values()]
    out = _steered_spare_port([stranger, free[0], free[1]], extra="port_open() { return 1; }")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"ONE={free[0]}\nTWO={free[1]}\n"


def test_down_with_nothing_running_is_a_clean_no_op(tmp_path: Path) -> None:
    env = clean_env(tmp_path, **spare_ports(clean_env(tmp_path)))
    out = subprocess.run(["bash", str(SERVICES), "down"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Kafka: not running" in out.stderr and "Redis: not running" in out.stderr


# ------------------------------------------------------------------ topics and secrets


@pytest.mark.parametrize("script", ["services", "cluster"])
def test_the_broker_never_creates_a_topic_by_itself(tmp_path: Path, script: str) -> None:
    """A producer that writes before ``topics apply`` must not get reasoning.raw.v1 with the broker's
    default partitions: the server.properties each script writes (single node and cluster) say no."""
    if script == "services":
        out = bash("write_kafka_conf; cat \"$KAFKA_CONF\"", clean_env(tmp_path))
    else:
        cluster = ROOT / "deploy" / "cluster.sh"
        out = subprocess.run(["bash", "-c", f'source "{cluster}"\nkcluster_conf 1 3; cat "$KCLUSTER_DIR/node-1/server.properties"'],
                             capture_output=True, text=True, env=clean_env(tmp_path), timeout=60)
    assert out.returncode == 0, out.stderr
    settings = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line and not line.startswith("#"))
    assert settings["auto.create.topics.enable"] == "false"


SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize("url", [f"redis://:{SECRET}@10.0.0.1:6379/0", f"rediss://app:{SECRET}@cache.example:6380/2",
                                 f"redis://10.0.0.1:6379/0?password={SECRET}"])
def test_a_redis_password_is_never_printed(tmp_path: Path, url: str) -> None:
    """``up``, ``status`` and the progress line never echo the caller's REDIS_URL password:
    each shows it as ``…:***@…``; the URL itself stays in the
    caller's environment (with-services.sh hands it to its command unchanged)."""
    env = clean_env(tmp_path, REDIS_URL=url, KAFKA_BOOTSTRAP_SERVERS="10.0.0.1:9092")
    status = subprocess.run(["bash", str(SERVICES), "status", "redis"], capture_output=True, text=True, env=env, timeout=60)
    up = bash("redis_up; print_env", env)
    env.pop("RW_STATE")
    run = subprocess.run(["bash", str(WITH_SERVICES), "bash", "-c", 'test "$REDIS_URL" = "$0"', url],
                         capture_output=True, text=True, env={**env, "TMPDIR": str(tmp_path)}, timeout=60)
    for out in (status, up, run):
        assert out.returncode == 0, out.stderr
        assert SECRET not in out.stdout + out.stderr
    assert "***" in status.stdout and "***" in up.stderr
    assert "REDIS_URL=" not in up.stdout  # nothing to eval: the caller has it already
    assert up.stdout == "KAFKA_BOOTSTRAP_SERVERS=10.0.0.1:9092\n"


def test_a_redis_url_without_a_password_is_still_echoed(tmp_path: Path) -> None:
    env = clean_env(tmp_path, REDIS_URL="redis://10.0.0.1:6379/0", KAFKA_BOOTSTRAP_SERVERS="10.0.0.1:9092")
    out = bash("print_env", env)
    assert out.stdout == "KAFKA_BOOTSTRAP_SERVERS=10.0.0.1:9092\nREDIS_URL=redis://10.0.0.1:6379/0\n"
