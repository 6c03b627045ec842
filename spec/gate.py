"""The serving gate as a hierarchical state machine, declared as data.

Models: the gate of the seed's authority row (``activated``, ``gateOpen``,
``attemptId``) as four states, ``inactive``, ``closed.idle``,
``closed.staging`` and ``open``, moved only by the seed's operations:
``begin`` (any state to ``closed.staging``), ``complete`` (a successful commit,
``closed.staging`` to ``open``), ``close_gate`` and ``restart`` (everything
to ``closed.idle``; an inactive replica stays inactive, as the seed's
``closeProjectEnvReplicaGate`` leaves ``activated`` alone).

Leaves out on purpose: the guards. Whether ``begin`` is refused (an organisation
change) or ``complete`` is refused (a refusal code) is the model's business; a
refused operation fires no trigger at all, so the table lists only the moves a
successful operation makes. Page and delivery never move the gate.

``TRANSITIONS`` is the single source: ``build_machine`` declares it with
``transitions`` (what tests and the simulator run), ``GATE_NEXT`` compiles it to
a frozen dict (what the exhaustive checker runs, ~300x cheaper per step), and a
test proves the two agree on every (trigger, state) pair.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, TypedDict, Union, cast

from envreplica.spec.domain import ActionKind, Crashed

if TYPE_CHECKING:
    from transitions.extensions.nesting import HierarchicalMachine

SEPARATOR = "."


class Gate(str, enum.Enum):
    """The four gate states; the value is the machine's (nested) state name."""

    INACTIVE = "inactive"
    IDLE = "closed.idle"
    STAGING = "closed.staging"
    OPEN = "open"

    @property
    def activated(self) -> bool:
        return self is not Gate.INACTIVE

    @property
    def is_open(self) -> bool:
        return self is Gate.OPEN


class Trigger(str, enum.Enum):
    """The operations that move the gate, named after the seed's functions.

    None of them is ``close``: a trigger named like a method of the model would
    silently not bind in ``transitions`` (see library notes).
    """

    BEGIN = "begin"
    COMPLETE = "complete"
    CLOSE_GATE = "close_gate"
    RESTART = "restart"


@dataclass(frozen=True)
class GateEdge:
    """One declared move: ``trigger`` takes the gate from ``source`` to ``dest``."""

    trigger: Trigger
    source: Gate
    dest: Gate

    def label(self) -> str:
        return f"{self.trigger.value}: {self.source.value} -> {self.dest.value}"


def _edges() -> tuple[GateEdge, ...]:
    every = tuple(Gate)
    edges = [GateEdge(Trigger.BEGIN, g, Gate.STAGING) for g in every]
    edges.append(GateEdge(Trigger.COMPLETE, Gate.STAGING, Gate.OPEN))
    for trigger in (Trigger.CLOSE_GATE, Trigger.RESTART):
        edges.append(GateEdge(trigger, Gate.INACTIVE, Gate.INACTIVE))
        edges.extend(GateEdge(trigger, g, Gate.IDLE) for g in (Gate.IDLE, Gate.STAGING, Gate.OPEN))
    return tuple(edges)


#: The declared transition table: the reviewer's reading of the gate.
TRANSITIONS: tuple[GateEdge, ...] = _edges()

#: The same table compiled for the checker: (trigger, source) -> dest.
GATE_NEXT: Mapping[tuple[Trigger, Gate], Gate] = MappingProxyType(
    {(e.trigger, e.source): e.dest for e in TRANSITIONS}
)

#: The states as ``transitions`` declares them (``closed`` has two children).
MACHINE_STATES: list[Union[str, dict[str, Any]]] = [
    Gate.INACTIVE.value,
    {"name": "closed", "children": ["idle", "staging"], "initial": "idle"},
    Gate.OPEN.value,
]


def fire(trigger: Trigger, gate: Gate) -> Gate:
    """The gate after ``trigger`` fires in ``gate``; an undeclared move is a model bug."""
    try:
        return GATE_NEXT[(trigger, gate)]
    except KeyError:  # complete is declared only from closed.staging
        from envreplica.spec.domain import ModelBug

        raise ModelBug(
            f"gate rule: trigger {trigger.value!r} is not declared from state "
            f"{gate.value!r}; declare it in spec.gate.TRANSITIONS or fix the model"
        ) from None


