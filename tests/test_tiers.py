"""The suite's tiers (issue 41): what ``make test``, ``make test-slow``, ``make test-all`` and ``.ci/run`` run.

* ``make test`` (the fast tier, every test not marked slow or nightly) holds at least one test of every test
  file: a contributor's run before a commit touches every part;
* ``.ci/run`` runs ``make test-all``, which is ``make test`` (the README's command) over both tiers in one
  session (``TIER=all``: every test not marked nightly): nothing marked slow leaves CI;
* ``.ci/run`` finds the seeds by a path relative to the repository only (no machine path);
* the budget's name is checked before any test runs (``tests/budget.py``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import budget

ROOT = Path(__file__).resolve().parents[1]
FAST = "not nightly and not slow"


def _collected(marks: str) -> set[str]:
    """The test files holding a test that ``-m marks`` selects (pytest's own collection, in a subprocess)."""
    return set(_collected_in_order(marks))


@functools.lru_cache(maxsize=None)
def _collected_in_order(marks: str) -> tuple[str, ...]:
    """The test files ``-m marks`` selects, each once, in the order collection leaves them (a subprocess)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-p", "no:xdist", "--collect-only", "-q", "-m", marks, "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    files = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    return tuple(dict.fromkeys(files))


def test_the_heaviest_files_are_collected_first_and_durations_names_only_files_that_exist():
    """tests/durations.json orders the suite (tests/conftest.py): within each tier its files come first, heaviest
    first; a file it names that is gone (renamed, deleted) would silently lose its place, so it fails here."""
    data = json.loads((ROOT / "tests" / "durations.json").read_text(encoding="utf-8"))
    for tier, marks in (("fast", FAST), ("slow", "slow and not nightly")):
        weights = data[tier]
        gone = sorted(name for name in weights if not (ROOT / name).is_file())
        assert not gone, f"tests/durations.json names files that are not there ({tier}): {gone}"
        order = _collected_in_order(marks)
        weighted = [name for name in order if name in weights]
        assert weighted and order[:len(weighted)] == tuple(weighted), (tier, order[:len(weighted) + 2])
        assert [weights[n] for n in weighted] == sorted((weights[n] for n in weighted), reverse=True), tier


def test_make_test_holds_a_test_of_every_test_file():
    files = {f"tests/{path.name}" for path in (ROOT / "tests").glob("test_*.py")}
    missing = sorted(files - _collected(FAST))
    assert not missing, f"test files with no test in make test (every test marked slow or nightly): {missing}"


def _makefile_recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)*)", text, re.MULTILINE)
    assert found, f"the Makefile has no {target} target"
    return found.group(0)


def test_the_tiers_split_the_suite_by_the_slow_mark():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert '-m "$(TIER_MARKS_$(TIER))"' in _makefile_recipe("test")
    assert re.search(r"^TIER \?= fast$", text, re.MULTILINE)
    assert re.search(rf"^TIER_MARKS_fast := {FAST}$", text, re.MULTILINE)
    assert re.search(r"^TIER_MARKS_all := not nightly$", text, re.MULTILINE)
    assert '-m "slow and not nightly"' in _makefile_recipe("test-slow")
    assert re.search(r"^test-all:\n\t\$\(MAKE\) test TIER=all$", text, re.MULTILINE)
    assert re.search(rf"^test-all: export {budget.BUDGET_ENV} \?= ci$", text, re.MULTILINE)


def test_the_all_tier_is_the_fast_tier_and_the_slow_one():
    assert _collected_in_order("not nightly") and set(_collected("not nightly")) == (
        _collected(FAST) | _collected("slow and not nightly"))


def test_an_unknown_tier_is_refused_by_make_with_one_line():
    done = subprocess.run(["make", "-n", "test", "TIER=weekly"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert "TIER=weekly names no tier of make test: fast (the default) or all" in done.stderr, done.stderr


def test_ci_runs_make_test_over_both_tiers():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if line.strip().startswith("make ")]
    tests = [line.split()[1] for line in lines if line.split()[1] in ("test", "test-slow", "test-all")]
    assert tests == ["test-all"], lines
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make test " in readme and "make test-all" in readme


def test_ci_finds_the_seeds_by_the_repository_relative_path_only():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    finds = [line for line in script.splitlines() if "seeds/" in line and "ls " in line]
    assert finds, "no line of .ci/run finds the seeds"
    for line in finds:  # every path it lists is relative: no machine's own folder
        listed = line.split("ls ", 1)[1].split("2>")[0].split()
        assert listed and all(not p.startswith("/") for p in listed), f"a machine path in .ci/run: {line.strip()}"


def test_an_unknown_budget_is_refused_before_any_test(tmp_path):
    env = {**os.environ, budget.BUDGET_ENV: "weekly"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                           "tests/test_tiers.py", "-k", "repository_relative"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ENVREPLICA_TEST_BUDGET='weekly' names no test budget" in done.stdout + done.stderr


def test_a_battery_budget_is_its_dev_count_only_under_dev(monkeypatch):
    monkeypatch.setattr(budget, "BUDGET", "dev")
    assert budget.examples(ci=400, dev=100) == 100
    for name in ("ci", "nightly"):
        monkeypatch.setattr(budget, "BUDGET", name)
        assert budget.examples(ci=400, dev=100) == 400
