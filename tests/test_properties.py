"""``envreplica.spec.properties``: every property rejects a hand-built violation and accepts a near twin.

Each invariant gets a ``(bad_state, good_state)`` pair that differ in one
thing; each step property gets a ``(pre, action, result, post)`` that breaks
it and one that keeps it, the good one produced by the model's own ``step``
wherever the model can produce it. Completeness tests tie the tables to
``INVARIANTS`` and ``STEP_PROPERTIES``, so a new property without a case
fails here. End-to-end tests run real operations through
``envreplica.model.actions.step`` and check every property on every state
and step along the way.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from envreplica.model.actions import (
    Begin,
    CloseGate,
    Commit,
    CrashAfter,
    Deliver,
    Page,
    Read,
    Restart,
    Resume,
    StoreOff,
    run_recording_commits,
    run_until_crash,
    step,
)
from envreplica.model.fmap import EMPTY, FMap
from envreplica.model.replica import read_snapshot
from envreplica.model.state import (
    INITIAL,
    Authority,
    LiveRow,
    ModelConfig,
    Receipt,
    StageProject,
    StageRow,
    State,
    StoredValue,
)
from envreplica.model.store import Found, staged_envelope
from envreplica.spec import properties as P
from envreplica.spec.domain import (
    ApplyFrame,
    ApplyOk,
    ApplyRefused,
    BeginFrame,
    BeginResult,
    BindOmit,
    BindingState,
    CommitFrame,
    CommitOk,
    Crashed,
    Cursor,
    Done,
    Failed,
    Head,
    INSTALLED,
    MatKind,
    PageFrame,
    PageOk,
    PageRefused,
    Pending,
    ProjectVersion,
    RecordResult,
    RefusalCode,
    Snapshot,
    StagedRef,
    UnavailableReason,
    WithheldReason,
    unavailable,
    withheld,
)
from envreplica.spec.gate import Gate

CFG = ModelConfig()

ORG = "org"
STREAM = "s1"
ATTEMPT = "a1"
PROJECT = "p1"
KEY = "API_KEY"
EPOCHS = (1, 2)

UUID_1 = "0f8fad5b-d9cb-469f-a165-70867728950e"
UUID_2 = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
REF_1 = StagedRef(UUID_1)
REF_2 = StagedRef(UUID_2)

#: A first save (revision 1, generation 1) under kept epoch 1, bound normally.
REC = BindingState(KEY, Head(1, 1, False, REF_1), None, 1, 0)
#: Its rotation (generation 2, a new staged value).
REC_ROT = BindingState(KEY, Head(1, 2, False, REF_2), None, 1, 0)
#: Its deletion (revision and generation move, tombstone).
REC_DEL = BindingState(KEY, Head(2, 2, True, None), None, 1, 0)

VAL = StoredValue(1, 1, REF_1, "secret")
VAL_ROT = StoredValue(1, 2, REF_2, "rotated")

LIVE_K = (PROJECT, KEY)
STAGE_K = (ATTEMPT, PROJECT, KEY)


def authority(gate: Gate, *, attempt=None, applied=0, epochs=EPOCHS, org=ORG, stream=STREAM) -> Authority:
    return Authority(gate, stream, applied, attempt, org, epochs)


#: Open, serving one installed value; nothing consumed yet.
OPEN = State(
    authority=authority(Gate.OPEN),
    projects=FMap({PROJECT: 1}),
    records=FMap({LIVE_K: LiveRow(REC, INSTALLED)}),
    values=FMap({LIVE_K: VAL}),
)

#: An attempt whose staged view (the rotated record, installed) is complete at version 2.
STAGING = State(
    authority=authority(Gate.STAGING, attempt=ATTEMPT),
    projects=OPEN.projects,
    records=OPEN.records,
    values=OPEN.values,
    stage_projects=FMap({(ATTEMPT, PROJECT): StageProject(2, KEY, True)}),
    stage_records=FMap({STAGE_K: StageRow(REC_ROT, INSTALLED, True)}),
    stage_values=FMap({STAGE_K: VAL_ROT}),
)

#: The rotation delivered live as sequence 1 (record version 2).
ROTATE = ApplyFrame("op-d1", PROJECT, 2, REC_ROT, Cursor(STREAM, 1))
#: The same sequence carrying another request (a delete): a conflicting replay.
ROTATE_TWIN = ApplyFrame("op-d1b", PROJECT, 2, REC_DEL, Cursor(STREAM, 1))

#: Open after the rotation was applied and receipted as sequence 1.
OPEN_ROTATED = State(
    authority=authority(Gate.OPEN, applied=1),
    projects=FMap({PROJECT: 2}),
    records=FMap({LIVE_K: LiveRow(REC_ROT, INSTALLED)}),
    values=FMap({LIVE_K: VAL_ROT}),
    receipts=FMap({
        (STREAM, 1): Receipt(ROTATE.request(), True, None, RecordResult(REC_ROT, INSTALLED), 2),
    }),
)


def violated(st: State) -> set[str]:
    return {p.name for p in P.INVARIANTS if not p.check(st)}


def step_violated(pre, action, result, post) -> set[str]:
    return {p.name for p in P.STEP_PROPERTIES if not p.check(pre, action, result, post)}


def test_base_states_are_valid():
    for st in (INITIAL, OPEN, STAGING, OPEN_ROTATED):
        assert violated(st) == set()
    snapshot = read_snapshot(OPEN, [PROJECT])
    assert snapshot is not None and snapshot.projects[0].entries[0].value == "secret"
    assert read_snapshot(OPEN_ROTATED, [PROJECT]).projects[0].entries[0].value == "rotated"


# ---------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------

INVARIANT_CASES: dict[str, tuple[State, State]] = {
    # An open gate still naming an attempt.
    "gate_agrees_with_attempt": (
        replace(OPEN, authority=authority(Gate.OPEN, attempt=ATTEMPT)),
        OPEN,
    ),
    # A staged row left over from another attempt.
    "staging_belongs_to_attempt": (
        replace(STAGING, stage_records=STAGING.stage_records.set(
            ("a0", PROJECT, KEY), StageRow(REC, withheld(WithheldReason.TOMBSTONE), True))),
        STAGING,
    ),
    # An open gate still holding a staged project.
    "gate_open_has_no_staging": (
        replace(OPEN, stage_projects=FMap({(ATTEMPT, PROJECT): StageProject(1, KEY, True)})),
        OPEN,
    ),
    # An installed live record whose value row was fetched for another revision.
    "installed_matches_head_live": (
        replace(OPEN, values=FMap({LIVE_K: replace(VAL, revision=2)})),
        OPEN,
    ),
    # An installed staged record whose value row is the previous generation's.
    "installed_matches_head_staged": (
        replace(STAGING, stage_values=FMap({STAGE_K: VAL})),
        STAGING,
    ),
    # A withheld live record that kept its value.
    "unserved_records_carry_no_value": (
        replace(OPEN, records=FMap({LIVE_K: LiveRow(REC, withheld(WithheldReason.BINDING_OMITS))})),
        replace(OPEN, records=FMap({LIVE_K: LiveRow(REC, withheld(WithheldReason.BINDING_OMITS))}), values=EMPTY),
    ),
    # A value row whose record is gone.
    "no_value_without_record": (
        replace(OPEN, values=OPEN.values.set((PROJECT, "OTHER"), VAL)),
        OPEN,
    ),
    # A served value whose policy epoch is no longer kept.
    "served_values_are_live_bound_kept": (
        replace(OPEN, authority=authority(Gate.OPEN, epochs=(2,))),
        OPEN,
    ),
    # The cursor says 2 consumed, only sequence 1 has a receipt.
    "receipts_cover_consumed": (
        replace(OPEN_ROTATED, authority=authority(Gate.OPEN, applied=2)),
        OPEN_ROTATED,
    ),
}


def _invariant_params():
    for name, (bad, good) in INVARIANT_CASES.items():
        yield pytest.param(name, bad, id=name)


def test_invariant_cases_cover_every_invariant():
    assert set(INVARIANT_CASES) == {p.name for p in P.INVARIANTS}


@pytest.mark.parametrize("name", sorted(INVARIANT_CASES))
def test_invariant_accepts_good_state(name):
    _, good = INVARIANT_CASES[name]
    assert P.by_name(name).check(good) is True
    assert violated(good) == set(), "the good twin must be valid under every invariant"


@pytest.mark.parametrize("name, bad", list(_invariant_params()))
def test_invariant_rejects_bad_state(name, bad):
    assert P.by_name(name).check(bad) is False


# What else a bad state necessarily breaks: with the gate and attempt in agreement, a staged
# row under an open gate is also a row of no attempt (gate_open_has_no_staging is implied by
# gate_agrees_with_attempt and staging_belongs_to_attempt).
INVARIANT_ALSO_BROKEN = {"gate_open_has_no_staging": {"staging_belongs_to_attempt"}}


@pytest.mark.parametrize("name", sorted(INVARIANT_CASES))
def test_invariant_bad_state_breaks_only_its_property(name):
    bad, _ = INVARIANT_CASES[name]
    assert violated(bad) == {name} | INVARIANT_ALSO_BROKEN.get(name, set())


# Further violations, each of one invariant (the table above holds one per name).
EXTRA_INVARIANT_VIOLATIONS = [
    ("gate_agrees_with_attempt", replace(STAGING, authority=authority(Gate.STAGING, attempt=None))),
    # A closed attempt's staged value left behind once the gate is open.
    ("staging_belongs_to_attempt", replace(OPEN, stage_values=FMap({STAGE_K: VAL}))),
    ("gate_open_has_no_staging",
     replace(OPEN, authority=authority(Gate.IDLE), stage_records=FMap({STAGE_K: StageRow(REC, INSTALLED, True)}))),
    ("installed_matches_head_live", replace(OPEN, values=EMPTY)),
    ("installed_matches_head_live", replace(OPEN, values=FMap({LIVE_K: replace(VAL, value_ref=REF_2)}))),
    ("installed_matches_head_live",
     replace(OPEN, records=FMap({LIVE_K: LiveRow(replace(REC, head=Head(1, 1, True, REF_1)), INSTALLED)}))),
    ("installed_matches_head_staged", replace(STAGING, stage_values=EMPTY)),
    ("unserved_records_carry_no_value",
     replace(STAGING, stage_records=FMap({STAGE_K: StageRow(REC_ROT, unavailable(UnavailableReason.VALUE_MISSING), True)}))),
    ("no_value_without_record", replace(STAGING, stage_values=STAGING.stage_values.set((ATTEMPT, PROJECT, "OTHER"), VAL))),
    ("served_values_are_live_bound_kept",
     replace(OPEN, records=FMap({LIVE_K: LiveRow(replace(REC, binding=BindOmit()), INSTALLED)}))),
    ("receipts_cover_consumed", replace(OPEN_ROTATED, authority=authority(Gate.OPEN, applied=0))),
    ("receipts_cover_consumed", replace(INITIAL, receipts=OPEN_ROTATED.receipts)),
    ("receipts_cover_consumed",
     replace(OPEN_ROTATED, receipts=FMap({("s0", 1): OPEN_ROTATED.receipts[(STREAM, 1)]}))),
]


@pytest.mark.parametrize("name, bad", EXTRA_INVARIANT_VIOLATIONS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXTRA_INVARIANT_VIOLATIONS)])
def test_invariant_rejects_more_bad_states(name, bad):
    assert P.by_name(name).check(bad) is False


# ---------------------------------------------------------------------------
# Step properties
# ---------------------------------------------------------------------------


def _run(pre: State, action):
    post, result = step(CFG, pre, action)
    return (pre, action, result, post)


def _step_cases() -> dict[str, tuple[tuple, tuple]]:
    cases: dict[str, tuple[tuple, tuple]] = {}

    # cursor: closing the gate must keep the consumed sequence.
    good = _run(OPEN_ROTATED, CloseGate())
    pre, action, result, post = good
    bad_post = replace(post, authority=replace(post.authority, applied_sequence=0))
    cases["cursor_never_goes_back"] = ((pre, action, result, bad_post), good)

    # replay: the same frame at a consumed sequence, answered with another record.
    good = _run(OPEN_ROTATED, Deliver(ROTATE))
    pre, action, result, post = good
    assert isinstance(result, ApplyOk) and result.replayed
    bad_result = replace(result, result=RecordResult(REC_ROT, unavailable(UnavailableReason.VALUE_MISSING)))
    cases["replay_returns_same_answer"] = ((pre, action, bad_result, post), good)

    # conflicting replay: another request at a consumed sequence, applied as if new.
    good = _run(OPEN_ROTATED, Deliver(ROTATE_TWIN))
    pre, action, result, post = good
    assert isinstance(result, ApplyRefused) and result.code is RefusalCode.DELIVERY_CONFLICT
    bad_post = replace(
        pre,
        records=FMap({LIVE_K: LiveRow(REC_DEL, withheld(WithheldReason.TOMBSTONE))}),
        values=EMPTY,
    )
    bad_result = ApplyOk(False, None, PROJECT, 2, RecordResult(REC_DEL, withheld(WithheldReason.TOMBSTONE)),
                         EPOCHS, Cursor(STREAM, 1))
    cases["conflicting_replay_changes_nothing"] = ((pre, action, bad_result, bad_post), good)

    # consumed answer: a delete applied live (no fetch), its receipt stores another answer.
    delete = ApplyFrame("op-d2", PROJECT, 2, REC_DEL, Cursor(STREAM, 1))
    good = _run(OPEN, Deliver(delete))
    pre, action, result, post = good
    assert isinstance(result, ApplyOk) and not result.replayed
    stored = post.receipts[(STREAM, 1)]
    bad_post = replace(post, receipts=post.receipts.set(
        (STREAM, 1), replace(stored, result=RecordResult(REC, INSTALLED))))
    cases["consumed_answer_is_receipted"] = ((pre, action, result, bad_post), good)

    # organisation: a begin naming another organisation is accepted.
    begin_other = Begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), EPOCHS, "org2")
    good = _run(OPEN, begin_other)
    pre, action, result, post = good
    assert isinstance(result, Failed) and result.kind == "corrupt"
    ok_post, ok_result = step(CFG, pre, replace(begin_other, org_id=ORG))
    bad_post = replace(ok_post, authority=replace(ok_post.authority, org_id="org2"))
    cases["organisation_fixed_after_activation"] = ((pre, action, ok_result, bad_post), good)

    # record version: a commit that promotes a staged version older than the live one.
    commit = Commit(CommitFrame(ATTEMPT, Cursor(STREAM, 0), (ProjectVersion(PROJECT, 2),)))
    good = _run(STAGING, commit)
    stale_pre = replace(STAGING, projects=FMap({PROJECT: 3}))
    bad = _run(stale_pre, commit)  # the model's commit trusts the page's stale check
    assert isinstance(bad[2], CommitOk)
    cases["live_record_version_never_decreases"] = (bad, good)

    # commit: reports success but leaves the old live view in place.
    pre, action, result, post = good
    assert isinstance(result, CommitOk)
    bad_post = replace(post, records=pre.records, values=pre.values)
    cases["commit_promotes_exactly_staged"] = ((pre, action, result, bad_post), good)

    # refusals: snapshot_page_mismatch refused after writing the page's record.
    mismatch = Page(PageFrame("op-p9", ATTEMPT, PROJECT, "A", 2, (replace(REC_ROT, listing_generation=1),), True))
    good = _run(STAGING, mismatch)
    pre, action, result, post = good
    assert isinstance(result, PageRefused) and result.code is RefusalCode.SNAPSHOT_PAGE_MISMATCH
    bad_post = replace(post, stage_records=post.stage_records.set(
        STAGE_K, StageRow(mismatch.frame.records[0], unavailable(UnavailableReason.MATERIALIZATION_PENDING), True)),
        stage_values=EMPTY)
    cases["refusals_change_only_what_seed_writes"] = ((pre, action, result, bad_post), good)

    # restart: loses the receipts it must keep.
    good = _run(OPEN_ROTATED, Restart())
    pre, action, result, post = good
    bad_post = replace(post, receipts=EMPTY)
    cases["restart_closes_gate"] = ((pre, action, result, bad_post), good)

    # gate: close_gate leaves the gate open.
    good = _run(OPEN, CloseGate())
    pre, action, result, post = good
    bad_post = replace(post, authority=replace(post.authority, gate=Gate.OPEN))
    cases["gate_moves_only_by_declared_transitions"] = ((pre, action, result, bad_post), good)

    # receipts: consuming sequence 2 also rewrites the receipt of sequence 1.
    good = _run(OPEN_ROTATED, Deliver(ApplyFrame("op-x", "p9", 1, REC, Cursor(STREAM, 2))))
    pre, action, result, post = good
    assert isinstance(result, ApplyRefused) and result.consumed
    old = post.receipts[(STREAM, 1)]
    rewritten = replace(old, ok=False, code=RefusalCode.PROJECT_NOT_IN_REPLICA, result=None, record_version=None)
    cases["receipts_are_never_rewritten"] = (
        (pre, action, result, replace(post, receipts=post.receipts.set((STREAM, 1), rewritten))), good)

    # resume: a staged read that answers also touches the live view.
    from envreplica.model.actions import Resume
    from envreplica.model.state import INITIAL
    from envreplica.model.store import Found, staged_envelope

    st, _ = step(CFG, INITIAL, Begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), EPOCHS, ORG))
    st, pending = step(CFG, st, Page(PageFrame("op-p1", ATTEMPT, PROJECT, None, 1, (REC,), True)))
    answer = Found(staged_envelope(ORG, PROJECT, KEY, REF_1.staging_id, "secret"))
    good = _run(st, Resume(pending.slot, answer))
    pre, action, result, post = good
    bad_post = replace(post, records=FMap({LIVE_K: LiveRow(REC, INSTALLED)}), values=FMap({LIVE_K: VAL}))
    cases["resume_changes_only_its_operation"] = ((pre, action, result, bad_post), good)

    # reads: the answer of a staged read also rewrites the staged record's state.
    rewritten = replace(post.stage_records[STAGE_K], state=REC_ROT)
    cases["reads_change_only_materialization"] = (
        (pre, action, result, replace(post, stage_records=post.stage_records.set(STAGE_K, rewritten))), good)

    # commit: succeeds although its high-water mark is not the replica's cursor.
    commit = Commit(CommitFrame(ATTEMPT, Cursor(STREAM, 0), (ProjectVersion(PROJECT, 2),)))
    good = _run(STAGING, commit)
    pre, action, result, post = good
    assert isinstance(result, CommitOk)
    wrong = Commit(CommitFrame(ATTEMPT, Cursor(STREAM, 5), (ProjectVersion(PROJECT, 2),)))
    cases["commit_only_at_high_water"] = ((pre, wrong, result, post), good)

    # head and version: a delete delivered live moves the record but leaves the record version behind.
    good = _run(OPEN, Deliver(DELETE))
    pre, action, result, post = good
    assert isinstance(result, ApplyOk) and post.projects[PROJECT] == 2
    cases["live_head_moves_with_its_record_version"] = (
        (pre, action, result, replace(post, projects=pre.projects)), good)

    # crash: cut after the delete's first transaction, yet the old value survives under the tombstone.
    good = _run(OPEN, CrashAfter(Deliver(DELETE), 1))
    pre, action, result, post = good
    assert result == Crashed(1) and post.values == EMPTY
    cases["crash_never_pairs_old_value_with_new_head"] = ((pre, action, result, replace(post, values=pre.values)), good)

    # reads: the served view answered while the gate is closed (a read that does not look at the gate).
    read = Read((PROJECT,))
    good = _run(OPEN, read)
    assert isinstance(good[2], Snapshot) and good[2].projects[0].entries[0].value == "secret"
    closed = replace(OPEN, authority=authority(Gate.IDLE))
    cases["nothing_served_unless_open"] = ((closed, read, good[2], closed), good)

    # reads: the value before the rotation served after it (a read of another row than the live one).
    good = _run(OPEN_ROTATED, read)
    cases["reads_serve_what_the_seed_serves"] = ((OPEN_ROTATED, read, _run(OPEN, read)[2], OPEN_ROTATED), good)
    return cases


#: A delete of the first save, delivered live as sequence 1 (record version 2): no value to fetch.
DELETE = ApplyFrame("op-d2", PROJECT, 2, REC_DEL, Cursor(STREAM, 1))


STEP_CASES = _step_cases()


def test_step_cases_cover_every_step_property():
    assert set(STEP_CASES) == {p.name for p in P.STEP_PROPERTIES}


@pytest.mark.parametrize("name", sorted(STEP_CASES))
def test_step_property_rejects_bad_step(name):
    bad, _ = STEP_CASES[name]
    assert P.by_name(name).check(*bad) is False


@pytest.mark.parametrize("name", sorted(STEP_CASES))
def test_step_property_accepts_good_step(name):
    _, good = STEP_CASES[name]
    assert P.by_name(name).check(*good) is True
    # The good steps are real model steps: every step property holds on them.
    assert step_violated(*good) == set()


# A conflicting frame applied as new answers without a fresh receipt, so it breaks both.
STEP_ALSO_BROKEN = {
    "conflicting_replay_changes_nothing": {"consumed_answer_is_receipted"},
    # adding a live row in a staged read's answer also adds a record: a state change
    "resume_changes_only_its_operation": {"reads_change_only_materialization", "live_head_moves_with_its_record_version"},
    # a closed gate's read serves nothing in the seed's read too
    "nothing_served_unless_open": {"reads_serve_what_the_seed_serves"},
}


@pytest.mark.parametrize("name", sorted(STEP_CASES))
def test_step_bad_case_breaks_only_its_property(name):
    bad, _ = STEP_CASES[name]
    assert step_violated(*bad) == {name} | STEP_ALSO_BROKEN.get(name, set())


EXTRA_STEP_VIOLATIONS = [
    # A replay answered from a receipt but changing the state.
    ("replay_returns_same_answer",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, values=EMPTY)))(*_run(OPEN_ROTATED, Deliver(ROTATE)))),
    # A replayed refusal answered with another code than its receipt's.
    ("replay_returns_same_answer",
     lambda: (OPEN_ROTATED, Deliver(ROTATE),
              ApplyRefused(True, True, None, RefusalCode.PROJECT_NOT_IN_REPLICA, EPOCHS, Cursor(STREAM, 1)),
              OPEN_ROTATED)),
    # A conflicting replay refused with delivery_conflict, yet the state changed.
    ("conflicting_replay_changes_nothing",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, values=EMPTY)))(*_run(OPEN_ROTATED, Deliver(ROTATE_TWIN)))),
    # A consumed delivery that stored no receipt at all.
    ("consumed_answer_is_receipted",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, receipts=EMPTY)))(
         *_run(OPEN, Deliver(ApplyFrame("op-d2", PROJECT, 2, REC_DEL, Cursor(STREAM, 1)))))),
    # A refused commit that still opened the gate.
    ("refusals_change_only_what_seed_writes",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, authority=replace(post.authority, gate=Gate.OPEN,
                                                                                    attempt_id=None))))(
         *_run(STAGING, Commit(CommitFrame(ATTEMPT, Cursor(STREAM, 5), (ProjectVersion(PROJECT, 2),)))))),
    # A transient delivery refusal that moved the cursor.
    ("refusals_change_only_what_seed_writes",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, authority=replace(post.authority, applied_sequence=3))))(
         *_run(OPEN, Deliver(ApplyFrame("op-gap", PROJECT, 2, REC_DEL, Cursor(STREAM, 3)))))),
    # A restart that leaves the gate open.
    ("restart_closes_gate",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, authority=replace(post.authority, gate=Gate.OPEN))))(
         *_run(OPEN, Restart()))),
    # A crash that kept the old value while its record moved to another binding at the same head.
    ("crash_never_pairs_old_value_with_new_head",
     lambda: (OPEN, CrashAfter(Deliver(DELETE), 1), Crashed(1),
              replace(OPEN, authority=authority(Gate.IDLE),
                      records=FMap({LIVE_K: LiveRow(replace(REC, binding=BindOmit()), INSTALLED)})))),
    # A crash that leaves the gate open.
    ("crash_never_pairs_old_value_with_new_head",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, authority=replace(post.authority, gate=Gate.OPEN))))(
         *_run(OPEN, CrashAfter(Deliver(DELETE), 1)))),
    # A crash that leaves a value whose record is not installed (a value installed before its record).
    ("crash_never_pairs_old_value_with_new_head",
     lambda: (OPEN, CrashAfter(Deliver(DELETE), 1), Crashed(1),
              replace(OPEN, authority=authority(Gate.IDLE),
                      records=FMap({LIVE_K: LiveRow(REC, unavailable(UnavailableReason.MATERIALIZATION_PENDING))})))),
    # A resumed read that moves a live record's state.
    ("live_head_moves_with_its_record_version",
     lambda: (OPEN, Resume(0, Found("x")), Done(),
              replace(OPEN, records=FMap({LIVE_K: LiveRow(REC_ROT, unavailable(UnavailableReason.VALUE_MISSING))}),
                      values=EMPTY))),
    # A delivery that moves another key than its own.
    ("live_head_moves_with_its_record_version",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, records=post.records.set(
         (PROJECT, "OTHER"), LiveRow(replace(REC_DEL, key="OTHER"), withheld(WithheldReason.TOMBSTONE))))))(
         *_run(OPEN, Deliver(DELETE)))),
    # A failed begin (another organisation) that still closed the gate.
    ("gate_moves_only_by_declared_transitions",
     lambda: (lambda pre, a, r, post: (pre, a, r, replace(post, authority=replace(post.authority, gate=Gate.STAGING,
                                                                                    attempt_id=ATTEMPT))))(
         *_run(OPEN, Begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), EPOCHS, "org2")))),
]


@pytest.mark.parametrize("name, build", EXTRA_STEP_VIOLATIONS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXTRA_STEP_VIOLATIONS)])
def test_step_property_rejects_more_bad_steps(name, build):
    assert P.by_name(name).check(*build()) is False


# ---------------------------------------------------------------------------
# End to end through the model's step
# ---------------------------------------------------------------------------


class Run:
    """Drives ``step`` from a state, checking every invariant and step property on the way."""

    def __init__(self, st: State = INITIAL) -> None:
        assert violated(st) == set()
        self.st = st

    def do(self, action):
        pre = self.st
        post, result = step(CFG, pre, action)
        assert step_violated(pre, action, result, post) == set(), (action, result)
        assert violated(post) == set(), (action, result)
        self.st = post
        return result


BEGIN = Begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), EPOCHS, ORG)
PAGE = Page(PageFrame("op-p1", ATTEMPT, PROJECT, None, 1, (REC,), True))
COMMIT = Commit(CommitFrame(ATTEMPT, Cursor(STREAM, 0), (ProjectVersion(PROJECT, 1),)))


def _envelope(ref: StagedRef, value: str, org: str = ORG) -> Found:
    return Found(staged_envelope(org, PROJECT, KEY, ref.staging_id, value))


def _served(st: State) -> dict[str, str | None]:
    snapshot = read_snapshot(st, [PROJECT])
    assert snapshot is not None
    return {e.state.key: e.value for p in snapshot.projects for e in p.entries}


def test_begin_page_resume_commit_serves_the_value():
    run = Run()
    begun = run.do(BEGIN)
    assert isinstance(begun, BeginResult) and begun.applied_through == Cursor(STREAM, 0)
    assert run.st.authority.gate is Gate.STAGING and read_snapshot(run.st, [PROJECT]) is None

    pending = run.do(PAGE)
    assert pending == Pending(0)
    assert len(run.st.inflight) == 1
    assert run.st.stage_records[STAGE_K].mat.kind is MatKind.UNAVAILABLE

    page = run.do(Resume(0, _envelope(REF_1, "secret")))
    assert isinstance(page, PageOk) and page.complete
    assert page.results == (RecordResult(REC, INSTALLED),)
    assert run.st.inflight == ()
    assert run.st.stage_values[STAGE_K] == VAL
    assert read_snapshot(run.st, [PROJECT]) is None  # staged, not yet served

    committed = run.do(COMMIT)
    assert isinstance(committed, CommitOk)
    assert run.st.authority.gate is Gate.OPEN and run.st.authority.attempt_id is None
    assert _served(run.st) == {KEY: "secret"}
    assert run.st == OPEN  # the hand-built OPEN state is exactly this reachable one


def test_live_delivery_then_replay_and_conflict():
    run = Run(OPEN)
    assert run.do(Deliver(ROTATE)) == Pending(0)
    applied = run.do(Resume(0, _envelope(REF_2, "rotated")))
    assert isinstance(applied, ApplyOk) and not applied.replayed
    assert applied.result == RecordResult(REC_ROT, INSTALLED)
    assert run.st == OPEN_ROTATED  # the hand-built state is reachable
    assert _served(run.st) == {KEY: "rotated"}

    before = run.st
    replayed = run.do(Deliver(replace(ROTATE, op_id="op-again")))
    assert isinstance(replayed, ApplyOk) and replayed.replayed and replayed.result == applied.result
    conflict = run.do(Deliver(ROTATE_TWIN))
    assert isinstance(conflict, ApplyRefused) and conflict.code is RefusalCode.DELIVERY_CONFLICT
    assert run.st == before


def test_wrong_envelope_leaves_the_record_unavailable():
    run = Run()
    run.do(BEGIN)
    assert run.do(PAGE) == Pending(0)
    page = run.do(Resume(0, _envelope(REF_1, "secret", org="org2")))
    assert isinstance(page, PageOk)
    assert page.results[0].materialization == unavailable(UnavailableReason.VALUE_ENVELOPE_MISMATCH)
    assert STAGE_K not in run.st.stage_values
    run.do(COMMIT)
    assert _served(run.st) == {KEY: None}


def test_page_refused_with_snapshot_page_mismatch_changes_nothing():
    run = Run()
    run.do(BEGIN)
    before = run.st
    refused = run.do(Page(PageFrame("op-p2", ATTEMPT, PROJECT, "A", 1, (REC,), True)))
    assert isinstance(refused, PageRefused) and refused.code is RefusalCode.SNAPSHOT_PAGE_MISMATCH
    assert run.st == before


def test_delivery_before_begin_is_corrupt_and_changes_nothing():
    post, result = step(CFG, INITIAL, Deliver(replace(ROTATE, record_version=1, state=REC)))
    assert isinstance(result, Failed) and result.kind == "corrupt"
    assert post == INITIAL


def test_begin_with_another_org_after_activation_is_corrupt():
    run = Run()
    run.do(BEGIN)
    before = run.st
    result = run.do(Begin(BeginFrame(STREAM, "a2", (PROJECT,)), EPOCHS, "org2"))
    assert isinstance(result, Failed) and result.kind == "corrupt"
    assert run.st == before
    # Also once open.
    post, result = step(CFG, OPEN, Begin(BeginFrame(STREAM, "a2", (PROJECT,)), EPOCHS, "org2"))
    assert isinstance(result, Failed) and result.kind == "corrupt" and post == OPEN


def test_close_and_restart_keep_the_committed_view_unserved():
    run = Run(OPEN_ROTATED)
    assert isinstance(run.do(CloseGate()), Done)
    assert run.st.authority.gate is Gate.IDLE and read_snapshot(run.st, [PROJECT]) is None
    assert isinstance(run.do(Restart()), Done)
    assert (run.st.records, run.st.values, run.st.receipts) == (
        OPEN_ROTATED.records, OPEN_ROTATED.values, OPEN_ROTATED.receipts)


# ---------------------------------------------------------------------------
# Known gaps in the properties (reported, not fixed here)
# ---------------------------------------------------------------------------


def test_rewriting_an_earlier_receipt_is_caught():
    """Once a gap: a step that rewrote an earlier receipt passed every property (now receipts_are_never_rewritten)."""
    pre = OPEN_ROTATED
    frame = ApplyFrame("op-x", "p9", 1, REC, Cursor(STREAM, 2))  # consumed: project_not_in_replica
    _, action, result, post = _run(pre, Deliver(frame))
    assert isinstance(result, ApplyRefused) and result.consumed
    old = post.receipts[(STREAM, 1)]
    rewritten = replace(old, ok=False, code=RefusalCode.PROJECT_NOT_IN_REPLICA, result=None, record_version=None)
    tampered = replace(post, receipts=post.receipts.set((STREAM, 1), rewritten))
    assert step_violated(pre, action, result, tampered) or violated(tampered)


# ---------------------------------------------------------------------------
# Crash points: write commits counted as docs/protocol.md section 6 says
# ---------------------------------------------------------------------------


def _commits(st: State, action) -> int:
    return len(run_recording_commits(CFG, st, action)[2])


def _begun(epochs=EPOCHS) -> State:
    st, _ = step(CFG, INITIAL, Begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), epochs, ORG))
    return st


REC_B = BindingState("B_KEY", Head(1, 1, False, REF_2), None, 1, 0)
REC_B_DEL = BindingState("B_KEY", Head(1, 0, True, None), None, 1, 0)


def test_page_commits_prepare_then_one_after_transaction_per_awaiting_key():
    st = _begun()
    # A refusal commits (the prepare transaction returned normally).
    assert _commits(st, Page(PageFrame("op", ATTEMPT, PROJECT, "A", 1, (REC,), True))) == 1
    # One key awaiting a value: the prepare, then the read is in flight (the rest comes with its resume).
    post, result, prefixes = run_recording_commits(CFG, st, PAGE)
    assert result == Pending(0) and len(prefixes) == 1
    assert _commits(post, Resume(0, _envelope(REF_1, "secret"))) == 1  # its after-transaction; the final read is not
    # No value store: each awaiting key's after-transaction runs at once (credential_store_unavailable).
    off, _ = step(CFG, st, StoreOff())
    two = Page(PageFrame("op", ATTEMPT, PROJECT, None, 1, (REC, REC_B), True))
    assert _commits(off, two) == 3
    # A tombstone never awaits a value: no after-transaction.
    assert _commits(off, Page(PageFrame("op", ATTEMPT, PROJECT, None, 1, (REC, REC_B_DEL), True))) == 2


def test_delivery_commits_prepare_after_transaction_and_final():
    assert _commits(OPEN, Deliver(DELETE)) == 2  # prepare, final: nothing to fetch
    post, result, prefixes = run_recording_commits(CFG, OPEN, Deliver(ROTATE))
    assert result == Pending(0) and len(prefixes) == 1
    assert _commits(post, Resume(0, _envelope(REF_2, "rotated"))) == 2  # after-transaction, final
    off, _ = step(CFG, OPEN, StoreOff())
    assert _commits(off, Deliver(ROTATE)) == 3  # prepare, after-transaction at once, final
    # A replay, a conflicting replay and a consumed refusal each end in the prepare transaction.
    assert _commits(OPEN_ROTATED, Deliver(ROTATE)) == 1
    assert _commits(OPEN_ROTATED, Deliver(ROTATE_TWIN)) == 1
    assert _commits(OPEN, Deliver(ApplyFrame("op", "p9", 1, REC, Cursor(STREAM, 1)))) == 1
    # An error rolls its transaction back: no commit.
    assert _commits(INITIAL, Deliver(DELETE)) == 0


def test_crash_after_the_first_commit_half_applies_a_delivery():
    post, result = step(CFG, OPEN, CrashAfter(Deliver(DELETE), 1))
    assert result == Crashed(1)
    assert post.records[LIVE_K].state == REC_DEL and post.projects[PROJECT] == 2  # the first transaction
    assert post.receipts == EMPTY and post.authority.applied_sequence == 0  # not the last
    assert post.authority.gate is Gate.IDLE and post.inflight == ()  # then restart
    _, _, prefixes = run_recording_commits(CFG, OPEN, Deliver(DELETE))
    assert post == step(CFG, prefixes[0], Restart())[0]
    assert P.sometimes_crash_half_applies_delivery(OPEN, CrashAfter(Deliver(DELETE), 1), result, post)


def test_crash_at_or_after_the_last_commit():
    whole, whole_result = step(CFG, OPEN, Deliver(DELETE))
    # At the last commit: the whole operation, then restart.
    post, result = step(CFG, OPEN, CrashAfter(Deliver(DELETE), 2))
    assert result == Crashed(2) and post == step(CFG, whole, Restart())[0]
    # Beyond it (or beyond a suspension): exactly the plain action.
    assert step(CFG, OPEN, CrashAfter(Deliver(DELETE), 3)) == (whole, whole_result)
    assert step(CFG, OPEN, CrashAfter(Deliver(ROTATE), 2)) == step(CFG, OPEN, Deliver(ROTATE))


def test_run_until_crash_carries_a_budget_across_pending():
    st = _begun()
    post, result, made = run_until_crash(CFG, st, PAGE, 2)
    assert result == Pending(0) and made == 1 and post == step(CFG, st, PAGE)[0]
    crashed, result, made = run_until_crash(CFG, post, Resume(0, _envelope(REF_1, "secret")), 2 - 1)
    assert result == Crashed(1) and made == 1
    assert crashed.authority.gate is Gate.IDLE and crashed.stage_records == EMPTY and crashed.inflight == ()
    done, result, made = run_until_crash(CFG, OPEN, Deliver(DELETE), 5)
    assert (done, result, made) == (*step(CFG, OPEN, Deliver(DELETE)), 2)


def test_crash_after_rejects_what_cannot_crash():
    with pytest.raises(TypeError):
        CrashAfter(Restart(), 1)
    with pytest.raises(ValueError):
        CrashAfter(Deliver(DELETE), 0)
    with pytest.raises(TypeError):
        run_until_crash(CFG, OPEN, Commit(CommitFrame(ATTEMPT, Cursor(STREAM, 0), ())), 1)


def test_resent_delivery_completes_the_half_applied_one():
    crash_step = _run(OPEN, CrashAfter(Deliver(DELETE), 1))
    run = Run(crash_step[3])
    run.do(Begin(BeginFrame(STREAM, "a2", (PROJECT,)), EPOCHS, ORG))
    assert isinstance(run.do(Page(PageFrame("op", "a2", PROJECT, None, 2, (REC_DEL,), True))), PageOk)
    again = Deliver(replace(DELETE, op_id="op-again", reconciliation_attempt_id="a2"))
    pre = run.st
    result = run.do(again)
    assert isinstance(result, ApplyOk) and not result.replayed and result.result.state == REC_DEL
    assert P.sometimes_resent_delivery_completes(crash_step, pre, again, result, run.st)
    # Another delivery at that sequence is no re-send of the crashed one.
    assert not P.sometimes_resent_delivery_completes(crash_step, pre, Deliver(ROTATE), result, run.st)


def test_enabled_crash_points_run_as_step_does():
    """The generator's one-run memo gives exactly what ``step`` gives, for every action and crash point."""
    from envreplica.model import generate as G
    from envreplica.model.presets import TINY

    bounds = replace(TINY[0], crash_points=G.CrashPoints.ALL)
    cfg = bounds.model_config()
    frontier = [G.init(bounds)]
    crash_points = 0
    for _ in range(7):
        reached = []
        for w in frontier:
            for a in G.enabled(bounds, w, cfg):
                got, result = G.next_state(bounds, w, a, cfg)
                reached.append(got)
                if isinstance(a, G.CloudChange):
                    continue
                assert (got.replica, result) == step(cfg, w.replica, a), a
                if isinstance(a, CrashAfter):
                    crash_points += 1
                    assert 1 <= a.commit < _commits(w.replica, a.action) and result == Crashed(a.commit)
        frontier = list(dict.fromkeys(reached))[:80]
    assert crash_points > 0
    last = frontier[-1]
    for off in (replace(bounds, crash_points=G.CrashPoints.OFF), replace(bounds, restarts=False)):
        assert not any(isinstance(a, CrashAfter) for a in G.enabled(off, last, cfg))
