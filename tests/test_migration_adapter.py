"""The migration adapter protocol (docs/protocol.md, section 11) and ``envreplica conformance --protocol migration``.

* every move is a request and back (``protocol.request_of`` / ``action_of``); ``hello`` round-trips and a wrong
  declaration is refused with the field it names;
* the project's adapters answer in the schema's shapes (``envreplica schema MigrationHello`` ...);
* through the command line: ``impl.paired`` passes under ``--variant fixed``; the model of the seed's steps
  passes under ``--variant seed`` and fails under ``--variant fixed`` with a shrunk counterexample named as the
  finding it is (F4, F5 or F6); the model of the fixed steps fails under ``--variant seed``; an adapter that
  cannot run is exit 2, not a verdict;
* the bounds follow the declaration (readings, faults, the evidence order) and the variant.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from envreplica.conformance.migration import protocol as P
from envreplica.conformance.migration.serve import ModelServer, PairedServer, serve
from envreplica.conformance.migration.sides import LOCKSTEP_BOUNDS
from envreplica.model import migration as mm
from envreplica.spec import schema as S

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(S.standalone(name))


@pytest.mark.parametrize("action", [
    mm.Invoke(mm.Role.MIGRATE), mm.Invoke(mm.Role.MIGRATE, mm.InputFault.SYMLINK), mm.Invoke(mm.Role.RECOVER),
    mm.Step(3), mm.Crash(1), mm.Connect(1), mm.ReadOnly(0), mm.Writable(1), mm.Edit(mm.Doc.RESULT),
    mm.Edit(mm.Doc.BACKUP, 1), mm.Repair(mm.Doc.BACKUP, 0), mm.Repair(mm.Doc.RECOVERY)])
def test_every_move_is_a_request_and_back(action):
    request = P.request_of(action)
    assert P.action_of(request) == action
    _validator("MigrationRequest").validate({"id": 1, **request})


def test_the_writers_moves_name_no_store_the_server_fills_it_in():
    for action in (mm.Write(1, 2), mm.Disconnect(1), mm.Lock(0), mm.Unlock(1)):
        request = P.request_of(action)
        assert "store" not in request
        _validator("MigrationRequest").validate({"id": 1, **request})
        assert type(P.action_of(request)) is type(action)


@pytest.mark.parametrize("request_, words", [
    ({"op": "step", "invocation": -1}, "'invocation'"), ({"op": "connect", "store": "other"}, "'store'"),
    ({"op": "write", "version": 3}, "'version'"), ({"op": "invoke", "role": "delete"}, "'role'"),
    ({"op": "readOnly", "store": "run", "on": "yes"}, "'on'"), ({"op": "frobnicate"}, "unknown op")])
def test_a_malformed_request_says_which_field(request_, words):
    with pytest.raises(ValueError, match=words):
        P.action_of(request_)


def test_hello_round_trips_and_declares_the_bounds():
    decl = ModelServer(mm.MigrationVariant.SEED).decl
    hello = P.hello_of(decl)
    _validator("MigrationHello").validate(hello)
    again = P.parse_hello(hello)
    assert again == decl
    seed = P.bounds_for(again, mm.MigrationVariant.SEED, LOCKSTEP_BOUNDS)
    assert seed.fixes == frozenset() and seed.faults == frozenset(mm.Fault)
    fixed = P.bounds_for(again, mm.MigrationVariant.FIXED, LOCKSTEP_BOUNDS)
    # the seed's order of the evidence check: declared, kept; the stores' proof of completion: the fixed variant's
    assert fixed.fixes == frozenset().union(*P.FINDING_FIXES.values())
    paired = PairedServer.__new__(PairedServer)  # its declaration only (no stores made)
    from envreplica.conformance.migration.serve import paired_declaration

    decl = paired_declaration()
    assert P.bounds_for(decl, mm.MigrationVariant.FIXED, LOCKSTEP_BOUNDS).fixes == frozenset(mm.Fix)
    assert decl.silent == frozenset({mm.Pc.RETAIN_RUN, mm.Pc.RETAIN_RESOURCE})
    del paired


def test_a_seed_without_faults_is_held_without_them():
    hello = {"protocol": P.PROTOCOL, "steps": [pc.value for pc in mm.Pc], "readings": {"lock": "refuse"}}
    decl = P.parse_hello(hello)
    cfg = P.bounds_for(decl, mm.MigrationVariant.FIXED, LOCKSTEP_BOUNDS)
    assert cfg.faults == frozenset() and cfg.fault_actions == 0 and not decl.exit_status
    assert decl.modes == ("process",) and decl.silent == frozenset()
    assert not any(isinstance(a, (mm.Edit, mm.Lock, mm.ReadOnly)) for a in mm.enabled(cfg, mm.init(cfg)))


@pytest.mark.parametrize("change, words", [
    ({"protocol": "envreplica/1"}, "speaks"), ({"steps": []}, "'steps'"), ({"steps": ["prepare", "fly"]}, "fly"),
    ({"readings": {"backup": "copy"}}, "readings.backup"), ({"evidence": "never"}, "'evidence'"),
    ({"faults": ["flood"]}, "fault"), ({"modes": "process"}, "'modes'")])
def test_a_wrong_declaration_names_its_field(change, words):
    hello = {"protocol": P.PROTOCOL, "steps": ["prepare"], **change}
    with pytest.raises(P.ProtocolError, match=words):
        P.parse_hello(hello)


def _talk(server, requests):
    import io

    out = io.StringIO()
    serve(server, io.StringIO("".join(json.dumps({"id": i, **r}) + "\n" for i, r in enumerate(requests, 1))), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_model_adapter_answers_in_the_schemas_shapes():
    answers = _talk(ModelServer(mm.MigrationVariant.FIXED), [
        {"op": "hello", "protocol": P.PROTOCOL}, {"op": "reset"}, {"op": "invoke", "role": "migrate"},
        *[{"op": "step", "invocation": 0}] * 3, {"op": "connect", "store": "resource"}, {"op": "write", "version": 2},
        {"op": "observe"}, {"op": "step", "invocation": 7}, {"op": "fly"}, {"op": "reset", "stores": []}])
    for a in answers:
        _validator("MigrationResponse").validate(a)
    assert [a["ok"] for a in answers] == [True] * 9 + [False] * 3
    assert answers[3]["result"] == {"event": "step", "step": "prepare"}
    assert answers[7]["result"] == {"write": "fence"}  # a version-2 writer on a version-1 store
    _validator("MigrationObservation").validate(answers[8]["result"])
    assert answers[8]["result"]["request"] == "published"
    assert [a["error"]["type"] for a in answers[9:]] == ["invalid", "unsupported", "invalid"]


def _conformance(adapter: str, variant: str, examples: int, tmp_path: Path, *extra: str):
    return subprocess.run([*ENVREPLICA, "conformance", "--protocol", "migration", "--variant", variant,
                           "--adapter", adapter, "--max-examples", str(examples), "--out", str(tmp_path / "out"),
                           *extra], capture_output=True, text=True, timeout=1800)


def _adapter(*args: str) -> str:
    return " ".join([sys.executable, "-m", "envreplica.cli.main", "adapter", "--protocol", "migration", *args])


def test_impl_paired_passes_the_fixed_gate_through_the_adapter(tmp_path):
    junit, page = tmp_path / "m.xml", tmp_path / "m.html"
    done = _conformance(_adapter("--impl", "paired"), "fixed", 12, tmp_path, "--junit", str(junit),
                        "--report", str(page))
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stdout.split())  # the console wraps long lines at spaces
    assert "PASS" in said and "exit statuses compared" in said
    assert 'failures="0"' in junit.read_text() and "PASS" in page.read_text()


def test_the_seeds_steps_pass_seed_and_fail_fixed_as_a_finding(tmp_path):
    seed = _adapter("--impl", "model", "--variant", "seed")
    done = _conformance(seed, "seed", 30, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    junit, page = tmp_path / "f.xml", tmp_path / "f.html"
    done = _conformance(seed, "fixed", 60, tmp_path, "--junit", str(junit), "--report", str(page))
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stdout.split())  # the console wraps long lines at spaces
    found = [f for f in ("F4", "F5", "F6") if "DIVERGENCE (outcome" in said and f"{f}: " in said]
    assert found, done.stdout
    shrunk = int(done.stdout.split("shrunk to ")[1].split(" moves")[0])
    assert shrunk <= 30, done.stdout  # F4's shortest is 21 moves here (24 model steps, 3 silent ones none)
    assert 'failures="1"' in junit.read_text()
    text = page.read_text()  # the run page: the divergence (the move where they part marked) before the coverage
    assert found[0] in text and 'class="step parting breaks' in text and 'class="divergence"' in text
    assert text.index('class="divergence"') < text.index('id="coverage"')
    assert said.count(f"{found[0]}: ") == 1  # the finding said once (its sentence heads the trace)
    assert (tmp_path / "out" / "migration-lockstep.jsonl").is_file()


def test_the_fixed_steps_fail_the_seed_gate(tmp_path):
    done = _conformance(_adapter("--impl", "model", "--variant", "fixed"), "seed", 60, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DIVERGENCE" in done.stdout


def test_an_adapter_that_cannot_run_is_not_a_verdict(tmp_path):
    for adapter, words in (("/bin/false", "exited with status 1"), ("cat", "answered hello with an error"),
                           (f"{sys.executable} -c 'print(1)'", "not a JSON object")):
        done = _conformance(adapter, "fixed", 2, tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "nothing was checked" in done.stderr and words in done.stderr, done.stderr
    done = _conformance("cat", "fix-f1", 2, tmp_path)
    assert done.returncode == 2 and "seed or fixed" in done.stderr


def test_reset_sets_up_stores_and_both_adapters_answer_alike():
    """Two stores at version 2 already: the model and impl.paired refuse alike (content_only_route_required, exit
    2); a recovery with nothing published is refused alike; a store the adapter cannot build is unsupported."""
    v2 = [{"version": 2, "data": "migrated"}] * 2
    requests = [{"op": "reset", "stores": v2}, {"op": "observe"}, {"op": "invoke", "role": "migrate"},
                {"op": "connect", "store": "run"}, {"op": "step", "invocation": 0}, {"op": "disconnect"},
                {"op": "invoke", "role": "recover"}, {"op": "step", "invocation": 1},
                {"op": "observe"}, {"op": "reset", "stores": [{"version": 2, "data": "original"}] * 2},
                {"op": "reset", "stores": v2[:1]}]
    model = _talk(ModelServer(mm.MigrationVariant.FIXED), requests)
    paired = _talk(PairedServer(), requests)
    for answers in (model, paired):  # the seed's order: nothing to migrate, before the drain (a writer connected)
        assert answers[4]["result"]["refusal"] == "content_only_route_required"
        assert answers[4]["result"]["status"] == 2
        assert answers[7]["result"]["refusal"] == "no_migration_request"
        assert answers[1]["result"]["stores"][0] == {"version": 2, "data": "migrated", "admission": "open",
                                                     "backup": None}
        assert answers[10]["error"]["type"] == "invalid"
    for i in (1, 4, 7, 8):
        a, b = model[i]["result"], paired[i]["result"]
        a.pop("message", None), b.pop("message", None)
        assert a == b, i
    assert model[9]["ok"] and paired[9]["error"]["type"] == "unsupported"  # the model holds any image


def test_an_adapter_that_dies_during_the_run_is_exit_2_with_one_line(tmp_path):
    """An adapter that answers ``hello`` and dies at its first ``reset``: not a verdict (exit 2, one line on stderr,
    no traceback), and the JUnit case is an error, not a failure."""
    script = tmp_path / "dies.py"
    script.write_text(
        "import json, sys\n"
        f"hello = {P.hello_of(ModelServer(mm.MigrationVariant.FIXED).decl)!r}\n"
        "line = sys.stdin.readline()\n"
        "print(json.dumps({'id': json.loads(line)['id'], 'ok': True, 'result': hello}), flush=True)\n"
        "sys.stdin.readline()\n"
        "sys.exit(7)\n")
    junit = tmp_path / "j.xml"
    done = _conformance(f"{sys.executable} {script}", "fixed", 2, tmp_path, "--junit", str(junit))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing after it was judged" in lines[0] and "status 7" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and 'errors="1"' in junit.read_text()
