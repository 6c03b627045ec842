"""Benchmark of the lock lockstep through an adapter (not a test): moves/s in-process beside through adapters.

Runs the lock lockstep (``conformance.lock.run``) at one budget (``--examples``, derandomized) four ways and
prints examples, moves, seconds and moves/s of each: in-process (``impl.lock`` in the harness's threads, the gate's
way), through ``envreplica adapter --protocol lock --impl lock`` (the same lock behind the JSON-lines protocol),
through ``--impl model --variant seed``, and, given ``--seed-lock`` (the seed's ``storage/projection-lock.js``, as
``adapters/javascript/scripts/extract-seed.mjs`` writes it), through the JavaScript kit (each lock user a Node
process). Every run must pass (a divergence is printed and the exit status is 1). Seconds are figures, never
verdicts.

Run: ``.venv/bin/python bench/bench_lock_adapter.py [--examples N] [--seed-lock PATH]``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from envreplica.conformance.lock.adapter_side import AdapterShared
from envreplica.conformance.lock.run import run_lock_lockstep
from envreplica.model import lock as ml

KIT = Path(__file__).resolve().parents[1] / "adapters" / "javascript" / "bin" / "envreplica-lock-adapter.js"


def _row(name: str, report) -> bool:
    rate = report.moves / report.seconds if report.seconds else 0.0
    verdict = "pass" if report.passed and not report.adapter_failure else "FAIL"
    print(f"{name:<34}{report.examples:>9}{report.moves:>8}{report.seconds:>9.2f}{rate:>9.0f}  {verdict}")
    if verdict == "FAIL":
        print("   ", report.adapter_failure or "\n    ".join(report.trace(report.divergence.cfg)))
    return verdict == "pass"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--seed-lock", type=Path, default=None)
    args = parser.parse_args(argv)
    py = shlex.quote(sys.executable)
    runs = [("in-process (impl.lock, threads)", None, ml.Variant.FIXED),
            ("adapter --impl lock", f"{py} -m envreplica.cli.main adapter --protocol lock --impl lock",
             ml.Variant.FIXED),
            ("adapter --impl model --variant seed",
             f"{py} -m envreplica.cli.main adapter --protocol lock --impl model --variant seed", ml.Variant.SEED)]
    if args.seed_lock is not None:
        runs.append(("JavaScript kit (the seed's file)",
                     shlex.join(["node", str(KIT), "--source", str(args.seed_lock)]), ml.Variant.SEED))
    print(f"{'run':<34}{'examples':>9}{'moves':>8}{'seconds':>9}{'moves/s':>9}")
    ok = True
    for name, command, variant in runs:
        if command is None:
            ok = _row(name, run_lock_lockstep(args.examples)) and ok
            continue
        shared = AdapterShared(command, variant)
        try:
            report = run_lock_lockstep(args.examples, bounds=shared.bounds, side=shared.side,
                                       properties=shared.properties)
        finally:
            shared.close()
        ok = _row(name, report) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
