"""Malformed requests through a running adapter: each answered by one clear error, nothing changed, no crash, no hang.

``run_hostile`` starts the adapter under test (by default the SQLite adapter
on a fresh ``--db``; any command, e.g. ``--impl model``), prepares it through
the protocol with a real stream (``reset``, the value store, the cloud's first
snapshot, some deliveries: records and receipts to protect), then sends it
``frames`` hostile request lines, deterministic from ``seed``, in batches
between **state probes**. The lines are mutations of valid requests taken from
the stream (``stream.Cloud``) and of hand-made ones, in these categories:

* ``not-object`` (JSON that is not an object), ``request-keys`` (missing,
  extra, misspelt keys of a request), ``frame-keys`` (the same at every level of
  every frame and nested object), ``wrong-types`` (strings for counts, floats,
  booleans, 2**64, negative counts, nulls, objects and arrays, every field of
  every op), ``semantic`` (well-typed frames that break a frame rule:
  duplicates, order, bounds, tombstone and reference), ``ids`` (missing,
  float, string, bool, null, array and object ids, on requests that would
  otherwise change the state), ``unknown-op``, ``deep-nesting``,
  ``long-strings``, ``megabyte`` lines, ``utf8`` (bytes that are not UTF-8),
  ``surrogates`` (lone surrogate escapes), ``nan-infinity``,
  ``duplicate-keys``, ``empty-lines``, ``crlf`` (hostile lines ended by CR LF),
  ``control-characters`` (raw control characters inside strings),
  ``truncated`` (cut and split lines), ``trailing-data`` (a valid request that
  changes the state, then more bytes or a second request on the same line),
  ``number-forms`` (ids written ``1e2``, ``100.0``, ``-0``), ``nested-hostile`` (a malformed page or
  delivery whose ``duringFetch`` holds hostile requests and valid
  state-changing ones: none may run), and ``nested-run`` (a valid delivery of
  the next sequence whose ``duringFetch`` holds hostile requests: they run
  inside the value-store read and each must be rejected there).

What is checked, for every hostile line:

* exactly one response line, within ``timeout`` seconds, a JSON object with
  no keys but ``id``, ``ok``, ``error`` and ``nested``; no line left over at
  the end;
* ``"ok": false`` with an ``error`` whose ``type`` is what section 5 fixes
  (``unsupported`` for a string ``op`` the adapter does not know, with an
  integer id; ``invalid`` for a known op with a key the table does not list
  or any malformed field, and for a request without an integer id) and whose
  ``message`` is a non-empty string;
* ``id`` echoed when the request had an integer ``id``, ``null`` otherwise;
* no planted secret in the response: misplaced fields (extra and misspelt
  keys at every level, key names that do not look like field names, ``raw``,
  ``masterKeyHex``, a request that is not an object) carry a recognisable
  string that must never come back;
* ``nested``, if present on a rejected request, is empty: a malformed request
  runs none of its nested requests;
* the state is unchanged: ``status``, ``receipts`` and ``snapshot`` of the
  cloud's projects are the same after each batch as before it. After a
  ``nested-run`` delivery, the subject's state and answer must equal those of
  a **twin** adapter (the same command) given the same delivery without its
  ``duringFetch``;
* no crash, no hang: the process answers to the end, and exits 0 on end of
  input.

Where section 5 is silent, more than one answer is accepted and the report
counts what the adapter did (``HostileReport.silent``): an unknown op without
an integer id (``invalid`` or ``unsupported``), a missing or non-string
``op`` (either), nesting deeper than a JSON parser may accept, ``NaN`` /
``Infinity``, bytes that are not UTF-8, a byte-order mark, raw control
characters in strings (``id`` null, or echoed by a lenient parser), an id
written with an exponent or a fraction (``1e2``: null, or 100 where JSON
numbers are not typed), and duplicate keys (the first or the last value may win; both readings of each
generated line are hostile).

Leaves out on purpose: valid requests (the lockstep compares them with the
model), values that are legal but unusual (``raw`` may hold any string),
slow writers (a line arrives whole), and the value store's own state beyond
what a later ``nested-run`` delivery reads through it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import queue
import random
import re
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from envreplica.reliability.scratch import scratch_directory
from envreplica.reliability.stream import Cloud, StreamShape

__all__ = ["HostileReport", "HostileFailure", "Case", "CATEGORIES", "DEFAULT_COMMAND", "SECTION5_OPS", "generate",
           "run_hostile"]

#: The adapter under test by default; ``{db}`` is replaced by a fresh replica path.
DEFAULT_COMMAND = (sys.executable, "-m", "envreplica.conformance.adapter", "--impl", "sqlite", "--test-key",
                   "--db", "{db}")

#: Section 5's op table: op -> (required fields, optional fields), beside ``id`` and ``op``. Written from
#: docs/protocol.md, not imported from ``conformance.drivers``: the harness holds an adapter to the
#: contract, so it must not share the reference adapter's reading of it.
SECTION5_OPS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    "reset": ((), ("config",)),
    "store.put": (("projectId", "key", "ref", "raw"), ("reportedVersion",)),
    "store.fail": (("projectId", "key", "ref", "mode"), ()),
    "store.off": ((), ()),
    "begin": (("frame", "keptPolicyEpochs", "orgId"), ()),
    "page": (("frame",), ("duringFetch",)),
    "delivery": (("frame",), ("duringFetch",)),
    "commit": (("frame",), ()),
    "close": ((), ()),
    "status": ((), ()),
    "snapshot": (("projectIds",), ()),
    "receipts": ((), ()),
    "restart": ((), ()),
})

_RESPONSE_KEYS = frozenset({"id", "ok", "error", "nested"})
_PREPARED_DELIVERIES = 20  # deliveries applied before the hostile lines: receipts to protect


class HostileFailure(AssertionError):
    """The adapter answered a hostile line wrongly, changed its state, crashed or hung."""


# ---------------------------------------------------------------------------
# Cases: one hostile line and what its answer must be.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One hostile request line and the answers section 5 allows for it."""

    category: str
    line: bytes  # without the final newline (it may end in CR)
    ids: frozenset  # acceptable response ids (None for null)
    types: frozenset  # acceptable error types
    note: str  # what was done to it, for failure messages
    secrets: tuple[str, ...] = ()  # strings planted in misplaced fields: never to come back
    silent: Optional[str] = None  # the place section 5 is silent about, when it is one
    inner: tuple["Case", ...] = ()  # nested-run: the hostile requests inside a valid delivery


def _no_integer_id(request: Any) -> bool:
    return not (isinstance(request, dict) and type(request.get("id")) is int)


def _expected(request: Any) -> tuple[frozenset, frozenset, Optional[str]]:
    """Section 5's answer to a decoded request the generator made malformed: (ids, error types, silence)."""
    if type(request) is not dict:
        return frozenset({None}), frozenset({"invalid"}), None
    op = request.get("op")
    if _no_integer_id(request):
        if isinstance(op, str) and op not in SECTION5_OPS:
            return frozenset({None}), frozenset({"invalid", "unsupported"}), "unknown op without an integer id"
        return frozenset({None}), frozenset({"invalid"}), None
    ids = frozenset({request["id"]})
    if "op" not in request:
        return ids, frozenset({"invalid", "unsupported"}), "no op"
    if not isinstance(op, str):
        return ids, frozenset({"invalid", "unsupported"}), "op that is not a string"
    if op not in SECTION5_OPS:
        return ids, frozenset({"unsupported"}), None
    return ids, frozenset({"invalid"}), None


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _value_case(category: str, request: Any, note: str, secrets: Sequence[str] = ()) -> Case:
    """A case whose line is the JSON of ``request``; its answer follows from ``expected``."""
    ids, types, silent = _expected(request)
    return Case(category, _dump(request), ids, types, note, tuple(secrets), silent)


