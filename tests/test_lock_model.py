"""The projection lock's model (model/lock.py) under its checker (checker/lock.py): state-space pins, the seed's
flaws found with short traces, each fix of ``fixed`` shown necessary (its flaw returns when it is left out), the
predicates on hand-made states, symmetry, the ITF trace and its page, and ``envreplica check --protocol lock``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from envreplica.checker import lock as cl
from envreplica.checker.bfs import check
from envreplica.model import lock as ml
from envreplica.spec import lock as spec

#: Distinct states of each bounds of the ``lock`` suite under ``fixed``, symmetry on (the gate's check).
FIXED_PINS = {"race": 23_553, "crash": 4_214, "namespace": 1_560, "fair": 36_885, "answers": 1_155}


def bounds(suite: str, name: str, fixes: frozenset[ml.Fix]) -> ml.LockBounds:
    return next(b for b in ml.suite(suite, fixes=fixes) if b.name == name)


def shortest(cfg: ml.LockBounds, prop_name: str) -> int | None:
    """The length of the shortest trace breaking ``prop_name`` at ``cfg`` (None: it holds there); a wedged lock
    (``spec.RECOVERABLE``) by the liveness check, a safety property by a search that checks it alone."""
    if prop_name == spec.RECOVERABLE[0]:
        run = cl.run(cfg)
        return None if run.stuck is None else run.stuck.length
    invariants = tuple(p for p in spec.INVARIANTS if p.name == prop_name)
    steps = tuple(p for p in spec.STEP_PROPERTIES if p.name == prop_name)
    assert invariants or steps, prop_name
    result = check(cl.build_model(cfg, invariants=invariants, step_properties=steps, sometimes=()),
                   stop_on_first=True)
    violation = result.violations.get(prop_name)
    return None if violation is None else violation.length


@pytest.fixture(scope="module")
def fixed_run() -> cl.SuiteRun:
    return cl.run_suite(ml.suite("lock"))


@pytest.mark.slow
def test_fixed_holds_every_property_at_lock_bounds_with_pinned_state_counts(fixed_run):
    assert {r.bounds.name: r.result.states for r in fixed_run.runs} == FIXED_PINS
    for r in fixed_run.runs:
        assert not r.result.violations, (r.bounds.name, list(r.result.violations))
        assert r.liveness is not None and r.liveness.ok, r.bounds.name
        assert r.result.complete
    assert fixed_run.missed == []  # every "sometimes" property witnessed somewhere: the pass is not vacuous
    assert fixed_run.ok


@pytest.mark.slow
def test_each_sometimes_property_is_witnessed_under_fixed_at_named_bounds(fixed_run):
    witnessed = {p.name: [r.bounds.name for r in fixed_run.runs if p.name not in r.missed] for p in spec.SOMETIMES}
    assert "crash" in witnessed["sometimes_crash_inside"]
    assert "crash" in witnessed["sometimes_crash_acquiring"]
    assert "race" in witnessed["sometimes_takeover"]
    assert "race" in witnessed["sometimes_acquired_after_takeover"]
    assert witnessed["sometimes_busy"]


def test_the_tiny_suite_witnesses_every_sometimes_property_under_fixed():
    """``lock-tiny`` (the gate's plumbing at small cost, in the tests that run the whole gate): fixed passes, and
    no "sometimes" property goes unwitnessed, so a pass there is not a vacuous one."""
    tiny = cl.run_suite(ml.suite("lock-tiny"))
    assert {r.bounds.name: r.result.states for r in tiny.runs} == {"crash": FIXED_PINS["crash"],
                                                                    "answers": FIXED_PINS["answers"]}
    assert tiny.ok and tiny.missed == []


def test_findings_are_one_per_fix_and_numbered_after_f6():
    assert {f.fix for f in cl.FINDINGS} == set(ml.Fix)
    assert len(cl.FINDINGS) == len(ml.Fix)
    assert [f.id for f in cl.FINDINGS] == [f"F{n}" for n in range(7, 7 + len(ml.Fix))]
    props = {p.name for p in (*spec.INVARIANTS, *spec.STEP_PROPERTIES)} | {spec.RECOVERABLE[0]}
    for f in cl.FINDINGS:
        assert f.prop in props, f
        assert f.bounds in {b.name for b in ml.PRESETS["lock"]}, f


@pytest.mark.parametrize("finding", cl.FINDINGS, ids=lambda f: f"{f.id}-{f.fix.value}")
def test_each_fix_is_needed_its_flaw_returns_alone_when_it_is_left_out(finding):
    """``fixed`` less one fix breaks the finding's property at the finding's bounds, in exactly its pinned steps;
    the whole ``fixed`` holds it there."""
    without = bounds("lock", finding.bounds, frozenset(ml.Fix) - {finding.fix})
    assert shortest(without, finding.prop) == finding.alone
    assert cl.finding_of(without.fixes) is finding


@pytest.mark.parametrize("finding", cl.FINDINGS, ids=lambda f: f"{f.id}-{f.fix.value}")
def test_the_seed_breaks_each_findings_property_within_30_steps(finding):
    seed = bounds("lock", finding.bounds, frozenset())
    length = shortest(seed, finding.prop)
    assert length == finding.seed
    assert length <= 30


@pytest.mark.slow
def test_the_seed_breaks_mutual_exclusion_with_two_inside():
    """The issue's observation (two processes inside after crashes) is in the model: the seed's race."""
    assert shortest(bounds("lock", "race", frozenset()), "mutual_exclusion") == 24
    assert shortest(bounds("lock", "namespace", frozenset()), "mutual_exclusion") == 19


def test_a_fix_alone_on_the_seed_is_not_enough_for_mutual_exclusion():
    """The fixes work together: the claimed release alone leaves the seed's takeover window (F8) open."""
    cfg = bounds("lock", "namespace", frozenset({ml.Fix.CLAIMED_RELEASE}))
    assert shortest(cfg, "mutual_exclusion") is not None


# ---------------------------------------------------------------------------
# The predicates on hand-made states (spec.lock reads field names only)


def proc(slot: int, *, inside=False, status=spec.Status.RUNNING, overtaken=0, pc="idle", entered=False,
         effect=None, ns=0, made=False):
    return SimpleNamespace(slot=slot, inside=inside, status=status, overtaken=overtaken, pc=SimpleNamespace(value=pc),
                           entered=entered, effect=effect, ns=ns, made=made)


def state(*procs, crashes=0, lock=None):
    return SimpleNamespace(procs=procs, crashes=crashes, fs=SimpleNamespace(lock=lock))


def test_mutual_exclusion_counts_only_live_processes_inside():
    assert spec.mutual_exclusion(state(proc(0, inside=True), proc(1)))
    assert not spec.mutual_exclusion(state(proc(0, inside=True), proc(1, inside=True)))
    assert spec.mutual_exclusion(state(proc(0, inside=True, status=spec.Status.ZOMBIE), proc(1, inside=True)))


def test_overtakes_are_bounded_by_the_others_and_waived_after_a_crash():
    assert spec.overtakes_are_bounded(state(proc(0, overtaken=1), proc(1)))
    assert not spec.overtakes_are_bounded(state(proc(0, overtaken=2), proc(1)))
    assert spec.overtakes_are_bounded(state(proc(0, overtaken=2), proc(1), crashes=1))


def test_release_removes_only_its_own():
    step = SimpleNamespace(slot=0)
    own = spec.Done(spec.Call.RMDIR, removed=spec.Removal((0, 1), "release"))
    other = spec.Done(spec.Call.RMDIR, removed=spec.Removal((1, 1), "release"))
    takeover = spec.Done(spec.Call.RENAME, removed=spec.Removal((1, 1), "takeover"))
    pre = state(proc(0), proc(1))
    assert spec.release_removes_only_its_own(pre, step, own, pre)
    assert not spec.release_removes_only_its_own(pre, step, other, pre)
    assert spec.release_removes_only_its_own(pre, step, takeover, pre)  # a takeover: the other property's


def test_takeover_only_of_the_dead():
    step = SimpleNamespace(slot=0)
    takeover = spec.Done(spec.Call.RENAME, removed=spec.Removal((1, 1), "takeover"))
    ghost = spec.Done(spec.Call.RENAME, removed=spec.Removal((-1, 0), "takeover"))
    assert not spec.takeover_only_of_the_dead(state(proc(0), proc(1)), step, takeover, None)
    assert spec.takeover_only_of_the_dead(state(proc(0), proc(1, status=spec.Status.ZOMBIE)), step, takeover, None)
    assert spec.takeover_only_of_the_dead(state(proc(0), proc(1)), step, ghost, None)  # dead before the first state


def test_answers_are_true():
    step = SimpleNamespace(slot=0)
    never_ran = state(proc(0))
    ran = {e: state(proc(0, entered=True, effect=e)) for e in spec.Effect}

    def ended(answer):
        return spec.Ended(spec.Call.RMDIR, answer)

    assert spec.answers_are_true(never_ran, step, ended(spec.Answer.BUSY), None)
    assert not spec.answers_are_true(ran[spec.Effect.OK], step, ended(spec.Answer.BUSY), None)
    assert spec.answers_are_true(ran[spec.Effect.OK], step, ended(spec.Answer.OK), None)
    assert spec.answers_are_true(ran[spec.Effect.UNCHANGED], step, ended(spec.Answer.FAILED_UNCHANGED), None)
    assert not spec.answers_are_true(ran[spec.Effect.UNCHANGED], step, ended(spec.Answer.FAILED_COMMITTED), None)
    assert spec.answers_are_true(ran[spec.Effect.COMMITTED], step, ended(spec.Answer.FAILED_COMMITTED), None)
    assert not spec.answers_are_true(ran[spec.Effect.OK], step, ended(spec.Answer.LOST), None)
    assert spec.answers_are_true(never_ran, step, spec.Done(spec.Call.READ), None)  # not an answer


def test_busy_only_while_a_live_owner_holds():
    step = SimpleNamespace(slot=0)

    def busy(slot, provable=True):
        return spec.Ended(spec.Call.RMDIR, spec.Answer.BUSY, busy=spec.Busy(slot, provable))

    assert spec.busy_only_while_a_live_owner_holds(state(proc(0), proc(1)), step, busy(1), None)
    assert not spec.busy_only_while_a_live_owner_holds(
        state(proc(0), proc(1, status=spec.Status.ZOMBIE)), step, busy(1), None)
    assert spec.busy_only_while_a_live_owner_holds(
        state(proc(0), proc(1, status=spec.Status.ZOMBIE)), step, busy(1, provable=False), None)
    assert not spec.busy_only_while_a_live_owner_holds(state(proc(0), proc(1)), step, busy(None), None)


def test_settled_reads_the_lock_and_who_runs():
    free = state(proc(0), proc(1))
    assert spec.settled(free)
    assert not spec.settled(state(proc(0, pc="wait"), proc(1)))
    empty = SimpleNamespace(owner=None)
    assert spec.settled(state(proc(0), lock=empty))
    assert not spec.settled(state(proc(0), lock=empty), empty_is_free=False)
    dead_here = SimpleNamespace(owner=SimpleNamespace(record=SimpleNamespace(slot=1, ns=0)))
    assert not spec.settled(state(proc(0), proc(1, status=spec.Status.REAPED), lock=dead_here))
    dead_elsewhere = SimpleNamespace(owner=SimpleNamespace(record=SimpleNamespace(slot=1, ns=1)))
    assert spec.settled(state(proc(0), proc(1, status=spec.Status.REAPED, ns=1), lock=dead_elsewhere))


# ---------------------------------------------------------------------------
# Symmetry, traces, the command line


def test_symmetry_keeps_verdicts_and_lengths_with_fewer_states():
    for fixes in (frozenset(), frozenset(ml.Fix)):
        cfg = bounds("lock", "crash", fixes)
        reduced, full = cl.run(cfg, symmetry=True), cl.run(cfg, symmetry=False)
        assert {k: v.length for k, v in reduced.result.violations.items()} == \
            {k: v.length for k, v in full.result.violations.items()}
        assert (reduced.stuck is None) == (full.stuck is None)
        assert reduced.stuck is None or reduced.stuck.length == full.stuck.length
        assert reduced.result.states < full.result.states


def test_actions_round_trip_through_json():
    for action in (ml.Start(0), ml.Step(1, 2), ml.Leave(0, spec.Effect.COMMITTED), ml.Crash(1), ml.Reap(0),
                   ml.Reuse(0, 3)):
        assert cl.action_from_json(json.loads(json.dumps(cl.action_json(action)))) == action
    with pytest.raises(ValueError, match="not an action of the lock model"):
        cl.action_from_json({"kind": "teleport"})


def test_a_counterexample_is_an_itf_trace_whose_page_marks_the_breaking_step(tmp_path):
    from envreplica.report.traces import read

    cfg = bounds("lock", "answers", frozenset())
    prop = next(p for p in spec.STEP_PROPERTIES if p.name == "answers_are_true")
    violation = check(cl.build_model(cfg, invariants=(), step_properties=(prop,), sometimes=()),
                      stop_on_first=True).violations[prop.name]
    path = cl.write_trace(tmp_path / "t.itf.json", violation, {"variant": "seed", "suite": "lock", "bounds": "answers",
                                                               "violated": prop.name, "fixes": []})
    doc = json.loads(path.read_text())
    assert doc["#meta"]["protocol"] == "lock"
    assert len(doc["states"]) == violation.length + 1
    view = read(path)
    assert view.kind == "counterexample"
    assert view.breaks_at == violation.length  # the answer is the last step
    assert "answers_are_true" in view.breaks_note
    # its picture: a sequence, every step a row, the breaking one red, the same steps as Mermaid text
    assert view.diagram is not None and view.diagram.svg.startswith("<svg")
    assert view.diagram.svg.count('class="breaks"') == 1 and "sequence" in view.diagram.caption
    assert view.diagram.dot.startswith("sequenceDiagram") and f"#{violation.length} " in view.diagram.dot


def run_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envreplica.cli.main", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=1800)


def test_check_refuses_another_protocols_bounds_with_one_line(tmp_path):
    run = run_cli("check", "--protocol", "lock", "--bounds", "cloud", cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--bounds cloud is not among the lock protocol's bounds (lock, lock-deep, lock-tiny)" in run.stderr
    run = run_cli("check", "--protocol", "lock", "--variant", "fix-f1", cwd=tmp_path)
    assert run.returncode == 2 and "takes seed or fixed" in run.stderr


@pytest.mark.slow
def test_check_protocol_lock_finds_the_seeds_flaws_and_writes_their_traces(tmp_path):
    seed = run_cli("check", "--protocol", "lock", "--variant", "seed", "--out", "traces", "--no-trace-pages",
                   cwd=tmp_path)
    assert seed.returncode == 1, seed.stdout[-3000:] + seed.stderr[-2000:]
    assert "VIOLATED mutual_exclusion at bounds race, 24 steps (the seed's flaws F8, F9, F11" in seed.stdout
    assert "FAIL: the projection lock (seed) breaks" in seed.stdout
    traces = sorted(p.name for p in (tmp_path / "traces").glob("lock-seed-*.itf.json"))
    assert "lock-seed-race-mutual_exclusion.itf.json" in traces
    assert "lock-seed-crash-lock_never_wedged.itf.json" in traces
    # (fixed passing through the command line is the gate's: tests/test_conformance_cli.py)


def test_the_bounds_presets_are_what_the_docs_name():
    assert set(ml.PRESETS) == {"lock", "lock-deep", "lock-tiny"}
    assert [b.name for b in ml.PRESETS["lock"]] == ["race", "crash", "namespace", "fair", "answers"]
    assert ml.PRESETS["lock-tiny"] == (ml.CRASH, ml.ANSWERS)
    fair = dataclasses.asdict(ml.FAIR)
    assert fair["calls"] == 3 and fair["crashes"] == 0  # three calls: a waiter can be overtaken twice (F13)


#: A lock check in a fresh process: every bounds' states, violations (lengths), stuck length and missed items.
_COUNTS = """
import json, sys
from envreplica.checker import lock as cl
from envreplica.model import lock as ml
from envreplica.spec import compiled
out = {"status": str(compiled.STATUS)}
for variant in ("seed", "fixed"):
    for b in ml.suite("lock", ml.Variant(variant)):
        if b.name in ("race", "fair") and variant == "fixed":
            continue  # the largest two: their pins above hold them interpreted
        r = cl.run(b)
        traces = {k: [cl.action_json(s.action) for s in v.steps[1:]] for k, v in r.result.violations.items()}
        if r.stuck is not None:
            traces["stuck"] = [cl.action_json(s.action) for s in r.stuck.steps[1:]]
        out[f"{variant}/{b.name}"] = [r.result.states, r.stuck.length if r.stuck else None, r.missed, traces]
        for v in [*r.result.violations.values(), *([r.stuck] if r.stuck else [])]:
            for s in v.steps[1:]:  # the report replays a trace from its JSON: compiled classes too
                assert cl.action_from_json(cl.action_json(s.action)) == s.action, s.action
print(json.dumps(out))
"""


@pytest.mark.slow
def test_compiled_and_interpreted_lock_models_agree_state_for_state():
    """mypyc compiles the lock's model (spec/compiled.py MODULES): both ways must give the same states, the same
    violations at the same lengths and the same traces (a compiled build once kept a tuple ``is`` could not find:
    1,833 states where the source gives 1,645)."""
    import os

    from envreplica.spec import compiled

    def counts(pure: bool) -> dict:
        env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
        if pure:
            env[compiled.PURE_ENV] = "1"
        done = subprocess.run([sys.executable, "-c", _COUNTS], env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    native = counts(pure=False)
    if not native["status"].startswith("compiled"):
        if os.environ.get("CI"):
            pytest.fail(f"the compiled model is not here ({native['status']}): under CI, make compiled must build it")
        pytest.skip(f"the compiled model is not here ({native['status']})")
    interpreted = counts(pure=True)
    assert interpreted.pop("status").startswith("interpreted") and native.pop("status").startswith("compiled")
    assert native == interpreted
    assert native["seed/namespace"][0] == 1_645 and native["fixed/crash"][0] == FIXED_PINS["crash"]


def test_a_renamings_key_is_the_key_of_the_renamed_state():
    """The representative is chosen by comparing candidates' keys without building them (``_Renaming.key``): each
    must be ``_key`` of the state the renaming builds, on every state of a bounds with three processes."""
    cfg = bounds("lock", "race", frozenset(ml.Fix))
    states: list[ml.LockState] = []
    check(cl.build_model(cfg, symmetry=False, observe_state=states.append), max_depth=14)
    assert len(states) > 5_000
    for st in states[::3]:
        for renaming in ml.renamings(cfg):
            assert renaming.key(st) == ml._key(renaming.state(st))


@pytest.mark.parametrize("finding", cl.FINDINGS, ids=lambda f: f.id)
def test_each_findings_saved_traces_replay_and_break_where_the_page_says(finding):
    """docs/traces holds each finding's traces (the seed's, and the flaw alone): each replays on today's model
    (report.lock marks the step where its property breaks) at the length docs/findings.md gives."""
    from envreplica.report.traces import read

    root = Path(__file__).resolve().parent.parent / "docs" / "traces"
    for label, length in (("seed", finding.seed), ("alone", finding.alone)):
        path = root / f"{finding.id}-lock-{label}-{finding.bounds}-{finding.prop}.itf.json"
        view = read(path)
        assert view.kind == "counterexample" and view.finding == finding.id
        assert len(view.steps) == length + 1
        assert view.breaks_at == length, view.breaks_note  # the property breaks at the last step, not before
