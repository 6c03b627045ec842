"""The house rule (``docs/architecture.md``): imports run down the layers, and no modules import each other round a
cycle; the picture in the docs is the graph as it is.

The graph is read from the sources (``tests/architecture.py``: ``ast`` over every module, function-level imports
included). The checks are proved able to fail on small graphs made for it: an arrow up, an arrow sideways, a
cycle of modules, a cycle of layers, a function-level import, and a ``__main__`` block left out.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import architecture as A
import pytest


@pytest.fixture(scope="module")
def graph() -> list[A.Import]:
    return A.package_graph()


def _said(problems: list[A.Problem]) -> str:
    return "\n".join(str(p) for p in problems)


def test_every_import_runs_down_the_layers(graph):
    problems = A.against_the_grain(graph)
    assert not problems, f"{len(problems)} imports against the grain (layer order {dict(A.RANKS)}):\n" \
                         f"{_said(problems)}"


def test_no_modules_and_no_layers_import_each_other_round_a_cycle(graph):
    problems = A.cycles(graph)
    assert not problems, f"{len(problems)} cycles:\n{_said(problems)}"


def test_the_graph_is_read_from_every_module_function_level_imports_included(graph):
    """Counts that would fall if the reader missed a folder or the imports inside functions."""
    known = A.modules(A.package_dirs())
    assert {m.split(".")[1] for m in known} == set(A.RANKS)  # every folder is in a layer
    sources = {i.source for i in graph}
    assert len(sources) > 0.8 * len(known)
    # cli/main.py imports most of its commands inside their functions: those arrows are there
    assert any(i.source == "envreplica.cli.main" and i.target == "envreplica.cli.migrate" for i in graph)
    lines = Path(A.ROOT, "cli", "main.py").read_text(encoding="utf-8").splitlines()
    indented = [i for i in graph if i.path == "cli/main.py" and lines[i.line - 1].startswith(" ")]
    assert len(indented) > 10


def test_every_layer_module_override_names_a_module(graph):
    known = A.modules(A.package_dirs())
    assert set(A.LAYER_OF_MODULE) <= set(known)
    assert set(A.LAYER_OF_MODULE.values()) <= set(A.RANKS)


# ---------------------------------------------------------------------------
# The checks can fail


def _arrow(source: str, target: str, line: int = 1) -> A.Import:
    return A.Import(f"envreplica.{source}", f"envreplica.{target}", f"{source.replace('.', '/')}.py", line)


def test_an_arrow_up_or_sideways_is_reported_with_its_file_and_line():
    arrows = [_arrow("spec.wire", "model.state", 12), _arrow("model.state", "impl.rows", 7),
              _arrow("checker.bfs", "model.state", 3), _arrow("cli.main", "spec.wire", 9)]
    problems = A.against_the_grain(arrows)
    assert [(p.imports[0].where(), p.sentence.rsplit(": ", 1)[1]) for p in problems] == \
        [("spec/wire.py:12", "up"), ("model/state.py:7", "sideways")]
    assert "spec/wire.py:12: envreplica.spec.wire imports envreplica.model.state" in _said(problems)


def test_a_folder_in_no_layer_is_reported():
    problems = A.against_the_grain([_arrow("attic.old", "spec.wire", 4)])
    assert len(problems) == 1 and "attic is in no layer" in str(problems[0])


def test_a_cycle_of_modules_is_reported_with_every_arrow_in_it():
    arrows = [_arrow("impl.writer", "impl.fence_probe", 378), _arrow("impl.fence_probe", "impl.writer", 126),
              _arrow("impl.paired", "impl.writer", 89), _arrow("impl.writer", "impl.schema", 5)]
    problems = A.cycles(arrows)
    assert len(problems) == 1 and problems[0].kind == "module cycle"
    assert problems[0].sentence == "envreplica.impl.fence_probe <-> envreplica.impl.writer"
    assert {i.where() for i in problems[0].imports} == {"impl/writer.py:378", "impl/fence_probe.py:126"}


def test_a_longer_cycle_is_one_component():
    arrows = [_arrow("conformance.a", "conformance.b"), _arrow("conformance.b", "conformance.c"),
              _arrow("conformance.c", "conformance.a"), _arrow("conformance.c", "conformance.d")]
    (problem,) = A.cycles(arrows)
    assert problem.sentence.count("<->") == 2 and "conformance.d" not in problem.sentence


def test_a_cycle_of_layers_is_reported_when_no_modules_are_in_a_cycle():
    arrows = [_arrow("cli.main", "conformance.adapter"), _arrow("conformance.adapter", "cli.errors")]
    problems = A.check(arrows)
    kinds = sorted(p.kind for p in problems)
    assert kinds == ["against the grain", "layer cycle"], _said(problems)
    layer_cycle = next(p for p in problems if p.kind == "layer cycle")
    assert layer_cycle.sentence == "cli <-> conformance"


def test_a_function_level_import_is_an_arrow_and_a_main_block_is_not(tmp_path):
    """A synthetic package read the way the real one is: the import inside a function closes a cycle and is
    reported with its line; the one under ``if __name__ == "__main__":`` is no arrow."""
    pkg = tmp_path / "spec"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(textwrap.dedent("""\
        from envreplica.spec import b


        def late():
            from envreplica.spec.c import thing  # line 5
            return thing


        if __name__ == "__main__":
            from envreplica.cli import main  # the program's arrow, not the module's
        """))
    (pkg / "b.py").write_text("X = 1\n")
    (pkg / "c.py").write_text("from . import a\nthing = a\n")
    known = A.modules({"envreplica.spec": pkg, "envreplica.cli": tmp_path / "none"})
    arrows = [i for m, p in known.items() for i in A.imports_of(m, p, known, shown=lambda p: p.name)]
    assert sorted((i.source, i.target, i.path, i.line) for i in arrows) == [
        ("envreplica.spec.a", "envreplica.spec.b", "a.py", 1),
        ("envreplica.spec.a", "envreplica.spec.c", "a.py", 5),
        ("envreplica.spec.c", "envreplica.spec.a", "c.py", 1)]
    (problem,) = A.check(arrows)
    assert problem.kind == "module cycle" and {i.where() for i in problem.imports} == {"a.py:5", "c.py:1"}


# ---------------------------------------------------------------------------
# The picture


def _titles(svg: str) -> set[str]:
    return {re.sub(r"&#45;|&#x2d;", "-", t).replace("&gt;", ">") for t in re.findall(r"<title>(.*?)</title>", svg)}


def test_the_committed_picture_is_the_graph_as_it_is(graph):
    """docs/architecture.svg is drawn again and compared: byte for byte when graphviz-pure draws it (as it drew
    the committed one), else box for box and arrow for arrow (another renderer lays it out differently)."""
    committed = A.SVG.read_text(encoding="utf-8")
    svg, renderer = A.render_svg(A.dot_source(graph))
    redraw = "the picture is out of date: run `.venv/bin/python tests/architecture.py` and commit docs/architecture.svg"
    assert _titles(svg.decode("utf-8")) == _titles(committed), redraw
    if renderer == "graphviz-pure":
        assert svg.decode("utf-8") == committed, redraw


def test_the_picture_has_a_box_per_folder_and_protocol_subfolder_and_an_arrow_per_pair(graph):
    source = A.dot_source(graph)
    for box in ("spec", "model", "impl", "checker", "conformance", "conformance.migration", "conformance.lock",
                "report", "reliability", "cli"):
        assert f'"{box}";' in source, box
    assert '"cli" -> "conformance"' in source
    assert '"conformance" -> "cli"' not in source


# ---------------------------------------------------------------------------
# conformance/lockstep/ -> conformance/replica/: the old path, one release


def test_the_old_lockstep_path_warns_naming_the_new_one_and_is_the_same_modules():
    """``envreplica.conformance.lockstep`` (and its modules) still import, with a ``DeprecationWarning`` naming
    ``envreplica.conformance.replica``; each is the new module itself, so a patch of one is a patch of the other.
    In a fresh interpreter: the warning fires once per process, at the first import."""
    import subprocess
    import sys

    probe = textwrap.dedent("""\
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import envreplica.conformance.lockstep as old
            from envreplica.conformance.lockstep import run as old_run
            from envreplica.conformance.lockstep.machine import LockstepMachine as OldMachine
        import envreplica.conformance.replica as new
        import envreplica.conformance.replica.run as new_run
        from envreplica.conformance.replica.machine import LockstepMachine
        print(json.dumps({
            "warnings": [(w.category.__name__, str(w.message)) for w in caught],
            "same": [old_run is new_run, OldMachine is LockstepMachine, old.run_lockstep is new.run_lockstep,
                     old._scratch_dir is new._scratch_dir, sorted(old.__all__) == sorted(new.__all__)],
        }))
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "ENVREPLICA_PURE_PYTHON": "1"})
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["same"] == [True] * 5
    deprecations = [m for kind, m in seen["warnings"] if kind == "DeprecationWarning"]
    assert len(deprecations) == 1 and "import envreplica.conformance.replica instead" in deprecations[0], seen


def test_nothing_in_the_package_imports_the_old_lockstep_path(graph):
    users = [i for i in graph if i.target.startswith("envreplica.conformance.lockstep")]
    assert not users, "\n".join(f"{i.where()}: {i.source} imports {i.target}" for i in users)
