"""The projection lock's model check: safety properties, "sometimes" witnesses and bounded liveness.

Models: the search over ``model.lock`` at ``LockBounds``, with the processes of one PID namespace taken as
interchangeable (``model.lock.canonical_function``: sort-and-relabel, the representative's fingerprint in the
visited set): the breadth-first check of ``spec.lock``'s invariants, step properties and "sometimes" properties
(``checker.bfs``), then the bounded-liveness check (``checker.liveness``): from every reached state, the processes
alone (no kill, no pid reused, no reap; each may make ``EXTRA_CALLS`` more calls; one process at a time:
``operator_successors``) reach a settled state
(``spec.lock.settled``): nobody runs a call and the lock is free, or held by a dead process no process here can
prove dead. A stuck state comes back as the shortest path to it. The closure's budget is ``CLOSURE_FACTOR``
times the reached states.

Leaves out on purpose: parallel search (the bounds are small; ``checker.parallel`` serves the replica's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

from envreplica.checker.bfs import Model, Result, Violation, check
from envreplica.checker.liveness import ClosureBudgetExceeded, Liveness, closure_budget, stuck_states
from envreplica.model import lock as ml
from envreplica.spec import lock as spec

OK = spec.Effect.OK

#: Calls of the lock each process may still make in the liveness check, beyond its bounds: one more call takes
#: a dead process's lock over, if anything can.
EXTRA_CALLS = 1
#: The processes' closure may hold this many times the reached states (``checker.liveness.closure_budget``).
CLOSURE_FACTOR = 10


def build_model(cfg: ml.LockBounds, symmetry: bool = True, invariants: Optional[tuple[spec.Property, ...]] = None,
                step_properties: Optional[tuple[spec.Property, ...]] = None,
                sometimes: Optional[tuple[spec.Property, ...]] = None,
                observe_state: Optional[Callable[[ml.LockState], None]] = None) -> Model[ml.LockState]:
    """``model.lock`` at ``cfg`` in the checker's narrow interface, with ``spec.lock``'s properties."""
    return Model(
        observe_state=observe_state,
        init=partial(ml.init, cfg),
        enabled=lambda st: list(ml.enabled(cfg, st)),
        next=partial(ml.next_state, cfg),
        invariants=spec.INVARIANTS if invariants is None else invariants,
        step_properties=spec.STEP_PROPERTIES if step_properties is None else step_properties,
        sometimes=spec.SOMETIMES if sometimes is None else sometimes,
        canonical=ml.canonical_function(cfg) if symmetry else None,
    )


@dataclass
class LockRun:
    """A check of one bounds: the search, and the liveness check (None when the search stopped early)."""

    bounds: ml.LockBounds
    result: Result
    liveness: Optional[Liveness[ml.LockState]]
    stuck: Optional[Violation]  # the shortest path to a stuck state
    seconds: float

    @property
    def missed(self) -> list[str]:
        """The "sometimes" properties never witnessed at these bounds."""
        return [p.name for p in spec.SOMETIMES if p.name not in self.result.witnessed]

    @property
    def safe(self) -> bool:
        return not self.result.violations and self.liveness is not None and self.liveness.ok


@dataclass
class SuiteRun:
    """A bounds suite: each bounds' run; "sometimes" properties count when witnessed in any of them."""

    runs: list[LockRun]

    @property
    def missed(self) -> list[str]:
        return [p.name for p in spec.SOMETIMES if all(p.name in r.missed for r in self.runs)]

    @property
    def ok(self) -> bool:
        return all(r.safe for r in self.runs) and not self.missed

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)

    @property
    def states(self) -> int:
        return sum(r.result.states for r in self.runs)


def operator_successors(cfg: ml.LockBounds, canonical: Callable[[ml.LockState], ml.LockState],
                        st: ml.LockState) -> list[ml.LockState]:
    """The states the processes alone lead to from ``st`` (no kill, no pid reused, no reap), one process at a time:
    the first process in a call takes its steps (every choice of chance; an operation that returns), and only
    when no call runs does a process call again. A way out found this way is a way out; liveness asks only that
    one exists (a state this schedule cannot settle is reported stuck, and its trace says where)."""
    actions = list(ml.enabled(cfg, st, environment=False, extra_calls=EXTRA_CALLS))
    running = [a for a in actions if isinstance(a, (ml.Step, ml.Leave))]
    chosen: list[ml.Action]
    if running:
        first = min(a.slot for a in running)
        chosen = [a for a in running if a.slot == first and not (isinstance(a, ml.Leave) and a.effect is not OK)]
    else:
        chosen = [next(a for a in actions if isinstance(a, ml.Start))] if any(
            isinstance(a, ml.Start) for a in actions) else []
    return [canonical(ml.next_state(cfg, st, a)[0]) for a in chosen]


def run(cfg: ml.LockBounds, liveness: bool = True, stop_on_first: bool = False, symmetry: bool = True) -> LockRun:
    """Check ``cfg``: properties by breadth-first search, then bounded liveness."""
    started = time.perf_counter()
    canonical = ml.canonical_function(cfg) if symmetry else (lambda st: st)
    states: list[ml.LockState] = []
    result = check(build_model(cfg, symmetry, observe_state=lambda st: states.append(canonical(st))),
                   stop_on_first=stop_on_first)
    live, stuck = None, None
    if liveness and result.complete and not (stop_on_first and result.violations):
        settled = partial(spec.settled, empty_is_free=ml.Fix.ATOMIC_PUBLISH in cfg.fixes)
        live = stuck_states(states, partial(operator_successors, cfg, canonical), settled,
                            max_states=closure_budget(len(states), CLOSURE_FACTOR))
        if live.stuck:
            stuck_set = live.stuck
            prop = spec.Property(spec.RECOVERABLE[0], lambda s: canonical(s) not in stuck_set, "invariant")
            found = check(build_model(cfg, symmetry, invariants=(prop,), step_properties=(), sometimes=()),
                          stop_on_first=True)
            stuck = found.violations.get(prop.name)
    return LockRun(cfg, result, live, stuck, time.perf_counter() - started)


def run_suite(bounds: tuple[ml.LockBounds, ...], liveness: bool = True, stop_on_first: bool = False,
              symmetry: bool = True) -> SuiteRun:
    runs: list[LockRun] = []
    for b in bounds:
        runs.append(run(b, liveness, stop_on_first, symmetry))
        if stop_on_first and not runs[-1].safe:
            break
    return SuiteRun(runs)


__all__ = ["ClosureBudgetExceeded", "EXTRA_CALLS", "LockRun", "SuiteRun", "build_model", "run", "run_suite"]
