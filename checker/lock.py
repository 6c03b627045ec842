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

import dataclasses
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, cast

from envreplica.checker import itf, lines, suites
from envreplica.checker.bfs import Model, Violation, check
from envreplica.checker.liveness import ClosureBudgetExceeded, closure_budget, stuck_states
from envreplica.checker.progress import ProgressHook
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
                observe_state: Optional[Callable[[ml.LockState], None]] = None,
                observe_step: Optional[Callable[[ml.LockState, Any, Any, ml.LockState], None]] = None,
                ) -> Model[ml.LockState]:
    """``model.lock`` at ``cfg`` in the checker's narrow interface, with ``spec.lock``'s properties."""
    return Model(
        observe_state=observe_state,
        observe_step=observe_step,
        init=partial(ml.init, cfg),
        enabled=lambda st: list(ml.enabled(cfg, st)),
        next=partial(ml.next_state, cfg),
        invariants=spec.INVARIANTS if invariants is None else invariants,
        step_properties=spec.STEP_PROPERTIES if step_properties is None else step_properties,
        sometimes=spec.SOMETIMES if sometimes is None else sometimes,
        canonical=ml.canonical_function(cfg) if symmetry else None,
    )


class LockRun(suites.BoundsRun[ml.LockBounds, ml.LockState]):
    """A check of one bounds of the lock (``checker.suites.BoundsRun``), with ``spec.lock``'s "sometimes"."""

    SOMETIMES = spec.SOMETIMES


class SuiteRun(suites.SuiteRun[LockRun]):
    """A bounds suite of the lock (``checker.suites.SuiteRun``)."""

    SOMETIMES = spec.SOMETIMES


def operator_actions(cfg: ml.LockBounds, st: ml.LockState) -> list[ml.Action]:
    """The actions the processes alone take from ``st`` (no kill, no pid reused, no reap), one process at a time:
    the first process in a call takes its steps (every choice of chance; an operation that returns), and only
    when no call runs does a process call again. A way out found this way is a way out; liveness asks only that
    one exists (a state this schedule cannot settle is reported stuck, and its trace says where)."""
    actions = list(ml.enabled(cfg, st, environment=False, extra_calls=EXTRA_CALLS))
    running = [a for a in actions if isinstance(a, (ml.Step, ml.Leave))]
    if running:
        first = min(a.slot for a in running)
        return [a for a in running if a.slot == first and not (isinstance(a, ml.Leave) and a.effect is not OK)]
    return [next(a for a in actions if isinstance(a, ml.Start))] if any(
        isinstance(a, ml.Start) for a in actions) else []


def operator_successors(cfg: ml.LockBounds, canonical: Callable[[ml.LockState], ml.LockState],
                        st: ml.LockState) -> list[ml.LockState]:
    """The representatives of the states ``operator_actions`` lead to from ``st``."""
    return [canonical(ml.next_state(cfg, st, a)[0]) for a in operator_actions(cfg, st)]


class OperatorEdges:
    """The liveness operator's edges out of the reached states, taken from the search as it goes.

    The search computes every successor of every state it expands, and fingerprints each by its representative;
    the liveness closure asks the same successors again. Told of each new state (``discovered``: the state the
    search will expand, and its representative) and of each transition (``step``), this keeps, per representative,
    the representatives that ``operator_actions`` of the expanded state lead to, at the cost of one ``enabled``
    per state. ``successors`` answers from it, and computes the rest: states the search never expanded (the
    closure's own), and those where the operator takes a call the bounds do not (``EXTRA_CALLS``), which the search
    has no transition for. The expanded state is the search's member of its class, so the schedule is the
    operator's in that member's numbering: one process at a time still, and a state of a class settles or not
    the same way under any numbering of interchangeable processes.
    """

    def __init__(self, cfg: ml.LockBounds, canonical: Callable[[ml.LockState], ml.LockState]) -> None:
        self.cfg, self.canonical = cfg, canonical
        self.edges: dict[ml.LockState, tuple[int, list[ml.LockState]]] = {}  # representative -> (chosen, found)
        self._waiting: dict[int, ml.LockState] = {}  # id of a discovered state not yet expanded -> representative
        self._expanding: Optional[ml.LockState] = None  # the state the search expands now
        self._chosen: list[ml.Action] = []  # its operator's actions
        self._found: list[ml.LockState] = []  # the representatives they lead to, so far

    def discovered(self, st: ml.LockState, representative: ml.LockState) -> None:
        self._waiting[id(st)] = representative  # st waits in the search's frontier, alive, until expanded

    def step(self, st: ml.LockState, action: ml.Action, result: object, nxt: ml.LockState) -> None:
        if st is not self._expanding:
            self._expanding, self._chosen, self._found = st, operator_actions(self.cfg, st), []
            self.edges[self._waiting.pop(id(st))] = (len(self._chosen), self._found)
        if action in self._chosen:
            self._found.append(self.canonical(nxt))  # the search's fingerprint of nxt asks the same next

    def successors(self, st: ml.LockState) -> list[ml.LockState]:
        edges = self.edges.get(st)
        if edges is not None and len(edges[1]) == edges[0]:
            return edges[1]
        return operator_successors(self.cfg, self.canonical, st)


