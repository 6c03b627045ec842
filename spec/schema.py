"""The contract as JSON Schema (draft 2020-12), generated from ``spec``'s own definitions.

Models: every JSON shape an implementation exchanges with the harness
(``docs/protocol.md``): the value types, the four frames, the results and
reads, the value store's two envelopes, every adapter request and response,
and the ``state`` document. The value types and the frames are not written
here: they are ``spec.wire``'s declarations (``wire.definitions()``), the
same ones its parser runs, so that the schema and the parser are one truth.
The rest is built here from the definitions the rest of ``spec`` already
holds (``spec.domain``'s refusal codes, materialization kinds and diagnosis
reasons) and from the adapter's op table, ``OPS``, which the drivers read
too. Each op has a response definition of its own
(``response_definition``: ``PageResponse`` for ``page``, its result or an
error), and each result holds only its operation's refusal codes, generated
from ``spec.domain``'s sets (``PAGE_REFUSALS`` and the others).
``schema_document()`` is the whole contract; ``envreplica schema NAME``
prints one definition as a standalone schema.
The shipped copy (``spec/contract.schema.json``) and the TypeScript kit's
types are generated from it, and tests hold the parser of ``spec.wire``,
the drivers and the kit to it.

Leaves out on purpose (``BEYOND_THE_SCHEMA``, each with why): the rules the
schema does not state. They are each checked by ``spec.wire`` or by the
adapter or the harness, listed in ``docs/protocol.md`` section "Beyond the
schema", and each has a test (``tests/test_schema.py``).

Every definition has an ``$id`` relative to ``BASE`` and refers to the others
by those ids (``{"$ref": "Head"}``), so that one definition can be printed
alone with what it needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from envreplica.spec import wire
from envreplica.spec.domain import (
    COMMIT_REFUSALS,
    CONSUMED_REFUSALS,
    DELIVERY_REFUSALS,
    PAGE_REFUSALS,
    RECEIPT_REFUSALS,
    TRANSIENT_REFUSALS,
    RefusalCode,
)

__all__ = [
    "BASE",
    "DIALECT",
    "OPS",
    "OpSpec",
    "BEYOND_THE_SCHEMA",
    "RESULT_OF_OP",
    "definitions",
    "schema_document",
    "standalone",
    "shipped_path",
    "MAX_NESTING",
    "request_definition",
    "response_definition",
    "CRASHING_OPS",
    "DEFAULT_ACK_PAGE_BYTES",
    "DEFAULT_PREFIX",
    "MAX_READY_TIMEOUT_MS",
    "TEST_MASTER_KEY_HEX",
    "constants",
]

#: The JSON Schema dialect of every document here.
DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: The base of every ``$id``: an identifier, not an address to fetch (``.invalid`` is reserved, RFC 2606).
BASE = "https://envreplica.invalid/schema/1/"
#: The seed's ``MAX_PROJECT_ENV_ACK_PAGE_BYTES`` default: the acknowledgement page-size bound, in bytes.
DEFAULT_ACK_PAGE_BYTES = 262144
#: The value store's parameter-name prefix unless a ``reset`` sets another.
DEFAULT_PREFIX = "/envreplica"
#: The longest ``ready`` wait a request may ask for, in milliseconds.
MAX_READY_TIMEOUT_MS = 60000
#: The public test master key (bytes 0x00..0x1f) in hex: anyone can open what is sealed under it.
TEST_MASTER_KEY_HEX = bytes(range(32)).hex()
#: How deep ``duringFetch`` may nest (a request inside a request inside ...); deeper is ``invalid``.
MAX_NESTING = 32

JSON = dict[str, Any]


def _ref(name: str) -> JSON:
    return {"$ref": name}


def _count(minimum: int = 0) -> JSON:
    return wire.Count(minimum).schema()


def _obj(properties: Mapping[str, JSON], *, optional: tuple[str, ...] = (), description: str = "",
         **extra: Any) -> JSON:
    """An exact object: every property required but ``optional``; no other key."""
    out: JSON = {"type": "object"}
    if description:
        out["description"] = description
    out["properties"] = dict(properties)
    out["required"] = [k for k in properties if k not in optional]
    out["additionalProperties"] = False
    out.update(extra)
    return out


def _nullable(schema: JSON) -> JSON:
    return {"anyOf": [schema, {"type": "null"}]}


def _enum(values: Any, description: str) -> JSON:
    return {"type": "string", "enum": [v.value for v in values], "description": description}


# ---------------------------------------------------------------------------
# The value types, frames, results and reads (docs/protocol.md sections 1-3).
# ---------------------------------------------------------------------------


#: The per-operation refusal code definitions: (name, codes, description), generated from ``spec.domain``'s sets.
_REFUSAL_SETS: tuple[tuple[str, frozenset[RefusalCode], str], ...] = (
    ("PageRefusalCode", PAGE_REFUSALS, "The codes a page answers (section 10.5)."),
    ("DeliveryRefusalCode", DELIVERY_REFUSALS, "The codes a delivery answers (section 10.6): transient or "
                                               "consumed."),
    ("TransientRefusalCode", TRANSIENT_REFUSALS, "A delivery's transient codes: `replayed: false, consumed: "
                                                 "false`, nothing written; the cloud may send it again."),
    ("ConsumedRefusalCode", CONSUMED_REFUSALS, "A delivery's codes answered `consumed: true`: a refused "
                                               "receipt's, and `delivery_conflict` (a replay, nothing written)."),
    ("ReceiptRefusalCode", RECEIPT_REFUSALS, "The codes a refused receipt stores: consumed, the cursor moved; "
                                             "a replay answers them again."),
    ("CommitRefusalCode", COMMIT_REFUSALS, "The codes a commit answers (section 10.7)."),
)


def _results() -> dict[str, JSON]:
    d: dict[str, JSON] = {}
    d["RefusalCode"] = _enum(RefusalCode, "Why an operation was refused: a result, not an error. Each operation "
                             "answers only some of them (PageRefusalCode, DeliveryRefusalCode, CommitRefusalCode).")
    for name, codes, what in _REFUSAL_SETS:
        d[name] = _enum([c for c in RefusalCode if c in codes], what)
    d.update(wire.definitions(wire.RESULTS))  # declared with their encoders, in spec.wire
    return d


# ---------------------------------------------------------------------------
# The value store (section 4).
# ---------------------------------------------------------------------------


def _envelopes() -> dict[str, JSON]:
    return {
        "StagedEnvelope": _obj(
            {"v": {"const": 2}, "kind": {"const": "project-env"}, "orgId": {"type": "string"},
             "projectId": {"type": "string"}, "key": {"type": "string"}, "stagingId": {"type": "string"},
             "value": {"type": "string"}},
            description="The text of a staged parameter. It installs only when orgId, projectId, key and "
                        "stagingId are the record's own (else value_envelope_mismatch)."),
        "LegacyEnvelope": _obj(
            {"v": {"const": 1}, "kind": {"const": "project-env"}, "projectId": {"type": "string"},
             "key": {"type": "string"}, "value": {"type": "string"}},
            description="The text of one version of a legacy parameter. Any other shape reads as "
                        "value_unavailable; another projectId or key as value_envelope_mismatch."),
    }


# ---------------------------------------------------------------------------
# The adapter (section 5 and its extensions).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSpec:
    """One adapter op: its own fields (beside ``id`` and ``op``), which of them are optional, and its result."""

    fields: Mapping[str, JSON]  # each field's schema
    optional: tuple[str, ...]  # the fields a request may leave out
    result: str  # the definition its `result` follows
    description: str  # what it does, in one sentence
    extension: bool = False  # an optional op (an adapter that does not offer it answers unsupported)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(k for k in self.fields if k not in self.optional)


_STORE_TARGET = {"projectId": _ref("Segment"), "key": _ref("Key"), "ref": _ref("ValueRef")}
_NESTED = {"type": "array",
           "description": "Requests run at the moment this operation's first value-store read is in flight, each "
                          "answered on its own by the same rules (an invalid one is answered invalid there); their "
                          f"responses come back as `nested`. At most {MAX_NESTING} levels deep."}
_CRASH = {**_count(1), "description": "Die right after this operation's k-th write commit (never with "
          "duringFetch)."}

#: The adapter's ops, in the order of docs/protocol.md: each op's own fields and its result. A field the drivers
#: hand to ``spec.wire``'s parser has the schema of the declaration that parser runs.
OPS: dict[str, OpSpec] = {
    "reset": OpSpec({"config": _nullable(_obj(
        {"ackPageBytes": _ref("Count"),
         "masterKeyHex": {"type": "string", "pattern": "^[0-9a-fA-F]{64}(?![\\s\\S])"},
         "prefix": {"type": "string"}}, optional=("ackPageBytes", "masterKeyHex", "prefix")))},
        ("config",), "Empty", "A fresh, empty replica and value store (config null is {})."),
    "store.put": OpSpec({**_STORE_TARGET, "raw": {"type": "string"}, "reportedVersion": _count(1)},
                        ("reportedVersion",), "Empty",
                        "The value store answers that reference with `raw` (a legacy read reports "
                        "`reportedVersion`)."),
    "store.fail": OpSpec({**_STORE_TARGET, "mode": {"enum": ["missing", "error"]}}, (), "Empty",
                         "Reads of that reference find nothing, or raise."),
    "store.off": OpSpec({}, (), "Empty", "Operations that start from now on have no value store."),
    "begin": OpSpec({"frame": wire.BEGIN.schema(), "keptPolicyEpochs": wire.POLICY_EPOCHS.schema(),
                     "orgId": wire.SEGMENT.schema()}, (), "BeginResult", "beginProjectEnvReplica."),
    "page": OpSpec({"frame": wire.PAGE.schema(), "duringFetch": _NESTED, "crashAfterCommit": _CRASH},
                   ("duringFetch", "crashAfterCommit"), "PageResult", "applyProjectEnvReplicaPage."),
    "delivery": OpSpec({"frame": wire.APPLY.schema(), "duringFetch": _NESTED, "crashAfterCommit": _CRASH},
                       ("duringFetch", "crashAfterCommit"), "ApplyResult", "applyProjectEnvReplicaDelivery."),
    "commit": OpSpec({"frame": wire.COMMIT.schema()}, (), "CommitResult", "completeProjectEnvReplica."),
    "close": OpSpec({}, (), "Empty", "closeProjectEnvReplicaGate."),
    "status": OpSpec({}, (), "Status", "readProjectEnvReplicaStatus."),
    "snapshot": OpSpec({"projectIds": wire.PROJECT_IDS.schema()}, (), "Snapshot",
                       "readProjectEnvReplicaSnapshot (repeats allowed: the read fails closed on them)."),
    "receipts": OpSpec({}, (), "Receipts", "listProjectEnvReplicaReceipts, without MACs."),
    "restart": OpSpec({}, (), "Empty", "Reopen the store from disk as after a crash, then close the gate."),
    "ready": OpSpec({"timeoutMs": {"type": "integer", "minimum": 0, "maximum": MAX_READY_TIMEOUT_MS}}, (), "Readiness",
                    "awaitProjectEnvReplicaReady with this timeout.", extension=True),
    "diagnostics": OpSpec({"projectIds": wire.PROJECT_IDS.schema()}, (), "Diagnosis",
                          "Why `snapshot` of these ids would be null.", extension=True),
    "state": OpSpec({}, (), "StateDocument", "Every table, values opened (a test op).", extension=True),
}

#: op -> the definition its successful ``result`` follows (a ``crashAfterCommit`` answer is ``Crashed``).
RESULT_OF_OP: dict[str, str] = {op: spec.result for op, spec in OPS.items()}


def request_definition(op: str) -> str:
    """The name of the definition of ``op``'s requests (``store.put`` -> ``StorePutRequest``)."""
    return "".join(part.capitalize() for part in op.replace(".", "_").split("_")) + "Request"


