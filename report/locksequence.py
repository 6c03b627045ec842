"""The projection lock's sequence picture: a lock trace drawn as lifelines, one per process, beside the lock path.

Models: what a reviewer reads first in a lock counterexample: who called what, when, and who was inside the
operation. Each process is a lifeline (``p0``, ``p1``, ...), the lock's directory a column of its own (``L``);
each step is a row: a process's call is an arrow from its lifeline to ``L`` labelled with the call and what it
found (the trace's own result words), a kill a red cross on the lifeline, the world's moves (a reap, a pid
reused) a note on ``L``'s side. A process inside the operation is drawn as a thick bar on its lifeline, so two
bars side by side are ``mutual_exclusion`` broken; the step where the trace's property breaks is marked red.
The picture is plain SVG written here (no renderer needed), its text the Mermaid ``sequenceDiagram`` of the same
steps (``Diagram.dot``: shown when there is no SVG, and copyable).

Leaves out on purpose: the state's tables (the page's steps show them), and layout beyond a grid (one row a step).
"""

from __future__ import annotations

import html
from typing import Any, Optional

from envreplica.report.gatesvg import Diagram

_COL = 70  # between lifelines
_ROW = 26  # between steps
_TOP = 40  # above the first step
_LEFT = 30


def _inside(state: dict) -> set[int]:
    return {int(p["slot"]) for p in state.get("procs") or []
            if isinstance(p, dict) and p.get("inside") and isinstance(p.get("slot"), int)}


def draw(doc: dict, breaks_at: Optional[int] = None, prefix: str = "seq") -> Diagram:
    """The sequence picture of an ITF lock trace (``checker.lock.write_trace``)."""
    states = doc.get("states") or []
    procs = [p.get("slot") for p in (states[0].get("procs") or [])] if states else []
    columns = {slot: _LEFT + i * _COL for i, slot in enumerate(procs)}
    lock_x = _LEFT + len(procs) * _COL + 40
    height = _TOP + max(1, len(states)) * _ROW + 20
    width = lock_x + 360
    parts: list[str] = []
    mermaid = ["sequenceDiagram", *(f"    participant p{s}" for s in procs), "    participant L as lock path"]
    for slot, x in columns.items():
        parts.append(f'<text x="{x}" y="20" text-anchor="middle" class="head">p{slot}</text>')
        parts.append(f'<line x1="{x}" y1="28" x2="{x}" y2="{height - 10}" class="life"/>')
    parts.append(f'<text x="{lock_x}" y="20" text-anchor="middle" class="head">L</text>')
    parts.append(f'<line x1="{lock_x}" y1="28" x2="{lock_x}" y2="{height - 10}" class="life"/>')
    for i, state in enumerate(states):
        if i == 0:
            continue
        y = _TOP + i * _ROW
        meta = state.get("#meta") if isinstance(state.get("#meta"), dict) else {}
        found = meta.get("action")
        action: dict[str, Any] = found if isinstance(found, dict) else {}
        kind, slot = action.get("kind", "?"), action.get("slot")
        result = str(meta.get("result", ""))
        what = str(meta.get("step") or kind)
        red = ' class="breaks"' if i == breaks_at else ""
        for inside in _inside(state):
            if inside in columns:
                parts.append(f'<rect x="{columns[inside] - 4}" y="{y - _ROW + 6}" width="8" height="{_ROW}" '
                             f'class="inside"/>')
        label = html.escape(f"#{i} {what.split(' ', 1)[-1] if kind == 'step' else what}: {result}")
        if kind == "crash" and slot in columns:
            x = columns[slot]
            parts.append(f'<text x="{x}" y="{y + 5}" text-anchor="middle" class="kill">✕</text>')
            parts.append(f'<text x="{x + 10}" y="{y + 4}"{red}>{label}</text>')
            mermaid.append(f"    Note over p{slot}: #{i} kill -9")
        elif kind in ("step", "leave", "start") and slot in columns:
            x = columns[slot]
            if kind == "step":
                parts.append(f'<line x1="{x}" y1="{y}" x2="{lock_x}" y2="{y}" class="call"/>')
                parts.append(f'<text x="{lock_x + 8}" y="{y + 4}"{red}>{label}</text>')
                mermaid.append(f"    p{slot}->>L: #{i} {what}: {result}")
            else:
                parts.append(f'<circle cx="{x}" cy="{y}" r="4" class="dot"/>')
                parts.append(f'<text x="{x + 10}" y="{y + 4}"{red}>{label}</text>')
                mermaid.append(f"    Note over p{slot}: #{i} {what}")
        else:
            parts.append(f'<text x="{lock_x + 8}" y="{y + 4}" class="world">{label}</text>')
            mermaid.append(f"    Note over L: #{i} {what}")
    style = ("<style>.head{font:bold 13px sans-serif}.life{stroke:#999;stroke-dasharray:4 3}"
             ".call{stroke:#333;marker-end:url(#" + prefix + "-arrow)}text{font:12px sans-serif}"
             ".inside{fill:#2a7;opacity:.8}.kill{fill:#c00;font:bold 16px sans-serif}.dot{fill:#333}"
             ".world{fill:#666;font-style:italic}.breaks{fill:#c00;font-weight:bold}</style>")
    marker = (f'<defs><marker id="{prefix}-arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" '
              f'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="sequence of the trace">{style}{marker}'
           + "".join(parts) + "</svg>")
    return Diagram("\n".join(mermaid), svg)
