"""The paired writer migration's model check: the fixed steps pass, the seed's findings and each wrong
reading are found with their shortest traces, and every planted mutant is caught.

State-space counts are pinned: a change of the model that changes them must say so here.
"""

from __future__ import annotations

import dataclasses

import pytest

from envreplica.checker import migration as cm
from envreplica.cli.main import main
from envreplica.model import migration as mm
from envreplica.model.migration import ApplyReading, BackupReading, Fix, MigrationVariant, Reading, ReconcileReading
from envreplica.spec import migration as spec

from migration_mutants import MUTANTS

STUCK = spec.RECOVERABLE[0]


def _findings(suite: cm.SuiteRun) -> dict[str, int]:
    """Each violated property (the bounded liveness as ``STUCK``) and its shortest trace over the suite."""
    found: dict[str, int] = {}
    for r in suite.runs:
        for name, violation in r.result.violations.items():
            found[name] = min(found.get(name, violation.length), violation.length)
        if r.stuck is not None:
            found[STUCK] = min(found.get(STUCK, r.stuck.length), r.stuck.length)
    return found


@pytest.fixture(scope="module")
def fixed() -> cm.SuiteRun:
    return cm.run_suite(mm.suite("migration"))


def test_fixed_passes_and_witnesses_every_sometimes(fixed):
    assert fixed.ok, _findings(fixed)
    assert not fixed.missed
    for r in fixed.runs:
        assert r.result.complete and r.liveness.ok and r.liveness.settled > 0


def test_state_space_is_pinned(fixed):
    counts = {r.bounds.name: (r.result.states, r.result.depth, r.liveness.closure) for r in fixed.runs}
    assert counts == {"rerun": (2_580, 31, 6_054), "writers": (11_817, 34, 50_116)}


def test_each_bounds_of_the_suite_is_needed(fixed):
    """Neither bounds alone witnesses every "sometimes" property: the suite is the unit of a pass."""
    rerun, writers = fixed.runs
    assert "sometimes_fence_refuses_write" in rerun.missed and "sometimes_recovered_after_crash" in rerun.missed
    assert "sometimes_rerun_finds_partial" in writers.missed


def test_seed_findings_with_their_shortest_traces():
    found = _findings(cm.run_suite(mm.suite("migration", MigrationVariant.SEED)))
    assert found == {"never_result_and_recovery": 24, "no_recovery_over_a_completed_store": 25, STUCK: 11}


@pytest.mark.parametrize("fix, finding", [
    (Fix.RESULT_ENDS_RECOVERY, ("never_result_and_recovery", 24)),
    (Fix.UNAPPLIED_IS_UNCHANGED, (STUCK, 11)),
    (Fix.RESULT_ONLY_REOPENS, (STUCK, 30)),
], ids=lambda x: x.value if isinstance(x, Fix) else "")
def test_each_fix_is_needed(fix, finding):
    """Without any one fix, its finding comes back, at its own length."""
    suite = cm.run_suite(mm.suite("migration", fixes=frozenset(Fix) - {fix}))
    assert _findings(suite) == dict([finding])
    assert not suite.missed


@pytest.mark.parametrize("reading, findings, missed", [
    (Reading(backup=BackupReading.OVERWRITE),
     {"backups_hold_originals": 22, "result_means_both_migrated": 27, "result_evidence_is_the_originals": 27}, []),
    (Reading(backup=BackupReading.REFUSE), {}, ["sometimes_resumes_after_partial"]),
    (Reading(apply=ApplyReading.AGAIN), {}, ["sometimes_resumes_after_partial"]),
    (Reading(reconcile=ReconcileReading.EXACT), {STUCK: 20}, []),
], ids=str)
def test_what_the_seed_needs_of_the_modules_it_does_not_show(reading, findings, missed):
    """The seed needs a child's backup() to keep a backup that is there, its apply() to skip a migrated store
    and its reconcile() to read the migration's receipt: any other reading breaks a property, or a rerun
    after a crash between the two applies can no longer finish the migration (a "sometimes" never seen)."""
    suite = cm.run_suite(mm.suite("migration", reading=reading))
    assert _findings(suite) == findings
    assert suite.missed == missed


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_is_caught_with_a_short_trace(name, monkeypatch):
    table = dict(mm.STEPS)
    MUTANTS[name](table)
    monkeypatch.setattr(mm, "STEPS", table)
    suite = cm.run_suite(mm.suite("migration"), stop_on_first=True)
    found = _findings(suite)
    assert found, f"{name} passed the migration's model check"
    assert min(found.values()) <= 24, found


