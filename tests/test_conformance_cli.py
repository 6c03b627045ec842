"""The conformance gate from the command line: ``envreplica conformance``, ``replay FILE.jsonl``, ``check``.

The adapter under test is a real process: the project's own adapter
(``python -m envreplica.conformance.adapter --impl sqlite``) must pass under
every variant; a tiny wrapper script that flips one field of commit results
must be caught (exit 1, the shrunk trace printed and written as JSON lines
and ITF, a JUnit failure). The adapter's tables are held too: with
``--test-key`` its ``state`` answers are compared table by table after each
step (docs/protocol.md section 6), a wrapper whose ``state`` shows other
values, or one MAC for two requests, is caught naming the table, and an
adapter without the test key (``state`` unsupported) or without the
extensions at all is held to its responses, the report saying so. Example counts are kept small (``--max-examples``):
these tests pin the plumbing; tests/test_lockstep.py runs the ``ci`` budget.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envreplica.cli.main import main
from envreplica.conformance.external import AdapterError, SubprocessDriver
from envreplica.conformance.replica import read_requests
from envreplica.model.state import Variant

from adapter_requests import BROKEN_ADAPTER

PY = shlex.quote(sys.executable)


def adapter_command(db: Path, variant: str = "fixed") -> str:
    return (f"{PY} -m envreplica.conformance.adapter --impl sqlite --test-key --variant {variant} "
            f"--db {shlex.quote(str(db))}")


#: A trace a correct implementation answers as the model does: boot, a value, a delivery, a read.
GOOD_TRACE = [
    {"id": 1, "op": "reset"},
    {"id": 2, "op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": ["p1"]},
     "keptPolicyEpochs": [1, 2], "orgId": "o1"},
    {"id": 3, "op": "page", "frame": {"opId": "pg", "attemptId": "a1", "projectId": "p1", "after": None,
                                      "recordVersion": 0, "records": [], "complete": True}},
    {"id": 4, "op": "commit", "frame": {"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 0},
                                        "versions": [{"projectId": "p1", "recordVersion": 0}]}},
    {"id": 5, "op": "store.put", "projectId": "p1", "key": "A",
     "ref": {"kind": "staged", "stagingId": "0f8fad5b-d9cb-469f-a165-70867728950e"},
     "raw": json.dumps({"v": 2, "kind": "project-env", "orgId": "o1", "projectId": "p1", "key": "A",
                        "stagingId": "0f8fad5b-d9cb-469f-a165-70867728950e", "value": "hunter2"})},
    {"id": 6, "op": "delivery", "frame": {
        "kind": "env.replica.apply", "opId": "d1", "projectId": "p1", "recordVersion": 1,
        "state": {"key": "A", "head": {"revision": 1, "generation": 1, "tombstone": False,
                                       "valueRef": {"kind": "staged",
                                                    "stagingId": "0f8fad5b-d9cb-469f-a165-70867728950e"}},
                  "binding": None, "policyEpoch": 1, "listingGeneration": 0},
        "delivery": {"streamId": "s1", "sequence": 1}},
     "duringFetch": [{"id": 100, "op": "status"}]},
    {"id": 7, "op": "snapshot", "projectIds": ["p1"]},
    {"id": 8, "op": "receipts"},
]



#: Wraps the real adapter; its ``state`` answers show every stored value with one character more.
WRONG_STATE_ADAPTER = textwrap.dedent("""
    import sys

    from envreplica.conformance import adapter
    from envreplica.conformance.drivers import SqliteDriver


    class WrongState(SqliteDriver):
        def handle(self, request):
            response = super().handle(request)
            if isinstance(request, dict) and request.get("op") == "state" and response.get("ok"):
                for row in response["result"]["values"]:
                    row["value"] += "!"
            return response


    adapter.SqliteDriver = WrongState
    from envreplica.cli.adapter import main  # the options (cli/adapter.py)
    sys.exit(main(sys.argv[1:]))
