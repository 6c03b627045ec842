"""The gate diagram of a trace as inline SVG, each edge and node findable by the page's script.

Models: ``spec.diagram.build(trace)`` drawn to SVG (``spec.diagram.render``
when it offers the renderer chain, else ``graphviz``'s ``dot``), then
post-processed: the XML prolog dropped, every ``id`` prefixed (several
diagrams share a page), each ``<g class="edge">`` given
``data-edge="SRC->DST"`` and each ``<g class="node">`` ``data-node="NAME"``
from their ``<title>`` (graphviz writes one per element; ``edge_id`` gives the
same text for a step's edge).

Leaves out on purpose: drawing without a renderer. Then ``svg`` is None,
``note`` says why, and the page shows the DOT source instead.
"""

from __future__ import annotations

import html
import re
import subprocess
from dataclasses import dataclass
from typing import Optional

_PROLOG = re.compile(r"<\?xml[^>]*\?>|<!DOCTYPE[^>]*>|<!--.*?-->", re.S)
_GROUP = re.compile(r'<g id="([^"]+)" class="(edge|node)">\s*<title>(.*?)</title>', re.S)
_ID = re.compile(r'\bid="([^"]+)"')


@dataclass
class Diagram:
    dot: str  # the DOT source (always known: it needs no renderer)
    svg: Optional[str]  # inline SVG, or None when nothing could render it
    note: str = ""  # why there is no SVG
    caption: str = ""  # what the picture shows (empty: the gate machine's own caption)


def node_name(gate: str) -> str:
    """A gate's node name in ``spec.diagram`` (``closed.staging`` -> ``closed_staging``)."""
    return gate.replace(".", "_")


def edge_id(source: str, dest: str) -> str:
    """The ``data-edge`` of the edge from gate ``source`` to gate ``dest``."""
    return f"{node_name(source)}->{node_name(dest)}"


def _render(graph) -> bytes:
    """SVG bytes through ``spec.diagram.render`` when it has the renderer chain; RuntimeError when none can."""
    from envreplica.spec import diagram

    unavailable = getattr(diagram, "RendererUnavailable", None)
    if unavailable is not None:
        try:
            return diagram.render(graph, fmt="svg")
        except unavailable as error:
            raise RuntimeError(str(error) or "no renderer available") from None
        except TypeError:  # another signature than expected: draw it ourselves
            pass
    import graphviz

    try:
        return graphviz.Source(graph.source).pipe(format="svg")
    except (graphviz.ExecutableNotFound, subprocess.CalledProcessError, OSError, RuntimeError) as error:
        raise RuntimeError(f"{type(error).__name__}: {error}".splitlines()[0]) from None


def postprocess(svg: str, prefix: str) -> str:
    """``svg`` made inline: no prolog, ids under ``prefix``, ``data-edge`` / ``data-node`` on each group."""
    svg = _PROLOG.sub("", svg).strip()
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg

    def group(m: re.Match) -> str:
        title = html.unescape(m.group(3))
        attr = "data-edge" if m.group(2) == "edge" else "data-node"
        return (f'<g id="{m.group(1)}" class="{m.group(2)}" {attr}="{html.escape(title, quote=True)}">'
                f"<title>{m.group(3)}</title>")

    svg = _GROUP.sub(group, svg)
    return _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)


def draw(trace: Optional[dict], prefix: str = "gate") -> Diagram:
    """The gate machine with ``trace``'s path (an ITF-shaped dict with ``states``), as inline SVG if possible."""
    from envreplica.spec.diagram import build

    graph = build(trace)
    try:
        data = _render(graph)
    except RuntimeError as error:
        return Diagram(graph.source, None, f"no Graphviz renderer available ({error}); the DOT source follows")
    return Diagram(graph.source, postprocess(data.decode("utf-8"), prefix))
