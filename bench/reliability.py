"""The reliability suite at full size (a benchmark, not a test): prints what each harness measured.

Runs the harnesses of ``envreplica.reliability`` at full size,
each over the real implementation, and prints their figures:

* crash consistency: ``kill -9`` of an adapter applying a long stream, at
  ``--kills`` random moments (default 200);
* torn writes: the WAL of a real run cut and garbled at every frame boundary;
* several processes on one file (two deliverers racing on each sequence, a
  reconciler cycling the gate, a reader);
* hostile input: ``--frames`` malformed frames through the adapter (default
  20,000).

Any harness that finds a problem raises, and this script exits 1 after
printing what it found. ``make test`` runs the same harnesses small
(``tests/test_reliability_*.py``).

Run: ``.venv/bin/python bench/reliability.py [--kills N] [--deliveries N] [--frames N] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import time
import traceback

HARNESSES = ("crash", "torn", "concurrency", "hostile")


def _crash(args):
    from envreplica.reliability.crash import run_crash

    return run_crash(kills=args.kills, deliveries=args.deliveries, seed=args.seed)


def _torn(args):
    from envreplica.reliability.torn import run_torn

    return run_torn(deliveries=args.torn_deliveries, seed=args.seed)


def _concurrency(args):
    from envreplica.reliability.concurrency import run_concurrency

    return run_concurrency(deliveries=args.deliveries, seed=args.seed)


def _hostile(args):
    from envreplica.reliability.hostile import run_hostile

    return run_hostile(frames=args.frames, seed=args.seed)


RUNS = {"crash": _crash, "torn": _torn, "concurrency": _concurrency, "hostile": _hostile}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200, help="kill points of the crash harness (default 200)")
    parser.add_argument("--deliveries", type=int, default=400, help="deliveries of the crash and process streams")
    parser.add_argument("--torn-deliveries", type=int, default=300, help="deliveries of the torn-WAL run")
    parser.add_argument("--frames", type=int, default=20_000, help="hostile frames (default 20,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="+", choices=HARNESSES, default=list(HARNESSES))
    args = parser.parse_args()
    print(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, "
          f"{platform.system()} {platform.machine()}")
    failed = []
    for name in args.only:
        started = time.perf_counter()
        print(f"\n== {name} ==", flush=True)
        try:
            report = RUNS[name](args)
        except Exception:  # a harness that finds a problem raises: print it, go on, exit 1
            failed.append(name)
            traceback.print_exc()
            continue
        for line in report.lines():
            print(f"  {line}")
        print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    print("\nevery harness passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
