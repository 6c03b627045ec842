"""The contract's JSON Schema (``envreplica.spec.schema``) against everything else that states the contract.

* The shipped copy (``spec/contract.schema.json``) and the TypeScript kit's copy are what the generator writes now;
  the document is a valid draft 2020-12 schema whose every definition has an ``$id`` and a description.
* The schema and ``spec.wire`` agree on every frame: each valid frame of a set of bases passes both, and every
  structural mutation of it (a key removed or added, a value of another JSON type or out of its range, at every
  path) is rejected by both, or by neither.
* Each rule beyond the schema (``BEYOND_THE_SCHEMA``) has a test here: the schema admits a value that breaks it,
  and the parser (or the adapter, or the state reader) rejects it.
* Every request and every response of a ``ci`` lockstep run, the model and the SQLite implementation both, follows
  the schema (``schema_check.Contract``): checked in the ci runs of ``test_lockstep.py``, and the TypeScript
  kit's in ``test_typescript_kit.py``.
* ``envreplica schema`` prints the document, one definition standalone, and the names.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from jsonschema import Draft202012Validator

from envreplica.cli.main import main
from envreplica.conformance import answers
from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.external import AdapterError, ProtocolBreak, SubprocessDriver
from envreplica.conformance.readback import StateDocError, doc_to_state
from envreplica.spec import schema as S
from envreplica.spec import wire
from envreplica.spec.domain import (
    COMMIT_REFUSALS,
    CONSUMED_REFUSALS,
    DELIVERY_REFUSALS,
    PAGE_REFUSALS,
    RECEIPT_REFUSALS,
    TRANSIENT_REFUSALS,
    InvalidFrame,
    RefusalCode,
)
from envreplica.spec.validator import Validator

from schema_check import Contract, conforms, places, put, validator

ROOT = Path(__file__).resolve().parents[1]

STAGED = {"kind": "staged", "stagingId": "0f8fad5b-d9cb-469f-a165-70867728950e"}
LEGACY = {"kind": "legacy", "ssmVersion": 3}


def state(key: str, *, ref: Any = STAGED, binding: Any = None, epoch: Any = 1) -> dict:
    return {"key": key, "head": {"revision": 2, "generation": 1, "tombstone": ref is None, "valueRef": ref},
            "binding": binding, "policyEpoch": epoch, "listingGeneration": 0}


#: (definition, parser, a valid value): the bases every mutation starts from.
BASES: list[tuple[str, Callable[[Any], Any], Any]] = [
    ("BeginFrame", wire.parse_begin, {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": ["p1", "p2"]}),
    ("PageFrame", wire.parse_page, {
        "opId": "op-1", "attemptId": "a1", "projectId": "p1", "after": None, "recordVersion": 4,
        "records": [state("A"), state("B", ref=LEGACY, binding={"kind": "omit"}, epoch=None),
                    state("C", ref=None, binding={"kind": "withhold", "reason": "why_not"})],
        "complete": False}),
    ("PageFrame", wire.parse_page, {"opId": "op-2", "attemptId": "a1", "projectId": "p1", "after": "B",
                                    "recordVersion": 4, "records": [state("C")], "complete": True}),
    ("ApplyFrame", wire.parse_apply, {"kind": "env.replica.apply", "opId": "d1", "projectId": "p1",
                                      "recordVersion": 1, "state": state("A", ref=LEGACY),
                                      "delivery": {"streamId": "s1", "sequence": 1}}),
    ("ApplyFrame", wire.parse_apply, {"kind": "env.replica.apply", "opId": "d2", "projectId": "p1",
                                      "recordVersion": 2, "state": state("A", ref=None),
                                      "delivery": {"streamId": "s1", "sequence": 2},
                                      "reconciliationAttemptId": "a1"}),
    ("CommitFrame", wire.parse_commit, {"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 0},
                                        "versions": [{"projectId": "p1", "recordVersion": 0},
                                                     {"projectId": "p2", "recordVersion": 7}]}),
    ("PolicyEpochs", wire.parse_policy_epochs, [1, 2, 9]),
    ("Segment", wire.parse_org_id, "org.1"),
    ("Result", wire.parse_record_result, {"state": state("A"), "materialization": {"kind": "installed"}}),
    ("Result", wire.parse_record_result, {"state": state("A"), "materialization": {"kind": "unavailable",
                                                                                  "reason": "value_missing"}}),
    ("Cursor", wire.parse_cursor, {"streamId": "s1", "sequence": 5}),
]

#: Values of every JSON type, and out of range, that a mutation puts at a path.
ODD = [None, True, False, 0, -1, 2**53, 17, "", "x", "A" * 300, "not a uuid", [], [1], {}, {"kind": "omit"}]


def mutations(base: Any) -> Iterator[tuple[str, Any]]:
    """Every structural change of ``base`` at every path: removed or added keys, every odd value."""
    for path, here in places(base):
        if isinstance(here, dict):
            for key in here:
                smaller = copy.deepcopy(here)
                del smaller[key]
                yield f"{path} without {key}", put(base, path, smaller)
            yield f"{path} plus a key", put(base, path, {**here, "extra": 1})
        if isinstance(here, list) and here:
            yield f"{path} emptied", put(base, path, [])
        for odd in ODD:
            yield f"{path} = {odd!r:.20}", put(base, path, odd)


def _wire_accepts(parse: Callable[[Any], Any], value: Any) -> tuple[bool, str]:
    try:
        parse(value)
    except InvalidFrame as error:
        return False, error.message
    return True, ""


BEYOND_WORDS = ("strictly ascending", "follows after", "greater than")


def test_the_shipped_schema_is_what_the_generator_writes():
    assert S.shipped_path().read_text(encoding="utf-8") == S.render(), (
        "spec/contract.schema.json is stale: write it again with "
        "python -c 'from envreplica.spec import schema as S; S.shipped_path().write_text(S.render())'")


def test_the_typescript_kits_copy_is_the_shipped_schema():
    kit_copy = ROOT / "adapters" / "typescript" / "src" / "kit" / "generated" / "contract.schema.json"
    assert kit_copy.read_text(encoding="utf-8") == S.render(), "run `npm run gen-types` in adapters/typescript"


def test_the_document_is_a_2020_12_schema_with_ids_and_descriptions():
    document = S.schema_document()
    Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for name, definition in document["$defs"].items():
        assert definition["$id"] == name and definition.get("description"), name
        Draft202012Validator.check_schema(S.standalone(name))


@pytest.mark.parametrize("name, parse, base", BASES, ids=[f"{b[0]}-{i}" for i, b in enumerate(BASES)])
def test_schema_and_wire_agree_on_every_structural_mutation(name, parse, base):
    assert _wire_accepts(parse, base)[0] and conforms(name, base)
    checked = 0
    for what, value in mutations(base):
        accepted, why = _wire_accepts(parse, value)
        if not accepted and any(word in why for word in BEYOND_WORDS):
            continue  # a rule beyond the schema: tested one by one below
        assert conforms(name, value) == accepted, f"{name} {what}: spec.wire {'accepts' if accepted else why}"
        checked += 1
    assert checked >= len(ODD)


def _readback(doc: dict) -> bool:
    try:
        doc_to_state(doc, store_on=True)
    except StateDocError:
        return False
    return True


def _state_doc(**tables: Any) -> dict:
    doc = ModelDriver("fixed").state_doc()
    doc.update(tables)
    return doc


def _page(keys: list[str], after: Any = None) -> dict:
    return {"opId": "o", "attemptId": "a1", "projectId": "p1", "after": after, "recordVersion": 1,
            "records": [state(k) for k in keys], "complete": True}


def _beyond_integer_literals() -> None:
    # JSON Schema's integer admits 1.0; the contract's Count does not (Python reads it as a float).
    assert conforms("Count", 1.0) and conforms("Cursor", {"streamId": "s1", "sequence": 5.0})
    assert not _wire_accepts(wire.parse_cursor, {"streamId": "s1", "sequence": 5.0})[0]


def _beyond_policy_epochs_ascending() -> None:
    assert conforms("PolicyEpochs", [2, 1])
    assert not _wire_accepts(wire.parse_policy_epochs, [2, 1])[0]


def _beyond_page_keys_ascending() -> None:
    assert conforms("PageFrame", _page(["B", "A"]))
    assert not _wire_accepts(wire.parse_page, _page(["B", "A"]))[0]


def _beyond_page_keys_after() -> None:
    assert conforms("PageFrame", _page(["A"], after="B"))
    assert not _wire_accepts(wire.parse_page, _page(["A"], after="B"))[0]


def _beyond_commit_versions_ascending() -> None:
    frame = {"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 0},
             "versions": [{"projectId": "p2", "recordVersion": 0}, {"projectId": "p1", "recordVersion": 0}]}
    assert conforms("CommitFrame", frame)
    assert not _wire_accepts(wire.parse_commit, frame)[0]


def _beyond_state_key_matches_row() -> None:
    doc = _state_doc(records=[{"projectId": "p1", "key": "A", "state": state("B"),
                               "materialization": {"kind": "installed"}}])
    assert conforms("StateDocument", doc) and not _readback(doc)


def _beyond_state_rows_sorted() -> None:
    doc = _state_doc(projects=[{"projectId": "p2", "recordVersion": 0}, {"projectId": "p1", "recordVersion": 0}])
    assert conforms("StateDocument", doc) and not _readback(doc)


def _beyond_state_receipt_shape() -> None:
    doc = _state_doc(receipts=[{"streamId": "s1", "sequence": 1, "requestMac": "m", "ok": True, "code": None,
                                "result": None, "recordVersion": None}])
    assert conforms("StateDocument", doc) and not _readback(doc)


def _beyond_state_gate() -> None:
    doc = _state_doc()
    doc["authority"] = {**doc["authority"], "gateOpen": True}  # never activated, yet open
    assert conforms("StateDocument", doc) and not _readback(doc)


def _beyond_nesting_depth() -> None:
    driver = ModelDriver("fixed")
    assert driver.handle({"id": 1, "op": "reset"})["ok"]
    request: dict = {"id": 100, "op": "status"}
    for depth in range(S.MAX_NESTING + 1):  # the innermost status is one level past the limit
        request = {"id": depth, "op": "page", "frame": _page(["A"]), "duringFetch": [request]}
    assert conforms("Request", request)
    # Nothing here reads the value store (no attempt is open), so each page answers without running its nested
    # requests; the limit is held where nested requests run (``_run_nested``).
    driver._depth = S.MAX_NESTING
    nested: list = []
    driver._run_nested([{"id": 7, "op": "status"}], nested)
    assert nested[0]["error"]["type"] == "invalid" and str(S.MAX_NESTING) in nested[0]["error"]["message"]


def _beyond_ack_page_bytes() -> None:
    # A page whose acknowledgement is over the configured bound is a refusal of the replica, not a schema rule.
    driver = ModelDriver("fixed")
    driver.handle({"id": 1, "op": "reset", "config": {"ackPageBytes": 10}})
    driver.handle({"id": 2, "op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"},
                                                      "projectIds": ["p1"]}, "keptPolicyEpochs": [1], "orgId": "o1"})
    request = {"id": 3, "op": "page", "frame": _page(["A"])}
    assert conforms("PageRequest", request)
    answer = driver.handle(request)
    assert answer["ok"] and answer["result"] == {**answer["result"], "ok": False, "code": "ack_page_too_large"}


BEYOND_CASES: dict[str, Callable[[], None]] = {
    "integer-literals": _beyond_integer_literals,
    "policy-epochs-ascending": _beyond_policy_epochs_ascending,
    "page-keys-ascending": _beyond_page_keys_ascending,
    "page-keys-after": _beyond_page_keys_after,
    "commit-versions-ascending": _beyond_commit_versions_ascending,
    "state-key-matches-row": _beyond_state_key_matches_row,
    "state-rows-sorted": _beyond_state_rows_sorted,
    "state-receipt-shape": _beyond_state_receipt_shape,
    "state-gate": _beyond_state_gate,
    "nesting-depth": _beyond_nesting_depth,
    "ack-page-bytes": _beyond_ack_page_bytes,
}


def test_every_rule_beyond_the_schema_has_a_test():
    assert set(BEYOND_CASES) == set(S.BEYOND_THE_SCHEMA)


@pytest.mark.parametrize("rule", sorted(S.BEYOND_THE_SCHEMA))
def test_a_rule_beyond_the_schema(rule):
    BEYOND_CASES[rule]()


def test_the_protocol_document_lists_every_rule_beyond_the_schema():
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    for rule in S.BEYOND_THE_SCHEMA:
        assert f"`{rule}`" in text, rule


def test_the_adapters_op_table_is_the_schemas():
    from envreplica.conformance.drivers import OPS

    assert OPS == {op: (spec.required, spec.optional) for op, spec in S.OPS.items()}
    assert set(S.RESULT_OF_OP.values()) <= set(S.definitions())


def test_the_schema_command(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == S.schema_document()
    assert main(["schema", "PageFrame"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert Draft202012Validator(page).is_valid(_page(["A", "B"]))
    assert not Draft202012Validator(page).is_valid({**_page(["A"]), "extra": 1})
    assert main(["schema", "--list"]) == 0
    assert capsys.readouterr().out.split() == list(S.definitions())
    assert main(["schema", "Frame"]) == 2
    assert "no schema named 'Frame'" in capsys.readouterr().err


def test_a_state_document_checked_row_by_row_is_checked_as_a_whole():
    """``schema_check`` validates state documents row by row (each distinct row once): the same verdicts."""
    driver = ModelDriver("fixed")
    for request in ({"id": 1, "op": "reset"},
                    {"id": 2, "op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"},
                                                        "projectIds": ["p1"]}, "keptPolicyEpochs": [1], "orgId": "o1"},
                    {"id": 3, "op": "page", "frame": _page(["A", "B"])}):
        driver.handle(request)
    doc = driver.state_doc()
    assert doc["stageRecords"] and doc["stageProjects"]
    whole = validator("StateDocument")
    for what, value in [("as read", doc), *mutations(doc)]:
        assert conforms("StateDocument", value) == whole.is_valid(value), what


def test_validator_names_every_definition():
    for name in S.definitions():
        validator(name)


# ---------------------------------------------------------------------------
# The answers: one response definition per op, each operation's refusal codes, snapshot values
# ---------------------------------------------------------------------------

#: The response definitions, in the op table's order.
RESPONSES = ["ResetResponse", "StorePutResponse", "StoreFailResponse", "StoreOffResponse", "BeginResponse",
             "PageResponse", "DeliveryResponse", "CommitResponse", "CloseResponse", "StatusResponse",
             "SnapshotResponse", "ReceiptsResponse", "RestartResponse", "ReadyResponse", "DiagnosticsResponse",
             "StateResponse"]

EPOCHS_CURSOR = {"policyEpochs": [1], "appliedThrough": {"streamId": "s1", "sequence": 3}}
RESULT = {"state": state("A"), "materialization": {"kind": "installed"}}
STATUS = {"activated": True, "gateOpen": True, "attemptId": None, "orgId": "o1",
          "appliedThrough": {"streamId": "s1", "sequence": 3}, "policyEpochs": [1], "projectIds": ["p1"]}


def _ok(result: Any, rid: Any = 7) -> dict:
    return {"id": rid, "ok": True, "result": result}


def _page_refused(code: str) -> dict:
    return {"ok": False, "attemptId": "a1", "code": code, **EPOCHS_CURSOR}


def _delivery_refused(code: str, *, replayed: bool, consumed: bool) -> dict:
    return {"ok": False, "replayed": replayed, "consumed": consumed, "attemptId": None, "code": code,
            **EPOCHS_CURSOR}


def _commit_refused(code: str) -> dict:
    return {"ok": False, "attemptId": "a1", "code": code, **EPOCHS_CURSOR}


def _snapshot(materialization: dict, value: Any) -> dict:
    return {"projects": [{"projectId": "p1", "recordVersion": 1,
                          "entries": [{"state": state("A"), "materialization": materialization, "value": value}]}]}


def _receipt(code: Any) -> dict:
    return {"streamId": "s1", "sequence": 1, "ok": code is None, "code": code,
            "result": RESULT if code is None else None, "recordVersion": 1 if code is None else None}


#: (definition, an answer it refuses, why): the holes issue 31 found, and their neighbours.
WRONG_ANSWERS: list[tuple[str, Any, str]] = [
    ("StatusResponse", _ok(42), "42 is no Status"),
    ("Response", _ok(42), "42 is no op's result"),
    ("StatusResponse", _ok({**STATUS, "orgId": "bad id!"}), "an orgId that is not a Segment"),
    ("PageResponse", _ok(_page_refused("no_such_code")), "an unknown refusal code"),
    ("Response", _ok(_page_refused("no_such_code")), "an unknown refusal code in any op's answer"),
    ("PageResponse", _ok(_page_refused("delivery_gap")), "a delivery's code in a page's answer"),
    ("PageResponse", _ok(_page_refused("record_version_conflict")), "a delivery's consuming code in a page's"),
    ("PageResponse", _ok(_page_refused("delivery_incomplete")), "a commit's code in a page's answer"),
    ("DeliveryResponse", _ok(_delivery_refused("snapshot_page_mismatch", replayed=False, consumed=False)),
     "a page's code in a delivery's answer"),
    ("DeliveryResponse", _ok(_delivery_refused("ack_page_too_large", replayed=False, consumed=True)),
     "a page's code, consumed, in a delivery's answer"),
    ("CommitResponse", _ok(_commit_refused("snapshot_version_conflict")), "a page's code in a commit's answer"),
    ("CommitResponse", _ok(_commit_refused("delivery_gap")), "a delivery's code in a commit's answer"),
    ("DeliveryResponse", _ok(_delivery_refused("delivery_gap", replayed=False, consumed=True)),
     "a transient code with consumed true"),
    ("DeliveryResponse", _ok(_delivery_refused("stream_mismatch", replayed=True, consumed=False)),
     "a transient code replayed"),
    ("DeliveryResponse", _ok(_delivery_refused("record_version_conflict", replayed=False, consumed=False)),
     "a consuming code with consumed false"),
    ("DeliveryResponse", _ok(_delivery_refused("delivery_conflict", replayed=False, consumed=True)),
     "delivery_conflict not replayed"),
    ("SnapshotResponse", _ok(_snapshot({"kind": "installed"}, None)), "an installed entry without its value"),
    ("SnapshotResponse", _ok(_snapshot({"kind": "withheld", "reason": "tombstone"}, "hunter2")),
     "a withheld entry with a value"),
    ("SnapshotResponse", _ok(_snapshot({"kind": "unavailable", "reason": "value_missing"}, "")),
     "an unavailable entry with a value"),
    ("ReceiptsResponse", _ok([_receipt("delivery_gap")]), "a receipt of a transient code"),
    ("ReceiptsResponse", _ok([_receipt("delivery_conflict")]), "a receipt of delivery_conflict (nothing is written)"),
    ("StatusResponse", _ok(STATUS, rid=None), "id null with ok true"),
    ("Response", _ok({}, rid=None), "id null with ok true, any op"),
    ("ResetResponse", _ok(STATUS), "a reset answers {}"),
    ("BeginResponse", _ok({"crashedAfterCommit": 1}), "only a page or a delivery crashes"),
    ("PageResponse", {"id": 7, "ok": False, "error": {"type": "refused", "message": "x"}}, "an error type not in 5.1"),
    ("PageResponse", {**_ok(_page_refused("ack_page_too_large")), "nested": [_ok(42)]},
     "a nested answer that is no op's"),
]

#: (definition, an answer it accepts).
RIGHT_ANSWERS: list[tuple[str, Any]] = [
    ("StatusResponse", _ok(STATUS)),
    ("Response", _ok(STATUS)),
    ("ResetResponse", _ok({})),
    ("StatusResponse", {"id": None, "ok": False, "error": {"type": "invalid", "message": "no integer id"}}),
    ("PageResponse", _ok({"crashedAfterCommit": 2})),
    ("DeliveryResponse", _ok({"crashedAfterCommit": 1})),
    ("PageResponse", {**_ok(_page_refused("ack_page_too_large")), "nested": [_ok(STATUS), _ok({})]}),
    ("DeliveryResponse", _ok({"ok": True, "replayed": True, "attemptId": None, "projectId": "p1",
                              "recordVersion": 1, "result": RESULT, **EPOCHS_CURSOR})),
    ("DeliveryResponse", _ok(_delivery_refused("record_version_conflict", replayed=True, consumed=True))),
    ("DeliveryResponse", _ok(_delivery_refused("delivery_conflict", replayed=True, consumed=True))),
    ("SnapshotResponse", _ok(_snapshot({"kind": "installed"}, ""))),
    ("SnapshotResponse", _ok(_snapshot({"kind": "withheld", "reason": "tombstone"}, None))),
    ("SnapshotResponse", _ok(None)),
    ("ReceiptsResponse", _ok([_receipt(None), _receipt("project_not_in_replica")])),
    ("DiagnosticsResponse", _ok({"reason": "gate_closed", "message": "closed"})),
    ("DiagnosticsResponse", _ok(None)),
    ("ReadyResponse", _ok({"ready": False})),
    ("Response", {"id": None, "ok": False, "error": {"type": "unsupported", "message": "what op?"}}),
]
RIGHT_ANSWERS += [("PageResponse", _ok(_page_refused(c.value))) for c in PAGE_REFUSALS]
RIGHT_ANSWERS += [("CommitResponse", _ok(_commit_refused(c.value))) for c in COMMIT_REFUSALS]
RIGHT_ANSWERS += [("DeliveryResponse", _ok(_delivery_refused(c.value, replayed=False, consumed=False)))
                  for c in TRANSIENT_REFUSALS]
RIGHT_ANSWERS += [("DeliveryResponse", _ok(_delivery_refused(c.value, replayed=False, consumed=True)))
                  for c in RECEIPT_REFUSALS]


def _compiled() -> Validator:
    return answers.contract()


def test_one_response_definition_per_op_in_the_op_table_and_the_command(capsys):
    assert [S.response_definition(op) for op in S.OPS] == RESPONSES
    defs = S.definitions()
    for op in S.OPS:
        entry = defs["Ops"]["properties"][op]["properties"]
        assert entry == {"request": {"$ref": S.request_definition(op)}, "result": {"$ref": S.RESULT_OF_OP[op]},
                         "response": {"$ref": S.response_definition(op)}}
    for name in RESPONSES:
        assert main(["schema", name]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["$id"] == S.BASE + name and "oneOf" in printed and "Response" in printed["$defs"]


@pytest.mark.parametrize("name, answer, why", WRONG_ANSWERS, ids=[w[2] for w in WRONG_ANSWERS])
def test_a_wrong_answer_is_refused_by_its_definition(name, answer, why):
    assert not validator(name).is_valid(answer), why  # jsonschema
    assert not _compiled().check(name)(answer), why  # the harness's compiled validator
    assert _compiled().explain(name, answer, "response")


@pytest.mark.parametrize("name, answer", RIGHT_ANSWERS, ids=[f"{r[0]}-{i}" for i, r in enumerate(RIGHT_ANSWERS)])
def test_a_right_answer_is_accepted_by_its_definition(name, answer):
    assert validator(name).is_valid(answer), list(validator(name).iter_errors(answer))[:1]
    assert _compiled().check(name)(answer) and _compiled().explain(name, answer) is None
    assert validator("Response").is_valid(answer) and _compiled().check("Response")(answer)


def test_the_refusal_code_sets_partition_the_codes_and_are_the_schemas():
    assert PAGE_REFUSALS | DELIVERY_REFUSALS | COMMIT_REFUSALS == set(RefusalCode)
    assert DELIVERY_REFUSALS == TRANSIENT_REFUSALS | CONSUMED_REFUSALS
    assert not TRANSIENT_REFUSALS & CONSUMED_REFUSALS
    assert RECEIPT_REFUSALS < CONSUMED_REFUSALS and CONSUMED_REFUSALS - RECEIPT_REFUSALS == {
        RefusalCode.DELIVERY_CONFLICT}
    defs = S.definitions()
    for name, codes in [("PageRefusalCode", PAGE_REFUSALS), ("DeliveryRefusalCode", DELIVERY_REFUSALS),
                        ("TransientRefusalCode", TRANSIENT_REFUSALS), ("ConsumedRefusalCode", CONSUMED_REFUSALS),
                        ("ReceiptRefusalCode", RECEIPT_REFUSALS), ("CommitRefusalCode", COMMIT_REFUSALS)]:
        assert defs[name]["enum"] == [c.value for c in RefusalCode if c in codes], name


def test_the_protocol_document_lists_the_response_definitions_and_the_code_sets():
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = text[text.index("## 9. The JSON Schema"):text.index("## 10. Operations")]
    for name in [*RESPONSES, *S.definitions()]:
        if not name.startswith("Migration") or name in ("MigrationRequest", "MigrationResponse"):
            assert f"`{name}`" in section, name
    for name, codes, _ in S._REFUSAL_SETS:
        row = f"| `{name}` | " + ", ".join(f"`{c.value}`" for c in RefusalCode if c in codes) + " |"
        assert row in section, f"docs/protocol.md section 9 should have the row {row}"


def test_the_model_answers_follow_their_definitions():
    """A model run through many ops: every answer is its op's response (the lockstep's ci runs check the rest)."""
    driver = ModelDriver("fixed")
    begin = {"frame": {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": ["p1"]},
             "keptPolicyEpochs": [1], "orgId": "o1"}
    delivery = {"kind": "env.replica.apply", "opId": "d1", "projectId": "p9", "recordVersion": 1,
                "state": state("B", ref=None), "delivery": {"streamId": "s1", "sequence": 1}}
    versions = [{"projectId": "p1", "recordVersion": 1}]
    requests = [
        {"op": "reset"}, {"op": "status"}, {"op": "page", "frame": _page(["A"])}, {"op": "begin", **begin},
        {"op": "page", "frame": {**_page(["A"]), "attemptId": "other"}}, {"op": "page", "frame": _page(["A"])},
        {"op": "delivery", "frame": delivery, "duringFetch": [{"id": 99, "op": "status"}]},
        {"op": "commit", "frame": {"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 9},
                                   "versions": versions}},
        {"op": "commit", "frame": {"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 0},
                                   "versions": versions}},
        {"op": "delivery", "frame": delivery}, {"op": "delivery", "frame": delivery},
        {"op": "delivery", "frame": {**delivery, "projectId": "p1"}},
        {"op": "delivery", "frame": {**delivery, "projectId": "p1", "recordVersion": 2, "state": state("A"),
                                     "delivery": {"streamId": "s1", "sequence": 2}}},
        {"op": "delivery", "frame": {**delivery, "delivery": {"streamId": "s1", "sequence": 7}}},
        {"op": "page", "frame": _page(["A"]), "crashAfterCommit": 1},
        {"op": "snapshot", "projectIds": ["p1"]}, {"op": "snapshot", "projectIds": []}, {"op": "receipts"},
        {"op": "diagnostics", "projectIds": []}, {"op": "ready", "timeoutMs": 0}, {"op": "state"},
        {"op": "close"}, {"op": "restart"}, {"op": "nope"}, {"id": "x", "op": "status"},
    ]
    codes = set()
    for n, request in enumerate(requests):
        request = {"id": n, **request}
        response = driver.handle(request)
        assert answers.answer_problem(request, response) is None, (request, response)
        result = response.get("result")
        if isinstance(result, dict) and "code" in result:
            codes.add((request["op"], result["code"], result.get("consumed")))
    assert {("page", "reconciliation_attempt_mismatch", None), ("commit", "delivery_incomplete", None),
            ("delivery", "reconciliation_attempt_mismatch", False), ("delivery", "project_not_in_replica", True),
            ("delivery", "delivery_conflict", True), ("delivery", "delivery_gap", False)} <= codes, codes


def _answers_corpus() -> Iterator[tuple[str, Any]]:
    """Definitions and values (valid ones and every mutation of them) to hold the two validators to each other."""
    for name, _, base in BASES:
        yield name, base
        for _, value in mutations(base):
            yield name, value
    for name, answer in RIGHT_ANSWERS:
        yield name, answer
        yield "Response", answer
    for name, answer, _ in WRONG_ANSWERS:
        yield name, answer
    # every mutation of one answer of each kind of result (jsonschema takes milliseconds for each)
    for name, answer in [RIGHT_ANSWERS[0], RIGHT_ANSWERS[8], RIGHT_ANSWERS[10],
                         RIGHT_ANSWERS[13], ("PageResponse", _ok(_page_refused("ack_page_too_large")))]:
        for _, value in mutations(answer):
            yield name, value


def test_the_compiled_validator_agrees_with_jsonschema():
    """``spec.validator``'s verdict (``jsonschema_rs``: what the harness checks answers with) is ``jsonschema``'s on
    every value of the corpus, and it explains exactly the values it refuses."""
    compiled = _compiled()
    checked = refused = 0
    for name, value in _answers_corpus():
        verdict = conforms(name, value)  # jsonschema's (each distinct value once: the frames' are checked above)
        assert compiled.check(name)(value) == verdict, (name, value)
        assert (compiled.explain(name, value) is None) == verdict, (name, value)
        checked += 1
        refused += not verdict
    assert checked > 2000 and refused > 1000


def test_the_validator_compiles_every_definition_and_names_a_wrong_one():
    compiled = Validator(S.definitions())
    for name in S.definitions():
        compiled.check(name)
    with pytest.raises(KeyError, match="no definition named 'Nope'"):
        compiled.check("Nope")


# ---------------------------------------------------------------------------
# The harness holds every answer of an adapter to its definition
# ---------------------------------------------------------------------------

MODEL_ADAPTER = [sys.executable, "-m", "envreplica.conformance.adapter", "--impl", "model"]

#: Wraps the model adapter; answers a refused page with a delivery's code.
DELIVERY_CODE_PAGE_ADAPTER = textwrap.dedent("""
    import sys

    from envreplica.conformance import adapter
    from envreplica.conformance.drivers import ModelDriver


    class Wrong(ModelDriver):
        def handle(self, request):
            response = super().handle(request)
            result = response.get("result") if response.get("ok") else None
            if request.get("op") == "page" and isinstance(result, dict) and result.get("ok") is False:
                result["code"] = "delivery_gap"
            return response


    adapter.ModelDriver = Wrong
    from envreplica.cli.adapter import main  # the options (cli/adapter.py)
    sys.exit(main(sys.argv[1:]))