# ---------------------------------------------------------------------------
# The request shapes of sections 1, 2 and 5, to mutate valid requests field by field.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    kind: str  # a key of _BAD
    nullable: bool = False


@dataclass(frozen=True)
class _Obj:
    required: tuple[tuple[str, Any], ...]
    optional: tuple[tuple[str, Any], ...] = ()
    nullable: bool = False

    def fields(self) -> dict:
        return dict(self.required + self.optional)


@dataclass(frozen=True)
class _Arr:
    item: Any


@dataclass(frozen=True)
class _Kinded:
    """An object whose ``kind`` picks its shape (ValueRef, Binding)."""

    variants: tuple[tuple[str, _Obj], ...]
    nullable: bool = False

    def shape(self, value: Any) -> Optional[_Obj]:
        by_kind: dict[Any, _Obj] = dict(self.variants)  # looked up by whatever JSON value "kind" holds
        return by_kind.get(value.get("kind")) if isinstance(value, dict) else None


_ID, _SEGMENT, _KEY, _COUNT, _COUNT1, _BOOL = (_Leaf("Id"), _Leaf("Segment"), _Leaf("Key"), _Leaf("Count"),
                                               _Leaf("Count>=1"), _Leaf("bool"))
_CONST = _Leaf("const")
_VARIANTS = (("staged", _Obj((("kind", _CONST), ("stagingId", _Leaf("StagingId"))))),
             ("legacy", _Obj((("kind", _CONST), ("ssmVersion", _COUNT1)))))
_REF = _Kinded(_VARIANTS)
_HEAD = _Obj((("revision", _COUNT), ("generation", _COUNT), ("tombstone", _BOOL),
              ("valueRef", _Kinded(_VARIANTS, nullable=True))))
_BINDING = _Kinded((("omit", _Obj((("kind", _CONST),))),
                    ("withhold", _Obj((("kind", _CONST), ("reason", _Leaf("Reason")))))), nullable=True)
_STATE = _Obj((("key", _KEY), ("head", _HEAD), ("binding", _BINDING),
               ("policyEpoch", _Leaf("Count", nullable=True)), ("listingGeneration", _COUNT)))
_NESTED = _Leaf("requests")  # duringFetch: its items are whole requests, never mutated in place
_SCHEMAS: Mapping[str, _Obj] = MappingProxyType({
    "reset": _Obj((), (("config", _Obj((), (("ackPageBytes", _COUNT), ("masterKeyHex", _Leaf("masterKeyHex")),
                                             ("prefix", _Leaf("string"))), nullable=True)),)),
    "store.put": _Obj((("projectId", _SEGMENT), ("key", _KEY), ("ref", _REF), ("raw", _Leaf("string"))),
                      (("reportedVersion", _COUNT),)),
    "store.fail": _Obj((("projectId", _SEGMENT), ("key", _KEY), ("ref", _REF), ("mode", _Leaf("mode")))),
    "store.off": _Obj(()),
    "begin": _Obj((("frame", _Obj((("attempt", _Obj((("streamId", _ID), ("attemptId", _ID)))),
                                   ("projectIds", _Arr(_SEGMENT))))),
                   ("keptPolicyEpochs", _Arr(_COUNT)), ("orgId", _SEGMENT))),
    "page": _Obj((("frame", _Obj((("opId", _ID), ("attemptId", _ID), ("projectId", _SEGMENT),
                                  ("after", _Leaf("Key", nullable=True)), ("recordVersion", _COUNT),
                                  ("records", _Arr(_STATE)), ("complete", _BOOL)))),),
                 (("duringFetch", _NESTED),)),
    "delivery": _Obj((("frame", _Obj((("kind", _CONST), ("opId", _ID), ("projectId", _SEGMENT),
                                      ("recordVersion", _COUNT1), ("state", _STATE),
                                      ("delivery", _Obj((("streamId", _ID), ("sequence", _COUNT1))))),
                                     (("reconciliationAttemptId", _ID),))),),
                     (("duringFetch", _NESTED),)),
    "commit": _Obj((("frame", _Obj((("attemptId", _ID),
                                    ("highWater", _Obj((("streamId", _ID), ("sequence", _COUNT)))),
                                    ("versions", _Arr(_Obj((("projectId", _SEGMENT),
                                                            ("recordVersion", _COUNT)))))))),)),
    "close": _Obj(()),
    "status": _Obj(()),
    "snapshot": _Obj((("projectIds", _Arr(_SEGMENT)),)),
    "receipts": _Obj(()),
    "restart": _Obj(()),
})

_NOT_STRINGS: tuple[object, ...] = (7, 7.5, True, None, [], {}, ["x"], {"a": 1})
_BAD_COUNTS: tuple[object, ...] = ("1", "", 1.0, 1.5, True, False, None, -1, 2**53, 2**64, -2**64, [], {}, [1])
#: Values each leaf kind must refuse (section 1). ``None`` is skipped where the field is nullable.
_BAD: Mapping[str, tuple] = MappingProxyType({
    "Id": _NOT_STRINGS + ("", " ", "x y", "x/y", "-x", "x" * 129, "\u00e9", "x\ud800", "x\n"),
    "Segment": _NOT_STRINGS + ("", "x:y", "x/y", "x" * 65, "x y", "\ud800"),
    "Key": _NOT_STRINGS + ("", "1x", "x-y", "x.y", "x" * 129, "\udfff"),
    "Reason": _NOT_STRINGS + ("", "Upper", "x-y", "1x"),
    "StagingId": _NOT_STRINGS + ("", "E3E70682-C209-4CAC-629F-6FBED82C07CD", "not-a-uuid",
                                 "e3e70682c2094cac629f6fbed82c07cd"),
    "Count": _BAD_COUNTS,
    "Count>=1": _BAD_COUNTS + (0,),
    "bool": (0, 1, "true", "", None, [], {}),
    "string": (1, 1.5, True, None, [], {}, ["x"]),
    "mode": ("", "MISSING", "sometimes", 1, None, True),
    "masterKeyHex": ("", "0" * 63, "g" * 64, "0" * 65, 1, None, []),
    "const": ("", "X", 1, None, True, [], {}),
    "requests": ({}, "x", 1, None, True),
})
_BAD_OBJECTS: tuple[object, ...] = ([], "x", 1, 1.5, True, None, [{}])
_BAD_ARRAYS: tuple[object, ...] = ({}, "x", 1, True, None)


def _sites(value: Any, schema: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any, Any]]:
    """(path, schema, value) of every field of ``value``, itself first."""
    yield path, schema, value
    shape = schema.shape(value) if isinstance(schema, _Kinded) else schema
    if isinstance(shape, _Obj) and isinstance(value, dict):
        for name, sub in shape.fields().items():
            if name in value:
                yield from _sites(value[name], sub, path + (name,))
    elif isinstance(shape, _Arr) and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _sites(item, shape.item, path + (i,))


def _object_sites(request: dict) -> list[tuple[tuple, _Obj, dict]]:
    """(path, object shape, value) of every object in a request, the request itself first."""
    out = []
    for path, schema, value in _sites(request, _SCHEMAS[request["op"]]):
        shape = schema.shape(value) if isinstance(schema, _Kinded) else schema
        if isinstance(shape, _Obj) and isinstance(value, dict):
            out.append((path, shape, value))
    return out


