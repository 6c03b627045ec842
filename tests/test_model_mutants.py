"""Test the testers: deliberately broken models must be caught by ``spec.properties``.

Each mutant below is one realistic bug injected into ``envreplica.model.replica``
(or ``envreplica.model.rules``) with ``monkeypatch``. Most mutants edit the
real source of one function (``_source_mutant``: an exact text replacement
that must match exactly once, so a refactor of the model makes the mutant fail
loudly instead of silently turning into the original code). The rest are small
hand-written replacements.

For each mutant the checker runs on small bounds chosen so that the bug is
reachable quickly. The test asserts that some property is violated, that the
expected property is among the violated ones, and that its shortest
counterexample is no longer than the length measured when this file was
written. A control test runs every bounds used here on the unmutated model and
asserts that nothing is violated, so each catch is the mutant's doing.

A mutant that no property catches is a finding about the properties, not about
the model: it is kept as ``xfail(strict=True)`` with the gap as its reason, and a
separate (passing) test shows with a small extra "witness" property that the
bug *is* reachable at those bounds, so the miss is not just a bounds problem.

Crash-class mutants (``CRASH_MUTANTS``) split one of the seed's write
transactions in two (an extra ``_commit`` marker inside it) or reorder two of
them. With no crash between the halves nothing differs: no step, state or
result changes, so the checker without crash points (``CrashPoints.OFF``)
passes them, and a test shows it. Only a crash after the first half
(``CrashAfter``) reaches the state the split allows.

Run with ``-s`` to see the table of mutants, catch times and lengths.
"""

from __future__ import annotations

import __future__
import inspect
import sys
import textwrap
from dataclasses import dataclass, replace
from typing import Callable, Optional

import pytest

from envreplica.checker.run import run
from envreplica.model import replica, rules
from envreplica.model.generate import Bounds, CrashPoints, Move
from envreplica.model.presets import ADVERSARY, CLOUD, suite
from envreplica.model.state import Variant
from envreplica.spec.domain import ApplyOk

# ---------------------------------------------------------------------------
# Bounds: each small, each chosen so that some mutant's bug is reachable.
# ---------------------------------------------------------------------------

TINY_CLOUD, _TINY_ADVERSARY = suite("tiny", Variant.FIXED)
#: the tiny adversary one level shallower (every adversary catch below is <= 4 steps)
TINY_ADV = replace(_TINY_ADVERSARY, name="tiny-adversary-4", max_depth=4)
#: two sequences on one stream: an adversary can skip one
ADV_GAP = replace(ADVERSARY, name="adversary-seq2", max_sequence=2, max_depth=3)
#: two organisations a begin may name
ADV_ORGS = replace(ADVERSARY, name="adversary-orgs", orgs=("org", "org2"), max_depth=3)
#: a record that can rotate: two pending states of one key (a stale read can land on the newer one)
ADV_ROTATE = replace(ADVERSARY, name="adversary-rotate", moves=frozenset({Move.CREATE, Move.ROTATE}), max_depth=4)
#: re-snapshot at a higher record version that omits a live key (no deliveries, no restarts)
ADV_RESNAP = replace(
    ADVERSARY, name="adversary-resnapshot", max_record_version=2, max_sequence=0, restarts=False,
    epoch_sets=((1, 2),), alphabet_extra=False, max_depth=7,
)
#: the cloud two levels deeper than tiny, on one stream
CLOUD_10 = replace(CLOUD, name="cloud-10", streams=("s1",), max_depth=10)
#: the adversary one level below the preset, first-save records only: finding F1 is 6 steps here
ADV_F1 = replace(ADVERSARY, name="adversary-f1", alphabet_extra=False, max_depth=6)

for _b in (TINY_CLOUD, TINY_ADV, ADV_GAP, ADV_ORGS, ADV_ROTATE, ADV_RESNAP, CLOUD_10, ADV_F1):
    assert _b.variant is Variant.FIXED, _b.name


# ---------------------------------------------------------------------------
# Mutation helpers
# ---------------------------------------------------------------------------