def _remember_last(canonical: Callable[[ml.LockState], ml.LockState]) -> Callable[[ml.LockState], ml.LockState]:
    """``canonical`` remembering its last argument: the search takes a new state's representative for its
    fingerprint, and the liveness record asks again for the same state at once."""
    last: list[Optional[ml.LockState]] = [None, None]

    def remembered(st: ml.LockState) -> ml.LockState:
        if st is not last[0]:
            last[0], last[1] = st, canonical(st)
        return cast(ml.LockState, last[1])

    return remembered


def run(cfg: ml.LockBounds, liveness: bool = True, stop_on_first: bool = False, symmetry: bool = True,
        progress: Optional[Callable[[int, int, str], None]] = None) -> LockRun:
    """Check ``cfg``: properties by breadth-first search, then bounded liveness. ``progress(states, depth, phase)``
    is called as the search goes (``checker.bfs.check``'s), and once as the liveness check begins."""
    started = time.perf_counter()
    canonical = _remember_last(ml.canonical_function(cfg)) if symmetry else (lambda st: st)
    states: list[ml.LockState] = []
    edges = OperatorEdges(cfg, canonical)

    def discovered(st: ml.LockState) -> None:
        representative = canonical(st)
        states.append(representative)
        if liveness:
            edges.discovered(st, representative)

    model = build_model(cfg, symmetry, observe_state=discovered, observe_step=edges.step if liveness else None)
    model.canonical = canonical if symmetry else None  # the search's fingerprint and the record share one call
    result = check(model, stop_on_first=stop_on_first,
                   progress=None if progress is None else (lambda r: progress(r.states, r.depth, "")))
    live, stuck = None, None
    if liveness and result.complete and not (stop_on_first and result.violations):
        if progress is not None:
            progress(result.states, result.depth, "bounded liveness (the processes' closure)")
        settled = partial(spec.settled, empty_is_free=ml.Fix.ATOMIC_PUBLISH in cfg.fixes)
        live = stuck_states(states, edges.successors, settled,
                            max_states=closure_budget(len(states), CLOSURE_FACTOR))
        if live.stuck:
            stuck_set = live.stuck
            prop = spec.Property(spec.RECOVERABLE[0], lambda s: canonical(s) not in stuck_set, "invariant")
            found = check(build_model(cfg, symmetry, invariants=(prop,), step_properties=(), sometimes=()),
                          stop_on_first=True)
            stuck = found.violations.get(prop.name)
    return LockRun(cfg, result, live, stuck, time.perf_counter() - started)


def run_suite(bounds: tuple[ml.LockBounds, ...], liveness: bool = True, stop_on_first: bool = False,
              symmetry: bool = True, progress: Optional[ProgressHook] = None) -> SuiteRun:
    """Each bounds of a suite, in order (with ``stop_on_first``: up to the first bounds that fails). ``progress``
    is told the states reached so far, over the suite's bounds together, and which bounds and phase it is at
    (``checker.migration``'s ticks)."""
    return SuiteRun(suites.run_each(bounds, lambda b, hook: run(b, liveness, stop_on_first, symmetry, hook),
                                    stop_on_first, progress))


