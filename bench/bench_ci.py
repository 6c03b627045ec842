"""Benchmark of the suite's tiers (not a test): how long ``make test`` and CI's test steps take, and where it goes.

Issue 41 holds the suite to two figures on 2 cores: ``make test`` (the fast tier a contributor runs before each
commit, at the ``dev`` budget) within 300 s, and ``bash .ci/run`` from a fresh clone within 900 s, set-up (apt,
the virtual environment, ``npm ci``, the mypyc build) included. This script times, in this checkout, the steps
that follow CI's set-up, each as ``.ci/run`` runs it, and prints the figures; it asserts nothing (the clock
decides no verdict):

* ``make test`` as a contributor runs it (``ENVREPLICA_TEST_BUDGET=dev``, ``CI`` unset);
* CI's steps (``CI=true``: the ``ci`` budget, the kits and the browser test required): ``make test-all`` (both
  tiers in one pytest session: ``make test TIER=all``), then ``make docs``.

For each step: the wall-clock seconds, pytest's own seconds and its summary line; then the test files that took
the most time summed over their tests (pytest's JUnit report, ``--junitxml``: where a worker's minutes go).
``--setup-seconds`` adds a measured set-up time to CI's total (default 250 s, the upper figure issue 41 gives
for apt, venv, npm and the mypyc build on CI's machine); ``--fresh-ci`` instead times ``bash .ci/run`` whole in a
fresh clone (it needs root and Debian's apt, as CI's machine has).

Run: ``.venv/bin/python bench/bench_ci.py [--steps contributor,ci] [--top 15] [--setup-seconds 250]
[--fresh-ci]`` (the seeds' files in ``ENVREPLICA_SEED_SOURCE`` and ``ENVREPLICA_SEED_MIGRATION_SOURCE``/
``ENVREPLICA_SEED_MIGRATION_DIFF`` as ``.ci/run`` sets them, else CI's kit tests fail). On a machine shared
with other work the seconds are inflated; the ratios between steps and files still say where time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench-ci"
#: pytest's last line, e.g. "==== 2,001 passed, 81 skipped in 840.12s (0:14:00) ====".
SUMMARY = re.compile(r"=+ (.*) in ([\d.]+)s(?: \([\d:]+\))? =+\s*$", re.MULTILINE)
#: Issue 41's limits, in seconds on 2 cores.
MAKE_TEST_LIMIT = 300
CI_LIMIT = 900


@dataclass
class Step:
    """One command as ``.ci/run`` (or a contributor) runs it, and what it took."""

    name: str
    argv: list[str]
    env: dict[str, str]
    junit: Path | None = None
    wall: float = 0.0
    pytest_seconds: float | None = None
    summary: str = ""
    status: int = 0
    files: dict[str, float] = field(default_factory=dict)
    tests: dict[str, float] = field(default_factory=dict)


def _env(ci: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "ENVREPLICA_TEST_BUDGET")}
    if ci:
        env["CI"] = "true"
    else:
        env["ENVREPLICA_TEST_BUDGET"] = "dev"
    return env


def _pytest_step(name: str, target: str, ci: bool, extra: str) -> Step:
    junit = OUT / f"{name.replace(' ', '-').replace('/', '-')}.xml"
    args = f"-p randomly --durations=60 --junitxml={junit} {extra}".strip() if ci else f"--junitxml={junit} {extra}"
    return Step(name, ["make", target, f"PYTEST_ARGS={args.strip()}"], _env(ci), junit)


def steps(chosen: set[str], extra: str) -> list[Step]:
    found: list[Step] = []
    if "contributor" in chosen:
        found.append(_pytest_step("contributor make test", "test", False, extra))
    if "ci" in chosen:
        found.append(_pytest_step("CI make test-all", "test-all", True, extra))
        found.append(Step("CI make docs", ["make", "docs"], _env(True)))
    return found


def per_test(junit: Path) -> dict[str, float]:
    """Seconds per test (set-up, call and tear-down), by pytest's node id, from a JUnit report."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        at = next((i for i in range(len(module)) if module[i].startswith("test_")), None)
        path = f"{'/'.join(module[:at + 1])}.py" if at is not None else case.get("classname", "?")
        inner = module[at + 1:] if at is not None else []  # a test class, if any
        seconds["::".join([path, *inner, case.get("name", "?")])] += float(case.get("time", 0) or 0)
    return dict(seconds)


def per_file(tests: dict[str, float]) -> dict[str, float]:
    """Seconds summed per test file."""
    totals: dict[str, float] = defaultdict(float)
    for nodeid, seconds in tests.items():
        totals[nodeid.split("::", 1)[0]] += seconds
    return dict(totals)


