"""Every predicate of ``spec.migration``, on small hand-built states that break it and states that keep it,
and each step property through the checker (``checker.bfs.check``) with a deliberately wrong transition.

The last part is what the per-state tests cannot show: the checker evaluates a step property only on the
action kinds and result types its ``Property`` lists (``actions``, ``results``; ``checker.bfs._applies``). A
filter narrower than what the predicate can fail on hides violations: a step that publishes a result and then
refuses, a write that changes a store and says ``Done``. Each such hole is a one-step model here, caught
through the checker, and shown to be one the earlier filter skipped. Then, on every transition of the
``migration`` bounds, no filter skips a step where its property would fail.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

import pytest

from envreplica.checker.bfs import Model, _applies, check, reachable
from envreplica.checker import migration as cm
from envreplica.model import migration as mm
from envreplica.model.migration import (
    Evidence,
    Files,
    Intent,
    MigrationState,
    Pc,
    Proc,
    RecoveryRequest,
    Role,
    StoreState,
)
from envreplica.spec import migration as spec
from envreplica.spec.migration import (
    NEW_VERSION,
    OLD_VERSION,
    Admission,
    Base,
    Crashed,
    Data,
    Done,
    Image,
    Landed,
    Refusal,
    Refused,
    Status,
    before_migration,
    migrated,
    reconcile,
    reconcile_child,
)

OPEN, MAINT, RECOV = Admission.OPEN, Admission.MAINTENANCE, Admission.RECOVERY
#: A store's content: the original, with a write of the old version, migrated, migrated with a write of the
#: new version since, migrated twice (other), and an original that is at the new version already.
O = Image(OLD_VERSION, Data(Base.ORIGINAL))
O1 = Image(OLD_VERSION, Data(Base.ORIGINAL, 1))
M = migrated(O)
M1 = Image(NEW_VERSION, Data(Base.MIGRATED, 1))
X = migrated(M)
V2_ORIGINAL = Image(NEW_VERSION, Data(Base.ORIGINAL))
INTENT = Intent(0, (O, O))


def store(img: Image, admission: Admission = OPEN, backup: Optional[Image] = None) -> StoreState:
    return StoreState(img.version, img.data, admission, backup, False)


def state(run: StoreState, resource: StoreState, *, intent: Optional[Intent] = INTENT,
          result: Optional[Evidence] = None, recovery: Optional[tuple[bool, bool]] = None,
          recovery_result: bool = False, procs: tuple[Proc, ...] = (),
          original: tuple[Optional[Image], Optional[Image]] = (None, None)) -> MigrationState:
    files = Files(intent=intent, inputs=(intent is not None,) * 2, result=result,
                  recovery=None if recovery is None else RecoveryRequest(1, recovery),
                  recovery_result=recovery_result)
    return MigrationState(stores=(run, resource), files=files, procs=procs, original=original)


MIGRATE = Proc(0, Role.MIGRATE, Pc.PUBLISH_RESULT, lock=True, intent=INTENT)
RECOVER = Proc(1, Role.RECOVER, Pc.RESTORE_RUN, lock=True, intent=INTENT)
STEP_0, STEP_1 = mm.Step(0), mm.Step(1)
#: Both stores under maintenance, backed up, migrated, verified: the result may be published.
VERIFIED = state(store(M, MAINT, O), store(M, MAINT, O), procs=(MIGRATE,), original=(O, O))
#: The result published, maintenance completed on both stores.
COMPLETED = state(store(M, OPEN, O), store(M, OPEN, O), result=Evidence((O, O)), original=(O, O))
#: A recovery selected (run restores, resource judged unchanged), both stores fenced, run not restored yet.
FENCED = state(store(M, RECOV, O), store(O, RECOV), recovery=(True, False), procs=(RECOVER,), original=(O, O))
#: ... and both restored: the recovery result may be published.
RESTORED = replace(FENCED, stores=(store(O, RECOV, O), store(O, RECOV)))


def publish_result(st: MigrationState, evidence: Evidence = Evidence((O, O))) -> MigrationState:
    return replace(st, files=replace(st.files, result=evidence))


def publish_recovery_result(st: MigrationState) -> MigrationState:
    return replace(st, files=replace(st.files, recovery_result=True))


def with_store(st: MigrationState, i: int, new: StoreState) -> MigrationState:
    return replace(st, stores=tuple(new if j == i else s for j, s in enumerate(st.stores)))


# ---------------------------------------------------------------------------
# Each predicate on hand-built states: (property name, its arguments, expected verdict, what the case is)
# ---------------------------------------------------------------------------

CASES: list[tuple[str, tuple[Any, ...], bool, str]] = [
    # invariants
    ("never_result_and_recovery", (state(store(M), store(M), result=Evidence((O, O)), recovery=(True, True)),),
     False, "a result and a recovery"),
    ("never_result_and_recovery", (COMPLETED,), True, "a result alone"),
    ("never_result_and_recovery", (FENCED,), True, "a recovery alone"),
    ("no_recovery_over_a_completed_store", (state(store(M1), store(M, MAINT, O), recovery=(True, True)),), False,
     "a recovery selected while run, migrated with a write since, is open again (its result moved away)"),
    ("no_recovery_over_a_completed_store", (state(store(M, RECOV, O), store(M, MAINT, O), recovery=(True, True)),),
     True, "a recovery over stores fenced since the migration applied them"),
    ("no_recovery_over_a_completed_store", (COMPLETED,), True, "a completed migration, no recovery"),
    ("no_recovery_over_a_completed_store", (state(store(O), store(O), recovery=(False, False),
                                                  recovery_result=True),), True, "a completed recovery, reopened"),
    ("backups_hold_originals", (VERIFIED,), True, "each backup is its store as first fenced"),
    ("backups_hold_originals", (with_store(VERIFIED, 1, store(M, MAINT, M)),), False,
     "a backup of migrated content"),
    ("backups_hold_originals", (state(store(O, OPEN, O), store(O)),), False, "a backup of a store never fenced"),
    ("backups_hold_originals", (state(store(O), store(O)),), True, "no backup"),
    ("result_evidence_is_the_originals", (COMPLETED,), True, "the evidence names the originals"),
    ("result_evidence_is_the_originals", (replace(COMPLETED, files=replace(COMPLETED.files, result=Evidence((M, O)))),),
     False, "the evidence names a migrated backup"),
    ("result_evidence_is_the_originals", (state(store(M), store(M), result=Evidence((None, None))),), False,
     "the evidence names no backup, the stores never fenced (the earlier predicate passed it: None == None)"),
    ("result_evidence_is_the_originals", (state(store(O), store(O)),), True, "no result"),
    # step properties
    ("result_means_both_migrated", (VERIFIED, STEP_0, Done(), publish_result(VERIFIED)), True,
     "published over both migrated and backed up"),
    ("result_means_both_migrated", (with_store(VERIFIED, 1, store(O, MAINT, O)), STEP_0, Done(),
                                    publish_result(with_store(VERIFIED, 1, store(O, MAINT, O)))), False,
     "published with resource still at version 1"),
    ("result_means_both_migrated", (with_store(VERIFIED, 0, store(M, MAINT)), STEP_0, Done(),
                                    publish_result(with_store(VERIFIED, 0, store(M, MAINT)))), False,
     "published with run never backed up"),
    ("result_means_both_migrated", (with_store(VERIFIED, 0, store(X, MAINT, O)), STEP_0, Done(),
                                    publish_result(with_store(VERIFIED, 0, store(X, MAINT, O)))), False,
     "published with run migrated twice"),
    ("result_means_both_migrated", (publish_result(with_store(VERIFIED, 1, store(O, MAINT, O)), Evidence((O, None))),
                                    STEP_0, Done(), publish_result(with_store(VERIFIED, 1, store(O, MAINT, O)))),
     False, "a published result replaced by other content while resource is at version 1"),
    ("result_means_both_migrated", (COMPLETED, STEP_0, Done(), with_store(COMPLETED, 0, store(O))), True,
     "the result was there already (this step published nothing)"),
    ("result_means_both_migrated", (with_store(VERIFIED, 0, store(M1, MAINT, O)), STEP_0, Done(),
                                    publish_result(with_store(VERIFIED, 0, store(M1, MAINT, O)))), True,
     "published again after it was moved away: run kept a write of the new version landed while it was open"),
    ("result_means_both_migrated", (with_store(VERIFIED, 0, store(O1, MAINT, O)), STEP_0, Done(),
                                    publish_result(with_store(VERIFIED, 0, store(O1, MAINT, O)))), False,
     "published with run holding its original and a write of the old version"),
    ("writes_are_fenced", (state(store(O), store(O)), mm.Write(0, OLD_VERSION), Landed(),
                           state(store(O1), store(O))), True, "a version-1 write on an open version-1 store"),
    ("writes_are_fenced", (state(store(M), store(M)), mm.Write(0, OLD_VERSION), Landed(),
                           state(store(Image(NEW_VERSION, Data(Base.MIGRATED, 1))), store(M))), False,
     "a version-1 write landing on an open version-2 store"),
    ("writes_are_fenced", (state(store(O, MAINT), store(O)), mm.Write(0, OLD_VERSION), Landed(),
                           state(store(O1, MAINT), store(O))), False, "a write landing on a store under maintenance"),
    ("writes_are_fenced", (state(store(O, RECOV), store(O)), mm.Write(0, OLD_VERSION), Done(),
                           state(store(O1, RECOV), store(O))), False,
     "a write that changes a store under recovery and says Done"),
    ("writes_are_fenced", (state(store(O, MAINT), store(O)), mm.Write(0, OLD_VERSION),
                           Refused(Refusal.ADMISSION_CLOSED), state(store(O1, MAINT), store(O))), False,
     "a write refused that changed the store all the same"),
    ("writes_are_fenced", (state(store(O, MAINT), store(O)), mm.Write(0, OLD_VERSION),
                           Refused(Refusal.ADMISSION_CLOSED), state(store(O, MAINT), store(O))), True,
     "a write refused, nothing changed"),
    ("writes_are_fenced", (state(store(O), store(O, MAINT)), mm.Write(0, OLD_VERSION), Landed(),
                           state(store(O1), store(O1, MAINT))), False,
     "a write on run that also lands on resource, under maintenance"),
    ("writes_are_fenced", (VERIFIED, STEP_0, Landed(), VERIFIED), False, "a step of an invocation that says Landed"),
    ("writes_are_fenced", (FENCED, STEP_1, Done(), RESTORED), True, "a restore: not a foreign write"),
    ("recovery_restores_before", (RESTORED, STEP_1, Done(), publish_recovery_result(RESTORED)), True,
     "each store as first fenced"),
    ("recovery_restores_before", (FENCED, STEP_1, Done(), publish_recovery_result(FENCED)), False,
     "run still migrated"),
    ("recovery_restores_before", (replace(RESTORED, original=(V2_ORIGINAL, O)), STEP_1, Done(),
                                  publish_recovery_result(with_store(replace(RESTORED, original=(V2_ORIGINAL, O)), 0,
                                                                     store(V2_ORIGINAL, RECOV, V2_ORIGINAL)))),
     False, "run as first fenced, but that was at the new version"),
    ("recovery_restores_before", (FENCED, STEP_1, Done(), FENCED), True, "no recovery result published"),
    ("recovery_restores_only_changed_stores", (FENCED, STEP_1, Done(), RESTORED), True,
     "run, changed by the migration, restored"),
    ("recovery_restores_only_changed_stores", (RESTORED, STEP_1, Done(), with_store(RESTORED, 1, store(O1, RECOV))),
     False, "resource, unchanged, written over"),
    ("recovery_restores_only_changed_stores", (with_store(RESTORED, 1, store(O, MAINT)), STEP_1, Done(),
                                               with_store(RESTORED, 1, store(O1, RECOV))), False,
     "resource, unchanged, fenced and written over in one step"),
    ("recovery_restores_only_changed_stores",
     (with_store(replace(RESTORED, files=replace(RESTORED.files, recovery=None)), 1, store(O, OPEN)), STEP_1,
      Done(), with_store(RESTORED, 1, store(O1, RECOV))), False,
     "resource, unchanged, written over by the step that selects the recovery"),
    ("recovery_restores_only_changed_stores", (with_store(FENCED, 1, store(O)), mm.Write(1, OLD_VERSION), Landed(),
                                               with_store(FENCED, 1, store(O1))), True,
     "a foreign write to an open store while a recovery is selected"),
    ("recovery_restores_only_changed_stores", (state(store(O, RECOV), store(O)), STEP_1, Done(),
                                               state(store(M, RECOV), store(O))), True, "no recovery selected"),
    # sometimes
    ("sometimes_migration_completes", (COMPLETED,), True, "a result, both stores open"),
    ("sometimes_migration_completes", (with_store(COMPLETED, 1, store(M, MAINT, O)),), False,
     "a result, resource under maintenance"),
    ("sometimes_migration_completes", (VERIFIED,), False, "no result"),
    ("sometimes_recovery_restores", (publish_recovery_result(RESTORED),), True, "completed, run restored"),
    ("sometimes_recovery_restores", (state(store(O), store(O), recovery=(False, False), recovery_result=True),),
     False, "completed, nothing restored"),
    ("sometimes_recovery_restores", (RESTORED,), False, "not completed"),
    ("sometimes_recovery_keeps_unchanged", (publish_recovery_result(RESTORED),), True,
     "completed, run restored and resource unchanged"),
    ("sometimes_recovery_keeps_unchanged", (state(store(O), store(O), recovery=(True, True), recovery_result=True),),
     False, "completed, both restored"),
    ("sometimes_recovery_keeps_unchanged", (RESTORED,), False, "not completed"),
    ("sometimes_rerun_finds_partial", (VERIFIED, STEP_0, Done(Status.PARTIAL.value), VERIFIED), True,
     "a reconcile found partial"),
    ("sometimes_rerun_finds_partial", (VERIFIED, STEP_0, Done(Status.APPLIED.value), VERIFIED), False,
     "a reconcile found applied"),
    ("sometimes_fence_refuses_write", (FENCED, mm.Write(0, 1), Refused(Refusal.ADMISSION_CLOSED), FENCED), True,
     "refused: under recovery"),
    ("sometimes_fence_refuses_write", (COMPLETED, mm.Write(0, 1), Refused(Refusal.WRITER_INCOMPATIBLE), COMPLETED),
     False, "refused: another contract version"),
    ("sometimes_crash", (VERIFIED, mm.Crash(0), Crashed(), replace(VERIFIED, procs=())), True,
     "a crash with a backup written"),
    ("sometimes_crash", (state(store(O), store(O), procs=(MIGRATE,)), mm.Crash(0), Crashed(),
                         state(store(O), store(O))), False, "a crash before any backup"),
    ("sometimes_crash", (VERIFIED, STEP_0, Done(), VERIFIED), False, "no crash"),
    ("sometimes_recovered_after_crash", ((VERIFIED, mm.Crash(0), Crashed(), VERIFIED), RESTORED, STEP_1, Done(),
                                         publish_recovery_result(RESTORED)), True, "the recovery result published"),
    ("sometimes_recovered_after_crash", ((VERIFIED, mm.Crash(0), Crashed(), VERIFIED), RESTORED, STEP_1, Done(),
                                         RESTORED), False, "nothing published"),
    ("sometimes_resumes_after_partial", ((VERIFIED, STEP_0, Done("partial"), VERIFIED), VERIFIED, STEP_0, Done(),
                                         publish_result(VERIFIED)), True, "the result published"),
    ("sometimes_resumes_after_partial", ((VERIFIED, STEP_0, Done("partial"), VERIFIED), COMPLETED, STEP_0, Done(),
                                         COMPLETED), False, "it was there already"),
]
PROPERTIES = {p.name: p for p in (*spec.INVARIANTS, *spec.STEP_PROPERTIES, *spec.SOMETIMES)}


@pytest.mark.parametrize("name, args, expected, case", CASES, ids=[f"{c[0]}: {c[3]}" for c in CASES])
def test_predicate_on_a_hand_built_state(name, args, expected, case):
    assert PROPERTIES[name].check(*args) is expected


def test_every_property_is_seen_to_hold_and_to_fail():
    """No predicate of the tables goes untested, and each is seen both True and False."""
    verdicts = {name: {expected for n, _, expected, _ in CASES if n == name} for name in PROPERTIES}
    assert verdicts == {name: {True, False} for name in PROPERTIES}


def test_each_statement_is_one_line_naming_the_property():
    for prop in PROPERTIES.values():
        doc = (prop.check.__doc__ or "").strip()
        assert doc and "\n" not in doc and prop.statement == doc, prop.name


# ---------------------------------------------------------------------------
# reconcile, before_migration
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("source, now, receipt, expected", [
    (O, O, False, Status.NOT_APPLIED),
    (O, M, False, Status.APPLIED),
    (O, M1, False, Status.UNKNOWN),  # a write of the new version since: not its source migrated, exactly
    (O, M1, True, Status.APPLIED),  # ... but the store records the migration
    (O, O1, True, Status.UNKNOWN),  # a write of the old version since the request: neither
    (O, X, True, Status.UNKNOWN),  # migrated twice
    (O, V2_ORIGINAL, True, Status.UNKNOWN),  # the new version, not migrated
    (O1, M, True, Status.UNKNOWN),  # fewer writes than its source had: not this source migrated
    (O1, migrated(O1), False, Status.APPLIED),
])
def test_reconcile_child(source, now, receipt, expected):
    assert reconcile_child(source, now, receipt) is expected


@pytest.mark.parametrize("images, expected", [
    ((O, O), Status.NOT_APPLIED),
    ((M, O), Status.PARTIAL),
    ((O, M), Status.PARTIAL),
    ((M, M), Status.APPLIED),
    ((M, X), Status.UNKNOWN),
    ((O, O1), Status.UNKNOWN),  # an unknown child makes the pair unknown, even beside a store not applied
])
def test_reconcile(images, expected):
    assert reconcile((O, O), images) is expected


def test_reconcile_refuses_pairs_of_different_lengths():
    with pytest.raises(ValueError):
        reconcile((O, O), (M,))


def test_before_migration():
    assert before_migration(state(store(M1), store(O1), original=(O, None)), 0) == O  # as first fenced
    assert before_migration(state(store(M1), store(O1), original=(O, None)), 1) == O  # never fenced: its source
    assert before_migration(state(store(O1), store(O), intent=Intent(0, (O1, O)), original=(None, None)), 0) == O1
    assert before_migration(state(store(O), store(O), intent=None), 0) is None  # nothing prepared


# ---------------------------------------------------------------------------
# settled: what the bounded liveness check walks back from
# ---------------------------------------------------------------------------

SETTLED_CASES: list[tuple[MigrationState, bool, str]] = [
    (state(store(O), store(O), intent=None), True, "nothing ever ran"),
    (state(store(O1), store(O)), True, "a request published, never applied; an old writer wrote since"),
    (COMPLETED, True, "a result, both migrated and open"),
    (with_store(COMPLETED, 0, store(M1, OPEN, O)), True, "a result; a new writer wrote since run reopened"),
    (state(store(O, OPEN, O), store(O), recovery=(True, False), recovery_result=True, original=(O, O)), True,
     "a recovery completed"),
    (replace(COMPLETED, procs=(MIGRATE,)), False, "an invocation still running"),
    (with_store(COMPLETED, 1, store(M, MAINT, O)), False, "resource still under maintenance"),
    (state(store(M, OPEN, O), store(O, OPEN, O), original=(O, O)), False,
     "half migrated, open, nothing running, no result"),
    (with_store(COMPLETED, 1, store(O, OPEN, O)), False, "half migrated, open, nothing running, with a result"),
    (state(store(O, OPEN, O), store(O, OPEN, O), result=Evidence((O, O)), recovery=(True, True),
           recovery_result=True, original=(O, O)), True,
     "a result, and both restored by a recovery after it (F4: never_result_and_recovery reports it)"),
    (state(store(M, OPEN, O), store(O, OPEN, O), result=Evidence((O, O)), recovery=(False, True),
           recovery_result=True, original=(O, O)), False,
     "a result, and a recovery after it completed, with run still migrated"),
    (replace(COMPLETED, files=replace(COMPLETED.files, recovery=RecoveryRequest(1, (True, True)))), False,
     "a result, and a recovery selected that will restore both"),
    (with_store(COMPLETED, 0, store(X, OPEN, O)), False, "a result; run migrated twice"),
    (with_store(COMPLETED, 0, store(V2_ORIGINAL, OPEN, O)), False, "a result; run at the new version, not migrated"),
    (state(store(O, OPEN, O), store(O), recovery=(True, False), original=(O, O)), False,
     "a recovery selected, not completed"),
    (state(store(Image(OLD_VERSION, Data(Base.MIGRATED)), OPEN, O), store(O), recovery=(True, False),
           recovery_result=True, original=(O, O)), False, "at the old version, holding migrated data"),
]


def assert_settled_right(settled: Callable[[Any], bool]) -> None:
    """``settled`` agrees with every case of ``SETTLED_CASES`` (an AssertionError naming the first it does not)."""
    for st, expected, case in SETTLED_CASES:
        assert settled(st) is expected, f"settled is {not expected} for: {case}"


def test_settled():
    assert_settled_right(spec.settled)


def test_a_wrong_settled_is_caught():
    """The earlier ``settled``: any published result counted, whatever the stores held. These cases catch it."""

    def settled_whenever_a_result(st: Any) -> bool:
        if st.procs or any(s.admission is not Admission.OPEN for s in st.stores):
            return False
        return st.files.result is not None or all(s.version == OLD_VERSION for s in st.stores)

    with pytest.raises(AssertionError, match="half migrated, open, nothing running, with a result"):
        assert_settled_right(settled_whenever_a_result)


# ---------------------------------------------------------------------------
# Through the checker: one wrong transition each, and the property that must catch it
# ---------------------------------------------------------------------------


def one_step(pre: MigrationState, action: object, result: object, post: MigrationState,
             step_properties: Optional[tuple[Any, ...]] = None) -> Model[MigrationState]:
    """A model with one transition, ``pre -(action)-> post`` returning ``result``, and spec.migration's tables."""
    return Model(init=lambda: pre, enabled=lambda st: [action] if st == pre else [],
                 next=lambda st, a: (post, result), invariants=spec.INVARIANTS,
                 step_properties=spec.STEP_PROPERTIES if step_properties is None else step_properties)