def response_definition(op: str) -> str:
    """The name of the definition of ``op``'s responses (``store.put`` -> ``StorePutResponse``)."""
    return request_definition(op).removesuffix("Request") + "Response"


#: The ops whose request may carry ``crashAfterCommit``: a successful answer is their result or ``Crashed``.
CRASHING_OPS = tuple(op for op, spec in OPS.items() if "crashAfterCommit" in spec.fields)


def _responses() -> dict[str, JSON]:
    """``Response`` (any op's) and one response definition per op: a success or a failure (section 5.1)."""
    nested = {"type": "array", "items": _ref("Response"),
              "description": "The responses of a request's duringFetch, present exactly when it carried one; each "
                             "follows its own op's response definition."}
    failure = _obj({"id": _nullable({"type": "integer"}), "ok": {"const": False}, "error": _ref("Error"),
                    "nested": nested}, optional=("nested",),
                   description="A failure: `id` is null only for a request without an integer id.")

    def success(result: JSON) -> JSON:
        return _obj({"id": {"type": "integer"}, "ok": {"const": True}, "result": result, "nested": nested},
                    optional=("nested",), description="A success: the request's integer id and the op's result.")

    d: dict[str, JSON] = {}
    results = list(dict.fromkeys([*RESULT_OF_OP.values(), "Crashed"]))
    d["Response"] = {"description": "One adapter response, of any op: one JSON line per request, in order. A "
                     "successful `result` is one of the ops' results; the op's own response definition (Ops) says "
                     "which.", "oneOf": [success({"anyOf": [_ref(name) for name in results]}), failure]}
    for op, spec in OPS.items():
        result = _ref(spec.result)
        if op in CRASHING_OPS:
            result = {"oneOf": [result, _ref("Crashed")],
                      "description": f"{spec.result}, or Crashed when the request's crashAfterCommit crashed."}
        d[response_definition(op)] = {"description": f"The response to `{op}`: its result ({spec.result}"
                                      + (" or Crashed" if op in CRASHING_OPS else "") + "), or an error.",
                                      "oneOf": [success(result), failure]}
    return d


