"""Benchmark of the parallel searches (not a test): states/s of one process, forked workers, and Ray actors.

For each bound of a suite (``--bounds``, default ``adversary``), runs
``checker.bfs.check`` (one process), ``checker.parallel.check_parallel`` with
each of ``--workers`` (default ``2``), and, when Ray is importable (and not
``--no-ray``), ``checker.ray_search.check_ray`` with 1 and the largest of
``--workers`` actors on a local Ray started once for the benchmark (its start
is timed apart; a search's seconds count from its actors being up). Prints
distinct states, transitions, seconds, states/s, the speed-up over one
process and the efficiency (speed-up per worker), and, for the forked
workers, the CPU seconds of all processes beside the single process's (the
part of the slowdown that is extra work rather than waiting for a core).
Every search must agree with ``bfs.check`` on the state and transition counts
and on every verdict and its depth (a difference is printed and the exit code
is 1). The load average is printed before and after: on a shared machine the
wall-clock speed-up is only as good as the free cores.

Run: ``.venv/bin/python bench/bench_parallel.py [--bounds NAME] [--variant V] [--workers 2,4] [--no-ray]
[--repeat N]``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import resource
import sys
import time

from rich.console import Console
from rich.table import Table

from envreplica.checker.bfs import check
from envreplica.checker.parallel import check_parallel
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.spec.variants import Variant


def _verdicts(result) -> dict:
    return {**{name: ("violated", v.length) for name, v in result.violations.items()},
            **{name: ("witnessed", d) for name, d in result.witnessed.items()}}


def _cpu(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", default="adversary")
    parser.add_argument("--variant", default="fixed", choices=[v.value for v in Variant])
    parser.add_argument("--workers", default="2", help="comma-separated worker counts for the forked search")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray searches")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each search, interleaved; the fastest is shown (a shared machine's noise)")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.workers.split(",")})
    use_ray = not args.no_ray and _ray_available()
    console = Console(width=200)
    console.print(f"cores: {len(os.sched_getaffinity(0))}, load average before: "
                  f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ray_start = None
    table = Table(title=f"parallel search: bounds {args.bounds}, variant {args.variant}, fastest of {args.repeat}")
    for column in ("bounds", "search", "workers", "states", "transitions", "seconds", "states/s", "speed-up",
                   "efficiency", "CPU s (all processes)"):
        table.add_column(column, justify="left" if column in ("bounds", "search") else "right")
    failed = False
    for bounds in suite(args.bounds, Variant(args.variant)):
        factory = functools.partial(build_model, bounds)
        best: dict = {}  # (search, workers) -> (result, CPU seconds) of the fastest run

        def keep(key, r, cpu) -> None:
            if key not in best or r.seconds < best[key][0].seconds:
                best[key] = (r, cpu)

        for _ in range(args.repeat):
            gc.collect()
            cpu0 = _cpu(resource.RUSAGE_SELF)
            r = check(factory(), max_depth=bounds.max_depth)
            keep(("bfs.check", 1), r, _cpu(resource.RUSAGE_SELF) - cpu0)
            for n in counts:
                gc.collect()
                cpu0, child0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
                r = check_parallel(factory, n, max_depth=bounds.max_depth)
                cpu = _cpu(resource.RUSAGE_SELF) - cpu0 + _cpu(resource.RUSAGE_CHILDREN) - child0
                keep(("check_parallel", n), r, cpu)
        runs = [(name, n, r, cpu) for (name, n), (r, cpu) in best.items()]
        base = best[("bfs.check", 1)][0]
        if use_ray:
            import ray

            from envreplica.checker.ray_search import check_ray

            if ray_start is None:  # started after the forked searches, so its daemons do not slow them
                started = time.perf_counter()
                ray.init(num_cpus=max(max(counts), os.cpu_count() or 1), include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
                ray_start = time.perf_counter() - started
            for _ in range(args.repeat):
                for n in sorted({1, max(counts)}):
                    gc.collect()
                    keep(("check_ray", n), check_ray(factory, n, address=None, max_depth=bounds.max_depth,
                                                     shutdown=False), None)
            runs += [(name, n, r, cpu) for (name, n), (r, cpu) in best.items() if name == "check_ray"]
        for name, n, r, cpu in runs:
            same = (r.states, r.transitions, _verdicts(r)) == (base.states, base.transitions, _verdicts(base))
            if not same:
                failed = True
                print(f"{bounds.name}: {name} with {n} disagrees with bfs.check: {r.states} states, "
                      f"{r.transitions} transitions, {_verdicts(r)}; bfs {base.states}, {base.transitions}, "
                      f"{_verdicts(base)}", file=sys.stderr)
            speedup = base.seconds / r.seconds
            table.add_row(bounds.name, name + ("" if same else " [red](differs)[/]"), str(n), f"{r.states:,}",
                          f"{r.transitions:,}", f"{r.seconds:.2f}", f"{r.states_per_second:,.0f}",
                          f"{speedup:.2f}x", f"{speedup / n:.0%}", "-" if cpu is None else f"{cpu:.2f}")
    console.print(table)
    if ray_start is not None:
        import ray

        ray.shutdown()
        console.print(f"local Ray started in {ray_start:.1f} s (not counted in the Ray searches' seconds)")
    console.print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