#: (the property that must catch it, pre, action, result, post, the filter the property had before or None, case)
HOLES: list[tuple[str, MigrationState, object, object, MigrationState, Optional[tuple[type, ...]], str]] = [
    ("result_means_both_migrated", with_store(VERIFIED, 1, store(O, MAINT, O)), STEP_0,
     Refused(Refusal.VERIFICATION_INCOMPLETE), publish_result(with_store(VERIFIED, 1, store(O, MAINT, O))), (Done,),
     "a result published over a store at version 1 by a step that then refuses"),
    ("result_means_both_migrated", with_store(VERIFIED, 1, store(O, MAINT, O)), STEP_0, Crashed(),
     publish_result(with_store(replace(VERIFIED, procs=()), 1, store(O, MAINT, O))), (Done,),
     "a result published over a store at version 1 by a crash"),
    ("writes_are_fenced", state(store(M), store(M)), mm.Write(0, OLD_VERSION), Landed(),
     state(store(Image(NEW_VERSION, Data(Base.MIGRATED, 1))), store(M)), None,
     "a version-1 write landing on an open version-2 store (caught before too)"),
    ("writes_are_fenced", state(store(O, MAINT), store(O)), mm.Write(0, OLD_VERSION), Done(),
     state(store(O1, MAINT), store(O)), (Landed,), "a write that changes a store under maintenance and says Done"),
    ("writes_are_fenced", state(store(O, RECOV), store(O)), mm.Write(0, OLD_VERSION),
     Refused(Refusal.ADMISSION_CLOSED), state(store(O1, RECOV), store(O)), (Landed,),
     "a write refused by the fence that changed the store all the same"),
    ("writes_are_fenced", state(store(M), store(M)), mm.Write(0, OLD_VERSION), Refused(Refusal.WRITER_INCOMPATIBLE),
     state(store(Image(NEW_VERSION, Data(Base.MIGRATED, 1))), store(M)), (Landed,),
     "a version-1 write refused as incompatible that changed a version-2 store"),
    ("recovery_restores_before", FENCED, STEP_1, Refused(Refusal.STORE_NOT_ORIGINAL),
     replace(publish_recovery_result(FENCED), procs=()), (Done,),
     "the recovery result published over a store still migrated, by a step that then refuses"),
    ("recovery_restores_before", FENCED, mm.Crash(1), Crashed(), replace(publish_recovery_result(FENCED), procs=()),
     (Done,), "the recovery result published by a crash"),
    ("recovery_restores_only_changed_stores", RESTORED, STEP_1, Refused(Refusal.DRAIN),
     replace(with_store(RESTORED, 1, store(O1, RECOV)), procs=()), (Done,),
     "an unchanged store written over by a restore that then refuses"),
    ("recovery_restores_only_changed_stores", RESTORED, mm.Crash(1), Crashed(),
     replace(with_store(RESTORED, 1, store(O1, RECOV)), procs=()), (Done,),
     "an unchanged store written over as the recovery crashes"),
]