def _adapter() -> dict[str, JSON]:
    d: dict[str, JSON] = {}
    for op, spec in OPS.items():
        extra: JSON = {}
        if "duringFetch" in spec.fields and "crashAfterCommit" in spec.fields:
            extra["not"] = {"required": ["duringFetch", "crashAfterCommit"]}
        head: JSON = {"id": {"type": "integer"}, "op": {"const": op}}
        description = f"`{op}`: {spec.description}" + (
            " An extension: an adapter that does not offer it answers unsupported." if spec.extension else "")
        if op in ("store.put", "store.fail"):
            # A staged ref takes no reportedVersion; a legacy ref needs a key that has a legacy parameter name.
            staged = {**spec.fields, "ref": _ref("StagedRef")}
            staged.pop("reportedVersion", None)
            legacy = {**spec.fields, "key": _ref("Segment"), "ref": _ref("LegacyRef")}
            d[request_definition(op)] = {"description": description, "oneOf": [
                _obj({**head, **staged}, optional=spec.optional),
                _obj({**head, **legacy}, optional=spec.optional)]}
            continue
        d[request_definition(op)] = _obj({**head, **spec.fields}, optional=spec.optional, description=description,
                                    **extra)
    d["Request"] = {"description": "One adapter request: one JSON object per line on the adapter's standard "
                    "input. An op the adapter does not know is answered unsupported; a known op with a key it does "
                    "not list is invalid.", "oneOf": [_ref(request_definition(op)) for op in OPS]}
    d["Error"] = _obj({"type": {"enum": ["invalid", "corrupt", "unsupported"]}, "message": {"type": "string"}},
                      description="invalid: the request or frame breaks a rule, nothing changed. corrupt: the "
                                  "stored replica breaks its own rules. unsupported: an op the adapter does not "
                                  "know or offer, an operation lost in a crash, or an environment failure.")
    d.update(_responses())
    d["Ops"] = _obj(
        {op: _obj({"request": _ref(request_definition(op)), "result": _ref(spec.result),
                   "response": _ref(response_definition(op))}) for op, spec in OPS.items()},
        description="The op table: each op's request, the result of its successful response, and its response. "
                    "Not a message: a map for code generators.")
    return d


