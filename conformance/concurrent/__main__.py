"""``python -m envreplica.conformance.concurrent``: one ``run_concurrent`` of the SQLite implementation.

The figures are printed.

Exit status 0 when every history is linearizable, 1 when one is not (the
shrunk history is printed, and written under ``--out`` when given), 2 when the
harness itself failed.
"""

from __future__ import annotations

import argparse
import sys

from envreplica.conformance.concurrent.run import Profile, run_concurrent
from envreplica.conformance.concurrent.steps import Granularity
from envreplica.conformance.concurrent.workers import HarnessError
from envreplica.spec.variants import Variant


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envreplica.conformance.concurrent",
                                     description="Concurrent processes on one replica file, held to the model.")
    parser.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant])
    parser.add_argument("--profile", default=Profile.CI.value, choices=[p.value for p in Profile])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="seconds of histories (default: the profile's)")
    parser.add_argument("--granularity", default=Granularity.TRANSACTION.value,
                        choices=[g.value for g in Granularity])
    parser.add_argument("--out", default=None, help="directory for a failing history (JSON and text)")
    args = parser.parse_args(argv)
    try:
        report = run_concurrent(args.variant, profile=args.profile, seed=args.seed, seconds=args.seconds,
                                granularity=args.granularity, out_dir=args.out)
    except HarnessError as error:
        print(f"concurrent: the harness failed: {error}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
