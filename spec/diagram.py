"""The gate machine drawn from its declared table, optionally with a run's path on it.

Models: a picture of ``spec.gate.TRANSITIONS``: ``closed`` as a cluster with
its children ``idle`` and ``staging``, one edge per declared (trigger, source,
destination), parallel triggers merged into one labelled edge. Given a trace
(an ITF file from ``envreplica check``), the gate states it visits and the
edges it takes are drawn bold red, each taken edge labelled with its step
numbers.

Leaves out on purpose: guards (the table has none; refusals fire nothing).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Optional

import graphviz

from envreplica.spec.gate import TRANSITIONS, Gate, GateEdge, Trigger

HIGHLIGHT = "#d62728"

#: The action kinds (``mbt::actionTaken``) that fire each trigger.
_TRIGGER_OF_ACTION = {"begin": Trigger.BEGIN, "complete": Trigger.COMPLETE,
                      "close_gate": Trigger.CLOSE_GATE, "restart": Trigger.RESTART}


def gate_path(trace: dict) -> list[tuple[int, GateEdge]]:
    """The declared edges a trace takes: (step index, edge) for each gate-firing step."""
    states = trace.get("states", [])
    taken = []
    for i in range(1, len(states)):
        action = states[i].get("mbt::actionTaken")
        trigger = _TRIGGER_OF_ACTION.get(action)
        result = states[i].get("#meta", {}).get("result") or {}
        if action == "crash_after" and isinstance(result, dict) and "crashedAfterCommit" in result:
            trigger = Trigger.RESTART  # the process died after a commit, then restarted: the gate closes
        if trigger is None or result.get("ok") is False or "error" in result or "type" in result:
            continue
        edge = GateEdge(trigger, Gate(states[i - 1]["gate"]), Gate(states[i]["gate"]))
        if edge in TRANSITIONS:
            taken.append((i, edge))
    return taken


def _node(gate: Gate) -> str:
    return gate.value.replace(".", "_")


def build(trace: Optional[dict] = None) -> graphviz.Digraph:
    """The diagram as a ``graphviz.Digraph`` (its ``.source`` needs no ``dot``)."""
    taken = gate_path(trace) if trace else []
    visited = {Gate(s["gate"]) for s in trace.get("states", [])} if trace else set()
    steps_by_edge = defaultdict(list)
    for i, edge in taken:
        steps_by_edge[(edge.source, edge.dest)].append((i, edge.trigger))
    g = graphviz.Digraph("gate", graph_attr={"rankdir": "LR", "label": "envreplica serving gate"
                                             + (" (trace path in red)" if trace else ""),
                                             "labelloc": "t", "fontname": "Helvetica"},
                         node_attr={"shape": "box", "style": "rounded,filled", "fillcolor": "white",
                                    "fontname": "Helvetica"},
                         edge_attr={"fontname": "Helvetica", "fontsize": "10"})

    def add_node(graph, gate: Gate, label: str) -> None:
        attrs = {"color": HIGHLIGHT, "penwidth": "2.5"} if gate in visited else {}
        if trace and Gate(trace["states"][-1]["gate"]) is gate:
            attrs["fillcolor"] = "#fde0dd"
        graph.node(_node(gate), label, **attrs)

    g.node("start", "", shape="point")
    add_node(g, Gate.INACTIVE, "inactive")
    with g.subgraph(name="cluster_closed") as closed:
        closed.attr(label="closed", style="rounded", color="gray40")
        add_node(closed, Gate.IDLE, "idle")
        add_node(closed, Gate.STAGING, "staging")
    add_node(g, Gate.OPEN, "open")
    g.edge("start", _node(Gate.INACTIVE))
    merged = defaultdict(list)
    for edge in TRANSITIONS:
        merged[(edge.source, edge.dest)].append(edge.trigger.value)
    for (source, dest), triggers in merged.items():
        label = " / ".join(triggers)
        attrs = {}
        if (source, dest) in steps_by_edge:
            steps = ", ".join(f"#{i}" for i, _ in steps_by_edge[(source, dest)])
            label += f"\n[{steps}]"
            attrs = {"color": HIGHLIGHT, "fontcolor": HIGHLIGHT, "penwidth": "2.5"}
        g.edge(_node(source), _node(dest), label=label, **attrs)
    return g


def render(fmt: str = "svg", trace_path: Optional[Path] = None) -> bytes:
    """The diagram in ``fmt`` (``dot`` needs no Graphviz binary; ``svg``/``png`` do)."""
    trace = json.loads(Path(trace_path).read_text()) if trace_path else None
    graph = build(trace)
    if fmt == "dot":
        return graph.source.encode()
    return graph.pipe(format=fmt)
