"""The TypeScript adapter kit (``adapters/typescript``), first with the seed's own code behind it.

* The gate agrees with the seed's TypeScript: the lockstep of ``envreplica conformance --variant seed`` through the
  kit passes the ``ci`` profile, tables compared through ``state``, and every request and response of it follows
  the contract's JSON Schema.
* The gate finds the seed's flaws in that code: held to ``fixed`` with the kit's host sealing text exactly
  (``--sealing exact``: the host with F3 fixed, so the seed's file is judged alone), the shrunk divergence is F1's
  or F2's, and the same trace with the value in the store installs it under an epoch the replica no longer keeps,
  where ``fixed`` withholds it; the run's HTML report shows the divergence. With the seed's host sealing
  (``utf8``, the default) it is F3's: a value's text changed. The command names the finding each time (once),
  and the page beside the trace too.
* The kit itself: the reliability suite's hostile lines are each answered as the contract says; strict TypeScript,
  types generated from the schema and up to date; the kit's own tests (``npm test``: its test host, the seed's glue
  type-checked with no cast, a type error refused before it runs); bad options and sources are one line and exit 2,
  and an adapter that dies mid-run is reported with its last lines of standard error.
* The kit as a package: ``npm pack`` makes a tarball that installs into an empty project, whose command runs the
  seed's file and a module importing ``@envreplica/adapter-kit/host``.

Without Node or the seed's file these tests skip with one line saying what to do (``typescript_kit``), except under
``CI``, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.external import SubprocessDriver
from envreplica.conformance.replica import compare_responses, read_requests
from envreplica.model.store import legacy_envelope, staged_envelope

from typescript_kit import (KIT, ROOT, install_packed_kit, kit_command, pack_kit, require_kit, seed_adapter,
                           seed_source)

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]


def conformance(adapter: str, variant: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ENVREPLICA, "conformance", "--adapter", adapter, "--variant", variant, "--out", str(out),
                           *extra], capture_output=True, text=True, cwd=ROOT, timeout=900)


def npm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["npm", "run", "--silent", *args], capture_output=True, text=True, cwd=KIT, timeout=600)


# ---------------------------------------------------------------------------
# The seed's own code, held to the model
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_seed_agrees_with_variant_seed_and_follows_the_schema(tmp_path):
    """The ci profile, tables compared through ``state`` after each step; and every request and response of the
    run (the kit's ``state`` documents and nested exchanges included) follows the contract's JSON Schema. The same
    lockstep as ``envreplica conformance`` (whose command line runs it in ``test_workflow_doc.py``)."""
    from envreplica.conformance.replica import lockstep_settings, run_lockstep
    from schema_check import Contract

    contract = Contract()
    adapter = seed_adapter()

    class Recording(SubprocessDriver):
        def handle(self, request):
            response = super().handle(request)
            contract.exchange(request, response)
            return response

    report = run_lockstep(lambda: Recording(adapter), variant="seed", settings=lockstep_settings("ci"),
                          out_dir=tmp_path / "out")
    assert report.ok, report.failure
    assert report.examples >= 800
    assert "compared table by table" in report.tables, report.tables  # the kit's state, every step
    assert report.extensions == "", report.extensions  # ready, diagnostics and crashAfterCommit all generated
    assert contract.problems == [], contract.problems[:5]
    assert contract.responses > 20_000
    assert {"StateDocument", "PageResult", "ApplyResult", "Crashed", "Readiness", "Diagnosis"} <= contract.results_seen


def _replay(requests: list[dict], driver) -> list[dict]:
    return [driver.handle(json.loads(json.dumps(r))) for r in requests]


def _parts(responses: list[dict], model: list[dict]) -> list[str]:
    return [d for d in (compare_responses(m, i) for m, i in zip(model, responses)) if d]


def _with_values(requests: list[dict]) -> list[dict]:
    """The trace with a correct envelope stored, just before the last request, for every record it names."""
    org = next(r["orgId"] for r in requests if r.get("op") == "begin")
    puts, seen = [], set()

    def visit(request: dict) -> None:
        frame = request.get("frame") or {}
        records = frame.get("records") or ([frame["state"]] if "state" in frame else [])
        for record in records:
            ref, key, project = record["head"]["valueRef"], record["key"], frame["projectId"]
            if ref is None or (project, key, json.dumps(ref)) in seen:
                continue
            seen.add((project, key, json.dumps(ref)))
            raw = (staged_envelope(org, project, key, ref["stagingId"], "hunter2") if ref["kind"] == "staged"
                   else legacy_envelope(project, key, "hunter2"))
            puts.append({"id": 900_000 + len(puts), "op": "store.put", "projectId": project, "key": key, "ref": ref,
                         "raw": raw})
        for nested in request.get("duringFetch") or []:
            visit(nested)

    visit(requests[-1])
    return requests[:-1] + puts + requests[-1:]


def _installed_under_unkept_epoch(doc: dict) -> list[str]:
    kept = set(doc["authority"]["policyEpochs"])
    return [f"{table} {row['projectId']}/{row['key']}" for table in ("records", "stageRecords") for row in doc[table]
            if row["materialization"]["kind"] == "installed" and row["state"]["policyEpoch"] not in kept]


@pytest.mark.slow
def test_fixed_finds_f1_or_f2_in_the_seeds_code(tmp_path):
    out = tmp_path / "out"
    report = tmp_path / "report.html"
    run = conformance(seed_adapter("--sealing", "exact"), "fixed", out, "--profile", "ci", "--report", str(report))
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-2000:]
    requests = read_requests(out / "lockstep-fixed.jsonl")
    assert len(requests) <= 12, run.stdout[-4000:]

    # The kit answers the shrunk trace exactly as the model of the seed does, and not as `fixed`.
    impl = SubprocessDriver(seed_adapter("--sealing", "exact"))
    try:
        answers = _replay(requests, impl)
    finally:
        impl.close()
    by_variant = {v: _replay(requests, ModelDriver(v)) for v in ("seed", "fix-f1", "fixed")}
    assert _parts(answers, by_variant["seed"]) == []
    assert _parts(answers, by_variant["fixed"]) != []
    finding = "F1" if _parts(answers, by_variant["fix-f1"]) else "F2"  # F1's fix alone changes the answer, or not
    said = " ".join(run.stdout.split())  # the console wraps long lines at spaces
    assert said.count(f"{finding}: ") == 1, run.stdout[-4000:]  # the command names it (once)

    # With the value in the store, the seed's code installs it under an epoch the replica no longer keeps;
    # `fixed` withholds it.
    valued = _with_values(requests)
    impl = SubprocessDriver(seed_adapter("--sealing", "exact"))
    try:
        _replay(valued, impl)
        seeds_tables = impl.handle({"id": 1_000_000_000, "op": "state"})["result"]
    finally:
        impl.close()
    fixed = ModelDriver("fixed")
    _replay(valued, fixed)
    assert _installed_under_unkept_epoch(seeds_tables), (finding, seeds_tables)
    assert _installed_under_unkept_epoch(fixed.state_doc()) == []

    # The run's HTML report shows it: the verdict, and the step where the two part.
    page = report.read_text(encoding="utf-8")
    assert 'class="verdict diverged"' in page
    assert f'id="divergence" data-step="{len(requests)}"' in page


@pytest.mark.slow
def test_fixed_with_the_seeds_sealing_finds_f3(tmp_path):
    out = tmp_path / "out"
    run = conformance(seed_adapter(), "fixed", out, "--profile", "ci")
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-2000:]
    assert "value: differs" in run.stdout  # a stored value's text, not a gate decision
    said = " ".join(run.stdout.split())  # the console wraps long lines at spaces
    assert said.count("F3: a value with a lone surrogate is served as U+FFFD") == 1, run.stdout[-4000:]
    assert "F3: a value with a lone surrogate" in (out / "lockstep-fixed.html").read_text(encoding="utf-8")
    requests = read_requests(out / "lockstep-fixed.jsonl")
    assert any("\\ud8" in json.dumps(r) or "\\udc" in json.dumps(r) or "\\ude" in json.dumps(r) for r in requests)


# ---------------------------------------------------------------------------
# The contract, both ways
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_generated_types_are_up_to_date_and_the_kit_is_strict_typescript():
    require_kit()
    check = npm("check-types")
    assert check.returncode == 0, check.stdout + check.stderr
    typecheck = npm("typecheck")
    assert typecheck.returncode == 0, typecheck.stdout + typecheck.stderr


@pytest.mark.slow
def test_the_kits_own_tests():
    """``npm test`` in the kit (node --test): the test host (counted write commits, rollback, empty, reopen, sealing
    a lone surrogate, a wrong key, the MAC, the frame checks), the seed's glue type-checked under ``tsc --strict``
    with no cast (against the seed's own file, its host imports mapped as ``--source`` maps them), a type error in
    the seed's file refused (exit 2) and run with ``--no-typecheck``, the seed extractor. None skipped."""
    require_kit()
    env = {**os.environ, "ENVREPLICA_SEED_SOURCE": str(seed_source())}
    run = subprocess.run(["npm", "test", "--silent"], capture_output=True, text=True, cwd=KIT, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout and "# skipped 0" in run.stdout, run.stdout[-2000:]


#: A replica of one's own in an empty project that installed the packed kit: it imports both of the package's entry
#: points (type-checked by the kit under strict defaults, then run), refuses every frame through the host's checks
#: (answered invalid by the kit's default errorKind), and keeps its status in a TestDatabase.
PACKED_IMPL = """
import { CONSTANTS, type Host, type Replica, type Status } from "@envreplica/adapter-kit";
import { checkBegin, checkCommit, checkDelivery, checkPage, InvalidInputError, open, openDatabase, seal }
  from "@envreplica/adapter-kit/host";

export function createReplica(host: Host): Replica {
  const db = openDatabase(host, {
    schema: "CREATE TABLE IF NOT EXISTS authority (id TEXT PRIMARY KEY, activated INTEGER NOT NULL)",
    seed: (c) => { c.prepare("INSERT OR IGNORE INTO authority VALUES ('replica', 0)").run(); },
  });
  const readStatus = (): Status => db.read((c) => {
    const row = c.prepare("SELECT activated FROM authority").get() as { activated: number };
    return { activated: row.activated === 1, gateOpen: false, attemptId: null, orgId: null, appliedThrough: null,
      policyEpochs: [], projectIds: [] };
  });
  if (open(host, seal(host, "\\ud800")) !== "\\ud800" || host.config().prefix !== CONSTANTS.defaultPrefix) {
    throw new Error("the host does not round-trip");
  }
  const toy = (): never => { throw new InvalidInputError("invalid: this toy takes no frame"); };
  return {
    begin: (f, e, o) => { checkBegin(f, e, o); return toy(); },
    applyPage: async (f) => { checkPage(f); return toy(); },
    applyDelivery: async (f) => { checkDelivery(f); return toy(); },
    complete: (f) => { checkCommit(f); return toy(); },
    closeGate: () => {}, readStatus, readSnapshot: () => null, listReceipts: () => [],
    empty: () => db.empty(), reopen: () => db.reopen(), close: () => db.close(),
  };
}
"""


@pytest.mark.slow
def test_the_packed_kit_installs_into_an_empty_project_and_runs(tmp_path):
    tarball, files = pack_kit(tmp_path)
    assert {"package.json", "README.md", "bin/envreplica-ts-adapter.js", "scripts/extract-seed.mjs", "dist/cli.js",
            "dist/kit/index.js", "dist/kit/index.d.ts", "dist/host/index.js", "dist/host/index.d.ts"} <= files
    assert not [f for f in files if f.startswith(("test/", "node_modules/", "examples/")) or ".cache" in f]

    project = tmp_path / "a-replica"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "a-replica", "private": True, "type": "module"}))
    install_packed_kit(project, tarball)

    def npx(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(["npx", "--no-install", *args], input=stdin, capture_output=True, text=True,
                              cwd=project, timeout=300)

    usage = npx("envreplica-ts-adapter", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: envreplica-ts-adapter"), usage.stderr
    assert npx("envreplica-extract-seed").returncode == 2  # usage: SEED_DIFF OUT_DIR

    (project / "replica.ts").write_text(PACKED_IMPL)
    lines = [{"id": 1, "op": "reset"}, {"id": 2, "op": "status"},
             {"id": 3, "op": "begin", "frame": {}, "keptPolicyEpochs": [], "orgId": "o1"},
             {"id": 4, "op": "restart"}, {"id": 5, "op": "status"}]
    requests = "".join(json.dumps(line) + "\n" for line in lines)
    run = npx("envreplica-ts-adapter", "--impl", "replica.ts", stdin=requests)
    assert run.returncode == 0, run.stderr
    answers = [json.loads(line) for line in run.stdout.splitlines()]
    assert [a["ok"] for a in answers] == [True, True, False, True, True], answers
    assert answers[1]["result"]["activated"] is False
    assert answers[2]["error"]["type"] == "invalid" and "frame.attempt" in answers[2]["error"]["message"]

    seed = npx("envreplica-ts-adapter", "--source", str(seed_source()), stdin=requests)
    assert seed.returncode == 0, seed.stderr
    assert [json.loads(line)["ok"] for line in seed.stdout.splitlines()] == [True, True, False, True, True]


# ---------------------------------------------------------------------------
# Bad input, and an adapter that dies
# ---------------------------------------------------------------------------


def _kit(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    require_kit()
    return subprocess.run(["node", str(KIT / "bin" / "envreplica-ts-adapter.js"), *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def _one_line_exit_2(run: subprocess.CompletedProcess, *words: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert lines[0].startswith("envreplica-ts-adapter: "), lines
    for word in words:
        assert word in lines[0], lines[0]
    assert run.stdout == ""


def test_a_missing_source_is_one_line(tmp_path):
    _one_line_exit_2(_kit("--source", str(tmp_path / "nope.ts")), "no such file")


def test_a_source_that_is_not_typescript_is_one_line(tmp_path):
    text = tmp_path / "replica.py"
    text.write_text("print('hello')\n")
    _one_line_exit_2(_kit("--source", str(text)), "not TypeScript")
    broken = tmp_path / "replica.ts"
    broken.write_text("export function beginProjectEnvReplica( {\n")
    _one_line_exit_2(_kit("--source", str(broken)), "does not compile")


def test_a_source_without_an_export_the_kit_needs_is_one_line(tmp_path):
    source = seed_source().read_text(encoding="utf-8")
    partial = tmp_path / "project-env-replica.ts"
    partial.write_text(source.replace("export function readProjectEnvReplicaSnapshot",
                                      "function readProjectEnvReplicaSnapshot"))
    _one_line_exit_2(_kit("--source", str(partial)), "lacks the export readProjectEnvReplicaSnapshot")


def test_a_checkout_of_the_host_package_is_a_source(tmp_path):
    lib = tmp_path / "host" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(seed_source(), lib / "project-env-replica.ts")
    run = _kit("--source", str(tmp_path / "host"), stdin='{"id":1,"op":"reset"}\n{"id":2,"op":"status"}\n')
    assert run.returncode == 0, run.stderr
    assert [json.loads(line)["ok"] for line in run.stdout.splitlines()] == [True, True]
    _one_line_exit_2(_kit("--source", str(tmp_path)), "a directory without")


def test_a_db_kept_across_processes_reopens_with_its_gate_closed(tmp_path):
    db = str(tmp_path / "replica.db")
    opening = [
        {"id": 1, "op": "reset"},
        {"id": 2, "op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": []},
         "keptPolicyEpochs": [1], "orgId": "o1"},
        {"id": 3, "op": "commit", "frame": {"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 0},
                                            "versions": []}},
        {"id": 4, "op": "status"},
    ]
    first = _kit("--source", str(seed_source()), "--db", db, stdin="".join(json.dumps(r) + "\n" for r in opening))
    assert json.loads(first.stdout.splitlines()[-1])["result"]["gateOpen"] is True, first.stdout + first.stderr
    again = _kit("--source", str(seed_source()), "--db", db, stdin='{"id": 5, "op": "status"}\n')
    status = json.loads(again.stdout)["result"]
    assert status["activated"] is True and status["orgId"] == "o1" and status["gateOpen"] is False


def test_bad_options_are_one_line(tmp_path):
    _one_line_exit_2(_kit(), "exactly one of --source and --impl")
    _one_line_exit_2(_kit("--source", str(seed_source()), "--sealing", "latin1"), "--sealing must be")
    _one_line_exit_2(_kit("--source", str(seed_source()), "--frobnicate"), "Unknown option")


#: An implementation of one's own, in TypeScript: a toy that knows only its status, enough to see the kit's side.
TOY_PLUG = """
import type { Host, Replica, Status } from "KIT/src/kit/index.js";

class Invalid extends Error {}
class Corrupt extends Error {}

export function createReplica(host: Host): Replica {
  let status: Status = { activated: false, gateOpen: false, attemptId: null, orgId: null, appliedThrough: null,
    policyEpochs: [], projectIds: [] };
  const refuse = (): never => { throw new Invalid("invalid: this toy takes no frames"); };
  return {
    begin: refuse, complete: refuse,
    applyPage: async () => refuse(), applyDelivery: async () => refuse(),
    closeGate: () => {},
    readStatus: () => { if (host.config().prefix === "/broken") throw new Corrupt("corrupt"); return status; },
    readSnapshot: () => null, listReceipts: () => [],
    empty: () => {}, reopen: () => {}, close: () => {},
    errorKind: (e) => (e instanceof Invalid ? "invalid" : e instanceof Corrupt ? "corrupt" : undefined),
  };
}
"""


@pytest.mark.slow
def test_an_implementation_of_your_own_in_typescript_plugs_in(tmp_path):
    require_kit()
    plug = tmp_path / "envreplica-plug.ts"
    plug.write_text(TOY_PLUG.replace("KIT", str(KIT)))
    lines = [
        {"id": 1, "op": "reset"},
        {"id": 2, "op": "status"},
        {"id": 3, "op": "commit", "frame": {}},
        {"id": 4, "op": "page", "frame": {}, "crashAfterCommit": 1},
        {"id": 5, "op": "state"},
        {"id": 6, "op": "ready", "timeoutMs": 0},
        {"id": 7, "op": "diagnostics", "projectIds": []},
        {"id": 8, "op": "reset", "config": {"prefix": "/broken"}},
        {"id": 9, "op": "status"},
        {"id": 10, "op": "begin"},
    ]
    run = _kit("--impl", str(plug), stdin="".join(json.dumps(line) + "\n" for line in lines))
    assert run.returncode == 0, run.stderr
    answers = [json.loads(line) for line in run.stdout.splitlines()]
    assert [a["id"] for a in answers] == [line["id"] for line in lines]
    kinds = [a["result"] if a["ok"] else a["error"]["type"] for a in answers]
    assert kinds[0] == {} and kinds[1]["activated"] is False
    assert kinds[2:6] == ["invalid", "unsupported", "unsupported", "unsupported"]  # crash, state, ready not offered
    assert kinds[6] == {"reason": "not_activated", "message": kinds[6]["message"]}  # derived by the kit
    assert kinds[7:] == [{}, "corrupt", "invalid"]  # begin without its fields: the kit's own check


@pytest.mark.slow
def test_hostile_lines_through_the_kit(tmp_path):
    """The reliability suite's hostile harness, through the kit on the seed's code: every malformed line answered
    once, invalid or unsupported, the id echoed exactly when it was an integer, no planted secret echoed, the
    replica unchanged, a nested run equal to a twin's, no crash and no hang."""
    from envreplica.reliability.hostile import CATEGORIES, run_hostile

    report = run_hostile(1000, seed=0, workdir=tmp_path, adapter_command=seed_adapter("--db", "{db}"))
    assert report.frames == 1000 and set(report.by_category) == set(CATEGORIES)
    assert report.nested_run > 0


@pytest.mark.slow
def test_an_adapter_that_dies_mid_run_is_reported_with_its_last_words(tmp_path):
    require_kit()
    module = tmp_path / "dying.mjs"
    module.write_text(
        "export function createReplica(host) {\n"
        "  const die = () => { process.stderr.write('dying replica: the database went away\\n'); process.exit(3); };\n"
        "  const nothing = () => ({});\n"
        "  return { begin: die, applyPage: die, applyDelivery: die, complete: die, closeGate: () => {},\n"
        "    readStatus: () => ({ activated: false, gateOpen: false, attemptId: null, orgId: null,\n"
        "      appliedThrough: null, policyEpochs: [], projectIds: [] }),\n"
        "    readSnapshot: () => null, listReceipts: () => [], empty: nothing, reopen: nothing, close: nothing,\n"
        "    errorKind: () => undefined };\n"
        "}\n")
    run = conformance(kit_command("--impl", str(module)), "fixed", tmp_path / "out", "--profile", "dev")
    # exit 2: the adapter broke, which is not a verdict on the implementation (docs/protocol.md, exit codes)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-2000:]
    assert "dying replica: the database went away" in run.stdout + run.stderr
