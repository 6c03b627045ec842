"""The declared gate table, its compiled dict and the ``transitions`` machine agree."""

from __future__ import annotations

import itertools
import logging

import pytest
from transitions.core import MachineError

from envreplica.spec.gate import (
    GATE_NEXT,
    TRANSITIONS,
    Gate,
    GateEdge,
    GateModel,
    MachineGate,
    Trigger,
    build_machine,
    fire,
)

ALL_PAIRS = list(itertools.product(Trigger, Gate))
DECLARED = sorted(GATE_NEXT, key=lambda k: (k[0].value, k[1].value))
UNDECLARED = [p for p in ALL_PAIRS if p not in GATE_NEXT]


def _id(pair):
    return f"{pair[0].value}@{pair[1].value}"


# (a) --------------------------------------------------------------------------


@pytest.mark.parametrize("pair", DECLARED, ids=_id)
def test_machine_agrees_with_gate_next(pair):
    trigger, source = pair
    gate = MachineGate()
    assert gate.fire(trigger, source) is GATE_NEXT[pair]
    assert fire(trigger, source) is GATE_NEXT[pair]


def test_one_machine_reused_across_all_pairs():
    gate = MachineGate()
    for pair in DECLARED:
        assert gate.fire(*pair) is GATE_NEXT[pair]


# (b) --------------------------------------------------------------------------


@pytest.mark.parametrize("pair", UNDECLARED, ids=_id)
def test_undeclared_pairs_raise_in_the_machine(pair):
    trigger, source = pair
    gate = MachineGate()
    with pytest.raises(MachineError):
        gate.fire(trigger, source)
    assert gate.gate is source  # a refused trigger leaves the state alone


def test_table_shape():
    for trigger in (Trigger.BEGIN, Trigger.CLOSE_GATE, Trigger.RESTART):
        assert all((trigger, g) in GATE_NEXT for g in Gate), trigger
    assert [g for g in Gate if (Trigger.COMPLETE, g) in GATE_NEXT] == [Gate.STAGING]
    assert UNDECLARED == [(Trigger.COMPLETE, g) for g in Gate if g is not Gate.STAGING]
    assert len(GATE_NEXT) == len(TRANSITIONS) == 13  # no (trigger, source) declared twice


def test_table_reads_as_the_docstring_says():
    assert all(GATE_NEXT[(Trigger.BEGIN, g)] is Gate.STAGING for g in Gate)
    assert GATE_NEXT[(Trigger.COMPLETE, Gate.STAGING)] is Gate.OPEN
    for trigger in (Trigger.CLOSE_GATE, Trigger.RESTART):
        assert GATE_NEXT[(trigger, Gate.INACTIVE)] is Gate.INACTIVE
        for g in (Gate.IDLE, Gate.STAGING, Gate.OPEN):
            assert GATE_NEXT[(trigger, g)] is Gate.IDLE


# (c) --------------------------------------------------------------------------


def test_trigger_names_do_not_clash_with_the_model():
    names = {t.value for t in Trigger}
    assert not names & set(dir(GateModel)), "a trigger named like a GateModel attribute would not bind"
    assert not names & set(dir(GateModel()))


@pytest.mark.parametrize(
    "trigger, source, dest",
    [
        (Trigger.BEGIN, Gate.INACTIVE, Gate.STAGING),
        (Trigger.COMPLETE, Gate.STAGING, Gate.OPEN),
        (Trigger.CLOSE_GATE, Gate.OPEN, Gate.IDLE),
        (Trigger.RESTART, Gate.OPEN, Gate.IDLE),
    ],
    ids=lambda v: getattr(v, "value", v),
)
def test_each_trigger_is_bound_and_moves_the_state(trigger, source, dest):
    machine, model = build_machine()
    bound = getattr(model, trigger.value)
    assert callable(bound)
    machine.set_state(source.value, model=model)
    assert bound() is True
    assert model.state == dest.value


def test_each_trigger_is_bound_on_the_graph_machine_too():
    machine, model = build_machine(graph=True)
    for trigger in Trigger:
        machine.set_state(Gate.STAGING.value, model=model)
        getattr(model, trigger.value)()
        assert Gate(model.state) is GATE_NEXT[(trigger, Gate.STAGING)]


def test_a_clashing_trigger_name_is_silently_skipped(caplog):
    """Why (c) matters: the library skips binding a trigger the model already has."""

    class Clashing(GateModel):
        def close_gate(self):  # shadows the trigger
            return "not the machine"

    with caplog.at_level(logging.WARNING, logger="transitions"):
        machine, model = build_machine(model=Clashing())
    machine.set_state(Gate.OPEN.value, model=model)
    assert model.close_gate() == "not the machine"
    assert model.state == Gate.OPEN.value  # did not move
    model.trigger("close_gate")  # the event itself still works when fired by name
    assert model.state == Gate.IDLE.value


# (d) --------------------------------------------------------------------------


def test_machine_introspection_matches_transitions_exactly():
    machine, _ = build_machine()
    assert set(machine.events) == {t.value for t in Trigger}
    introspected = set()
    for name, event in machine.events.items():
        for source, transitions in event.transitions.items():
            assert len(transitions) == 1, (name, source)
            dests = {t.dest for t in transitions}
            for dest in dests:
                introspected.add(GateEdge(Trigger(name), Gate(source), Gate(dest)))
            assert event.transitions[source][0].dest == GATE_NEXT[(Trigger(name), Gate(source))].value
    assert introspected == set(TRANSITIONS)
    assert len(introspected) == len(TRANSITIONS)


def test_machine_states_are_the_gates():
    machine, model = build_machine()
    assert model.state == Gate.INACTIVE.value  # initial
    leaves = set()
    for name in machine.get_nested_state_names():
        state = machine.get_state(name)
        if not state.states:  # leaf
            leaves.add(name)
    assert leaves == {g.value for g in Gate}


def test_fire_on_an_undeclared_pair_is_a_model_bug():
    from envreplica.spec.domain import ModelBug

    for trigger, source in UNDECLARED:
        with pytest.raises(ModelBug, match="not declared"):
            fire(trigger, source)
