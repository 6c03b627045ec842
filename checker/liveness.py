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

Leaves out on purpose: fairness and a bound on the length of the way out (the
closure is finite because the operator's invocations are bounded); the
counterexample to a stuck state is the shortest path to it, found by the safety
search with ``stuck`` as an invariant (``checker.bfs``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterable, TypeVar

#: A state of the searched model.
S = TypeVar("S", bound=Hashable)


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
                 settled: Callable[[S], bool]) -> Liveness[S]:
    """The reached states from which no sequence of ``operator`` successors reaches a ``settled`` state."""
    reached = list(reached)
    preds: dict[S, list[S]] = {}
    frontier = deque(reached)
    seen = set(reached)
    while frontier:
        st = frontier.popleft()
        preds.setdefault(st, [])
        for nxt in operator(st):
            preds.setdefault(nxt, []).append(st)
            if nxt not in seen:
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
