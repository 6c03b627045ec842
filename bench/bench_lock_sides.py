"""Benchmark of the lock lockstep's two built-in real sides (not a test): threads of the harness beside processes
forked from it.

Runs the lock lockstep (``conformance.lock.run``) at one budget (``--examples``, derandomized: both sides play the
same examples and moves) on each side of ``conformance.lock.sides.Side`` in turn, ``--repeats`` rounds (the sides
alternating, so that a busy machine's load falls on both), and prints each run's examples, moves, seconds,
examples/s and moves/s, then each side's median seconds and the processes' cost as a multiple of the threads'.
Every run must pass (a divergence is printed and the exit status is 1). Seconds are figures, never verdicts.

Run: ``.venv/bin/python bench/bench_lock_sides.py [--examples N] [--repeats R]`` (the gate's budget is 200).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from envreplica.conformance.lock.run import run_lock_lockstep
from envreplica.conformance.lock.sides import Side


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    seconds: dict[Side, list[float]] = {side: [] for side in Side}
    ok = True
    print(f"{'side':<11}{'examples':>9}{'moves':>8}{'seconds':>9}{'examples/s':>12}{'moves/s':>9}")
    for _ in range(args.repeats):
        for side in Side:
            report = run_lock_lockstep(args.examples, side=side.factory)
            seconds[side].append(report.seconds)
            print(f"{side.value:<11}{report.examples:>9}{report.moves:>8}{report.seconds:>9.2f}"
                  f"{report.examples / report.seconds:>12.1f}{report.moves_per_second:>9.0f}"
                  f"  {'pass' if report.passed else 'FAIL'}", flush=True)
            if not report.passed:
                ok = False
                print("   ", "\n    ".join(report.trace(report.divergence.cfg if report.divergence else None)))
    medians = {side: statistics.median(s) for side, s in seconds.items()}
    for side, median in medians.items():
        print(f"median {side.value}: {median:.2f} s")
    print(f"processes / threads: {medians[Side.PROCESSES] / medians[Side.THREADS]:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