def _at(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def _replaced(request: dict, path: tuple, new: Any) -> dict:
    out = copy.deepcopy(request)
    _at(out, path[:-1])[path[-1]] = new
    return out


def _bad_values(schema: Any) -> tuple:
    if isinstance(schema, _Leaf):
        values = _BAD[schema.kind]
    elif isinstance(schema, _Arr):
        values = _BAD_ARRAYS
    else:
        values = _BAD_OBJECTS
    nullable = getattr(schema, "nullable", False)
    return tuple(v for v in values if not (nullable and v is None))


def _path_text(path: tuple) -> str:
    return "request" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


# ---------------------------------------------------------------------------
# The generator.
# ---------------------------------------------------------------------------

_MISSPELL = (str.lower, str.upper, lambda k: k[:1].swapcase() + k[1:], lambda k: k + "s", lambda k: k + " ",
             lambda k: "_" + k, lambda k: k.replace("Id", "ID"), lambda k: k + "\u200b", lambda k: k + "\x00",
             lambda k: k.replace("e", "\u0435", 1))  # the last: a Cyrillic e
_EXTRA_NAMES = ("extra", "Id", "ID", "OP", "__proto__", "constructor", "", " ", "frame", "config", "duringFetch",
                "kind", "opId", "value", "nested", "result", "x" * 300)
_UNKNOWN_OPS = ("STATUS", "Status", "status ", " status", "stat", "", "store", "store.get", "store.put2",
                "snapshot.all", "delete", "resetAll", "ping", "\u00e9tat", "status\u0000", "close\n", "op" * 5000)


class _Generator:
    """Hostile cases, deterministic from the seed, built from the cloud's valid requests and hand-made ones."""

    def __init__(self, cloud: Cloud, seed: int, first_free_sequence: int) -> None:
        self.cloud = cloud
        self.rng = random.Random(f"hostile:{seed}")
        self._seed = seed
        self._secrets = 0
        self._ids = 1_000_000
        self._next_sequence = first_free_sequence
        self._pool = self._valid_pool()

    # -- material ------------------------------------------------------------

    def _valid_pool(self) -> list[dict]:
        """Valid requests of every op: from the stream, and hand-made for what the stream never sends."""
        cloud = self.cloud
        puts = cloud.store_requests()
        put = puts[0]
        snapshot = cloud.snapshot("h1", 5)
        pool = [puts[i] for i in range(0, len(puts), max(1, len(puts) // 8))]
        pool += snapshot
        pool += [cloud.delivery(n) for n in range(1, cloud.shape.deliveries + 1, max(1, cloud.shape.deliveries // 10))]
        tagged = copy.deepcopy(cloud.delivery(3))
        tagged["frame"]["reconciliationAttemptId"] = "h1"
        tagged["duringFetch"] = []
        page = copy.deepcopy(snapshot[1])
        page["duringFetch"] = []
        pool += [tagged, page, {**put, "ref": {"kind": "legacy", "ssmVersion": 2}, "key": "K000", "reportedVersion": 3},
                 {"op": "store.fail", "projectId": put["projectId"], "key": put["key"], "ref": put["ref"],
                  "mode": "missing"},
                 {"op": "snapshot", "projectIds": list(cloud.projects)},
                 {"op": "reset", "config": {"ackPageBytes": 262144, "masterKeyHex": "ab" * 32, "prefix": "/p"}}]
        pool += [{"op": op} for op in ("store.off", "close", "status", "receipts", "restart", "reset")]
        return pool

    def secret(self) -> str:
        self._secrets += 1
        return f"S3CR3T-{self._seed}-{self._secrets:06d}-{self.rng.getrandbits(32):08x}"

    def fresh_id(self) -> int:
        self._ids += 1
        return self._ids

    def valid(self, ops: Optional[Sequence[str]] = None) -> dict:
        """A copy of a valid request from the pool (of one of ``ops``), with a fresh integer id."""
        pool = self._pool if ops is None else [r for r in self._pool if r["op"] in ops]
        return {"id": self.fresh_id(), **copy.deepcopy(self.rng.choice(pool))}

    def misplaced(self) -> tuple[Any, str]:
        """A value to put under a key that does not belong, with the secret it carries."""
        secret = self.secret()
        return self.rng.choice([secret, [secret], {"v": secret}, f"prefix {secret} suffix", secret * 3]), secret

    # -- key mutations (request-keys, frame-keys) ---------------------------

    def _key_mutation(self, request: dict, path: tuple, shape: _Obj, obj: dict) -> tuple[dict, str, list]:
        allowed = set(shape.fields()) | ({"id", "op"} if path == () else set())
        if path == ():
            allowed |= set(sum(SECTION5_OPS[request["op"]], ()))
        required = [k for k, _ in shape.required if k in obj]
        moves = ["extra"] + (["drop", "misspell"] if required else [])
        move = self.rng.choice(moves)
        out = copy.deepcopy(request)
        target = _at(out, path)
        where = _path_text(path)
        if move == "drop":
            key = self.rng.choice(required)
            del target[key]
            return out, f"{where}: required key {key!r} removed", []
        if move == "misspell":
            key = self.rng.choice(required)
            names = [f(key) for f in _MISSPELL if f(key) not in allowed and f(key) != key]
            name = self.rng.choice(names)
            value, secret = self.misplaced()
            target.pop(key)
            target[name] = value if self.rng.random() < 0.7 else obj[key]
            secrets = [secret] if target[name] is value else []
            return out, f"{where}: key {key!r} misspelt {name!r}", secrets
        names = [n for n in _EXTRA_NAMES if n not in allowed]
        value, secret = self.misplaced()
        name = self.rng.choice(names + [self.secret() + "-as-a-key"])
        target[name] = value
        secrets = [secret] + ([name] if name.startswith("S3CR3T") else [])
        return out, f"{where}: extra key {name[:40]!r}", secrets

    def request_keys(self) -> Case:
        request = self.valid()
        mutated, note, secrets = self._key_mutation(request, (), _SCHEMAS[request["op"]], request)
        return _value_case("request-keys", mutated, note, secrets)

    def valid_where(self, has: Callable[[dict], bool]) -> dict:
        """A valid request from the pool for which ``has`` holds (drawn again until one does)."""
        while True:
            request = self.valid()
            if has(request):
                return request

    def frame_keys(self) -> Case:
        request = self.valid_where(lambda r: len(_object_sites(r)) > 1)
        path, shape, obj = self.rng.choice(_object_sites(request)[1:])
        mutated, note, secrets = self._key_mutation(request, path, shape, obj)
        return _value_case("frame-keys", mutated, note, secrets)

    # -- values ----------------------------------------------------------------

    def wrong_types(self) -> Case:
        request = self.valid_where(lambda r: len(r) > 2)
        path, schema, _ = self.rng.choice(list(_sites(request, _SCHEMAS[request["op"]]))[1:])
        bad = self.rng.choice(_bad_values(schema))
        return _value_case("wrong-types", _replaced(request, path, bad), f"{_path_text(path)} = {bad!r:.60}")

    def semantic(self) -> Case:
        request, note = self.rng.choice(_SEMANTIC)(self)
        return _value_case("semantic", request, note)

    def ids(self) -> Case:
        request = self.valid()
        bad = self.rng.choice(["absent", None, 1.0, 1.5, -0.0, 1e300, "1", "", True, False, [1], {"id": 1}])
        if bad == "absent":
            del request["id"]
        else:
            request["id"] = bad
        return _value_case("ids", request, f"id {bad!r} on a valid {request['op']}")

    def unknown_op(self) -> Case:
        """An op this adapter cannot know; now and then no op, an op that is not a string, or no integer id."""
        request = self.valid()
        variant = self.rng.choice(["unknown"] * 4 + ["absent", "not a string", "unknown, no integer id"])
        if variant == "absent":
            del request["op"]
        elif variant == "not a string":
            request["op"] = self.rng.choice([1, 1.5, None, True, [], ["status"], {"op": "status"}])
        else:
            request["op"] = self.rng.choice(_UNKNOWN_OPS + (self.secret().lower(),))
        if variant == "unknown, no integer id":
            request["id"] = self.rng.choice(["7", None, 7.0, False])
        elif self.rng.random() < 0.3:  # odd but integer ids must still be echoed
            request["id"] = self.rng.choice([0, -1, -2**63, 2**64, 10**30])
        shown = repr(request.get("op", "<absent>"))[:40]
        return _value_case("unknown-op", request, f"{variant} op {shown}, id {request['id']!r:.30}")

    def not_object(self) -> Case:
        secret = self.secret()
        value: object = self.rng.choice([secret, [secret], 7, 7.5, True, False, None, [], {}, [{"id": 1, "op": "status"}],
                                 [self.valid()], "{\"id\": 1, \"op\": \"status\"}"])
        secrets = [secret] if value == secret or value == [secret] else []
        return _value_case("not-object", value, f"a JSON {type(value).__name__}", secrets)

    def long_strings(self) -> Case:
        size = self.rng.choice([1_000, 10_000, 100_000, 300_000])
        request = self.valid()
        where = self.rng.choice(["op", "extra value", "extra key", "field"])
        secret = self.secret()
        text = (secret + "x" * size)[:size]
        secrets = [secret]
        if where == "op":
            request["op"] = text.lower()
            secrets = []
        elif where == "extra value":
            request["extra"] = text
        elif where == "extra key":
            request[text + "-"] = 1
        else:
            leaves = [(p, s) for p, s, _ in _sites(request, _SCHEMAS[request["op"]])
                      if isinstance(s, _Leaf) and s.kind in ("Id", "Segment", "Key", "StagingId", "Reason")]
            if not leaves:
                request["extra"] = text
            else:
                path, _ = self.rng.choice(leaves)
                request = _replaced(request, path, "y" * size)
                secrets = []
        return _value_case("long-strings", request, f"{size} characters in the {where}", secrets)

    def megabyte(self) -> Case:
        secret = self.secret()
        big = (secret + "m" * (1 << 20))[: 1 << 20]
        kind = self.rng.choice(["raw", "extra", "records", "key"])
        if kind == "raw":  # a 1 MB raw value: store.put is malformed elsewhere, and raw is never echoed
            request = {**self.valid(["store.put"]), "raw": big, "projectId": "bad/project"}
        elif kind == "extra":
            request = {**self.valid(), "padding": big}
        elif kind == "records":
            request = self.valid(["page"])
            records = request["frame"]["records"] or [self.cloud.delivery(1)["frame"]["state"]]
            request["frame"]["records"] = records[:1] * 5000  # over the 1000-record bound, and not ascending
            secret = ""
        else:
            request = {**self.valid(), big: 1}
        return _value_case("megabyte", request, f"a megabyte line ({kind})", [secret] if secret else [])

    def surrogates(self) -> Case:
        lone = self.rng.choice(["\ud800", "\udbff", "\udc00", "\udfff", "\udc00\ud800", "x\ud83d"])
        request = self.valid()
        where = self.rng.choice(["op", "extra key", "extra value", "field"])
        if where == "op":
            request["op"] = "status" + lone
        elif where == "extra key":
            request["k" + lone] = 1
        elif where == "extra value":
            request["extra"] = "v" + lone
        else:
            leaves = [p for p, s, _ in _sites(request, _SCHEMAS[request["op"]])
                      if isinstance(s, _Leaf) and s.kind in ("Id", "Segment", "Key", "StagingId", "Reason", "const")]
            if leaves:
                path = self.rng.choice(leaves)
                request = _replaced(request, path, str(_at(request, path)) + lone)
            else:
                request["extra"] = lone
        return _value_case("surrogates", request, f"lone surrogate {lone!r} in the {where}")

    # -- raw lines -------------------------------------------------------------

    def _hostile_text(self) -> tuple[bytes, Any, Case]:
        """A value-level hostile request (keys or types), as text, with its case."""
        case = self.rng.choice([self.request_keys, self.frame_keys, self.wrong_types])()
        return case.line, json.loads(case.line), case

    def deep_nesting(self) -> Case:
        depth = self.rng.choice([32, 256, 900, 5000, 100_000])
        opener, closer = self.rng.choice([("[", "]"), ('{"a":', "}")])
        deep = (opener * depth + "1" + closer * depth).encode()
        rid = self.fresh_id()
        where = self.rng.choice(["frame", "extra", "line"])
        if where == "line":
            return Case("deep-nesting", deep, frozenset({None}), frozenset({"invalid"}), f"depth {depth} as the line")
        op = "page" if where == "frame" else "status"
        key = "frame" if where == "frame" else "extra"
        line = b'{"id":%d,"op":"%s","%s":' % (rid, op.encode(), key.encode()) + deep + b"}"
        ids = frozenset({rid}) if depth < 500 else frozenset({rid, None})
        silent = None if depth < 500 else f"nesting {depth} deep (a parser's depth limit)"
        return Case("deep-nesting", line, ids, frozenset({"invalid"}), f"depth {depth} in the {where}",
                    silent=silent)

    def utf8(self) -> Case:
        """Bytes that are not UTF-8 (in a value, a key, or alone), or a byte-order mark before a hostile line."""
        bad = self.rng.choice([b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\x80", b"\xe2\x82", b"\xed\xa0\x80",
                               b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80"])
        rid = self.fresh_id()
        where = self.rng.choice(["value", "key", "line", "byte-order mark"])
        if where == "line":
            return Case("utf8", bad * 3, frozenset({None}), frozenset({"invalid"}), f"{bad!r} alone")
        if where == "byte-order mark":
            line, request, base = self._hostile_text()
            ids = frozenset({None}) | _expected(request)[0]
            return Case("utf8", b"\xef\xbb\xbf" + line, ids, frozenset({"invalid"}), f"a BOM before: {base.note}",
                        base.secrets, "a byte-order mark before the line")
        inner = b'"extra":"x%sy"' % bad if where == "value" else b'"k%s":1' % bad
        line = b'{"id":%d,"op":"status",%s}' % (rid, inner)
        return Case("utf8", line, frozenset({None, rid}), frozenset({"invalid"}), f"{bad!r} in a {where}",
                    silent="a line that is not UTF-8")

    def nan_infinity(self) -> Case:
        constant = self.rng.choice(["NaN", "Infinity", "-Infinity"])
        request = self.valid()
        rid = request["id"]
        text = _dump(request).decode()
        where = self.rng.choice(["id", "extra", "count"])
        count = re.search(r'"(recordVersion|sequence|revision|ackPageBytes)":\d+', text)
        if where == "id":
            text = text.replace(f'"id":{rid}', f'"id":{constant}', 1)
        elif where == "count" and count:
            text = text[:count.start()] + f'"{count.group(1)}":{constant}' + text[count.end():]
        else:
            where, text = "extra", text[:-1] + f',"extra":{constant}}}'
        ids = frozenset({None}) if where == "id" else frozenset({None, rid})
        return Case("nan-infinity", text.encode(), ids, frozenset({"invalid"}), f"{constant} in the {where}",
                    silent="NaN or Infinity")

    def duplicate_keys(self) -> Case:
        """A repeated key; both readings (the first value wins, the last wins) are hostile."""
        line, request, base = self._hostile_text()
        body = line.decode()[1:-1]
        choice = self.rng.choice(["id", "op", "same"])
        if choice == "id":
            first, text = {**request, "id": "first"}, '{"id":"first",' + body + "}"
        elif choice == "op":
            first, text = {**request, "op": "no.such.op"}, '{"op":"no.such.op",' + body + "}"
        else:
            key = self.rng.choice(list(request))
            first, text = request, "{" + body + "," + json.dumps(key) + ":" + _dump(request[key]).decode() + "}"
        readings = [_expected(first), _expected(request)]
        ids = frozenset().union(*(r[0] for r in readings))
        types = frozenset().union(*(r[1] for r in readings))
        return Case("duplicate-keys", text.encode(), ids, types, f"duplicate {choice!r} over: {base.note}",
                    base.secrets, "duplicate keys")

    def empty_lines(self) -> Case:
        line = self.rng.choice([b"", b" ", b"\t", b"\r", b"\r\r", b"\x00", b"\x0c", b"\x1b[0m", b"   \t  "])
        return Case("empty-lines", line, frozenset({None}), frozenset({"invalid"}), f"the line {line!r}")

    def crlf(self) -> Case:
        case = self.rng.choice([self.request_keys, self.wrong_types, self.unknown_op, self.ids])()
        return Case("crlf", case.line + b"\r", case.ids, case.types, f"CR LF after: {case.note}", case.secrets,
                    case.silent)

    def control_characters(self) -> Case:
        char = self.rng.choice(["\r", "\t", "\x00", "\x01", "\x0b", "\x1b", "\x1f"])
        rid = self.fresh_id()
        line = ('{"id":%d,"op":"status","extra":"a%sb"}' % (rid, char)).encode()
        return Case("control-characters", line, frozenset({None, rid}), frozenset({"invalid"}),
                    f"raw {char!r} inside a string", silent="a raw control character inside a string")

    def truncated(self) -> Case:
        text = _dump(self.valid())
        cut = self.rng.randrange(1, len(text))
        part = self.rng.choice(["head", "tail"])
        line = text[:cut] if part == "head" else text[cut:]  # an object cut anywhere is never JSON
        return Case("truncated", line, frozenset({None}), frozenset({"invalid"}),
                    f"the {part} of a line cut at byte {cut} of {len(text)}")

    def trailing_data(self) -> Case:
        """A valid request that changes the state, then more on the same line: no request at all."""
        text = _dump(self.valid(["close", "restart", "reset", "delivery", "begin", "store.off"]))
        tail = self.rng.choice([b" x", b"}", b"]", b",", b"\x00", b" //", b" null", b"{}",
                                _dump({"id": self.fresh_id(), "op": "close"})])
        return Case("trailing-data", text + tail, frozenset({None}), frozenset({"invalid"}),
                    f"{tail[:20]!r} after a valid request")

    def number_forms(self) -> Case:
        """An id written as a number that is not a plain integer literal, on a hostile request."""
        line, request, base = self._hostile_text()
        form, value = self.rng.choice([("1e2", 100), ("1E+2", 100), ("100.0", 100), ("1000e-1", 100),
                                       ("-0", 0), ("-0.0", 0), ("1e400", None)])
        text = line.decode().replace(f'"id":{request["id"]}', f'"id":{form}', 1)
        if form == "-0":  # an integer literal: it must be echoed as 0
            return Case("number-forms", text.encode(), frozenset({0}), base.types, f"id -0 over: {base.note}",
                        base.secrets)
        ids = frozenset({None}) | (frozenset({value}) if value is not None else frozenset())
        return Case("number-forms", text.encode(), ids, base.types, f"id {form} over: {base.note}", base.secrets,
                    "an id written with an exponent or a fraction")

    def nested_hostile(self) -> Case:
        """A malformed page or delivery carrying hostile and valid state-changing requests: none may run."""
        request = self.valid(["page", "delivery"])
        inner = [json.loads(self._hostile_text()[0]) for _ in range(self.rng.randint(0, 3))]
        changing = self.rng.sample(["close", "restart", "reset", "store.off"], self.rng.randint(1, 3))
        inner += [{"id": self.fresh_id(), "op": op} for op in changing]
        self.rng.shuffle(inner)
        request["duringFetch"] = inner
        path, schema, _ = self.rng.choice([s for s in _sites(request, _SCHEMAS[request["op"]])
                                           if s[0][:1] == ("frame",)])
        bad = self.rng.choice(_bad_values(schema))
        mutated = _replaced(request, path, bad)
        return _value_case("nested-hostile", mutated, f"{_path_text(path)} = {bad!r:.40} with {len(inner)} nested")

    def nested_run(self) -> Optional[Case]:
        """The next delivery of the stream, valid, whose duringFetch holds hostile requests."""
        if self._next_sequence > self.cloud.shape.deliveries:
            return None
        sequence = self._next_sequence
        self._next_sequence += 1
        inner = tuple(self.rng.choice([self.request_keys, self.frame_keys, self.wrong_types, self.ids,
                                       self.unknown_op, self.semantic, self.not_object])()
                      for _ in range(self.rng.randint(1, 4)))
        request = {"id": self.fresh_id(), **self.cloud.delivery(sequence),
                   "duringFetch": [json.loads(c.line) for c in inner]}
        return Case("nested-run", _dump(request), frozenset({request["id"]}), frozenset(),
                    f"delivery {sequence} with {len(inner)} hostile nested requests",
                    tuple(s for c in inner for s in c.secrets), inner=inner)


# -- semantic mutations: well-typed frames that break a frame rule --------------


def _semantic_begin(g: _Generator) -> tuple[dict, str]:
    request = g.valid(["begin"])
    projects = request["frame"]["projectIds"]
    choice = g.rng.choice(["duplicate", "too-many", "epochs-down", "epochs-equal", "epochs-many"])
    if choice == "duplicate":
        request["frame"]["projectIds"] = projects + projects[:1]
    elif choice == "too-many":
        request["frame"]["projectIds"] = [f"p{i}" for i in range(257)]
    elif choice == "epochs-down":
        request["keptPolicyEpochs"] = [2, 1]
    elif choice == "epochs-equal":
        request["keptPolicyEpochs"] = [1, 1]
    else:
        request["keptPolicyEpochs"] = list(range(65))
    return request, f"begin: {choice}"


def _semantic_page(g: _Generator) -> tuple[dict, str]:
    request = g.valid(["page"])
    frame = request["frame"]
    records = frame["records"] or [g.cloud.delivery(1)["frame"]["state"]]
    choice = g.rng.choice(["descending", "duplicate", "not-after", "too-many", "tombstone-ref", "ref-missing",
                           "ssm-zero", "withhold-no-reason", "omit-reason", "ref-kind"])
    first = copy.deepcopy(records[0])
    head = first["head"]
    if choice == "descending":
        second = {**copy.deepcopy(first), "key": "A" + first["key"]}
        frame["records"] = [first, second]
    elif choice == "duplicate":
        frame["records"] = [first, copy.deepcopy(first)]
    elif choice == "not-after":
        frame["after"], frame["records"] = first["key"], [first]
    elif choice == "too-many":
        frame["records"] = [{**copy.deepcopy(first), "key": f"K{i:05d}"} for i in range(1001)]
    elif choice == "tombstone-ref":
        head["tombstone"], head["valueRef"] = True, head["valueRef"] or {"kind": "legacy", "ssmVersion": 1}
        frame["records"] = [first]
    elif choice == "ref-missing":
        head["tombstone"], head["valueRef"] = False, None
        frame["records"] = [first]
    elif choice == "ssm-zero":
        head["tombstone"], head["valueRef"] = False, {"kind": "legacy", "ssmVersion": 0}
        frame["records"] = [first]
    elif choice == "withhold-no-reason":
        first["binding"] = {"kind": "withhold"}
        frame["records"] = [first]
    elif choice == "omit-reason":
        first["binding"] = {"kind": "omit", "reason": "x"}
        frame["records"] = [first]
    else:
        head["tombstone"], head["valueRef"] = False, {"kind": "inline", "stagingId": "0" * 8}
        frame["records"] = [first]
    if choice != "not-after":
        frame["after"] = None
    return request, f"page: {choice}"


def _semantic_delivery(g: _Generator) -> tuple[dict, str]:
    request = g.valid(["delivery"])
    frame = request["frame"]
    choice = g.rng.choice(["kind", "version-zero", "sequence-zero", "tombstone-ref", "ref-missing"])
    if choice == "kind":
        frame["kind"] = g.rng.choice(["env.replica.apply2", "env.replica.page", "ENV.REPLICA.APPLY"])
    elif choice == "version-zero":
        frame["recordVersion"] = 0
    elif choice == "sequence-zero":
        frame["delivery"]["sequence"] = 0
    elif choice == "tombstone-ref":
        head = frame["state"]["head"]
        head["tombstone"], head["valueRef"] = True, head["valueRef"] or {"kind": "legacy", "ssmVersion": 1}
    else:
        head = frame["state"]["head"]
        head["tombstone"], head["valueRef"] = False, None
    return request, f"delivery: {choice}"


def _semantic_commit(g: _Generator) -> tuple[dict, str]:
    request = g.valid(["commit"])
    versions = request["frame"]["versions"]
    choice = g.rng.choice(["descending", "duplicate"])
    request["frame"]["versions"] = list(reversed(versions)) if choice == "descending" and len(versions) > 1 \
        else versions + versions[:1]
    return request, f"commit: versions {choice}"


def _semantic_store(g: _Generator) -> tuple[dict, str]:
    """A staged ``store.put`` with ``reportedVersion`` (legacy only), or a ``store.fail`` of an unknown mode."""
    if g.rng.random() < 0.5:
        request = g.valid(["store.put"])
        return {**request, "ref": g.cloud.store_requests()[0]["ref"], "reportedVersion": 2}, \
            "store.put: reportedVersion with a staged ref"
    return {**g.valid(["store.fail"]), "mode": g.rng.choice(["sometimes", "Missing", "error "])}, \
        "store.fail: unknown mode"


_SEMANTIC: tuple[Callable[[_Generator], tuple[dict, str]], ...] = (
    _semantic_begin, _semantic_page, _semantic_delivery, _semantic_commit, _semantic_store)

#: Every category, with its share of the lines after the first round (which sends each once).
CATEGORIES: Mapping[str, float] = MappingProxyType({
    "not-object": 1.0, "request-keys": 2.0, "frame-keys": 3.0, "wrong-types": 3.0, "semantic": 1.5, "ids": 1.0,
    "unknown-op": 1.0, "deep-nesting": 0.5, "long-strings": 0.5, "megabyte": 0.02, "utf8": 0.7,
    "surrogates": 0.7, "nan-infinity": 0.5, "duplicate-keys": 0.7, "empty-lines": 0.5, "crlf": 0.7,
    "control-characters": 0.5, "truncated": 1.0, "trailing-data": 0.5, "number-forms": 0.5,
    "nested-hostile": 0.7, "nested-run": 0.3,
})


def _draws(rng: random.Random) -> Iterator[str]:
    """Category names: each once (shuffled), then drawn by weight, forever."""
    names = list(CATEGORIES)
    yield from rng.sample(names, len(names))
    weights = list(CATEGORIES.values())
    while True:
        yield rng.choices(names, weights=weights)[0]


def generate(frames: int, seed: int = 0, cloud: Optional[Cloud] = None,
             first_free_sequence: int = _PREPARED_DELIVERIES + 1) -> Iterator[Case]:
    """``frames`` hostile cases: every category once (shuffled), then drawn by ``CATEGORIES``' weights.

    ``nested-run`` cases take the cloud's deliveries from ``first_free_sequence`` on; when they run out,
    another category is drawn instead.
    """
    gen = _Generator(cloud or Cloud(StreamShape(deliveries=_PREPARED_DELIVERIES + 1 + frames // 50, seed=seed)),
                     seed, first_free_sequence)
    sent = 0
    for name in _draws(gen.rng):
        if sent == frames:
            return
        case = getattr(gen, name.replace("-", "_"))()
        if case is not None:  # None: no delivery left for a nested run
            sent += 1
            yield case


# ---------------------------------------------------------------------------
# The adapter process, line by line.
# ---------------------------------------------------------------------------

_EOF = object()


class _Gone(Exception):
    """The adapter exited, closed its output, or did not answer in time."""


class _Adapter:
    """One adapter process: raw request lines in, response lines out, every wait bounded by ``timeout``.

    A writer thread feeds standard input, so a process that stops reading
    cannot block the harness; a reader thread collects standard output.
    Standard error goes to a file, whose tail explains a failure.
    """

    def __init__(self, argv: Sequence[str], stderr_path: Path, timeout: float, tmpdir: Path,
                 start_timeout: float = 0.0) -> None:
        self.argv = list(argv)
        self.timeout = timeout
        self.start_timeout = max(timeout, start_timeout)  # the first answer's wait: a cold start is not a hang
        self._answered = False
        self.stderr_path = stderr_path
        tmpdir.mkdir(exist_ok=True)
        env = {**os.environ, "TMPDIR": str(tmpdir)}  # what it leaves there if killed goes with the run's directory
        with open(stderr_path, "wb") as stderr:
            try:  # buffered pipes: a raw pipe's readline() reads one byte per system call
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                             env=env)
            except OSError as error:
                raise HostileFailure(f"could not start the adapter {shlex.join(self.argv)}: {error}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None  # started with stdin=PIPE, stdout=PIPE
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self._outbox: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._lines: "queue.Queue[Any]" = queue.Queue()
        threading.Thread(target=self._write, name="hostile-stdin", daemon=True).start()
        threading.Thread(target=self._read, name="hostile-stdout", daemon=True).start()

    def _write(self) -> None:
        while True:
            data = self._outbox.get()
            try:
                if data is None:
                    self.stdin.close()
                    return
                self.stdin.write(data)
                self.stdin.flush()
            except (OSError, ValueError):
                return

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in iter(self.stdout.readline, b""):
                self._lines.put(line)
        self._lines.put(_EOF)

    def exchange(self, line: bytes) -> tuple[bytes, float]:
        """Send one line; (the one response line, seconds it took). ``_Gone`` when none comes."""
        if not self._lines.empty():
            extra = self._lines.get_nowait()
            if extra is _EOF:  # it ended before this request (whether it did before or after the last answer)
                raise _Gone(f"it closed its output before this request (exit status {self._status()}): a crash")
            raise _Gone("it wrote a line no request asked for: " + repr(extra[:200]))
        started = time.monotonic()
        self._outbox.put(line + b"\n")
        wait = self.timeout if self._answered else self.start_timeout
        try:
            answer = self._lines.get(timeout=wait)
        except queue.Empty:
            first = "" if self._answered else " to its first request (it may still be starting)"
            raise _Gone(f"no answer within {wait:g} s{first} (a hang)") from None
        if answer is _EOF:
            raise _Gone(f"it closed its output (exit status {self._status()}): a crash")
        self._answered = True
        return answer, time.monotonic() - started

    def _status(self):
        """The process's exit status, waiting up to the timeout for it ("none yet" after that)."""
        try:
            return self.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            return "none yet"

    def request(self, request: dict) -> dict:
        """A valid request (the harness's own: preparation and probes); its decoded response."""
        return json.loads(self.exchange(_dump(request))[0])

    def finish(self) -> tuple[Optional[int], list]:
        """End of input; (exit status or None if it did not exit in time, lines written after the last answer)."""
        self._outbox.put(None)
        try:
            status = self.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            return None, []
        extra = []
        with contextlib.suppress(queue.Empty):
            while (line := self._lines.get(timeout=self.timeout)) is not _EOF:
                extra.append(line)
        return status, extra

    def stop(self) -> None:
        """End of input, a second to exit cleanly, then kill; reaps the process either way."""
        self._outbox.put(None)
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError, ValueError):
                stream.close()

    def stderr_tail(self, lines: int = 10) -> str:
        text = self.stderr_path.read_text(encoding="utf-8", errors="replace") if self.stderr_path.exists() else ""
        tail = text.strip().splitlines()[-lines:]
        return ("\n  its standard error ends:\n    " + "\n    ".join(tail)) if tail else ""


# ---------------------------------------------------------------------------
# Checking one answer.
# ---------------------------------------------------------------------------


def _same_id(got: Any, allowed: frozenset) -> bool:
    """``got`` is one of ``allowed`` as JSON sees it (``true`` is not ``1``, ``1.0`` is not ``1``)."""
    return any(type(got) is type(want) and got == want for want in allowed)


def _shown(value: Any, limit: int = 300) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _answer_problems(case: Case, response: Any, raw: bytes) -> list[str]:
    """What is wrong with the answer to a hostile request (empty when it is right)."""
    if not isinstance(response, dict):
        return ["the response is not a JSON object"]
    problems = []
    extra = set(response) - _RESPONSE_KEYS
    if extra:
        problems.append(f"the response has keys section 5 does not define: {sorted(extra)}")
    if not _same_id(response.get("id"), case.ids):
        want = " or ".join("null" if i is None else str(i) for i in case.ids)
        problems.append(f"id {_shown(response.get('id'), 60)}, expected {want}")
    if response.get("ok") is not False:
        problems.append("it was accepted (ok is not false)")
        return problems
    error = response.get("error")
    if not isinstance(error, dict):
        return problems + ["no error object"]
    if error.get("type") not in case.types:
        problems.append(f"error type {error.get('type')!r}, expected {' or '.join(sorted(case.types))}")
    if not isinstance(error.get("message"), str) or not error["message"].strip():
        problems.append("the error message is not a non-empty string")
    nested = response.get("nested", [])
    if not isinstance(nested, list):
        problems.append("nested is not a list")
    elif nested:
        problems.append(f"it ran {len(nested)} nested requests of a request it rejected")
    return problems + _leaks(case, response, raw)


def _leaks(case: Case, response: Any, raw: bytes) -> list[str]:
    text = json.dumps(response, ensure_ascii=False)
    return [f"the response echoes the misplaced value {secret[:40]!r}..." for secret in case.secrets
            if secret and (secret.encode("utf-8", "surrogatepass") in raw or secret in text)]


class _Undecodable:
    """A response line that is not JSON."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return _Undecodable(raw)


# ---------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostileReport:
    """What one run sent and how the adapter answered."""

    frames: int  # hostile lines sent (each nested-run delivery counts once)
    by_category: Mapping[str, int]
    by_error_type: Mapping[str, int]  # error types of the answers to hostile lines, nested ones included
    nested_run: int  # hostile requests that ran inside a delivery's value-store read
    probes: int  # state fingerprints taken (status, receipts, snapshot each)
    silent: Mapping[str, Mapping[str, int]]  # where section 5 is silent: what the adapter answered, counted
    seconds: float
    max_latency: float  # the slowest answer to a hostile line, in seconds
    command: str

    def lines(self) -> list[str]:
        out = [f"hostile: {self.frames} hostile lines in {self.seconds:.1f} s, {self.probes} state probes, "
               f"slowest answer {self.max_latency * 1000:.0f} ms: {self.command}",
               "  by category: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_category.items())),
               "  answered: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_error_type.items())),
               f"  nested hostile requests that ran inside a value-store read: {self.nested_run}",
               "  where section 5 is silent, the adapter answered:"]
        for place, answers in sorted(self.silent.items()):
            out.append(f"    {place}: " + ", ".join(f"{k} {v}" for k, v in sorted(answers.items())))
        out.append("  held: one answer per line, ok false, the type section 5 fixes, id echoed or null, a message, "
                   "no planted value echoed, state unchanged, no crash, no hang, exit 0 at end of input")
        return out


@dataclass
class _Tally:
    """Counters of a run (mutable while it runs; the report freezes them)."""

    categories: Counter = field(default_factory=Counter)
    types: Counter = field(default_factory=Counter)
    silent: dict = field(default_factory=lambda: defaultdict(Counter))
    nested_run: int = 0
    probes: int = 0
    max_latency: float = 0.0  # over hostile lines only (not preparation, probes or twin)

    def answer(self, case: Case, response: dict) -> None:
        kind = response["error"]["type"]
        self.types[kind] += 1
        if case.silent:
            self.silent[case.silent][f"{kind}, id {'null' if response['id'] is None else 'echoed'}"] += 1


def _command(adapter_command: Union[str, Sequence[str], None], db: Path) -> list[str]:
    if isinstance(adapter_command, str):
        argv = shlex.split(adapter_command)
    else:
        argv = list(adapter_command or DEFAULT_COMMAND)
    return [arg.replace("{db}", str(db)) for arg in argv]


class _Run:
    """A subject adapter (every line) and its twin (only the valid ones), with the checks between them."""

    def __init__(self, subject: _Adapter, twin: _Adapter, cloud: Cloud, tally: _Tally) -> None:
        self.subject = subject
        self.twin = twin
        self.cloud = cloud
        self.tally = tally
        self._ids = 0
        self.sent = 0  # hostile lines so far

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    def failure(self, what: str, case: Optional[Case] = None, response: Any = None,
                adapter: Optional[_Adapter] = None) -> HostileFailure:
        """What went wrong, with the line, the answer, the command and the end of its standard error."""
        text = f"hostile line {self.sent}: {what}" if self.sent else f"before the first hostile line: {what}"
        if case is not None:
            text += f"\n  category {case.category}: {case.note}\n  line: {_shown(case.line)}"
        if response is not None:
            text += f"\n  answer: {_shown(response.raw if isinstance(response, _Undecodable) else response, 500)}"
        adapter = adapter or self.subject
        text += f"\n  adapter: {shlex.join(adapter.argv)}" + adapter.stderr_tail()
        return HostileFailure(text)

    def valid(self, adapter: _Adapter, request: dict, doing: str) -> dict:
        """A valid request of the harness's own; its response (``HostileFailure`` unless it succeeded)."""
        request = {"id": self._id(), **request}
        try:
            response = adapter.request(request)
        except (_Gone, ValueError) as error:
            raise self.failure(f"{doing}: {request['op']} got no usable answer: {error}", adapter=adapter) from None
        if not isinstance(response, dict) or response.get("ok") is not True:
            raise self.failure(f"{doing}: {request['op']} was not accepted: {_shown(response)}", adapter=adapter)
        result = response.get("result")
        if isinstance(result, dict) and result.get("ok") is False:
            raise self.failure(f"{doing}: {request['op']} was refused: {_shown(result)}", adapter=adapter)
        return response

    def prepare(self, adapter: _Adapter) -> None:
        """A fresh replica holding the cloud's first snapshot and some deliveries (records and receipts)."""
        self.valid(adapter, {"op": "reset"}, "preparing")
        for request in self.cloud.store_requests() + self.cloud.snapshot("prep", 0):
            self.valid(adapter, request, "preparing")
        for sequence in range(1, _PREPARED_DELIVERIES + 1):
            self.valid(adapter, self.cloud.delivery(sequence), "preparing")

    def fingerprint(self, adapter: _Adapter) -> str:
        """``status``, ``receipts`` and ``snapshot`` of the cloud's projects, as one canonical text."""
        self.tally.probes += 1
        results = [self.valid(adapter, request, "probing the state")["result"]
                   for request in ({"op": "status"}, {"op": "receipts"},
                                   {"op": "snapshot", "projectIds": list(self.cloud.projects)})]
        return json.dumps(results, sort_keys=True, ensure_ascii=True)

    def _exchange(self, case: Case) -> bytes:
        try:
            raw, seconds = self.subject.exchange(case.line)
        except _Gone as error:
            raise self.failure(str(error), case) from None
        self.tally.max_latency = max(self.tally.max_latency, seconds)
        return raw

    def hostile(self, case: Case) -> None:
        """Send one hostile line to the subject and check its answer."""
        self.sent += 1
        self.tally.categories[case.category] += 1
        raw = self._exchange(case)
        response = _decode(raw)
        problems = ["the response is not JSON"] if isinstance(response, _Undecodable) else \
            _answer_problems(case, response, raw)
        if problems:
            raise self.failure("; ".join(problems), case, response)
        self.tally.answer(case, response)

    def nested_run(self, case: Case) -> None:
        """A valid delivery with hostile nested requests: each rejected where it ran; the answer as the twin's."""
        self.sent += 1
        self.tally.categories[case.category] += 1
        raw = self._exchange(case)
        response = _decode(raw)
        plain = {k: v for k, v in json.loads(case.line).items() if k != "duringFetch"}
        twin = self.valid(self.twin, plain, "the twin's delivery")
        if not isinstance(response, dict) or response.get("ok") is not True or response.get("result") != twin["result"]:
            raise self.failure(f"the answer differs from the twin's (the same delivery without duringFetch): "
                               f"{_shown(twin)}", case, response)
        nested = response.get("nested", [])  # none ran when the delivery read no value
        if not isinstance(nested, list) or len(nested) not in (0, len(case.inner)):
            raise self.failure(f"nested should hold 0 or {len(case.inner)} answers", case, response)
        for inner, answer in zip(case.inner, nested):
            problems = _answer_problems(inner, answer, _dump(answer))
            if problems:
                raise self.failure(f"nested request ({inner.category}: {inner.note}): {'; '.join(problems)}",
                                   case, response)
            self.tally.answer(inner, answer)
        self.tally.nested_run += len(nested)
        leaks = _leaks(case, response, raw)
        if leaks:
            raise self.failure("; ".join(leaks), case, response)

    def finish(self, adapter: _Adapter) -> None:
        """End of input: the process must still be running, then exit 0 with nothing more written."""
        if adapter.proc.poll() is not None:
            raise self.failure(f"the adapter exited (status {adapter.proc.poll()}) before the end of input",
                               adapter=adapter)
        status, extra = adapter.finish()
        if status != 0:
            how = "did not exit" if status is None else f"exited with status {status}"
            raise self.failure(f"at the end of input the adapter {how}", adapter=adapter)
        if extra:
            raise self.failure(f"it wrote {len(extra)} lines more than it was asked for: {_shown(extra[0])}",
                               adapter=adapter)


def _batches(cases: Iterator[Case], size: int) -> Iterator[list[Case]]:
    """Hostile cases in batches of ``size``; a nested-run case always alone."""
    batch: list[Case] = []
    for case in cases:
        if case.inner:
            if batch:
                yield batch
                batch = []
            yield [case]
        else:
            batch.append(case)
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def _drive(run: _Run, cases: Iterator[Case], batch: int) -> None:
    run.prepare(run.subject)
    run.prepare(run.twin)
    before = run.fingerprint(run.subject)
    if before != run.fingerprint(run.twin):
        raise run.failure("after the same preparation, the subject and its twin hold different states")
    for group in _batches(cases, batch):
        if group[0].inner:
            run.nested_run(group[0])
            after = run.fingerprint(run.subject)
            if after != run.fingerprint(run.twin):
                raise run.failure("after the delivery, the state differs from the twin's (a nested request acted)",
                                  group[0])
        else:
            for case in group:
                run.hostile(case)
            after = run.fingerprint(run.subject)
            if after != before:
                notes = "; ".join(f"[{c.category}] {c.note}" for c in group)
                raise run.failure(f"the state changed across the last {len(group)} lines: {notes}", group[-1])
        before = after
    run.finish(run.subject)
    run.finish(run.twin)


def run_hostile(frames: int, seed: int = 0, workdir: Union[str, Path, None] = None,
                adapter_command: Union[str, Sequence[str], None] = None, *, batch: int = 8,
                timeout: float = 10.0, start_timeout: float = 120.0) -> HostileReport:
    """Send ``frames`` hostile lines to the adapter; the report, or ``HostileFailure`` at the first wrong answer.

    ``adapter_command`` (default ``DEFAULT_COMMAND``) is a string or an argument
    list; ``{db}`` in it becomes a fresh replica path (the subject's and its
    twin's differ: the two run at once, so a command must not name one fixed
    ``--db``). ``batch`` hostile lines go between two state probes;
    ``timeout`` bounds every answer but each process's first, which
    ``start_timeout`` bounds (an adapter starting on a busy machine is not
    hanging). ``workdir`` keeps the replicas and the
    adapters' standard error there (default: a temporary directory, removed).
    """
    if frames < len(CATEGORIES):
        raise ValueError(f"run_hostile needs at least {len(CATEGORIES)} frames (one of each category)")
    started = time.monotonic()
    cloud = Cloud(StreamShape(deliveries=_PREPARED_DELIVERIES + 1 + frames // 50, seed=seed))
    tally = _Tally()
    with scratch_directory(workdir, "envreplica-hostile-") as root:
        subject = twin = None
        try:
            subject = _Adapter(_command(adapter_command, root / "subject.db"), root / "subject.stderr", timeout,
                               root / "tmp", start_timeout)
            twin = _Adapter(_command(adapter_command, root / "twin.db"), root / "twin.stderr", timeout, root / "tmp",
                            start_timeout)
            _drive(_Run(subject, twin, cloud, tally), generate(frames, seed, cloud), batch)
        finally:
            for adapter in (subject, twin):
                if adapter is not None:
                    adapter.stop()
        return HostileReport(
            frames=sum(tally.categories.values()),
            by_category=MappingProxyType(dict(tally.categories)),
            by_error_type=MappingProxyType(dict(tally.types)),
            nested_run=tally.nested_run,
            probes=tally.probes,
            silent=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in tally.silent.items()}),
            seconds=time.monotonic() - started,
            max_latency=tally.max_latency,
            command=shlex.join(subject.argv),
        )
