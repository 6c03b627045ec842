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

Each violation's and each stuck state's shortest path is written as an ITF trace
(``write_trace``, ``ENCODER``: ``checker.itf``'s, with ``#meta.protocol``
``migration``): the state's variables are ``MIGRATION_VARS``, each step's
action its kind (``mbt::actionTaken``) and fields (``mbt::nondetPicks``,
``MIGRATION_PICKS``); ``action_of`` reads an action back from them.

Leaves out on purpose: symmetry (the two stores are not interchangeable: the
seed orders them) and parallel search (the state spaces are small).
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, cast

from envreplica.checker import itf, lines, suites
from envreplica.checker.bfs import Model, Violation, check
from envreplica.checker.liveness import ClosureBudgetExceeded, closure_budget, stuck_states
from envreplica.checker.progress import ProgressHook
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


class MigrationRun(suites.BoundsRun[mm.MigrationBounds, mm.MigrationState]):
    """A check of one bounds of the migration (``checker.suites.BoundsRun``), with ``spec.migration``'s "sometimes"."""

    SOMETIMES = spec.SOMETIMES


class SuiteRun(suites.SuiteRun[MigrationRun]):
    """A bounds suite of the migration (``checker.suites.SuiteRun``)."""

    SOMETIMES = spec.SOMETIMES


def run_suite(bounds: tuple[mm.MigrationBounds, ...], liveness: bool = True, stop_on_first: bool = False,
              progress: Optional[ProgressHook] = None) -> SuiteRun:
    """Each bounds of a suite, in order (with ``stop_on_first``: up to the first bounds that fails). ``progress``
    is told the states reached so far, over the suite's bounds together, and which bounds and phase it is at."""
    return SuiteRun(suites.run_each(bounds, lambda b, hook: run(b, liveness, stop_on_first, hook),
                                    stop_on_first, progress))


def operator_successors(cfg: mm.MigrationBounds, st: mm.MigrationState) -> list[mm.MigrationState]:
    """The states the operator's steps alone lead to from ``st`` (``enabled`` without the environment)."""
    invocations = (cfg.migrations + RERUNS, cfg.recoveries + RERUNS)
    return [mm.next_state(cfg, st, a)[0] for a in mm.enabled(cfg, st, environment=False, invocations=invocations)]


def run(cfg: mm.MigrationBounds, liveness: bool = True, stop_on_first: bool = False,
        progress: Optional[Callable[[int, int, str], None]] = None) -> MigrationRun:
    """Check ``cfg``: properties by breadth-first search, then bounded liveness. With ``stop_on_first``, the
    search stops at the first violation, and then no liveness check follows. ``progress(states, depth, phase)``
    is called as the search goes (``checker.bfs.check``'s), and once as the liveness check begins."""
    started = time.perf_counter()
    states: list[mm.MigrationState] = []
    result = check(build_model(cfg, observe_state=states.append), max_depth=cfg.max_depth,
                   stop_on_first=stop_on_first,
                   progress=None if progress is None else (lambda r: progress(r.states, r.depth, "")))
    live, stuck = None, None
    if liveness and result.complete and not (stop_on_first and result.violations):
        if progress is not None:
            progress(result.states, result.depth, "bounded liveness (the operator's closure)")
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
    return lines.trace_lines(violation, mm.describe_state, mm.describe_action, _result)


def _result(result: object) -> str:
    if isinstance(result, spec.Refused):
        return f"refused {result.code.value}"
    if isinstance(result, spec.Done):
        return f"done ({result.note})" if result.note else "done"
    return type(result).__name__.lower()


# ---------------------------------------------------------------------------
# Traces: ITF
# ---------------------------------------------------------------------------

#: The protocol's name in an ITF trace's ``#meta.protocol``.
PROTOCOL = "migration"
#: A state's variables (``MigrationState``'s fields, each as ``itf.to_itf`` writes it).
MIGRATION_VARS = ("stores", "files", "procs", "migrations", "recoveries", "crashes", "original", "faults")
#: Every argument an action may have (``mbt::nondetPicks``): the fields of ``model.migration``'s actions, and
#: ``mode``, how the lockstep ran an invocation (``conformance.migration.invocations.Mode``).
MIGRATION_PICKS = ("role", "fault", "pid", "store", "version", "doc", "mode")
#: Each action's class by its kind (``mbt::actionTaken``).
ACTIONS: dict[str, type] = {cls.kind: cls for cls in (
    mm.Invoke, mm.Step, mm.Crash, mm.Connect, mm.Write, mm.Disconnect, mm.Lock, mm.Unlock, mm.ReadOnly,
    mm.Writable, mm.Edit, mm.MoveAway, mm.Repair)}
#: The enum of each action field that holds one.
_FIELD_ENUMS: dict[str, type] = {"role": mm.Role, "fault": mm.InputFault, "doc": mm.Doc}


def state_vars(st: mm.MigrationState) -> dict[str, Any]:
    """A state's variables as ITF values."""
    return {name: itf.to_itf(getattr(st, name)) for name in MIGRATION_VARS}


def action_json(action: mm.Action) -> dict[str, Any]:
    """An action as JSON: its ``kind`` and its fields (enums as their values)."""
    out: dict[str, Any] = {"kind": action.kind}
    for name, value in vars(action).items():
        out[name] = value.value if hasattr(value, "value") else value
    return out


def action_from_json(data: dict[str, Any]) -> mm.Action:
    """The inverse of ``action_json`` (other keys, such as a lockstep move's ``mode``, are not the action's)."""
    cls = ACTIONS[data["kind"]]
    fields = {f.name for f in dataclasses.fields(cls)}
    args = {name: _FIELD_ENUMS[name](value) if name in _FIELD_ENUMS and value is not None else value
            for name, value in data.items() if name in fields}
    return cast(mm.Action, cls(**args))


def action_picks(action: mm.Action) -> dict[str, Any]:
    """An action's fields as ITF values (``mbt::nondetPicks``); a field that is None is not picked."""
    return {name: itf.to_itf(value) for name, value in vars(action).items() if value is not None}


def action_of(kind: str, picks: dict[str, Any]) -> mm.Action:
    """The action of ``mbt::actionTaken`` ``kind`` with ``picks`` (``itf.picks_of``: the ``Some`` picks)."""
    if kind not in ACTIONS:
        raise ValueError(f"mbt::actionTaken {kind!r} is not an action of the migration model "
                         f"({', '.join(ACTIONS)})")
    return action_from_json({"kind": kind, **picks})


def result_text(result: object) -> str:
    """A step's result in words (``refused CODE``, ``done``, ``landed``, ``crashed``)."""
    return _result(result)


#: The migration's ITF writing (``checker.itf.write_steps``).
ENCODER = itf.Encoder(PROTOCOL, MIGRATION_VARS, MIGRATION_PICKS, state_vars, lambda a: a.kind, action_picks,
                      action_json, result_text, describe=lambda a, before: mm.describe_action(a, before))


def write_trace(path: Path, violation: Violation, meta: Optional[dict[str, Any]] = None) -> Path:
    """Write a violation's (or a stuck state's) path as an ITF trace; ``meta`` names the property, bounds, suite
    and variant (``#meta.violated``, ``bounds``, ``suite``, ``variant``)."""
    return itf.write_steps(path, ENCODER, violation.steps, f"{violation.prop.name}: {violation.prop.statement}",
                           meta)
