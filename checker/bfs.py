"""Explicit-state breadth-first model checking over any model with the narrow interface.

Models: the search, not the protocol. A model is ``init() -> state``,
``enabled(state) -> actions``, ``next(state, action) -> (state, result)``,
plus state invariants ``inv(state) -> bool`` and step properties
``prop(pre, action, result, post) -> bool`` given as ``spec.properties``
``Property`` values (or anything with ``name``, ``check`` and ``kind``).
Breadth-first order makes the first violation found of each property a
shortest one.

The visited set holds 64-bit fingerprints, not states (TLC's design): each
state's ``Model.fingerprint`` (default: Python's ``hash``, which is stable
within a process and its forks) maps to its parent's fingerprint and the
action taken, and a counterexample is rebuilt by replaying those actions
from ``init()`` (``next`` must be deterministic; a replay that reaches
another fingerprint raises ``NondeterministicModel``). With symmetry
(``Model.canonical``), the fingerprint is the representative's
(Stateright's ``Representative``): the frontier keeps the state first
reached, each was made from its parent's by the recorded action, so the
replay is a real path. Two distinct states
with one fingerprint would make the second look visited: ``Result``
carries TLC's estimate of that probability, ``n * t / 2**64`` for ``n``
distinct states and ``t`` transitions (``collision_probability``).

Properties read ``Model.view(state)`` (default: the state itself), computed
once per state, not once per property. A step property may say which steps
it can fail on: ``actions`` (the ``kind`` of the action) and ``results``
(result types); the checker evaluates it only there, from a table built per
(action kind, result type). ``tests/test_checker_fast.py`` shows, on every
transition of small bounds, that each property returns True wherever its
filter skips it, so the filter hides nothing.

"Sometimes" properties come in three kinds: a state (``sometimes-state``),
a step (``sometimes-step``), and a step that follows another on one path
(``sometimes-after``: ``prop.after`` is a step predicate, and ``prop.check``
gets that earlier step ``(pre, action, result, post)`` first). For the last,
each state reached through an ``after`` step carries that step (the first
one found) to the states reached from it; a witness is a real path. Marks go
only forward from states not yet expanded, so this under-approximates: a
state first expanded without a mark is not revisited.

``checker.reference.check_reference`` is the search as it was before (full
states in the visited set, every property on every step), kept for the
benchmark and the equivalence tests.

What every search of a ``Model`` shares is here too, so the parallel
searches (``checker.parallel``, ``checker.ray_search``) use it rather than
repeat it: ``fingerprint_function``, ``view_function``, ``step_table``,
``path_to``, ``replay`` and ``replay_to``. ``reachable`` lists the states
themselves, for benchmarks and tests that need real ones.

Leaves out on purpose: partial-order reduction, disk spilling, and
parallel search (``checker.parallel``). The state counts are what they are, and the
pinned counts in the tests are exact (up to a fingerprint collision).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Iterable, Optional, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from envreplica.checker.collector import full_collections_deferred

#: A model's state: any hashable value (the visited sets and marks hold states or their fingerprints).
S = TypeVar("S", bound=Hashable)


class CheckedProperty(Protocol):
    """What the checker reads of a property (``spec.properties.Property``, ``spec.migration.Property``).

    ``check`` takes a state view (an invariant, a sometimes-state), a step
    ``(pre, action, result, post)`` (a step property, a sometimes-step), or an
    earlier step then a step (a sometimes-after, whose ``after`` is set); its
    truth value is the verdict. ``actions`` and ``results``, read with
    ``getattr``, are optional (``_applies``).
    """

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def check(self) -> Callable[..., object]: ...

    @property
    def after(self) -> Optional[CheckedProperty]: ...

    @property
    def statement(self) -> str: ...


#: A step as the properties read it: (pre, action, result, post), the states as views.
StepView = tuple[Any, Any, Any, Any]
#: ``step_table``'s answer for a step: (step properties, sometimes-step properties) to evaluate there.
StepProperties = tuple[list[CheckedProperty], list[CheckedProperty]]


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of RuntimeError
class NondeterministicModel(RuntimeError):
    """Replaying a path's actions from ``init()`` reached another state than the search did."""


