"""``python -m bench.redis_write``: a poll's Redis write, as the worker's CPU sees it.

The store writes each poll's journal entries (one ``HSET`` + ``EXPIRE`` per run) in one
atomic call. This compares, on a live Redis (``REDIS_URL``), the client-side CPU of that
write made two ways, in alternating rounds:

* ``pipeline`` — redis-py's ``MULTI``/``EXEC`` pipeline with the epoch read inside (the
  store's path on a Redis Cluster);
* ``script`` — :class:`reasonwire.workers.io.redis_script.ServerScript` with :data:`WRITE_OPS` (the
  store's path on one server): one ``EVALSHA``, hiredis-packed, one reply.

Figures are µs of this process's CPU (``time.process_time``) per call, median of the
rounds; the wall time per call is shown beside them. Redis's ``appendfsync`` is left as the
server has it. Keys are ``rw:bench:*`` and are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from reasonwire.workers.io.redis_script import WRITE_OPS, ServerScript, write_call
from reasonwire.workers.io.redis_slots import Op, queue

EPOCH = "rw:bench:epoch"


def _ops(runs: int, fields: int) -> list[Op]:
    value = b"x" * 300
    ops = []
    for i in range(runs):
        key = f"rw:bench:j:{{t}}:run{i}"
        ops += [Op("hset", (key,), {"mapping": {str(f): value for f in range(fields)}}), Op("expire", (key, 900))]
    return ops


async def _time(call: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await call()
    return 1e6 * (time.process_time() - cpu) / n, 1e6 * (time.perf_counter() - wall) / n


async def measure(url: str, runs: int, fields: int, rounds: int, calls: int) -> dict[str, tuple[float, float]]:
    redis = Redis.from_url(url)
    await redis.hset(EPOCH, "id", "bench")
    ops = _ops(runs, fields)
    script = ServerScript(redis, WRITE_OPS)

    async def pipeline() -> object:
        pipe = redis.pipeline(transaction=True)
        queue(pipe, ops)
        pipe.hget(EPOCH, "id")
        return await pipe.execute()

    async def scripted() -> object:
        return await script(*write_call(ops, EPOCH, "bench"))

    samples: dict[str, list[tuple[float, float]]] = {"pipeline": [], "script": []}
    try:
        for name, call in (("pipeline", pipeline), ("script", scripted)):
            await _time(call, 20)  # warm-up: connections, the script loaded
        for _ in range(rounds):
            for name, call in (("pipeline", pipeline), ("script", scripted)):
                samples[name].append(await _time(call, calls))
    finally:
        await redis.delete(EPOCH, *{op.args[0] for op in ops})
        await redis.aclose()
    return {name: (statistics.median(c for c, _ in s), statistics.median(w for _, w in s)) for name, s in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_write", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    if not url:
        print("python -m bench.redis_write: set REDIS_URL to a running Redis", file=sys.stderr)
        return 2
    for runs in (10, 80):
        figures = asyncio.run(measure(url, runs, 3, args.rounds, args.calls))
        line = ", ".join(f"{name} {cpu:.0f} µs CPU ({wall:.0f} µs wall)" for name, (cpu, wall) in figures.items())
        print(f"a poll touching {runs} runs ({2 * runs} commands), per call, median of {args.rounds} rounds: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
