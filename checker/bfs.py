"""Explicit-state breadth-first model checking over any model with the narrow interface.

Models: the search, not the protocol. A model is ``init() -> state``,
``enabled(state) -> actions``, ``next(state, action) -> (state, result)``,
plus state invariants ``inv(state) -> bool`` and step properties
``prop(pre, action, result, post) -> bool`` given as ``spec.properties``
``Property`` values (or anything with ``name``, ``check`` and ``kind``).
States must be hashable: the checker deduplicates them exactly. Breadth-first
order makes the first violation found of each property a shortest one; the
checker keeps a parent pointer per state to rebuild it.

"Sometimes" properties come in three kinds: a state (``sometimes-state``),
a step (``sometimes-step``), and a step that follows another on one path
(``sometimes-after``: ``prop.after`` is a step predicate, and ``prop.check``
gets that earlier step ``(pre, action, result, post)`` first). For the last,
each state reached through an ``after`` step carries that step (the first
one found) to the states reached from it; a witness is a real path. Marks go
only forward from states not yet expanded, so this under-approximates: a
state first expanded without a mark is not revisited.

Leaves out on purpose: symmetry reduction, partial-order reduction, disk
spilling, and parallel search. The state counts are what they are, and the
pinned counts in the tests are exact.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Optional


@dataclass
class Step:
    """One transition of a counterexample."""

    action: Any  # the action taken (None for the initial state)
    result: Any  # what it returned
    state: Any  # the state it led to


@dataclass
class Violation:
    """The shortest run found that breaks ``prop``."""

    prop: Any  # the violated property
    steps: list[Step]  # from the initial state (steps[0].action is None)

    @property
    def length(self) -> int:
        return len(self.steps) - 1


@dataclass
class Model:
    """The interface the checker needs."""

    init: Callable[[], Hashable]
    enabled: Callable[[Hashable], Iterable]
    next: Callable[[Hashable, Any], tuple]
    invariants: tuple = ()
    step_properties: tuple = ()
    sometimes: tuple = ()  # properties that must hold at least once (state, step or after kind)
    observe_state: Optional[Callable[[Hashable], None]] = None  # coverage hook per new state
    observe_step: Optional[Callable[[Hashable, Any, Any, Hashable], None]] = None  # per transition


@dataclass
class Result:
    """What a run found and measured."""

    states: int = 0  # distinct states
    transitions: int = 0  # transitions explored
    depth: int = 0  # the deepest BFS level reached
    seconds: float = 0.0
    complete: bool = True  # False when stopped by max_depth or max_states
    violations: dict = field(default_factory=dict)  # property name -> Violation
    witnessed: dict = field(default_factory=dict)  # sometimes-property name -> depth first seen

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float("inf")

    @property
    def ok(self) -> bool:
        return not self.violations


def check(
    model: Model,
    max_depth: Optional[int] = None,
    max_states: Optional[int] = None,
    stop_on_first: bool = False,
    progress: Optional[Callable[[Result], None]] = None,
) -> Result:
    """Breadth-first search from ``model.init()``; records the shortest violation of each property."""
    started = time.perf_counter()
    result = Result()
    init = model.init()
    parent: dict = {init: None}  # state -> (previous state, action, result) or None
    frontier = deque([(init, 0)])
    state_sometimes = [p for p in model.sometimes if p.kind == "sometimes-state"]
    step_sometimes = [p for p in model.sometimes if p.kind == "sometimes-step"]
    after_sometimes = [p for p in model.sometimes if p.kind == "sometimes-after"]
    #: per sometimes-after property: state -> the earlier step (pre, action, result, post) on a path to it
    marks: dict = {p.name: {} for p in after_sometimes}

    def trace(end, last=None) -> list[Step]:
        chain = []
        node = end
        while parent[node] is not None:
            prev, action, res = parent[node]
            chain.append(Step(action, res, node))
            node = prev
        chain.append(Step(None, None, node))
        chain.reverse()
        if last is not None:
            chain.append(last)
        return chain

    def on_new_state(st, depth):
        if model.observe_state is not None:
            model.observe_state(st)
        for prop in model.invariants:
            if prop.name not in result.violations and not prop.check(st):
                result.violations[prop.name] = Violation(prop, trace(st))
        for prop in state_sometimes:
            if prop.name not in result.witnessed and prop.check(st):
                result.witnessed[prop.name] = depth

    on_new_state(init, 0)
    last_report = started
    while frontier:
        if stop_on_first and result.violations:
            break
        st, depth = frontier.popleft()
        result.depth = max(result.depth, depth)
        pending_after = [(p, marks[p.name], marks[p.name].pop(st, None)) for p in after_sometimes
                         if p.name not in result.witnessed]
        if max_depth is not None and depth >= max_depth:
            result.complete = False
            continue
        for action in model.enabled(st):
            nxt, res = model.next(st, action)
            result.transitions += 1
            if model.observe_step is not None:
                model.observe_step(st, action, res, nxt)
            for prop in model.step_properties:
                if prop.name not in result.violations and not prop.check(st, action, res, nxt):
                    result.violations[prop.name] = Violation(prop, trace(st, Step(action, res, nxt)))
            for prop in step_sometimes:
                if prop.name not in result.witnessed and prop.check(st, action, res, nxt):
                    result.witnessed[prop.name] = depth + 1
            for prop, marked, earlier in pending_after:
                if prop.name in result.witnessed:
                    continue
                if earlier is None:
                    if prop.after.check(st, action, res, nxt):
                        marked.setdefault(nxt, (st, action, res, nxt))
                elif prop.check(earlier, st, action, res, nxt):
                    result.witnessed[prop.name] = depth + 1
                    marked.clear()
                else:
                    marked.setdefault(nxt, earlier)
            if nxt not in parent:
                parent[nxt] = (st, action, res)
                on_new_state(nxt, depth + 1)
                frontier.append((nxt, depth + 1))
                if max_states is not None and len(parent) >= max_states:
                    result.complete = False
                    frontier.clear()
                    break
        result.states = len(parent)
        if progress is not None and time.perf_counter() - last_report > 0.2:
            last_report = time.perf_counter()
            result.seconds = last_report - started
            progress(result)
    result.states = len(parent)
    result.seconds = time.perf_counter() - started
    return result