# ---------------------------------------------------------------------------
# Findings: each way the seed breaks a property, and the fix that prevents it
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A flaw of the seed's lock: the property it breaks, the ``Fix`` of ``fixed`` that prevents it, and where the
    checker shows it (``bounds`` of the ``lock`` suite). ``alone`` is the length of the shortest trace with every
    other fix in place (the flaw alone: ``fixed`` without ``fix``), ``seed`` the seed's own shortest trace of
    ``prop`` at ``bounds`` (other flaws may shorten it); both are pinned by tests/test_lock_model.py."""

    id: str  # F7, F8, ... (docs/findings.md; F1 to F6 are the replica's and the migration's)
    title: str  # the flaw in one line
    fix: ml.Fix  # what prevents it
    prop: str  # the property it breaks (``spec.RECOVERABLE[0]`` for a wedged lock)
    bounds: str  # the bounds of the ``lock`` suite where it shows
    alone: int  # steps of the shortest trace of ``prop`` at ``bounds`` under ``fixed`` without ``fix``
    seed: int  # steps of the seed's shortest trace of ``prop`` at ``bounds``
    lines: str  # the seed's lines it runs through (projection-lock.js)
    sees: str  # what a user sees


FINDINGS: tuple[Finding, ...] = (
    Finding("F7", "a kill between mkdir(L) and the owner file's write wedges the lock for good", ml.Fix.ATOMIC_PUBLISH,
            spec.RECOVERABLE[0], "crash", 6, 3, "14-16, 29-44, 56-57",
            "every later call waits its 80 tries and answers `publication_pending` \"Projection publisher is busy\", "
            "forever: an empty L (or an empty owner.json) is unreadable, and unreadable counts as not stale"),
    Finding("F8", "a takeover renames away a lock a live process acquired after the stale one was judged",
            ml.Fix.CLAIMED_TAKEOVER, "takeover_only_of_the_dead", "race", 26, 16, "30-36, 45-50",
            "two processes inside the operation at once: the inode check and the rename are two calls; between them "
            "another process takes the stale lock over and a third makes a new one, which the rename moves away "
            "(and on ext4 a freed inode number comes back, so the check proves nothing even without the window)"),
    Finding("F9", "a release removes the lock by its path, whoever holds it now", ml.Fix.CLAIMED_RELEASE,
            "release_removes_only_its_own", "namespace", 17, 18, "67-68",
            "a holder whose lock was taken over (judged dead, or the directory removed by hand) removes the next "
            "holder's lock in its finally: a third process enters beside the second"),
    Finding("F10", "the start time is cached per pid for the whole call: a dead owner stays alive to it",
            ml.Fix.FRESH_PROBE, "busy_only_while_a_live_owner_holds", "crash", 20, 10, "11, 33-36",
            "`publication_pending` busy after 80 tries while the owner is dead (a zombie, or its pid reused): "
            "the lock could have been taken over"),
    Finding("F11", "an owner of another PID namespace is judged by its pid read in ours", ml.Fix.NAMESPACE,
            "takeover_only_of_the_dead", "namespace", 15, 12, "9, 33-39",
            "a container's live holder is taken for dead (its pid is nobody here, or somebody else): two processes "
            "inside the operation"),
    Finding("F12", "a killed owner not yet reaped (a zombie) answers kill(pid, 0): its lock is held until its parent "
            "reaps it", ml.Fix.ZOMBIE_DEAD, "busy_only_while_a_live_owner_holds", "crash", 13, 10, "33-36",
            "busy answers for as long as the dead holder's parent does not wait() for it"),
    Finding("F13", "no order among waiters: a waiter can be overtaken by later arrivals without bound", ml.Fix.TICKETS,
            "overtakes_are_bounded", "fair", 14, 14, "12-14, 56-58",
            "a caller that arrived first is overtaken again and again, and can end busy while others ran"),
    Finding("F14", "every failure of the operation is reported as committed", ml.Fix.TRUE_ANSWERS, "answers_are_true",
            "answers", 9, 8, "61-66",
            "`publication_pending` \"Committed projection needs reconciliation\" (effect committed) for an operation "
            "that threw having changed nothing: the caller reconciles what never happened"),
)


def findings_breaking(prop: str) -> tuple[Finding, ...]:
    """The findings whose flaw breaks ``prop`` (a seed's violation of it is one of them, or several at once)."""
    return tuple(f for f in FINDINGS if f.prop == prop or (prop == "mutual_exclusion" and f.id in ("F8", "F9", "F11")))


def finding_of(fixes: frozenset[ml.Fix]) -> Optional[Finding]:
    """The finding a run with exactly ``fixes`` exposes when it is ``fixed`` less one fix (else None)."""
    missing = frozenset(ml.Fix) - fixes
    if len(missing) != 1:
        return None
    (fix,) = missing
    return next(f for f in FINDINGS if f.fix is fix)


def trace_lines(violation: Violation) -> list[str]:
    """A counterexample, one numbered line per step with what it returned, then the state it left."""
    return lines.trace_lines(violation, ml.describe_state, ml.describe_action, result_text)


def result_text(result: object) -> str:
    """A step's result in words: the call and what it found, the answer a call ended with, a lock removed."""
    if isinstance(result, spec.Done) and result.note == "called":  # ``model.lock.start``: no call made yet
        return "the call begins"
    if isinstance(result, spec.Done):
        text = result.call.value + (f": {result.note}" if result.note else "")
    elif isinstance(result, spec.Ended):
        text = f"{result.call.value}, the call answers {result.answer.value}"
    elif isinstance(result, spec.EnvDone):
        return result.note or "done"
    elif isinstance(result, spec.Crashed):
        return "killed"
    else:
        return type(result).__name__.lower()
    if result.removed is not None:
        who = result.removed.instance
        text += f" (removed the lock of p{who[0]}#{who[1]}: {result.removed.how})"
    if result.busy is not None:
        text += " (gives up: busy)"
    return text


# ---------------------------------------------------------------------------
# Traces: ITF
# ---------------------------------------------------------------------------

#: The protocol's name in an ITF trace's ``#meta.protocol``.
PROTOCOL = "lock"
#: A state's variables (``LockState``'s fields, each as ``itf.to_itf`` writes it).
LOCK_VARS = ("procs", "fs", "os", "crashes", "reuses")
#: Every argument an action may have (``mbt::nondetPicks``): the fields of ``model.lock``'s actions.
LOCK_PICKS = ("slot", "choice", "effect", "ns", "pid")
#: Each action's class by its kind (``mbt::actionTaken``).
ACTIONS: dict[str, type] = {"start": ml.Start, "step": ml.Step, "leave": ml.Leave, "crash": ml.Crash, "reap": ml.Reap,
                            "reuse": ml.Reuse}  # by name: compiled by mypyc, a class's ``kind`` is a field


def state_vars(st: ml.LockState) -> dict[str, Any]:
    """A state's variables as ITF values."""
    return {name: itf.to_itf(getattr(st, name)) for name in LOCK_VARS}


def action_json(action: ml.Action) -> dict[str, Any]:
    """An action as JSON: its ``kind`` and its fields (enums as their values)."""
    out: dict[str, Any] = {"kind": action.kind}
    for name in _fields(action):
        value = getattr(action, name)
        out[name] = value.value if hasattr(value, "value") else value
    return out


def _fields(action: object) -> list[str]:
    """An action's own fields (compiled by mypyc, its class attribute ``kind`` is a dataclass field too)."""
    return _fields_of(type(action))


def _fields_of(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "kind"]


def action_from_json(data: dict[str, Any]) -> ml.Action:
    """The inverse of ``action_json``."""
    if data.get("kind") not in ACTIONS:
        raise ValueError(f"action kind {data.get('kind')!r} is not an action of the lock model ({', '.join(ACTIONS)})")
    cls = ACTIONS[data["kind"]]
    fields = set(_fields_of(cls))
    args = {name: spec.Effect(value) if name == "effect" else value for name, value in data.items() if name in fields}
    return cast(ml.Action, cls(**args))


def action_picks(action: ml.Action) -> dict[str, Any]:
    """An action's fields as ITF values (``mbt::nondetPicks``)."""
    return {name: itf.to_itf(getattr(action, name)) for name in _fields(action)}


#: The lock's ITF writing (``checker.itf.write_steps``).
ENCODER = itf.Encoder(PROTOCOL, LOCK_VARS, LOCK_PICKS, state_vars, lambda a: a.kind, action_picks, action_json,
                      result_text, describe=lambda a, before: ml.describe_action(a, before))


def write_trace(path: Path, violation: Violation, meta: Optional[dict[str, Any]] = None) -> Path:
    """Write a violation's (or a stuck state's) path as an ITF trace; ``meta`` names the property, bounds, suite
    and variant (``#meta.violated``, ``bounds``, ``suite``, ``variant``, ``fixes``)."""
    return itf.write_steps(path, ENCODER, violation.steps, f"{violation.prop.name}: {violation.prop.statement}",
                           meta)


__all__ = ["ClosureBudgetExceeded", "ENCODER", "EXTRA_CALLS", "FINDINGS", "Finding", "LockRun", "PROTOCOL", "SuiteRun", "action_from_json",
           "action_json", "build_model", "finding_of", "findings_breaking", "result_text", "run", "run_suite", "state_vars", "trace_lines",
           "write_trace"]