def _patch_everywhere(monkeypatch, module, name: str, mutant) -> None:
    """Replace ``module.name`` and every ``from module import name`` copy in envreplica."""
    original = getattr(module, name)
    patched = 0
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("envreplica.") and getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, mutant)
            patched += 1
    assert patched, f"{module.__name__}.{name} was not patched anywhere"


def _source_mutant(module, name: str, *edits: tuple[str, str]) -> Callable:
    """A patcher: ``module.name`` recompiled from its own source with ``edits`` (old, new) applied.

    Each ``old`` must occur exactly once in the function's source. The mutant
    is compiled into the module's namespace, so it calls the module's other
    functions (and is called by them) exactly as the original is.
    """

    def patch(monkeypatch) -> None:
        original = getattr(module, name)
        src = textwrap.dedent(inspect.getsource(original))
        for old, new in edits:
            n = src.count(old)
            assert n == 1, (
                f"mutation target in {module.__name__}.{name} found {n} times (expected 1): {old!r}; "
                "the model changed, update this mutant"
            )
            src = src.replace(old, new)
        code = compile(
            src, f"<mutant of {module.__name__}.{name}>", "exec",
            flags=__future__.annotations.compiler_flag, dont_inherit=True,
        )
        namespace: dict = {}
        exec(code, module.__dict__, namespace)
        _patch_everywhere(monkeypatch, module, name, namespace[name])

    return patch


def _both(*patches: Callable) -> Callable:
    def patch(monkeypatch) -> None:
        for p in patches:
            p(monkeypatch)

    return patch


# -- hand-written mutants ----------------------------------------------------


def _restart_keeps_gate(monkeypatch) -> None:
    """Crash recovery drops in-flight work and staging but forgets to close the gate."""
    from envreplica.spec.domain import Done

    def restart(cfg, st):
        st = replica._clear_stage(st.durable())
        return replace(st, authority=replace(st.authority, attempt_id=None)), Done()

    monkeypatch.setattr(replica, "restart", restart)


def _restart_keeps_inflight(monkeypatch) -> None:
    """Restart closes the gate but keeps the operations that were suspended in a read."""
    original = replica.restart

    def restart(cfg, st):
        after, done = original(cfg, st)
        return replace(after, inflight=st.inflight), done

    monkeypatch.setattr(replica, "restart", restart)


def _replay_answers_from_current_row(monkeypatch) -> None:
    """A replay recomputes its answer from today's record instead of the stored receipt."""
    original = replica._delivery_prepare

    def prepare(cfg, st, frame):
        after, answer = original(cfg, st, frame)
        if isinstance(answer, ApplyOk) and answer.replayed:
            a = st.authority
            key = (frame.project_id, frame.state.key)
            row = st.records.get(key) if a.attempt_id is None else st.stage_records.get((a.attempt_id,) + key)
            if row is not None:
                answer = replace(answer, result=row.result())
        return after, answer

    monkeypatch.setattr(replica, "_delivery_prepare", prepare)


# ---------------------------------------------------------------------------
# The mutants
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # the bug, in one line
    patch: Callable  # patch(monkeypatch) installs it
    bounds: Bounds  # where the checker looks
    expect: Optional[str]  # the property expected to catch it (None: not caught, see ``gap``)
    max_length: int  # shortest counterexample measured (an upper bound for the test)
    gap: Optional[str] = None  # why no property catches it (the test is then a strict xfail)


