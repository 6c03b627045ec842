"""The conformance gate from the command line: ``envreplica conformance``, ``replay FILE.jsonl``, ``check``.

The adapter under test is a real process: the project's own adapter
(``python -m envreplica.conformance.adapter --impl sqlite``) must pass under
every variant; a tiny wrapper script that flips one field of commit results
must be caught (exit 1, the shrunk trace printed and written as JSON lines
and ITF, a JUnit failure). Example counts are kept small (``--max-examples``):
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
from envreplica.conformance.lockstep import read_requests
from envreplica.model.state import Variant

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

#: Wraps the real adapter; answers every commit with its ``ok`` flipped.
BROKEN_ADAPTER = textwrap.dedent("""
    import sys

    from envreplica.conformance import adapter
    from envreplica.conformance.drivers import SqliteDriver


    class Broken(SqliteDriver):
        def handle(self, request):
            response = super().handle(request)
            if isinstance(request, dict) and request.get("op") == "commit" and response.get("ok"):
                response["result"]["ok"] = not response["result"]["ok"]
            return response


    adapter.SqliteDriver = Broken
    sys.exit(adapter.main(sys.argv[1:]))
""")


def write_jsonl(path: Path, requests: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    started = time.perf_counter()
    code = main(argv)
    out = capsys.readouterr().out
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
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 0, out
    assert "no divergence" in out and "PASS" in out
    assert "lockstep coverage" in out and "restart: open -> closed.idle" in out
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
    command = f"{PY} -c " + shlex.quote("import sys; print('cannot start', file=sys.stderr); sys.exit(3)")
    code, out = run_cli(["conformance", "--adapter", command, "--max-examples", "3",
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 1
    assert "exited with status 3" in out and "cannot start" in out


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


def test_subprocess_driver_timeout_and_garbage(tmp_path):
    slow = SubprocessDriver(f"{PY} -c " + shlex.quote("import sys, time; sys.stdin.readline(); time.sleep(30)"),
                            timeout=0.5)
    with pytest.raises(AdapterError, match="did not answer within 0.5 s"):
        slow.handle({"id": 1, "op": "status"})
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


def test_check_runs_model_check_then_lockstep(tmp_path, capsys):
    code, out = run_cli(["check", "--bounds", "tiny", "--quiet", "--lockstep-examples", "5",
                         "--out", str(tmp_path)], capsys)
    assert code == 0, out
    assert "envreplica check: the gate" in out
    assert "model check" in out and "SQLite vs model" in out and "lockstep coverage" in out
    code, out = run_cli(["check", "--bounds", "tiny", "--quiet", "--model-only", "--out", str(tmp_path)], capsys)
    assert code == 0 and "skipped (--model-only)" in out
