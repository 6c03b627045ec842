"""Drivers: one adapter request in, one adapter response out (docs/protocol.md section 5).

A ``Driver`` answers exactly one request of the conformance adapter with
exactly one response, ``{"id", "ok": true, "result"}`` or ``{"id", "ok":
false, "error": {"type", "message"}}``, plus ``"nested"`` when the request
carried ``duringFetch``. Two drivers speak it:

* ``ModelDriver``: the pure model (``envreplica.model``) and a value store
  kept as a dict of the model's ``Answer`` values. A page or delivery that
  suspends in a value-store read (``Pending``) is resumed here: the answer is
  looked up when the read begins, the ``duringFetch`` requests run (first read
  of the operation only), then the operation resumes with that answer.
* ``SqliteDriver``: ``envreplica.impl.replica.SqliteReplica`` on a file, with
  an ``EmbeddedStore`` (or any ``ValueReader``) and a ``Sealer``;
  ``duringFetch`` becomes the replica's ``during_fetch`` callback.

Both drivers share the request checks, frame parsing (``spec.wire``) and
result encoding (``spec.wire.encode``) below, so the same request gives the
same JSON from both whenever the two replicas agree.

Decisions where docs/protocol.md section 5 is silent (each is tested in
``tests/test_adapter.py``):

* What section 5 fixes: a request whose ``op`` is a string the adapter does
  not know is ``unsupported`` (whatever its other keys); a known op given a
  key the table does not list (beside ``id`` and ``op``) is ``invalid`` and
  changes nothing; a request without an integer ``id`` is ``invalid``,
  answered with ``"id": null``.
* Where it is silent: the ``id`` is checked first (so an unknown op without
  an integer id is ``invalid``, ``"id": null``); a missing ``op``, or an
  ``op`` that is not a string, is ``invalid`` (the request is malformed, not
  of an unknown kind); a line that is not a JSON object is ``invalid`` with
  ``"id": null``. Requests are exact objects, like frames: an op's own fields
  are required unless the table says optional. ``duringFetch`` is accepted on
  ``page`` and ``delivery`` only; a nested request is answered in ``nested``
  by the same rules (an unknown nested op is ``unsupported`` there). Booleans
  are not integers.
* Error messages never echo a value that may be secret: the value of a key
  that is not allowed, ``raw``, ``masterKeyHex``, or a request that is not an
  object are described by their JSON type and size only, and key names that
  do not look like field names by their length.
* ``nested`` is present exactly when a well-formed request carried
  ``duringFetch`` (even when the operation then failed: invalid frame, corrupt
  replica, operation lost). It is ``[]`` when the operation made no
  value-store read (a refusal, a tombstone, no store, ...): the nested requests
  then did not run at all. Nested requests may carry ``duringFetch`` of their
  own; they are handled by the same ``handle``.
* **An operation lost in a nested restart.** When a nested ``restart`` (or
  ``reset``) runs inside an operation's value-store read, the crash takes that
  operation with it, as it would in the seed's process: its read answer is
  never used and it commits nothing more (what it committed before the read
  stays). The outer request is answered with the error ``{"type":
  "unsupported", "message": "operation lost: the replica restarted inside its
  value-store read"}`` (``... was reset ...`` for a nested ``reset``), with the
  nested responses beside it. The remaining nested requests still run first.
* ``store.put`` / ``store.fail`` name a value by ``projectId``, ``key`` and
  ``ref`` (the same parameter names as the model: section 4). A legacy ``ref``
  whose key has no legacy parameter name (a Key that is not a Segment, such as
  ``_X``) cannot be stored and is ``invalid``; so is ``reportedVersion`` with a
  staged ``ref``. ``reportedVersion`` is a Count >= 1. ``store.fail`` of a
  legacy ``ref`` affects that version only. ``mode`` is ``"missing"`` or
  ``"error"``.
* ``reset`` ``config`` is an exact object with optional ``ackPageBytes``
  (Count), ``masterKeyHex`` (64 hex digits) and ``prefix`` (a string); omitted
  keys take their defaults (262144, the driver's configured master key,
  ``/envreplica``). ``ModelDriver`` checks ``masterKeyHex`` and otherwise
  ignores it (the model neither seals nor MACs). A ``reset`` empties the
  replica in place (``SqliteReplica.empty``: every row, never a file) and
  clears the value store and turns it back on (``store.off`` is undone). A
  ``SqliteDriver`` given a store that must not hold test data
  (``forbid_test_key``, set with ``--store ssm``) refuses a ``masterKeyHex``
  that is the public test key (``invalid``).
* A driver starts with its replica as it finds it: a new one when nothing is
  at its path, else its own replica reopened as after ``restart``. A
  ``masterKeyHex`` other than the configured key is recorded in the file
  (``store_meta.key_source``); a later driver under another key finds that
  replica unopenable and answers every request but ``reset`` "replica
  unavailable", and its ``reset`` replaces the file with a fresh replica.
  A replica under a configured key is refused at startup, untouched.
* ``store.off`` is for operations that start after it: a page or delivery
  already inside its read (``store.off`` nested in its ``duringFetch``) keeps
  reading through the store it started with, as the seed's operations take
  their reader as a call argument and the model's ``PageInFlight`` keeps
  ``reader_on``. (``SqliteReplica`` likewise fixes each operation's reader
  when it starts; ``SqliteDriver`` sets its ``reader`` attribute to None.)
  ``store.off`` survives ``restart`` (the model's ``State.durable`` keeps
  ``store_on``; the process still has no store after it reopens).
* ``close`` is the seed's ``closeProjectEnvReplicaGate``.
* The ops ``ready``, ``diagnostics``, ``state`` and the field
  ``crashAfterCommit`` are docs/protocol.md section 6's,
  checked by the same rules (an undeclared key is ``invalid``;
  ``crashAfterCommit`` with ``duringFetch`` is ``invalid``). ``ModelDriver``
  answers ``ready`` at once (single-threaded: nothing moves while it would
  wait), ``state`` with ``stand_in_mac`` names as receipt MACs, and crashes
  through ``model.actions.run_until_crash``; ``SqliteDriver`` waits with
  ``await_ready``, answers ``state`` only when ``offer_state`` (default: the
  public test key), and crashes through the replica's ``after_commit`` hook.
  A crash nested in another operation's read loses that operation, as a
  nested ``restart`` does (``OPERATION_LOST_CRASH``).
* A replica whose file is busy past the busy timeout, failing on the disk, or
  removed under it is answered ``{"type": "unsupported", "message": "replica
  unavailable: ..."}``: section 5 has no error type for the environment, and
  this is neither the replica's answer nor its corruption.
* An exception that is neither ``InvalidFrame`` nor ``CorruptReplica`` is a
  driver bug; it is answered with ``{"type": "unsupported", "message":
  "internal error: ..."}`` rather than crashing the adapter.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Protocol, Union, runtime_checkable

from envreplica.model.actions import (
    Begin,
    CloseGate,
    Commit,
    Deliver,
    Page,
    Restart,
    Resume,
    StoreOff,
    run_until_crash,
    step,
)
from envreplica.model import replica as model_replica
from envreplica.model.state import (
    DEFAULT_ACK_PAGE_BYTES,
    DEFAULT_PREFIX,
    INITIAL,
    ModelConfig,
    ReadRequest,
    State,
)
from envreplica.model.store import (
    Answer,
    Found,
    Missing,
    Raises,
    legacy_parameter_name,
    staged_parameter_name,
)
from envreplica.impl.files import ReplicaKeyMismatch, ReplicaPathError, ReplicaUnavailable
from envreplica.spec import schema, wire
from envreplica.spec.domain import (
    Crashed,
    Diagnosis,
    Done,
    Failed,
    InvalidFrame,
    LegacyRef,
    Pending,
    Readiness,
    ReplicaError,
    StagedRef,
    ValueRef,
)
from envreplica.spec.variants import Finding, Variant

if TYPE_CHECKING:
    from envreplica.impl.replica import SqliteReplica

__all__ = [
    "TEST_MASTER_KEY",
    "TEST_MASTER_KEY_HEX",
    "Driver",
    "ModelDriver",
    "SqliteDriver",
    "OPERATION_LOST_RESTART",
    "OPERATION_LOST_RESET",
    "OPERATION_LOST_CRASH",
    "OPS",
    "stand_in_mac",
]

#: The public TEST master key (bytes 0x00..0x1f): used only when asked for by
#: name (``--test-key``, a ``reset`` whose ``masterKeyHex`` is it, the
#: in-process harness). Anyone can open what is sealed under it.
TEST_MASTER_KEY = bytes(range(32))
TEST_MASTER_KEY_HEX = TEST_MASTER_KEY.hex()

OPERATION_LOST_RESTART = "operation lost: the replica restarted inside its value-store read"
OPERATION_LOST_RESET = "operation lost: the replica was reset inside its value-store read"
OPERATION_LOST_CRASH = "operation lost: the replica crashed (crashAfterCommit) inside its value-store read"
#: Why ``state`` is not offered (docs/protocol.md section 6): it shows every value in plaintext.
STATE_NOT_OFFERED = ("unsupported: op 'state' shows every stored value in plaintext, so this adapter offers it "
                     "only when it runs with the public test key (--test-key: test data only); nothing was done")


@runtime_checkable
class Driver(Protocol):
    """Answers one adapter request (a decoded JSON object) with one response."""

    def handle(self, request: Any) -> dict:
        ...


# ---------------------------------------------------------------------------
# Request checks, shared by every driver.
# ---------------------------------------------------------------------------

#: op -> (required fields, optional fields), beside "id" and "op": the contract's op table (``spec.schema.OPS``).
OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    op: (spec.required, spec.optional) for op, spec in schema.OPS.items()}

#: The optional field of docs/protocol.md section 6 (crash right after the k-th write commit).
CRASH_FIELD = "crashAfterCommit"
#: The longest ``ready`` wait a request may ask for (docs/protocol.md section 6).
MAX_READY_TIMEOUT_MS = schema.MAX_READY_TIMEOUT_MS

_CONFIG_KEYS = ("ackPageBytes", "masterKeyHex", "prefix")
_MASTER_KEY_HEX = re.compile(r"[0-9a-fA-F]{64}")
_FAIL_MODES = ("missing", "error")


def _bad(path: str, rule: str, got: str, fix: str) -> InvalidFrame:
    return InvalidFrame(f"invalid request: {path} {rule}; got {got}. {fix}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unknown_op(op: str) -> str:
    shown = op if re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", op) else f"<an op of {len(op)} characters>"
    return (f"unsupported: this adapter does not know op {shown!r} (it knows {', '.join(OPS)}); "
            f"nothing was done")


class UnknownOp(Exception):
    """A request whose ``op`` is a string this adapter does not know: ``unsupported`` (section 5)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _request_id(request: Any) -> Optional[int]:
    if isinstance(request, dict):
        rid = request.get("id")
        if type(rid) is int:
            return rid
    return None


