"""ITF traces (write, load, replay, tamper) and the gate diagram drawn over them."""

from __future__ import annotations

import json
import re

import pytest

from envreplica.checker import itf
from envreplica.checker.bfs import Step, Violation, check
from envreplica.checker.run import build_model
from envreplica.cli.main import main
from envreplica.model.actions import Begin, CloseGate, Commit, Page, step
from envreplica.model.presets import suite
from envreplica.model.state import INITIAL, ModelConfig, Variant
from envreplica.spec.diagram import HIGHLIGHT, gate_diagram
from envreplica.spec.domain import BeginFrame, CommitFrame, Cursor, PageFrame, ProjectVersion
from envreplica.spec.gate import Gate
from envreplica.spec.properties import Property

SEED = ModelConfig(variant=Variant.SEED)


def _gate_not_idle(st) -> bool:
    """Hand-made property: the gate never rests in closed.idle."""
    return st.authority.gate is not Gate.IDLE


def hand_violation() -> Violation:
    """begin, page, commit, close from the initial state, each a real ``step``."""
    actions = [
        Begin(BeginFrame("s1", "a1", ("p1",)), (1, 2), "org"),
        Page(PageFrame("op", "a1", "p1", None, 0, (), True)),
        Commit(CommitFrame("a1", Cursor("s1", 0), (ProjectVersion("p1", 0),))),
        CloseGate(),
    ]
    st = INITIAL
    steps = [Step(None, None, st)]
    for a in actions:
        st, result = step(SEED, st, a)
        assert getattr(result, "ok", False), (a, result)
        steps.append(Step(a, result, st))
    return Violation(Property("gate_not_idle", _gate_not_idle, "invariant"), steps)


@pytest.fixture(scope="module")
def violation() -> Violation:
    return hand_violation()


@pytest.fixture
def trace_path(tmp_path, violation):
    return itf.write(tmp_path / "t.itf.json", violation.steps, "hand-made: gate_not_idle",
                     {"variant": Variant.SEED.value, "violated": "gate_not_idle"})


def test_hand_trace_walks_the_gate(violation):
    gates = [s.state.authority.gate for s in violation.steps]
    assert gates == [Gate.INACTIVE, Gate.STAGING, Gate.STAGING, Gate.OPEN, Gate.IDLE]
    assert violation.length == 4


def _walk(value):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def test_itf_shape(trace_path, violation):
    doc = json.loads(trace_path.read_text())
    assert {"#meta", "vars", "states"} <= set(doc)
    assert doc["#meta"]["format"] == "ITF"
    assert doc["#meta"]["variant"] == "seed"
    assert doc["vars"][0] == "gate" and "mbt::actionTaken" in doc["vars"]
    assert len(doc["states"]) == len(violation.steps) == 5
    for i, state in enumerate(doc["states"]):
        assert "gate" in state and "mbt::actionTaken" in state
        assert state["#meta"]["index"] == i
        assert set(doc["vars"]) <= set(state), set(doc["vars"]) - set(state)
        assert state["gate"] == violation.steps[i].state.authority.gate.value
    assert [s["mbt::actionTaken"] for s in doc["states"]] == ["init", "begin", "apply_page", "complete", "close_gate"]
    assert [s["#meta"].get("action", {}).get("op") for s in doc["states"]] == [None, "begin", "page", "commit", "close"]
    # Integers are plain JSON numbers (all are small here), never strings or #bigint wrappers.
    ints = [v for v in _walk(doc["states"]) if isinstance(v, int) and not isinstance(v, bool)]
    assert ints, "expected some integers in the trace"
    assert not any(isinstance(v, dict) and "#bigint" in v for v in _walk(doc))
    authority = doc["states"][1]["authority"]
    assert authority["applied_sequence"] == 0 and type(authority["applied_sequence"]) is int
    assert authority["policy_epochs"] == [1, 2]
    assert doc["states"][1]["#meta"]["action"]["keptPolicyEpochs"] == [1, 2]
    assert re.search(r'"applied_sequence": 0\b', trace_path.read_text())


def test_big_integers_use_bigint():
    assert itf.to_itf(2**53 - 1) == 2**53 - 1
    assert itf.to_itf(2**53) == {"#bigint": str(2**53)}
    assert itf.to_itf(-(2**60)) == {"#bigint": str(-(2**60))}


def test_replay_reproduces_the_trace(trace_path, violation):
    replayed = itf.replay(itf.load(trace_path))
    assert replayed.diverged_at is None
    assert replayed.differing_vars == []
    assert [st for _, _, st in replayed.steps] == [s.state for s in violation.steps]
    assert [a for a, _, _ in replayed.steps] == [s.action for s in violation.steps]
    assert [r for _, r, _ in replayed.steps] == [s.result for s in violation.steps]


@pytest.mark.parametrize("index", [1, 2, 3, 4])
def test_replay_reports_a_tampered_gate(trace_path, index):
    doc = json.loads(trace_path.read_text())
    doc["states"][index]["gate"] = Gate.OPEN.value if doc["states"][index]["gate"] != "open" else "closed.idle"
    trace_path.write_text(json.dumps(doc))
    replayed = itf.replay(itf.load(trace_path))
    assert replayed.diverged_at == index
    assert replayed.differing_vars == ["gate"]


