"""The gate diagram drawn with no system package: graphviz-pure, a system dot, or one line and the DOT source.

``spec.diagram.render`` tries the pip-installed graphviz-pure, then a system
``dot``; with neither, ``RendererUnavailable`` and ``envreplica diagram``
ends in one line on stderr, the DOT source, exit 2 (never a traceback).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import graphviz
import pytest

from envreplica.cli.main import main
from envreplica.spec import diagram
from envreplica.spec.diagram import RendererUnavailable, build, render, render_svg
from envreplica.spec.gate import Gate

SVG = "{http://www.w3.org/2000/svg}"
# The machines graphviz-pure has wheels for (pyproject's marker): there it is a dependency, not optional.
PURE_EXPECTED = platform.machine() in ("x86_64", "aarch64", "arm64", "AMD64")
needs_pure = pytest.mark.skipif(not PURE_EXPECTED and diagram._pip_renderer_path() is None,
                                reason="graphviz-pure has no wheel for this machine")


@pytest.fixture(autouse=True)
def default_renderers(monkeypatch):
    monkeypatch.delenv(diagram.ENV_RENDERERS, raising=False)


@pytest.fixture
def no_dot_on_path(monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("dot") is None


@pytest.fixture
def no_renderer(monkeypatch, no_dot_on_path):
    monkeypatch.setattr(diagram, "_pip_renderer_path", lambda: None)
    assert diagram.renderers() == []


def _gate_svg(svg: bytes) -> tuple[set[str], set[str], set[str]]:
    """(node titles, edge titles, cluster titles) of a rendered SVG."""
    root = ET.fromstring(svg)
    kinds: dict[str, set[str]] = {"node": set(), "edge": set(), "cluster": set()}
    for g in root.iter(SVG + "g"):
        if g.get("class") in kinds:
            kinds[g.get("class")].add(g.find(SVG + "title").text)
    return kinds["node"], kinds["edge"], kinds["cluster"]


def _assert_whole_gate(svg: bytes) -> None:
    nodes, edges, clusters = _gate_svg(svg)
    assert nodes == {"start"} | {diagram._node(gate) for gate in Gate}
    assert clusters == {"cluster_closed"}
    assert len(edges) == 10  # start -> inactive, and the 13 declared edges merged into 9
    texts = {t.text for t in ET.fromstring(svg).iter(SVG + "text")}
    assert {"inactive", "idle", "staging", "open", "closed"} <= texts


@needs_pure
def test_graphviz_pure_draws_every_gate_state():
    assert diagram.renderers()[0].name == "graphviz-pure"
    svg = render(build(), "svg")
    assert diagram.last_renderer.name == "graphviz-pure"
    assert b"(graphviz-pure)" in svg  # its generator comment
    _assert_whole_gate(svg)
    png = render(build().source, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and diagram.last_renderer.name == "graphviz-pure"


@needs_pure
def test_graphviz_pure_needs_no_dot_on_path(no_dot_on_path):
    assert [r.name for r in diagram.renderers()] == ["graphviz-pure"]
    _assert_whole_gate(render(build().source))
    assert diagram.last_renderer.name == "graphviz-pure"
    assert render_svg(build()).startswith("<?xml")


@pytest.mark.skipif(shutil.which("dot") is None, reason="no system dot")
def test_system_dot_draws_when_graphviz_pure_is_absent_or_cannot(monkeypatch):
    if diagram._pip_renderer_path():
        render(build(), "pdf")  # graphviz-pure writes no pdf: the system dot does
        assert diagram.last_renderer.name == "dot"
    monkeypatch.setattr(diagram, "_pip_renderer_path", lambda: None)
    _assert_whole_gate(render(build(), "svg"))
    assert diagram.last_renderer.name == "dot"


def test_nothing_to_render_with_is_one_line(no_renderer):
    with pytest.raises(RendererUnavailable) as caught:
        render(build(), "svg")
    message = str(caught.value)
    assert isinstance(caught.value, RuntimeError) and "\n" not in message
    for fragment in ("graphviz-pure is not installed", "no dot on PATH", "pip install graphviz-pure"):
        assert fragment in message
    assert render_svg(build()) is None
    assert render(build(), "dot") == build().source.encode()  # the source needs no renderer


@needs_pure
def test_a_bad_source_is_a_graphviz_error_not_a_missing_renderer():
    with pytest.raises(graphviz.CalledProcessError):
        render("digraph { a -> }", "svg")


def test_cli_without_a_renderer_prints_one_line_and_the_dot_source(no_renderer, capsys, tmp_path):
    assert main(["diagram", "--format", "svg"]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("envreplica diagram: no Graphviz renderer for svg") and "DOT source follows" in err
    assert out == build().source

    picture = tmp_path / "docs" / "gate.png"
    assert main(["diagram", "--format", "png", "--output", str(picture)]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and str(picture.with_suffix(".dot")) in err
    assert out == "" and not picture.exists()
    assert picture.with_suffix(".dot").read_text() == build().source


def _envreplica(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if k not in ("ENVREPLICA_TRACEBACK", diagram.ENV_RENDERERS)}
    return subprocess.run([sys.executable, "-m", "envreplica.cli.main", *args], capture_output=True, text=True,
                          cwd=tmp_path, env={**clean, "PATH": str(empty), **env}, timeout=60)


@needs_pure
def test_cli_process_with_no_dot_on_path_draws_with_graphviz_pure(tmp_path):
    proc = _envreplica(tmp_path, "diagram", "--format", "svg", "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith(")") and "rendered with graphviz-pure" in proc.stderr
    _assert_whole_gate(proc.stdout.encode())


def test_cli_process_with_no_renderer_exits_2_with_one_line(tmp_path):
    # graphviz-pure left out (ENVREPLICA_GRAPHVIZ=dot) and no dot on PATH: nothing can draw
    proc = _envreplica(tmp_path, "diagram", "--format", "svg", ENVREPLICA_GRAPHVIZ="dot")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no Graphviz renderer for svg" in proc.stderr and "no dot on PATH" in proc.stderr
    assert proc.stdout == build().source