def test_stuck_trace_ends_in_a_stuck_state():
    run = cm.run(mm.suite("migration", MigrationVariant.SEED)[1])
    assert run.stuck is not None and run.stuck.steps[-1].state in run.liveness.stuck
    assert all(s.state not in run.liveness.stuck for s in run.stuck.steps[:-1])
    lines = cm.trace_lines(run.stuck)
    assert lines[0].startswith("  #0 init") and "writer v1 writes run -> landed" in lines[-2]


def test_crash_bounds_pass():
    """Two migrations and a recovery with a crash (the deep suite's first bounds)."""
    r = cm.run(mm.CRASH)
    assert r.safe and (r.result.states, r.result.depth) == (60_174, 37)
    assert r.missed == ["sometimes_fence_refuses_write"]  # no writes at these bounds


@pytest.mark.nightly
def test_deep_suite_passes():
    suite = cm.run_suite(mm.suite("migration-deep"))
    assert suite.ok, _findings(suite)
    assert [r.result.states for r in suite.runs] == [60_174, 321_402]


def test_cli_check_bounds_migration(capsys):
    assert main(["check", "--bounds", "migration"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "11,817" in out
    for prop in (*spec.INVARIANTS, *spec.STEP_PROPERTIES, *spec.SOMETIMES):
        assert prop.name in out  # every property listed, with its verdict
    assert "witnessed (rerun)" in out and "every_state_recoverable" in out
    assert main(["check", "--bounds", "migration", "--variant", "seed"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED never_result_and_recovery at bounds writers, 24 steps" in out
    assert "VIOLATED every_state_recoverable at bounds writers" in out and "11 steps" in out
    assert main(["check", "--bounds", "migration", "--variant", "fix-f1"]) == 2
    assert "seed or fixed" in capsys.readouterr().err


def test_unknown_migration_bounds_names_the_choices():
    with pytest.raises(mm.UnknownMigrationBounds, match="migration-deep"):
        mm.suite("nope")


@pytest.mark.nightly
def test_faults_suite_passes():
    """The environment's faults, one class per bounds, with the implementation's reading of the lock: safety and
    recoverability hold (the operator undoing each fault on the way out), every "sometimes" witnessed."""
    suite = cm.run_suite(mm.suite("migration-faults"))
    assert suite.ok, _findings(suite)
    assert [(r.result.states, r.liveness.closure) for r in suite.runs] == [
        (230_109, 257_213), (34_400, 153_289), (291_840, 380_629), (60_945, 81_814)]


def test_the_faults_suite_keeps_its_own_reading_of_the_lock():
    """``suite(..., reading=...)`` does not take the faults' suite's lock reading away (it is the implementation's)."""
    assert all(b.reading.lock is mm.LockReading.REFUSE for b in mm.suite("migration-faults", reading=Reading()))
    assert all(b.reading.lock is mm.LockReading.WAIT for b in mm.suite("migration"))


#: The smallest bounds where a result moved away matters: one migration, one recovery, the result moved away.
MOVED = mm.MigrationBounds("moved", migrations=1, recoveries=1, crashes=0, writes=0,
                           faults=frozenset({mm.Fault.MOVE_AWAY}), fault_actions=1)


def test_the_stores_proof_of_completion_is_needed_once_a_result_can_be_moved_away():
    """Issue 39: after a migration completed, its result moved away, a recovery restored both stores and lost every
    write since. With ``Fix.STORES_PROVE_COMPLETION`` every property holds; without it the recovery is selected
    over a store the migration completed, in a few steps."""
    fixed = cm.run_suite((MOVED,))
    assert not fixed.runs[0].result.violations and fixed.runs[0].stuck is None
    without = cm.run_suite((dataclasses.replace(MOVED, fixes=frozenset(Fix) - {Fix.STORES_PROVE_COMPLETION}),))
    assert _findings(without) == {"no_recovery_over_a_completed_store": 26}
    assert [r.result.states for r in (*fixed.runs, *without.runs)] == [1_242, 1_320]