def check_request(request: Any) -> tuple[str, dict]:
    """The op and fields of a well-formed request; ``InvalidFrame`` otherwise. Changes nothing."""
    if type(request) is not dict:
        raise _bad("request", "must be a JSON object with keys 'id' and 'op'", wire.unshown(request),
                   "Send an object.")
    if "id" not in request:
        raise _bad("request.id", "is required", "nothing (the key is absent)", "Add an integer 'id'.")
    if type(request["id"]) is not int:
        raise _bad("request.id", "must be a JSON integer", _show(request["id"]) if isinstance(
            request["id"], (int, float, bool, type(None))) else wire.unshown(request["id"]), "Send an integer id.")
    if "op" not in request:
        raise _bad("request.op", "is required", "nothing (the key is absent)", "Add the key 'op'.")
    op = request["op"]
    if not isinstance(op, str):
        raise _bad("request.op", f"must be a string naming an op ({', '.join(OPS)})", wire.unshown(op),
                   "Send a known op.")
    if op not in OPS:
        raise UnknownOp(_unknown_op(op))
    required, optional = OPS[op]
    for key in required:
        if key not in request:
            raise _bad(f"request.{key}", f"is required for op {op!r}", "nothing (the key is absent)",
                       f"Add the key {key!r}.")
    allowed = ("id", "op") + required + optional
    extra = sorted(k for k in request if k not in allowed)
    if extra:
        raise _bad(f"request.{wire.shown_key(extra[0])}",
                   f"is not allowed for op {op!r} (allowed keys: {', '.join(allowed)})",
                   wire.unshown(request[extra[0]]), "Remove the key.")
    if "duringFetch" in request and type(request["duringFetch"]) is not list:
        raise _bad("request.duringFetch", "must be a JSON array of requests", wire.unshown(request["duringFetch"]),
                   "Send an array.")
    if CRASH_FIELD in request:
        if "duringFetch" in request:
            raise _bad("request.crashAfterCommit", "is not allowed together with duringFetch "
                       "(docs/protocol.md section 6)", "both keys", "Send one or the other.")
        _count(request[CRASH_FIELD], "request.crashAfterCommit", minimum=1)
    if op == "ready":
        timeout = request["timeoutMs"]
        if type(timeout) is not int or not 0 <= timeout <= MAX_READY_TIMEOUT_MS:
            raise _bad("request.timeoutMs", f"must be a Count of milliseconds from 0 to {MAX_READY_TIMEOUT_MS}",
                       _show(timeout), f"Send an integer from 0 to {MAX_READY_TIMEOUT_MS}.")
    return op, request