# ---------------------------------------------------------------------------
# The `state` document (an extension).
# ---------------------------------------------------------------------------


def _state_document() -> dict[str, JSON]:
    stored_value = {"revision": _ref("Count"), "generation": _ref("Count"), "valueRef": _ref("ValueRef"),
                    "value": {"type": "string"}}
    record = {"state": _ref("BindingState"), "materialization": _ref("Materialization")}

    def table(row: JSON, key: str) -> JSON:
        return {"type": "array", "items": row, "description": f"Sorted by {key} (code-point order), each once."}

    return {"StateDocument": _obj(
        {"authority": _obj({"activated": {"type": "boolean"}, "gateOpen": {"type": "boolean"},
                            "attemptId": _nullable(_ref("Id")), "streamId": _nullable(_ref("Id")),
                            "appliedSequence": _ref("Count"), "orgId": _nullable(_ref("Segment")),
                            "policyEpochs": _ref("PolicyEpochs")}),
         "projects": table(_obj({"projectId": _ref("Segment"), "recordVersion": _ref("Count")}), "projectId"),
         "records": table(_obj({"projectId": _ref("Segment"), "key": _ref("Key"), **record}), "projectId, key"),
         "values": table(_obj({"projectId": _ref("Segment"), "key": _ref("Key"), **stored_value}),
                         "projectId, key"),
         "stageProjects": table(_obj({"attemptId": _ref("Id"), "projectId": _ref("Segment"),
                                      "recordVersion": _nullable(_ref("Count")), "lastKey": _nullable(_ref("Key")),
                                      "complete": {"type": "boolean"}}), "attemptId, projectId"),
         "stageRecords": table(_obj({"attemptId": _ref("Id"), "projectId": _ref("Segment"), "key": _ref("Key"),
                                     **record, "present": {"type": "boolean"}}), "attemptId, projectId, key"),
         "stageValues": table(_obj({"attemptId": _ref("Id"), "projectId": _ref("Segment"), "key": _ref("Key"),
                                    **stored_value}), "attemptId, projectId, key"),
         "receipts": table(_obj({"streamId": _ref("Id"), "sequence": _ref("Count"),
                                 "requestMac": {"type": "string", "minLength": 1}, "ok": {"type": "boolean"},
                                 "code": _nullable(_ref("ReceiptRefusalCode")), "result": _nullable(_ref("Result")),
                                 "recordVersion": _nullable(_ref("Count"))}), "streamId, sequence")},
        description="The result of `state`: every table of the replica, each row verified, values opened "
                    "(plaintext: a test op).")}


