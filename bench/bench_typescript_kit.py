"""Benchmark of the TypeScript adapter kit (not a test): the gate's steps per second, kit against envreplica's own.

The same ``envreplica conformance`` run (the same derandomized examples: ``--profile ci`` unless
``--max-examples`` cuts it, variant ``seed``, tables compared through ``state`` after each step) is held against
two adapters:

* ``kit``: the seed's own ``project-env-replica.ts`` through ``adapters/typescript`` (Node, better-sqlite3,
  drizzle-orm, the kit's host);
* ``python``: ``envreplica adapter --impl sqlite --test-key --variant seed`` (the reference implementation).

The runs alternate over ``--repeats`` rounds (kit, python, kit, python, ...), so a load that comes and goes on the
machine touches both alike. Each run's figures are its own summary table (examples, steps, steps per second,
seconds). The table shows the median and range of each, and the ratio of the medians.

Run: ``.venv/bin/python bench/bench_typescript_kit.py --seed FILE [--repeats N] [--max-examples N]``
(``FILE``: the seed's ``project-env-replica.ts``, or ``ENVREPLICA_SEED_SOURCE``; the kit's packages installed).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"lockstep seed\s*│\s*(\w+)\s*│\s*([\d,]+)\s*│\s*([\d,]+)\s*│\s*([\d,]+)\s*│\s*([\d.]+)")


def run(adapter: str, max_examples: int | None) -> dict:
    argv = [sys.executable, "-m", "envreplica.cli.main", "conformance", "--adapter", adapter, "--variant", "seed",
            "--profile", "ci", "--out", str(ROOT / "out" / "bench-kit")]
    if max_examples:
        argv += ["--max-examples", str(max_examples)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    match = ROW.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"the run against {adapter!r} did not pass:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    verdict, examples, steps, rate, seconds = match.groups()
    assert "tables: compared table by table" in done.stdout, adapter
    return {"examples": int(examples.replace(",", "")), "steps": int(steps.replace(",", "")),
            "steps/s": int(rate.replace(",", "")), "seconds": float(seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", default=os.environ.get("ENVREPLICA_SEED_SOURCE"),
                        help="the seed's project-env-replica.ts (default: ENVREPLICA_SEED_SOURCE)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-examples", type=int, default=None, help="cut the ci profile's 800 examples")
    args = parser.parse_args()
    if not args.seed:
        parser.error("name the seed's file: --seed FILE (or set ENVREPLICA_SEED_SOURCE)")
    adapters = {
        "kit": shlex.join(["node", str(ROOT / "adapters" / "typescript" / "bin" / "envreplica-ts-adapter.js"),
                           "--source", args.seed]),
        "python": shlex.join([str(Path(sys.executable).parent / "envreplica"), "adapter", "--impl", "sqlite",
                              "--test-key", "--variant", "seed"]),
    }
    runs: dict[str, list[dict]] = {name: [] for name in adapters}
    for round_ in range(args.repeats):
        for name, adapter in adapters.items():
            runs[name].append(run(adapter, args.max_examples))
            print(f"round {round_ + 1}/{args.repeats} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    same = {(r["examples"], r["steps"]) for rs in runs.values() for r in rs}
    print(f"{platform.node()} ({os.cpu_count()} CPUs), node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}, "
          f"python {platform.python_version()}; the same run each time: {same}")
    print(f"{'adapter':8} {'steps/s (median, range)':28} {'seconds (median, range)':28}")
    medians = {}
    for name, rs in runs.items():
        rates = [r["steps/s"] for r in rs]
        secs = [r["seconds"] for r in rs]
        medians[name] = statistics.median(rates)
        print(f"{name:8} {statistics.median(rates):>6.0f} ({min(rates)}-{max(rates)}){'':14} "
              f"{statistics.median(secs):>6.1f} ({min(secs):.1f}-{max(secs):.1f})")
    print(f"kit / python steps per second: x{medians['kit'] / medians['python']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