def _count(value: Any, path: str, minimum: int = 0) -> int:
    if type(value) is not int or not minimum <= value <= wire.MAX_COUNT:
        raise _bad(path, f"must be a Count >= {minimum} (a JSON integer, not a boolean or float)", _show(value),
                   f"Send an integer from {minimum} to 9007199254740991.")
    return value


def _key(value: Any, path: str) -> str:
    if not isinstance(value, str) or wire.KEY.regex.fullmatch(value) is None:
        raise _bad(path, wire.KEY.rule, _show(value), wire.KEY.fix)
    return value


def parse_config(value: Any) -> tuple[int, Optional[str], str]:
    """``reset``'s config: (ack page bytes, master key hex or None for the driver's own, prefix)."""
    if value is None:
        value = {}
    if type(value) is not dict:
        raise _bad("request.config", f"must be a JSON object with optional keys {', '.join(_CONFIG_KEYS)}",
                   wire.unshown(value), "Send an object.")
    extra = sorted(k for k in value if k not in _CONFIG_KEYS)
    if extra:
        raise _bad(f"request.config.{wire.shown_key(extra[0])}",
                   f"is not allowed (allowed keys: {', '.join(_CONFIG_KEYS)})",
                   wire.unshown(value[extra[0]]), "Remove the key.")
    ack = DEFAULT_ACK_PAGE_BYTES
    if "ackPageBytes" in value:
        ack = _count(value["ackPageBytes"], "request.config.ackPageBytes")
    key_hex = None
    if "masterKeyHex" in value:
        key_hex = value["masterKeyHex"]
        if not isinstance(key_hex, str) or _MASTER_KEY_HEX.fullmatch(key_hex) is None:
            shown = f"a {type(key_hex).__name__}" if not isinstance(key_hex, str) else f"{len(key_hex)} characters"
            raise _bad("request.config.masterKeyHex", "must be 64 hexadecimal characters (a 32-byte key)",
                       f"{shown} (not shown)", "Send 64 hex digits.")
    prefix = DEFAULT_PREFIX
    if "prefix" in value:
        prefix = value["prefix"]
        if not isinstance(prefix, str):
            raise _bad("request.config.prefix", "must be a string", _show(prefix), "Send a string such as '/envreplica'.")
    return ack, None if key_hex is None else key_hex.lower(), prefix