R = replica
MUTANTS = (
    Mutant(
        "close_gate_keeps_staging", "close_gate does not purge the staging tables",
        _source_mutant(R, "close_gate", ("st = _clear_stage(st)\n", "st = st  # MUTANT: no purge\n")),
        TINY_CLOUD, "staging_belongs_to_attempt", 2,
    ),
    Mutant(
        "commit_ignores_high_water", "complete skips the high-water mark check (frame.high_water != cursor)",
        _source_mutant(R, "complete", ("if frame.high_water != applied:", "if False:  # MUTANT")),
        # Once uncaught (no property related a commit to the cursor): now commit_only_at_high_water.
        TINY_ADV, "commit_only_at_high_water", 2,
    ),
    Mutant(
        "commit_promotes_absent_rows", "complete also promotes staged rows no page re-sent (present=False)",
        _source_mutant(R, "complete", ("if att == frame.attempt_id and row.present", "if att == frame.attempt_id")),
        ADV_RESNAP, "commit_promotes_exactly_staged", 6,
    ),
    Mutant(
        "commit_copies_all_stage_values", "complete copies every staged value, not only those of promoted rows",
        _source_mutant(
            R, "complete",
            ("values=FMap({k: v for k, v in values.items() if k in live_keys})", "values=FMap(values)"),
        ),
        ADV_RESNAP, "no_value_without_record", 7,
    ),
    Mutant(
        "replay_skips_request_check", "a replay returns the receipt without comparing the request (MAC check skipped)",
        _source_mutant(R, "_delivery_prepare", ("if receipt.request != frame.request():", "if False:  # MUTANT")),
        TINY_ADV, "conflicting_replay_changes_nothing", 4,
    ),
    Mutant(
        "replay_answers_from_current_row", "a replay answers with today's record instead of the stored receipt",
        _replay_answers_from_current_row,
        TINY_CLOUD, "replay_returns_same_answer", 7,
    ),
    Mutant(
        "delivery_accepts_gap", "apply_delivery drops both `sequence != current + 1` checks",
        _both(
            _source_mutant(
                R, "_delivery_prepare",
                ("if frame.delivery.sequence != current.sequence + 1:", "if False:  # MUTANT"),
            ),
            _source_mutant(
                R, "_delivery_final",
                ("or frame.delivery.sequence != current.sequence + 1\n", "or False  # MUTANT\n"),
            ),
        ),
        ADV_GAP, "receipts_cover_consumed", 3,
    ),
    Mutant(
        "stage_after_ignores_state_change", "_stage_after installs without checking the staged state is unchanged",
        _source_mutant(
            R, "_stage_after",
            ("if current is None or current.state != before:", "if current is None:  # MUTANT"),
        ),
        # Once uncaught (the stale state is self-consistent): now reads_change_only_materialization.
        ADV_ROTATE, "reads_change_only_materialization", 4,
    ),
    Mutant(
        "live_after_ignores_state_change", "_live_after installs without checking the live state is unchanged",
        _source_mutant(
            R, "_live_after",
            ("if current is None or current.state != before:", "if current is None:  # MUTANT"),
        ),
        # Once uncaught: a stale read reverted a rotated live record and served the rotated-out
        # secret. Now reads_change_only_materialization.
        CLOUD_10, "reads_change_only_materialization", 10,
    ),
    Mutant(
        "snapshot_serves_while_closed", "_snapshot serves whenever activated (ignores gate and attempt)",
        _source_mutant(
            R, "_snapshot",
            ("if not a.gate.activated or not a.gate.is_open or a.attempt_id is not None:",
             "if not a.gate.activated:  # MUTANT"),
        ),
        TINY_ADV, "nothing_served_unless_open", 2,  # a begin, then a read (with the gate staging)
    ),
    Mutant(
        "snapshot_skips_tombstones", "_snapshot leaves tombstoned records out of the served view",
        _source_mutant(
            R, "_snapshot",
            ("        for key, row in rows:\n",
             "        for key, row in rows:\n            if row.state.head.tombstone:  # MUTANT\n                continue\n"),
        ),
        CLOUD_10, "reads_serve_what_the_seed_serves", 8,  # a save, a commit, a delete, a read
    ),
    Mutant(
        "restart_keeps_gate", "restart does not close the gate",
        _restart_keeps_gate, TINY_CLOUD, "restart_closes_gate", 2,
    ),
    Mutant(
        "restart_keeps_inflight", "restart keeps the operations suspended in a value-store read",
        _restart_keeps_inflight, TINY_CLOUD, "restart_closes_gate", 4,
    ),
    Mutant(
        "begin_changes_organisation", "begin lets the organisation change after activation",
        _source_mutant(R, "begin", ("if a.gate.activated and a.org_id != org_id:", "if False:  # MUTANT")),
        ADV_ORGS, "organisation_fixed_after_activation", 2,
    ),
    Mutant(
        "live_keeps_value_when_withheld", "_retain_live_state keeps the old value when a newer record is withheld",
        _source_mutant(
            R, "_retain_live_state",
            ("row = LiveRow(incoming, desired)\n    st = replace(st, values=st.values.delete(k), records=",
             "row = LiveRow(incoming, desired)\n    st = replace(st, records="),
        ),
        TINY_CLOUD, "unserved_records_carry_no_value", 8,
    ),
    Mutant(
        "stage_keeps_value_when_withheld", "_retain_stage_state keeps the old value when a newer record is withheld",
        _source_mutant(
            R, "_retain_stage_state",
            ("st = replace(st, stage_values=st.stage_values.delete(k), stage_records=st.stage_records.set(k, row))",
             "st = replace(st, stage_records=st.stage_records.set(k, row))  # MUTANT"),
        ),
        TINY_CLOUD, "unserved_records_carry_no_value", 7,
    ),
    Mutant(
        "begin_drops_receipts_same_stream", "begin deletes the receipts even when the stream is unchanged",
        _source_mutant(R, "begin", ("receipts = EMPTY if changed_stream else st.receipts", "receipts = EMPTY")),
        TINY_ADV, "receipts_cover_consumed", 4,
    ),
    Mutant(
        "begin_resets_cursor_same_stream", "begin resets the delivery cursor even when the stream is unchanged",
        _source_mutant(R, "begin", ("sequence = 0 if changed_stream else a.applied_sequence", "sequence = 0")),
        TINY_ADV, "cursor_never_goes_back", 4,
    ),
    Mutant(
        "desired_ignores_unkept_epoch", "desired_materialization fetches a record whose policy epoch is not kept",
        _source_mutant(
            rules, "desired_materialization",
            ("if state.policy_epoch is None or state.policy_epoch not in epochs:",
             "if state.policy_epoch is None:  # MUTANT"),
        ),
        TINY_ADV, "served_values_are_live_bound_kept", 4,
    ),
    Mutant(
        "desired_ignores_withhold_binding", "desired_materialization fetches a record whose binding withholds it",
        _source_mutant(
            rules, "desired_materialization",
            ("if isinstance(state.binding, BindWithhold):", "if False:  # MUTANT"),
        ),
        TINY_ADV, "served_values_are_live_bound_kept", 4,
    ),
    Mutant(
        "stale_read_lands_after_epoch_change", "finding F1 re-introduced: a read lands on a row no longer awaiting it",
        _source_mutant(R, "_still_awaits_value", ("if not has_fix(cfg, Finding.F1):", "if True:  # MUTANT")),
        ADV_F1, "served_values_are_live_bound_kept", 6,
    ),
)

