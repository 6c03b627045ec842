"""The fast search (``checker.bfs.check``) against the search it replaced (``checker.reference``).

Three claims, each a test:

1. **Same answers.** On the ``tiny`` bounds under every variant, and on
   model mutants, the fingerprint search finds the same distinct states and
   transitions, the same violated and witnessed properties, each violation
   at the same (shortest) length and depth, as the reference search with
   full states in its visited set and every property on every step.
2. **The filters hide nothing.** A step property declares the action kinds
   and result types it can fail on (``Property.actions`` / ``results``) and
   the checker skips it elsewhere. On every transition of the ``tiny`` bounds
   (seed and fixed), wherever a property's filter skips it, the property
   holds (a sometimes-step property: is not witnessed), so skipping changes
   no verdict.
3. **Counterexamples are real paths.** A violation rebuilt by replaying
   actions from ``init`` is a chain of ``next`` steps; a model whose ``next``
   is not a function of (state, action) is reported, not silently traced.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from envreplica.checker.bfs import Model, NondeterministicModel, _applies, check
from envreplica.checker.reference import check_reference
from envreplica.checker.run import build_model
from envreplica.model.generate import enabled, init, next_state
from envreplica.model.presets import suite
from envreplica.model.state import Variant
from envreplica.spec import properties as P
from envreplica.spec.properties import Property


def _summary(result) -> tuple:
    return (
        result.states,
        result.transitions,
        result.depth,
        result.complete,
        {name: v.length for name, v in result.violations.items()},
        dict(result.witnessed),
    )


@pytest.mark.parametrize("variant", list(Variant), ids=lambda v: v.value)
def test_fast_search_agrees_with_the_reference(variant):
    for bounds in suite("tiny", variant):
        fast = check(build_model(bounds), max_depth=bounds.max_depth)
        ref = check_reference(build_model(bounds, lifted=True), max_depth=bounds.max_depth)
        assert _summary(fast) == _summary(ref), bounds.name
        for name, violation in fast.violations.items():
            # The replayed counterexample ends where the reference's does (both shortest, same BFS order).
            assert violation.steps[-1].state == ref.violations[name].steps[-1].state, name


def test_fast_search_agrees_on_violations():
    """Under ``seed`` the adversary breaks F1's property in 6 steps: same length and end state, a real path."""
    bounds = replace(next(b for b in suite("default", Variant.SEED) if b.name == "adversary"), max_depth=6)
    inv = (P.by_name("served_values_are_live_bound_kept"),)
    fast = check(build_model(bounds, invariants=inv, step_properties=(), sometimes=()),
                 max_depth=bounds.max_depth, stop_on_first=True)
    ref = check_reference(build_model(bounds, invariants=inv, step_properties=(), sometimes=(), lifted=True),
                          max_depth=bounds.max_depth, stop_on_first=True)
    v = fast.violations["served_values_are_live_bound_kept"]
    assert v.length == ref.violations["served_values_are_live_bound_kept"].length == 6
    assert v.steps[-1].state == ref.violations["served_values_are_live_bound_kept"].steps[-1].state
    world = init(bounds)
    for step in v.steps[1:]:
        world, result = next_state(bounds, world, step.action)
        assert world == step.state and result == step.result
    assert not inv[0].check(world.replica)


def _filtered(props):
    return [p for p in props if getattr(p, "actions", None) is not None or getattr(p, "results", None) is not None]


@pytest.mark.parametrize("variant", [Variant.SEED, Variant.FIXED], ids=lambda v: v.value)
def test_filters_skip_only_steps_where_the_property_holds(variant):
    step_props = _filtered(P.STEP_PROPERTIES)
    sometimes = _filtered(p for p in P.SOMETIMES if p.kind == "sometimes-step")
    assert len(step_props) >= 8 and len(sometimes) >= 3  # the filters exist: this test has work to do
    skipped = 0
    for bounds in suite("tiny", variant):
        cfg = bounds.model_config()
        seen = {init(bounds)}
        frontier = [init(bounds)]
        for _ in range(bounds.max_depth):
            nxt_frontier = []
            for world in frontier:
                for action in enabled(bounds, world, cfg):
                    nxt, result = next_state(bounds, world, action, cfg)
                    kind = getattr(action, "kind", None)
                    for prop in step_props:
                        if not _applies(prop, kind, type(result)):
                            skipped += 1
                            assert prop.check(world.replica, action, result, nxt.replica), (prop.name, action)
                    for prop in sometimes:
                        if not _applies(prop, kind, type(result)):
                            assert not prop.check(world.replica, action, result, nxt.replica), (prop.name, action)
                    if nxt not in seen:
                        seen.add(nxt)
                        nxt_frontier.append(nxt)
            frontier = nxt_frontier
    assert skipped > 10_000  # the filters were exercised, not vacuous


def test_an_enum_kind_is_matched_by_value():
    """``ActionKind`` is a str Enum, which hashes by name: the filter compares values."""
    from envreplica.model.actions import ActionKind

    prop = P.by_name("restart_closes_gate")
    assert _applies(prop, ActionKind.RESTART, type(None))
    assert not _applies(prop, ActionKind.RESUME, type(None))


def test_nondeterministic_next_is_reported():
    """Replaying a counterexample through a ``next`` that is not a function of its arguments raises."""
    counter = itertools.count()

    def nxt(st, action):
        # The first visit to 2 comes from a branch that the replay does not take again.
        return (st + 1 + (next(counter) % 2 if st == 1 else 0)), None

    model = Model(init=lambda: 0, enabled=lambda st: [1] if st < 3 else [], next=nxt,
                  invariants=(Property("below_3", lambda st: st < 3, "invariant"),))
    with pytest.raises(NondeterministicModel, match="must be a function"):
        check(model)


def test_collision_probability_is_tlcs_estimate():
    bounds = suite("tiny", Variant.FIXED)[1]
    r = check(build_model(bounds), max_depth=bounds.max_depth)
    assert r.fingerprints and r.collision_probability == pytest.approx(r.states * r.transitions / 2.0 ** 64)
    assert 0 < r.collision_probability < 1e-9
    ref = check_reference(build_model(bounds, lifted=True), max_depth=bounds.max_depth)
    assert ref.collision_probability == 0.0  # full states: no fingerprints, no collisions
