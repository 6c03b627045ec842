"""The conformance adapter (docs/protocol.md section 5) on the model and on SQLite.

One suite, parametrised over the drivers: every case runs a list of JSON
requests through ``Driver.handle`` of the driver under test and of the model,
asserts that the two answer with identical JSON, and asserts the specific
refusal code, materialization reason or error the case is about. The SQLite
parameters are skipped only while ``impl/replica.py`` does not exist.

The ops of docs/protocol.md section 6 are held the way the lockstep holds
them: a diagnosis by its ``reason``, a ``state`` document table by table
with receipt MACs as names (``external.state_doc_difference``); everything
else as identical JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envreplica.cli.adapter import register
from envreplica.conformance.adapter import serve
from envreplica.conformance.drivers import (
    OPERATION_LOST_CRASH,
    OPERATION_LOST_RESTART,
    STATE_NOT_OFFERED,
    TEST_MASTER_KEY,
    ModelDriver,
    SqliteDriver,
)
from envreplica.conformance.external import _MacNames, state_doc_difference
from envreplica.model.store import legacy_envelope, staged_envelope

from adapter_requests import (
    BOOT,
    SID,
    SID2,
    begin,
    commit,
    crash,
    delivery,
    diagnostics,
    fail,
    legacy,
    op,
    page,
    put,
    ready,
    rec,
    reset,
    snapshot,
    staged,
    state,
    with_ids,
)

HAVE_SQLITE = importlib.util.find_spec("envreplica.impl.replica") is not None
SKIP_SQLITE = pytest.mark.skipif(
    not HAVE_SQLITE, reason="impl/replica.py (SqliteReplica) is not written yet; only the model runs"
)
DRIVERS = [pytest.param("model", id="model"), pytest.param("sqlite", id="sqlite", marks=SKIP_SQLITE)]


# ---------------------------------------------------------------------------
# Running a case on a driver.
# ---------------------------------------------------------------------------


def make_driver(kind: str, tmp_path: Path):
    if kind == "model":
        return ModelDriver("fixed")
    return SqliteDriver("fixed", tmp_path / f"replica-{len(list(tmp_path.iterdir()))}.db", master_key=TEST_MASTER_KEY)


def play(kind: str, requests: list, tmp_path: Path) -> list[dict]:
    driver = make_driver(kind, tmp_path)
    try:
        # A JSON round trip: the driver sees exactly what the adapter would decode.
        return [json.loads(json.dumps(driver.handle(json.loads(json.dumps(r))))) for r in requests]
    finally:
        close = getattr(driver, "close", None)
        if close:
            close()


def _judged(request: Any, response: dict, states: list) -> dict:
    """``response`` as it is held against the model's (docs/protocol.md section 6): a diagnosis by its
    ``reason`` (its message is free text); a ``state`` document apart, table by table (into ``states``)."""
    response = json.loads(json.dumps(response))
    op_name = request.get("op") if isinstance(request, dict) else None
    if response.get("ok") is True and op_name == "diagnostics" and isinstance(response["result"], dict):
        response["result"] = {"reason": response["result"]["reason"]}
    if response.get("ok") is True and op_name == "state":
        states.append(response["result"])
        response["result"] = "<a state document>"
    inner = request.get("duringFetch") if isinstance(request, dict) else None
    if isinstance(inner, list) and isinstance(response.get("nested"), list):
        response["nested"] = [_judged(r, n, states) for r, n in zip(inner, response["nested"])]
    return response


def run_case(kind: str, requests: list, tmp_path: Path) -> list[dict]:
    """Responses of ``kind``; asserts they are the model's, response by response (diagnoses by reason,
    ``state`` documents table by table with MACs as names)."""
    requests = with_ids(requests)
    got = play(kind, requests, tmp_path)
    assert [r["id"] for r in got] == [r["id"] if type(r["id"]) is int else None for r in requests]
    if kind != "model":
        want = play("model", requests, tmp_path)
        got_states, want_states = [], []
        for request, g, w in zip(requests, got, want):
            g_judged, w_judged = _judged(request, g, got_states), _judged(request, w, want_states)
            assert json.dumps(g_judged, sort_keys=True) == json.dumps(w_judged, sort_keys=True), (
                f"{kind} and model differ on request {json.dumps(request)}")
        names = _MacNames()
        for g_doc, w_doc in zip(got_states, want_states):
            assert state_doc_difference(w_doc, g_doc, names) is None
    return got


def result(response: dict) -> Any:
    assert response["ok"] is True, response
    return response["result"]


def refused(response: dict, code: str) -> None:
    r = result(response)
    assert r["ok"] is False and r["code"] == code, r


def materialization(response: dict) -> dict:
    r = result(response)
    if "results" in r:  # a page
        return r["results"][0]["materialization"]
    if "projects" in r:  # a snapshot
        return r["projects"][0]["entries"][0]["materialization"]
    return r["result"]["materialization"]


@pytest.fixture(params=DRIVERS)
def kind(request) -> str:
    return request.param


# ---------------------------------------------------------------------------
# Every reachable refusal code.
# ---------------------------------------------------------------------------

A = rec("A")
A_LISTED = rec("A", listing=1)

REFUSALS: dict[str, list] = {
    "reconciliation_attempt_mismatch": [reset(), begin(), page(attempt="a2")],
    "ack_page_too_large": [reset(ackPageBytes=300), begin(), page([rec("A"), rec("B")], version=1)],
    "project_not_in_attempt": [reset(), begin(), page(project="p2")],
    "record_version_stale": [reset(), begin(), page(version=2), commit(versions=[("p1", 2)]),
                             begin("a2"), page(attempt="a2", version=1)],
    "snapshot_page_mismatch": [reset(), begin(), page([rec("B")], after="A", version=1)],
    "snapshot_version_conflict": BOOT + [begin("a2"), page([A], attempt="a2", version=0)],
    "delivery_incomplete": [reset(), begin(), page(), commit(sequence=5)],
    "record_version_changed": [reset(), begin(), page(), commit(versions=[("p1", 3)])],
    "stream_mismatch": BOOT + [delivery(A, stream="s2")],
    "delivery_gap": BOOT + [delivery(A, sequence=2)],
    "snapshot_incomplete": [reset(), begin(), delivery(A, attempt="a1")],
    "record_version_gap": BOOT + [delivery(A, version=2)],
    # The read of the outer delivery is in flight while the same delivery runs to its end.
    "replica_state_changed": BOOT + [put(), delivery(A, during=[delivery(A)])],
    # A begin inside the read moves the stream: the outer delivery's cursor is gone.
    "replica_state_changed_by_begin": BOOT + [put(), delivery(A, during=[begin("a2", stream="s2")])],
    # A begin with the same attempt id inside the read re-creates the staged view without A.
    "replica_state_missing": [reset(), begin(), page(), put(),
                              delivery(A, attempt="a1", during=[begin()])],
    "delivery_conflict": BOOT + [delivery(A), delivery(A_LISTED)],
    "record_version_conflict": BOOT + [delivery(rec("A", rev=2, gen=2))],
    "project_not_in_replica": BOOT + [delivery(A, project="p9")],
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusal_code(kind, case, tmp_path):
    responses = run_case(kind, REFUSALS[case], tmp_path)
    code = case.removesuffix("_by_begin")
    refused(responses[-1], code)
    for response in responses[:-1]:
        assert response["ok"] is True, response
    if "duringFetch" in REFUSALS[case][-1]:
        nested = responses[-1]["nested"]
        assert len(nested) == 1 and nested[0]["ok"] is True, nested


def test_consumed_refusals_are_receipts(kind, tmp_path):
    """A consumed refusal is a receipt; a transient one is not (and the cursor stays)."""
    responses = run_case(kind, BOOT + [delivery(A, project="p9"), delivery(A, sequence=3), op("receipts"),
                                       op("status")], tmp_path)
    assert result(responses[-4])["consumed"] is True
    assert result(responses[-3])["consumed"] is False
    receipts = result(responses[-2])
    assert receipts == [{"streamId": "s1", "sequence": 1, "ok": False, "code": "project_not_in_replica",
                         "result": None, "recordVersion": None}]
    assert result(responses[-1])["appliedThrough"] == {"streamId": "s1", "sequence": 1}


# ---------------------------------------------------------------------------
# Every materialization reason.
# ---------------------------------------------------------------------------

LEGACY_A = rec("LEG", ref=legacy(3))

MATERIALIZATIONS: dict[str, tuple[list, dict]] = {
    "installed": (BOOT + [put(), delivery(A)], {"kind": "installed"}),
    "installed_legacy": (BOOT + [put("LEG", legacy(3)), delivery(LEGACY_A)], {"kind": "installed"}),
    "installed_page": ([reset(), put(), begin(), page([A], version=1)], {"kind": "installed"}),
    "withheld_tombstone": (BOOT + [delivery(rec("A", gen=0, tomb=True))], {"kind": "withheld", "reason": "tombstone"}),
    "withheld_policy_epoch_unknown": (BOOT + [put(), delivery(rec("A", epoch=7))],
                                      {"kind": "withheld", "reason": "policy_epoch_unknown"}),
    "withheld_policy_epoch_null": (BOOT + [delivery(rec("A", epoch=None))],
                                   {"kind": "withheld", "reason": "policy_epoch_unknown"}),
    "withheld_binding_omits": (BOOT + [delivery(rec("A", binding={"kind": "omit"}))],
                               {"kind": "withheld", "reason": "binding_omits"}),
    "withheld_binding_reason": (BOOT + [delivery(rec("A", binding={"kind": "withhold", "reason": "legal_hold"}))],
                                {"kind": "withheld", "reason": "legal_hold"}),
    # A commit inside the page's read promotes A still pending; the read's answer then lands nowhere.
    "unavailable_materialization_pending": (
        [reset(), put(), begin(), page([A], version=1, during=[commit(versions=[("p1", 1)])]),
         op("snapshot", projectIds=["p1"])],
        {"kind": "unavailable", "reason": "materialization_pending"}),
    "unavailable_credential_store_unavailable": (BOOT + [put(), op("store.off"), delivery(A)],
                                                 {"kind": "unavailable", "reason": "credential_store_unavailable"}),
    "unavailable_value_missing": (BOOT + [delivery(A)], {"kind": "unavailable", "reason": "value_missing"}),
    "unavailable_value_missing_after_fail": (BOOT + [put(), fail("missing"), delivery(A)],
                                             {"kind": "unavailable", "reason": "value_missing"}),
    "unavailable_value_envelope_mismatch": (
        BOOT + [put(raw=staged_envelope("o2", "p1", "A", SID, "x")), delivery(A)],
        {"kind": "unavailable", "reason": "value_envelope_mismatch"}),
    "unavailable_value_envelope_mismatch_legacy": (
        BOOT + [put("LEG", legacy(3), raw=legacy_envelope("p1", "OTHER", "x")), delivery(LEGACY_A)],
        {"kind": "unavailable", "reason": "value_envelope_mismatch"}),
    "unavailable_value_reference_invalid": (BOOT + [delivery(rec("_X", ref=legacy(1)))],
                                            {"kind": "unavailable", "reason": "value_reference_invalid"}),
    "unavailable_value_version_mismatch": (BOOT + [put("LEG", legacy(3), reportedVersion=4), delivery(LEGACY_A)],
                                           {"kind": "unavailable", "reason": "value_version_mismatch"}),
    "unavailable_value_unavailable": (BOOT + [put(), fail("error"), delivery(A)],
                                      {"kind": "unavailable", "reason": "value_unavailable"}),
    "unavailable_value_unavailable_not_json": (BOOT + [put(raw="{not json"), delivery(A)],
                                               {"kind": "unavailable", "reason": "value_unavailable"}),
    "unavailable_value_unavailable_legacy_error": (BOOT + [put("LEG", legacy(3)), fail("error", "LEG", legacy(3)),
                                                           delivery(LEGACY_A)],
                                                   {"kind": "unavailable", "reason": "value_unavailable"}),
}


@pytest.mark.parametrize("case", list(MATERIALIZATIONS))
def test_materialization_reason(kind, case, tmp_path):
    requests, expected = MATERIALIZATIONS[case]
    responses = run_case(kind, requests, tmp_path)
    for response in responses:
        assert response["ok"] is True, response
    assert materialization(responses[-1]) == expected


def test_installed_value_is_served(kind, tmp_path):
    """A delivered, fetched value is what the open replica's snapshot serves."""
    responses = run_case(kind, BOOT + [put(value="hunter2"), delivery(A), op("snapshot", projectIds=["p1"]),
                                       op("snapshot", projectIds=["p1", "p2"])], tmp_path)
    snapshot = result(responses[-2])
    assert snapshot["projects"][0]["recordVersion"] == 1
    assert snapshot["projects"][0]["entries"][0]["value"] == "hunter2"
    assert result(responses[-1]) is None