@dataclass
class Step:
    """One transition of a counterexample."""

    action: Any  # the action taken (None for the initial state)
    result: Any  # what it returned
    state: Any  # the state it led to


@dataclass
class Violation:
    """The shortest run found that breaks ``prop``."""

    prop: CheckedProperty  # the violated property
    steps: list[Step]  # from the initial state (steps[0].action is None)

    @property
    def length(self) -> int:
        return len(self.steps) - 1


@mypyc_attr(native_class=False)  # a generic dataclass of callables: a plain class, compiled or not
@dataclass
class Model(Generic[S]):
    """The interface the checker needs (``S``: the model's state; actions and results are the model's own)."""

    init: Callable[[], S]
    enabled: Callable[[S], Iterable[Any]]
    next: Callable[[S, Any], tuple[S, Any]]
    invariants: tuple[CheckedProperty, ...] = ()
    step_properties: tuple[CheckedProperty, ...] = ()
    sometimes: tuple[CheckedProperty, ...] = ()  # properties that must hold at least once (state, step or after kind)
    observe_state: Optional[Callable[[S], None]] = None  # coverage hook per new state
    observe_step: Optional[Callable[[S, Any, Any, S], None]] = None  # per transition
    view: Optional[Callable[[S], Any]] = None  # what the properties read of a state (default: the state)
    fingerprint: Callable[[S], int] = hash  # a state's 64-bit fingerprint in the visited set
    canonical: Optional[Callable[[S], S]] = None  # symmetry: a state's representative (default: itself)


@dataclass
class Result:
    """What a run found and measured."""

    states: int = 0  # distinct states
    transitions: int = 0  # transitions explored
    depth: int = 0  # the deepest BFS level reached
    seconds: float = 0.0
    complete: bool = True  # False when stopped by max_depth or max_states
    violations: dict[str, Violation] = field(default_factory=dict)  # property name -> Violation
    witnessed: dict[str, int] = field(default_factory=dict)  # sometimes-property name -> depth first seen
    fingerprints: bool = False  # the visited set held fingerprints (collision_probability applies)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float("inf")

    @property
    def transitions_per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds > 0 else float("inf")

    @property
    def collision_probability(self) -> float:
        """TLC's estimate that two distinct states shared a fingerprint: states x transitions / 2**64."""
        return self.states * self.transitions / 2.0 ** 64 if self.fingerprints else 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def _applies(prop: CheckedProperty, kind: object, result_type: type) -> bool:
    """Whether step property ``prop`` can fail on a step of this action kind and result type."""
    actions = getattr(prop, "actions", None)
    results = getattr(prop, "results", None)
    kind = getattr(kind, "value", kind)  # an Enum kind is named by its value (a str Enum hashes by name)
    return (actions is None or kind in actions) and (results is None or issubclass(result_type, results))


def after_of(prop: CheckedProperty) -> CheckedProperty:
    """A sometimes-after property's earlier step (``prop.after``, which that kind sets)."""
    if prop.after is None:
        raise ValueError(f"{prop.name}: a sometimes-after property without the step that must come first")
    return prop.after


# -- what every search of a Model shares (this one, checker.parallel's, checker.ray_search's) ---------


def fingerprint_function(model: Model[S]) -> Callable[[S], int]:
    """A state's key in the visited set: ``Model.fingerprint``, of its representative under symmetry."""
    if model.canonical is None:
        return model.fingerprint
    raw, canonical = model.fingerprint, model.canonical

    def fingerprint(st: S) -> int:
        return raw(canonical(st))

    return fingerprint


def view_function(model: Model[S]) -> Callable[[S], Any]:
    """What the properties read of a state: ``Model.view``, or the state itself."""
    return model.view if model.view is not None else _identity


def _identity(st: S) -> S:
    return st


