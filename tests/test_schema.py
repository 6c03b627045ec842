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
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from jsonschema import Draft202012Validator

from envreplica.cli.main import main
from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.readback import StateDocError, doc_to_state
from envreplica.spec import schema as S
from envreplica.spec import wire
from envreplica.spec.domain import InvalidFrame

from schema_check import Contract, conforms, validator

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


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, path + (i,))


def _set(root: Any, path: tuple, value: Any) -> Any:
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(root)
    target = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


def mutations(base: Any) -> Iterator[tuple[str, Any]]:
    """Every structural change of ``base`` at every path: removed or added keys, every odd value."""
    for path in _paths(base):
        here = base
        for step in path:
            here = here[step]
        if isinstance(here, dict):
            for key in here:
                smaller = copy.deepcopy(here)
                del smaller[key]
                yield f"{path} without {key}", _set(base, path, smaller)
            yield f"{path} plus a key", _set(base, path, {**here, "extra": 1})
        if isinstance(here, list) and here:
            yield f"{path} emptied", _set(base, path, [])
        for odd in ODD:
            yield f"{path} = {odd!r:.20}", _set(base, path, odd)


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