#: Crash-class mutants: a split write transaction, invisible unless a crash falls between its halves.
CRASH_MUTANTS = (
    Mutant(
        "receipt_commits_before_cursor",
        "saveReceipt in two transactions: the receipt row commits, then the cursor moves in the next",
        _source_mutant(
            R, "_save_receipt",
            ("    return replace(st, receipts=st.receipts.set(k, receipt), authority=a)\n",
             "    st = replace(st, receipts=st.receipts.set(k, receipt))\n"
             "    _commit(st)  # MUTANT: the receipt commits in a transaction of its own\n"
             "    return replace(st, authority=a)\n"),
        ),
        # begin (no projects), commit, a delivery to p1 consumed as project_not_in_replica, cut
        # between its receipt and its cursor: a receipt ahead of the cursor.
        TINY_ADV, "receipts_cover_consumed", 3,
    ),
    Mutant(
        "version_bump_own_transaction",
        "a live delivery commits its record, then bumps the project's record version in a transaction of its own",
        _source_mutant(
            R, "_delivery_prepare",
            ("        st, result, fetch, changed = _retain_live_state(st, frame.project_id, frame.state, epochs)\n",
             "        st, result, fetch, changed = _retain_live_state(st, frame.project_id, frame.state, epochs)\n"
             "        _commit(st)  # MUTANT: the record version moves in a later transaction\n"),
        ),
        # begin, page (empty, complete), commit, a first save delivered live and cut after its record.
        TINY_ADV, "live_head_moves_with_its_record_version", 4,
    ),
    Mutant(
        "old_value_outlives_new_head",
        "a live delivery commits the new head first and deletes the old value in a later transaction",
        _source_mutant(
            R, "_retain_live_state",
            ("    row = LiveRow(incoming, desired)\n"
             "    st = replace(st, values=st.values.delete(k), records=st.records.set(k, row))\n",
             "    row = LiveRow(incoming, desired)\n"
             "    st = replace(st, records=st.records.set(k, row))\n"
             "    _commit(st)  # MUTANT: the old value goes in a later transaction\n"
             "    st = replace(st, values=st.values.delete(k))\n"),
        ),
        # the cloud creates A, delivers it live and installs its value, rotates it, and the rotation's
        # delivery is cut after the new head: the old value now sits under the new head.
        TINY_CLOUD, "crash_never_pairs_old_value_with_new_head", 8,
    ),
)

