"""The lock adapter protocol (docs/protocol.md, section 12) and ``envreplica conformance --protocol lock``.

* the project's adapters answer in the schema's shapes (``envreplica schema LockHello`` ...), and refuse a move
  out of order or a malformed field, naming it;
* through the lockstep: ``impl.lock`` behind its adapter passes under ``fixed`` with the in-process run's
  coverage; the model of the seed's steps passes under ``seed``; the model of ``fixed`` less one fix fails under
  ``fixed`` with a divergence named as that fix's finding; the model of the seed's steps fails under ``fixed``
  (a property broken on moves both sides agreed on) named as a finding;
* through the command line: exit 0 on agreement, 1 on a divergence (its JSON-lines trace, its ITF trace and the
  page beside it, the JUnit file, the run's page), 2 for an adapter that cannot run or breaks mid-run (one line
  naming the move).

Budgets are counts of examples (derandomized), never the clock.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from envreplica.conformance.lock import protocol
from envreplica.conformance.lock.adapter_side import AdapterShared
from envreplica.conformance.lock.coverage import required_for
from envreplica.conformance.lock.findings import finding_of
from envreplica.conformance.lock.run import run_lock_lockstep
from envreplica.conformance.lock.serve import ImplServer, ModelServer, serve
from envreplica.model import lock as ml
from envreplica.spec import schema as S

PY = shlex.quote(sys.executable)
ADAPTER = f"{PY} -m envreplica.cli.main adapter --protocol lock"
ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
#: Examples of each adapter run: measured, ``impl.lock`` through its adapter reaches every required item at 120
#: (as the in-process run does at the same derandomized draws), and each model less one fix below diverges
#: within 120.
EXAMPLES = 120


def _lines(server, *requests) -> list[dict]:
    out = io.StringIO()
    serve(server, io.BytesIO("".join(json.dumps({"id": i, **r}) + "\n" for i, r in enumerate(requests, 1))
                             .encode()), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


RESET = {"op": "reset", "processes": [{"pid": 1, "start": 1, "ns": 0}, {"pid": 2, "start": 1, "ns": 0}],
         "maxTries": 1, "lock": {"state": "absent"}}


@pytest.mark.parametrize("make", [ImplServer, lambda: ModelServer(ml.Variant.FIXED.fixes, "fixed"),
                                  lambda: ModelServer(frozenset(), "seed")], ids=["impl", "model-fixed", "model-seed"])
def test_the_project_adapters_answer_in_the_schemas_shapes(make):
    answers = _lines(make(), {"op": "hello", "protocol": protocol.PROTOCOL}, RESET, {"op": "spawn", "process": 0},
                     {"op": "step", "process": 0, "nonce": "0000000000000000"}, {"op": "observe"},
                     {"op": "kill", "process": 0, "zombie": True}, {"op": "reap", "process": 0},
                     {"op": "reuse-pid", "ns": 0, "pid": 1}, {"op": "observe"})
    response = Draft202012Validator(S.standalone("LockResponse"))
    for a in answers:
        response.validate(a)
        assert a["ok"], a
    Draft202012Validator(S.standalone("LockHello")).validate(answers[0]["result"])
    for event in answers[2:4]:
        Draft202012Validator(S.standalone("LockEvent")).validate(event["result"])
    for obs in (answers[4], answers[8]):
        Draft202012Validator(S.standalone("LockObservation")).validate(obs["result"])


@pytest.mark.parametrize("request_, kind, words", [
    ({"op": "step", "process": 0}, "invalid", "out of order"),
    ({"op": "leave", "process": 0, "effect": "ok"}, "invalid", "out of order"),
    ({"op": "spawn", "process": 7}, "invalid", "'process' 7"),
    ({"op": "reap", "process": 1}, "invalid", "out of order"),
    ({"op": "kill", "process": 0, "zombie": "yes"}, "invalid", "'zombie'"),
    ({"op": "frobnicate"}, "unsupported", "unknown op"),
])
@pytest.mark.parametrize("make", [ImplServer, lambda: ModelServer(ml.Variant.FIXED.fixes, "fixed")],
                         ids=["impl", "model"])
def test_a_move_out_of_order_or_a_malformed_field_is_refused_naming_it(make, request_, kind, words):
    answer = _lines(make(), RESET, request_)[1]
    assert answer["ok"] is False and answer["error"]["type"] == kind and words in answer["error"]["message"], answer


def test_before_reset_every_move_is_invalid():
    answer = _lines(ImplServer(), {"op": "observe"})[0]
    assert answer["error"]["type"] == "invalid" and "reset first" in answer["error"]["message"]


def _run(command: str, variant: ml.Variant, examples: int = EXAMPLES):
    shared = AdapterShared(command, variant)
    try:
        return shared, run_lock_lockstep(examples, bounds=shared.bounds, side=shared.side,
                                         properties=shared.properties)
    finally:
        shared.close()


def test_impl_lock_through_its_adapter_passes_and_reaches_what_is_required():
    shared, report = _run(f"{ADAPTER} --impl lock", ml.Variant.FIXED)
    assert report.passed and report.adapter_failure is None, report.trace(report.divergence.cfg)
    assert report.coverage.unreached(required_for("claim", 1)) == []


def test_the_model_of_the_seed_passes_under_seed():
    shared, report = _run(f"{ADAPTER} --impl model --variant seed", ml.Variant.SEED, 60)
    assert shared.decl.design == "seed" and not shared.properties
    assert report.passed, report.trace(report.divergence.cfg)
    assert report.coverage.unreached(required_for("seed", 1)) == []


@pytest.mark.parametrize("fix, finding", [
    (ml.Fix.TRUE_ANSWERS, "F14"), (ml.Fix.NAMESPACE, "F11"),
    pytest.param(ml.Fix.ZOMBIE_DEAD, "F12", marks=pytest.mark.slow)])  # found at about example 300 of 400
def test_fixed_less_one_fix_diverges_named_as_that_fixs_finding(fix, finding):
    _, report = _run(f"{ADAPTER} --impl model --variant fixed --without {fix.value}", ml.Variant.FIXED, 400)
    assert not report.passed, f"fixed without {fix.value} was not caught"
    named = finding_of(report.divergence, ml.Variant.FIXED)
    assert named is not None and named.startswith(f"{finding}:"), (named, report.trace(report.divergence.cfg))
    assert len(report.divergence.moves) <= 12, report.trace(report.divergence.cfg)


def test_the_seed_under_fixed_breaks_a_property_on_moves_both_sides_took():
    _, report = _run(f"{ADAPTER} --impl model --variant seed", ml.Variant.FIXED, 60)
    d = report.divergence
    assert d is not None and d.key == "property", report.trace(d.cfg if d else None)
    named = finding_of(d, ml.Variant.FIXED)
    assert named is not None and named.startswith("F"), named
    assert len(d.moves) <= 12


def _cli(tmp_path: Path, adapter: str, variant: str, examples: int = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*ENVREPLICA, "conformance", "--protocol", "lock", "--adapter", adapter, "--variant",
                           variant, "--max-examples", str(examples), "--out", str(tmp_path / "out"), "--junit",
                           str(tmp_path / "junit.xml"), "--report", str(tmp_path / "run.html")],
                          capture_output=True, text=True, timeout=600)


def test_the_command_line_agrees_exit_0(tmp_path):
    done = _cli(tmp_path, f"{ADAPTER} --impl lock", "fixed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and (tmp_path / "junit.xml").exists() and (tmp_path / "run.html").exists()


def test_the_command_line_divergence_exit_1_with_its_traces_and_finding(tmp_path):
    done = _cli(tmp_path, f"{ADAPTER} --impl model --variant fixed --without true-answers", "fixed", 150)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "finding F14:" in done.stdout
    itf = list((tmp_path / "out").glob("*.itf.json"))
    assert len(itf) == 1 and itf[0].with_name(itf[0].name.replace(".itf.json", ".html")).exists()
    doc = json.loads(itf[0].read_text())
    assert doc["#meta"]["protocol"] == "lock" and doc["#meta"]["finding"] == "F14"
    assert doc["states"][-1]["agree"] is False and all(s["agree"] for s in doc["states"][:-1])
    assert "F14" in (tmp_path / "junit.xml").read_text()


def test_an_adapter_that_cannot_run_is_exit_2_one_line(tmp_path):
    done = _cli(tmp_path, f"{PY} -c 'import sys; sys.exit(3)'", "fixed")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "`hello`" in done.stderr


def test_an_adapter_that_breaks_mid_run_is_exit_2_naming_the_move(tmp_path):
    """An adapter that answers ``hello`` and ``reset`` as ``impl.lock`` does, then dies on its third step."""
    script = tmp_path / "dies.py"
    script.write_text(
        "import io, json, sys\n"
        "from envreplica.conformance.lock.serve import ImplServer, respond\n"
        "server, steps = ImplServer(), 0\n"
        "for line in sys.stdin:\n"
        "    if json.loads(line).get('op') == 'step':\n"
        "        steps += 1\n"
        "        if steps == 3:\n"
        "            sys.exit(9)\n"
        "    print(json.dumps(respond(server, line.rstrip('\\n'))), flush=True)\n")
    done = _cli(tmp_path, f"{PY} {shlex.quote(str(script))}", "fixed")
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()
    assert len(line) == 1 and "move #" in line[0] and "`step" in line[0], done.stderr
