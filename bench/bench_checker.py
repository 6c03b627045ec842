"""Benchmark of the model checker (not a test): the fast search beside the one it replaced, in one run.

For each bound of a suite (``--bounds``, default ``default``), runs
``checker.reference.check_reference`` (the plain search: full
states in the visited set, every property lifted to worlds and evaluated on
every step) and ``checker.bfs.check`` (fingerprints, properties on the
replica view, step properties only where they can fail), interleaved
``--repeat`` times, and prints distinct states, transitions, seconds,
states/s and transitions/s of each, the speed-up, and TLC's estimate of a
fingerprint collision. The two must agree on the state and transition
counts and on every verdict (a difference is printed and the exit code is 1).

``--baseline REV`` (for example ``--baseline 8434dca``, a commit
without the checker's speed-ups) runs instead the
whole check of each bound (model and search) with this checkout's code and
with ``REV``'s (``bench/baseline.py``: a worktree imported first on
``PYTHONPATH``), each in its own subprocess, alternating ``--repeat`` times,
and prints both states/s and the ratio. ``check_reference`` runs on today's
model, so the first table shows only what the search gained; this one shows
what the model's own speed-ups add (a hash kept once computed, a generated
``replace``: ``spec/frozen.py``).

``--compiled`` runs the same comparison between this checkout interpreted
(``ENVREPLICA_PURE_PYTHON=1``) and this checkout compiled by mypyc (its build,
``make compiled``: ``spec/compiled.py``), alternating, each run in its own
process; the state and transition counts must be the same. It ends with the
issue's goals: compiled at least 3x the interpreted, and 13,000 distinct
states/s on ``cloud`` (TLC's rate per core on specs of this size).

Both modes end with CPython's floor per transition on the first bound: the
least work any explicit-state search of this model must do per transition in
Python (one map update, one ``State`` and one ``World`` built, the world
hashed, one visited-set lookup) on real states of the bound, with the
states/s it would allow at the bound's transitions per state if the
protocol's logic, the enabled actions and every property cost nothing.

Run: ``.venv/bin/python bench/bench_checker.py [--bounds NAME] [--variant V] [--repeat N] [--baseline REV | --compiled]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from envreplica.checker.bfs import check, reachable
from envreplica.checker.reference import check_reference
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.model.generate import World
from envreplica.spec.compiled import PURE_ENV
from envreplica.spec.frozen import replace
from envreplica.spec.variants import Variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import probe, worktree  # noqa: E402  (bench/baseline.py, beside this file)

#: Run in each tree's interpreter: the whole check of each bound of a suite, as JSON.
_ONE_SUITE = """
import json, sys
from envreplica.checker.bfs import check, reachable
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.model.state import Variant
out = {}
for b in suite(sys.argv[1], Variant(sys.argv[2])):
    r = check(build_model(b), max_depth=b.max_depth)
    out[b.name] = [r.states, r.transitions, r.seconds]
print(json.dumps(out))
"""


def _verdicts(result) -> dict:
    return {**{name: ("violated", v.length) for name, v in result.violations.items()},
            **{name: ("witnessed", d) for name, d in result.witnessed.items()}}


def python_floor(bounds, sample: int = 5000, rounds: int = 20) -> float:
    """Microseconds per transition of CPython's least per-transition work, on ``sample`` states of ``bounds``."""
    states = reachable(build_model(bounds), sample)
    visited: dict = {}
    started = time.perf_counter()
    for n in range(rounds):
        for world in states:
            st = world.replica
            fp = hash(World(replace(st, projects=st.projects.set("floor", n)), world.cloud))
            if fp not in visited:
                visited[fp] = None
    seconds = (time.perf_counter() - started) / (rounds * len(states))
    return seconds * 1e6


def _print_floor(bounds, console: Console, per_state: float) -> None:
    """The floor, and the states/s it allows at ``per_state`` transitions per distinct state (the bound's)."""
    micros = python_floor(bounds)
    console.print(f"CPython floor on {bounds.name}: {micros:.2f} us per transition (one map update, a State and a "
                  f"World built, hashed, looked up) = {1e6 / micros:,.0f} transitions/s = at most "
                  f"{1e6 / micros / per_state:,.0f} states/s at {per_state:.2f} transitions per state, "
                  f"were the protocol, the enabled actions and the properties free")


def against_baseline(rev: str, bounds_name: str, variant: str, repeat: int) -> int:
    """Each bound's whole check, this checkout vs ``rev``, alternating ``repeat`` times, in subprocesses."""
    with worktree(rev) as pythonpath:
        return _alternate(pythonpath, None, rev, "now", "this checkout", bounds_name, variant, repeat)


def against_compiled(bounds_name: str, variant: str, repeat: int) -> int:
    """Each bound's whole check, this checkout interpreted vs compiled by mypyc, alternating, with the goals."""
    status = probe("from envreplica.spec import compiled; import json; print(json.dumps(str(compiled.choose())))",
                   [], None, {PURE_ENV: None})
    if not status.startswith("compiled"):
        print(f"no compiled build to compare ({status}): make compiled", file=sys.stderr)
        return 2
    return _alternate(None, None, "interpreted", "compiled", "the same code compiled by mypyc", bounds_name,
                      variant, repeat, must_agree=True, envs=({PURE_ENV: "1"}, {PURE_ENV: None}),
                      goals=True)