BOUNDS_USED = {m.bounds.name: m.bounds for m in MUTANTS + CRASH_MUTANTS}

#: rows of the summary table: (mutant, property, length, seconds, states)
SUMMARY: list[tuple[str, str, str, float, int]] = []


@pytest.fixture(scope="module", autouse=True)
def _print_summary():
    yield
    if not SUMMARY:
        return
    width = max(len(row[0]) for row in SUMMARY)
    pwidth = max(len(row[1]) for row in SUMMARY)
    lines = [
        "",
        f"{'mutant':<{width}}  {'caught by':<{pwidth}}  {'len':>3}  {'secs':>5}  {'states':>6}",
    ]
    for name, prop, length, seconds, states in SUMMARY:
        lines.append(f"{name:<{width}}  {prop:<{pwidth}}  {length:>3}  {seconds:5.2f}  {states:>6}")
    print("\n".join(lines))


def _param(m: Mutant):
    marks = [pytest.mark.xfail(strict=True, reason=f"NOT CAUGHT: {m.gap}")] if m.gap else []
    return pytest.param(m, id=m.name, marks=marks)


def test_mutants_are_many_and_distinct():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    assert sum(1 for m in MUTANTS if m.gap is None) >= 8


@pytest.mark.parametrize("mutant", [_param(m) for m in MUTANTS + CRASH_MUTANTS])
def test_mutant_is_caught(mutant: Mutant, monkeypatch):
    mutant.patch(monkeypatch)
    outcome = run(mutant.bounds).result
    violated = outcome.violations
    if violated:
        first = min(violated.values(), key=lambda v: v.length)
        shown = mutant.expect if mutant.expect in violated else first.prop.name
        length = violated[shown].length
    else:
        shown, length = "NOT CAUGHT", "-"
    SUMMARY.append((mutant.name, shown, str(length), outcome.seconds, outcome.states))

    assert violated, f"{mutant.name} ({mutant.bug}) is not caught by any property on {mutant.bounds.name}"
    assert mutant.expect in violated, f"{mutant.name}: expected {mutant.expect}, got {sorted(violated)}"
    counterexample = violated[mutant.expect]
    assert counterexample.steps[0].action is None  # starts from the initial state
    assert 1 <= counterexample.length <= mutant.max_length, (mutant.name, counterexample.length)


@pytest.mark.parametrize("mutant", [_param(m) for m in CRASH_MUTANTS])
def test_crash_mutant_needs_crash_points(mutant: Mutant, monkeypatch):
    """Without crash points (a crash only between actions or in a read window) the split is invisible."""
    mutant.patch(monkeypatch)
    outcome = run(replace(mutant.bounds, crash_points=CrashPoints.OFF)).result
    assert outcome.violations == {}, {k: v.length for k, v in outcome.violations.items()}


@pytest.mark.parametrize("bounds", list(BOUNDS_USED.values()), ids=list(BOUNDS_USED))
def test_control_unmutated_model_passes(bounds: Bounds):
    outcome = run(bounds).result
    assert outcome.violations == {}, {k: v.length for k, v in outcome.violations.items()}