def _store_target(fields: dict, prefix: str) -> tuple[str, str, ValueRef, str]:
    """(projectId, key, ref, parameter name) of a ``store.put`` / ``store.fail``."""
    project_id = wire.parse_org_id(fields["projectId"], path="request.projectId")
    key = _key(fields["key"], "request.key")
    ref = wire.parse_value_ref(fields["ref"], path="request.ref")
    if isinstance(ref, StagedRef):
        return project_id, key, ref, staged_parameter_name(prefix, project_id, key, ref.staging_id)
    name = legacy_parameter_name(prefix, project_id, key)
    if name is None:
        raise _bad("request.key", "must be a Segment for a legacy ref (it has no legacy parameter name)",
                   _show(key), "A replica reads such a record as value_reference_invalid; store nothing.")
    return project_id, key, ref, name


def _put_args(fields: dict, prefix: str):
    project_id, key, ref, name = _store_target(fields, prefix)
    raw = fields["raw"]
    if not isinstance(raw, str):
        raise _bad("request.raw", "must be a string", wire.unshown(raw), "Send the parameter's text.")
    reported = None
    if "reportedVersion" in fields:
        if isinstance(ref, StagedRef):
            raise _bad("request.reportedVersion", "is allowed for a legacy ref only",
                       _show(fields["reportedVersion"]), "Remove the key.")
        reported = _count(fields["reportedVersion"], "request.reportedVersion", minimum=1)
    return project_id, key, ref, name, raw, reported


def _fail_args(fields: dict, prefix: str):
    project_id, key, ref, name = _store_target(fields, prefix)
    mode = fields["mode"]
    if not isinstance(mode, str) or mode not in _FAIL_MODES:
        raise _bad("request.mode", "must be 'missing' or 'error'", _show(mode), "Send 'missing' or 'error'.")
    return project_id, key, ref, name, mode


def _begin_args(fields: dict):
    frame = wire.parse_begin(fields["frame"])
    epochs = wire.parse_policy_epochs(fields["keptPolicyEpochs"])
    org_id = wire.parse_org_id(fields["orgId"])
    return frame, epochs, org_id


class _Unsupported(Exception):
    """The driver cannot do this request (an ``unsupported`` error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _CrashNow(Exception):
    """Raised by ``SqliteDriver``'s ``after_commit`` counter at the commit a ``crashAfterCommit`` names."""


class _OperationLost(Exception):
    """Raised out of a ``during_fetch`` callback: a nested restart/reset took the operation."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _commit_counter(crash_at: int) -> Callable[[], None]:
    """An ``after_commit`` hook raising ``_CrashNow`` right after the ``crash_at``-th write commit."""
    made = 0

    def after_commit() -> None:
        nonlocal made
        made += 1
        if made >= crash_at:
            raise _CrashNow(f"crash after write commit {made}")

    return after_commit


def _error(rid: Optional[int], kind: str, message: str) -> dict:
    return {"id": rid, "ok": False, "error": {"type": kind, "message": message}}


class _BaseDriver:
    """Dispatch, error mapping and encoding; subclasses implement ``_op_<name>``."""

    def handle(self, request: Any) -> dict:
        rid = _request_id(request)
        try:
            op, fields = check_request(request)
        except InvalidFrame as error:
            return _error(rid, "invalid", error.message)
        except UnknownOp as error:
            return _error(rid, "unsupported", error.message)
        nested: Optional[list] = [] if "duringFetch" in fields else None
        method = getattr(self, "_op_" + op.replace(".", "_"))
        try:
            self._ready_for(op)
            result = method(fields, nested)
        except ReplicaError as error:  # InvalidFrame and CorruptReplica
            response = _error(rid, error.wire_type, error.message)
        except (_Unsupported, _OperationLost) as error:
            response = _error(rid, "unsupported", error.message)
        except (ReplicaUnavailable, ReplicaPathError) as error:
            # Not the replica's answer: its file is busy, failing or gone. Section 5 has no type for it.
            response = _error(rid, "unsupported", f"replica unavailable: {error}")
        except Exception as error:  # a driver bug: answer, never crash the adapter
            response = _error(rid, "unsupported", f"internal error: {type(error).__name__}: {error}")
        else:
            if isinstance(result, Failed):
                response = _error(rid, result.kind, result.message)
            else:
                response = {"id": rid, "ok": True, "result": wire.encode(result)}
        if nested is not None:
            response["nested"] = nested
        return response

    def _ready_for(self, op: str) -> None:
        """Raise what keeps this driver from answering ``op`` now (default: nothing does)."""

    #: How deep the request being handled is nested in ``duringFetch`` requests (0: a line of input).
    _depth = 0

    def _run_nested(self, requests: list, nested: list) -> None:
        self._depth += 1
        try:
            for request in requests:
                nested.append(self.handle(request) if self._depth <= schema.MAX_NESTING else _error(
                    _request_id(request), "invalid",
                    f"invalid request: duringFetch nests deeper than {schema.MAX_NESTING} requests (the contract's "
                    f"limit, docs/protocol.md section 5); nothing was done. Nest at most {schema.MAX_NESTING} "
                    f"levels."))
        finally:
            self._depth -= 1


# ---------------------------------------------------------------------------
# The model.
# ---------------------------------------------------------------------------


def store_answer(store: dict, request: ReadRequest) -> Answer:
    """What a read answers from a model store ((parameter name, legacy version or None) -> answer)."""
    ref = request.ref
    version = ref.ssm_version if isinstance(ref, LegacyRef) else None
    return store.get((request.name, version), Missing())


def stand_in_mac(request: Any) -> str:
    """The model's ``requestMac`` in a ``state`` document: a NAME of the request, not a MAC.

    The model keeps no key; ``"sha256:"`` and the SHA-256 of the request's
    canonical JSON names each distinct request once, which is all the harness
    compares (docs/protocol.md section 6: MACs are compared as names).
    """
    import hashlib

    return "sha256:" + hashlib.sha256(wire.canonical_json(request).encode("utf-8")).hexdigest()


#: ``stand_in_mac`` memoised for the model's own (hashable) requests: ``state`` names every receipt each step.
_stand_in_of_request = lru_cache(maxsize=1 << 16)(stand_in_mac)


def model_diagnosis(st: State, project_ids, cfg: ModelConfig) -> Optional[Diagnosis]:
    """Why the model's ``read_snapshot`` of ``project_ids`` is null, as a ``Diagnosis`` (None: it serves):
    ``model.replica.diagnose``, the model's own."""
    return model_replica.diagnose(st, project_ids, cfg)


