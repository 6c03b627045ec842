"""Benchmark of symmetry reduction (not a test): each bound searched without and with ``model.symmetry``.

For each bound of the suites named (``--bounds``, default ``default`` and
``cloud-2p``), runs ``checker.bfs.check`` without and with the symmetry
hook (``build_model(..., symmetry=True)``), interleaved ``--repeat`` times,
and prints distinct states, transitions and seconds of each, the reduction
in states, and the speed-up. A bound with no two interchangeable names
(``model.symmetry.groups`` empty) runs the plain search either way (shown
as "none"). The two runs must agree on every verdict (violated at the same
length, witnessed at the same depth); a difference is printed and the exit
code is 1.

Run: ``.venv/bin/python bench/bench_symmetry.py [--bounds NAME ...] [--variant V] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys

from rich.console import Console
from rich.table import Table

from envreplica.checker.bfs import check
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.model.symmetry import groups
from envreplica.spec.variants import Variant


def _verdicts(result) -> dict:
    return {**{name: ("violated", v.length) for name, v in result.violations.items()},
            **{name: ("witnessed", d) for name, d in result.witnessed.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", nargs="+", default=["default", "cloud-2p"])
    parser.add_argument("--variant", default="fixed", choices=[v.value for v in Variant])
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each search (median seconds)")
    args = parser.parse_args()
    table = Table(title=f"symmetry reduction, bounds {' + '.join(args.bounds)}, variant {args.variant}, "
                        f"median of {args.repeat}")
    for column in ("bounds", "permuted", "states", "transitions", "seconds", "states (sym)", "transitions (sym)",
                   "seconds (sym)", "state reduction", "speed-up"):
        table.add_column(column, justify="left" if column in ("bounds", "permuted") else "right")
    failed = False
    for name in args.bounds:
        for bounds in suite(name, Variant(args.variant)):
            permuted = groups(bounds)
            times = {False: [], True: []}
            results = {}
            for _ in range(args.repeat):
                for sym in (False, True):
                    gc.collect()
                    r = check(build_model(bounds, symmetry=sym), max_depth=bounds.max_depth)
                    times[sym].append(r.seconds)
                    results[sym] = r
            plain, reduced = results[False], results[True]
            if _verdicts(plain) != _verdicts(reduced):
                failed = True
                print(f"{bounds.name}: verdicts differ: plain {_verdicts(plain)}; symmetry {_verdicts(reduced)}",
                      file=sys.stderr)
            t_plain, t_sym = statistics.median(times[False]), statistics.median(times[True])
            shown = ", ".join(f"{cls} {'/'.join(g)}" for cls, parts in permuted.items() for g in parts) or "none"
            table.add_row(bounds.name, shown, f"{plain.states:,}", f"{plain.transitions:,}", f"{t_plain:.2f}",
                          f"{reduced.states:,}", f"{reduced.transitions:,}", f"{t_sym:.2f}",
                          f"{plain.states / reduced.states:.2f}x", f"{t_plain / t_sym:.2f}x")
    Console(width=220).print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
