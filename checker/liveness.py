"""Bounded liveness by backward reachability: from which reachable states can the operator still finish?

Models: the search, not a protocol. Given the states a safety search
reaches, an operator's successor function (a subset of the model's actions:
no crash, no adversary) and a predicate ``settled``, it finds every reached
state from which no path of operator steps leads to a settled state. It
explores the operator's closure of the reached states (states only the
operator's steps reach count too), inverts its edges, and walks backwards
from the settled states: what the walk does not reach is stuck. Unlike a
"sometimes" property, this holds of every state, crash states included: a
pass means that from each one a way out exists.

The closure is finite only when the operator is: its invocations bounded, and
none of its actions making new states for ever. So that a wrong operator (a
counter that grows, an unbounded rerun) or a wrong edge relation fails rather
than runs for ever, the closure has a budget in states (``max_states``: a count,
never a time); past it, ``ClosureBudgetExceeded`` says so. The caller derives
the budget from its bounds (``checker.migration``: a multiple of the reached
states); without one, ``DEFAULT_CLOSURE_FACTOR`` times the reached states.

Leaves out on purpose: fairness and a bound on the length of the way out; the
counterexample to a stuck state is the shortest path to it, found by the safety
search with ``stuck`` as an invariant (``checker.bfs``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterable, Optional, TypeVar

from envreplica.checker.collector import full_collections_deferred

#: A state of the searched model.
S = TypeVar("S", bound=Hashable)

#: Without a budget from the caller, the closure may hold this many times the reached states (and at least
#: ``MIN_CLOSURE_BUDGET``): a correct operator that only finishes what the reached states started stays well
#: below it (the paired migration's bounds: 1.3 to 4.7 times).
DEFAULT_CLOSURE_FACTOR = 10
MIN_CLOSURE_BUDGET = 10_000


class ClosureBudgetExceeded(RuntimeError):
    """The operator's closure grew past its budget in states: the operator most likely does not terminate."""

    def __init__(self, reached: int, budget: int, closure: int, pending: int) -> None:
        self.reached, self.budget, self.closure, self.pending = reached, budget, closure, pending
        super().__init__(
            f"the operator's closure of {reached:,} reached states outgrew its budget of {budget:,} states "
            f"({closure:,} in it, {pending:,} of them not yet expanded), so the liveness check stopped without "
            f"a verdict. The likely cause is an operator that does not terminate: its invocations are not bounded, "
            f"or one of its actions keeps creating new states (a counter that grows, a file that is never the "
            f"same twice). Make every operator path end (bound the invocations it may start, and the steps of "
            f"each); if the closure is genuinely this large, raise the budget (max_states).")


def closure_budget(reached: int, factor: int = DEFAULT_CLOSURE_FACTOR) -> int:
    """The closure's budget for ``reached`` states: ``factor`` times them, and at least ``MIN_CLOSURE_BUDGET``."""
    if factor < 1:
        raise ValueError(f"a closure budget factor of {factor} would stop before the reached states themselves: "
                         f"give a factor of 1 or more")
    return max(factor * reached, MIN_CLOSURE_BUDGET)


@dataclass
class Liveness(Generic[S]):
    """What the backward walk found."""

    reached: int = 0  # states of the safety search
    closure: int = 0  # states of the operator's closure (reached ones included)
    settled: int = 0  # settled states in the closure
    stuck: frozenset[S] = field(default_factory=frozenset)  # reached states from which nothing settles

    @property
    def ok(self) -> bool:
        return not self.stuck


def stuck_states(reached: Iterable[S], operator: Callable[[S], Iterable[S]],
                 settled: Callable[[S], bool], max_states: Optional[int] = None) -> Liveness[S]:
    """The reached states from which no sequence of ``operator`` successors reaches a ``settled`` state.

    ``max_states`` bounds the closure (reached states included; default ``closure_budget(len(reached))``);
    past it, ``ClosureBudgetExceeded``.
    """
    with full_collections_deferred():
        return _stuck_states(list(reached), operator, settled, max_states)


def _stuck_states(reached: list[S], operator: Callable[[S], Iterable[S]], settled: Callable[[S], bool],
                  max_states: Optional[int]) -> Liveness[S]:
    seen = set(reached)
    budget = closure_budget(len(reached)) if max_states is None else max_states
    if len(seen) > budget:
        raise ClosureBudgetExceeded(len(reached), budget, len(seen), len(seen))
    preds: dict[S, list[S]] = {}
    frontier = deque(reached)
    while frontier:
        st = frontier.popleft()
        preds.setdefault(st, [])
        for nxt in operator(st):
            preds.setdefault(nxt, []).append(st)
            if nxt not in seen:
                if len(seen) >= budget:
                    raise ClosureBudgetExceeded(len(reached), budget, len(seen), len(frontier))
                seen.add(nxt)
                frontier.append(nxt)
    good = {st for st in seen if settled(st)}
    walk = deque(good)
    while walk:
        st = walk.popleft()
        for prev in preds.get(st, ()):
            if prev not in good:
                good.add(prev)
                walk.append(prev)
    settled_count = sum(1 for st in seen if settled(st))
    return Liveness(reached=len(reached), closure=len(seen), settled=settled_count,
                    stuck=frozenset(st for st in reached if st not in good))
