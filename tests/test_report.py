"""``envreplica report``: one self-contained HTML page per trace or run (fast tests, no browser).

The page is parsed with the standard library's ``html.parser`` into a small
tree, so the tests ask what a reader would: which steps are there, what a
step's diff marks, what the divergence shows on each side. The browser
tests (stepping, the current edge, the filter) are in
``tests/test_report_browser.py``.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from adapter_requests import BOOT, FlipsCommits, begin, page, put, rec, reset, with_ids
from envreplica.cli.main import main
from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.replica import replay_steps
from envreplica.conformance.replica.traces import write_trace
from envreplica.model.store import staged_envelope
from envreplica.report import SEED_FUNCTIONS, read
from envreplica.report.values import CAP
from envreplica.spec import properties as P

ROOT = Path(__file__).resolve().parent.parent
TRACES = sorted((ROOT / "docs" / "traces").glob("*.itf.json"))
#: The replica's saved counterexamples (the lock's, F7 to F14, are tests/test_lock_model.py's).
REPLICA_TRACES = [p for p in TRACES if json.loads(p.read_text())["#meta"].get("protocol", "replica") == "replica"]
F1 = ROOT / "docs" / "traces" / "F1-seed-cloud.itf.json"

# ---------------------------------------------------------------------------
# A small DOM
# ---------------------------------------------------------------------------

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent=None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list = []  # Node or str

    @property
    def classes(self) -> set:
        return set((self.attrs.get("class") or "").split())

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag: str = None, cls: str = None, **attrs) -> list:
        return [n for n in self.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def find(self, tag: str = None, cls: str = None, **attrs):
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}>"
        return found[0]


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.at = Node("#document", {})

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.at)
        self.at.children.append(node)
        if tag not in _VOID:
            self.at = node

    def handle_endtag(self, tag):
        at = self.at
        while at is not None and at.tag != tag:
            at = at.parent
        if at is not None and at.parent is not None:
            self.at = at.parent

    def handle_data(self, data):
        self.at.children.append(data)


def parse(text: str) -> Node:
    p = _Parser()
    p.feed(text)
    return p.root


def run_cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def report_of(path: Path, out: Path, capsys, *extra) -> Node:
    code, stdout, err = run_cli(["report", str(path), "-o", str(out), *extra], capsys)
    assert code == 0, err
    assert f"report written to {out}" in " ".join(stdout.split())
    return parse(out.read_text(encoding="utf-8"))


def assert_self_contained(text: str) -> None:
    """Nothing the page loads comes from elsewhere: no src/href but in-page anchors, no <link>, no import."""
    for m in re.finditer(r"""\b(src|href|xlink:href)\s*=\s*["']?([^"'\s>]*)""", text, re.I):
        assert m.group(2).startswith("#"), f"the page loads {m.group(0)!r}"
    assert not re.search(r"<link\b", text, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", text, re.I)
    assert not re.search(r"<script\b[^>]*\bsrc=", text, re.I)


# ---------------------------------------------------------------------------
# A model-checker counterexample
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def f1_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "f1.html"
    assert main(["report", str(F1), "-o", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def test_counterexample_page_has_every_step_and_is_self_contained(f1_page):
    assert_self_contained(f1_page)
    dom = parse(f1_page)
    states = json.loads(F1.read_text())["states"]
    rows = dom.find("table", id="steps").find_all("tr", cls="step")
    assert [r.attrs["data-step"] for r in rows] == [str(i) for i in range(len(states))]
    assert [r.attrs["data-gate"] for r in rows] == [s["gate"] for s in states]
    diffs = dom.find(id="diff").find_all("section", cls="step-diff")
    assert [d.attrs["data-step"] for d in diffs] == [str(i) for i in range(len(states))]
    assert dom.find("input", id="filter")
    assert dom.find(id="diagram").find("svg")


def test_counterexample_verdict_and_meta(f1_page):
    dom = parse(f1_page)
    verdicts = dom.find("table", cls="trace-verdicts")
    prop = P.by_name("served_values_are_live_bound_kept")
    assert prop.name in verdicts.text and prop.statement in verdicts.text
    assert verdicts.find("td", cls="violated")
    meta = dom.find("table", cls="meta").text
    assert "seed" in meta and "cloud" in meta  # the trace's #meta: variant, bounds


def test_each_step_names_the_seed_function_it_runs(f1_page):
    dom = parse(f1_page)
    seed = {r.attrs["data-step"]: r.find("td", cls="seed").text for r in dom.find_all("tr", cls="step")}
    assert "beginProjectEnvReplica" in seed["1"]
    assert "applyProjectEnvReplicaPage" in seed["2"]
    assert "completeProjectEnvReplica" in seed["3"]
    assert "the cloud" in seed["4"]
    assert "applyProjectEnvReplicaDelivery" in seed["5"]
    # the resumed read of the delivery's value (slot 0 is a DeliveryInFlight)
    assert "materializeLive" in seed["9"] and "applyProjectEnvReplicaDelivery" in seed["9"]


def test_every_seed_function_named_exists_in_the_seed():
    from typescript_kit import seed_source

    sources = seed_source().read_text(encoding="utf-8")
    for fn, _ in SEED_FUNCTIONS.values():
        if fn is not None:
            assert re.search(rf"function {fn}\b", sources), fn
    for fn in ("materializeStage", "materializeLive", "readMaterializedValue"):
        assert re.search(rf"function {fn}\b", sources), fn


def test_step_diff_marks_added_changed_removed_rows(f1_page):
    dom = parse(f1_page)
    step9 = dom.find("section", cls="step-diff", data_step="9")  # the stale value is installed
    values = step9.find("table", data_table="values")
    added = values.find("tr", cls="added")
    assert "p1 / A" in added.find("td", cls="key").text and '"v"' in added.text
    records = step9.find("table", data_table="records")
    changed = records.find("tr", cls="changed")
    field = changed.find("span", cls="changed")
    assert "mat.kind" in field.text and '"installed"' in field.find("ins").text
    assert step9.find("table", data_table="inflight").find("tr", cls="removed")
    # the initial state is all added; a cloud change leaves the replica alone, and the page says so
    assert dom.find("section", cls="step-diff", data_step="0").find("table", data_table="authority").find(
        "tr", cls="added")
    assert "no table changed" in dom.find("section", cls="step-diff", data_step="4").text


def test_gate_edges_are_findable_by_each_step(f1_page):
    dom = parse(f1_page)
    svg = dom.find(id="diagram").find("svg")
    edges = {g.attrs["data-edge"] for g in svg.find_all("g", cls="edge")}
    steps = {r.attrs["data-step"]: r.attrs["data-edge"] for r in dom.find_all("tr", cls="step")}
    assert steps["1"] == "inactive->closed_staging" and steps["3"] == "closed_staging->open"
    assert steps["6"] == "open->closed_staging" and steps["4"] == ""
    assert {e for e in steps.values() if e} <= edges
    ids = [n.attrs["id"] for n in dom.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids)), "element ids are unique"


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_every_saved_trace_renders(path, tmp_path, capsys):
    dom = report_of(path, tmp_path / "r.html", capsys)
    states = json.loads(path.read_text())["states"]
    assert len(dom.find_all("tr", cls="step")) == len(states)
    assert_self_contained((tmp_path / "r.html").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------
# The step at which the property breaks
# ---------------------------------------------------------------------------


def _breaking_rows(dom: Node) -> list:
    return [r for r in dom.find("table", id="steps").find_all("tr", cls="step") if "breaks" in r.classes]


@pytest.mark.parametrize("path", REPLICA_TRACES, ids=[p.name for p in REPLICA_TRACES])
def test_the_step_table_marks_the_first_state_that_violates_the_invariant(path, tmp_path, capsys):
    """Each saved counterexample, replayed: the marked row is the first state that fails its invariant."""
    from envreplica.checker import itf

    dom = report_of(path, tmp_path / "r.html", capsys)
    doc = json.loads(path.read_text())
    prop = P.by_name(doc["#meta"]["violated"])
    states = [st for _, _, st in itf.replay(doc).steps]
    first = next(i for i, st in enumerate(states) if not prop.check(st))
    marked = _breaking_rows(dom)
    assert [r.attrs["data-step"] for r in marked] == [str(first)]
    assert "breaks here" in marked[0].find("td", cls="index").text
    assert dom.find("table", id="steps").attrs["data-breaks"] == str(first)
    note = dom.find("p", cls="breaks-at")
    assert f"step #{first}" in note.text and prop.name in note.text and prop.statement in note.text
    assert note.find("a").attrs["href"] == f"#diff-{first}"
    assert "breaks" in dom.find("section", cls="step-diff", data_step=str(first)).classes


def _with_property(monkeypatch, prop) -> None:
    """``#meta.violated`` names ``prop`` (a property the test defines on the real model's states)."""
    real = P.by_name
    monkeypatch.setattr(P, "by_name", lambda name: prop if name == prop.name else real(name))


def _edited(tmp_path: Path, edit) -> Path:
    """F1's trace with ``edit`` applied to its document."""
    doc = json.loads(F1.read_text())
    edit(doc)
    out = tmp_path / "t.itf.json"
    out.write_text(json.dumps(doc))
    return out


def _renamed(tmp_path: Path, violated: str) -> Path:
    return _edited(tmp_path, lambda doc: doc["#meta"].update(violated=violated))


def test_an_invariant_is_marked_where_it_first_fails_not_where_the_trace_ends(tmp_path, monkeypatch):
    """F1's gate first opens after the commit (#3); the trace goes on to #9: the mark is at #3."""
    from envreplica.spec.gate import Gate

    prop = P.Property("gate_never_open", lambda st: st.authority.gate is not Gate.OPEN, "invariant",
                      doc="The gate is never open.")
    _with_property(monkeypatch, prop)
    view = read(_renamed(tmp_path, prop.name))
    assert view.breaks_at == 3 and [s.index for s in view.steps if s.breaks] == [3]
    assert view.breaks_note.startswith("the state after step #3 is the first to violate the invariant gate_never_open")


def test_a_step_property_is_marked_at_the_transition_that_breaks_it(tmp_path, monkeypatch):
    """A step property that fails on a gate closing from open: F1's second begin (#6) is the first such step."""
    from envreplica.spec.gate import Gate

    def never_leaves_open(pre, action, result, post):
        return not (pre.authority.gate is Gate.OPEN and post.authority.gate is not Gate.OPEN)

    prop = P.Property("never_leaves_open", never_leaves_open, "step", doc="An open gate stays open.")
    _with_property(monkeypatch, prop)
    view = read(_renamed(tmp_path, prop.name))
    assert view.breaks_at == 6 and [s.index for s in view.steps if s.breaks] == [6]
    assert view.breaks_note == "step #6 (begin) breaks the step property never_leaves_open: An open gate stays open."


@pytest.mark.parametrize("edit, says", [
    (lambda doc: doc["#meta"].update(violated="no_such_property"), "is not one of this model's properties"),
    (lambda doc: doc["#meta"].update(violated="sometimes_gate_open"), "which no single step breaks"),
    (lambda doc: doc["states"][2].update(gate="open"), "state #2 differs (gate)"),
])
def test_no_step_is_marked_when_the_model_cannot_say_which(edit, says, tmp_path):
    view = read(_edited(tmp_path, edit))
    assert view.breaks_at is None and not any(s.breaks for s in view.steps)
    assert says in view.breaks_note and view.breaks_note.endswith("no step is marked")


def test_a_divergence_is_marked_where_the_implementation_parts(tmp_path, capsys):
    jsonl, _ = divergent_trace(tmp_path)
    dom = report_of(jsonl, tmp_path / "d.html", capsys)
    assert [r.attrs["data-step"] for r in _breaking_rows(dom)] == ["4"]
    assert dom.find("table", id="steps").attrs["data-breaks"] == "4"


def test_no_renderer_shows_the_dot_source(tmp_path, monkeypatch, capsys):
    from envreplica.report import gatesvg

    def unavailable(graph):
        raise RuntimeError("no renderer here")

    monkeypatch.setattr(gatesvg, "_render", unavailable)
    dom = report_of(F1, tmp_path / "r.html", capsys)
    figure = dom.find(id="diagram")
    assert not figure.find_all("svg")
    assert "digraph gate" in figure.find("pre", cls="dot").text
    assert "no Graphviz renderer" in figure.find("p", cls="no-renderer").text
    assert len(dom.find_all("tr", cls="step")) == 10


# ---------------------------------------------------------------------------
# A lockstep divergence
# ---------------------------------------------------------------------------


class FlipCommit(FlipsCommits, ModelDriver):
    """The model, but every successful commit answers ``ok: false`` (a divergence at the commit)."""


def divergent_trace(out: Path) -> tuple[Path, Path]:
    """A lockstep trace (``write_trace``) that parts at its commit, the 4th step."""
    requests = with_ids(BOOT + [page()])
    steps, divergence = replay_steps(requests, FlipCommit("fixed"), ModelDriver("fixed"))
    assert divergence is not None and divergence["index"] == 4
    return write_trace(out, "lockstep-fixed", steps, divergence["reason"], {"variant": "fixed", "steps": len(steps)})


def test_divergence_shows_both_sides_with_the_differing_field(tmp_path, capsys):
    jsonl, itf_path = divergent_trace(tmp_path)
    dom = report_of(jsonl, tmp_path / "d.html", capsys)  # the .jsonl: its sibling .itf.json is read
    assert_self_contained((tmp_path / "d.html").read_text(encoding="utf-8"))
    d = dom.find("section", cls="divergence")
    assert d.attrs["data-step"] == "4"
    differing = d.find("table", cls="responses")
    row = next(r for r in differing.find_all("tr", cls="differs") if "result.ok" in r.text)
    assert row.find("td", cls="model").text == "true" and "differs" in row.find("td", cls="model").classes
    assert row.find("td", cls="impl").text == "false" and "differs" in row.find("td", cls="impl").classes
    rows = dom.find("table", id="steps").find_all("tr", cls="step")
    assert [r.attrs["data-step"] for r in rows] == ["1", "2", "3", "4"]
    assert "parting" in rows[3].classes and "completeProjectEnvReplica" in rows[3].text
    assert "implementation:" in rows[3].find("td", cls="result").text
    # the model's tables, replayed: the begin opened an attempt, the page staged p1, the commit opened the gate
    assert rows[1].attrs["data-edge"] == "inactive->closed_staging"
    assert rows[3].attrs["data-edge"] == "closed_staging->open" and rows[3].attrs["data-gate"] == "open"
    step2 = dom.find("section", cls="step-diff", data_step="2")
    assert "attemptId" in step2.find("table", data_table="authority").text


def test_divergence_with_the_implementation_replayed(tmp_path):
    _, itf_path = divergent_trace(tmp_path)
    view = read(itf_path, lambda: FlipCommit("fixed"))
    assert view.divergence.tables is not None  # compared; the flipped answer changed no table
    assert not any(t.rows for t in view.divergence.tables)
    assert "equal the model's" in view.divergence.tables_note


def test_a_table_divergence_marks_its_row_and_field(tmp_path, capsys):
    """No implementation to replay on: the model's row and field the reason names are marked ``differs``."""
    value = "bad\ud800" + "x" * 200  # a lone surrogate and a long value: written escaped, capped
    ref = {"kind": "staged", "stagingId": "0f8fad5b-d9cb-469f-a165-70867728950e"}
    requests = with_ids([reset(), begin(), put(ref=ref, raw=staged_envelope("o1", "p1", "A", ref["stagingId"], value)),
                         page([rec("A", ref=ref)], version=1)])
    steps, divergence = replay_steps(requests, ModelDriver("fixed"), ModelDriver("fixed"))
    assert divergence is None
    reason = ("tables after the step differ from the model's: state table stageValues: row (a1, p1, A): value: "
              "differs (model 205 chars, implementation 205 chars)")
    jsonl, itf_path = write_trace(tmp_path, "lockstep-fixed", steps, reason, {"variant": "fixed"})
    dom = report_of(itf_path, tmp_path / "t.html", capsys)
    d = dom.find("section", cls="divergence")
    assert "the tables part" in d.text
    row = d.find("table", data_table="stageValues").find("tr", cls="differs")
    assert "a1 / p1 / A" in row.text
    field = row.find("span", cls="differs")
    assert field.find("b").text == "value" and "\\ud800" in field.text
    shown = len('"bad\\ud800"') + 200  # as JSON text, the lone surrogate escaped
    assert f"… ({shown} chars)" in field.text
    assert "x" * (CAP + 10) not in (tmp_path / "t.html").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# Bad input: one line, exit 2
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("content, says", [
    (None, "No such file"),
    ("{not json", "not JSON"),
    ('{"a": 1}', "not an ITF trace"),
    ('{"states": [{"x": 1}]}', "neither a model-checker counterexample"),
    ('{"states": [{"gate": "nowhere", "mbt::actionTaken": "init"}]}', "malformed trace"),
])
def test_bad_input_is_one_line_and_exit_2(content, says, tmp_path, capsys):
    path = tmp_path / "t.itf.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run_cli(["report", str(path), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("envreplica report: ") and says in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "r.html").exists()


def test_jsonl_without_its_itf_sibling_is_exit_2(tmp_path, capsys):
    path = tmp_path / "x.jsonl"
    path.write_text('{"op": "reset", "id": 1}\n')
    code, out, err = run_cli(["report", str(path)], capsys)
    assert code == 2 and "x.itf.json" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------
# A whole run: check --report
# ---------------------------------------------------------------------------


def test_check_report_has_verdicts_coverage_figures_and_traces(tmp_path, capsys):
    out = tmp_path / "run.html"
    code, stdout, err = run_cli(["check", "--bounds", "tiny", "--variant", "seed", "--model-only", "--serial",
                                 "--quiet", "--out", str(tmp_path / "traces"), "--report", str(out)], capsys)
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    dom = parse(text)
    verdicts = dom.find("table", id="verdicts")
    for p in P.ALL:
        assert p.name in verdicts.text
    cells = {c.text for c in verdicts.find_all("td", cls="verdict")}
    assert cells <= {"holds", "violated", "witnessed", "not seen"}
    assert dom.find("table", id="figures").find("td", cls="num")
    assert "model-check coverage" in dom.find(id="coverage").text
    assert "model check" in dom.find("table", id="stages").text
    traces = list((tmp_path / "traces").glob("*.itf.json"))
    assert len(dom.find_all("section", cls="trace")) == len(traces)
    assert not list(tmp_path.glob("*.model-check.json")), "the record beside the page is removed"
    assert ("FAIL" if code else "PASS") in dom.find("section", id="run").find("h2").text


def test_run_report_of_a_lockstep_divergence_replays_it_on_sqlite(tmp_path):
    """``check``'s lockstep parted: its trace is replayed on the built-in SQLite, both sides' tables read."""
    from types import SimpleNamespace

    from envreplica.conformance.replica.coverage import LockstepCoverage
    from envreplica.report import write_check_report

    _, itf_path = divergent_trace(tmp_path)
    args = SimpleNamespace(bounds="tiny", variant="fixed", model_only=False, report=str(tmp_path / "run.html"))
    lockstep = SimpleNamespace(ok=False, itf_path=itf_path, variant="fixed", coverage=LockstepCoverage())
    path = write_check_report(args, [("lockstep", "SQLite vs model", "[bold red]FAIL[/]", "1.0")], lockstep)
    dom = parse(path.read_text(encoding="utf-8"))
    assert "FAIL" in dom.find("table", id="stages").text and "[bold" not in dom.find("table", id="stages").text
    assert "the model check left no record" in dom.find("section", id="run").text
    d = dom.find("section", cls="divergence")
    assert "the implementation's against the model's" in d.text  # the SQLite tables were read
    assert "lockstep coverage" in dom.find(id="coverage").text


def test_run_report_with_several_traces_keeps_ids_unique(tmp_path):
    """The model check's record (as a ``--model-stage`` child saves it) and two counterexamples and a divergence."""
    from types import SimpleNamespace

    from envreplica.checker.coverage import Coverage
    from envreplica.conformance.replica.coverage import LockstepCoverage
    from envreplica.report import ModelCheckRecord, write_check_report

    args = SimpleNamespace(bounds="cloud", variant="seed", model_only=False, report=str(tmp_path / "run.html"))
    record = ModelCheckRecord(args)
    record.add_bounds(SimpleNamespace(name="cloud", mode=SimpleNamespace(value="cloud"), max_depth=12),
                      SimpleNamespace(states=36649, transitions=222147, depth=12, complete=False, seconds=9.9,
                                      states_per_second=3742.0))
    for path in TRACES[:2]:
        record.add_trace(path)
    verdicts = {p.name: ["holds" if p.kind in ("invariant", "step") else "witnessed"] for p in P.ALL}
    verdicts["served_values_are_live_bound_kept"] = ["VIOLATED"]
    record.save(verdicts, Coverage(), 4.4e-10, True)
    _, itf_path = divergent_trace(tmp_path)
    lockstep = SimpleNamespace(ok=False, itf_path=itf_path, variant="fixed", coverage=LockstepCoverage())
    dom = parse(write_check_report(args, [("model check", "bounds cloud", "FAIL", "9.9")], lockstep).read_text())
    assert [s.attrs["id"] for s in dom.find_all("section", cls="trace")] == ["trace", "trace-t1", "trace-t2"]
    assert dom.find("table", id="steps-t2").find("tr", cls="parting")
    ids = [n.attrs["id"] for n in dom.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    verdict = dom.find("table", id="verdicts")
    assert "violated" in verdict.find("td", cls="violated").text
    assert "36,649" in dom.find("table", id="figures").text
    assert not (tmp_path / "run.html.model-check.json").exists()