""")

#: Answers the first request (a reset) with a result a reset never has.
WRONG_RESET_ADAPTER = ("import json, sys\n"
                       "for line in sys.stdin:\n"
                       "    print(json.dumps({'id': json.loads(line).get('id'), 'ok': True, 'result': {'fresh': 1}}),"
                       " flush=True)\n")


def test_the_test_suite_checks_answers():
    assert answers.CHECK_ANSWERS and os.environ.get("ENVREPLICA_CHECK_ANSWERS") == "1"  # tests/conftest.py


def test_a_lockstep_through_an_adapter_holds_every_answer_to_its_definition(tmp_path):
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    made: list[SubprocessDriver] = []

    def factory() -> SubprocessDriver:
        made.append(SubprocessDriver(MODEL_ADAPTER))
        return made[-1]

    before = answers.answers_checked()
    report = run_lockstep(factory, variant="fixed", settings=lockstep_settings("dev", max_examples=5),
                          out_dir=tmp_path)
    assert report.ok, report.failure
    checked = sum(d.answers_checked for d in made)
    # every step, every state read after one, every probe of the extensions: all answered, all checked
    assert checked >= report.steps + report.checks > 0, (checked, report.steps, report.checks)
    assert answers.answers_checked() - before >= checked


def test_an_answer_that_breaks_its_definition_is_a_protocol_break(tmp_path):
    script = tmp_path / "wrong_page.py"
    script.write_text(DELIVERY_CODE_PAGE_ADAPTER)
    begin = {"op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": ["p1"]},
             "keptPolicyEpochs": [1], "orgId": "o1"}
    wrong_page = {"id": 3, "op": "page", "frame": {**_page(["A"]), "attemptId": "a2"}}  # not the open attempt
    with SubprocessDriver([sys.executable, str(script), "--impl", "model"]) as driver:
        assert driver.handle({"id": 1, "op": "reset"})["ok"] and driver.handle({"id": 2, **begin})["ok"]
        with pytest.raises(ProtocolBreak) as caught:
            driver.handle(wrong_page)
        assert driver.answers_checked == 3
    broke = caught.value
    assert isinstance(broke, AdapterError) and (broke.op, broke.definition) == ("page", "PageResponse")
    assert broke.where.startswith('response.result.code: "delivery_gap" is not one of PageRefusalCode\'s values')
    assert "request 3 (op 'page', id 3) breaks its definition PageResponse" in str(broke)
    # The lockstep shows it as the divergence from the model's answer it also is (the model's code beside it).
    from envreplica.conformance.replica import replay_steps

    with SubprocessDriver([sys.executable, str(script), "--impl", "model"]) as driver:
        _, divergence = replay_steps([{"id": 1, "op": "reset"}, {"id": 2, **begin}, wrong_page], driver,
                                     ModelDriver("fixed"), state_check=False)
    assert divergence is not None and divergence["index"] == 3
    assert divergence["reason"].startswith("response.result.code: model "), divergence["reason"]
    assert "delivery_gap" in divergence["reason"]


def test_a_broken_first_answer_stops_the_gate_with_exit_2(tmp_path, capsys):
    script = tmp_path / "wrong_reset.py"
    script.write_text(WRONG_RESET_ADAPTER)
    code = main(["conformance", "--adapter", f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
                 "--max-examples", "2", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2 and "DIVERGENCE" not in captured.out
    (line,) = captured.err.splitlines()
    assert "could not be run" in line and "(op 'reset', id 0) breaks its definition ResetResponse" in line
    assert 'response.result.fresh: a key Empty does not have' in line


def test_the_migration_protocol_is_not_held_to_the_replicas_answers():
    """A process whose first request is ``hello`` speaks section 11: its ``reset`` answers are not this contract's."""
    command = [sys.executable, "-m", "envreplica.cli.main", "adapter", "--protocol", "migration", "--impl", "model"]
    with SubprocessDriver(command) as driver:
        hello = driver.handle({"id": 1, "op": "hello", "protocol": "envreplica-migration/1"})
        assert hello["ok"] and driver.handle({"id": 2, "op": "reset"})["ok"]
        assert driver.handle({"id": 3, "op": "observe"})["result"]["stores"]  # no replica op's result
        assert driver.check_answers is False and driver.answers_checked == 0
