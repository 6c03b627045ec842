"""The plain reference search: full states in the visited set, every property on every step.

Kept callable, unchanged, so that ``bench/bench_checker.py`` measures the
fast search (``checker.bfs.check``) beside it in one run, and the tests can
assert the two find the same state counts, verdicts and shortest
counterexamples. It takes a ``Model`` whose properties read the model's own
states (``checker.run.build_model(..., lifted=True)``); it ignores
``Model.view``, ``Model.fingerprint`` and each property's ``actions`` /
``results``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Optional

from envreplica.checker.bfs import S, Model, Result, Step, StepView, Violation, after_of


def check_reference(
    model: Model[S],
    max_depth: Optional[int] = None,
    max_states: Optional[int] = None,
    stop_on_first: bool = False,
    progress: Optional[Callable[[Result], None]] = None,
) -> Result:
    """Breadth-first search from ``model.init()``; records the shortest violation of each property."""
    started = time.perf_counter()
    result = Result()
    init = model.init()
    parent: dict[S, Optional[tuple[S, Any, Any]]] = {init: None}  # state -> (previous state, action, result) or None
    frontier = deque([(init, 0)])
    state_sometimes = [p for p in model.sometimes if p.kind == "sometimes-state"]
    step_sometimes = [p for p in model.sometimes if p.kind == "sometimes-step"]
    after_sometimes = [p for p in model.sometimes if p.kind == "sometimes-after"]
    after_step = {p.name: after_of(p) for p in after_sometimes}
    #: per sometimes-after property: state -> the earlier step (pre, action, result, post) on a path to it
    marks: dict[str, dict[S, StepView]] = {p.name: {} for p in after_sometimes}

    def trace(end: S, last: Optional[Step] = None) -> list[Step]:
        chain = []
        node = end
        while (entry := parent[node]) is not None:
            prev, action, res = entry
            chain.append(Step(action, res, node))
            node = prev
        chain.append(Step(None, None, node))
        chain.reverse()
        if last is not None:
            chain.append(last)
        return chain

    def on_new_state(st: S, depth: int) -> None:
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
                    if after_step[prop.name].check(st, action, res, nxt):
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