def slow_tests() -> set[str]:
    """The node ids of the tests marked slow (pytest's own collection)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-p", "no:xdist", "--collect-only", "-q", "-m", "slow and not nightly", "tests"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "ENVREPLICA_PURE_PYTHON": "1"})
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def run(step: Step) -> Step:
    print(f"--- {step.name}: {' '.join(step.argv)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(step.argv, cwd=ROOT, env=step.env, capture_output=True, text=True)
    step.wall = time.perf_counter() - started
    step.status = done.returncode
    matches = SUMMARY.findall(done.stdout)
    if matches:
        step.summary, seconds = matches[-1]
        step.pytest_seconds = float(seconds)
    if step.junit is not None and step.junit.exists():
        step.tests = per_test(step.junit)
        step.files = per_file(step.tests)
    if done.returncode != 0:
        print(f"    exited {done.returncode}; its output ends:\n{done.stdout[-2000:]}{done.stderr[-1000:]}")
    return step


def fresh_ci() -> float:
    """``bash .ci/run`` in a fresh clone of this checkout's HEAD (needs root and apt), in seconds."""
    with tempfile.TemporaryDirectory(prefix="envreplica-ci-") as tmp:
        clone = Path(tmp) / "main"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        started = time.perf_counter()
        done = subprocess.run(["bash", ".ci/run"], cwd=clone)
        seconds = time.perf_counter() - started
        print(f"bash .ci/run in a fresh clone: exit {done.returncode}, {seconds:.0f} s (limit {CI_LIMIT} s)")
        return seconds


def report(done: list[Step], top: int, setup: float) -> None:
    print("\nstep                     exit   wall s  pytest s  summary")
    for step in done:
        pytest_s = f"{step.pytest_seconds:8.1f}" if step.pytest_seconds is not None else "        "
        print(f"{step.name:<24} {step.status:>4} {step.wall:8.1f}  {pytest_s}  {step.summary}")
    contributor = [s for s in done if s.name == "contributor make test"]
    if contributor:
        print(f"\nmake test (contributor, dev budget): {contributor[0].wall:.0f} s (limit {MAKE_TEST_LIMIT} s)")
    ci = [s for s in done if s.name.startswith("CI ")]
    if ci:
        tests = sum(s.wall for s in ci if s.junit is not None)
        total = sum(s.wall for s in ci) + setup
        print(f"CI's steps: make test-all {tests:.0f} s, with make docs {sum(s.wall for s in ci):.0f} s; "
              f"with {setup:.0f} s of set-up, .ci/run about {total:.0f} s (limit {CI_LIMIT} s)")
    for step in done:
        if not step.files:
            continue
        total = sum(step.files.values())
        print(f"\n{step.name}: {total:.0f} s of tests over {len(step.files)} files (both workers' time); "
              f"the {top} largest:")
        for name, seconds in sorted(step.files.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {seconds:8.1f} s  {100 * seconds / total:5.1f} %  {name}")


#: Where the suite's order comes from (tests/conftest.py reads it; ``--write-durations`` writes it).
DURATIONS = ROOT / "tests" / "durations.json"
#: Files lighter than this keep pytest-randomly's place (seconds summed over a file's tests in one tier).
DURATIONS_FLOOR = 10.0


def write_durations(done: list[Step]) -> None:
    """``tests/durations.json`` from CI's pytest step: each tier's files of at least ``DURATIONS_FLOOR`` s (a
    test's tier: marked slow or not, by pytest's own collection)."""
    step = next((s for s in done if s.name == "CI make test-all" and s.tests and s.status == 0), None)
    if step is None:
        print(f"--write-durations: no passing CI make test-all in this run (--steps ci runs it); "
              f"{DURATIONS.relative_to(ROOT)} left as it is")
        return
    slow = slow_tests()
    tiers: dict[str, dict[str, float]] = {"fast": defaultdict(float), "slow": defaultdict(float)}
    for nodeid, seconds in step.tests.items():
        tiers["slow" if nodeid in slow else "fast"][nodeid.split("::", 1)[0]] += seconds
    data: dict[str, object] = {
        "about": "Seconds each test file's tests took, summed, in each tier (fast: make test; slow: the tests "
                 "marked slow, which make test-all runs too), on 2 cores at CI's budget: tests/conftest.py sends "
                 "the heaviest files to pytest-xdist's workers first (a file weighs the tiers of it a session "
                 "runs). Files under 10 s are left out (they keep pytest-randomly's order). Rewrite with "
                 "bench/bench_ci.py --write-durations."}
    for tier, files in tiers.items():
        data[tier] = {name: round(seconds) for name, seconds in sorted(files.items()) if seconds >= DURATIONS_FLOOR}
    DURATIONS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DURATIONS.relative_to(ROOT)}: {len(data['fast'])} + {len(data['slow'])} files")  # type: ignore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="contributor,ci",
                        help="which to time, comma-separated: contributor (make test at the dev budget), "
                             "ci (CI's make test-all, make docs)")
    parser.add_argument("--top", type=int, default=15, help="how many of the slowest test files to list")
    parser.add_argument("--setup-seconds", type=float, default=250.0,
                        help="CI's set-up time to add to its total (apt, venv, npm ci, the mypyc build)")
    parser.add_argument("--pytest-args", default="", help="more arguments for each pytest step")
    parser.add_argument("--fresh-ci", action="store_true", help="also time bash .ci/run in a fresh clone")
    parser.add_argument("--write-durations", action="store_true",
                        help="write tests/durations.json (the order the heaviest test files start in) from CI's "
                             "pytest step of this run")
    args = parser.parse_args()
    chosen = {s.strip() for s in args.steps.split(",") if s.strip()}
    unknown = chosen - {"contributor", "ci"}
    if unknown:
        parser.error(f"--steps takes contributor and ci, not {', '.join(sorted(unknown))}")
    OUT.mkdir(parents=True, exist_ok=True)
    done = [run(step) for step in steps(chosen, args.pytest_args)]
    report(done, args.top, args.setup_seconds)
    if args.write_durations:
        write_durations(done)
    if args.fresh_ci:
        fresh_ci()
    return 0


if __name__ == "__main__":
    sys.exit(main())