""")

#: Wraps the real adapter; every receipt's requestMac is the same name (two requests, one MAC).
ONE_MAC_ADAPTER = WRONG_STATE_ADAPTER.replace('["values"]', '["receipts"]').replace(
    'row["value"] += "!"', 'row["requestMac"] = "0" * 64')


def write_jsonl(path: Path, requests: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``envreplica ARGV``: its exit status, and its standard output then its standard error (so that an
    assertion on the status shows the one-line reason of an exit 2)."""
    started = time.perf_counter()
    code = main(argv)
    captured = capsys.readouterr()
    out = captured.out + (f"\n[stderr]\n{captured.err}" if captured.err else "")
    with capsys.disabled():
        print(f"\n  envreplica {argv[0]} ... -> exit {code} in {time.perf_counter() - started:.1f} s")
    return code, out


# ---------------------------------------------------------------------------
# The project's own adapter passes, under each variant
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [v.value for v in Variant])
def test_own_adapter_passes_under_each_variant(variant, tmp_path, capsys):
    code, out = run_cli(["conformance", "--adapter", adapter_command(tmp_path / "r.db", variant),
                         "--variant", variant, "--profile", "dev", "--max-examples", "12",
                         "--out", str(tmp_path / "out"), "--coverage"], capsys)
    assert code == 0, out
    assert "no divergence" in out and "PASS" in out
    assert "lockstep coverage" in out and "restart: open -> closed.idle" in out  # --coverage: the table
    assert not (tmp_path / "out").exists()  # nothing is written when they agree


def test_saved_traces_replay_first_and_junit_is_valid(tmp_path, capsys):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_jsonl(traces / "boot-and-deliver.jsonl", GOOD_TRACE)
    write_jsonl(traces / "no-reset.jsonl", GOOD_TRACE[1:4])  # the gate prepends a reset
    (traces / "ignored.txt").write_text("not a trace")
    junit = tmp_path / "report" / "junit.xml"
    code, out = run_cli(["conformance", "--adapter", adapter_command(tmp_path / "r.db"), "--traces", str(traces),
                         "--max-examples", "5", "--junit", str(junit), "--out", str(tmp_path / "out")], capsys)
    assert code == 0, out
    assert out.count("agree ") == 2
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0" and root.get("tests") == "3"
    suite = root.find("testsuite")
    names = [tc.get("name") for tc in suite.findall("testcase")]
    assert names == ["trace boot-and-deliver.jsonl", "trace no-reset.jsonl", "lockstep[fixed]"]
    assert all(tc.find("failure") is None for tc in suite.findall("testcase"))
    assert float(suite.get("time")) > 0
    assert "refusal\tdelivery_gap\t" in suite.find("system-out").text


def test_broken_adapter_is_caught_with_a_trace(tmp_path, capsys):
    script = tmp_path / "broken_adapter.py"
    script.write_text(BROKEN_ADAPTER)
    command = f"{PY} {shlex.quote(str(script))} --impl sqlite --test-key --db {shlex.quote(str(tmp_path / 'b.db'))}"
    out_dir = tmp_path / "out"
    junit = tmp_path / "junit.xml"
    traces = tmp_path / "traces"
    traces.mkdir()
    write_jsonl(traces / "boot.jsonl", GOOD_TRACE)
    code, out = run_cli(["conformance", "--adapter", command, "--traces", str(traces), "--max-examples", "40",
                         "--junit", str(junit), "--out", str(out_dir)], capsys)
    assert code == 1, out
    # the saved trace parts at its commit (step 4)
    assert "PARTS" in out and "parts at step #4" in out
    # the generated run: the shrunk trace as readable steps, ending in a commit
    assert "DIVERGENCE under variant fixed" in out
    assert "DIVERGENCE at step" in out and "response.result.ok" in out
    jsonl, itf = out_dir / "lockstep-fixed.jsonl", out_dir / "lockstep-fixed.itf.json"
    requests = read_requests(jsonl)
    # the commit that parts is the last request, or nested in its value-store read (duringFetch)
    last = requests[-1]
    assert requests[0]["op"] == "reset"
    assert "commit" in [last["op"]] + [n["op"] for n in last.get("duringFetch", [])], last
    assert len(requests) <= 6
    doc = json.loads(itf.read_text())
    assert doc["#meta"]["format"] == "ITF" and len(doc["states"]) == len(requests)
    assert doc["states"][-1]["agree"] is False
    # JUnit: one failure per failing run, holding the readable trace
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "2"
    failure = [tc for tc in suite.findall("testcase") if tc.get("name") == "lockstep[fixed]"][0].find("failure")
    # the commit's answer, or a nested commit's (the shrunk trace may end in either; see above)
    assert failure is not None and re.search(r"response(\.nested\[\d+\])?\.result\.ok", failure.get("message"))
    assert "DIVERGENCE at step" in failure.text and str(jsonl) in failure.text
    # replaying the written trace: the built-in implementation agrees; the broken adapter parts at the end
    code, out = run_cli(["replay", str(jsonl)], capsys)
    assert code == 0 and "agree on every step" in out
    code, out = run_cli(["replay", str(jsonl), "--adapter", command], capsys)
    assert code == 1 and f"parts from the model at step #{len(requests)}" in out