def step_table(model: Model[S]) -> Callable[[Any, Any], StepProperties]:
    """``(action, result) -> (step properties, sometimes-step properties)`` that can fail (or hold) there.

    Built once per (action kind, result type) from each property's filter (``_applies``).
    """
    step_sometimes = [p for p in model.sometimes if p.kind == "sometimes-step"]
    step_properties = list(model.step_properties)  # not the model: the closure holds no hook, no state of it
    table: dict[tuple[Any, type], StepProperties] = {}

    def for_step(action: Any, res: Any) -> StepProperties:
        key = (getattr(action, "kind", None), type(res))
        entry = table.get(key)
        if entry is None:
            entry = table[key] = (
                [p for p in step_properties if _applies(p, key[0], key[1])],
                [p for p in step_sometimes if _applies(p, key[0], key[1])],
            )
        return entry

    return for_step


def path_to(parent_of: Callable[[int], Optional[tuple[int, Any]]], end_fp: int) -> list[Any]:
    """The actions from the initial state to ``end_fp``, following ``parent_of(fp) -> (parent fp, action)``."""
    actions: list[Any] = []
    node = parent_of(end_fp)
    while node is not None:
        prev_fp, action = node
        actions.append(action)
        node = parent_of(prev_fp)
    actions.reverse()
    return actions


def replay(model: Model[S], actions: Iterable[Any]) -> list[Step]:
    """The run of ``actions`` from ``model.init()``, as steps (the first one the initial state)."""
    st = model.init()
    steps = [Step(None, None, st)]
    for action in actions:
        st, res = model.next(st, action)
        steps.append(Step(action, res, st))
    return steps


def replay_to(model: Model[S], fingerprint: Callable[[S], int], actions: list[Any], end_fp: int) -> list[Step]:
    """``replay(model, actions)``; ``NondeterministicModel`` unless it ends at fingerprint ``end_fp``."""
    steps = replay(model, actions)
    reached = fingerprint(steps[-1].state)
    if reached != end_fp:
        raise NondeterministicModel(
            f"replaying {len(actions)} actions from init() reached fingerprint {reached:#x}, "
            f"not {end_fp:#x}: the model's next() must be a function of (state, action)")
    return steps


def reachable(model: Model[S], limit: Optional[int] = None) -> list[S]:
    """The states reachable from ``model.init()``, in breadth-first order (the first ``limit`` of them).

    No property is evaluated: the states themselves, for benchmarks and tests that need real ones.
    """
    first = model.init()
    states, frontier, seen = [first], deque([first]), {first}
    while frontier and (limit is None or len(states) < limit):
        st = frontier.popleft()
        for action in model.enabled(st):
            nxt, _ = model.next(st, action)
            if nxt not in seen:
                seen.add(nxt)
                states.append(nxt)
                frontier.append(nxt)
    return states if limit is None else states[:limit]


def _trace(model: Model[S], fingerprint: Callable[[S], int], parent: dict[int, Optional[tuple[int, Any]]],
           end_fp: int, last: Optional[Step] = None) -> list[Step]:
    """The steps from the initial state to ``end_fp`` (the search's ``parent`` links, replayed), then ``last``."""
    chain = replay_to(model, fingerprint, path_to(parent.__getitem__, end_fp), end_fp)
    if last is not None:
        chain.append(last)
    return chain


def _on_new_state(model: Model[S], fingerprint: Callable[[S], int], parent: dict[int, Optional[tuple[int, Any]]],
                  result: Result, invariants: list[CheckedProperty], state_sometimes: list[CheckedProperty], st: S,
                  fp: int, seen: Any, depth: int) -> None:
    """A state the search reached first: told to ``model.observe_state``, its invariants and "sometimes"
    properties checked (the first violation's trace, the first witness's depth)."""
    if model.observe_state is not None:
        model.observe_state(st)
    for prop in invariants:
        if prop.name not in result.violations and not prop.check(seen):
            result.violations[prop.name] = Violation(prop, _trace(model, fingerprint, parent, fp))
    for prop in state_sometimes:
        if prop.name not in result.witnessed and prop.check(seen):
            result.witnessed[prop.name] = depth


