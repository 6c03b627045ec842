"""The paired writer migration's model check: safety properties, "sometimes" witnesses and bounded liveness.

Models: the search over ``model.migration`` at ``MigrationBounds``: the
breadth-first check of ``spec.migration``'s invariants, step properties and
"sometimes" properties (``checker.bfs``), then the bounded-liveness check
(``checker.liveness``): from every reached state, the operator alone
(running migrate or recover again, up to ``RERUNS`` more invocations of each;
no further crash, no further write; writers disconnect) reaches a settled
state. A stuck state comes back as the shortest path to it. The operator's
closure has a budget of ``CLOSURE_FACTOR`` times the reached states: past
it, the check stops (``checker.liveness.ClosureBudgetExceeded``) rather
than run on.

Leaves out on purpose: symmetry (the two stores are not interchangeable: the
seed orders them) and parallel search (the state spaces are small).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

from envreplica.checker.bfs import Model, Result, Violation, check
from envreplica.checker.liveness import ClosureBudgetExceeded, Liveness, closure_budget, stuck_states
from envreplica.model import migration as mm
from envreplica.spec import migration as spec

#: Invocations of each kind the operator may still start in the liveness check, beyond those already run.
RERUNS = 1
#: The operator's closure may hold this many times the reached states (``checker.liveness.closure_budget``).
#: With ``RERUNS`` more invocation of each kind, it holds 1.3 to 4.7 times them at the suites' bounds (the fixed
#: steps, the seed's, each fix left out, each reading); an operator whose invocations never end outgrows any
#: multiple.
CLOSURE_FACTOR = 10


def build_model(cfg: mm.MigrationBounds, invariants: Optional[tuple[spec.Property, ...]] = None,
                step_properties: Optional[tuple[spec.Property, ...]] = None,
                sometimes: Optional[tuple[spec.Property, ...]] = None,
                observe_state: Optional[Callable[[mm.MigrationState], None]] = None) -> Model[mm.MigrationState]:
    """``model.migration`` at ``cfg`` in the checker's narrow interface, with ``spec.migration``'s properties."""
    return Model(
        observe_state=observe_state,
        init=partial(mm.init, cfg),
        enabled=lambda st: list(mm.enabled(cfg, st)),
        next=partial(mm.next_state, cfg),
        invariants=spec.INVARIANTS if invariants is None else invariants,
        step_properties=spec.STEP_PROPERTIES if step_properties is None else step_properties,
        sometimes=spec.SOMETIMES if sometimes is None else sometimes,
    )


@dataclass
class MigrationRun:
    """A check of one bounds: the search, and the liveness check (None when the search stopped early)."""

    bounds: mm.MigrationBounds
    result: Result
    liveness: Optional[Liveness[mm.MigrationState]]
    stuck: Optional[Violation]  # the shortest path to a stuck state
    seconds: float

    @property
    def missed(self) -> list[str]:
        """The "sometimes" properties never witnessed at these bounds."""
        return [p.name for p in spec.SOMETIMES if p.name not in self.result.witnessed]

    @property
    def safe(self) -> bool:
        """No invariant or step property violated, and from no reached state is the operator stuck."""
        return not self.result.violations and self.liveness is not None and self.liveness.ok


@dataclass
class SuiteRun:
    """A bounds suite: each bounds' run; "sometimes" properties count when witnessed in any of them."""

    runs: list[MigrationRun]

    @property
    def missed(self) -> list[str]:
        """The "sometimes" properties witnessed at none of the suite's bounds."""
        return [p.name for p in spec.SOMETIMES if all(p.name in r.missed for r in self.runs)]

    @property
    def ok(self) -> bool:
        return all(r.safe for r in self.runs) and not self.missed

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)


def run_suite(bounds: tuple[mm.MigrationBounds, ...], liveness: bool = True, stop_on_first: bool = False) -> SuiteRun:
    """Each bounds of a suite, in order (with ``stop_on_first``: up to the first bounds that fails)."""
    runs: list[MigrationRun] = []
    for b in bounds:
        runs.append(run(b, liveness, stop_on_first))
        if stop_on_first and not runs[-1].safe:
            break
    return SuiteRun(runs)


def operator_successors(cfg: mm.MigrationBounds, st: mm.MigrationState) -> list[mm.MigrationState]:
    """The states the operator's steps alone lead to from ``st`` (``enabled`` without the environment)."""
    invocations = (cfg.migrations + RERUNS, cfg.recoveries + RERUNS)
    return [mm.next_state(cfg, st, a)[0] for a in mm.enabled(cfg, st, environment=False, invocations=invocations)]


def run(cfg: mm.MigrationBounds, liveness: bool = True, stop_on_first: bool = False) -> MigrationRun:
    """Check ``cfg``: properties by breadth-first search, then bounded liveness. With ``stop_on_first``, the
    search stops at the first violation, and then no liveness check follows."""
    started = time.perf_counter()
    states: list[mm.MigrationState] = []
    result = check(build_model(cfg, observe_state=states.append), max_depth=cfg.max_depth,
                   stop_on_first=stop_on_first)
    live, stuck = None, None
    if liveness and result.complete and not (stop_on_first and result.violations):
        try:
            live = stuck_states(states, partial(operator_successors, cfg), spec.settled,
                                max_states=closure_budget(len(states), CLOSURE_FACTOR))
        except ClosureBudgetExceeded as error:
            error.add_note(f"at migration bounds {cfg.name} (migrate {cfg.migrations}, recover {cfg.recoveries}, "
                           f"+{RERUNS} each for the operator): the budget is checker.migration.CLOSURE_FACTOR = "
                           f"{CLOSURE_FACTOR} times the reached states; look at operator_successors and "
                           f"model.migration.enabled(environment=False) first")
            raise
        if live.stuck:
            name, sentence = spec.RECOVERABLE

            def recoverable(st: mm.MigrationState) -> bool:
                return st not in live.stuck

            recoverable.__doc__ = sentence
            prop = spec.Property(name, recoverable, "invariant")
            found = check(build_model(cfg, invariants=(prop,), step_properties=(), sometimes=()),
                          stop_on_first=True)
            stuck = found.violations.get(name)
    return MigrationRun(cfg, result, live, stuck, time.perf_counter() - started)


def trace_lines(violation: Violation) -> list[str]:
    """A counterexample, one numbered line per step with what it returned, then the state it left."""
    lines: list[str] = []
    prev: Optional[mm.MigrationState] = None
    for i, step in enumerate(violation.steps):
        if step.action is None:
            lines.append(f"  #0 init: {mm.describe_state(step.state)}")
        else:
            lines.append(f"  #{i} {mm.describe_action(step.action, prev)} -> {_result(step.result)}")
            lines.append(f"       {mm.describe_state(step.state)}")
        prev = step.state
    return lines


def _result(result: object) -> str:
    if isinstance(result, spec.Refused):
        return f"refused {result.code.value}"
    if isinstance(result, spec.Done):
        return f"done ({result.note})" if result.note else "done"
    return type(result).__name__.lower()
