"""The suite's test budget: how many examples a battery runs, by tier; counts only, never the clock.

``BUDGET`` is ``ENVREPLICA_TEST_BUDGET`` when set, else ``ci`` under ``CI``, else ``dev``:

* ``dev``: a contributor's ``make test`` (Hypothesis's ``dev`` profile, 50 examples a test; the batteries
  below at their ``dev`` counts);
* ``ci``: CI's counts (``.ci/run``, and ``make test-all`` on any machine: Hypothesis's ``ci`` profile, 200
  derandomized examples a test; the batteries at their ``ci`` counts);
* ``nightly``: ``make nightly`` (Hypothesis's 5,000; the batteries at their ``ci`` counts).

A battery names both counts with ``examples(ci=..., dev=...)``. Each count is one at which the battery still
catches what it asserts it catches (its mutants): a smaller ``dev`` count trades only the examples beyond them.
Leaves out on purpose: any budget in seconds (a busy machine passes what an idle one passes, only later).
"""

from __future__ import annotations

import os

import pytest

#: The environment variable that names the budget (``make test-all`` sets it to ``ci``).
BUDGET_ENV = "ENVREPLICA_TEST_BUDGET"
#: The budgets, each a Hypothesis profile of ``tests/conftest.py``.
BUDGETS = ("dev", "ci", "nightly")


def _budget() -> str:
    named = os.environ.get(BUDGET_ENV)
    if named is None:
        return "ci" if os.environ.get("CI") else "dev"
    return named


#: The budget this process runs at (``check`` refuses a name outside ``BUDGETS`` before any test runs).
BUDGET = _budget()


def check() -> None:
    """Refuses an unknown budget name (pytest's usage error: one line, exit 4)."""
    if BUDGET not in BUDGETS:
        raise pytest.UsageError(f"{BUDGET_ENV}={BUDGET!r} names no test budget; it takes one of "
                                f"{', '.join(BUDGETS)} (unset: ci under CI, else dev)")


def examples(ci: int, dev: int) -> int:
    """A battery's example count at this budget: ``dev`` under ``make test``, ``ci`` under CI and nightly."""
    if dev > ci:
        raise ValueError(f"a dev budget above CI's ({dev} > {ci}) would make make test catch what CI does not")
    return dev if BUDGET == "dev" else ci
