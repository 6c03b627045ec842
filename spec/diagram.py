"""The gate machine drawn from its declared table, optionally with a run's path on it.

Models: a picture of ``spec.gate.TRANSITIONS``: ``closed`` as a cluster with
its children ``idle`` and ``staging``, one edge per declared (trigger, source,
destination), parallel triggers merged into one labelled edge. Given a trace
(an ITF file from ``envreplica check``), the gate states it visits and the
edges it takes are drawn bold red, each taken edge labelled with its step
numbers.

Leaves out on purpose: guards (the table has none; refusals fire nothing).

Rendering (``render``): through the ``graphviz`` package, with the first
renderer found of: ``graphviz-pure`` (a pip-installed, self-contained
Graphviz 16.1.0 port, a project dependency), then a system ``dot`` on PATH
(Debian's ``graphviz``); ``ENVREPLICA_GRAPHVIZ=dot`` (or ``graphviz-pure``, or
both comma-separated) chooses which and in what order. When neither can draw the format, ``render`` raises
``RendererUnavailable`` (one line: what was tried, what to install); the DOT
source (``build().source``) never needs a renderer. docs/diagram-renderers.md
compares the candidates.
"""

from __future__ import annotations

import json
import os
import shutil
import sysconfig
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import graphviz
import graphviz.backend.dot_command as _dot_command

from envreplica.spec.gate import TRANSITIONS, Gate, GateEdge, Trigger

HIGHLIGHT = "#d62728"

#: The action kinds (``mbt::actionTaken``) that fire each trigger.
_TRIGGER_OF_ACTION = {"begin": Trigger.BEGIN, "complete": Trigger.COMPLETE,
                      "close_gate": Trigger.CLOSE_GATE, "restart": Trigger.RESTART}


def gate_path(trace: dict[str, Any]) -> list[tuple[int, GateEdge]]:
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


def build(trace: Optional[dict[str, Any]] = None) -> graphviz.Digraph:
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

    def add_node(graph: graphviz.Digraph, gate: Gate, label: str) -> None:
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


# ---------------------------------------------------------------------------
# Rendering: graphviz-pure, else a system dot, else RendererUnavailable
# ---------------------------------------------------------------------------

#: The pip-installed renderer: a dependency of this package where it has wheels.
PIP_RENDERER = "graphviz-pure"
#: What to install when nothing renders (ends the message of ``RendererUnavailable``).
INSTALL_HINT = "install one: pip install graphviz-pure (or apt-get install graphviz)"
#: Which renderers to try, in order (comma-separated names: graphviz-pure, dot); unset: both.
ENV_RENDERERS = "ENVREPLICA_GRAPHVIZ"
#: graphviz-pure 0.2.2's output formats (its ``-T?``); any other (pdf, ps, ...) needs a system ``dot``.
PURE_FORMATS = frozenset({"canon", "dot", "dot_json", "gv", "jpe", "jpeg", "jpg", "json", "json0", "plain",
                          "plain-ext", "png", "svg", "xdot", "xdot1.2", "xdot1.4", "xdot_json"})


class RendererUnavailable(RuntimeError):
    """No Graphviz renderer here can draw the asked format.

    Its message is one line: what was tried and what to install.
    """


@dataclass(frozen=True)
class Renderer:
    """A program with ``dot``'s command line that the ``graphviz`` package runs."""

    name: str  # "graphviz-pure" or "dot"
    path: str  # the executable
    formats: Optional[frozenset[str]] = None  # what it can write; None: whatever it supports

    def __str__(self) -> str:
        return f"{self.name} ({self.path})"


#: The renderer of the last ``render`` that drew something (None before, and after a ``dot``-format call).
last_renderer: Optional[Renderer] = None

# graphviz runs ``graphviz.backend.dot_command.DOT_BINARY``; render swaps it under this lock.
_lock = threading.Lock()


def _scripts_dirs() -> list[str]:
    """Where pip puts console programs for this interpreter: its scheme's, then the user scheme's."""
    dirs = [sysconfig.get_path("scripts")]
    try:
        dirs.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError:  # pragma: no cover - a platform without a user scheme
        pass
    return [d for d in dirs if d]