@pytest.mark.parametrize("name, pre, action, result, post, old_filter, case", HOLES, ids=[h[-1] for h in HOLES])
def test_a_wrong_transition_is_caught_through_the_checker(name, pre, action, result, post, old_filter, case):
    found = check(one_step(pre, action, result, post))
    assert found.complete and found.transitions == 1
    assert set(found.violations) == {name}, case
    assert found.violations[name].steps[-1].state == post and found.violations[name].length == 1
    if old_filter is not None:
        # The hole was the filter: with the one the property had, the checker never evaluates it on this step.
        narrowed = spec.Property(name, PROPERTIES[name].check, "step", results=old_filter)
        assert not check(one_step(pre, action, result, post, step_properties=(narrowed,))).violations


def test_no_step_property_is_filtered_out_of_the_wrong_transitions():
    """Each filter of the tables lets every hole's step through (a filter added later must keep them)."""
    for name, _, action, result, _, _, case in HOLES:
        assert _applies(PROPERTIES[name], getattr(action, "kind", None), type(result)), case


def _transitions(cfg: mm.MigrationBounds):
    for st in reachable(cm.build_model(cfg)):
        for action in mm.enabled(cfg, st):
            nxt, res = mm.next_state(cfg, st, action)
            yield st, action, res, nxt


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(mm.MigrationVariant), ids=lambda v: v.value)
def test_filters_hide_nothing_on_the_migration_bounds(variant):
    """On every transition of the ``migration`` bounds, wherever a filter skips a step property it holds, and
    wherever one skips a sometimes-step property it is not witnessed: skipping changes no verdict."""
    filtered = [p for p in (*spec.STEP_PROPERTIES, *spec.SOMETIMES) if p.kind in ("step", "sometimes-step")
                and (p.actions is not None or p.results is not None)]
    skipped = 0
    for cfg in mm.suite("migration", variant):
        for pre, action, res, post in _transitions(cfg):
            for prop in filtered:
                if not _applies(prop, action.kind, type(res)):
                    skipped += 1
                    assert prop.check(pre, action, res, post) is (prop.kind == "step"), (prop.name, action, res)
    assert skipped > 0  # the sometimes-step filters skip most steps: the loop above ran
