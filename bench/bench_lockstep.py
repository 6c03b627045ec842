"""Benchmark of the lockstep (not a test): lockstep steps per second, in-process and over an adapter.

One run of each, same Hypothesis settings (the ``ci`` profile's shape,
derandomized, ``--examples`` examples of up to 30 steps), against the
``fixed`` model:

* ``model only``: the model driver on both sides (what the lockstep itself
  costs: generation, comparison, invariants, coverage);
* ``sqlite, in-process``: ``SqliteDriver`` on a file on tmpfs when there is
  one (``synchronous=FULL``; tmpfs makes fsync free), with the state read back
  from SQLite and compared after each step;
* ``sqlite, adapter``: ``envreplica adapter --impl sqlite`` in a subprocess
  through ``SubprocessDriver`` (JSON lines over pipes, no state read-back:
  the responses are all an external implementation shows).

Prints examples, steps, seconds, steps per second and each row's ratio to
the model-only row. Run: ``.venv/bin/python bench/bench_lockstep.py [--examples N]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys

from rich.console import Console
from rich.table import Table

from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.external import SubprocessDriver
from envreplica.conformance.lockstep import lockstep_settings, run_lockstep
from envreplica.model.state import Variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="examples per run (default 200)")
    args = parser.parse_args()
    settings = lockstep_settings("ci", max_examples=args.examples)
    adapter = shlex.join([sys.executable, "-m", "envreplica.cli.main", "adapter", "--impl", "sqlite", "--test-key",
                          "--variant", Variant.FIXED.value])
    runs = [
        ("model only", lambda: ModelDriver(Variant.FIXED), True),
        ("sqlite, in-process", None, True),  # run_lockstep's default: SqliteDriver on tmpfs
        ("sqlite, adapter", lambda: SubprocessDriver(adapter), False),
    ]
    table = Table(title=f"lockstep, variant fixed, {args.examples} examples "
                        f"({platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cpus)")
    for column in ("run", "examples", "steps", "seconds", "steps/s", "vs model only"):
        table.add_column(column, justify="left" if column == "run" else "right")
    base = None
    for name, factory, state_check in runs:
        report = run_lockstep(factory, variant=Variant.FIXED, settings=settings, state_check=state_check)
        if not report.ok:
            raise SystemExit(f"{name}: the lockstep diverged:\n{report.failure}")
        rate = report.steps_per_second
        base = base or rate
        table.add_row(name, str(report.examples), f"{report.steps:,}", f"{report.seconds:.1f}", f"{rate:,.0f}",
                      f"{rate / base:.2f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
