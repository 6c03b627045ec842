"""The simulator, and the gate engines: the transitions machine and the compiled table agree on real walks."""

from __future__ import annotations

import pytest

from envreplica.checker.simulate import simulate
from envreplica.cli.main import main
from envreplica.model.presets import suite
from envreplica.model.state import GateEngine, Variant
from envreplica.spec.gate import TRANSITIONS


@pytest.mark.parametrize("variant", [Variant.FIXED, Variant.SEED], ids=lambda v: v.value)
def test_machine_and_table_move_the_gate_identically(variant):
    """The model driven by the declared transitions machine visits exactly the states it visits with the table."""
    for bounds in suite("default", variant):
        by_machine, by_table = [], []
        simulate(bounds, walks=25, depth=30, seed=7, engine=GateEngine.MACHINE, record=by_machine)
        simulate(bounds, walks=25, depth=30, seed=7, engine=GateEngine.TABLE, record=by_table)
        assert by_machine == by_table
        assert len(by_machine) == 25 * 30


def test_simulation_reaches_gate_edges_and_holds_properties():
    edges = set()
    for bounds in suite("default", Variant.FIXED):
        sim = simulate(bounds, walks=40, depth=40, seed=3)
        assert sim.violations == {}
        edges |= {e for e, n in sim.coverage.edges.items() if n}
    assert edges <= set(TRANSITIONS)
    assert len(edges) >= 10


def test_simulate_command(tmp_path):
    assert main(["simulate", "--bounds", "tiny", "--walks", "5", "--depth", "10", "--out", str(tmp_path)]) == 0
