"""The migration lockstep (``conformance.migration``): it passes on ``impl.paired``, reaches what it must, finds
each mutant of ``tests/paired_mutants.py`` in a few moves, and its own machinery fails when a piece of it is
undone.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from envreplica.conformance.migration import coverage as cov
from envreplica.conformance.migration import run as R
from envreplica.conformance.migration.disk import KEY, Disk, Template
from envreplica.conformance.migration.example import Shared
from envreplica.conformance.migration.invocations import Mode
from envreplica.conformance.migration.machine import PRELUDES, prelude_moves
from envreplica.conformance.migration.observe import Observation, from_model
from envreplica.conformance.migration.sides import FINAL, LOCKSTEP_BOUNDS, SILENT, ModelSide, Move, allowed
from envreplica.conformance.migration.traces import move_from_json, move_to_json, read_moves, write_trace
from envreplica.impl import paired as P
from envreplica.model import migration as mm
from envreplica.spec.migration import EXIT_STATUS, WRITE_REFUSALS, Refusal

from paired_mutants import FAULT_MUTANTS, MUTANTS, install

THREADS = ((Mode.THREAD, 100),)


@pytest.fixture(scope="module")
def shared():
    s = Shared()
    yield s
    s.close()


def _migration(pid: int = 0, mode: Mode = Mode.THREAD) -> list[Move]:
    return [Move(mm.Invoke(mm.Role.MIGRATE), mode), *[Move(mm.Step(pid))] * 16]


# ---------------------------------------------------------------------------
# It passes, and reaches what it must


@pytest.mark.slow  # the ci profile's 300 examples, about 100 s: make test-slow (make test runs the check profile's)
def test_the_ci_run_passes_and_reaches_every_required_item(shared, tmp_path):
    report = R.run_migration_lockstep("ci", shared=shared, out_dir=tmp_path)
    assert report.ok, report.failure
    assert report.examples >= R.PROFILE_EXAMPLES["ci"] and report.moves > 10_000
    unavailable = [item for entry in report.unavailable for item in entry.split(" (")[0].split(", ")]
    assert report.coverage.unreached(unavailable=unavailable) == []
    print(f"migration lockstep ci: {report.examples} examples, {report.moves} moves, "
          f"{report.moves_per_second:.0f} moves/s")


def test_the_check_profile_reaches_every_required_item_through_its_tour(shared):
    """``envreplica check``'s budget (20 drawn examples) reaches every required item, because it plays the coverage
    tour first; without the tour the same budget leaves items unreached (the tour is what reaches them)."""
    report = R.run_migration_lockstep("check", shared=shared)
    assert report.ok, report.failure
    unavailable = [item for entry in report.unavailable for item in entry.split(" (")[0].split(", ")]
    assert report.coverage.unreached(unavailable=unavailable) == []
    assert 0 < report.tour_examples <= 15 and report.examples == report.tour_examples + R.PROFILE_EXAMPLES["check"]
    drawn = R.run_migration_lockstep("check", shared=shared, tour=False)
    assert drawn.ok and drawn.tour_examples == 0
    assert drawn.coverage.unreached(unavailable=unavailable)
    print(f"check profile: {report.tour_examples} tour examples ({report.tour_moves} moves) + "
          f"{R.PROFILE_EXAMPLES['check']} drawn, {report.coverage.reached()} required items; drawn alone "
          f"{drawn.coverage.reached()}")


def test_the_tour_is_found_on_the_model_and_covers_what_the_search_reached(shared):
    """The tour's examples replay on the model alone and reach every item it claims, each example cut short."""
    from envreplica.conformance.migration.run import run_migration_lockstep
    from envreplica.conformance.migration.tour import _first_reached, find_tour

    tour = find_tour(shared, cov.REQUIRED, run_migration_lockstep)
    claimed: set[str] = set()
    for moves in tour.examples:
        first = _first_reached(shared, moves, cov.REQUIRED)
        assert max(first.values()) <= len(moves)
        claimed |= set(first)
    assert claimed >= tour.reached
    assert tour.reached == {f"{g}: {i}" for g, items in cov.REQUIRED.items() for i in items}
    assert len(tour.examples) <= 15 and tour.moves < 600


@pytest.mark.parametrize("mode", [Mode.THREAD, Mode.FORK, Mode.EXEC])
def test_a_whole_migration_and_recovery_agree_in_each_mode(mode, shared):
    """Each way of running an invocation (a thread, a forked process, a fresh interpreter) takes every step."""
    moves = [Move(mm.Invoke(mm.Role.MIGRATE), mode), *[Move(mm.Step(0))] * 9, Move(mm.Crash(0)),
             Move(mm.Invoke(mm.Role.RECOVER), mode), *[Move(mm.Step(1))] * 13]
    found, example = R.replay_moves(shared, moves)
    assert found is None, found
    assert len(example.moves) == len(moves)
    assert example.model.st.files.recovery_result and not example.model.st.procs


