"""The bounded-liveness check (``checker.liveness.stuck_states``): the stuck set it finds on a toy graph, and
the budget in states that stops a closure that never ends.

A wrong operator (its successors never end: a counter that grows, invocations that are not bounded) made the
closure run for ever; now it stops at ``max_states`` with ``ClosureBudgetExceeded``, which says what happened,
the figures and what to do. ``checker.migration`` passes a budget of ``CLOSURE_FACTOR`` times the reached
states. The toy graph's stuck set is worked out by hand, so that a reversed edge relation or a wrong
``settled`` gives another set, and the assertion that checks the real one fails.
"""

from __future__ import annotations

from typing import Callable, Iterable

import pytest

from envreplica.checker import migration as cm
from envreplica.checker.liveness import (
    DEFAULT_CLOSURE_FACTOR,
    MIN_CLOSURE_BUDGET,
    ClosureBudgetExceeded,
    Liveness,
    closure_budget,
    stuck_states,
)
from envreplica.model import migration as mm

#: 0 -> 1 -> 2 (settled); 3 <-> 4, a cycle with no way out; 5 -> 2 or 6, and 6 loops on itself; 7, a dead end;
#: 8 -> 9, a state only the operator reaches, which leads to the settled 2.
GRAPH: dict[int, list[int]] = {0: [1], 1: [2], 2: [], 3: [4], 4: [3], 5: [2, 6], 6: [6], 7: [], 8: [9], 9: [2]}
REACHED = [0, 1, 2, 3, 5, 6, 7, 8]  # 4 and 9: the operator's closure alone
SETTLED = frozenset({2})
STUCK = frozenset({3, 6, 7})  # 4 is stuck too, but not a reached state


def forward(n: int) -> list[int]:
    return GRAPH[n]


def backward(n: int) -> list[int]:
    """The edge relation reversed: a wrong operator."""
    return [m for m, succ in GRAPH.items() if n in succ]


StuckFn = Callable[[Iterable[int], Callable[[int], Iterable[int]], Callable[[int], bool]], Liveness[int]]


def assert_toy_liveness(stuck_fn: StuckFn, operator: Callable[[int], Iterable[int]] = forward,
                        settled: Callable[[int], bool] = SETTLED.__contains__) -> None:
    """``stuck_fn`` over the toy graph finds exactly the stuck set worked out by hand."""
    live = stuck_fn(REACHED, operator, settled)
    assert live.stuck == STUCK, sorted(live.stuck)
    assert (live.reached, live.closure, live.settled) == (8, 10, 1)
    assert not live.ok


def test_the_toy_graph_stuck_set():
    assert_toy_liveness(stuck_states)


def test_a_reversed_edge_relation_is_caught():
    with pytest.raises(AssertionError):
        assert_toy_liveness(stuck_states, operator=backward)


def test_a_wrong_settled_is_caught():
    """A ``settled`` that takes a dead end for settled (no successors: nothing left to do) hides state 7."""
    with pytest.raises(AssertionError):
        assert_toy_liveness(stuck_states, settled=lambda n: not GRAPH[n])


def test_an_operator_that_never_terminates_fails_fast_with_the_reason():
    with pytest.raises(ClosureBudgetExceeded) as caught:
        stuck_states([0], lambda n: [n + 1], lambda n: False, max_states=50)
    error = caught.value
    assert (error.reached, error.budget, error.closure) == (1, 50, 50)
    message = str(error)
    for fragment in ("closure of 1 reached states outgrew its budget of 50 states", "does not terminate",
                     "invocations are not bounded", "keeps creating new states", "raise the budget (max_states)"):
        assert fragment in message, message


def test_the_default_budget_is_a_multiple_of_the_reached_states():
    assert closure_budget(3) == MIN_CLOSURE_BUDGET
    assert closure_budget(100_000) == DEFAULT_CLOSURE_FACTOR * 100_000
    with pytest.raises(ClosureBudgetExceeded) as caught:
        stuck_states(range(3), lambda n: [n + 3], lambda n: False)  # no max_states: the default
    assert caught.value.budget == MIN_CLOSURE_BUDGET and caught.value.closure == MIN_CLOSURE_BUDGET
    with pytest.raises(ValueError, match="factor of 0"):
        closure_budget(10, 0)


def test_a_correct_operator_passes_within_an_exact_budget():
    """A chain 0 -> ... -> 9, settled at 9: ten states, so a budget of ten passes and nine stops."""
    chain = lambda n: [n + 1] if n < 9 else []  # noqa: E731
    live = stuck_states([0], chain, lambda n: n == 9, max_states=10)
    assert live.ok and live.closure == 10 and live.settled == 1
    with pytest.raises(ClosureBudgetExceeded):
        stuck_states([0], chain, lambda n: n == 9, max_states=9)


def test_a_budget_below_the_reached_states_stops_before_any_step():
    calls: list[int] = []
    with pytest.raises(ClosureBudgetExceeded) as caught:
        stuck_states(range(5), lambda n: calls.append(n) or [], lambda n: True, max_states=4)
    assert not calls and caught.value.closure == 5


# ---------------------------------------------------------------------------
# checker.migration: the budget it derives, a wrong operator there, and the suite within it
# ---------------------------------------------------------------------------


def test_the_migration_check_fits_well_within_its_budget():
    for r in cm.run_suite(mm.suite("migration")).runs:
        assert r.safe and r.liveness is not None
        assert 2 * r.liveness.closure <= closure_budget(r.result.states, cm.CLOSURE_FACTOR), r.bounds.name


def test_the_migration_check_keeps_to_its_budget(monkeypatch):
    """With a budget of the reached states alone, the closure (2.3 times them at ``rerun``) stops the check."""
    monkeypatch.setattr(cm, "CLOSURE_FACTOR", 1)
    monkeypatch.setattr("envreplica.checker.liveness.MIN_CLOSURE_BUDGET", 1)
    with pytest.raises(ClosureBudgetExceeded) as caught:
        cm.run(mm.RERUN)
    assert caught.value.budget == caught.value.reached == 2_580
    assert any("at migration bounds rerun" in note for note in caught.value.__notes__)


def test_an_operator_with_unbounded_invocations_is_stopped(monkeypatch):
    """The operator may start migrate and recover for ever: each invocation a new state, and no end."""
    monkeypatch.setattr(cm, "RERUNS", 10 ** 9)
    with pytest.raises(ClosureBudgetExceeded, match="does not terminate"):
        cm.run(mm.RERUN)
