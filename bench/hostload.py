"""How busy the host was during a measurement *besides the benchmark itself* (the quiet-round rule).

Latency is judged only on rounds measured on a quiet host. "Quiet" is not the host's 1-minute
load average below 1: on a 2-core machine the benchmark alone keeps that average at 0.9–1.8 —
a round runs the harness (producer and reader), one or two consumers, the Kafka broker and
Redis, five busy processes — so that rule would judge no round at all, on an otherwise idle
host just as on a shared one (``bench.ab`` latency rounds at 2,700
records/s on a freshly booted host read 0.94 → 1.78 over five rounds, every one "loaded").
What the rule is for is the neighbours: other processes that take the cores the measured
ones need. So a round's *load* is measured as exactly that:

    neighbours' CPU = the host's busy CPU time (``/proc/stat``) − the CPU time of the
    benchmark's own processes (this process and its descendants, and whatever listens on
    the Kafka and Redis ports it uses, with their descendants) — over the round, in cores.

A process of the benchmark that exits during the round takes its CPU time with it and is
counted as a neighbour's: the error makes a round look busier, never quieter. The 1-minute
load average is still read at both ends and reported beside it, as context.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""user, nice, system, irq, softirq, steal in ``/proc/stat``'s ``cpu`` line (not idle, iowait;
guest time is already inside user)."""


def host_busy_s() -> float:
    """CPU seconds every core of the host has spent busy since boot."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields)) / os.sysconf("SC_CLK_TCK")


def service_ports() -> set[int]:
    """The Kafka and Redis ports this benchmark talks to (``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``)."""
    ports: set[int] = set()
    for server in os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").split(","):
        _, _, port = server.strip().rpartition(":")
        if port.isdigit():
            ports.add(int(port))
    redis = os.environ.get("REDIS_URL")
    if redis:
        try:
            ports.add(urlsplit(redis).port or 6379)
        except ValueError:
            pass
    return ports


def own_processes(ports: set[int]) -> dict[int, psutil.Process]:
    """This process, its descendants, and the processes listening on ``ports`` with theirs."""
    roots = [psutil.Process()]
    try:
        listening = {c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports and c.pid}
    except (psutil.AccessDenied, PermissionError):
        listening = set()
    for pid in listening:
        try:
            roots.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    found: dict[int, psutil.Process] = {}
    for root in roots:
        try:
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
        except psutil.NoSuchProcess:
            continue
    return found


def _cpu_s(process: psutil.Process) -> float | None:
    try:
        t = process.cpu_times()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    return t.user + t.system


@dataclass(frozen=True)
class HostLoad:
    """One measurement window."""

    neighbours: float
    """Cores the host's other processes kept busy, on average (what a round is judged quiet by)."""
    own: float
    """Cores the benchmark's own processes kept busy, on average."""
    load_start: float
    load_end: float
    """The 1-minute load average at the window's ends (context)."""

    def fields(self) -> dict[str, object]:
        """As a round's results record it: ``load`` (what the round is judged by) and the load average."""
        return {"load": self.neighbours, "load_average": (self.load_start, self.load_end)}

    def describe(self) -> str:
        return f"neighbours {self.neighbours:.2f} cores (the bench itself {self.own:.2f}; load average {self.load_start:.2f} → {self.load_end:.2f})"


class HostMeter:
    """``start()`` … ``stop()`` around a round: how busy the host was besides the benchmark."""

    def __init__(self, ports: set[int] | None = None) -> None:
        self.ports = service_ports() if ports is None else ports
        self._start: tuple[float, float, float, dict[int, tuple[psutil.Process, float]]] | None = None

    def start(self) -> None:
        own = {pid: (p, cpu) for pid, p in own_processes(self.ports).items() if (cpu := _cpu_s(p)) is not None}
        self._start = (time.monotonic(), host_busy_s(), os.getloadavg()[0], own)

    def stop(self) -> HostLoad:
        if self._start is None:
            raise RuntimeError("HostMeter.stop() before start()")
        began, busy_start, load_start, own_start = self._start
        now_own = own_processes(self.ports)
        own_s = 0.0
        for pid, p in now_own.items():
            cpu = _cpu_s(p)
            if cpu is None:
                continue
            before = own_start.get(pid)
            # a pid seen at both ends is the same process only if its CPU time did not go back
            own_s += cpu - before[1] if before is not None and cpu >= before[1] else cpu
        wall = max(time.monotonic() - began, 1e-6)
        busy = host_busy_s() - busy_start
        self._start = None
        return HostLoad(max(0.0, (busy - own_s) / wall), own_s / wall, load_start, os.getloadavg()[0])