class ModelDriver(_BaseDriver):
    """The model of ``envreplica.model`` behind the adapter protocol."""

    def __init__(self, variant: Union[str, Variant] = Variant.FIXED, left_out: Iterable[Finding] = ()) -> None:
        self.variant = Variant(variant)
        #: fixes of the variant the model runs without (``ModelConfig.left_out``): naming a divergence's finding
        self.left_out = frozenset(Finding(f) for f in left_out)
        self._lives = 0  # bumped by every restart and reset: detects lost operations
        self._last_drop = OPERATION_LOST_RESTART
        self._reset(None)

    # -- state --------------------------------------------------------------

    def _reset(self, config: Any) -> None:
        ack, _key_hex, prefix = parse_config(config)
        self.cfg = ModelConfig(variant=self.variant, ack_page_bytes=ack, prefix=prefix, left_out=self.left_out)
        self.state: State = INITIAL
        #: (parameter name, legacy version or None) -> what a read of it answers
        self.store: dict[tuple[str, Optional[int]], Answer] = {}
        self._lives += 1
        self._last_drop = OPERATION_LOST_RESET

    def _answer(self, request: ReadRequest) -> Answer:
        return store_answer(self.store, request)

    def _step(self, action):
        self.state, result = step(self.cfg, self.state, action)
        return result

    def _run(self, action, fields: dict, nested: Optional[list]):
        """Run a page or delivery to its end, answering each value-store read from the store.

        With ``crashAfterCommit: k`` the operation runs through
        ``model.actions.run_until_crash``, its commit count carried across
        each read; at its k-th write commit the process dies (``Crashed``).
        """
        crash_at = fields.get(CRASH_FIELD)
        if crash_at is not None:
            return self._run_to_crash(action, crash_at)
        result = self._step(action)
        first = True
        while isinstance(result, Pending):
            op = self.state.inflight[result.slot]
            answer = self._answer(op.read.request)  # the moment the read begins
            if first and nested is not None:
                self._run_nested(fields["duringFetch"], nested)
            first = False
            slot = next((i for i, o in enumerate(self.state.inflight) if o is op), None)
            if slot is None:
                raise _OperationLost(self._last_drop)
            result = self._step(Resume(slot, answer))
        return result

    def _run_to_crash(self, action, crash_at: int):
        """``crashAfterCommit``: run until the operation ends or makes its ``crash_at``-th write commit."""
        left = crash_at
        self.state, result, made = run_until_crash(self.cfg, self.state, action, left)
        left -= made
        while isinstance(result, Pending):
            op = self.state.inflight[result.slot]
            answer = self._answer(op.read.request)  # no duringFetch with crashAfterCommit: nothing runs between
            self.state, result, made = run_until_crash(self.cfg, self.state, Resume(result.slot, answer), left)
            left -= made
        if isinstance(result, Crashed):
            self._lives += 1  # an operation whose read this ran inside is lost with the process
            self._last_drop = OPERATION_LOST_CRASH
            return Crashed(crash_at)
        return result

    # -- ops ----------------------------------------------------------------

    def _op_reset(self, fields, nested):
        self._reset(fields.get("config"))
        return Done()

    def _op_store_put(self, fields, nested):
        _p, _k, ref, name, raw, reported = _put_args(fields, self.cfg.prefix)
        version = ref.ssm_version if isinstance(ref, LegacyRef) else None
        self.store[(name, version)] = Found(raw, reported)
        return Done()

    def _op_store_fail(self, fields, nested):
        _p, _k, ref, name, mode = _fail_args(fields, self.cfg.prefix)
        version = ref.ssm_version if isinstance(ref, LegacyRef) else None
        self.store[(name, version)] = Missing() if mode == "missing" else Raises()
        return Done()

    def _op_store_off(self, fields, nested):
        return self._step(StoreOff())

    def _op_begin(self, fields, nested):
        frame, epochs, org_id = _begin_args(fields)
        return self._step(Begin(frame, epochs, org_id))

    def _op_page(self, fields, nested):
        return self._run(Page(wire.parse_page(fields["frame"])), fields, nested)

    def _op_delivery(self, fields, nested):
        return self._run(Deliver(wire.parse_apply(fields["frame"])), fields, nested)

    def _op_commit(self, fields, nested):
        return self._step(Commit(wire.parse_commit(fields["frame"])))

    def _op_close(self, fields, nested):
        return self._step(CloseGate())

    def _op_status(self, fields, nested):
        return model_replica.read_status(self.state)

    def _op_snapshot(self, fields, nested):
        return model_replica.read_snapshot(self.state, wire.parse_project_ids(fields["projectIds"]), self.cfg)

    def _op_receipts(self, fields, nested):
        return list(model_replica.list_receipts(self.state))

    def _op_restart(self, fields, nested):
        result = self._step(Restart())
        self._lives += 1
        self._last_drop = OPERATION_LOST_RESTART
        return result

    # -- docs/protocol.md section 6 ----------------------------------------------

    def _op_ready(self, fields, nested):
        # The model is single-threaded: nothing can change while it would wait, so it answers at once.
        return Readiness(model_replica.is_ready(self.state))

    def _op_diagnostics(self, fields, nested):
        return model_diagnosis(self.state, wire.parse_project_ids(fields["projectIds"]), self.cfg)

    def _op_state(self, fields, nested):
        return self.state_doc()

    def state_doc(self) -> dict:
        """The ``state`` document of the model's tables; receipt MACs are ``stand_in_mac`` names."""
        from envreplica.conformance.readback import state_to_doc

        return state_to_doc(self.state, _stand_in_of_request)


