"""Benchmark of the projection lock under kills (not a test): ours beside the well-known Python locks and the seed's.

For each lock (``--locks``) and each filesystem (``--filesystems``: ``ext4`` is a directory under ``/tmp``, ``tmpfs``
one under ``/dev/shm``), runs ``reliability.lock_stress.run_lock_stress``: ``--processes`` workers (8) on one
lock path made stale first (a holder killed inside), ``--kills`` SIGKILLs alternately inside and outside the
operation, each followed by a new worker. Prints one table: lock, filesystem, entries per second, entries,
overlaps (an enter while another live process was inside), the most inside at once, wedged locks (the lock stood
still with every holder dead: cleared by the harness, as an operator would, and counted), kills (inside), busy
give-ups, errors, the names left in the directory at the end (ours: the garbage of killed acquisitions), and, for
comparison, the overlaps a harness would count that took a process killed inside for one still inside until it
is reaped (``zombie-incl.``: a zombie runs no code, so a lock that takes its lock over is right to, and ours
does). Figures of one run on a shared machine: the rates move with the load; the counts are what
matter.

The locks: ``envreplica`` (``impl.lock``), ``filelock`` (``filelock.FileLock``, flock), ``softfilelock``
(``filelock.SoftFileLock``, a marker file), ``fasteners`` (``fasteners.InterProcessLock``, fcntl),
``portalocker`` (``portalocker.Lock``, flock), each with its own defaults (their polling intervals set their
rates: ours and filelock's 50 ms, fasteners' 10-100 ms, portalocker's 250 ms); and ``seed``, the seed's
``projection-lock.js`` unchanged under Node, extracted from the seed diff (``--seed-diff``, default
``$ENVREPLICA_SEED_MIGRATION_DIFF``: the reference seed's ``001_*.txt``) by ``adapters/javascript/scripts/extract-seed.mjs``; skipped with a note when
``node`` or the diff is missing. The Python locks need the ``bench`` extra (``pip install -e '.[bench]'``); a
lock whose package is missing is skipped with a note.

Exit status 1 when our lock shows an overlap, a wedged lock or an error (the others' figures are findings about
them, not failures of this run).

Run: ``.venv/bin/python bench/bench_lock.py [--kills N] [--processes N] [--locks NAME ...] [--filesystems ext4 tmpfs]
[--hold-ms MS] [--entries-per-kill N] [--seed-diff FILE] [--seed N]``.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envreplica.reliability.lock_stress import KINDS, filesystem_of, run_lock_stress

ROOT = Path(__file__).resolve().parent.parent
PLACES = {"ext4": "/tmp", "tmpfs": "/dev/shm"}
PACKAGES = {"filelock": "filelock", "softfilelock": "filelock", "fasteners": "fasteners", "portalocker": "portalocker"}


def _seed_source(diff: str, scratch: Path) -> tuple[Path | None, str]:
    """The seed's projection-lock.js extracted under ``scratch``, or None and why not."""
    if shutil.which("node") is None:
        return None, "node is not installed"
    found = sorted(glob.glob(diff))
    if not found:
        return None, f"no seed diff at {diff}"
    out = scratch / "seed001"
    run = subprocess.run(["node", str(ROOT / "adapters" / "javascript" / "scripts" / "extract-seed.mjs"), found[0],
                          str(out)], capture_output=True, text=True)
    source = out / "storage" / "projection-lock.js"
    if run.returncode != 0 or not source.exists():
        return None, f"extract-seed.mjs failed: {run.stderr.strip()[-200:]}"
    return source, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=300, help="SIGKILLs per run, the stale lock's holder included")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--locks", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--filesystems", nargs="+", choices=list(PLACES), default=list(PLACES))
    parser.add_argument("--seed-diff", default=os.environ.get("ENVREPLICA_SEED_MIGRATION_DIFF", ""),
                        help="the reference seed's diff (001_*.txt) holding projection-lock.js (default: "
                             "$ENVREPLICA_SEED_MIGRATION_DIFF; none: the seed's row is skipped with a note)")
    parser.add_argument("--hold-ms", type=float, default=5.0, help="how long each entry holds the lock")
    parser.add_argument("--entries-per-kill", type=int, default=2, help="entries between two kills (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console(width=160)
    console.print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.system()} "
                  f"{platform.release()}; {args.processes} processes, {args.kills} kills per run, hold "
                  f"{args.hold_ms:g} ms, {args.entries_per_kill} entries between kills")
    table = Table(title="locks under SIGKILL (reliability.lock_stress)")
    for column in ("lock", "filesystem", "entries/s", "entries", "overlaps", "max inside", "wedged", "kills",
                   "inside", "busy", "errors", "names left", "zombie-incl.", "seconds"):
        table.add_column(column, justify="left" if column in ("lock", "filesystem") else "right")
    failed = False
    with tempfile.TemporaryDirectory(prefix="envreplica-bench-lock-") as scratch:
        seed_source, why_not = (None, "")
        if "seed" in args.locks:
            seed_source, why_not = _seed_source(args.seed_diff, Path(scratch))
        for kind in args.locks:
            if kind == "seed" and seed_source is None:
                console.print(f"seed: skipped ({why_not})")
                continue
            if kind in PACKAGES and importlib.util.find_spec(PACKAGES[kind]) is None:
                console.print(f"{kind}: skipped ({PACKAGES[kind]} is not installed: pip install -e '.[bench]')")
                continue
            for fs in args.filesystems:
                place = Path(tempfile.mkdtemp(prefix=f"envreplica-lock-{kind}-", dir=PLACES[fs]))
                try:
                    if filesystem_of(place) != fs:
                        console.print(f"{kind} on {fs}: skipped ({PLACES[fs]} is {filesystem_of(place)})")
                        continue
                    started = time.perf_counter()
                    result = run_lock_stress(kind, place / "run", processes=args.processes, kills=args.kills,
                                             hold_ms=args.hold_ms, seed=args.seed, seed_source=seed_source,
                                             entries_per_kill=args.entries_per_kill)
                finally:
                    shutil.rmtree(place, ignore_errors=True)
                row = result.row()
                table.add_row(kind, fs, f"{result.entries_per_second:.1f}", str(result.entries),
                              str(result.overlaps), str(result.max_inside), str(result.wedged),
                              str(result.kills), str(result.kills_inside), str(result.busy), str(result.errors),
                              str(result.names_left), str(result.overlaps_counting_zombies),
                              f"{time.perf_counter() - started:.0f}")
                console.print(f"{kind} on {fs}: {row}", highlight=False)
                for line in result.error_lines[:3]:
                    console.print(f"  error: {line}", highlight=False)
                if kind == "envreplica" and (result.overlaps or result.wedged or result.errors):
                    failed = True
    console.print(table)
    if failed:
        console.print("FAILED: our lock showed an overlap, a wedged lock or an error")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
