"""The parallel searches give ``bfs.check``'s answers: states, transitions, verdicts, counterexamples, coverage.

``checker.parallel`` (forked workers) on the hand-computed toy, on ``tiny``
and on a violating variant (the seed's F1 at ``tiny-adversary`` one level
deeper); ``checker.ray_search`` (Ray actors) on the same violating variant
when Ray is installed. Each search keeps ``bfs``'s order (ranks), so the
counterexample is ``bfs``'s own, not just one of the same length.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from test_checker_toy import toy

from envreplica.checker.bfs import check
from envreplica.checker.parallel import WorkerFailed, check_parallel, dumps_batch, loads_batch
from envreplica.checker.run import build_model, run
from envreplica.model.presets import suite
from envreplica.model.state import Variant
from envreplica.spec import properties as P

F1 = "served_values_are_live_bound_kept"


def _answers(result) -> tuple:
    """Everything two searches of one model must agree on."""
    return (result.states, result.transitions, result.depth, result.complete, result.witnessed,
            {name: v.length for name, v in result.violations.items()})


def _same_counterexamples(a, b) -> None:
    assert set(a.violations) == set(b.violations)
    for name, v in a.violations.items():
        w = b.violations[name]
        assert [s.action for s in w.steps] == [s.action for s in v.steps], name
        assert [s.state for s in w.steps] == [s.state for s in v.steps], name
        assert [s.result for s in w.steps] == [s.result for s in v.steps], name


def _replays(model, steps) -> None:
    """Each step's state is what ``next`` makes of the one before (the chain is a real run from init)."""
    assert steps[0].action is None and steps[0].state == model.init()
    for before, step in zip(steps, steps[1:]):
        assert model.next(before.state, step.action) == (step.state, step.result)


@pytest.fixture(scope="module")
def f1_bounds():
    """The seed at ``tiny-adversary`` one level deeper: F1 at length 6, and a sometimes-after witness."""
    return replace(suite("tiny", Variant.SEED)[1], max_depth=6)


@pytest.fixture(scope="module")
def f1_bfs(f1_bounds):
    return run(f1_bounds)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_toy_matches_bfs(workers):
    """The hand-computed toy: 13 states, 24 transitions, mutual exclusion broken at depth 4 (a lambda factory)."""
    expected = check(toy())
    result = check_parallel(lambda: toy(), workers)
    assert _answers(result) == _answers(expected)
    assert (result.states, result.transitions) == (13, 24)
    _same_counterexamples(expected, result)


@pytest.mark.parametrize("variant", [Variant.FIXED, Variant.SEED], ids=lambda v: v.value)
def test_tiny_matches_bfs(variant):
    for bounds in suite("tiny", variant):
        expected = check(build_model(bounds), max_depth=bounds.max_depth)
        result = check_parallel(functools.partial(build_model, bounds), 2, max_depth=bounds.max_depth)
        assert _answers(result) == _answers(expected), bounds.name


def test_violation_and_coverage_match_bfs(f1_bounds, f1_bfs):
    """Two workers: F1 found at bfs's length with bfs's counterexample, which replays; coverage merged equal."""
    expected = f1_bfs.result
    assert set(expected.violations) == {F1} and expected.violations[F1].length == 6
    assert "sometimes_resent_delivery_completes" in expected.witnessed  # needs marks passed within a level
    done = run(f1_bounds, workers=2)
    assert _answers(done.result) == _answers(expected)
    _same_counterexamples(expected, done.result)
    steps = done.result.violations[F1].steps
    _replays(build_model(f1_bounds), steps)
    assert not P.served_values_are_live_bound_kept(steps[-1].state.replica)
    assert done.coverage == f1_bfs.coverage


def test_limits_stop_at_the_end_of_a_level():
    bounds = suite("tiny", Variant.FIXED)[0]
    factory = functools.partial(build_model, bounds)
    shallow = check_parallel(factory, 2, max_depth=3)
    assert _answers(shallow) == _answers(check(factory(), max_depth=3))
    capped = check_parallel(factory, 2, max_states=100)
    assert not capped.complete and capped.states >= 100
    # bfs stops within level 3 (9 states, 12 transitions); the parallel search at its end.
    first, first_bfs = check_parallel(lambda: toy(), 2, stop_on_first=True), check(toy(), stop_on_first=True)
    assert first.depth == first_bfs.depth == 3
    assert {n: v.length for n, v in first.violations.items()} == {"mutex": 4, "enter_needs_free_lock": 4}
    _same_counterexamples(first_bfs, first)
    assert first.transitions >= first_bfs.transitions


def _broken_toy():
    model = toy()

    def next_(st, action):
        if st == (2, 0, 1):
            raise ValueError("broken next")
        return model.next(st, action)

    return replace(model, next=next_)


def test_a_failing_worker_fails_the_search():
    with pytest.raises(WorkerFailed, match="broken next"):
        check_parallel(_broken_toy, 2)


def test_batches_carry_states_and_the_cached_hash_only_where_it_holds():
    """A batch comes back equal; an ``FMap`` keeps its cached hash for a forked worker, not for another process."""
    model = build_model(suite("tiny", Variant.FIXED)[0])
    st = model.init()
    worlds = [model.next(st, a)[0] for a in model.enabled(st)]
    hashes = [hash(w) for w in worlds]  # caches each FMap's hash
    for keep_hash in (True, False):
        back = loads_batch(dumps_batch(worlds, keep_hash=keep_hash))
        assert back == worlds
        assert all((w.replica.records._h is None) is not keep_hash for w in back)
        assert [hash(w) for w in back] == hashes
        assert back[0].replica.records is back[-1].replica.records  # shared within a batch, written once


def test_ray_is_imported_only_by_a_ray_search():
    code = ("import sys, envreplica.cli.main, envreplica.checker.run, envreplica.checker.ray_search; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


_FINGERPRINTS = """
import sys
from envreplica.checker.ray_search import stable_fingerprint
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.model.state import Variant
model = build_model(suite("tiny", Variant.FIXED)[1])
st = model.init()
worlds = [st] + [model.next(st, a)[0] for a in model.enabled(st)]
print(hash(None), [stable_fingerprint(w) for w in worlds])
"""


def test_stable_fingerprint_is_the_same_in_every_process():
    """Two fresh processes with one PYTHONHASHSEED: ``stable_fingerprint`` agrees (``hash(None)`` need not)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    outs = [subprocess.run([sys.executable, "-c", _FINGERPRINTS], env=env, check=True, capture_output=True,
                           text=True).stdout.split(" ", 1) for _ in range(2)]
    assert outs[0][1] == outs[1][1]
    assert len(eval(outs[0][1])) > 1


def test_ray_matches_bfs(request):
    """Two Ray actors on a local Ray: bfs's answers, counterexample and coverage."""
    ray = pytest.importorskip("ray")
    f1_bounds, f1_bfs = request.getfixturevalue("f1_bounds"), request.getfixturevalue("f1_bfs")
    try:
        done = run(f1_bounds, workers=2, ray="local")
    finally:
        ray.shutdown()
    assert _answers(done.result) == _answers(f1_bfs.result)
    _same_counterexamples(f1_bfs.result, done.result)
    _replays(build_model(f1_bounds), done.result.violations[F1].steps)
    assert done.coverage == f1_bfs.coverage