# ---------------------------------------------------------------------------
# The SQLite implementation.
# ---------------------------------------------------------------------------


def _embedded_store():
    from envreplica.impl.valuestores import EmbeddedStore

    return EmbeddedStore()


class SqliteDriver(_BaseDriver):
    """``SqliteReplica`` on ``db_path`` behind the adapter protocol.

    ``master_key`` is the key a ``reset`` without ``masterKeyHex`` seals
    under (the adapter's configured key, or the public test key when asked
    for by name). ``store_factory`` builds the value store at every ``reset``
    (default: a fresh ``EmbeddedStore``). With another store (``SsmStore``),
    ``store.put`` writes through ``put_for_ref`` and answers ``unsupported``
    when that store cannot produce the answer asked for; ``store.fail`` is
    ``unsupported``. ``exclusive`` holds the replica alone (the adapter);
    ``created_by`` marks a replica this driver creates; ``anchor`` is
    ``impl.anchor``'s. ``forbid_test_key`` refuses the public test key
    (``--store ssm``). ``offer_state`` says whether the ``state`` op is
    answered (default: when ``master_key`` is the public test key and the
    store may hold test data); otherwise it is ``unsupported``
    (docs/protocol.md section 6: it shows every value in plaintext).
    """

    def __init__(self, variant: Union[str, Variant], db_path: Union[str, os.PathLike], *,
                 master_key: bytes, store_factory: Optional[Callable[[], Any]] = None,
                 exclusive: bool = False, created_by: Optional[str] = None, anchor=None,
                 forbid_test_key: bool = False, on_test_key: Optional[Callable[[str], None]] = None,
                 offer_state: Optional[bool] = None) -> None:
        from envreplica.impl.config import ReplicaConfig
        from envreplica.impl.sealing import Sealer

        self.variant = Variant(variant)
        self.db_path = os.fspath(db_path)
        self._store_factory = store_factory or _embedded_store
        self._exclusive = exclusive
        self._created_by = created_by
        self._anchor = anchor
        self._forbid_test_key = forbid_test_key
        self._on_test_key = on_test_key
        if forbid_test_key and bytes(master_key) == TEST_MASTER_KEY:
            raise ValueError("the public test key is refused with this value store")
        self._master_key = bytes(master_key)
        # ``state`` shows plaintext values: offered by default only under the public test key.
        self._offer_state = (self._master_key == TEST_MASTER_KEY and not forbid_test_key
                             if offer_state is None else bool(offer_state))
        self._replica: Optional[SqliteReplica] = None
        self._lives = 0
        self._last_drop = OPERATION_LOST_RESTART
        self.cfg = ReplicaConfig(variant=self.variant)  # the implementation's own config (impl.config)
        self.sealer = Sealer(self._master_key)
        self._fresh_store()
        existed = os.path.exists(self.db_path)
        #: Why the replica at ``db_path`` is not open: its own replica sealed under another key (a previous
        #: process's ``reset`` with ``masterKeyHex``); requests before the next ``reset`` are answered with it.
        self._unopened: Optional[Exception] = None
        try:
            self._replica = self._open()
        except ReplicaKeyMismatch as error:
            if not self._replaceable():  # a key of its own (a real one): refused, the file untouched
                raise
            self._replica, self._unopened = None, error
        else:
            if existed:
                self._replica.close_gate()  # its own replica, reopened: as after a restart

    # -- lifecycle ----------------------------------------------------------

    def _ready_for(self, op: str) -> None:
        if self._unopened is not None and op != "reset":
            raise ReplicaPathError(f"{self._unopened} (or send reset, which replaces this adapter's own replica "
                                   f"with a fresh one)")

    def _open(self) -> SqliteReplica:
        from envreplica.impl.replica import SqliteReplica

        return SqliteReplica(self.db_path, **self._replica_options())

    def _replaceable(self) -> bool:
        """Whether the file is this driver's own replica (``created_by``) sealed under a key a ``reset``
        sent (``writer.KEY_FROM_RESET``): test data under the harness's key, which a ``reset`` may replace."""
        from envreplica.impl.files import current_meta
        from envreplica.impl.writer import KEY_FROM_RESET

        if self._created_by is None:
            return False
        try:
            meta = current_meta(self.db_path)
        except (ReplicaPathError, ReplicaUnavailable):
            return False
        return meta.get("created_by") == self._created_by and meta.get("key_source") == KEY_FROM_RESET

    def _open_for_reset(self) -> SqliteReplica:
        """The replica a ``reset`` is about to empty, under the reset's key.

        A ``reset`` gives a fresh, empty replica (docs/protocol.md section 5).
        This driver's own replica sealed under a key an earlier process's
        ``reset`` sent (``masterKeyHex``) cannot be opened under this one: the
        file is replaced, under the exclusive lock, when it is still that
        (``_replaceable``). A replica sealed under a configured key is
        refused as when opening, and left as it is.
        """
        from envreplica.impl.files import ReplicaLock, remove_replica

        try:
            return self._open()
        except ReplicaKeyMismatch:
            holder = ReplicaLock(self.db_path, exclusive=True)
            try:
                if not self._replaceable():
                    raise
                remove_replica(self.db_path)
            finally:
                holder.release()
        return self._open()

    def _replica_options(self) -> dict:
        """How this driver opens its replica (a subclass may open another class with them)."""
        return dict(sealer=self.sealer, reader=self._reader(), config=self.cfg, exclusive=self._exclusive,
                    created_by=self._created_by, anchor=self._anchor)

    def _fresh_store(self) -> None:
        self.store = self._store_factory()
        if hasattr(self.store, "clear"):
            self.store.clear()
        self._store_on = True

    def _close_replica(self) -> None:
        replica, self._replica = self._replica, None
        if replica is not None:
            replica.close()

    def _reset(self, config: Any) -> None:
        from envreplica.impl.config import ReplicaConfig
        from envreplica.impl.sealing import Sealer
        from envreplica.impl.writer import KEY_FROM_RESET

        ack, key_hex, prefix = parse_config(config)
        key = self._master_key if key_hex is None else bytes.fromhex(key_hex)
        if key == TEST_MASTER_KEY:
            if self._forbid_test_key:
                raise InvalidFrame("invalid request: request.config.masterKeyHex is the public test key, which is "
                                   "refused with this value store (--store ssm): values read from a real store "
                                   "must not be sealed under a key anyone has. Send another key, or none.")
            if self._on_test_key is not None and key_hex is not None:
                self._on_test_key("reset.config.masterKeyHex")
        self.cfg = ReplicaConfig(variant=self.variant, ack_page_bytes=ack, prefix=prefix)
        self.sealer = Sealer(key)
        self._fresh_store()
        if self._replica is None:
            self._replica = self._open_for_reset()
            self._unopened = None
        self._replica.config = self.cfg
        self._replica.reader = self._reader()
        # Every row, in place: never a file. A key the request sent (not this adapter's configured one) is
        # recorded, so that a later adapter process under another key may replace this test data at its reset.
        self._replica.empty(self.sealer, key_source=KEY_FROM_RESET if key != self._master_key else None)
        self._lives += 1
        self._last_drop = OPERATION_LOST_RESET

    @property
    def replica(self) -> Optional[SqliteReplica]:
        return self._replica

    @property
    def _live(self) -> SqliteReplica:
        """The open replica: an op runs only while one is (``_ready_for``; ``reset`` opens one)."""
        assert self._replica is not None, "an op ran with no replica open"
        return self._replica

    def close(self) -> None:
        """Close the database (the adapter calls this at end of input)."""
        self._close_replica()

    def _callback(self, replica, fields: dict, nested: Optional[list]):
        if nested is None:
            return None
        lives = self._lives

        def during_fetch() -> None:
            self._run_nested(fields["duringFetch"], nested)
            if self._lives != lives:
                raise _OperationLost(self._last_drop)

        return during_fetch

    def _guarded(self, call, fields, nested):
        """Run a page/delivery; an operation taken by a nested restart answers ``unsupported``.

        With ``crashAfterCommit: k`` the replica's ``after_commit`` hook counts
        write commits and raises ``_CrashNow`` right after the k-th: the
        operation ends there, the replica is abandoned (its connection closed,
        nothing more written) and reopened from disk with its gate closed, as
        ``restart`` does; the answer is ``Crashed(k)``.
        """
        lives = self._lives
        replica = self._live
        crash_at = fields.get(CRASH_FIELD)
        if crash_at is not None:
            replica.after_commit = _commit_counter(crash_at)
        try:
            return call(replica, self._callback(replica, fields, nested))
        except _CrashNow:
            self._restart(OPERATION_LOST_CRASH)
            return Crashed(crash_at)
        except _OperationLost:
            raise
        except Exception:
            if self._lives != lives:  # the old replica was closed under it: its unwinding is moot
                raise _OperationLost(self._last_drop) from None
            raise
        finally:
            if crash_at is not None:
                replica.after_commit = None

    def _restart(self, lost: str) -> None:
        """The process died (``restart``, or a crash right after a commit): abandon the replica (closing
        the connection, no transaction is open, nothing more is written), reopen it from disk, and close
        the gate as the host does on startup. An operation whose read this ran inside is lost (``lost``)."""
        self._close_replica()
        self._replica = self._open()
        self._lives += 1
        self._last_drop = lost
        self._replica.close_gate()

    def _reader(self):
        return self.store if self._store_on else None

    # -- ops ----------------------------------------------------------------

    def _op_reset(self, fields, nested):
        self._reset(fields.get("config"))
        return Done()

    def _op_store_put(self, fields, nested):
        from envreplica.impl.valuestores import EmbeddedStore, ValueStoreError, put_for_ref

        project_id, key, ref, _name, raw, reported = _put_args(fields, self.cfg.prefix)
        if isinstance(self.store, EmbeddedStore):
            put_for_ref(self.store, self.cfg.prefix, project_id, key, ref, raw, reported)
            return Done()
        try:
            put_for_ref(self.store, self.cfg.prefix, project_id, key, ref, raw, reported)
        except (ValueError, TypeError, ValueStoreError) as error:
            raise _Unsupported(f"this value store cannot hold that answer: {error}") from None
        return Done()

    def _op_store_fail(self, fields, nested):
        from envreplica.impl.valuestores import EmbeddedStore

        _p, _k, ref, name, mode = _fail_args(fields, self.cfg.prefix)
        if not isinstance(self.store, EmbeddedStore):
            raise _Unsupported(f"store.fail needs the embedded value store; this one is {type(self.store).__name__}")
        self.store.fail(name, mode, ref.ssm_version if isinstance(ref, LegacyRef) else None)
        return Done()

    def _op_store_off(self, fields, nested):
        # SqliteReplica fixes an operation's reader when it starts (the seed's per-call
        # reader), so this affects only operations that start later.
        self._store_on = False
        self._live.reader = None
        return Done()

    def _op_begin(self, fields, nested):
        frame, epochs, org_id = _begin_args(fields)
        return self._live.begin(frame, epochs, org_id)

    def _op_page(self, fields, nested):
        frame = wire.parse_page(fields["frame"])
        return self._guarded(lambda replica, cb: replica.apply_page(frame, during_fetch=cb), fields, nested)

    def _op_delivery(self, fields, nested):
        frame = wire.parse_apply(fields["frame"])
        return self._guarded(lambda replica, cb: replica.apply_delivery(frame, during_fetch=cb), fields, nested)

    def _op_commit(self, fields, nested):
        return self._live.complete(wire.parse_commit(fields["frame"]))

    def _op_close(self, fields, nested):
        self._live.close_gate()
        return Done()

    def _op_status(self, fields, nested):
        return self._live.read_status()

    def _op_snapshot(self, fields, nested):
        return self._live.read_snapshot(wire.parse_project_ids(fields["projectIds"]))

    def _op_receipts(self, fields, nested):
        return list(self._live.list_receipts())

    def _op_restart(self, fields, nested):
        # As model.replica.restart: in-flight work is lost, then startup closes the gate.
        self._restart(OPERATION_LOST_RESTART)
        return Done()

    # -- docs/protocol.md section 6 ----------------------------------------------

    def _op_ready(self, fields, nested):
        try:
            self._live.await_ready(fields["timeoutMs"] / 1000)
        except TimeoutError:
            return Readiness(False)
        return Readiness(True)

    def _op_diagnostics(self, fields, nested):
        return self._live.diagnose(wire.parse_project_ids(fields["projectIds"]))

    def _op_state(self, fields, nested):
        if not self._offer_state:
            raise _Unsupported(STATE_NOT_OFFERED)
        return self._live.export_state()