# ---------------------------------------------------------------------------
# Each mutant is found, in a few moves


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_is_found_in_a_few_moves(mutant, shared, monkeypatch):
    install(mutant, monkeypatch)
    report = R.run_migration_lockstep("ci", shared=shared, modes=THREADS)
    assert not report.ok, f"{mutant.name} ({mutant.summary}) passed the migration lockstep"
    assert report.shrunk_moves is not None and report.shrunk_moves <= mutant.moves, report.failure
    print(f"{mutant.name}: {report.key}, {report.shrunk_moves} moves (found after {report.found_after_examples} "
          f"examples, {report.examples} with shrinking)\n"
          f"{report.failure}")


def test_there_is_a_fault_mutant_per_class():
    assert {m.fault for m in FAULT_MUTANTS} == {"wrong master key", "live owner", "locked store", "read-only store",
                                               "same store twice", "racing invocations", "edited publication"}
    assert all(m.moves <= 12 for m in FAULT_MUTANTS)


# ---------------------------------------------------------------------------
# The machinery


def test_step_names_are_the_models():
    """The implementation's steps are the model's program counters but the silent ones, in the same order."""
    assert set(P.MIGRATE_STEPS) | set(P.RECOVER_STEPS) == {pc.value for pc in mm.Pc} - {pc.value for pc in SILENT}
    assert cov.REQUIRED["step"] == set(P.MIGRATE_STEPS) | set(P.RECOVER_STEPS)
    assert FINAL == {P.MIGRATE_STEPS[-1], P.RECOVER_STEPS[-1]}


def test_every_refusal_is_required_or_excused():
    codes = {r.value for r in EXIT_STATUS}
    excused = {r.value for r in cov.UNREACHABLE | cov.RARE}
    assert cov.REQUIRED["refusal"] == codes - excused and excused <= codes
    assert set(Refusal) == set(EXIT_STATUS) | WRITE_REFUSALS


def test_the_model_side_takes_silent_steps_with_the_step_before():
    side = ModelSide()
    side.apply(mm.Invoke(mm.Role.MIGRATE))
    assert str(side.apply(mm.Step(0))) == "step prepare"
    assert str(side.apply(mm.Step(0))) == "step retain parent"
    assert side.st.procs[0].pc is mm.Pc.LOCK and side.st.files.inputs == (True, True)


def test_without_renumbers_invocations_and_drops_a_dropped_ones_moves():
    moves = [Move(mm.Invoke(mm.Role.MIGRATE)), Move(mm.Step(0)), Move(mm.Invoke(mm.Role.RECOVER)),
             Move(mm.Step(1)), Move(mm.Crash(0)), Move(mm.Step(1))]
    assert R.without(moves, [0]) == [Move(mm.Invoke(mm.Role.RECOVER)), Move(mm.Step(0)), Move(mm.Step(0))]
    assert R.without(moves, [3, 4]) == [moves[0], moves[1], moves[2], moves[5]]


def test_minimize_deletes_what_the_divergence_does_not_need(shared, monkeypatch):
    """A divergence after needless moves (writes, faults, another invocation) is minimized to the moves that
    show it, and the key stays the same."""
    install(next(m for m in MUTANTS if m.name == "key_unproven"), monkeypatch)
    padding = [Move(mm.Invoke(mm.Role.RECOVER)), Move(mm.Step(0)), Move(mm.Connect(1)), Move(mm.Write(1, 1)),
               Move(mm.Disconnect(1)), Move(mm.ReadOnly(0)), Move(mm.Writable(0))]
    moves = [*padding, Move(mm.Invoke(mm.Role.MIGRATE, mm.InputFault.WRONG_KEY)), Move(mm.Step(1))]
    found, _ = R.replay_moves(shared, moves)
    assert found is not None and found.key == "outcome:exit"
    small, reason, lines, records = R.minimize(shared, moves, found.key, found.reason)
    assert small == [Move(mm.Invoke(mm.Role.MIGRATE, mm.InputFault.WRONG_KEY)), Move(mm.Step(0))]
    assert "master_key_wrong" in reason and len(lines) == len(records) == 2


def test_minimize_stops_at_its_replay_budget(shared, monkeypatch):
    install(next(m for m in MUTANTS if m.name == "key_unproven"), monkeypatch)
    moves = [Move(mm.Connect(1)), Move(mm.Disconnect(1)), Move(mm.Invoke(mm.Role.MIGRATE, mm.InputFault.WRONG_KEY)),
             Move(mm.Step(0))]
    found, _ = R.replay_moves(shared, moves)
    assert found is not None
    calls = []
    real = R.replay_moves

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(R, "replay_moves", counted)
    small, *_ = R.minimize(shared, moves, found.key, found.reason, replays=2)
    assert len(calls) == 2 and small == moves  # the failure replayed, one deletion tried (it was needed)
    calls.clear()
    small, *_ = R.minimize(shared, moves, found.key, found.reason, replays=40)
    assert len(small) == 2 and len(calls) <= 40


