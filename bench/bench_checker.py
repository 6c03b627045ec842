"""Benchmark of the model checker (not a test): the fast search beside the one it replaced, in one run.

For each bound of a suite (``--bounds``, default ``default``), runs
``checker.reference.check_reference`` (the search before issue 10: full
states in the visited set, every property lifted to worlds and evaluated on
every step) and ``checker.bfs.check`` (fingerprints, properties on the
replica view, step properties only where they can fail), interleaved
``--repeat`` times, and prints distinct states, transitions, seconds,
states/s and transitions/s of each, the speed-up, and TLC's estimate of a
fingerprint collision. The two must agree on the state and transition
counts and on every verdict (a difference is printed and the exit code is 1).

Run: ``.venv/bin/python bench/bench_checker.py [--bounds NAME] [--variant V] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys

from rich.console import Console
from rich.table import Table

from envreplica.checker.bfs import check
from envreplica.checker.reference import check_reference
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.spec.variants import Variant


def _verdicts(result) -> dict:
    return {**{name: ("violated", v.length) for name, v in result.violations.items()},
            **{name: ("witnessed", d) for name, d in result.witnessed.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", default="default")
    parser.add_argument("--variant", default="fixed", choices=[v.value for v in Variant])
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each search (median)")
    args = parser.parse_args()
    table = Table(title=f"checker: reference vs fast, bounds {args.bounds}, variant {args.variant}, "
                        f"median of {args.repeat}")
    for column in ("bounds", "states", "transitions", "reference s", "reference states/s", "fast s",
                   "fast states/s", "fast transitions/s", "speed-up", "P(collision)"):
        table.add_column(column, justify="left" if column == "bounds" else "right")
    failed = False
    for bounds in suite(args.bounds, Variant(args.variant)):
        times = {"reference": [], "fast": []}
        results = {}
        for _ in range(args.repeat):
            for name, search, lifted in (("reference", check_reference, True), ("fast", check, False)):
                gc.collect()
                r = search(build_model(bounds, lifted=lifted), max_depth=bounds.max_depth)
                times[name].append(r.seconds)
                results[name] = r
        ref, fast = results["reference"], results["fast"]
        if (ref.states, ref.transitions, _verdicts(ref)) != (fast.states, fast.transitions, _verdicts(fast)):
            failed = True
            print(f"{bounds.name}: the searches disagree: reference {ref.states} states, {ref.transitions} "
                  f"transitions, {_verdicts(ref)}; fast {fast.states}, {fast.transitions}, {_verdicts(fast)}",
                  file=sys.stderr)
        t_ref, t_fast = statistics.median(times["reference"]), statistics.median(times["fast"])
        table.add_row(bounds.name, f"{fast.states:,}", f"{fast.transitions:,}", f"{t_ref:.1f}",
                      f"{ref.states / t_ref:,.0f}", f"{t_fast:.1f}", f"{fast.states / t_fast:,.0f}",
                      f"{fast.transitions / t_fast:,.0f}", f"{t_ref / t_fast:.2f}x",
                      f"{fast.collision_probability:.1e}")
    Console(width=200).print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