# ---------------------------------------------------------------------------
# The rules beyond the schema, and the documents.
# ---------------------------------------------------------------------------

#: Each rule of the contract that JSON Schema does not state: name -> the rule, then why it lives outside the
#: schema. The one list of them: ``spec.wire``'s declarations name theirs (``Ascending``, ``After``, ``Count``), the
#: adapter and the harness check the others; ``tests/test_schema.py`` has a test for each, docs/protocol.md lists them.
BEYOND_THE_SCHEMA: dict[str, str] = {
    "integer-literals": "A Count is written as an integer literal: 1.0 and 1e2 are invalid here. Why outside: JSON "
                        "Schema judges a number's value, not how it is written, and its `integer` admits 1.0.",
    "policy-epochs-ascending": "PolicyEpochs are strictly ascending. Why outside: JSON Schema cannot compare an item "
                               "with its neighbour; the schema says the part it can (unique).",
    "page-keys-ascending": "A page's record keys are strictly ascending (code-point order). Why outside: JSON Schema "
                           "cannot compare one item's field with another item's.",
    "page-keys-after": "A page's first key is greater than its `after` key. Why outside: JSON Schema cannot compare "
                       "two values of one document.",
    "commit-versions-ascending": "A commit's versions are strictly ascending by projectId. Why outside: JSON Schema "
                                "cannot compare one item's field with another item's.",
    "state-key-matches-row": "In the state document, a record's state.key is the row's key. Why outside: JSON Schema "
                             "cannot require two values of one document to be equal.",
    "state-rows-sorted": "In the state document, every table is sorted by its primary key, each key once. Why "
                         "outside: JSON Schema cannot compare rows, and its uniqueItems compares whole rows only.",
    "state-receipt-shape": "In the state document, a receipt with ok true has a result and a recordVersion and no "
                           "code; one with ok false has a code and neither. Why outside: it could be stated (a "
                           "oneOf on ok) but is not: the schema keeps one receipt row, and the harness's reader "
                           "checks the rule.",
    "state-gate": "In the state document, a never-activated replica is closed with no attempt, and an open gate "
                  "has no attempt. Why outside: it could be stated (if/then on activated and gateOpen) but is not: "
                  "the schema keeps one authority row, and the harness's reader checks the rule.",
    "nesting-depth": f"duringFetch nests at most {MAX_NESTING} requests deep; deeper is invalid. Why outside: "
                     "Request refers to itself, and JSON Schema bounds no depth of a recursive reference.",
    "ack-page-bytes": "A page whose acknowledgement would exceed the configured byte bound is refused "
                      "(ack_page_too_large). Why outside: it depends on the replica's configuration, not on the "
                      "message: a result, not a shape.",
}


