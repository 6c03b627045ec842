"""Benchmark of the migration lockstep (not a test): moves per second, per way of running an invocation.

One run of each row, in one process, against the ``fixed`` migration model and ``impl.paired`` (the same
derandomized generation, ``--examples`` examples of the ``ci`` shape):

* ``model only``: what the lockstep itself costs (generation, the model's moves and observation, the
  property checks) with the real side replaced by a second model;
* ``in-process``: every invocation a thread of this process (the stores on tmpfs when there is one, so
  fsync costs nothing);
* ``forked``: every invocation a process forked from the zygote, killed with SIGKILL at a crash;
* ``exec``: every invocation a fresh ``python -m envreplica.cli.main`` (``--exec-examples`` examples: most
  of a second each);
* ``ci mix``: the ``ci`` profile's mix (70 % in-process, 30 % forked).

Prints examples, moves, seconds, moves per second and each row's ratio to the in-process row, then the
replica lockstep's steps per second measured in the same run (``--replica-examples`` examples), for scale.
Run: ``.venv/bin/python bench/bench_migration_lockstep.py [--examples N]``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from rich.console import Console

from envreplica.conformance.migration import run as R
from envreplica.conformance.migration.example import Shared
from envreplica.conformance.migration.invocations import Mode
from envreplica.conformance.migration.sides import ModelSide

sys.path.insert(0, str(Path(__file__).resolve().parent))
from migration_rows import rates, row  # noqa: E402  (bench/migration_rows.py, beside this file)


class _ModelAsReal(ModelSide):
    """A second model in the real side's place: the lockstep's own cost."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__()

    def apply(self, move):  # type: ignore[override]
        return super().apply(move.action)

    def close(self) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--exec-examples", type=int, default=4)
    parser.add_argument("--replica-examples", type=int, default=100)
    args = parser.parse_args()
    console = Console()
    shared = Shared()
    rows = []
    try:
        import envreplica.conformance.migration.example as E

        real_side = E.RealSide
        E.RealSide = _ModelAsReal  # type: ignore[misc, assignment]
        try:
            rows.append(row("model only", args.examples, shared, ((Mode.THREAD, 100),)))
        finally:
            E.RealSide = real_side  # type: ignore[misc]
        rows.append(row("in-process", args.examples, shared, ((Mode.THREAD, 100),)))
        rows.append(row("forked", args.examples, shared, ((Mode.FORK, 100),)))
        rows.append(row("exec", args.exec_examples, shared, ((Mode.EXEC, 100),)))
        rows.append(row("ci mix", args.examples, shared, R.PROFILE_MODES["ci"]))
    finally:
        shared.close()
    table, base_rate = rates(f"migration lockstep, {platform.python_implementation()} {platform.python_version()}",
                             rows, "in-process", 0)
    console.print(table)
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    started = time.perf_counter()
    replica = run_lockstep(None, settings=lockstep_settings("ci", max_examples=args.replica_examples))
    console.print(f"for scale, the replica lockstep (SQLite, in-process) in the same run: {replica.steps:,} steps in "
                  f"{time.perf_counter() - started:.1f} s, {replica.steps_per_second:,.0f} steps/s; the migration "
                  f"lockstep in-process: {base_rate:,.0f} moves/s (× {base_rate / replica.steps_per_second:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