class MachineKwargs(TypedDict, total=False):
    """The keyword arguments ``build_machine`` hands to the machine class (the graph ones only with ``graph``)."""

    states: list[Union[str, dict[str, Any]]]
    transitions: list[dict[str, str]]
    initial: str
    auto_transitions: bool
    ignore_invalid_triggers: bool
    graph_engine: str
    title: str
    show_conditions: bool


def machine_kwargs() -> MachineKwargs:
    """The keyword arguments that declare the table to a ``transitions`` machine."""
    return MachineKwargs(
        states=MACHINE_STATES,
        transitions=[
            {"trigger": e.trigger.value, "source": e.source.value, "dest": e.dest.value}
            for e in TRANSITIONS
        ],
        initial=Gate.INACTIVE.value,
        auto_transitions=False,
        ignore_invalid_triggers=False,
    )


def _nested_classes(graph: bool) -> type[HierarchicalMachine]:
    """Machine classes whose nested-state separator is ``.`` (not the default ``_``)."""
    from transitions.extensions.nesting import NestedState

    base: type[HierarchicalMachine]
    if graph:
        from transitions.extensions.diagrams import HierarchicalGraphMachine

        base = HierarchicalGraphMachine
    else:
        from transitions.extensions import HierarchicalMachine

        base = HierarchicalMachine

    # the bases are chosen at run time (plain or graph machine), and mypy takes no variable as a base class
    class _State(base.state_cls):  # type: ignore[misc, name-defined]
        separator = SEPARATOR

    class _Machine(base):  # type: ignore[misc, valid-type]
        state_cls = _State

    assert issubclass(_State, NestedState)
    return _Machine


class GateModel:
    """The object a ``transitions`` machine moves; has no method named like a trigger."""

    state: str


#: The gate trigger a successful step of each kind fires (``ActionKind`` values; the rest fire none).
TRIGGER_OF: Mapping[ActionKind, Trigger] = MappingProxyType({
    ActionKind.BEGIN: Trigger.BEGIN,
    ActionKind.COMMIT: Trigger.COMPLETE,
    ActionKind.CLOSE: Trigger.CLOSE_GATE,
    ActionKind.RESTART: Trigger.RESTART,
})


class Step(Protocol):
    """Any step with a kind (``model.actions``, the migration model's actions)."""

    @property
    def kind(self) -> ActionKind: ...


class CrashStep(Step, Protocol):
    """A step of kind ``ActionKind.CRASH``: it carries the ``action`` it cut."""

    @property
    def action(self) -> Step: ...


def fired_trigger(action: Step, result: object) -> Optional[Trigger]:
    """The gate trigger a step fired, given its result: refusals and errors fire none; a crash restarts.

    ``action`` is any step with a ``kind`` (an ``ActionKind``); a crash step carries the ``action`` it cut."""
    kind = action.kind
    if kind is ActionKind.CRASH:  # a crash restarts; an uncut run fires what its action fires
        cut = cast(CrashStep, action).action  # a crash step always carries the action it cut
        return Trigger.RESTART if isinstance(result, Crashed) else fired_trigger(cut, result)
    trigger = TRIGGER_OF.get(kind)
    if trigger is None or not getattr(result, "ok", False):
        return None
    return trigger


def build_machine(graph: bool = False, model: GateModel | None = None) -> tuple[HierarchicalMachine, GateModel]:
    """Declare ``TRANSITIONS`` with ``transitions``; returns (machine, model)."""
    model = model if model is not None else GateModel()
    cls = _nested_classes(graph)
    kwargs = machine_kwargs()
    if graph:
        kwargs.update(MachineKwargs(graph_engine="graphviz", title="envreplica serving gate", show_conditions=False))
    machine = cls(model=model, **kwargs)
    return machine, model


class MachineGate:
    """Drives a gate through the declared ``transitions`` machine (tests, simulator)."""

    def __init__(self) -> None:
        self.machine, self.model = build_machine()

    @property
    def gate(self) -> Gate:
        return Gate(self.model.state)

    def set(self, gate: Gate) -> None:
        self.machine.set_state(gate.value, model=self.model)

    def fire(self, trigger: Trigger, gate: Gate) -> Gate:
        self.set(gate)
        getattr(self.model, trigger.value)()
        return self.gate
