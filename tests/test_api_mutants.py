"""Test the tester on the extension API: the lockstep's ``ci`` profile must catch every mutant of
``tests/api_mutants.py`` (readiness, ``diagnose``, the ``after_commit`` hook), thanks to the ops
``ready``, ``diagnostics`` and ``crashAfterCommit`` of docs/protocol.md section 6.

As ``tests/test_conformance_mutants.py`` does for the storage mutants: each
scenario runs clean on the real ``SqliteDriver`` and diverges on its mutant
(so none is the original in disguise); the equivalent mutant agrees on every
scenario; then ``run_lockstep`` with ``lockstep_settings("ci")`` on each
mutant reports a divergence with a shrunk trace of at most
``MAX_SHRUNK_STEPS`` steps, which names the extension op it parted on.
"""

from __future__ import annotations

import time

import pytest

from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
from envreplica.conformance.replica import lockstep_settings, run_lockstep
from envreplica.conformance.replica import run as lockstep_run

from api_mutants import API_MUTANTS, EQUIVALENT_API_MUTANTS, READINESS_TOUR
from impl_mutants import ImplMutant
from mutant_play import describe, play

MAX_SHRUNK_STEPS = 12
#: The lockstep's post-catch budgets: counts, never seconds.
SHRINK_CALLS = lockstep_run.SHRINK_CALLS
MINIMIZE_REPLAYS = lockstep_run.MINIMIZE_REPLAYS

#: The op or field each mutant must be caught on (its shrunk trace's last step uses it).
CAUGHT_ON = {
    "ready_ignores_the_gate": "ready",
    "await_ready_returns_at_the_deadline": "ready",
    "diagnose_closed_gate_as_mismatch": "diagnostics",
    "after_commit_only_on_change": "crashAfterCommit",
}


def _agree(steps) -> bool:
    return all(s.agrees and s.same_state for s in steps)


def _ids(mutants) -> list:
    return [pytest.param(m, id=m.name) for m in mutants]


def test_each_mutant_names_the_op_it_needs():
    assert len(API_MUTANTS) >= 2 and {m.name for m in API_MUTANTS} == set(CAUGHT_ON)


@pytest.mark.parametrize("mutant", _ids(API_MUTANTS))
def test_scenario_is_clean_on_the_real_implementation(mutant: ImplMutant, tmp_path):
    steps = play(SqliteDriver(mutant.variant, tmp_path / "real.db", master_key=TEST_MASTER_KEY),
                 mutant.scenario, mutant.variant)
    assert _agree(steps), describe(steps)


@pytest.mark.parametrize("mutant", _ids(API_MUTANTS))
def test_each_mutant_is_observable_in_a_response(mutant: ImplMutant, tmp_path):
    steps = play(mutant.driver(mutant.variant, tmp_path / "mutant.db"), mutant.scenario, mutant.variant)
    parted = [s for s in steps if not s.agrees]
    assert parted, f"{mutant.name}: no response differs\n{describe(steps)}"
    request = parted[0].request
    assert CAUGHT_ON[mutant.name] in (request["op"],) + tuple(request), (mutant.name, request)


@pytest.mark.parametrize("name", list(EQUIVALENT_API_MUTANTS))
def test_equivalent_mutant_is_equivalent_through_the_adapter(name, tmp_path):
    mutant = EQUIVALENT_API_MUTANTS[name]
    for n, scenario in enumerate([READINESS_TOUR] + [m.scenario for m in API_MUTANTS]):
        steps = play(mutant.driver(mutant.variant, tmp_path / f"eq-{n}.db"), scenario, mutant.variant)
        assert _agree(steps), describe(steps)


@pytest.fixture
def budget(monkeypatch):
    monkeypatch.setattr(lockstep_run, "SHRINK_CALLS", SHRINK_CALLS, raising=True)
    monkeypatch.setattr(lockstep_run, "MINIMIZE_REPLAYS", MINIMIZE_REPLAYS, raising=True)


@pytest.mark.parametrize("mutant", _ids(API_MUTANTS))
def test_ci_profile_catches_mutant(mutant: ImplMutant, scratch, budget, tmp_path, capsys):
    started = time.perf_counter()
    report = run_lockstep(mutant.factory(scratch), variant=mutant.variant, settings=lockstep_settings("ci"),
                          out_dir=tmp_path / "trace")
    with capsys.disabled():
        print(f"\n  {mutant.name}: caught={not report.ok} after {report.found_after_examples} examples "
              f"({report.found_after_seconds or 0:.1f} s), shrunk to {report.shrunk_steps} steps, "
              f"{time.perf_counter() - started:.1f} s in all")
    assert not report.ok, f"{mutant.name} ({mutant.bug}) was not caught in {report.examples} examples"
    assert report.shrunk_steps is not None and report.shrunk_steps <= MAX_SHRUNK_STEPS, report.failure
    last = [line for line in report.failure.splitlines() if line.lstrip().startswith(f"#{report.shrunk_steps} ")]
    assert last and CAUGHT_ON[mutant.name] in last[0], report.failure  # parted on the extension it needs
