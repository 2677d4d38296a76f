"""``python -m fuzz`` (``make fuzz``): the campaign over every grammar, then the scaling probe.

Prints per grammar: input events, AG-UI events out, streams, crashes,
violations, safety-net hits, the slowest stream and the peak RSS of the worker
processes (``resource.getrusage``); then one minimized case per new finding
signature, written to ``fuzz/findings/``. Exit status 1 if anything was found
or the scaling ratio is over target.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import sys
import time
from pathlib import Path

from fuzz import scaling
from fuzz.campaign import Tally, fuzz_grammar
from fuzz.cases import write_case
from fuzz.corpus import GRAMMARS, seeds
from fuzz.minimize import minimize

FINDINGS = Path(__file__).resolve().parent / "findings"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="input events per grammar (default 1,000,000)")
    p.add_argument("--seed", type=int, default=18, help="campaign seed (default 18)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--grammar", action="append", choices=GRAMMARS, help="only this grammar (repeatable)")
    p.add_argument("--findings", type=Path, default=FINDINGS, help="where minimized cases go")
    p.add_argument("--no-scaling", action="store_true", help="skip the scaling probe")
    return p.parse_args(argv)


def _report(t: Tally) -> str:
    return (
        f"{t.grammar:24s} events {t.events:>10,}  out {t.events_out:>10,}  streams {t.streams:>8,}  "
        f"crashes {t.crashes}  violations {t.violations}  safety-net {t.safety_net}  "
        f"slowest {t.slowest_s * 1000:6.1f} ms ({t.slowest_case})  peak RSS {t.peak_rss_kib / 1024:.0f} MiB  "
        f"{t.seconds:6.1f} s wall, {t.cpu_s:6.1f} s CPU"
    )


def _write_findings(t: Tally, where: Path) -> None:
    for sig, (finding, case) in sorted(t.examples.items()):
        small = minimize(case, sig)
        name = re.sub(r"[^A-Za-z0-9]+", "_", sig).strip("_")[:90]
        path = where / f"{t.grammar}__{name}.json"
        write_case(path, small, signature=sig, detail=finding.detail, hits=t.hits[sig])
        # the signature names stage, exception type and line; the exception's text (which may quote
        # a signature or encrypted value of the input) stays in the finding's file, not the console (P8)
        print(f"    {t.hits[sig]:7,} x {sig}\n            -> {path} ({len(small.lines)} lines; the exception text is in the file)")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    grammars = args.grammar or list(GRAMMARS)
    for g in grammars:
        seeds(g)  # fail fast on a missing corpus
    print(f"fuzz: seed {args.seed}, {args.events:,} input events per grammar, {args.workers} worker process(es)")
    started = time.perf_counter()
    found = 0
    for grammar in grammars:
        # a fresh pool per grammar, so each grammar's peak RSS is its own
        pool = multiprocessing.get_context("fork").Pool(args.workers) if args.workers > 1 else None
        try:
            tally = fuzz_grammar(grammar, events=args.events, seed=args.seed, workers=args.workers, pool=pool)
        finally:
            if pool is not None:
                pool.close()
                pool.join()
        print(_report(tally), flush=True)
        if tally.examples:
            found += len(tally.examples)
            _write_findings(tally, args.findings)
    print(f"fuzz: {len(grammars)} grammar(s) in {time.perf_counter() - started:.0f} s, {found} finding signature(s)")
    status = 1 if found else 0
    if not args.no_scaling:
        status |= scaling.main()
    return status


if __name__ == "__main__":
    sys.exit(main())
