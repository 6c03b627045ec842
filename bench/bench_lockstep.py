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

``--baseline REV`` (for example ``--baseline 0654bc1``, a commit without the
lockstep's speed-ups) measures instead the ``sqlite, in-process`` row of this checkout
beside the same row of ``REV`` (checked out with ``git worktree`` into a
temporary directory and imported first on ``PYTHONPATH``), each in its own
subprocess, alternating ``--rounds`` times: the before/after figure of one
run on one machine. Both must run the same examples and steps (the same
derandomized generation), or the comparison is not like for like and it says so.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.external import SubprocessDriver
from envreplica.conformance.replica import lockstep_settings, run_lockstep
from envreplica.model.state import Variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import probe, worktree  # noqa: E402  (bench/baseline.py, beside this file)


_ONE_RUN = """
import json, sys
from envreplica.conformance.replica import lockstep_settings, run_lockstep
from envreplica.model.state import Variant
r = run_lockstep(None, variant=Variant.FIXED, settings=lockstep_settings("ci", max_examples=int(sys.argv[1])),
                 state_check=True)
print(json.dumps({"ok": r.ok, "examples": r.examples, "steps": r.steps, "seconds": r.seconds}))
"""


def baseline(rev: str, examples: int, rounds: int) -> None:
    """This checkout's in-process lockstep beside ``rev``'s, alternating, in one run."""
    with worktree(rev) as pythonpath:
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(rounds):
            runs["before"].append(probe(_ONE_RUN, [examples], pythonpath))
            runs["after"].append(probe(_ONE_RUN, [examples], None))
    table = Table(title=f"lockstep in process (sqlite, state read back), {examples} examples, {rev} vs this "
                        f"checkout, median of {rounds} alternating runs")
    for column in ("code", "examples", "steps", "seconds", "steps/s"):
        table.add_column(column, justify="left" if column == "code" else "right")
    rates = {}
    for name, label in (("before", rev), ("after", "this checkout")):
        r = runs[name]
        if not all(x["ok"] for x in r):
            raise SystemExit(f"{label}: the lockstep diverged")
        seconds = statistics.median(x["seconds"] for x in r)
        rates[name] = statistics.median(x["steps"] / x["seconds"] for x in r)
        table.add_row(label, str(r[0]["examples"]), f"{r[0]['steps']:,}", f"{seconds:.1f}", f"{rates[name]:,.0f}")
    Console().print(table)
    same = (runs["before"][0]["examples"], runs["before"][0]["steps"]) == (runs["after"][0]["examples"],
                                                                          runs["after"][0]["steps"])
    print(f"after / before: {rates['after'] / rates['before']:.2f}x steps/s"
          + ("" if same else " (NOT like for like: the two ran different examples or steps)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="examples per run (default 200)")
    parser.add_argument("--baseline", metavar="REV", help="compare the in-process row with git revision REV")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each with --baseline")
    args = parser.parse_args()
    if args.baseline:
        baseline(args.baseline, args.examples, args.rounds)
        return
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
