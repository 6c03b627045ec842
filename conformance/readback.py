"""The ``state`` document of docs/protocol.md section 6, to and from the model's ``State``.

What it does: an implementation reports its tables as the ``state``
document (JSON: ``SqliteReplica.export_state``, or an adapter's ``state``
op); the harness compares them with the model's tables. This module is the
only bridge between the two shapes:

* ``doc_to_state(doc, store_on=...)``: a document as the model's ``State``,
  every field checked (exact objects, the wire rules of each value, lists
  sorted by primary key without repeats); anything else raises
  ``StateDocError`` naming the path, the rule and what to do. A receipt's
  ``request`` is its ``requestMac`` string (a MAC cannot be turned back into
  its request); the gate comes from ``activated`` / ``gateOpen`` /
  ``attemptId``.
* ``state_to_doc(state, mac)``: the inverse, for the model driver's
  ``state`` op; ``mac`` names each receipt's request (for a state whose
  requests are already MACs, pass ``lambda m: m``).
* ``with_macs(state, mac)``: the model's state with each receipt's request
  replaced by ``mac(request)``, so that
  ``with_macs(model_state, mac_of(sealer)) == impl_model_state(replica)``
  compares the model with the SQLite implementation.
* ``mac_of(sealer)``: the SQLite implementation's receipt MAC
  (``impl.replica.request_mac``) as such a function; ``impl_model_state``:
  a ``SqliteReplica`` read back (``export_state`` then ``doc_to_state``).

Leaves out on purpose: the model's in-flight operations (a document has no
``await`` windows: ``state_to_doc`` drops them, ``doc_to_state`` gives none)
and whether the process has a value store (``store_on`` is the caller's:
it is not a table). Nothing here compares states: equality of two ``State``
values is the comparison.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache, partial
from typing import Any, Callable, Literal, Optional, cast, overload

from envreplica.model.fmap import FMap
from envreplica.model.state import (
    Authority,
    LiveRow,
    Receipt,
    StageProject,
    StageRow,
    State,
    StoredValue,
)
from envreplica.spec import wire
from envreplica.spec.domain import DeliveryRequest, InvalidFrame, RefusalCode
from envreplica.spec.gate import Gate

__all__ = ["STATE_TABLES", "StateDocError", "doc_to_state", "state_to_doc", "with_macs", "mac_of", "impl_model_state"]

#: The tables of a document, in order, each with its row keys (exactly these) and its primary key.
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "projects": (("projectId", "recordVersion"), ("projectId",)),
    "records": (("projectId", "key", "state", "materialization"), ("projectId", "key")),
    "values": (("projectId", "key", "revision", "generation", "valueRef", "value"), ("projectId", "key")),
    "stageProjects": (("attemptId", "projectId", "recordVersion", "lastKey", "complete"), ("attemptId", "projectId")),
    "stageRecords": (("attemptId", "projectId", "key", "state", "materialization", "present"),
                     ("attemptId", "projectId", "key")),
    "stageValues": (("attemptId", "projectId", "key", "revision", "generation", "valueRef", "value"),
                    ("attemptId", "projectId", "key")),
    "receipts": (("streamId", "sequence", "requestMac", "ok", "code", "result", "recordVersion"),
                 ("streamId", "sequence")),
}
#: Each part of a document with the fields of its primary key (``authority`` is one object).
STATE_TABLES: dict[str, tuple[str, ...]] = {"authority": (), **{t: key for t, (_, key) in _TABLES.items()}}
_AUTHORITY_KEYS = ("activated", "gateOpen", "attemptId", "streamId", "appliedSequence", "orgId", "policyEpochs")
_DOC_KEYS = ("authority",) + tuple(_TABLES)

_FIX = "An implementation's state document must have exactly the shape of docs/protocol.md section 6"


class StateDocError(ValueError):
    """A ``state`` document that does not have the documented shape (the message names where and why)."""


def _bad(path: str, rule: str, got: Any) -> StateDocError:
    return StateDocError(f"state document: {path} {rule}; got {wire.unshown(got)}. {_FIX}.")


# ---------------------------------------------------------------------------
# Field readers (each raises StateDocError naming its path)
# ---------------------------------------------------------------------------


def _exact(value: Any, keys: tuple[str, ...], path: str) -> dict:
    if type(value) is not dict:
        raise _bad(path, f"must be an object with keys {', '.join(keys)}", value)
    missing = [k for k in keys if k not in value]
    extra = sorted(k for k in value if k not in keys)
    if missing or extra:
        what = f"lacks {', '.join(missing)}" if missing else f"has keys it must not have ({', '.join(map(wire.shown_key, extra))})"
        raise StateDocError(f"state document: {path} {what} (exactly {', '.join(keys)}). {_FIX}.")
    return value


def _wire(parse: Callable[..., Any], value: Any, path: str) -> Any:
    """A value through its ``spec.wire`` parser; its ``InvalidFrame`` becomes ``StateDocError``."""
    try:
        return parse(value, path=path)
    except InvalidFrame as error:
        raise StateDocError(f"state document: {error.message} {_FIX}.") from None


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _bad(path, "must be a boolean", value)
    return value


@overload
def _count(value: Any, path: str, *, nullable: Literal[False] = ...) -> int: ...
@overload
def _count(value: Any, path: str, *, nullable: bool) -> Optional[int]: ...
def _count(value: Any, path: str, *, nullable: bool = False) -> Optional[int]:
    if value is None and nullable:
        return None
    if type(value) is not int or not 0 <= value <= wire.MAX_COUNT:
        raise _bad(path, "must be a Count (a JSON integer 0..2^53-1)" + (" or null" if nullable else ""), value)
    return value


@overload
def _pattern(value: Any, path: str, pattern: Any, *, nullable: Literal[False] = ...) -> str: ...
@overload
def _pattern(value: Any, path: str, pattern: Any, *, nullable: bool) -> Optional[str]: ...
def _pattern(value: Any, path: str, pattern: Any, *, nullable: bool = False) -> Optional[str]:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or pattern.regex.fullmatch(value) is None:
        raise _bad(path, pattern.rule + (" (or null)" if nullable else ""), value)
    return value


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _bad(path, "must be a string", value)
    return value


def _code(value: Any, path: str) -> Optional[RefusalCode]:
    if value is None:
        return None
    try:
        return RefusalCode(value)
    except ValueError:
        raise _bad(path, "must be a refusal code of the seed, or null", value) from None


def _gate(activated: bool, gate_open: bool, attempt: Optional[str], path: str) -> Gate:
    if not activated:
        if gate_open or attempt is not None:
            raise StateDocError(f"state document: {path}: a replica that was never activated is closed and has no "
                                f"attempt (gateOpen false, attemptId null). {_FIX}.")
        return Gate.INACTIVE
    if gate_open:
        if attempt is not None:
            raise StateDocError(f"state document: {path}: an open gate has no attempt (attemptId null). {_FIX}.")
        return Gate.OPEN
    return Gate.IDLE if attempt is None else Gate.STAGING


def _authority(value: Any) -> Authority:
    path = "authority"
    row = _exact(value, _AUTHORITY_KEYS, path)
    activated = _bool(row["activated"], f"{path}.activated")
    gate_open = _bool(row["gateOpen"], f"{path}.gateOpen")
    attempt = _pattern(row["attemptId"], f"{path}.attemptId", wire.ID, nullable=True)
    stream = _pattern(row["streamId"], f"{path}.streamId", wire.ID, nullable=True)
    sequence = _count(row["appliedSequence"], f"{path}.appliedSequence")
    org = _pattern(row["orgId"], f"{path}.orgId", wire.SEGMENT, nullable=True)
    epochs = _wire(wire.parse_policy_epochs, row["policyEpochs"], f"{path}.policyEpochs")
    return Authority(_gate(activated, gate_open, attempt, path), stream, sequence, attempt, org, epochs)


def _rows(doc: dict, table: str):
    """(path, row) of each row of ``table``, exact; primary keys strictly ascending (sorted, no repeats)."""
    keys, primary = _TABLES[table]
    rows = doc[table]
    if type(rows) is not list:
        raise _bad(table, "must be a list of rows", rows)
    previous = None
    for i, item in enumerate(rows):
        path = f"{table}[{i}]"
        row = _exact(item, keys, path)
        pk = tuple(row[k] for k in primary)
        if not all(isinstance(part, (str, int)) and type(part) is not bool for part in pk):
            raise _bad(f"{path}.{'/'.join(primary)}", "must be strings (and a Count for a sequence)", pk)
        if previous is not None and not previous < pk:
            raise StateDocError(f"state document: {path} has primary key {pk!r}, not after {previous!r}: rows must "
                                f"be sorted by {', '.join(primary)} (code-point order), each once. {_FIX}.")
        previous = pk
        yield path, row


def _stored_value(row: dict, path: str) -> StoredValue:
    return StoredValue(
        _count(row["revision"], f"{path}.revision"),
        _count(row["generation"], f"{path}.generation"),
        _wire(wire.parse_value_ref, row["valueRef"], f"{path}.valueRef"),
        _text(row["value"], f"{path}.value"),
    )


# ---------------------------------------------------------------------------
# Document -> State
# ---------------------------------------------------------------------------


def doc_to_state(doc: Any, *, store_on: bool) -> State:
    """The model's ``State`` of a ``state`` document; ``StateDocError`` when it is malformed.

    Each receipt's ``request`` is its ``requestMac`` (a string); nothing is in
    flight; ``store_on`` is whether the process has a value store.
    """
    doc = _exact(doc, _DOC_KEYS, "the document")
    authority = _authority(doc["authority"])
    projects = {}
    for path, row in _rows(doc, "projects"):
        projects[_pattern(row["projectId"], f"{path}.projectId", wire.SEGMENT)] = \
            _count(row["recordVersion"], f"{path}.recordVersion")
    records = {}
    for path, row in _rows(doc, "records"):
        key = _record_key(row, path)
        records[(_pattern(row["projectId"], f"{path}.projectId", wire.SEGMENT), key)] = LiveRow(
            *_record(row, key, path))
    values = {}
    for path, row in _rows(doc, "values"):
        values[(_pattern(row["projectId"], f"{path}.projectId", wire.SEGMENT),
                _pattern(row["key"], f"{path}.key", wire.KEY))] = _stored_value(row, path)
    stage_projects = {}
    for path, row in _rows(doc, "stageProjects"):
        stage_projects[(_pattern(row["attemptId"], f"{path}.attemptId", wire.ID),
                        _pattern(row["projectId"], f"{path}.projectId", wire.SEGMENT))] = StageProject(
            _count(row["recordVersion"], f"{path}.recordVersion", nullable=True),
            _pattern(row["lastKey"], f"{path}.lastKey", wire.KEY, nullable=True),
            _bool(row["complete"], f"{path}.complete"),
        )
    stage_records = {}
    for path, row in _rows(doc, "stageRecords"):
        key = _record_key(row, path)
        state, mat = _record(row, key, path)
        stage_records[(_pattern(row["attemptId"], f"{path}.attemptId", wire.ID),
                       _pattern(row["projectId"], f"{path}.projectId", wire.SEGMENT), key)] = StageRow(
            state, mat, _bool(row["present"], f"{path}.present"))
    stage_values = {}
    for path, row in _rows(doc, "stageValues"):
        stage_values[(_pattern(row["attemptId"], f"{path}.attemptId", wire.ID),
                      _pattern(row["projectId"], f"{path}.projectId", wire.SEGMENT),
                      _pattern(row["key"], f"{path}.key", wire.KEY))] = _stored_value(row, path)
    receipts = {}
    for path, row in _rows(doc, "receipts"):
        ok = _bool(row["ok"], f"{path}.ok")
        code = _code(row["code"], f"{path}.code")
        result = None if row["result"] is None else _wire(wire.parse_record_result, row["result"], f"{path}.result")
        version = _count(row["recordVersion"], f"{path}.recordVersion", nullable=True)
        if ok and (code is not None or result is None or version is None):
            raise StateDocError(f"state document: {path}: an applied receipt (ok true) has a result and a "
                                f"recordVersion and no code. {_FIX}.")
        if not ok and (code is None or result is not None or version is not None):
            raise StateDocError(f"state document: {path}: a refused receipt (ok false) has a code and neither a "
                                f"result nor a recordVersion. {_FIX}.")
        mac = row["requestMac"]
        if not isinstance(mac, str) or not mac:
            raise _bad(f"{path}.requestMac", "must be a non-empty string (the request's MAC)", mac)
        # A receipt read back carries its request's MAC where the model's carries the request (module doc).
        receipt = Receipt(mac, ok, code, result, version)
        receipts[(_pattern(row["streamId"], f"{path}.streamId", wire.ID),
                  _count(row["sequence"], f"{path}.sequence"))] = receipt
    return State(
        authority=authority,
        projects=FMap(projects),
        records=FMap(records),
        values=FMap(values),
        stage_projects=FMap(stage_projects),
        stage_records=FMap(stage_records),
        stage_values=FMap(stage_values),
        receipts=FMap(receipts),
        inflight=(),
        store_on=bool(store_on),
    )


def _record_key(row: dict, path: str) -> str:
    return _pattern(row["key"], f"{path}.key", wire.KEY)


def _record(row: dict, key: str, path: str):
    state = _wire(wire.parse_binding_state, row["state"], f"{path}.state")
    if state.key != key:
        raise StateDocError(f"state document: {path}.state.key is not the row's key {key!r}. {_FIX}.")
    mat = _wire(wire.parse_materialization, row["materialization"], f"{path}.materialization")
    return state, mat


# ---------------------------------------------------------------------------
# State -> document
# ---------------------------------------------------------------------------


def state_to_doc(state: State, mac: Callable[[Any], str]) -> dict:
    """The ``state`` document of the model's ``State`` (in-flight operations are not tables: dropped).

    ``mac(receipt.request)`` is each receipt's ``requestMac``: a
    ``DeliveryRequest``'s MAC, or for a state read back from a document (its
    requests already MACs) ``lambda m: m``.
    """
    a = state.authority
    doc: dict = {
        "authority": {"activated": a.gate.activated, "gateOpen": a.gate.is_open, "attemptId": a.attempt_id,
                      "streamId": a.stream_id, "appliedSequence": a.applied_sequence, "orgId": a.org_id,
                      "policyEpochs": list(a.policy_epochs)},
    }
    doc["projects"] = [{"projectId": p, "recordVersion": v} for p, v in sorted(state.projects.items())]
    doc["records"] = [{"projectId": p, "key": k, "state": wire.encode(row.state),
                       "materialization": wire.encode(row.mat)}
                      for (p, k), row in sorted(state.records.items(), key=lambda kv: kv[0])]
    doc["values"] = [{"projectId": p, "key": k, **_value_doc(v)}
                     for (p, k), v in sorted(state.values.items(), key=lambda kv: kv[0])]
    doc["stageProjects"] = [{"attemptId": att, "projectId": p, "recordVersion": sp.record_version,
                             "lastKey": sp.last_key, "complete": sp.complete}
                            for (att, p), sp in sorted(state.stage_projects.items(), key=lambda kv: kv[0])]
    doc["stageRecords"] = [{"attemptId": att, "projectId": p, "key": k, "state": wire.encode(row.state),
                            "materialization": wire.encode(row.mat), "present": row.present}
                           for (att, p, k), row in sorted(state.stage_records.items(), key=lambda kv: kv[0])]
    doc["stageValues"] = [{"attemptId": att, "projectId": p, "key": k, **_value_doc(v)}
                          for (att, p, k), v in sorted(state.stage_values.items(), key=lambda kv: kv[0])]
    doc["receipts"] = [{"streamId": s, "sequence": n, "requestMac": mac(r.request), "ok": r.ok,
                        "code": None if r.code is None else r.code.value,
                        "result": None if r.result is None else wire.encode(r.result),
                        "recordVersion": r.record_version}
                       for (s, n), r in sorted(state.receipts.items(), key=lambda kv: kv[0])]
    return doc


def _value_doc(v: StoredValue) -> dict:
    return {"revision": v.revision, "generation": v.generation, "valueRef": wire.encode(v.value_ref),
            "value": v.value}


# ---------------------------------------------------------------------------
# MACs, and the SQLite implementation read back
# ---------------------------------------------------------------------------


def with_macs(state: State, mac: Callable[[DeliveryRequest], str]) -> State:
    """``state`` with each receipt's ``request`` replaced by ``mac(request)``.

    A MAC cannot be turned back into its request, but two requests have the
    same MAC exactly when they are equal: comparing MACs compares requests.
    """
    global _LAST_WITH_MACS
    last_in, last_mac, last_out = _LAST_WITH_MACS
    if last_in is state.receipts and last_mac is mac:
        receipts = last_out  # the same table object (tables are persistent maps): the same answer
    else:
        # Each receipt's request becomes its MAC (as a read-back receipt's: module doc).
        receipts = FMap({k: replace(r, request=mac(cast(DeliveryRequest, r.request)))  # the model's: requests
                         for k, r in state.receipts.items()})
        _LAST_WITH_MACS = (state.receipts, mac, receipts)  # one assignment: a reader sees all three or none
    return replace(state, receipts=receipts)


#: ``with_macs``'s last (receipts table, MAC function, answer): the lockstep asks again after every step.
_LAST_WITH_MACS: tuple = (None, None, None)


@lru_cache(maxsize=1 << 16)
def _request_mac(sealer, request: DeliveryRequest) -> str:
    from envreplica.impl.replica import request_mac

    return request_mac(sealer, request)


@lru_cache(maxsize=8)
def mac_of(sealer) -> Callable[[DeliveryRequest], str]:
    """The SQLite implementation's receipt MAC under ``sealer`` (``impl.replica.request_mac``).

    Memoised per (sealer, request): the lockstep MACs every model receipt after every step; the same
    sealer gives the same function object (``with_macs`` reuses its last answer for it).
    """
    return partial(_request_mac, sealer)


def impl_model_state(replica) -> State:
    """A ``SqliteReplica``'s tables as the model's ``State`` (receipts carry their MAC).

    ``read_tables`` verifies every row and set and opens every value (a
    tamper raises ``TamperDetected``); its typed rows become the model's
    directly (``doc_to_state(replica.export_state(), ...)`` is the same state
    through the JSON document, at about twice the cost). A record row whose
    state names another key is a ``StateDocError``, as in a document.
    ``store_on`` is whether the replica has a value store now.
    """
    read = replica.read_tables()
    a = read.authority
    authority = Authority(_gate(a.activated, a.gate_open, a.attempt_id, "authority"), a.stream_id,
                          a.applied_sequence, a.attempt_id, a.org_id, tuple(a.policy_epochs))
    projects, records, stage_projects, stage_records = {}, {}, {}, {}
    for project, (version, view) in read.live.items():
        projects[project] = version
        for key, row in view.records:
            records[project, _same_key(row.state, key, f"records[{project}/{key}]")] = LiveRow(row.state, row.mat)
    for (attempt, project), (sp, view) in read.stage.items():
        stage_projects[attempt, project] = StageProject(sp.record_version, sp.last_key, sp.complete)
        for key, row in view.records:
            stage_records[attempt, project, _same_key(row.state, key, f"stageRecords[{attempt}/{project}/{key}]")] = \
                StageRow(row.state, row.mat, row.present)
    return State(
        authority=authority,
        projects=FMap(projects),
        records=FMap(records),
        values=FMap({k: StoredValue(v.revision, v.generation, v.value_ref, v.value)
                     for k, v in read.live_values.items()}),
        stage_projects=FMap(stage_projects),
        stage_records=FMap(stage_records),
        stage_values=FMap({k: StoredValue(v.revision, v.generation, v.value_ref, v.value)
                           for k, v in read.stage_values.items()}),
        receipts=FMap({k: _receipt(r) for k, r in read.receipts.items()}),
        inflight=(),
        store_on=replica.reader is not None,
    )


def _same_key(state, key: str, path: str) -> str:
    if state.key != key:
        raise StateDocError(f"state document: {path}.state.key is not the row's key {key!r}. {_FIX}.")
    return key


@lru_cache(maxsize=1 << 14)
def _receipt(stored) -> Receipt:
    """The model's ``Receipt`` of an implementation's ``StoredReceipt`` (its request is its MAC)."""
    return Receipt(stored.request_mac, stored.ok, stored.code, stored.result, stored.record_version)
