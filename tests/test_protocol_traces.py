"""Every protocol's counterexamples and divergences as ITF traces, and each as the same kind of report page.

* round trips: a trace written for each protocol (the replica's and the migration's model checks, both lockstep
  divergences) reads back as it was written: ``#meta.protocol``, every state's ``mbt::actionTaken`` and
  ``mbt::nondetPicks`` (Quint's ``Option`` per name, the same names at every state) give back each action;
* ``envreplica check --bounds migration --variant seed --out DIR`` writes each violation's and the stuck state's
  trace, its page beside it, and ``envreplica report`` renders each with the property broken first;
* ``envreplica conformance --protocol migration`` of the seed's steps held to ``fixed`` writes the divergence as
  ITF beside its JSON lines; ``envreplica report`` renders it naming the finding (printed once by the command);
* the run pages put the divergence before the coverage.

The adapters are the project's own (the migration model behind ``envreplica adapter --protocol migration --impl
model``), so these run wherever the package is installed. Budgets are example counts.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from envreplica.checker import itf
from envreplica.checker import migration as cm
from envreplica.cli.main import main
from envreplica.model import migration as mm

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
SEED_MODEL_ADAPTER = " ".join([*ENVREPLICA, "adapter", "--protocol", "migration", "--impl", "model",
                               "--variant", "seed"])


def _assert_mbt(doc: dict, names: tuple) -> None:
    """Every state has Quint's two variables: the action's name, and every pick name as an ``Option``."""
    assert itf.ACTION_TAKEN in doc["vars"] and itf.NONDET_PICKS in doc["vars"]
    assert doc["states"][0][itf.ACTION_TAKEN] == "init"
    for state in doc["states"]:
        picks = state[itf.NONDET_PICKS]
        assert list(picks) == list(names), picks
        for value in picks.values():
            assert value == {"tag": "None", "value": {"#tup": []}} or (set(value) == {"tag", "value"}
                                                                       and value["tag"] == "Some")
    assert all(v["tag"] == "None" for v in doc["states"][0][itf.NONDET_PICKS].values())


def _picked(state: dict) -> dict:
    return {k: itf.itf_to_json(v) for k, v in itf.picks_of(state).items()}


# ---------------------------------------------------------------------------
# Round trips: write, read, the same actions
# ---------------------------------------------------------------------------


def test_replica_counterexample_round_trip(tmp_path):
    """A replica counterexample (the seed's F1, the saved adversarial one replayed into checker steps) written and
    read back: each state's action from its picks, and a replay that reproduces every state."""
    from envreplica.checker.bfs import Step
    from envreplica.model.state import ModelConfig, Variant

    saved = itf.load(Path(__file__).resolve().parent.parent / "docs" / "traces" / "F1-seed-adversary.itf.json")
    replayed = itf.replay(saved, ModelConfig(variant=Variant.SEED))
    steps = [Step(action, result, state) for action, result, state in replayed.steps]
    path = itf.write(tmp_path / "t.itf.json", steps, "F1", {"variant": "seed", "violated": "x"})
    doc = itf.load(path)
    assert doc["#meta"]["protocol"] == "replica"
    _assert_mbt(doc, itf.REPLICA_PICKS)
    assert "resume" in [s[itf.ACTION_TAKEN] for s in doc["states"]]  # F1 is a race: a read answers late
    for step, state in zip(steps[1:], doc["states"][1:]):
        assert itf.action_of(state[itf.ACTION_TAKEN], _picked(state)) == step.action
    assert itf.replay(doc).diverged_at is None


def test_migration_counterexample_round_trip(tmp_path):
    seed = cm.run(mm.suite("migration", mm.MigrationVariant.SEED)[1])
    violation = seed.result.violations["never_result_and_recovery"]
    path = cm.write_trace(tmp_path / "m.itf.json", violation, {"variant": "seed", "suite": "migration",
                                                               "bounds": "writers",
                                                               "violated": "never_result_and_recovery"})
    doc = itf.load(path)
    assert doc["#meta"]["protocol"] == "migration" and doc["vars"][:len(cm.MIGRATION_VARS)] == list(cm.MIGRATION_VARS)
    _assert_mbt(doc, cm.MIGRATION_PICKS)
    for step, state in zip(violation.steps, doc["states"]):
        assert {k: state[k] for k in cm.MIGRATION_VARS} == cm.state_vars(step.state)
        if step.action is not None:
            assert cm.action_of(state[itf.ACTION_TAKEN], _picked(state)) == step.action
            assert state["#meta"]["step"] and state["#meta"]["result"]


def test_replica_lockstep_trace_round_trip(tmp_path):
    from adapter_requests import BOOT, page, with_ids
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.replica import replay_steps
    from envreplica.conformance.replica.traces import REQUEST_PICKS, write_trace
    from envreplica.conformance.replay import replica_requests

    requests = with_ids(BOOT + [page()])
    steps, _ = replay_steps(requests, ModelDriver("fixed"), ModelDriver("fixed"))
    _, path = write_trace(tmp_path, "lockstep-fixed", steps, None, {"variant": "fixed"})
    doc = itf.load(path)
    assert doc["#meta"]["protocol"] == "replica"
    assert [s[itf.ACTION_TAKEN] for s in doc["states"]] == [r["op"] for r in requests]
    for state in doc["states"]:
        assert list(state[itf.NONDET_PICKS])[:len(REQUEST_PICKS)] == list(REQUEST_PICKS)
    again, skipped = replica_requests(doc)
    assert skipped == [] and [{k: v for k, v in r.items() if k != "id"} for r in again] == \
        [{k: v for k, v in r.items() if k != "id"} for r in requests]


def test_migration_lockstep_trace_round_trip(tmp_path):
    from envreplica.conformance.migration.invocations import Mode
    from envreplica.conformance.migration.sides import LOCKSTEP_BOUNDS, SILENT, Move
    from envreplica.conformance.migration.traces import write_trace
    from envreplica.conformance.replay import migration_moves

    moves = [Move(mm.Invoke(mm.Role.MIGRATE), Mode.FORK), Move(mm.Step(0)), Move(mm.Step(0)), Move(mm.Connect(1)),
             Move(mm.Write(1, 2)), Move(mm.Crash(0))]
    records = [{"model": "same", "implementation": "same"} for _ in moves[:-1]]
    records.append({"model": "crashed", "implementation": "crashed", "model_state": {"stores": []},
                    "implementation_state": {"stores": []}})
    world = SimpleNamespace(cfg=LOCKSTEP_BOUNDS, silent=SILENT, allows=None)
    jsonl = write_trace(tmp_path, "migration-lockstep", moves, records, "the files differ", {"finding": None},
                        world=world)
    doc = itf.load(jsonl.with_name("migration-lockstep.itf.json"))
    assert doc["#meta"]["protocol"] == "migration" and doc["#meta"]["variant"] == "fixed"
    _assert_mbt(doc, cm.MIGRATION_PICKS)
    assert _picked(doc["states"][1]) == {"role": "migrate", "fault": "none", "mode": "fork"}
    assert [s["agree"] for s in doc["states"]] == [True] * len(moves) + [False]
    assert migration_moves(doc)[0] == moves


def test_nondet_picks_refuses_a_name_the_protocol_does_not_list():
    with pytest.raises(ValueError, match="not among the protocol's names"):
        itf.nondet_picks(("a",), {"b": 1})


# ---------------------------------------------------------------------------
# check --out on the migration: a trace per violation and stuck state, each a page
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def migration_check(tmp_path_factory):
    out = tmp_path_factory.mktemp("check")
    done = subprocess.run([*ENVREPLICA, "check", "--bounds", "migration", "--variant", "seed", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    return out, done


def test_check_writes_each_migration_violation_as_itf(migration_check):
    out, done = migration_check
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    traces = sorted(p.name for p in out.glob("*.itf.json"))
    assert traces == ["migration-seed-writers-every_state_recoverable.itf.json",
                      "migration-seed-writers-never_result_and_recovery.itf.json",
                      "migration-seed-writers-no_recovery_over_a_completed_store.itf.json"], traces
    for name in traces:  # its page beside it, unless --no-trace-pages
        assert (out / name.replace(".itf.json", ".html")).is_file()


@pytest.mark.parametrize("prop, at", [("never_result_and_recovery", 24), ("every_state_recoverable", 11)])
def test_report_renders_a_migration_counterexample(migration_check, prop, at, tmp_path):
    out, _ = migration_check
    page = tmp_path / "p.html"
    done = subprocess.run([*ENVREPLICA, "report", str(out / f"migration-seed-writers-{prop}.itf.json"), "-o",
                           str(page)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert prop in text and 'data-kind="counterexample"' in text
    assert f'data-breaks="{at}"' in text  # the property first fails at the last step of a shortest trace
    assert text.index('class="verdicts trace-verdicts"') < text.index('<table class="steps"')
    assert "migrate#0 retain parent" in text  # each step names the seed's step it takes


def test_no_trace_pages_writes_the_traces_alone(tmp_path):
    assert main(["check", "--bounds", "migration", "--variant", "seed", "--out", str(tmp_path),
                 "--no-trace-pages"]) == 1
    assert len(list(tmp_path.glob("*.itf.json"))) == 3 and not list(tmp_path.glob("*.html"))


def test_a_migration_invariant_is_marked_where_it_first_fails(tmp_path):
    """A trace that goes on past its violation is still marked where the property first fails."""
    from envreplica.report import read

    seed = cm.run(mm.suite("migration", mm.MigrationVariant.SEED)[1])
    violation = seed.result.violations["never_result_and_recovery"]
    longer = SimpleNamespace(prop=violation.prop, steps=violation.steps + violation.steps[-1:])
    path = cm.write_trace(tmp_path / "m.itf.json", longer, {"variant": "seed", "suite": "migration",
                                                            "bounds": "writers",
                                                            "violated": "never_result_and_recovery"})
    doc = json.loads(path.read_text())
    doc["states"][-1]["#meta"].pop("action")  # the repeated state: no action, so the model stays where it was
    path.write_text(json.dumps(doc))
    view = read(path)
    assert view.breaks_at == len(violation.steps) - 1 and "first to violate" in view.breaks_note


# ---------------------------------------------------------------------------
# conformance --protocol migration --out: the divergence as ITF, named, and its page
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def migration_divergence(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance")
    done = subprocess.run([*ENVREPLICA, "conformance", "--protocol", "migration", "--adapter", SEED_MODEL_ADAPTER,
                           "--variant", "fixed", "--max-examples", "60", "--out", str(out), "--report",
                           str(out / "run.html")], capture_output=True, text=True, timeout=900)
    return out, done


def test_conformance_writes_the_migration_divergence_as_itf_and_report_renders_it(migration_divergence, tmp_path):
    out, done = migration_divergence
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    itf_path = out / "migration-lockstep.itf.json"
    assert itf_path.is_file() and (out / "migration-lockstep.jsonl").is_file()
    assert (out / "migration-lockstep.html").is_file()  # the page beside the trace
    finding = json.loads(itf_path.read_text())["#meta"]["finding"]
    assert finding and finding[:3] in ("F4:", "F5:", "F6:")
    page = tmp_path / "d.html"
    shown = subprocess.run([*ENVREPLICA, "report", str(itf_path), "-o", str(page)], capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stderr
    text = html.unescape(page.read_text(encoding="utf-8"))
    assert finding in text and 'class="divergence"' in text and 'data-kind="divergence"' in text
    assert text.index('class="finding"') < text.index('<table class="steps"')


def test_the_finding_is_said_once(migration_divergence):
    out, done = migration_divergence
    said = " ".join(done.stdout.split())  # the console wraps long lines at spaces
    finding = json.loads((out / "migration-lockstep.itf.json").read_text())["#meta"]["finding"]
    assert said.count(" ".join(finding.split())) == 1, done.stdout


def test_the_migration_run_page_shows_the_divergence_before_the_coverage(migration_divergence):
    out, _ = migration_divergence
    text = (out / "run.html").read_text(encoding="utf-8")
    assert 'class="divergence"' in text and 'id="coverage"' in text
    assert text.index('class="divergence"') < text.index('id="coverage"')
    assert "the adapter declared" in text


def test_the_replica_conformance_page_shows_the_divergence_before_the_coverage(tmp_path):
    from envreplica.conformance.replica.coverage import LockstepCoverage
    from envreplica.report import write_conformance_report

    from test_report import divergent_trace

    _, itf_path = divergent_trace(tmp_path)
    args = SimpleNamespace(report=str(tmp_path / "run.html"), adapter="an adapter", variant="fixed", timeout=5.0)
    lockstep = SimpleNamespace(ok=False, itf_path=itf_path, variant="fixed", coverage=LockstepCoverage(),
                               examples=3, steps=12, steps_per_second=10.0, seconds=1.2, tables="", shrunk_steps=4)
    case = SimpleNamespace(name="lockstep[fixed]", failure="parts", error=False, message="parts", seconds=1.2)
    text = write_conformance_report(args, lockstep, [case]).read_text(encoding="utf-8")
    assert text.index('class="divergence"') < text.index('id="coverage"')


def test_a_trace_of_an_unknown_protocol_is_one_line(tmp_path, capsys):
    path = tmp_path / "queue.itf.json"
    path.write_text(json.dumps({"#meta": {"protocol": "queue"}, "vars": [], "states": [{"x": 1}]}))
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "protocol 'queue'" in err[0] and "replica, migration, lock" in err[0]


def test_the_page_goes_beside_its_trace_by_default(tmp_path, capsys):
    source = Path(__file__).resolve().parent.parent / "docs" / "traces" / "F1-seed-cloud.itf.json"
    trace = tmp_path / "F1.itf.json"
    trace.write_bytes(source.read_bytes())
    assert main(["report", str(trace)]) == 0
    assert (tmp_path / "F1.html").is_file()