def test_the_comparison_covers_every_field(shared, monkeypatch):
    """A real side that differs in any one field of the observation is a divergence naming that field."""
    for field in fields(Observation):
        monkeypatch.undo()
        original = Disk.observe

        def perturbed(self, invocations, name=field.name):
            obs = original(self, invocations)
            if name == "stores":
                stores = list(obs.stores)
                stores[1] = replace(stores[1], admission="recovery")
                return replace(obs, stores=tuple(stores))
            value = getattr(obs, name)
            return replace(obs, **{name: not value if isinstance(value, bool) else ("x",) if name == "invocations"
                                   else "edited" if value is None else None})

        monkeypatch.setattr(Disk, "observe", perturbed)
        found, _ = R.replay_moves(shared, [Move(mm.Invoke(mm.Role.MIGRATE))])
        assert found is not None and found.key.startswith("state:"), field.name
        assert (field.name if field.name != "stores" else "resource.admission") in found.key


def test_the_outcome_is_compared(shared, monkeypatch):
    """An implementation that takes another step than the model's is caught at that step."""
    monkeypatch.setattr(P, "MIGRATE_STEPS", P.MIGRATE_STEPS)  # no change: the hook names are in the code
    real = P._migrate_locked

    def skips_the_lock_hook(*args, **kwargs):
        hook = args[8]
        return real(*args[:8], lambda step: None if step == "lock" else hook(step), *args[9:], **kwargs)

    monkeypatch.setattr(P, "_migrate_locked", skips_the_lock_hook)
    found, _ = R.replay_moves(shared, _migration())
    assert found is not None and found.key == "outcome:step" and "lock" in found.reason


def test_the_model_is_held_to_its_properties(shared, monkeypatch):
    """The model's own moves are checked against spec.migration's properties (here: one that never holds)."""
    from envreplica.spec import migration as spec

    broken = spec.Property("never", lambda st: False, "invariant")
    monkeypatch.setattr(spec, "INVARIANTS", (broken,))
    found, _ = R.replay_moves(shared, [Move(mm.Invoke(mm.Role.MIGRATE))])
    assert found is not None and found.key == "model:never"


def test_moves_and_traces_round_trip(tmp_path):
    moves = [Move(mm.Invoke(mm.Role.MIGRATE, mm.InputFault.HARDLINK), Mode.FORK), Move(mm.Step(0)),
             Move(mm.Crash(0)), Move(mm.Connect(1)), Move(mm.Write(1, 2)), Move(mm.Lock(1)), Move(mm.Unlock(1)),
             Move(mm.Disconnect(1)), Move(mm.ReadOnly(0)), Move(mm.Writable(0)), Move(mm.Edit(mm.Doc.BACKUP, 1)),
             Move(mm.Repair(mm.Doc.RESULT)), Move(mm.MoveAway(mm.Doc.RESULT)),
             Move(mm.Invoke(mm.Role.RECOVER, mm.InputFault.COPY))]
    assert [move_from_json(json.loads(json.dumps(move_to_json(m)))) for m in moves] == moves
    path = write_trace(tmp_path, "t", moves, [{} for _ in moves], "why", {"key": "k"})
    assert read_moves(path) == moves
    assert json.loads(path.read_text().splitlines()[0])["reason"] == "why"


def test_the_abstraction_of_a_store(tmp_path):
    """What the lockstep calls a store's data: original, migrated (under the key), other; writes apart."""
    template = Template(tmp_path / "t")
    disk = Disk(tmp_path / "d", template, {})
    assert template.data_of(disk.stores[0]) == (1, "original")
    assert template.data_of(template.other) == (1, "other")
    P.migrate_paired(disk.stores, master_key=KEY)
    assert template.data_of(disk.stores[0]) == (2, "migrated")
    from envreplica.conformance.migration.writer import Writer

    w = Writer()
    w.handle({"op": "connect", "path": str(disk.stores[0])})
    assert w.handle({"op": "write", "version": 2, "marker": "zz-foreign-1"}) == {"outcome": "landed"}
    assert w.handle({"op": "write", "version": 1, "marker": "zz-foreign-2"})["outcome"] == "fence"
    w.close()
    assert template.data_of(disk.stores[0]) == (2, "migrated+1w")


