"""``python -m bench.scale``: throughput of 1, 2 and 4 normalizer workers in one group (docs/scaling.md).

The same drain measurement as ``make bench`` section 5 (:func:`bench.e2e.drain`: the workers
hold their partitions, a backlog is produced, the committed-offset slope after it is fully
produced is the throughput), for each worker count in ``--workers`` (default 1 2 4), on
``bench.e2e.PARTITIONS`` partitions, the worker as shipped. Writes
``bench/results/scale.json`` and prints one line per count. Needs ``KAFKA_BOOTSTRAP_SERVERS``
and ``REDIS_URL`` (``make bench-scale`` starts the local services).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from bench import e2e
from reasonwire.contracts.grammars import Grammar

RESULTS = Path(__file__).resolve().parent / "results"


async def measure(counts: list[int], records: int, kind: str) -> dict[str, Any]:
    bootstrap, redis_url = os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"]
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    grammars = [g.value for g in Grammar]
    created: list[str] = []
    out: dict[str, Any] = {"partitions": e2e.PARTITIONS, "records": records, "kind": kind, "load_before": os.getloadavg(), "runs": []}
    tag = f"s{int(time.time())}"
    try:
        for n in counts:
            stage = e2e.Stage(bootstrap, redis_url, f"scale{n}")
            created.extend(stage.all_topics())
            traffic = e2e.traffic(grammars, records, seed=40 + n, tag=f"{tag}-{n}")
            result = await e2e.drain(stage, kind, n, traffic.records, logs)
            out["runs"].append(result)
            print(f"{n} worker(s): {result['records_per_s']:.0f} raw records/s", flush=True)
    finally:
        await e2e.delete_topics(bootstrap, created)
        out["redis_keys_removed"] = await e2e.delete_bench_keys(redis_url)
    out["load_after"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--kind", default="worker", choices=["worker", "worker-no-telemetry"])
    args = parser.parse_args()
    result = asyncio.run(measure(args.workers, args.records, args.kind))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