def _pip_renderer_path() -> Optional[str]:
    """graphviz-pure's program: beside this interpreter (a venv's bin, activated or not), else on PATH."""
    for folder in _scripts_dirs():
        found = shutil.which(PIP_RENDERER, path=folder)
        if found:
            return found
    return shutil.which(PIP_RENDERER)


def _wanted() -> list[str]:
    """The renderers to look for, in order: ``ENVREPLICA_GRAPHVIZ`` (comma-separated) or graphviz-pure, dot."""
    names = os.environ.get(ENV_RENDERERS)
    if names is None:
        return [PIP_RENDERER, "dot"]
    return [n for n in (n.strip() for n in names.split(",")) if n in (PIP_RENDERER, "dot")]


def renderers() -> list[Renderer]:
    """The renderers found here, in the order ``render`` tries them."""
    found = []
    for name in _wanted():
        path = _pip_renderer_path() if name == PIP_RENDERER else shutil.which("dot")
        if path:
            found.append(Renderer(name, path, PURE_FORMATS if name == PIP_RENDERER else None))
    return found


def _pipe(renderer: Renderer, text: str, engine: str, fmt: str) -> bytes:
    with _lock:
        saved = _dot_command.DOT_BINARY
        _dot_command.DOT_BINARY = Path(renderer.path)
        try:
            drawn: bytes = graphviz.pipe(engine, fmt, text.encode("utf-8"), quiet=True)
            return drawn
        finally:
            _dot_command.DOT_BINARY = saved


def render(source: Union[str, graphviz.Digraph], fmt: str = "svg") -> bytes:
    """``source`` (DOT text, or a ``graphviz`` Digraph/Graph/Source) drawn in ``fmt``.

    Tries graphviz-pure, then a system ``dot`` (``renderers()``); records the one
    that drew it in ``last_renderer``. ``fmt="dot"`` returns the source itself
    and needs no renderer. Raises ``RendererUnavailable`` when no renderer here
    can write ``fmt``, ``graphviz.CalledProcessError`` when every renderer that
    could refused the source (the first one's error), ``ValueError`` for a
    format Graphviz does not know.
    The gate diagram itself: ``gate_diagram(fmt, trace_path)``.
    """
    global last_renderer
    if isinstance(source, str):
        text, engine = source, "dot"
    else:
        text, engine = source.source, getattr(source, "engine", None) or "dot"
    if fmt == "dot":
        last_renderer = None
        return text.encode("utf-8")
    tried: list[str] = []
    failure: Optional[graphviz.CalledProcessError] = None
    found = renderers()
    for renderer in found:
        if renderer.formats is not None and fmt not in renderer.formats:
            tried.append(f"{renderer.name} cannot write {fmt}")
            continue
        try:
            data = _pipe(renderer, text, engine, fmt)
        except (graphviz.ExecutableNotFound, OSError) as error:
            tried.append(f"{renderer} would not run ({error.__class__.__name__})")
            continue
        except graphviz.CalledProcessError as error:
            failure = failure or error
            tried.append(f"{renderer.name} failed")
            continue
        last_renderer = renderer
        return data
    if failure is not None:
        raise failure
    names, wanted = {r.name for r in found}, _wanted()
    for name, missing in ((PIP_RENDERER, f"{PIP_RENDERER} is not installed"), ("dot", "no dot on PATH")):
        if name not in wanted:
            tried.append(f"{name} left out by {ENV_RENDERERS}={os.environ.get(ENV_RENDERERS, '')}")
        elif name not in names:
            tried.append(missing)
    raise RendererUnavailable(f"no Graphviz renderer for {fmt} ({', '.join(tried)}): {INSTALL_HINT}")


def render_svg(source: Union[str, graphviz.Digraph]) -> Optional[str]:
    """``source`` as SVG text, or None when no renderer is available (``render``'s other errors pass)."""
    try:
        return render(source, "svg").decode("utf-8")
    except RendererUnavailable:
        return None


def gate_diagram(fmt: str = "svg", trace_path: Optional[Path] = None) -> bytes:
    """The gate diagram (a trace's path on it, if given) in ``fmt``; ``dot`` is its source, needing no renderer."""
    trace = json.loads(Path(trace_path).read_text()) if trace_path else None
    return render(build(trace), fmt)