def test_replay_reports_a_tampered_table(trace_path):
    doc = json.loads(trace_path.read_text())
    doc["states"][3]["authority"]["applied_sequence"] = 7
    trace_path.write_text(json.dumps(doc))
    replayed = itf.replay(itf.load(trace_path))
    assert replayed.diverged_at == 3
    assert replayed.differing_vars == ["authority"]


def test_load_rejects_a_non_trace(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(ValueError):
        itf.load(path)


def test_checker_counterexample_round_trips(tmp_path):
    """A real ``check`` counterexample (tiny-cloud, seed) including a cloud-side change."""
    bounds = suite("tiny", Variant.SEED)[0]
    inv = Property("open_and_delivered", lambda s: not (s.authority.gate is Gate.OPEN
                                                        and s.authority.applied_sequence >= 1), "invariant")
    model = build_model(bounds, invariants=(inv,), step_properties=(), sometimes=())
    r = check(model, max_depth=bounds.max_depth, stop_on_first=True)
    v = r.violations["open_and_delivered"]
    kinds = [getattr(s.action, "kind", None) for s in v.steps]
    assert "cloud_change" in kinds  # the replay must skip the cloud's own moves
    path = itf.write(tmp_path / "c.itf.json", v.steps, "open_and_delivered",
                     {"variant": bounds.variant.value, "ackPageBytes": bounds.ack_page_bytes})
    replayed = itf.replay(itf.load(path))
    assert replayed.diverged_at is None
    assert replayed.steps[-1][2] == v.steps[-1].state.replica
    assert main(["replay", str(path)]) == 0


def test_crash_points_round_trip(tmp_path):
    """A crash step is its action's request plus ``crashAfterCommit``, and replays to the same state."""
    from envreplica.model.actions import CrashAfter, StoreOff
    from envreplica.spec.domain import BindingState, Crashed, Head, StagedRef

    record = BindingState("A", Head(1, 1, False, StagedRef("00000000-0000-4000-8000-000000000001")), None, 1, 0)
    page = Page(PageFrame("op", "a1", "p1", None, 1, (record,), True))
    actions = [Begin(BeginFrame("s1", "a1", ("p1",)), (1, 2), "org"), StoreOff(), CrashAfter(page, 1)]
    st = INITIAL
    steps = [Step(None, None, st)]
    for a in actions:
        st, result = step(SEED, st, a)
        steps.append(Step(a, result, st))
    assert steps[-1].result == Crashed(1) and st.authority.gate is Gate.IDLE
    assert itf.action_json(actions[-1]) == {**itf.action_json(page), "crashAfterCommit": 1}
    assert itf.parse_action(itf.action_json(actions[-1])) == actions[-1]
    path = itf.write(tmp_path / "crash.itf.json", steps, "crash", {"variant": Variant.SEED.value})
    doc = itf.load(path)
    assert doc["states"][-1]["mbt::actionTaken"] == "crash_after"
    assert doc["states"][-1]["#meta"]["result"] == {"crashedAfterCommit": 1}
    replayed = itf.replay(doc)
    assert replayed.diverged_at is None and replayed.steps[-1][2] == st


# ---------------------------------------------------------------------------
# The diagram
# ---------------------------------------------------------------------------

_EDGE = re.compile(r'(\w+) -> (\w+) \[((?:"[^"]*"|[^\]"])*)\]')


def _edges(dot: str) -> dict:
    return {(m.group(1), m.group(2)): m.group(3) for m in _EDGE.finditer(dot)}


def test_dot_highlights_the_taken_edges(trace_path):
    dot = gate_diagram("dot", trace_path).decode()
    edges = _edges(dot)
    taken = {("inactive", "closed_staging"): 1, ("closed_staging", "open"): 3, ("open", "closed_idle"): 4}
    for edge, index in taken.items():
        assert HIGHLIGHT in edges[edge], edge
        assert f"[#{index}]" in edges[edge], edge
    for edge, attrs in edges.items():
        if edge not in taken:
            assert HIGHLIGHT not in attrs, edge
    # the page step (staging -> staging) fires no trigger: the begin self-loop stays plain
    assert HIGHLIGHT not in edges[("closed_staging", "closed_staging")]


def test_dot_without_trace_has_no_highlight():
    dot = gate_diagram("dot").decode()
    assert HIGHLIGHT not in dot
    assert "start -> inactive" in dot
    assert len(_edges(dot)) == 9  # the 13 declared edges merged per (source, dest)


def test_svg_renders(trace_path):
    svg = gate_diagram("svg", trace_path)
    assert isinstance(svg, bytes)
    assert svg.startswith(b"<?xml") or b"<svg" in svg
    assert HIGHLIGHT.encode() in svg


def test_cli_diagram_writes_a_file(tmp_path, trace_path):
    out = tmp_path / "g.dot"
    assert main(["diagram", "--format", "dot", "--output", str(out)]) == 0
    assert out.read_text().startswith("digraph gate")
    out2 = tmp_path / "sub" / "g2.dot"
    assert main(["diagram", "--format", "dot", "--trace", str(trace_path), "--output", str(out2)]) == 0
    assert HIGHLIGHT in out2.read_text()


def test_cli_replay_of_the_hand_trace(trace_path):
    assert main(["replay", str(trace_path)]) == 0
    doc = json.loads(trace_path.read_text())
    doc["states"][2]["gate"] = "open"
    trace_path.write_text(json.dumps(doc))
    assert main(["replay", str(trace_path)]) == 1
