"""The chaos run's own Kafka and Redis (``deploy/services.sh`` on their own ports and state dir),
the worker processes, and the faults: SIGKILL, SIGSTOP / SIGCONT (a paused worker), Redis
shutdown with / without save, with its files gone or replaced by an older copy, Redis
configuration changes (``appendonly no``, an evicting policy), broker restart. Only processes
this harness started are signalled, by pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "deploy" / "services.sh"
CLUSTER = ROOT / "deploy" / "cluster.sh"


@dataclass
class Services:
    state: Path
    kafka_port: int
    redis_port: int
    log: Path
    kafka_brokers: int = 1
    """1: one KRaft node (``services.sh``). More: that many brokers (``deploy/cluster.sh``, RF 3,
    ``min.insync.replicas`` 2) on ``kafka_port + 20 …`` — the cluster scenario of ``make chaos``."""

    @property
    def env(self) -> dict[str, str]:
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")},
            "RW_STATE": str(self.state),
            "KAFKA_PORT": str(self.kafka_port),
            "KAFKA_CONTROLLER_PORT": str(self.kafka_port + 1),
            "REDIS_PORT": str(self.redis_port),
        }
        if self.kafka_brokers > 1:
            env |= {"KAFKA_CLUSTER_PORT": str(self.kafka_port + 20), "RW_REPLICATION_FACTOR": str(min(3, self.kafka_brokers))}
        return env

    @property
    def bootstrap(self) -> str:
        if self.kafka_brokers > 1:
            return ",".join(f"127.0.0.1:{self.kafka_port + 20 + i}" for i in range(self.kafka_brokers))
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def up(self) -> None:
        cluster = self.kafka_brokers > 1  # Redis from services.sh (told the broker is supplied), the brokers from cluster.sh
        env = {**self.env, "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap} if cluster else self.env
        with self.log.open("ab") as out:
            subprocess.run(["bash", str(SERVICES), "up"], env=env, stdout=subprocess.DEVNULL, stderr=out, check=True, cwd=ROOT)
            if cluster:
                subprocess.run(["bash", str(CLUSTER), "up", "--kafka-brokers", str(self.kafka_brokers)],
                               env=self.env, stdout=subprocess.DEVNULL, stderr=out, check=True, cwd=ROOT)

    def down(self) -> None:
        with self.log.open("ab") as out:
            if self.kafka_brokers > 1:
                subprocess.run(["bash", str(CLUSTER), "down"], env=self.env, stdout=subprocess.DEVNULL, stderr=out, check=False, cwd=ROOT)
            subprocess.run(["bash", str(SERVICES), "down"], env=self.env, stdout=subprocess.DEVNULL, stderr=out, check=False, cwd=ROOT)

    def broker(self, action: str, node: int) -> None:
        """``kill-kafka N`` (SIGKILL) or ``start-kafka N`` on the brokers of ``deploy/cluster.sh``."""
        with self.log.open("ab") as out:
            subprocess.run(["bash", str(CLUSTER), action, str(node)], env=self.env, stdout=subprocess.DEVNULL, stderr=out, check=True, cwd=ROOT)

    def wipe_redis(self) -> None:
        shutil.rmtree(self.state / "redis", ignore_errors=True)

    def redis_cli(self, *args: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(self.redis_port), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    def redis_pid(self) -> int | None:
        path = self.state / "redis" / "redis.pid"
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    def redis_stop(self, mode: str) -> None:
        """``SHUTDOWN SAVE`` / ``SHUTDOWN NOSAVE``; ``lose``: NOSAVE and its files deleted (a Redis
        without persistence, or a failover to an empty replica)."""
        pid = self.redis_pid()
        self.redis_cli("SHUTDOWN", "SAVE" if mode == "save" else "NOSAVE")
        _wait_gone(pid)
        if mode == "lose":
            for name in ("appendonlydir", "dump.rdb"):
                target = self.state / "redis" / name
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)

    def redis_snapshot(self, dest: Path) -> None:
        """Copy Redis's files as they are now (``appendfsync always``: the AOF on disk is the data):
        the "backup" or lagging copy that :meth:`redis_restore` brings back later."""
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in ("appendonlydir", "dump.rdb"):
            source = self.state / "redis" / name
            if source.is_dir():
                shutil.copytree(source, dest / name)
            elif source.exists():
                shutil.copy2(source, dest / name)

    def redis_restore(self, source: Path) -> None:
        """Redis stopped (``SHUTDOWN NOSAVE``) and its files replaced by an older copy (a backup
        restored, an AOF from an hour ago, a lagging replica promoted); started again by ``up``."""
        self.redis_stop("lose")
        for item in source.iterdir():
            target = self.state / "redis" / item.name
            shutil.copytree(item, target) if item.is_dir() else shutil.copy2(item, target)

    def kafka_stop(self) -> None:
        """A graceful broker stop (SIGTERM), keeping its data."""
        path = self.state / "kafka" / "kafka.pid"
        pid = int(path.read_text().strip())
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid, timeout=60)


def _wait_gone(pid: int | None, timeout: float = 30) -> None:
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


FAKETIME_LIBRARIES = (Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"), Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
                      Path("/usr/lib/faketime/libfaketime.so.1"), Path("/usr/local/lib/faketime/libfaketime.so.1"))


def faketime_library() -> Path:
    """libfaketime (Debian package ``faketime``), installed with apt-get when missing (root) —
    the clock-jump scenario runs a worker under it."""
    for path in FAKETIME_LIBRARIES:
        if path.exists():
            return path
    if shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "faketime"], check=False, capture_output=True)
        for path in FAKETIME_LIBRARIES:
            if path.exists():
                return path
    raise RuntimeError("libfaketime is missing: install the Debian package faketime (apt-get install faketime)")


@dataclass
class Worker:
    """``reasonwire worker normalize`` (or ``replay``) as its own process, logging to a file."""

    name: str
    services: Services
    group: str
    log_dir: Path
    health_port: int
    tree: Path = ROOT
    """Where the worker's code comes from (``--worker-tree``: e.g. an export of an older commit, for a before/after)."""
    kind: str = "normalize"
    timeout_s: float = 30.0
    """``RW_INACTIVITY_TIMEOUT_S`` of the next start (30 s: shorter than the broker restart, so the
    expiry guard is exercised; the paused-worker scenarios use 4 s and 12 s)."""
    proc: subprocess.Popen[bytes] | None = None
    clock_file: Path | None = None
    """Start under libfaketime with its offset read from this file (``+0``; a fault writes ``+1h``):
    the worker's wall and monotonic clocks jump when the file changes (:func:`faketime_library`)."""
    logs: list[Path] = field(default_factory=list)
    starts: int = 0
    cpu_done: float = 0.0
    """CPU seconds of this worker's earlier processes (read before each was killed or stopped)."""

    def start(self) -> None:
        self.starts += 1
        log = self.log_dir / f"{self.name}.{self.starts}.log"
        self.logs.append(log)
        env = {
            **self.services.env,
            "KAFKA_BOOTSTRAP_SERVERS": self.services.bootstrap,
            "REDIS_URL": self.services.redis_url,
            "RW_GROUP_ID": self.group,
            "RW_REPLAY_GROUP_ID": f"{self.group}-replay",
            "RW_PARTITIONS": "8",
            "RW_CREATE_TOPICS": "true",  # the chaos run's own broker: the worker creates what the plan lists
            "RW_INACTIVITY_TIMEOUT_S": f"{self.timeout_s:g}",
            "RW_HEALTH_PORT": str(self.health_port),
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
        }
        if self.clock_file is not None:
            env.update({"LD_PRELOAD": str(faketime_library()), "FAKETIME_TIMESTAMP_FILE": str(self.clock_file), "FAKETIME_CACHE_DURATION": "1"})
        out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reasonwire.workers.cli", "worker", self.kind], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.tree
        )
        out.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_assigned(self, timeout: float = 90) -> bool:
        deadline = time.monotonic() + timeout
        log = self.logs[-1]
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if "assigned to partitions" in text:
                return True
            if not self.alive:
                return False
            time.sleep(0.2)
        return False

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.cpu_done += self._cpu_now()
            self.proc.send_signal(signal.SIGCONT)  # a paused worker too
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)  # a paused worker too
            cpu = self._cpu_now()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
            else:
                self.cpu_done += cpu

    def pause(self) -> None:
        """SIGSTOP: a GC or VM pause, a debugger — the process holds its state and its clock runs on."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def _cpu_now(self) -> float:
        """user + system CPU of the current process so far (from /proc; 0 if it is gone)."""
        if self.proc is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        """user + system CPU of the worker process so far (from /proc)."""
        return self._cpu_now() if self.alive else 0.0

    def cpu_total(self) -> float:
        """CPU seconds of every process of this worker so far: a scenario's CPU across restarts."""
        return self.cpu_done + (self._cpu_now() if self.alive else 0.0)

    def log_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.logs if p.exists())
