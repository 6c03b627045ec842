"""Symmetry reduction (``model.symmetry``): the representative is canonical, the renamings are symmetries.

Claims, each a test:

1. **Canonical.** On states of bounds where names are interchangeable (every
   state a short BFS reaches, and deeper ones from random walks),
   ``canonical`` is idempotent, gives the same world for every renaming of a
   state, and gives a renaming of the state itself (a world over the same
   domains). ``rename`` renames every field that holds a name: it agrees
   with a reflective renaming of every string in the world.
2. **The renamings are symmetries** (soundness, checked, not argued): the
   states reachable within a depth are closed under every renaming of the
   group, and on sampled states each renaming maps the successors, with every
   property's verdict on each step, onto the renamed state's. Negative
   controls show the checks have teeth: renaming attempts in cloud mode,
   project ids of different byte lengths under a tight acknowledgement
   bound, or keys, breaks closure (``model.symmetry`` leaves them out).
3. **Same answers.** Every model mutant of ``tests/test_model_mutants.py``,
   finding F1 (variant ``seed``) and finding F2 (variant ``fix-f1``) is
   found with and without symmetry at the same shortest length, and the
   verdict table (property -> violated at length / witnessed at depth /
   holds) is the same; on bounds where symmetry applies the states shrink.
   Mutant bounds have one project, attempt and stream, where the reduction
   is the identity (the search is then the plain one: asserted), so each
   mutant also runs on its bounds widened by a second attempt (adversary)
   or project (cloud).

Slow (``-m slow``): the widened bounds of the four largest mutants, and the
named bounds (``default`` and ``cloud-2p``) under ``fixed`` and ``seed``.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import fields, is_dataclass, replace

import pytest

from envreplica.checker.bfs import check
from envreplica.checker.run import build_model, run
from envreplica.checker.simulate import simulate
from envreplica.model.fmap import FMap
from envreplica.model.generate import Mode, Move, enabled, next_state
from envreplica.model.presets import ADVERSARY, ADVERSARY_F2, ADVERSARY_WIDE, CLOUD, CLOUD_2P, suite
from envreplica.model.replica import _ack_header_bytes
from envreplica.model.state import ReadRequest, Variant
from envreplica.model.symmetry import ATTEMPT, ORG, PROJECT, STREAM, Symmetry, groups, symmetry
from envreplica.spec import properties as P
from envreplica.spec.domain import Cursor

from test_model_mutants import CRASH_MUTANTS, MUTANTS, Mutant

#: Bounds with interchangeable names, small enough to enumerate.
CLOUD_2P_6 = replace(CLOUD_2P, name="cloud-2p-6", max_depth=6)  # projects (cloud mode)
ADV_WIDE_3 = replace(ADVERSARY_WIDE, name="adversary-wide-3", max_depth=3)  # attempts, streams, orgs (org/org2)
ADV_2P2A = replace(ADVERSARY, name="adversary-2p2a", projects=("p1", "p2"), attempts=("a1", "a2"),
                   max_depth=3)  # projects and attempts (adversary mode)
SAMPLED = (CLOUD_2P_6, ADV_WIDE_3, ADV_2P2A)


def _reachable(bounds):
    """Every state a BFS (no symmetry) reaches within ``bounds.max_depth``."""
    seen = []
    model = build_model(bounds)
    model.observe_state = seen.append
    result = check(model, max_depth=bounds.max_depth)
    assert result.states == len(seen)
    return seen


_STATES: dict = {}


def _states(bounds):
    """The reachable states of ``bounds``, plus deeper ones from random walks (cached per bounds)."""
    if bounds.name not in _STATES:
        deep: list = []
        simulate(bounds, walks=12, depth=30, seed=7, record=deep)
        _STATES[bounds.name] = (_reachable(bounds), deep)
    return _STATES[bounds.name]


def _sample(bounds, n: int, seed: int = 0):
    shallow, deep = _states(bounds)
    rng = random.Random(seed)
    return rng.sample(shallow, min(n, len(shallow))) + rng.sample(deep, min(n // 2, len(deep)))


def _random_maps(sym: Symmetry, rng: random.Random) -> dict:
    maps = {}
    for cls, parts in sym.groups.items():
        m = {}
        for group in parts:
            shuffled = list(group)
            rng.shuffle(shuffled)
            m.update(zip(group, shuffled))
        maps[cls] = m
    return maps


def _all_maps(sym: Symmetry) -> list[dict]:
    """Every renaming of the group (each class's groups permuted independently)."""
    per_group = [(cls, group) for cls, parts in sym.groups.items() for group in parts]
    out = []
    for images in itertools.product(*(itertools.permutations(g) for _, g in per_group)):
        maps: dict = {}
        for (cls, group), image in zip(per_group, images):
            maps.setdefault(cls, {}).update(zip(group, image))
        out.append(maps)
    return out


# ---------------------------------------------------------------------------
# A reflective renaming: every string in the world that is a name (and the project segment of a
# value-store parameter name), whatever field it sits in
# ---------------------------------------------------------------------------


def _reflective(x, names: dict, projects: dict, prefix: str = "/envreplica"):
    if isinstance(x, str):
        return names.get(x, x)
    if isinstance(x, ReadRequest):
        for old, new in projects.items():
            head = f"{prefix}/projects/{old}/"
            if x.name.startswith(head):
                return ReadRequest(x.ref, f"{prefix}/projects/{new}/" + x.name[len(head):])
        return x
    if isinstance(x, tuple):
        return tuple(_reflective(v, names, projects, prefix) for v in x)
    if isinstance(x, FMap):
        return FMap({_reflective(k, names, projects, prefix): _reflective(v, names, projects, prefix)
                     for k, v in x.items()})
    if is_dataclass(x) and not isinstance(x, type):
        return type(x)(*(_reflective(getattr(x, f.name), names, projects, prefix) for f in fields(x)))
    return x


def _flat(maps: dict) -> dict:
    flat: dict = {}
    for m in maps.values():
        for k, v in m.items():
            assert flat.get(k, v) == v
            flat[k] = v
    return flat


# ---------------------------------------------------------------------------
# The groups
# ---------------------------------------------------------------------------


def test_groups_are_what_the_docstring_says():
    assert groups(CLOUD) == {}  # one project; attempts and streams are positional in cloud mode
    assert groups(replace(CLOUD, attempts=("a1", "a2", "a3"), streams=("s1", "s2"))) == {}
    assert groups(CLOUD_2P) == {PROJECT: (("p1", "p2"),)}
    assert groups(ADVERSARY) == {}
    # Organisations enter no byte count: "org" and "org2" are one group.
    assert groups(ADVERSARY_WIDE) == {ATTEMPT: (("a1", "a2"),), STREAM: (("s1", "s2"),), ORG: (("org", "org2"),)}
    # Project ids enter the page acknowledgement's size: only equal byte lengths are interchangeable.
    assert groups(replace(ADVERSARY, projects=("p1", "p10", "p2", "p11"))) == {PROJECT: (("p1", "p2"), ("p10", "p11"))}
    assert groups(replace(ADVERSARY, projects=("p1", "p10"))) == {}
    assert symmetry(CLOUD) is None and symmetry(CLOUD_2P) is not None


# ---------------------------------------------------------------------------
# 1. Canonical
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", SAMPLED, ids=lambda b: b.name)
def test_rename_renames_every_name_field(bounds):
    sym = Symmetry(bounds)
    rng = random.Random(1)
    for world in _sample(bounds, 300):
        maps = _random_maps(sym, rng)
        assert sym.rename(world, maps) == _reflective(world, _flat(maps), maps.get(PROJECT, {}))


@pytest.mark.parametrize("bounds", SAMPLED, ids=lambda b: b.name)
def test_canonical_is_idempotent_and_invariant_under_renaming(bounds):
    sym = Symmetry(bounds)
    every = _all_maps(sym)
    rng = random.Random(2)
    moved = 0
    for world in _sample(bounds, 400):
        rep = sym.canonical(world)
        assert sym.canonical(rep) == rep
        # the representative is a renaming of the world (so a state over the same domains)
        assert any(sym.rename(world, maps) == rep for maps in every)
        moved += rep != world
        for maps in rng.sample(every, min(4, len(every))):
            renamed = sym.rename(world, maps)
            fresh = Symmetry(bounds)  # no memo shared with the first
            assert fresh.canonical(renamed) == rep, maps
            assert sym.canonical(renamed) == rep
    assert moved, "no sampled state was renamed: the test shows nothing"


def test_ties_between_names_in_use_are_resolved_canonically():
    """Names in use whose signatures tie, where no single swap is a symmetry of the world: one representative.

    Staged rows of attempt a1 for p1 and of a2 for p2, alike, and no current attempt (a state no run
    reaches: ``canonical`` must be canonical on any world over the domains, a tampered one included).
    Each attempt's and each project's signature is the same (the other name is only "another"), and
    swapping the attempts alone changes the world; the arrangements are searched.
    """
    from envreplica.model.generate import World
    from envreplica.model.state import INITIAL, StageProject

    row = StageProject(0, None, True)
    world = World(replace(INITIAL, stage_projects=FMap({("a1", "p1"): row, ("a2", "p2"): row})), None)
    sym = Symmetry(ADV_2P2A)
    sigs, starred = sym.signatures(world)
    assert starred and sigs[(ATTEMPT, "a1")] == sigs[(ATTEMPT, "a2")] and sigs[(PROJECT, "p1")] == sigs[(PROJECT, "p2")]
    assert sym.rename(world, {ATTEMPT: {"a1": "a2", "a2": "a1"}}) != world
    reps = {Symmetry(ADV_2P2A).canonical(sym.rename(world, maps)) for maps in _all_maps(sym)}
    assert len(reps) == 1


# ---------------------------------------------------------------------------
# 2. The renamings are symmetries (and the ones left out are not)
# ---------------------------------------------------------------------------


def _closed(bounds, sym: Symmetry, rename=None) -> bool:
    """The states reachable within the depth are closed under every renaming of ``sym``'s group."""
    reached = set(_reachable(bounds))
    rename = rename or sym.rename
    return all({rename(w, maps) for w in reached} == reached for maps in _all_maps(sym))


@pytest.mark.parametrize("bounds", SAMPLED, ids=lambda b: b.name)
def test_reachable_states_are_closed_under_renaming(bounds):
    assert _closed(bounds, Symmetry(bounds))


def _verdicts_of_step(pre, action, result, post) -> tuple:
    a, b = pre.replica, post.replica
    step = tuple(p.check(a, action, result, b) for p in P.STEP_PROPERTIES)
    state = tuple(p.check(b) for p in P.INVARIANTS + tuple(q for q in P.SOMETIMES if q.kind == "sometimes-state"))
    some = tuple(q.check(a, action, result, b) for q in P.SOMETIMES if q.kind == "sometimes-step")
    after = tuple(q.after.check(a, action, result, b) for q in P.SOMETIMES if q.kind == "sometimes-after")
    return step + state + some + after


def _successors(bounds, world) -> set:
    cfg = bounds.model_config()
    out = set()
    for action in list(enabled(bounds, world, cfg)):
        nxt, result = next_state(bounds, world, action, cfg)
        out.add((nxt, _verdicts_of_step(world, action, result, nxt)))
    return out


@pytest.mark.parametrize("bounds", SAMPLED, ids=lambda b: b.name)
def test_renaming_maps_steps_and_verdicts_onto_the_renamed_state(bounds):
    sym = Symmetry(bounds)
    rng = random.Random(3)
    for world in _sample(bounds, 60, seed=4):
        maps = _random_maps(sym, rng)
        mine = {(sym.rename(nxt, maps), verdicts) for nxt, verdicts in _successors(bounds, world)}
        assert mine == _successors(bounds, sym.rename(world, maps)), maps


def test_negative_control_cloud_attempts_are_not_interchangeable():
    bounds = replace(CLOUD, name="cloud-attempts", max_depth=4)  # attempts a1, a2: begun in this order
    assert not _closed(bounds, Symmetry(bounds, forced_groups={ATTEMPT: (("a1", "a2"),)}))
    # Streams likewise (the cloud moves to the next stream by position).
    assert not _closed(bounds, Symmetry(bounds, forced_groups={STREAM: (("s1", "s2"),)}))


def test_negative_control_project_ids_of_different_lengths_under_a_tight_ack_bound():
    # The acknowledgement of an empty first page just fits for p1 and not for p22.
    fits = _ack_header_bytes("op", "a1", "p1", None, 0, True, (1, 2), Cursor("s1", 0))
    bounds = replace(ADVERSARY, name="adversary-p1-p22", projects=("p1", "p22"), ack_page_bytes=fits,
                     epoch_sets=((1, 2),), max_record_version=0, max_sequence=0, restarts=False, max_depth=3)
    assert groups(bounds) == {}  # left out, rightly:
    sym = Symmetry(bounds, forced_groups={PROJECT: (("p1", "p22"),)})
    assert not _closed(bounds, sym)
    # The same bounds with a roomy bound: the renaming is a symmetry.
    roomy = replace(bounds, ack_page_bytes=fits + 100)
    assert _closed(roomy, sym)


def test_negative_control_keys_are_not_interchangeable():
    bounds = replace(ADVERSARY, name="adversary-keys", keys=("A", "B"), alphabet_extra=False, epoch_sets=((1, 2),),
                     max_sequence=0, restarts=False, max_depth=3)
    sym = Symmetry(bounds, forced_groups={"key": (("A", "B"),)})

    def rename_keys(world, maps):
        return _reflective(world, maps["key"], {})

    assert not _closed(bounds, sym, rename_keys)


# ---------------------------------------------------------------------------
# 3. Same answers: mutants, F1, F2
# ---------------------------------------------------------------------------


def verdict_table(result) -> dict:
    """Property -> ("violated", shortest length) / ("witnessed", depth) / "holds" / "not witnessed"."""
    table = {p.name: ("not witnessed" if p.kind.startswith("sometimes") else "holds") for p in P.ALL}
    table.update({name: ("violated", v.length) for name, v in result.violations.items()})
    table.update({name: ("witnessed", depth) for name, depth in result.witnessed.items()})
    return table


def _same_answers(bounds, expect: str = None, reduced: bool = True):
    plain = run(bounds).result
    reduced_run = run(bounds, symmetry=True).result
    assert verdict_table(reduced_run) == verdict_table(plain)
    if expect is not None:
        assert expect in plain.violations and expect in reduced_run.violations
    for name, violation in reduced_run.violations.items():
        assert violation.steps[0].action is None  # a real path from the initial state (replayed by the checker)
        prop = P.by_name(name)
        if prop.kind == "invariant":
            assert not prop.check(violation.steps[-1].state.replica)
    if reduced:
        assert reduced_run.states < plain.states, (reduced_run.states, plain.states)
    return plain, reduced_run


def _widened(m: Mutant):
    """The mutant's bounds with a second attempt (adversary) or project (cloud), to the depth its catch needs."""
    b = m.bounds
    if b.mode is Mode.ADVERSARY:
        return replace(b, name=f"{b.name}+a2", attempts=("a1", "a2"), max_depth=m.max_length)
    # the cloud begins with every project, so a commit pages the second one too: one more step
    return replace(b, name=f"{b.name}+p2", projects=("p1", "p2"), max_depth=m.max_length + 1)


#: widened mutants whose plain search takes more than a second or two
_SLOW_WIDENED = {"live_after_ignores_state_change", "commit_promotes_absent_rows", "commit_copies_all_stage_values",
                 "live_keeps_value_when_withheld", "old_value_outlives_new_head"}


def _mutant_param(m: Mutant, slow_names=frozenset()):
    marks = [pytest.mark.xfail(strict=True, reason=m.gap)] if m.gap else []
    if m.name in slow_names:
        marks += [pytest.mark.slow, pytest.mark.nightly]  # the rest of the widened mutants run in make test
    return pytest.param(m, id=m.name, marks=marks)


@pytest.mark.parametrize("mutant", [_mutant_param(m) for m in MUTANTS + CRASH_MUTANTS])
def test_mutant_on_its_bounds_same_with_symmetry(mutant: Mutant, monkeypatch):
    mutant.patch(monkeypatch)
    if symmetry(mutant.bounds) is None:
        # nothing interchangeable: run(..., symmetry=True) is the plain search (Model.canonical is None)
        assert build_model(mutant.bounds, symmetry=True).canonical is None
        return
    plain, reduced = _same_answers(mutant.bounds, mutant.expect)
    assert reduced.violations[mutant.expect].length <= mutant.max_length


@pytest.mark.nightly  # every model mutant on wider bounds, searched twice: about 90 s in all (make nightly)
@pytest.mark.parametrize("mutant", [_mutant_param(m, _SLOW_WIDENED) for m in MUTANTS + CRASH_MUTANTS])
def test_mutant_on_widened_bounds_same_with_symmetry(mutant: Mutant, monkeypatch):
    mutant.patch(monkeypatch)
    _same_answers(_widened(mutant), mutant.expect)


F1_ADVERSARY = replace(ADVERSARY, name="adversary-f1+a2", variant=Variant.SEED, alphabet_extra=False,
                       attempts=("a1", "a2"), max_depth=6)
#: the cloud with two projects, first saves only, one sequence per stream: F1 in 11 steps (9 plus a page of p2
#: in each attempt)
F1_CLOUD = replace(CLOUD_2P, name="cloud-2p-f1", variant=Variant.SEED, moves=frozenset({Move.CREATE}),
                   max_sequence=1, max_record_version=1, restarts=False, max_depth=11)
#: F2 needs no interleaving, deliveries or restarts: adversary-f2 atomic, with a second attempt (F2 in 7 steps)
F2_ADVERSARY = replace(ADVERSARY_F2, name="adversary-f2-small+a2", variant=Variant.FIX_F1, inflight=0,
                       restarts=False, max_sequence=0, attempts=("a1", "a2"))


@pytest.mark.parametrize("bounds, length", [(F1_ADVERSARY, 6), (F1_CLOUD, 11), (F2_ADVERSARY, 7)],
                         ids=["F1-adversary", "F1-cloud", "F2-adversary"])
def test_findings_same_with_symmetry(bounds, length):
    plain, reduced = _same_answers(bounds, "served_values_are_live_bound_kept")
    assert reduced.violations["served_values_are_live_bound_kept"].length == length
    fixed = run(replace(bounds, variant=Variant.FIXED), symmetry=True).result
    assert "served_values_are_live_bound_kept" not in fixed.violations


@pytest.mark.slow
@pytest.mark.nightly  # about a minute: the default bounds and cloud-2p, each searched twice, per variant
@pytest.mark.parametrize("variant", [Variant.FIXED, Variant.SEED], ids=lambda v: v.value)
def test_named_bounds_same_with_symmetry(variant):
    """``default`` and ``cloud-2p``: where names are interchangeable, the same verdicts on fewer states."""
    for bounds in suite("default", variant) + suite("cloud-2p", variant):
        if symmetry(bounds) is None:
            assert build_model(bounds, symmetry=True).canonical is None  # the plain search
        else:
            _same_answers(bounds)