def test_every_prelude_plays(shared):
    for prelude in PRELUDES:
        for depth in (0, 7, 15):
            moves = prelude_moves(prelude, depth, depth % 12, Mode.THREAD)
            found, example = R.replay_moves(shared, moves)
            assert found is None, (prelude, depth, found)
            assert len(example.moves) >= min(len(moves), 1) or prelude == "none"


def test_the_lockstep_leaves_out_what_it_says():
    st = mm.init(LOCKSTEP_BOUNDS)
    read_only = mm.next_state(LOCKSTEP_BOUNDS, st, mm.ReadOnly(0))[0]
    assert not allowed(read_only, mm.Connect(0)) and allowed(read_only, mm.Connect(1))
    assert from_model(st, {}).stores[0].data == "original"


@pytest.mark.nightly
def test_the_nightly_run_passes(tmp_path):
    report = R.run_migration_lockstep("nightly", out_dir=tmp_path)
    assert report.ok, report.failure
    assert report.coverage.unreached(required={**cov.REQUIRED, "mode": frozenset({"thread", "fork", "exec"}),
                                               "refusal": cov.REQUIRED["refusal"] | {r.value for r in cov.RARE}}) == []


@pytest.mark.nightly
def test_the_refusals_called_unreachable_are_never_produced():
    """An exhaustive search of the model at three bounds (with the lockstep's readings and faults) produces every
    refusal but those ``coverage.UNREACHABLE`` names."""
    from envreplica.checker import migration as cm
    from envreplica.checker.bfs import check
    from envreplica.spec.migration import Property, Refused

    seen: set[Refusal] = set()

    def note(pre, action, result, post) -> bool:
        if isinstance(result, Refused):
            seen.add(result.code)
        return True

    refuse = mm.Reading(lock=mm.LockReading.REFUSE)
    F = mm.Fault
    for bounds in (mm.MigrationBounds("a", migrations=2, recoveries=2, crashes=1, writes=1, reading=refuse),
                   mm.MigrationBounds("b", migrations=2, recoveries=1, crashes=1, writes=0, reading=refuse,
                                      faults=frozenset({F.EDIT, F.READ_ONLY, F.INPUT}), fault_actions=1),
                   mm.MigrationBounds("c", migrations=2, recoveries=1, crashes=1, writes=1, reading=refuse,
                                      faults=frozenset({F.LOCK}), fault_actions=1)):
        check(cm.build_model(bounds, step_properties=(Property("note", note, "step"),)))
    assert not seen & cov.UNREACHABLE


def test_the_start_choices_spread_over_every_option_and_shrink_to_the_first():
    """``_Picks`` hashes all the start's draws: every archetype and prelude comes up in a derandomized run of
    the ci size (a draw reduced modulo the options never gave some), and draws all 0 choose the first of each."""
    from hypothesis import given, settings, strategies as st

    from envreplica.conformance.migration.machine import ARCHETYPES, PRELUDE_DRAWS, _Picks

    assert _Picks([0] * 11)(20, len(ARCHETYPES)) == 0 and _Picks([0] * 11)(0, len(PRELUDE_DRAWS)) == 0
    seen: dict[str, set[int]] = {"archetype": set(), "prelude": set(), "raw": set()}

    @settings(max_examples=R.PROFILE_EXAMPLES["ci"], database=None, derandomize=True)
    @given(st.lists(st.integers(0, 2**16 - 1), min_size=11, max_size=11))
    def draw(picks: list[int]) -> None:
        seen["archetype"].add(_Picks(picks)(20, len(ARCHETYPES)))
        seen["prelude"].add(_Picks(picks)(0, len(PRELUDE_DRAWS)))
        seen["raw"].add(picks[10] % len(ARCHETYPES))

    draw()
    assert seen["archetype"] == set(range(len(ARCHETYPES))) and seen["prelude"] == set(range(len(PRELUDE_DRAWS)))
    assert seen["raw"] != set(range(len(ARCHETYPES)))  # why the hash: the draws alone leave options out


def test_a_run_pins_the_literals_and_caps_the_shrink(shared, monkeypatch):
    """``run_migration_lockstep`` draws from envreplica's own literals (the same examples in any process) and caps
    Hypothesis's shrinking in calls (``SHRINK_CALLS``, read when it runs)."""
    import contextlib

    entered: list[object] = []

    @contextlib.contextmanager
    def recorded(name, *args):
        entered.append((name, *args))
        yield

    monkeypatch.setattr(R.literals, "pinned", lambda: recorded("pinned"))
    monkeypatch.setattr(R, "shrink_budget", lambda calls, guard: recorded("budget", calls))
    monkeypatch.setattr(R, "SHRINK_CALLS", 7)
    report = R.run_migration_lockstep("dev", max_examples=1, shared=shared)
    assert report.ok and ("pinned",) in entered and ("budget", 7) in entered