def test_dead_adapter_is_reported(tmp_path, capsys):
    """An adapter that dies before its first answer: nothing was checked, so exit 2 (not a divergence), one
    line naming its status and quoting its standard error."""
    command = f"{PY} -c " + shlex.quote("import sys; print('cannot start', file=sys.stderr); sys.exit(3)")
    code = main(["conformance", "--adapter", command, "--max-examples", "3", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2 and "DIVERGENCE" not in captured.out
    (line,) = captured.err.splitlines()
    assert "could not be run" in line and "exited with status 3" in line and "cannot start" in line


# ---------------------------------------------------------------------------
# SubprocessDriver
# ---------------------------------------------------------------------------


def test_subprocess_driver_speaks_json_lines(tmp_path):
    with SubprocessDriver(adapter_command(tmp_path / "r.db")) as driver:
        assert driver.handle({"id": 1, "op": "reset"}) == {"id": 1, "ok": True, "result": {}}
        response = driver.handle({"id": 2, "op": "status"})
        assert response["ok"] is True and response["result"]["activated"] is False
        assert driver.handle({"id": 3, "op": "nope"})["error"]["type"] == "unsupported"  # section 5
    assert driver.proc.returncode == 0


#: Takes a second over its first answer (as an adapter that compiles at start does), then never answers again.
SLOW_START_THEN_STUCK = ("import sys, time; sys.stdin.readline(); time.sleep(1.0); "
                         "print('{\"id\": 1, \"ok\": true, \"result\": {}}', flush=True); "
                         "sys.stdin.readline(); time.sleep(30)")


def test_subprocess_driver_timeout_and_garbage(tmp_path):
    slow = SubprocessDriver(f"{PY} -c " + shlex.quote(SLOW_START_THEN_STUCK), timeout=0.5)
    # The first answer has START_TIMEOUT at least (an adapter may compile when it starts); the next ones, timeout.
    assert slow.handle({"id": 1, "op": "reset"}) == {"id": 1, "ok": True, "result": {}}
    with pytest.raises(AdapterError, match="did not answer within 0.5 s"):
        slow.handle({"id": 2, "op": "status"})
    slow.close()
    noisy = SubprocessDriver(f"{PY} -c " + shlex.quote("import sys; sys.stdin.readline(); print('hello')"))
    with pytest.raises(AdapterError, match="not JSON"):
        noisy.handle({"id": 1, "op": "status"})
    noisy.close()
    with pytest.raises(AdapterError, match="could not start"):
        SubprocessDriver("/nonexistent/adapter --flag")


# ---------------------------------------------------------------------------
# check: the full gate
# ---------------------------------------------------------------------------


def test_check_runs_model_check_then_lockstep(tmp_path, capsys, monkeypatch):
    from envreplica.cli import progress

    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.0)  # a heartbeat line per tick (tests/test_progress.py)
    code, out = run_cli(["check", "--bounds", "tiny", "--lockstep-examples", "5", "--bounds", "lock-tiny",
                         "--lockstep-examples", "migration=3", "--out", str(tmp_path)], capsys)
    assert code == 0, out
    assert "envreplica check: the gate" in out and "is deprecated" not in out  # the options of issue 41
    assert "model check" in out and "SQLite vs model" in out and "lockstep coverage" in out
    assert "bounds migration (paired writer migration)" in out  # the migration's check, from the background child
    assert "migration lockstep" in out and "paired migration vs model" in out  # and its lockstep, after it
    assert "bounds lock-tiny (projection lock)" in out  # the lock's check, from the background child
    assert "PASS: the projection lock" in out
    assert "lock lockstep" in out and "impl.lock vs model" in out  # and its lockstep, in this process
    # Progress while it runs (issue 40): the lockstep's here, a line per example; the background process's
    # relayed through its pipe while it runs; the coverage tables one line each; the verdict last.
    assert out.count("envreplica check: lockstep: ") >= 5
    assert "envreplica check: concurrent processes: " in out and "envreplica check: concurrent threads: " in out
    assert "envreplica check: migration model check: " in out and "bounded liveness" in out
    assert "envreplica check: migration lockstep: " in out
    assert "envreplica check: lock lockstep: " in out and "envreplica check: lock model check: " in out
    assert "(--coverage lists them)" in out and "┃ group" not in out
    last = [line for line in out.split("\n[stderr]\n")[0].splitlines() if line.strip()][-1]
    assert last.startswith("PASS: every property holds at these bounds, and the implementation agrees"), last
    code, out = run_cli(["check", "--bounds", "tiny", "--quiet", "--model-only", "--protocol", "replica,migration",
                         "--out", str(tmp_path)], capsys)
    assert code == 0 and "skipped (--model-only)" in out and "bounds migration (paired writer migration)" in out
    assert "paired migration vs model" not in out  # a lockstep: --model-only skips it
    assert "projection lock" not in out  # not selected
    code, out = run_cli(["check", "--bounds", "tiny", "--quiet", "--model-only", "--protocol", "replica",
                         "--out", str(tmp_path)], capsys)
    assert code == 0 and "paired writer migration" not in out


# ---------------------------------------------------------------------------
# Tables: an external adapter's ``state``, held table by table (docs/protocol.md section 6)
# ---------------------------------------------------------------------------


def _script_command(tmp_path: Path, name: str, text: str, *extra: str) -> str:
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    return " ".join([PY, shlex.quote(str(script)), "--impl", "sqlite", *extra,
                     "--db", shlex.quote(str(tmp_path / f"{name}.db"))])


def test_external_adapter_tables_are_compared_table_by_table(tmp_path, capsys):
    """The real adapter (``--test-key``) answers ``state``: every step's tables are compared, and agree."""
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    command = adapter_command(tmp_path / "r.db")
    report = run_lockstep(lambda: SubprocessDriver(command), settings=lockstep_settings("dev", max_examples=6))
    assert report.ok, report.failure
    assert report.tables.startswith("tables: compared table by table"), report.tables
    compared = int(re.search(r"\((\d+) state reads\)", report.tables).group(1))
    # Every step that may move the replica (not reads and invalid ones); a fast-forward's deliveries
    # are one batch, compared once at its end.
    from envreplica.conformance.replica.coverage import FAST_FORWARDED

    batched = report.coverage.inputs.get(FAST_FORWARDED, 0)
    assert compared >= (report.steps - batched) // 3
    # the CLI prints it; saved traces replay with their tables compared too
    traces = tmp_path / "traces"
    traces.mkdir()
    write_jsonl(traces / "boot.jsonl", GOOD_TRACE)
    code, out = run_cli(["conformance", "--adapter", command, "--traces", str(traces), "--max-examples", "3",
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 0, out
    assert "compared table by table" in out


def test_wrong_state_answer_is_caught_with_the_table(tmp_path, capsys):
    """An adapter whose ``state`` shows other values than it serves parts at the first value it stores."""
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.replica import replay_steps

    command = _script_command(tmp_path, "wrong_state", WRONG_STATE_ADAPTER, "--test-key")
    with SubprocessDriver(command) as impl:
        steps, divergence = replay_steps(GOOD_TRACE, impl, ModelDriver("fixed"))
    assert divergence is not None and divergence["index"] == 6  # the delivery installs A's value
    reason = divergence["reason"]
    assert reason == ("tables after the step differ from the model's: state table values: row (p1, A): value: "
                      "differs at index 7 (model 7 chars, implementation 8 chars): model nothing (the text ends "
                      'there), implementation U+0021 "!"; model "hunter2", implementation "hunter2!"'), reason
    # (test data: ``state`` is offered with the test key only; where the value differs is shown, escaped)
    assert all(s["model"] == s["impl"] for s in steps)  # every response agreed: only the tables tell
    # the generated run catches it too, and says where
    code, out = run_cli(["conformance", "--adapter", command, "--max-examples", "40",
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 1, out
    assert "state table values" in out and "compared table by table" in out


def test_receipt_macs_are_held_as_names(tmp_path):
    """One MAC for two different requests is caught, though the model's MAC is only a name."""
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.replica import replay_steps

    second = json.loads(json.dumps(GOOD_TRACE[5]))
    second.pop("duringFetch")
    second["id"], second["frame"]["delivery"]["sequence"], second["frame"]["recordVersion"] = 9, 2, 2
    second["frame"]["state"]["listingGeneration"] = 1
    command = _script_command(tmp_path, "one_mac", ONE_MAC_ADAPTER, "--test-key")
    with SubprocessDriver(command) as impl:
        _, divergence = replay_steps(GOOD_TRACE + [second], impl, ModelDriver("fixed"))
    assert divergence is not None and divergence["index"] == 9, divergence
    assert "state table receipts: row (s1, 2): requestMac: two requests, one MAC" in divergence["reason"]
    with SubprocessDriver(adapter_command(tmp_path / "good.db")) as impl:
        _, divergence = replay_steps(GOOD_TRACE + [second], impl, ModelDriver("fixed"))
    assert divergence is None, divergence


def test_adapter_without_state_falls_back_to_responses(tmp_path, capsys):
    """Without the test key the adapter answers ``state`` unsupported: the run holds its responses only,
    and says so. Its key is in its command: the caller's exported one would not reach it (docs/gate.md)."""
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    key = bytes(range(7, 39)).hex()
    command = (f"env ENVREPLICA_MASTER_KEY={key} {PY} -m envreplica.conformance.adapter --impl sqlite "
               f"--db {shlex.quote(str(tmp_path / 'k.db'))}")
    with SubprocessDriver(command) as driver:
        answer = driver.handle({"id": 1, "op": "state"})
    assert answer["ok"] is False and answer["error"]["type"] == "unsupported"
    assert "test key" in answer["error"]["message"]
    report = run_lockstep(lambda: SubprocessDriver(command), settings=lockstep_settings("dev", max_examples=4))
    assert report.ok, report.failure
    assert report.tables.startswith("tables: NOT compared: the adapter answered 'state' unsupported"), report.tables
    assert "responses only" in report.tables
    code, out = run_cli(["conformance", "--adapter", command, "--max-examples", "2",
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 0, out
    assert "NOT compared" in out


def test_state_documents_are_compared_table_by_table_with_macs_as_names():
    """``state_doc_difference`` and ``StateProbe`` without a process: each kind of difference, named."""
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.external import StateProbe, _MacNames, state_doc_difference

    model = ModelDriver("fixed")
    for request in GOOD_TRACE:
        model.handle(json.loads(json.dumps(request)))
    want = model.state_doc()
    assert want["receipts"][0]["requestMac"].startswith("sha256:")

    def impl(mutate=None, mac="m1"):
        doc = json.loads(json.dumps(want))
        doc["receipts"][0]["requestMac"] = mac
        if mutate:
            mutate(doc)
        return doc

    names = _MacNames()
    assert state_doc_difference(want, impl(), names) is None
    assert state_doc_difference(want, impl(), names) is None  # the same request, the same MAC: fine
    assert "one request, two MACs" in state_doc_difference(want, impl(mac="m2"), names)
    assert state_doc_difference(want, impl(mac="m2"), names, scope="ab" * 32) is None  # another key, another MAC
    other = json.loads(json.dumps(want))
    other["receipts"][0]["requestMac"] = "sha256:another-request"
    assert "two requests, one MAC" in state_doc_difference(other, impl(), names)

    cases = {
        "state table authority: gateOpen: model true, implementation false":
            lambda d: d["authority"].update(gateOpen=False),
        "state table projects: row (p1): recordVersion: model 1, implementation 2":
            lambda d: d["projects"][0].update(recordVersion=2),
        "state table records: row (p1, A) missing": lambda d: d["records"].clear(),
        "state table stageProjects: row (a9, p1) is not in the model's table":
            lambda d: d["stageProjects"].append({"attemptId": "a9", "projectId": "p1", "recordVersion": 0,
                                                 "lastKey": None, "complete": True}),
        "state table receipts: row (s1, 1): requestMac: the implementation has no such field":
            lambda d: d["receipts"][0].pop("requestMac"),
        "state: the tables differ: missing ['values']": lambda d: d.pop("values"),
    }
    for expected, mutate in cases.items():
        got = state_doc_difference(want, impl(mutate), _MacNames())
        assert got is not None and got.startswith(expected), (expected, got)
        assert "hunter2" not in got

    class Canned:  # answers ``state`` with a fixed document (or error)
        def __init__(self, answer):
            self.answer = answer

        def handle(self, request):
            assert request["op"] == "state" and request["id"] >= 1_000_000_000
            return {"id": request["id"], **self.answer}

    probe = StateProbe()
    assert probe.check(model, Canned({"ok": True, "result": impl()})) is None
    bad = impl(lambda d: d["values"].insert(0, dict(d["values"][0], key="B")))
    assert "values[1] has primary key" in probe.check(model, Canned({"ok": True, "result": bad}))  # sorted rows
    message = probe.check(model, Canned({"ok": False, "error": {"type": "unsupported", "message": "no"}}))
    assert message is not None and "now calls it unsupported" in message  # offered, then withdrawn
    fresh = StateProbe()
    assert fresh.check(model, Canned({"ok": False, "error": {"type": "unsupported", "message": "no"}})) is None
    assert fresh.supported is False and "NOT compared" in fresh.describe() and "responses only" in fresh.describe()
    assert fresh.check(model, Canned({"ok": True, "result": {}})) is None  # no longer asked
    assert "the error" in StateProbe().check(model, Canned({"ok": False, "error": {"type": "corrupt",
                                                                                    "message": "x"}}))


#: Wraps the real adapter as one written to section 5 alone: no docs/protocol.md section 6 at all.
SECTION5_ONLY_ADAPTER = textwrap.dedent("""
    import sys

    from envreplica.conformance import adapter
    from envreplica.conformance.drivers import SqliteDriver


    class Section5Only(SqliteDriver):
        def handle(self, request):
            if isinstance(request, dict) and request.get("op") in ("ready", "diagnostics", "state"):
                return {"id": request.get("id"), "ok": False,
                        "error": {"type": "unsupported", "message": "unknown op"}}
            if isinstance(request, dict) and "crashAfterCommit" in request:
                return {"id": request.get("id"), "ok": False,
                        "error": {"type": "invalid", "message": "request.crashAfterCommit is not allowed"}}
            return super().handle(request)


    adapter.SqliteDriver = Section5Only
    from envreplica.cli.adapter import main  # the options (cli/adapter.py)
    sys.exit(main(sys.argv[1:]))
""")


def test_extensions_an_adapter_does_not_offer_are_not_generated(tmp_path, capsys):
    """An adapter that knows section 5 only passes on its responses; the report lists what it does not offer."""
    from envreplica.conformance.external import probe_extensions
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    with SubprocessDriver(adapter_command(tmp_path / "full.db")) as full:
        assert probe_extensions(full) == {"ready": True, "diagnostics": True, "crashAfterCommit": True}
    command = _script_command(tmp_path, "section5", SECTION5_ONLY_ADAPTER, "--test-key")
    with SubprocessDriver(command) as bare:
        assert probe_extensions(bare) == {"ready": False, "diagnostics": False, "crashAfterCommit": False}
    report = run_lockstep(lambda: SubprocessDriver(command), settings=lockstep_settings("dev", max_examples=15))
    assert report.ok, report.failure
    assert report.extensions.startswith("extensions: the adapter does not offer ready, diagnostics, "
                                        "crashAfterCommit"), report.extensions
    assert "NOT compared" in report.tables
    assert report.coverage.ops["ready"] == report.coverage.ops["diagnostics"] == 0
    assert not report.coverage.crashes