def _migration_adapter() -> dict[str, JSON]:
    """The migration adapter protocol's messages (docs/protocol.md, section 11)."""
    from envreplica.spec.migration import Refusal

    store = {"enum": ["run", "resource"]}
    step = {"type": "string", "description": "A step of the model (model.migration.Pc's value, e.g. 'backup run')."}
    n = {"type": "integer", "minimum": 0}
    head: JSON = {"id": {"type": "integer"}}
    ops: dict[str, tuple[JSON, tuple[str, ...], str]] = {
        "hello": ({"protocol": {"const": "envreplica-migration/1"}}, (), "what the adapter declares"),
        "reset": ({"stores": _nullable({"type": "array", "minItems": 2, "maxItems": 2, "items": _obj(
            {"version": {"enum": [1, 2]}, "data": {"enum": ["original", "migrated"]}})})}, ("stores",),
                  "fresh stores (default: the model's first state, two version-1 originals), open, nothing "
                  "published, no invocation, no writer"),
        "invoke": ({"role": {"enum": ["migrate", "recover"]},
                    "fault": {"enum": ["none", "no-key", "wrong-key", "same-path", "symlink", "hardlink", "copy"]},
                    "mode": {"type": "string"}}, ("fault", "mode"),
                   "start an invocation, paused before its first step"),
        "step": ({"invocation": n}, (), "let the invocation take its next step"),
        "crash": ({"invocation": n}, (), "kill the invocation where it waits"),
        "connect": ({"store": store}, (), "the foreign writer connects to a store"),
        "write": ({"version": {"enum": [1, 2]}}, (), "the foreign writer writes a row through its connection"),
        "disconnect": ({}, (), "the foreign writer disconnects"),
        "lock": ({}, (), "the connected writer holds a write transaction (fault lock)"),
        "unlock": ({}, (), "it ends it"),
        "readOnly": ({"store": store, "on": {"type": "boolean"}}, (), "a store's file cannot (can) be written"),
        "edit": ({"doc": {"enum": ["request", "result", "recovery", "backup"]}, "store": store}, ("store",),
                 "a publication or a backup changed by hand"),
        "repair": ({"doc": {"enum": ["request", "result", "recovery", "backup"]}, "store": store}, ("store",),
                   "it put back as published"),
        "moveAway": ({"doc": {"const": "result"}}, (), "the published result moved away from beside the request "
                     "(fault move-away; never put back)"),
        "observe": ({}, (), "the stores and publications in the model's words"),
    }
    d: dict[str, JSON] = {}
    for op, (fields, optional, what) in ops.items():
        name = "Migration" + op[0].upper() + op[1:] + "Request"
        d[name] = _obj({**head, "op": {"const": op}, **fields}, optional=optional, description=f"`{op}`: {what}.")
    d["MigrationRequest"] = {"description": "One request of the migration adapter protocol (docs/protocol.md, "
                             "section 11).", "oneOf": [_ref("Migration" + op[0].upper() + op[1:] + "Request")
                                                      for op in ops]}
    d["MigrationHello"] = _obj({
        "protocol": {"const": "envreplica-migration/1"}, "implementation": {"type": "string"},
        "steps": {"type": "array", "items": step, "minItems": 1},
        "readings": _obj({"backup": {"enum": ["keep", "keep-source", "overwrite", "refuse"]},
                          "apply": {"enum": ["skip", "again"]},
                          "reconcile": {"enum": ["receipt", "exact"]}, "lock": {"enum": ["wait", "refuse"]}}),
        "evidence": {"enum": ["after-maintenance", "before-maintenance"]},
        "faults": {"type": "array", "items": {"enum": ["input", "lock", "read-only", "edit", "move-away"]}},
        "inputFaults": {"type": "array", "items": {"enum": ["no-key", "wrong-key", "same-path", "symlink",
                                                            "hardlink", "copy"]}},
        "exitStatus": {"type": "boolean"}, "modes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    }, description="hello's result: what the adapter declares (section 11.3).", additionalProperties=True)
    refusal = {"anyOf": [{"enum": [r.value for r in Refusal]}, {"const": "internal error"}, {"type": "null"}]}
    d["MigrationEvent"] = {"description": "step's result (section 11.4).", "oneOf": [
        _obj({"event": {"const": "step"}, "step": step}),
        _obj({"event": {"const": "exit"}, "status": _nullable({"type": "integer"}), "refusal": refusal,
              "after": _nullable(step), "message": {"type": "string"}}, optional=("message",))]}
    image = _nullable({"type": "string", "pattern": "^v[12]:(original|migrated|other)(\\+[0-9]+w)?$"})
    published = {"enum": ["published", "edited", None]}
    d["MigrationObservation"] = _obj({
        "stores": {"type": "array", "minItems": 2, "maxItems": 2, "items": _obj({
            "version": {"enum": [1, 2]},
            "data": {"type": "string", "pattern": "^(original|migrated|other)(\\+[0-9]+w)?$"},
            "admission": {"type": "string", "pattern": "^(open|maintenance|recovery)( by another)?$"},
            "backup": image})},
        "request": published, "sources": _nullable({"type": "array", "items": image}),
        "result": published, "evidence": _nullable({"type": "array", "items": image}),
        "recovery": published, "plan": _nullable({"type": "array", "items": {"type": "boolean"}}),
        "recoveryResult": {"type": "boolean"}, "lock": {"type": "boolean"},
    }, description="observe's result (section 11.5).")
    d["MigrationResponse"] = {"description": "One response of the migration adapter protocol.", "oneOf": [
        _obj({"id": _nullable({"type": "integer"}), "ok": {"const": True}, "result": {}}),
        _obj({"id": _nullable({"type": "integer"}), "ok": {"const": False},
              "error": _obj({"type": {"enum": ["invalid", "unsupported", "internal"]}, "message": {"type": "string"}})}),
    ]}
    return d


def _lock_adapter() -> dict[str, JSON]:
    """The lock adapter protocol's messages (docs/protocol.md, section 12), from ``spec.lock``'s enums."""
    from envreplica.spec.lock import Answer, Call, Effect

    step = {"type": "string", "description": "A step of the lock model (model.lock.Pc's value, e.g. 'mkdir L')."}
    n = {"type": "integer", "minimum": 0}
    slot = {"type": "integer", "minimum": 0, "description": "A lock user, by its number in reset's processes."}
    head: JSON = {"id": {"type": "integer"}}
    identity = _obj({"pid": {"type": "integer", "minimum": 1}, "start": {"type": "integer", "minimum": 1},
                     "ns": n})
    lock_states = ["absent", "owner", "empty-dir", "empty-owner", "garbage-owner", "left-over"]
    ops: dict[str, tuple[JSON, tuple[str, ...], str]] = {
        "hello": ({"protocol": {"const": "envreplica-lock/1"}}, (), "what the adapter declares"),
        "reset": ({"processes": {"type": "array", "minItems": 1, "items": identity}, "maxTries": n,
                   "lock": _obj({"state": {"enum": lock_states}, "pid": {"type": "integer", "minimum": 1},
                                 "start": {"type": "integer", "minimum": 1}, "ns": n,
                                 "nonce": {"type": "string"}},
                                optional=("pid", "start", "ns", "nonce"))}, ("lock",),
                  "a fresh lock directory and world: the lock users (none started), the lock as given"),
        "spawn": ({"process": slot}, (), "the process calls the lock (again), and runs to its first pause"),
        "step": ({"process": slot, "nonce": {"type": "string", "pattern": "^[0-9a-f]{16}$"}}, ("nonce",),
                 "let the process make its next filesystem or system call"),
        "leave": ({"process": slot, "effect": {"enum": [e.value for e in Effect]}}, (),
                  "the process's operation ends, having done effect"),
        "kill": ({"process": slot, "zombie": {"type": "boolean"}}, ("zombie",),
                 "SIGKILL the process where it waits; a zombie until reaped, or reaped at once"),
        "reuse-pid": ({"ns": n, "pid": {"type": "integer", "minimum": 1}}, (),
                      "a new, unrelated process takes that free pid (a new start time)"),
        "reap": ({"process": slot}, (), "the killed process, a zombie, is reaped: its pid is free"),
        "observe": ({}, (), "the lock directory and who is inside, in the model's words"),
    }
    d: dict[str, JSON] = {}

    def name_of(op: str) -> str:
        return "Lock" + "".join(w[0].upper() + w[1:] for w in op.split("-")) + "Request"

    for op, (fields, optional, what) in ops.items():
        d[name_of(op)] = _obj({**head, "op": {"const": op}, **fields}, optional=optional, description=f"`{op}`: {what}.")
    d["LockRequest"] = {"description": "One request of the lock adapter protocol (docs/protocol.md, section 12).",
                        "oneOf": [_ref(name_of(op)) for op in ops]}
    d["LockHello"] = _obj({
        "protocol": {"const": "envreplica-lock/1"}, "implementation": {"type": "string"},
        "design": {"enum": ["seed", "claim"]}, "steps": {"type": "array", "items": step, "minItems": 1},
        "maxTries": _nullable(n), "world": {"type": "array", "items": {"enum": ["zombie", "namespace", "reuse",
                                                                                "stale"]}},
        "busyNames": {"type": "boolean"}, "inodes": _nullable({"enum": ["reuse", "fresh"]}),
    }, optional=("world", "busyNames", "maxTries", "inodes"), description="hello's result: what the adapter declares "
                                                                 "(section 12.3).", additionalProperties=True)
    busy = _nullable(_obj({"nonce": _nullable({"type": "string"}), "judged": {"type": "boolean"}}))
    d["LockEvent"] = _obj({
        "taken": {"type": "array", "items": _obj({"step": step, "call": _nullable({"enum": [c.value for c in Call]})},
                                                 optional=("call",))},
        "at": _nullable({"type": "string"}), "path": {"type": "string"},
        "answer": _obj({"answer": _nullable({"enum": [a.value for a in Answer]}), "busy": busy,
                        "error": {"type": "string"}}, optional=("busy", "error")),
    }, optional=("path", "answer"), description="spawn's, step's and leave's result (section 12.4): the steps taken, "
                                                "where the process stopped, its call's answer once it ended.")
    owner = _nullable(_obj({"owner": {"anyOf": [{"enum": ["none", "empty"]}, _obj(
        {"pid": {"type": "integer"}, "start": {"type": "integer"}, "ns": {"type": "integer"},
         "nonce": {"type": "string"}}, optional=("nonce",))]}}))
    d["LockObservation"] = _obj({
        "inside": {"type": "array", "items": n}, "lock": owner, "moved": {"type": "array", "items": owner},
        "tickets": {"type": "array", "items": _obj({"seq": n, "nonce": {"type": "string"}, "pid": n, "start": n,
                                                    "ns": n})},
        "temps": {"type": "array", "items": {"type": "string"}}, "others": {"type": "array",
                                                                             "items": {"type": "string"}},
    }, description="observe's result (section 12.5).")
    d["LockResponse"] = {"description": "One response of the lock adapter protocol.", "oneOf": [
        _obj({"id": _nullable({"type": "integer"}), "ok": {"const": True}, "result": {}}),
        _obj({"id": _nullable({"type": "integer"}), "ok": {"const": False},
              "error": _obj({"type": {"enum": ["invalid", "unsupported", "internal"]}, "message": {"type": "string"}})}),
    ]}
    return d


def definitions() -> dict[str, JSON]:
    """Every definition of the contract by name, each with its ``$id`` (relative to ``BASE``)."""
    parts: dict[str, JSON] = {}
    for group in (wire.definitions(), _results(), _envelopes(), _adapter(), _state_document(),
                  _migration_adapter(), _lock_adapter()):
        parts.update(group)
    return {name: {"$id": name, **schema} for name, schema in parts.items()}


def schema_document() -> JSON:
    """The whole contract as one JSON Schema document (draft 2020-12): its definitions under ``$defs``."""
    return {
        "$schema": DIALECT,
        "$id": BASE + "contract.json",
        "title": "envreplica contract",
        "description": "Every JSON shape of the envreplica contract (docs/protocol.md): value types, frames, "
                       "results, value-store envelopes, adapter requests and responses, and the state document. "
                       "Each definition has its own $id; validate a message against the one it should be (an "
                       "adapter request against Request, a line's answer against Response).",
        "x-envreplica": constants(),
        "$defs": definitions(),
    }


def constants() -> JSON:
    """The contract's constants, for code generators (an annotation: validation ignores it)."""
    return {"maxNesting": MAX_NESTING, "maxCount": wire.MAX_COUNT, "defaultAckPageBytes": DEFAULT_ACK_PAGE_BYTES,
            "defaultPrefix": DEFAULT_PREFIX, "maxReadyTimeoutMs": MAX_READY_TIMEOUT_MS,
            "testMasterKeyHex": TEST_MASTER_KEY_HEX}


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def standalone(name: str) -> JSON:
    """One definition as a document of its own, with every definition it refers to under ``$defs``.

    ``KeyError`` (naming the definitions there are) when ``name`` is not one.
    """
    defs = definitions()
    if name not in defs:
        raise KeyError(f"no schema named {name!r}; the names are: {', '.join(sorted(defs))}")
    needed: list[str] = []
    todo = [name]
    while todo:
        for ref in _refs(defs[todo.pop()]):
            if ref != name and ref not in needed:
                needed.append(ref)
                todo.append(ref)
    root = {k: v for k, v in defs[name].items() if k != "$id"}
    out: JSON = {"$schema": DIALECT, "$id": BASE + name, **root}
    if needed:
        out["$defs"] = {ref: defs[ref] for ref in sorted(needed)}
    return out


def shipped_path() -> Path:
    """The generated copy of ``schema_document()`` shipped in the package (``spec/contract.schema.json``)."""
    return Path(__file__).with_name("contract.schema.json")


def render(document: Optional[JSON] = None) -> str:
    """A schema document as the shipped file writes it (two-space indent, a final newline)."""
    return json.dumps(schema_document() if document is None else document, indent=2, ensure_ascii=False) + "\n"