def test_materialization_pending_commit_refuses_page(kind, tmp_path):
    """The page whose read a commit overtook is refused; the nested commit succeeded."""
    requests, _ = MATERIALIZATIONS["unavailable_materialization_pending"]
    responses = run_case(kind, requests, tmp_path)
    refused(responses[-2], "reconciliation_attempt_mismatch")
    assert result(responses[-2]["nested"][0])["ok"] is True


# ---------------------------------------------------------------------------
# Invalid requests and frames, and corrupt replicas.
# ---------------------------------------------------------------------------


def _page_unsorted():
    p = page([rec("B"), rec("A")], version=1)
    return p


def _apply_without(key: str):
    d = delivery(A)
    del d["frame"][key]
    return d


def _apply_null_attempt():
    d = delivery(A)
    d["frame"]["reconciliationAttemptId"] = None
    return d


def _commit_extra():
    c = commit()
    c["frame"]["extra"] = 1
    return c


def _page_bool_count():
    p = page()
    p["frame"]["recordVersion"] = True
    return p


INVALID: dict[str, tuple[dict, str]] = {
    "bad_id": (begin(attempt="-bad"), "begin.attempt.attemptId must be an Id"),
    "bool_as_count": (_page_bool_count(), "page.recordVersion must be a Count"),
    "float_as_count": (dict(begin(), keptPolicyEpochs=[1.0]), "keptPolicyEpochs[0] must be a Count"),
    "extra_key": (_commit_extra(), "commit.extra is not allowed"),
    "missing_key": (_apply_without("opId"), "apply.opId is required"),
    "unsorted_page_keys": (_page_unsorted(), "page keys are strictly ascending"),
    "reconciliation_attempt_null": (_apply_null_attempt(), "apply.reconciliationAttemptId must be an Id when present"),
    "tombstone_with_ref": (delivery(rec("A", tomb=True, ref=staged())), "tombstone <=> valueRef is null"),
    "op_not_a_string": (dict(op("status"), op=7), "request.op must be a string naming an op"),
    "missing_request_field": (op("snapshot"), "request.projectIds is required"),
    "extra_request_field": (dict(op("status"), verbose=True), "request.verbose is not allowed"),
    "during_fetch_on_commit": (dict(commit(), duringFetch=[]), "request.duringFetch is not allowed"),
    "during_fetch_not_list": (dict(page(), duringFetch={}), "request.duringFetch must be a JSON array"),
    "store_put_legacy_no_name": (put("_X", legacy(1), raw="x"), "request.key must be a Segment for a legacy ref"),
    "store_put_staged_reported": (put(reportedVersion=2), "request.reportedVersion is allowed for a legacy ref only"),
    "store_fail_mode": (fail("sometimes"), "request.mode must be 'missing' or 'error'"),
    "reset_bad_config": (reset(ackPageBytes=-1), "request.config.ackPageBytes must be a Count"),
    "reset_bad_key": (reset(masterKeyHex="00"), "request.config.masterKeyHex must be 64 hexadecimal"),
    # docs/protocol.md section 6: the same rules for the extension ops and field.
    "ready_timeout_too_long": (ready(60001), "request.timeoutMs must be a Count of milliseconds from 0 to 60000"),
    "ready_timeout_bool": (ready(True), "request.timeoutMs must be a Count"),
    "ready_timeout_float": (op("ready", timeoutMs=1.5), "request.timeoutMs must be a Count"),
    "ready_without_timeout": (op("ready"), "request.timeoutMs is required"),
    "ready_extra_key": (dict(ready(), projectIds=["p1"]), "request.projectIds is not allowed for op 'ready'"),
    "diagnostics_without_ids": (op("diagnostics"), "request.projectIds is required"),
    "diagnostics_bad_ids": (op("diagnostics", projectIds="p1"), "projectIds"),
    "state_extra_key": (dict(state(), tables=["receipts"]), "request.tables is not allowed for op 'state'"),
    "crash_with_during_fetch": (crash(page(during=[]), 1),
                                "request.crashAfterCommit is not allowed together with duringFetch"),
    "crash_zero": (crash(page(), 0), "request.crashAfterCommit must be a Count >= 1"),
    "crash_bool": (crash(delivery(A), True), "request.crashAfterCommit must be a Count >= 1"),
    "crash_on_commit": (crash(commit(), 1), "request.crashAfterCommit is not allowed for op 'commit'"),
    "crash_on_begin": (crash(begin("a2"), 1), "request.crashAfterCommit is not allowed for op 'begin'"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_request(kind, case, tmp_path):
    bad, fragment = INVALID[case]
    responses = run_case(kind, BOOT + [op("status"), bad, op("status")], tmp_path)
    error = responses[-2]
    assert error["ok"] is False and error["error"]["type"] == "invalid", error
    assert fragment in error["error"]["message"], error["error"]["message"]
    assert responses[-1] == dict(responses[-3], id=responses[-1]["id"]), "an invalid request changed the replica"


def test_unknown_op_is_unsupported_and_changes_nothing(kind, tmp_path):
    """Section 5: an op the adapter does not know is ``unsupported`` (whatever its keys), and changes nothing."""
    unknown = [dict(op("explode")), dict(op("store.wipe"), projectId="p1", anything={"x": 1})]
    responses = run_case(kind, BOOT + [op("status"), *unknown, op("status")], tmp_path)
    for error in responses[-3:-1]:
        assert error["ok"] is False and error["error"]["type"] == "unsupported", error
        assert "does not know op" in error["error"]["message"] and "nothing was done" in error["error"]["message"]
    assert responses[-1] == dict(responses[-4], id=responses[-1]["id"])


def test_unknown_op_without_an_integer_id_is_invalid(kind, tmp_path):
    """The id is checked first: a request without an integer id is ``invalid``, answered with id null."""
    responses = run_case(kind, [reset(), {"op": "explode", "id": None}, {"op": "explode", "id": 1.5}], tmp_path)
    for response in responses[1:]:
        assert response["id"] is None and response["error"]["type"] == "invalid", response


def test_unknown_nested_op_is_unsupported_in_nested(kind, tmp_path):
    nested = [{"id": 900, "op": "explode"}, {"id": 901, "op": "status"}]
    responses = run_case(kind, [reset(), put(), begin(), page([A], version=1, during=nested)], tmp_path)
    inner = responses[-1]["nested"]
    assert inner[0]["error"]["type"] == "unsupported" and inner[1]["ok"] is True, inner


SECRET = "s3cr3t-Value-that-must-not-echo"


@pytest.mark.parametrize("bad", [
    dict(op("reset"), config={"masterkeyHex": "ab" * 32}),          # a key under a misspelt name
    dict(op("reset"), config={"masterKeyHex": SECRET}),              # a malformed key
    dict(put(), rawValue=SECRET),                                    # a secret in a wrong store.put field
    dict(put(), raw=[SECRET]),                                       # raw of the wrong type
    dict(op("status"), note=SECRET),                                 # any undeclared key
    dict(op("status"), **{SECRET: 1}),                               # a secret as a key name
    dict(commit(), frame=dict(commit()["frame"], value=SECRET)),     # inside a frame
])
def test_errors_never_echo_a_misplaced_value(kind, bad, tmp_path):
    responses = run_case(kind, [reset(), bad], tmp_path)
    error = responses[-1]
    assert error["ok"] is False and error["error"]["type"] == "invalid", error
    text = json.dumps(error)
    assert SECRET not in text and "ab" * 32 not in text, text


def test_request_without_integer_id(kind, tmp_path):
    responses = run_case(kind, [reset(), {"op": "status", "id": "seven"}, {"op": "status", "id": True}], tmp_path)
    for response in responses[1:]:
        assert response["id"] is None and response["error"]["type"] == "invalid", response


CORRUPT: dict[str, tuple[list, str]] = {
    "delivery_before_begin": ([reset(), delivery(A)], "replica delivery arrived before activation"),
    "begin_other_org": (BOOT + [begin("a2", org="o2")], "replica organization cannot change after activation"),
    "page_before_begin": ([reset(), page()], "project environment replica has not been activated"),
    # A begin with the same attempt id inside the page's read wipes the staged record it answers with.
    "page_record_gone_in_read": ([reset(), put(), begin(), page([A], version=1, during=[begin()])],
                                 "staged replica page record disappeared"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_error(kind, case, tmp_path):
    requests, message = CORRUPT[case]
    responses = run_case(kind, requests + [op("status")], tmp_path)
    error = dict(responses[-2])
    nested = error.pop("nested", [])
    assert error == {"id": error["id"], "ok": False, "error": {"type": "corrupt", "message": message}}
    assert all(n["ok"] for n in nested), nested
    assert responses[-1]["ok"] is True  # a corrupt error does not break the replica's reads


# ---------------------------------------------------------------------------
# Nested operations, restart, store.off.
# ---------------------------------------------------------------------------


def test_restart_inside_read_loses_the_operation(kind, tmp_path):
    responses = run_case(kind, BOOT + [put(), delivery(A, during=[op("restart"), op("status")]), op("status"),
                                       op("receipts")], tmp_path)
    lost = responses[-3]
    assert lost["ok"] is False
    assert lost["error"] == {"type": "unsupported", "message": OPERATION_LOST_RESTART}
    assert [n["ok"] for n in lost["nested"]] == [True, True]
    status = result(responses[-2])
    assert status["gateOpen"] is False and status["appliedThrough"] == {"streamId": "s1", "sequence": 0}
    assert result(responses[-1]) == []


def test_only_first_read_runs_nested_and_answers_are_read_when_asked(kind, tmp_path):
    """A page reading A then B: duringFetch runs inside A's read only. A's answer was read
    before the nested puts (old value); B's read begins after them (new value)."""
    b = rec("B", ref=staged(SID2))
    responses = run_case(kind, [reset(), put(value="old"), begin(),
                                page([A, b], version=1, during=[put(value="new"), put("B", staged(SID2), value="b2")]),
                                commit(versions=[("p1", 1)]), op("snapshot", projectIds=["p1"])], tmp_path)
    assert [r["materialization"] for r in result(responses[-3])["results"]] == [{"kind": "installed"}] * 2
    assert [n["ok"] for n in responses[-3]["nested"]] == [True, True]
    entries = result(responses[-1])["projects"][0]["entries"]
    assert [e["value"] for e in entries] == ["old", "b2"]


def test_store_off_inside_a_read_is_for_later_operations(kind, tmp_path):
    """The seed passes its reader per call: a page already running keeps reading B after a
    nested store.off, while a page started after it (nested too) has no store."""
    b = rec("B", ref=staged(SID2))
    c = rec("C")
    responses = run_case(kind, [reset(), put(), put("B", staged(SID2)), put("C", project="p2"),
                                begin(projects=["p1", "p2"]),
                                page([A, b], version=1, during=[op("store.off"), page([c], project="p2", version=1)]),
                                page([c], project="p2", version=1)], tmp_path)
    outer = responses[-2]
    assert [r["materialization"] for r in result(outer)["results"]] == [{"kind": "installed"}] * 2
    pending = {"kind": "unavailable", "reason": "credential_store_unavailable"}
    assert materialization(outer["nested"][1]) == pending
    assert materialization(responses[-1]) == pending


def test_no_read_means_nested_not_run(kind, tmp_path):
    """``nested`` is [] when the operation never reads (here: a refusal)."""
    responses = run_case(kind, BOOT + [delivery(A, sequence=5, during=[op("close")]), op("status")], tmp_path)
    assert responses[-2]["nested"] == []
    assert result(responses[-1])["gateOpen"] is True


def test_restart_keeps_tables_and_closes_gate(kind, tmp_path):
    responses = run_case(kind, BOOT + [put(value="v1"), delivery(A), op("restart"), op("status"),
                                       op("snapshot", projectIds=["p1"]), op("receipts"),
                                       begin("a2"), page([A], attempt="a2", version=1),
                                       commit("a2", sequence=1, versions=[("p1", 1)]),
                                       op("snapshot", projectIds=["p1"])], tmp_path)
    status = result(responses[-7])
    assert status["activated"] is True and status["gateOpen"] is False and status["projectIds"] == ["p1"]
    assert result(responses[-6]) is None  # a closed gate serves nothing
    assert len(result(responses[-5])) == 1
    assert result(responses[-1])["projects"][0]["entries"][0]["value"] == "v1"


def test_store_off_survives_restart_and_reset_restores(kind, tmp_path):
    responses = run_case(kind, BOOT + [op("store.off"), op("restart"), begin("a2"), put(),
                                       page([A], attempt="a2", version=1),
                                       reset(), put(), begin(), page([A], version=1)], tmp_path)
    assert materialization(responses[-5]) == {"kind": "unavailable", "reason": "credential_store_unavailable"}
    assert materialization(responses[-1]) == {"kind": "installed"}


def test_reset_config_prefix_names_parameters(kind, tmp_path):
    responses = run_case(kind, [reset(prefix="/other"), put(), begin(), page([A], version=1)], tmp_path)
    assert materialization(responses[-1]) == {"kind": "installed"}


# ---------------------------------------------------------------------------
# The stdio loop and the command line.
# ---------------------------------------------------------------------------


def test_serve_answers_every_line(tmp_path):
    lines = [json.dumps({"id": 1, "op": "reset"}), "not json", "", "NaN", json.dumps([1, 2]),
             json.dumps({"id": 2, "op": "status"})]
    out = io.StringIO()
    assert serve(ModelDriver("fixed"), io.StringIO("\n".join(lines) + "\n"), out) == 6
    responses = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in responses] == [1, None, None, None, None, 2]
    assert [r["ok"] for r in responses] == [True, False, False, False, False, True]
    assert all(r["error"]["type"] == "invalid" for r in responses[1:5])


def test_serve_bytes_and_bad_utf8():
    out = io.StringIO()
    serve(ModelDriver("fixed"), io.BytesIO(b'{"id": 1, "op": "status"}\r\n\xff\xfe\n'), out)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["id"] == 1 and first["ok"] is True
    assert second["id"] is None and "UTF-8" in second["error"]["message"]


def test_serve_answers_json_nested_past_the_parser_and_goes_on():
    deep = '{"id": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    out = io.StringIO()
    assert serve(ModelDriver("fixed"), io.StringIO(deep + "\n" + '{"id": 2, "op": "status"}\n'), out) == 2
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["id"] is None and first["error"]["type"] == "invalid" and "nests" in first["error"]["message"]
    assert second["id"] == 2 and second["ok"] is True


def test_register_adds_adapter_subcommand():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["adapter", "--impl", "model", "--variant", "seed"])
    assert args.command == "adapter" and args.impl == "model" and args.variant == "seed" and callable(args.func)


@pytest.mark.parametrize("impl", DRIVERS)
def test_adapter_process_end_to_end(impl, tmp_path):
    requests = with_ids([reset(), begin(), page(), commit(), op("status")], start=11)
    argv = [sys.executable, "-m", "envreplica.conformance.adapter", "--impl", impl, "--variant", "fixed"]
    if impl == "sqlite":
        argv += ["--test-key", "--db", str(tmp_path / "e2e.db")]
    proc = subprocess.run(argv, input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 5, proc.stdout
    responses = [json.loads(line) for line in lines]
    assert [r["id"] for r in responses] == [11, 12, 13, 14, 15]
    assert all(r["ok"] for r in responses), responses
    assert responses[-1]["result"]["gateOpen"] is True


# ---------------------------------------------------------------------------
# Every value the wire allows (F3)
# ---------------------------------------------------------------------------

ANY_VALUES = ["", "a\x00b", "bad\ud800", "\udc00x\ud83d", "\U0001F600 é", "€" * 40_000]


@pytest.mark.parametrize("variant", ["seed", "fix-f1", "fixed"])
@pytest.mark.parametrize("value", ANY_VALUES, ids=lambda v: repr(v)[:16])
def test_every_value_is_handled_alike_and_never_sticks_the_stream(variant, value, tmp_path):
    """Model and implementation agree on any string; ``fixed`` serves it exactly, the seed as Node would."""
    from envreplica.model.replica import stored_text
    from envreplica.model.state import ModelConfig

    requests = with_ids(BOOT + [put("A", value=value), delivery(rec("A")), snapshot(),
                                put("B", ref=staged(SID2), value="next"),
                                delivery(rec("B", ref=staged(SID2)), sequence=2, version=2), snapshot()])
    model = ModelDriver(variant)
    impl = SqliteDriver(variant, tmp_path / "r.db", master_key=TEST_MASTER_KEY)
    try:
        for request in requests:
            # each side decodes its own copy, as over the pipe
            m, i = model.handle(json.loads(json.dumps(request))), impl.handle(json.loads(json.dumps(request)))
            assert json.dumps(m, sort_keys=True) == json.dumps(i, sort_keys=True), request["op"]
            assert m["ok"], m
    finally:
        impl.close()
    served = {e["state"]["key"]: e["value"] for e in i["result"]["projects"][0]["entries"]}
    expected = value if variant == "fixed" else stored_text(ModelConfig(variant=variant), value)
    assert served == {"A": expected, "B": "next"}
    if variant != "fixed" and "\ud800" in value:
        assert served["A"] != value and "\ufffd" in served["A"]  # F3: the seed does not serve what it fetched


# ---------------------------------------------------------------------------
# docs/protocol.md section 6: ready, diagnostics, state, crashAfterCommit
# ---------------------------------------------------------------------------


def test_ready_is_the_ready_condition(kind, tmp_path):
    """``ready``: activated, gate open, no attempt; the wait never changes the answer of a replica no one moves."""
    requests = [reset(), ready(), begin(), ready(5), page(), commit(), ready(), ready(20), begin("a2"), ready(1),
                op("close"), ready(0)]
    responses = run_case(kind, requests, tmp_path)
    answers = [result(r)["ready"] for q, r in zip(requests, responses) if q["op"] == "ready"]
    assert answers == [False, False, True, True, False, False]
    assert result(responses[1]) == {"ready": False}  # exactly {"ready": bool}


def test_ready_inside_a_read_sees_the_gate_as_it_is_then(kind, tmp_path):
    """Nested in a live delivery's read: the gate is open (ready); after a nested begin it is not."""
    responses = run_case(kind, BOOT + [put(), delivery(A, during=[ready(0), begin("a2"), ready(3)])], tmp_path)
    assert [n["result"] for n in responses[-1]["nested"]][::2] == [{"ready": True}, {"ready": False}]


DIAGNOSES: dict[str, tuple[list, Any]] = {
    "serves": (BOOT + [diagnostics()], None),
    "not_activated": ([reset(), diagnostics()], "not_activated"),
    "not_activated_before_gate": ([reset(), diagnostics("p1", "p2")], "not_activated"),
    "gate_closed_staging": ([reset(), begin(), diagnostics()], "gate_closed"),
    "gate_closed_idle": (BOOT + [op("close"), diagnostics()], "gate_closed"),
    "gate_closed_after_restart": (BOOT + [op("restart"), diagnostics()], "gate_closed"),
    "gate_closed_before_projects": (BOOT + [begin("a2"), diagnostics("p9")], "gate_closed"),
    "projects_mismatch_extra": (BOOT + [diagnostics("p1", "p2")], "projects_mismatch"),
    "projects_mismatch_repeat": (BOOT + [diagnostics("p1", "p1")], "projects_mismatch"),
    "projects_mismatch_none": (BOOT + [op("diagnostics", projectIds=[])], "projects_mismatch"),
}


@pytest.mark.parametrize("case", list(DIAGNOSES))
def test_diagnostics_reason(kind, case, tmp_path):
    requests, reason = DIAGNOSES[case]
    responses = run_case(kind, requests + [op("snapshot", projectIds=requests[-1]["projectIds"])], tmp_path)
    diagnosis, served = result(responses[-2]), result(responses[-1])
    if reason is None:
        assert diagnosis is None and served is not None
    else:
        assert set(diagnosis) == {"reason", "message"} and diagnosis["reason"] == reason, diagnosis
        assert isinstance(diagnosis["message"], str) and diagnosis["message"]
        assert served is None  # a diagnosis exactly when the snapshot is null


def test_diagnostics_never_shows_a_value(kind, tmp_path):
    responses = run_case(kind, BOOT + [put(value=SECRET), delivery(A), diagnostics("p1", "p2"), begin("a2"),
                                       diagnostics()], tmp_path)
    for response in (responses[-3], responses[-1]):
        assert SECRET not in json.dumps(response)


def test_state_is_every_table_in_order(kind, tmp_path):
    """The document's tables hold what the operations wrote; the SQLite one equals the model's (run_case)."""
    b = rec("B", ref=staged(SID2))
    responses = run_case(kind, BOOT + [put(value="v-a"), delivery(A), delivery(A, sequence=1),
                                       delivery(A, project="p9", sequence=2), begin("a2"), put("B", staged(SID2)),
                                       page([b, A], attempt="a2", version=2, complete=False) if False else
                                       page([A, b], attempt="a2", version=2, complete=False), state()], tmp_path)
    doc = result(responses[-1])
    assert list(doc) == ["authority", "projects", "records", "values", "stageProjects", "stageRecords",
                         "stageValues", "receipts"]
    assert doc["authority"] == {"activated": True, "gateOpen": False, "attemptId": "a2", "streamId": "s1",
                                "appliedSequence": 2, "orgId": "o1", "policyEpochs": [1]}
    assert doc["projects"] == [{"projectId": "p1", "recordVersion": 1}]
    assert [v["value"] for v in doc["values"]] == ["v-a"]
    assert [(r["projectId"], r["key"], r["present"]) for r in doc["stageRecords"]] == [("p1", "A", True),
                                                                                       ("p1", "B", True)]
    assert doc["stageProjects"] == [{"attemptId": "a2", "projectId": "p1", "recordVersion": 2, "lastKey": "B",
                                     "complete": False}]
    receipts = doc["receipts"]
    assert [(r["sequence"], r["ok"], r["code"]) for r in receipts] == [(1, True, None),
                                                                      (2, False, "project_not_in_replica")]
    assert receipts[0]["requestMac"] != receipts[1]["requestMac"]


def test_state_is_offered_only_with_the_test_key(tmp_path):
    """``state`` shows plaintext values: a driver sealing under another key answers it ``unsupported``."""
    other = SqliteDriver("fixed", tmp_path / "real.db", master_key=bytes(range(1, 33)))
    try:
        response = other.handle({"id": 1, "op": "state"})
        assert response == {"id": 1, "ok": False, "error": {"type": "unsupported", "message": STATE_NOT_OFFERED}}
        assert "test key" in STATE_NOT_OFFERED and "nothing was done" in STATE_NOT_OFFERED
        assert other.handle({"id": 2, "op": "state", "x": 1})["error"]["type"] == "invalid"  # a known op still
    finally:
        other.close()
    explicit = SqliteDriver("fixed", tmp_path / "t.db", master_key=TEST_MASTER_KEY, offer_state=False)
    try:
        assert explicit.handle({"id": 1, "op": "state"})["error"]["type"] == "unsupported"
    finally:
        explicit.close()


def test_model_state_macs_are_names(tmp_path):
    """The model's requestMac is a name of the request: equal requests, equal names; never a keyed MAC."""
    from envreplica.conformance.drivers import stand_in_mac

    responses = run_case("model", BOOT + [delivery(A), begin("a2", stream="s1"), delivery(A_LISTED, sequence=2,
                                                                                          attempt="a2"),
                                          state()], tmp_path)
    receipts = result(responses[-1])["receipts"]
    assert all(r["requestMac"].startswith("sha256:") for r in receipts)
    assert stand_in_mac({"a": 1}) == stand_in_mac({"a": 1}) != stand_in_mac({"a": 2})


# -- crashAfterCommit ------------------------------------------------------------

B_REC = rec("B", ref=staged(SID2))
#: A page that makes three write commits: the prepare, then A's and B's after-transactions.
PAGE_AB = [reset(), put(), put("B", staged(SID2)), begin()]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_page_crashes_after_its_kth_commit(kind, k, tmp_path):
    responses = run_case(kind, PAGE_AB + [crash(page([A, B_REC], version=1), k), op("status"), state()],
                         tmp_path)
    assert result(responses[-3]) == {"crashedAfterCommit": k}
    status = result(responses[-2])
    assert status["gateOpen"] is False and status["attemptId"] is None  # reopened, gate closed (as restart)
    doc = result(responses[-1])
    assert doc["stageRecords"] == [] and doc["stageProjects"] == []  # the attempt purged by the restart


def test_page_that_ends_first_is_answered_normally(kind, tmp_path):
    responses = run_case(kind, PAGE_AB + [crash(page([A, B_REC], version=1), 4), commit(versions=[("p1", 1)]),
                                          snapshot()], tmp_path)
    assert [r["materialization"] for r in result(responses[-3])["results"]] == [{"kind": "installed"}] * 2
    assert [e["value"] for e in result(responses[-1])["projects"][0]["entries"]] == ["secret-A", "secret-A"]


def test_refused_page_still_counts_its_prepare_commit(kind, tmp_path):
    """A refusal commits its transaction (section 3): crashAfterCommit 1 crashes there."""
    responses = run_case(kind, BOOT + [begin("a2"), crash(page([A], attempt="a2", version=0), 1), op("status")],
                         tmp_path)
    assert result(responses[-2]) == {"crashedAfterCommit": 1}


def test_invalid_frame_makes_no_commit_and_no_crash(kind, tmp_path):
    bad = crash(page([rec("B"), rec("A")], version=1), 1)
    responses = run_case(kind, [reset(), begin(), bad, op("status")], tmp_path)
    assert responses[-2]["error"]["type"] == "invalid" and result(responses[-1])["attemptId"] == "a1"


@pytest.mark.parametrize("k", [1, 2, 3])
def test_delivery_crashes_after_its_kth_commit_and_is_sent_again(kind, k, tmp_path):
    """Crashed before its receipt (1, 2) the delivery is half-applied: after reconnecting, the cloud sends it
    again and it is applied; crashed after its receipt (3) it is a replay."""
    requests = BOOT + [put(), crash(delivery(A), k), op("receipts"), begin("a2"), page([A], attempt="a2", version=1),
                       commit("a2", sequence=1 if k == 3 else 0, versions=[("p1", 1)]),
                       delivery(A), snapshot(), state()]
    responses = run_case(kind, requests, tmp_path)
    assert result(responses[5]) == {"crashedAfterCommit": k}
    assert len(result(responses[6])) == (1 if k == 3 else 0)
    resent = result(responses[-3])
    assert resent["ok"] is True and resent["replayed"] is (k == 3), resent
    assert result(responses[-2])["projects"][0]["entries"][0]["value"] == "secret-A"


def test_delivery_without_a_read_has_two_commits(kind, tmp_path):
    tomb = rec("A", gen=0, tomb=True)
    responses = run_case(kind, BOOT + [crash(delivery(tomb), 2), crash(delivery(tomb, sequence=2, version=2), 3)],
                         tmp_path)
    assert result(responses[-2]) == {"crashedAfterCommit": 2}
    assert result(responses[-1])["ok"] is False  # the gate is closed now: refused, never crashed


def test_crash_nested_in_a_read_loses_the_operation_in_flight(kind, tmp_path):
    """A nested page that crashes takes the outer delivery with it (a crash is a restart of the process)."""
    requests = [reset(), put(), begin(), page(), commit(),
                delivery(A, during=[begin("a2"), crash(page([B_REC], attempt="a2", version=2), 1)]),
                op("status"), op("receipts")]
    responses = run_case(kind, requests, tmp_path)
    lost = responses[-3]
    assert lost["error"] == {"type": "unsupported", "message": OPERATION_LOST_CRASH}
    assert [n["ok"] for n in lost["nested"]] == [True, True]
    assert lost["nested"][1]["result"] == {"crashedAfterCommit": 1}
    assert result(responses[-2])["gateOpen"] is False and result(responses[-1]) == []


def test_store_off_survives_a_crash(kind, tmp_path):
    responses = run_case(kind, BOOT + [op("store.off"), put(), crash(delivery(A), 1), begin("a2"),
                                       page([A], attempt="a2", version=1)], tmp_path)
    assert materialization(responses[-1]) == {"kind": "unavailable", "reason": "credential_store_unavailable"}


# -- section 5, as tightened: restart nested two deep ------------------------------


def test_nested_restart_loses_every_operation_in_flight(kind, tmp_path):
    """A restart inside a read inside a read: both operations in flight are lost, each answered so."""
    inner = page([B_REC], attempt="a2", version=2, during=[dict(op("restart"), id=2000)])
    responses = run_case(kind, [reset(), put(), put("B", staged(SID2)), begin(), page(), commit(),
                                delivery(A, during=[begin("a2"), inner]), op("status")], tmp_path)
    outer = responses[-2]
    assert outer["error"] == {"type": "unsupported", "message": OPERATION_LOST_RESTART}
    assert outer["nested"][1]["error"] == {"type": "unsupported", "message": OPERATION_LOST_RESTART}
    assert [n["ok"] for n in outer["nested"][1]["nested"]] == [True]
    assert result(responses[-1])["gateOpen"] is False and result(responses[-1])["attemptId"] is None


def test_diagnostics_corrupt_on_the_model_and_on_a_tampered_file(tmp_path):
    """``corrupt``: the model's classification of a state whose snapshot read raises, and SQLite's of a file
    edited behind its back (a row whose tag no longer holds). Neither message shows a value."""
    import sqlite3
    from dataclasses import replace

    from envreplica.impl import writer
    from envreplica.model.fmap import FMap

    requests = with_ids(BOOT + [put(value=SECRET), delivery(A)])
    model = ModelDriver("fixed")
    for request in requests:
        model.handle(request)
    model.state = replace(model.state, values=FMap({}))  # installed, but its value row is gone
    answer = model.handle({"id": 99, "op": "diagnostics", "projectIds": ["p1"]})
    assert answer["result"]["reason"] == "corrupt" and SECRET not in json.dumps(answer)

    impl = SqliteDriver("fixed", tmp_path / "t.db", master_key=TEST_MASTER_KEY)
    try:
        for request in requests:
            assert impl.handle(request)["ok"] is True
        conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
        writer.register_writer(conn)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE records SET listing_generation = 5 WHERE key = 'A'")
            conn.execute("COMMIT")
        finally:
            conn.close()
        answer = impl.handle({"id": 99, "op": "diagnostics", "projectIds": ["p1"]})
        assert answer["result"]["reason"] == "corrupt", answer
        assert SECRET not in json.dumps(answer)
        assert impl.handle({"id": 100, "op": "snapshot", "projectIds": ["p1"]})["result"] is None
        assert impl.handle({"id": 101, "op": "state"})["error"]["type"] == "corrupt"  # state fails closed too
    finally:
        impl.close()


def test_adapter_process_offers_the_extensions(tmp_path):
    """Over stdio: ``ready``, ``diagnostics``, a crash and ``state``, from the SQLite adapter with the test key."""
    requests = with_ids([reset(), put(), begin(), page(), commit(), ready(5), diagnostics("p1", "p2"),
                         crash(delivery(A), 2), ready(0), state()], start=21)
    argv = [sys.executable, "-m", "envreplica.conformance.adapter", "--impl", "sqlite", "--test-key",
            "--db", str(tmp_path / "x.db")]
    proc = subprocess.run(argv, input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    responses = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in responses] == list(range(21, 31)) and all(r["ok"] for r in responses), responses
    assert responses[5]["result"] == {"ready": True}
    assert responses[6]["result"]["reason"] == "projects_mismatch"
    assert responses[7]["result"] == {"crashedAfterCommit": 2}
    assert responses[8]["result"] == {"ready": False}  # reopened with its gate closed
    doc = responses[9]["result"]
    assert doc["authority"]["gateOpen"] is False and doc["receipts"] == []
    assert [v["value"] for v in doc["values"]] == ["secret-A"]  # the after-transaction committed before the crash
