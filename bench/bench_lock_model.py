"""Benchmark of the projection lock's model check (not a test): its speed beside the replica's, and what symmetry
saves, in one run.

For each bounds of the lock's suite (``--bounds``, default ``lock``) under ``--variant`` (default ``fixed``), runs
the check (``checker.lock.run``: the search and the liveness closure) with symmetry (the gate's way) and without,
and prints distinct states, transitions, seconds and states/s of each, and the reduction; then the replica's check
at ``--replica-bounds`` (default ``cloud``) in the same process, so the per-state speeds are measured side by side
on one machine in one run. The verdicts with and without symmetry must be the same (a difference is printed and the
exit status is 1). Whether the model runs compiled (mypyc) or interpreted is printed first
(``ENVREPLICA_PURE_PYTHON=1`` forces interpreted).

Run: ``.venv/bin/python bench/bench_lock_model.py [--bounds lock|lock-deep] [--variant seed|fixed]
[--replica-bounds NAME] [--no-symmetry-off]``.
"""

from __future__ import annotations

import argparse
import sys
import time

from envreplica.checker import lock as cl
from envreplica.model import lock as ml
from envreplica.spec.compiled import choose


def _verdicts(run: cl.LockRun) -> tuple:
    return (tuple(sorted((k, v.length) for k, v in run.result.violations.items())),
            None if run.stuck is None else run.stuck.length, tuple(run.missed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", default="lock", choices=list(ml.PRESETS))
    parser.add_argument("--variant", default="fixed", choices=[v.value for v in ml.Variant])
    parser.add_argument("--replica-bounds", default="cloud")
    parser.add_argument("--no-symmetry-off", action="store_true", help="skip the runs without symmetry")
    args = parser.parse_args(argv)
    print(f"the model ran {choose()}")
    print(f"{'bounds':<12}{'symmetry':>9}{'states':>10}{'transitions':>13}{'seconds':>9}{'states/s':>10}"
          f"{'reduction':>11}")
    same, total_states, total_seconds = True, 0, 0.0
    for b in ml.suite(args.bounds, ml.Variant(args.variant)):
        on = cl.run(b, symmetry=True)
        total_states += on.result.states
        total_seconds += on.seconds
        print(f"{b.name:<12}{'on':>9}{on.result.states:>10,}{on.result.transitions:>13,}{on.seconds:>9.1f}"
              f"{on.result.states / on.seconds:>10,.0f}{'':>11}", flush=True)
        if args.no_symmetry_off:
            continue
        off = cl.run(b, symmetry=False)
        print(f"{b.name:<12}{'off':>9}{off.result.states:>10,}{off.result.transitions:>13,}{off.seconds:>9.1f}"
              f"{off.result.states / off.seconds:>10,.0f}{off.result.states / on.result.states:>10.2f}x", flush=True)
        if _verdicts(on) != _verdicts(off):
            same = False
            print(f"  DIFFERENT VERDICTS: symmetry on {_verdicts(on)}, off {_verdicts(off)}")
    lock_rate = total_states / total_seconds
    print(f"lock suite {args.bounds} ({args.variant}), symmetry on: {total_states:,} states in {total_seconds:.1f} s, "
          f"{lock_rate:,.0f} states/s (search and liveness closure)")
    from envreplica.checker.run import run as check_replica
    from envreplica.model.presets import suite
    from envreplica.model.state import Variant

    started = time.perf_counter()
    states = 0
    for rb in suite(args.replica_bounds, Variant.FIXED):
        states += check_replica(rb).result.states
    seconds = time.perf_counter() - started
    print(f"replica {args.replica_bounds} (fixed): {states:,} states in {seconds:.1f} s, {states / seconds:,.0f} states/s")
    print(f"lock / replica per-state speed: {lock_rate / (states / seconds):.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