def check(
    model: Model[S],
    max_depth: Optional[int] = None,
    max_states: Optional[int] = None,
    stop_on_first: bool = False,
    progress: Optional[Callable[[Result], None]] = None,
) -> Result:
    """Breadth-first search from ``model.init()``; records the shortest violation of each property (with the
    collector's full collections deferred: ``checker.collector``)."""
    with full_collections_deferred():
        return _check(model, max_depth, max_states, stop_on_first, progress)


def _check(model: Model[S], max_depth: Optional[int], max_states: Optional[int], stop_on_first: bool,
           progress: Optional[Callable[[Result], None]]) -> Result:
    started = time.perf_counter()
    result = Result(fingerprints=True)
    fingerprint, view, for_step = fingerprint_function(model), view_function(model), step_table(model)
    init = model.init()
    init_fp = fingerprint(init)
    #: fingerprint -> (parent fingerprint, action), or None for the initial state
    parent: dict[int, Optional[tuple[int, Any]]] = {init_fp: None}
    frontier = deque([(init, init_fp, 0)])
    invariants = list(model.invariants)
    state_sometimes = [p for p in model.sometimes if p.kind == "sometimes-state"]
    after_sometimes = [p for p in model.sometimes if p.kind == "sometimes-after"]
    after_step = {p.name: after_of(p) for p in after_sometimes}
    #: per sometimes-after property: fingerprint -> the earlier step (pre, action, result, post), as views
    marks: dict[str, dict[int, StepView]] = {p.name: {} for p in after_sometimes}

    # no closure in here: compiled by mypyc, a nested function and the environment that holds it make a cycle
    # through the whole search (the model, and through its hooks every state a caller keeps), which only a full
    # collection frees, seconds later (3 s after the lock's suite, in whatever runs next)
    _on_new_state(model, fingerprint, parent, result, invariants, state_sometimes, init, init_fp, view(init), 0)
    last_report = started
    # The loop's lookups, bound once (it runs once per transition).
    observe_step, enabled, take = model.observe_step, model.enabled, model.next
    violations, witnessed = result.violations, result.witnessed
    transitions = 0
    while frontier:
        if stop_on_first and violations:
            break
        st, fp, depth = frontier.popleft()
        result.depth = max(result.depth, depth)
        pending_after = [(p, marks[p.name], marks[p.name].pop(fp, None)) for p in after_sometimes
                         if p.name not in witnessed]
        if max_depth is not None and depth >= max_depth:
            result.complete = False
            continue
        pre = view(st)
        for action in enabled(st):
            nxt, res = take(st, action)
            transitions += 1
            if observe_step is not None:
                observe_step(st, action, res, nxt)
            nxt_fp = fingerprint(nxt)
            post = view(nxt)
            props, sometimes = for_step(action, res)
            for prop in props:
                if prop.name not in violations and not prop.check(pre, action, res, post):
                    violations[prop.name] = Violation(prop, _trace(model, fingerprint, parent, fp,
                                                                         Step(action, res, nxt)))
            for prop in sometimes:
                if prop.name not in witnessed and prop.check(pre, action, res, post):
                    witnessed[prop.name] = depth + 1
            for prop, marked, earlier in pending_after:
                if prop.name in witnessed:
                    continue
                if earlier is None:
                    if after_step[prop.name].check(pre, action, res, post):
                        marked.setdefault(nxt_fp, (pre, action, res, post))
                elif prop.check(earlier, pre, action, res, post):
                    witnessed[prop.name] = depth + 1
                    marked.clear()
                else:
                    marked.setdefault(nxt_fp, earlier)
            if nxt_fp not in parent:
                parent[nxt_fp] = (fp, action)
                _on_new_state(model, fingerprint, parent, result, invariants, state_sometimes, nxt, nxt_fp, post,
                              depth + 1)
                frontier.append((nxt, nxt_fp, depth + 1))
                if max_states is not None and len(parent) >= max_states:
                    result.complete = False
                    frontier.clear()
                    break
        result.states, result.transitions = len(parent), transitions
        if progress is not None and time.perf_counter() - last_report > 0.2:
            last_report = time.perf_counter()
            result.seconds = last_report - started
            progress(result)
    result.states, result.transitions = len(parent), transitions
    result.seconds = time.perf_counter() - started
    return result