def _alternate(before_path: Optional[str], after_path: Optional[str], before: str, after: str, after_is: str,
               bounds_name: str, variant: str, repeat: int, must_agree: bool = False,
               envs: tuple[Optional[dict], Optional[dict]] = (None, None), goals: bool = False) -> int:
    """The whole check with ``before_path``'s code and with ``after_path``'s, alternating, as a table.

    A path is a ``PYTHONPATH`` entry (``bench/baseline.py``), or None for this checkout. ``must_agree``: the two
    are the same model, so a bound whose state or transition counts differ fails (exit code 1). ``envs``: each
    side's environment changes (``probe``'s ``set_env``). ``goals``: end with issue 32's two goals, met or not.
    """
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(repeat):
        runs["before"].append(probe(_ONE_SUITE, [bounds_name, variant], before_path, envs[0]))
        runs["after"].append(probe(_ONE_SUITE, [bounds_name, variant], after_path, envs[1]))
    table = Table(title=f"checker (model and search): {before} vs {after_is}, bounds {bounds_name}, variant "
                        f"{variant}, median of {repeat} alternating runs, each in its own process")
    for column in ("bounds", "states", "transitions", f"{before} s", f"{before} states/s", f"{after} s",
                   f"{after} states/s", f"{after} transitions/s", "speed-up"):
        table.add_column(column, justify="left" if column == "bounds" else "right")
    differ = False
    ratios: dict[str, tuple[float, float]] = {}  # bound -> (speed-up, states/s after)
    for name in runs["after"][0]:
        before = [r[name] for r in runs["before"] if name in r]
        after = [r[name] for r in runs["after"]]
        states, transitions = after[0][0], after[0][1]
        t_after = statistics.median(x[2] for x in after)
        if not before:
            table.add_row(name, f"{states:,}", f"{transitions:,}", "(no such bound)", "", f"{t_after:.1f}",
                          f"{states / t_after:,.0f}", f"{transitions / t_after:,.0f}", "")
            continue
        t_before = statistics.median(x[2] for x in before)
        rate_before = statistics.median(x[0] / x[2] for x in before)
        rate_after = statistics.median(x[0] / x[2] for x in after)
        same = (before[0][0], before[0][1]) == (states, transitions)
        differ |= not same
        ratios[name] = (rate_after / rate_before, rate_after)
        table.add_row(name, f"{states:,}" + ("" if same else f" (then {before[0][0]:,})"), f"{transitions:,}",
                      f"{t_before:.1f}", f"{rate_before:,.0f}", f"{t_after:.1f}", f"{rate_after:,.0f}",
                      f"{transitions / t_after:,.0f}", f"{rate_after / rate_before:.2f}x")
    console = Console(width=200)
    console.print(table)
    if differ and must_agree:
        console.print("[bold red]the two explored other state or transition counts: they are not the same "
                      "model[/]")
    elif differ:
        console.print("some bounds explored other state counts then and now: their ratio compares states/s, "
                      "not like for like")
    if goals:
        for name, (ratio, rate) in ratios.items():
            console.print(f"goal on {name}: compiled {ratio:.2f}x the interpreted (goal 3x: "
                          f"{'met' if ratio >= 3 else 'not met'})" + (
                              f", {rate:,.0f} distinct states/s (goal 13,000: {'met' if rate >= 13000 else 'not met'})"
                              if name == "cloud" else ""))
    first = next(iter(runs["after"][0].values()))
    _print_floor(suite(bounds_name, Variant(variant))[0], console, first[1] / first[0])
    return 1 if differ and must_agree else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", default="default")
    parser.add_argument("--variant", default="fixed", choices=[v.value for v in Variant])
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each search (median)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--baseline", metavar="REV", help="the whole check against git revision REV instead")
    mode.add_argument("--compiled", action="store_true",
                      help="the whole check interpreted (ENVREPLICA_PURE_PYTHON=1) against compiled by mypyc instead")
    args = parser.parse_args()
    if args.compiled:
        return against_compiled(args.bounds, args.variant, args.repeat)
    if args.baseline:
        return against_baseline(args.baseline, args.bounds, args.variant, args.repeat)
    table = Table(title=f"checker: reference vs fast, bounds {args.bounds}, variant {args.variant}, "
                        f"median of {args.repeat}")
    for column in ("bounds", "states", "transitions", "reference s", "reference states/s", "fast s",
                   "fast states/s", "fast transitions/s", "speed-up", "P(collision)"):
        table.add_column(column, justify="left" if column == "bounds" else "right")
    failed, first_ratio = False, None
    for bounds in suite(args.bounds, Variant(args.variant)):
        times = {"reference": [], "fast": []}
        results = {}
        for _ in range(args.repeat):
            for name, search, lifted in (("reference", check_reference, True), ("fast", check, False)):
                gc.collect()
                r = search(build_model(bounds, lifted=lifted), max_depth=bounds.max_depth)
                times[name].append(r.seconds)
                results[name] = r
        ref, fast = results["reference"], results["fast"]
        first_ratio = first_ratio or fast.transitions / fast.states
        if (ref.states, ref.transitions, _verdicts(ref)) != (fast.states, fast.transitions, _verdicts(fast)):
            failed = True
            print(f"{bounds.name}: the searches disagree: reference {ref.states} states, {ref.transitions} "
                  f"transitions, {_verdicts(ref)}; fast {fast.states}, {fast.transitions}, {_verdicts(fast)}",
                  file=sys.stderr)
        t_ref, t_fast = statistics.median(times["reference"]), statistics.median(times["fast"])
        table.add_row(bounds.name, f"{fast.states:,}", f"{fast.transitions:,}", f"{t_ref:.1f}",
                      f"{ref.states / t_ref:,.0f}", f"{t_fast:.1f}", f"{fast.states / t_fast:,.0f}",
                      f"{fast.transitions / t_fast:,.0f}", f"{t_ref / t_fast:.2f}x",
                      f"{fast.collision_probability:.1e}")
    console = Console(width=200)
    console.print(table)
    _print_floor(suite(args.bounds, Variant(args.variant))[0], console, first_ratio)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
