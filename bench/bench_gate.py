"""Benchmark of the default gate (not a test): ``envreplica check`` with and without the projection lock's stages,
in one run.

Issue 42 holds the gate to its time before the lock came: with the lock's model check and its lockstep, the default
``envreplica check`` must stay within 10% of ``envreplica check --protocol replica,migration`` (the gate as it was). This
script runs the two alternately (``--rounds`` times each, so a machine that gets busier part way hits both alike),
each as a user runs it (a fresh process, compiled where the build is, ``--quiet``), and prints for each run its wall
seconds and each stage's seconds from the gate's summary table, then the medians and their ratio. The two halves
of the gate run side by side (the model checks in a background process, the locksteps here), so the wall time is
the longer half's: the table's stages say which half that is. It asserts nothing (the clock decides no verdict).

Run: ``.venv/bin/python bench/bench_gate.py [--rounds 2] [--extra "--bounds tiny"]``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

#: A summary row of the gate's table: its stage and its seconds (the last cell).
ROW = re.compile(r"^│ (?P<stage>[a-z][a-z ]+?)\s+│.*│\s+(?P<seconds>[\d.]+) │$")
#: The two gates compared: as it was before the lock, and as it is.
GATES = {"without the lock": ["--protocol", "replica,migration"], "with the lock": []}


def run_gate(options: list[str], extra: list[str]) -> tuple[float, int, dict[str, float]]:
    """One ``envreplica check``: its wall seconds, exit status and each stage's seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as out:
        argv = [sys.executable, "-m", "envreplica.cli.main", "check", "--quiet", "--out", out, *extra, *options]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - started
    table = done.stdout.split("envreplica check: the gate", 1)[-1]  # the summary table, not the others above it
    stages = {m["stage"]: float(m["seconds"]) for line in table.splitlines() if (m := ROW.match(line))}
    if done.returncode != 0:
        print(f"    exit {done.returncode}: {done.stdout[-1500:]}{done.stderr[-800:]}")
    return wall, done.returncode, stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each gate, alternately (default 2)")
    parser.add_argument("--extra", default="", help="more options for both gates (e.g. \"--bounds tiny\")")
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    from envreplica.spec.compiled import choose

    print(f"the model: {choose()}")
    walls: dict[str, list[float]] = {name: [] for name in GATES}
    failed = False
    for round_ in range(1, args.rounds + 1):
        for name, options in GATES.items():
            wall, status, stages = run_gate(options, extra)
            failed = failed or status != 0
            walls[name].append(wall)
            shown = ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in stages.items())
            print(f"round {round_}, {name}: {wall:.1f} s (exit {status}); stages: {shown}", flush=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    for name, median in medians.items():
        print(f"{name}: median {median:.1f} s over {len(walls[name])} runs")
    ratio = medians["with the lock"] / medians["without the lock"]
    print(f"with / without the lock: {ratio:.3f} (issue 42's bound: 1.10)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
