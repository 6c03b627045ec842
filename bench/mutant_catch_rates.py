"""Benchmark of the lockstep against the mutants (not a test): examples to catch each one, over random seeds.

``tests/test_conformance_mutants.py`` runs each mutant once under the
derandomized ``ci`` profile: the same examples in every process (the
literals Hypothesis mixes into draws are pinned to envreplica's own,
``conformance.literals``). One seed says little about how close a
mutant is to slipping through: a change anywhere in the generator draws other
examples. This script measures the distribution instead: for each mutant of
``tests/impl_mutants.py`` and ``tests/crash_mutants.py``, ``--runs`` lockstep runs with random seeds (the
``ci`` profile's shape, not derandomized, generation only: no shrinking), and
the number of examples until the first divergence in each.

Prints, per mutant: runs caught within the budget, the median and the
largest examples-to-catch, and the seconds spent. The ``ci`` budget
(``PROFILE_EXAMPLES["ci"]``) should sit well above the largest.

Run: ``.venv/bin/python bench/mutant_catch_rates.py [--runs N] [--examples N] [MUTANT ...]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import Phase, settings
from rich.console import Console
from rich.table import Table

from envreplica.conformance.replica import PROFILE_EXAMPLES, lockstep_settings, run_lockstep
from envreplica.conformance.replica import run as lockstep_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from crash_mutants import CRASH_MUTANTS  # noqa: E402
from impl_mutants import MUTANTS  # noqa: E402

#: The storage mutants ``tests/test_conformance_mutants.py`` holds the lockstep to.
SUITE = MUTANTS + CRASH_MUTANTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="random seeds per mutant (default 8)")
    parser.add_argument("--examples", type=int, default=PROFILE_EXAMPLES["ci"],
                        help="example budget per run (default: the ci profile's)")
    parser.add_argument("mutants", nargs="*", help="mutant names (default: all)")
    args = parser.parse_args()
    unknown = set(args.mutants) - {m.name for m in SUITE}
    if unknown:
        parser.error(f"unknown mutants {sorted(unknown)}; known: {[m.name for m in SUITE]}")
    lockstep_run.MINIMIZE_REPLAYS = 0  # generation only: no step deletion after a catch
    budget = settings(lockstep_settings("ci"), derandomize=False, phases=(Phase.generate,),
                      max_examples=args.examples)
    table = Table(title=f"examples to catch each mutant: {args.runs} random seeds, budget {args.examples}")
    for column in ("mutant", "caught", "median", "largest", "all", "seconds"):
        table.add_column(column, justify="left" if column in ("mutant", "all") else "right")
    console = Console()
    for mutant in SUITE:
        if args.mutants and mutant.name not in args.mutants:
            continue
        started, found = time.perf_counter(), []
        for _ in range(args.runs):
            scratch = Path(tempfile.mkdtemp(prefix="envreplica-rates-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
            try:
                report = run_lockstep(mutant.factory(scratch), variant=mutant.variant, settings=budget)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            found.append(None if report.ok else report.found_after_examples)
        caught = sorted(n for n in found if n is not None)
        table.add_row(mutant.name, f"{len(caught)}/{args.runs}",
                      f"{statistics.median(caught):.0f}" if caught else "-", str(max(caught)) if caught else "-",
                      " ".join(map(str, caught)), f"{time.perf_counter() - started:.0f}")
        console.print(f"{mutant.name}: caught {len(caught)}/{args.runs}, examples {caught}")
    console.print(table)


if __name__ == "__main__":
    main()
