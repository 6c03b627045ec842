"""The JSON wire: parsing frames into ``spec.domain`` values, and encoding them back.

Models: the JSON shapes and validation rules of ``docs/protocol.md`` sections
1-3. ``parse_*`` turns JSON-decoded Python values (``dict``, ``list``, ``str``,
``int``, ``bool``, ``None``, as ``json.loads`` returns them) into the typed
values of ``spec.domain``, enforcing every rule of section 1 (the regexes of
``Id``, ``Segment``, ``Key``, ``Reason`` and ``StagingId``; ``Count``;
``PolicyEpochs``; exact objects; ``tombstone <=> valueRef is null``;
``ssmVersion >= 1``) and section 2 (unique, bounded begin projects; strictly
ascending, bounded page keys above ``after``; the apply ``kind``, its
``recordVersion >= 1`` and ``delivery.sequence >= 1``; the optional
``reconciliationAttemptId``; commit versions strictly ascending by
``projectId``). Every failure is one ``InvalidFrame`` whose message names the
field path, the rule, the offending value and the fix, e.g.::

    invalid page: page.records[1].head.revision must be a Count (a JSON integer
    0..2^53-1, not a boolean or float); got True. Send an integer.

``encode`` turns any value of ``spec.domain`` (frames, records, results, reads,
errors) into its JSON shape (section 3 for results), with one dispatch table.
``canonical_json`` is the seed's ``exactJson`` (sorted keys, no whitespace:
what the receipt MAC covers and what the seed compares states by), and
``json_bytes_len`` is ``Buffer.byteLength(JSON.stringify(v), "utf8")`` (the
ack page-size bound). ``parse(encode(f)) == f`` holds for every frame.

Leaves out on purpose:

* The replica's own decisions: whether a page fits the ack bound, whether a
  project belongs to the attempt, whether a key is a legal advance. Those are
  refusals (results) or corruption, decided by the model against state; a
  frame that passes here is only well formed.
* Parsing results, reads and receipts: implementations produce them and the
  harness compares them as JSON (``canonical_json``), so only ``encode``
  exists for them.
* The adapter envelope of section 5 (``id``, ``op``, ``duringFetch``,
  ``nested``) and the value-store envelopes of section 4.
* Non-integral JSON numbers. A JSON ``1.0`` decodes to a Python ``float`` and
  is rejected as a ``Count`` (the wire says "no floats"), although a JavaScript
  validator cannot tell ``1.0`` from ``1``; ``canonical_json`` and
  ``json_bytes_len`` refuse floats (``TypeError``) because no wire value has
  one, and JavaScript prints them differently from Python.
* Lengths not fixed by ``docs/protocol.md``: commit ``versions`` and the
  snapshot read's ``projectIds`` have no upper bound here.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import reprlib
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Optional

from envreplica.spec.domain import (
    ApplyFrame,
    ApplyOk,
    ApplyRefused,
    BeginFrame,
    BeginResult,
    BindingState,
    BindOmit,
    BindWithhold,
    CommitFrame,
    CommitOk,
    CommitRefused,
    Cursor,
    DeliveryRequest,
    Crashed,
    Diagnosis,
    Done,
    Readiness,
    Failed,
    Head,
    LegacyRef,
    Materialization,
    MatKind,
    PageFrame,
    PageOk,
    PageRefused,
    Pending,
    ProjectVersion,
    ReceiptView,
    RecordResult,
    ReplicaError,
    Snapshot,
    SnapshotEntry,
    SnapshotProject,
    StagedRef,
    Status,
    InvalidFrame,
    ValueRef,
    Binding,
)

#: A JSON object as ``json`` reads it (a frame before parsing) or ``encode`` writes it.
_JsonObject = dict[str, Any]

__all__ = [
    "APPLY_KIND",
    "MAX_COUNT",
    "MAX_BEGIN_PROJECTS",
    "MAX_PAGE_RECORDS",
    "MAX_POLICY_EPOCHS",
    "parse_begin",
    "parse_policy_epochs",
    "parse_org_id",
    "parse_project_ids",
    "parse_page",
    "parse_apply",
    "parse_commit",
    "parse_binding_state",
    "parse_value_ref",
    "parse_materialization",
    "parse_record_result",
    "parse_cursor",
    "encode",
    "canonical_json",
    "json_bytes_len",
]

#: ``Count`` upper bound: ``Number.MAX_SAFE_INTEGER``.
MAX_COUNT = 2**53 - 1
#: At most this many policy epochs (``PolicyEpochs``).
MAX_POLICY_EPOCHS = 64
#: At most this many projects in one begin frame.
MAX_BEGIN_PROJECTS = 256
#: At most this many records in one page frame.
MAX_PAGE_RECORDS = 1000
#: The ``kind`` of every apply frame.
APPLY_KIND = "env.replica.apply"

# ---------------------------------------------------------------------------
# The one failure helper. Every message reads
#   invalid <root>: <path> <rule>; got <value>. <fix>
# ---------------------------------------------------------------------------


class _Absent:
    """Stands for the value of a key that is not there."""

    def __repr__(self) -> str:
        return "nothing (the key is absent)"


_ABSENT = _Absent()

_SHOW = reprlib.Repr()
_SHOW.maxlevel = 3
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = _SHOW.maxset = 6
_SHOW.maxstring = 70
_SHOW.maxother = 70
_SHOW_LIMIT = 80


def _show(value: Any) -> str:
    """``repr`` of an offending value, bounded (a frame may be huge or hostile)."""
    text = _SHOW.repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


_ROOT = re.compile(r"[^.\[]*")


def _invalid(path: str, rule: str, value: Any, fix: str, *, shown: Optional[str] = None) -> NoReturn:
    """Raise the ``InvalidFrame`` for ``path``; ``shown`` replaces the value's repr."""
    matched = _ROOT.match(path)
    assert matched is not None  # [^.\[]* matches every string (possibly empty)
    root = matched.group() or "frame"
    got = shown if shown is not None else _show(value)
    raise InvalidFrame(f"invalid {root}: {path} {rule}; got {got}. {fix}")


# ---------------------------------------------------------------------------
# Scalars.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pattern:
    """One string type of section 1: its regex and how to explain it."""

    name: str
    regex: re.Pattern[str]
    fix: str

    @property
    def rule(self) -> str:
        return f"must be {self.name} (a string matching ^{self.regex.pattern}$)"


# ``fullmatch`` and no ``$``: Python's ``$`` also matches before a final "\n".
ID = _Pattern(
    "an Id",
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}"),
    "Send 1-128 characters: an ASCII letter or digit, then letters, digits, '_', '.', ':' or '-'.",
)
SEGMENT = _Pattern(
    "a Segment",
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"),
    "Send 1-64 characters: an ASCII letter or digit, then letters, digits, '_', '.' or '-'.",
)
KEY = _Pattern(
    "a Key",
    re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}"),
    "Send 1-128 characters: an ASCII letter or '_', then letters, digits or '_'.",
)
REASON = _Pattern(
    "a Reason",
    re.compile(r"[a-z][a-z0-9_]{0,63}"),
    "Send 1-64 characters: a lowercase ASCII letter, then lowercase letters, digits or '_'.",
)
STAGING_ID = _Pattern(
    "a StagingId",
    re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    "Send a lowercase canonical UUID such as '0f8fad5b-d9cb-469f-a165-70867728950e'.",
)


def _string(value: Any, path: str, pattern: _Pattern) -> str:
    if not isinstance(value, str):
        _invalid(path, pattern.rule, value, "Send a string.")
    if pattern.regex.fullmatch(value) is None:
        _invalid(path, pattern.rule, value, pattern.fix)
    return str.__str__(value)  # a plain str even for a str subclass


def _count(value: Any, path: str, minimum: int = 0) -> int:
    """A ``Count``: an ``int`` (never ``bool``, never ``float``) in ``minimum..2^53-1``."""
    rule = (
        "must be a Count (a JSON integer 0..2^53-1, not a boolean or float)"
        if minimum == 0
        else f"must be a Count >= {minimum} (a JSON integer {minimum}..2^53-1, not a boolean or float)"
    )
    if type(value) is not int:
        _invalid(path, rule, value, "Send an integer.")
    if not minimum <= value <= MAX_COUNT:
        _invalid(path, rule, value, f"Send an integer from {minimum} to 9007199254740991.")
    return value


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        _invalid(path, "must be a JSON boolean", value, "Send true or false.")
    return value


def _list(value: Any, path: str, what: str, limit: Optional[int] = None) -> list[Any]:
    if type(value) is not list:
        _invalid(path, f"must be a JSON array of {what}", value, "Send an array.")
    if limit is not None and len(value) > limit:
        _invalid(
            path,
            f"must have at most {limit} entries",
            value,
            f"Send at most {limit} entries.",
            shown=f"{len(value)} entries",
        )
    return value


def _object(value: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> _JsonObject:
    """Check that ``value`` is an object with exactly ``required`` (plus any of ``optional``)."""
    allowed = ", ".join(repr(k) for k in required + optional)
    if type(value) is not dict:
        _invalid(path, f"must be a JSON object with keys {allowed}", value, "Send an object.")
    for key in required:
        if key not in value:
            _invalid(f"{path}.{key}", "is required (objects are exact)", _ABSENT, f"Add the key {key!r}.")
    extra = [key for key in value if key not in required and key not in optional]
    if extra:
        key = min(extra, key=repr)
        _invalid(
            f"{path}.{shown_key(key)}",
            f"is not allowed (objects are exact; allowed keys: {allowed})",
            value[key],
            "Remove the key.",
            shown=unshown(value[key]),
        )
    return value


_SHOWN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")


def shown_key(key: str) -> str:
    """A key name fit for an error message: itself when it looks like a field name (a letter, then at most 31
    letters, digits or '_'), else only its length (a misplaced secret can arrive as a key)."""
    return key if _SHOWN_KEY.fullmatch(key) else f"<a key of {len(key)} characters>"


def unshown(value: Any) -> str:
    """What an error message says of a value it must not echo (a misplaced field may hold a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number (not shown)"
    if isinstance(value, str):
        return f"a string of {len(value)} characters (not shown)"
    if isinstance(value, list):
        return f"an array of {len(value)} items (not shown)"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys (not shown)"
    return f"a {type(value).__name__} (not shown)"


def _kind(value: Any, path: str, kinds: tuple[str, ...]) -> str:
    """The ``kind`` of a tagged object, checked before its other keys."""
    if type(value) is not dict:
        _invalid(path, "must be a JSON object with a 'kind' key", value, "Send an object.")
    if "kind" not in value:
        _invalid(f"{path}.kind", "is required (objects are exact)", _ABSENT, "Add the key 'kind'.")
    kind = value["kind"]
    if not isinstance(kind, str) or kind not in kinds:
        choices = " or ".join(repr(k) for k in kinds)
        _invalid(f"{path}.kind", f"must be {choices}", kind, f"Send one of {choices}.")
    return kind


# ---------------------------------------------------------------------------
# Records (section 1).
# ---------------------------------------------------------------------------


def _value_ref(value: Any, path: str) -> ValueRef:
    kind = _kind(value, path, ("staged", "legacy"))
    if kind == "staged":
        _object(value, path, ("kind", "stagingId"))
        return StagedRef(_string(value["stagingId"], f"{path}.stagingId", STAGING_ID))
    _object(value, path, ("kind", "ssmVersion"))
    return LegacyRef(_count(value["ssmVersion"], f"{path}.ssmVersion", minimum=1))


def _head(value: Any, path: str) -> Head:
    _object(value, path, ("revision", "generation", "tombstone", "valueRef"))
    revision = _count(value["revision"], f"{path}.revision")
    generation = _count(value["generation"], f"{path}.generation")
    tombstone = _bool(value["tombstone"], f"{path}.tombstone")
    raw_ref = value["valueRef"]
    if tombstone and raw_ref is not None:
        _invalid(
            f"{path}.valueRef",
            f"must be null when {path}.tombstone is true (tombstone <=> valueRef is null)",
            raw_ref,
            "Send null for a tombstone, or set tombstone to false.",
        )
    if not tombstone and raw_ref is None:
        _invalid(
            f"{path}.valueRef",
            f"must be a ValueRef when {path}.tombstone is false (tombstone <=> valueRef is null)",
            raw_ref,
            "Send the value's reference, or set tombstone to true.",
        )
    ref = None if raw_ref is None else _value_ref(raw_ref, f"{path}.valueRef")
    return Head(revision, generation, tombstone, ref)


def _binding(value: Any, path: str) -> Binding:
    if value is None:
        return None
    kind = _kind(value, path, ("omit", "withhold"))
    if kind == "omit":
        _object(value, path, ("kind",))
        return BindOmit()
    _object(value, path, ("kind", "reason"))
    return BindWithhold(_string(value["reason"], f"{path}.reason", REASON))


def _binding_state(value: Any, path: str) -> BindingState:
    _object(value, path, ("key", "head", "binding", "policyEpoch", "listingGeneration"))
    key = _string(value["key"], f"{path}.key", KEY)
    head = _head(value["head"], f"{path}.head")
    binding = _binding(value["binding"], f"{path}.binding")
    raw_epoch = value["policyEpoch"]
    epoch = None if raw_epoch is None else _count(raw_epoch, f"{path}.policyEpoch")
    listing = _count(value["listingGeneration"], f"{path}.listingGeneration")
    return BindingState(key, head, binding, epoch, listing)


def _materialization(value: Any, path: str) -> Materialization:
    kind = MatKind(_kind(value, path, tuple(k.value for k in MatKind)))
    if kind is MatKind.INSTALLED:
        _object(value, path, ("kind",))
        return Materialization(kind, None)
    _object(value, path, ("kind", "reason"))
    return Materialization(kind, _string(value["reason"], f"{path}.reason", REASON))


def _record_result(value: Any, path: str) -> RecordResult:
    _object(value, path, ("state", "materialization"))
    return RecordResult(
        _binding_state(value["state"], f"{path}.state"),
        _materialization(value["materialization"], f"{path}.materialization"),
    )


def _cursor(value: Any, path: str, minimum: int = 0) -> Cursor:
    _object(value, path, ("streamId", "sequence"))
    return Cursor(
        _string(value["streamId"], f"{path}.streamId", ID),
        _count(value["sequence"], f"{path}.sequence", minimum=minimum),
    )


def _policy_epochs(value: Any, path: str) -> tuple[int, ...]:
    items = _list(value, path, "Counts", MAX_POLICY_EPOCHS)
    epochs: list[int] = []
    for i, item in enumerate(items):
        epoch = _count(item, f"{path}[{i}]")
        if epochs and epoch <= epochs[-1]:
            _invalid(
                f"{path}[{i}]",
                f"must be greater than {path}[{i - 1}] ({epochs[-1]}) (policy epochs are strictly ascending)",
                epoch,
                "Sort the epochs and remove duplicates.",
            )
        epochs.append(epoch)
    return tuple(epochs)


def _segments(value: Any, path: str, limit: Optional[int], unique: bool) -> tuple[str, ...]:
    items = _list(value, path, "Segments", limit)
    seen: dict[str, int] = {}
    segments: list[str] = []
    for i, item in enumerate(items):
        segment = _string(item, f"{path}[{i}]", SEGMENT)
        if unique and segment in seen:
            _invalid(
                f"{path}[{i}]",
                f"must be unique (it repeats {path}[{seen[segment]}])",
                segment,
                "Remove the duplicate.",
            )
        seen.setdefault(segment, i)
        segments.append(segment)
    return tuple(segments)


# ---------------------------------------------------------------------------
# Frames (section 2).
# ---------------------------------------------------------------------------


def _begin(frame: Any, path: str) -> BeginFrame:
    _object(frame, path, ("attempt", "projectIds"))
    attempt = _object(frame["attempt"], f"{path}.attempt", ("streamId", "attemptId"))
    stream_id = _string(attempt["streamId"], f"{path}.attempt.streamId", ID)
    attempt_id = _string(attempt["attemptId"], f"{path}.attempt.attemptId", ID)
    project_ids = _segments(frame["projectIds"], f"{path}.projectIds", MAX_BEGIN_PROJECTS, unique=True)
    return BeginFrame(stream_id, attempt_id, project_ids)


def _page(frame: Any, path: str) -> PageFrame:
    _object(frame, path, ("opId", "attemptId", "projectId", "after", "recordVersion", "records", "complete"))
    op_id = _string(frame["opId"], f"{path}.opId", ID)
    attempt_id = _string(frame["attemptId"], f"{path}.attemptId", ID)
    project_id = _string(frame["projectId"], f"{path}.projectId", SEGMENT)
    after = None if frame["after"] is None else _string(frame["after"], f"{path}.after", KEY)
    record_version = _count(frame["recordVersion"], f"{path}.recordVersion")
    items = _list(frame["records"], f"{path}.records", "BindingStates", MAX_PAGE_RECORDS)
    records: list[BindingState] = []
    for i, item in enumerate(items):
        record = _binding_state(item, f"{path}.records[{i}]")
        # Keys are ASCII (the Key regex), so str order is JavaScript's order.
        if records and record.key <= records[-1].key:
            _invalid(
                f"{path}.records[{i}].key",
                f"must be greater than {path}.records[{i - 1}].key ({records[-1].key!r}) "
                "(page keys are strictly ascending)",
                record.key,
                "Sort the records by key and remove duplicates.",
            )
        if not records and after is not None and record.key <= after:
            _invalid(
                f"{path}.records[{i}].key",
                f"must be greater than {path}.after ({after!r}) (every page key follows after)",
                record.key,
                "Send only keys after the page cursor.",
            )
        records.append(record)
    complete = _bool(frame["complete"], f"{path}.complete")
    return PageFrame(op_id, attempt_id, project_id, after, record_version, tuple(records), complete)


_APPLY_KEYS = ("kind", "opId", "projectId", "recordVersion", "state", "delivery")


def _apply(frame: Any, path: str) -> ApplyFrame:
    _object(frame, path, _APPLY_KEYS, optional=("reconciliationAttemptId",))
    if not (isinstance(frame["kind"], str) and frame["kind"] == APPLY_KIND):
        _invalid(f"{path}.kind", f"must be exactly {APPLY_KIND!r}", frame["kind"], f"Send {APPLY_KIND!r}.")
    op_id = _string(frame["opId"], f"{path}.opId", ID)
    project_id = _string(frame["projectId"], f"{path}.projectId", SEGMENT)
    record_version = _count(frame["recordVersion"], f"{path}.recordVersion", minimum=1)
    state = _binding_state(frame["state"], f"{path}.state")
    delivery = _cursor(frame["delivery"], f"{path}.delivery", minimum=1)
    reconciliation = None
    if "reconciliationAttemptId" in frame:
        raw = frame["reconciliationAttemptId"]
        if raw is None:
            _invalid(
                f"{path}.reconciliationAttemptId",
                "must be an Id when present (JSON null is not allowed)",
                raw,
                "Omit the key instead of sending null.",
            )
        reconciliation = _string(raw, f"{path}.reconciliationAttemptId", ID)
    return ApplyFrame(op_id, project_id, record_version, state, delivery, reconciliation)


def _commit(frame: Any, path: str) -> CommitFrame:
    _object(frame, path, ("attemptId", "highWater", "versions"))
    attempt_id = _string(frame["attemptId"], f"{path}.attemptId", ID)
    high_water = _cursor(frame["highWater"], f"{path}.highWater")
    items = _list(frame["versions"], f"{path}.versions", "{projectId, recordVersion} objects")
    versions: list[ProjectVersion] = []
    for i, item in enumerate(items):
        at = f"{path}.versions[{i}]"
        _object(item, at, ("projectId", "recordVersion"))
        version = ProjectVersion(
            _string(item["projectId"], f"{at}.projectId", SEGMENT),
            _count(item["recordVersion"], f"{at}.recordVersion"),
        )
        # Segments are ASCII, so str order is JavaScript's order.
        if versions and version.project_id <= versions[-1].project_id:
            _invalid(
                f"{at}.projectId",
                f"must be greater than {path}.versions[{i - 1}].projectId ({versions[-1].project_id!r}) "
                "(versions are strictly ascending by projectId)",
                version.project_id,
                "Sort the versions by projectId and remove duplicates.",
            )
        versions.append(version)
    return CommitFrame(attempt_id, high_water, tuple(versions))


# ---------------------------------------------------------------------------
# Public parsers. ``path`` names the root in messages (an adapter may pass,
# say, ``"request.frame"``); the defaults name the argument as the seed does.
# ---------------------------------------------------------------------------


def parse_begin(frame: Any, *, path: str = "begin") -> BeginFrame:
    """A ``BeginFrame``: ``{"attempt": {"streamId", "attemptId"}, "projectIds"}``."""
    return _begin(frame, path)


def parse_policy_epochs(value: Any, *, path: str = "keptPolicyEpochs") -> tuple[int, ...]:
    """``PolicyEpochs``: at most 64 Counts, strictly ascending (begin's ``keptPolicyEpochs``)."""
    return _policy_epochs(value, path)


def parse_org_id(value: Any, *, path: str = "orgId") -> str:
    """begin's ``orgId``: a ``Segment``."""
    return _string(value, path, SEGMENT)


def parse_project_ids(value: Any, *, path: str = "projectIds") -> tuple[str, ...]:
    """The snapshot read's ``projectIds``: Segments; repeats pass (the read refuses them)."""
    return _segments(value, path, None, unique=False)


def parse_page(frame: Any, *, path: str = "page") -> PageFrame:
    """A ``PageFrame``; keys strictly ascending, all after ``after``, at most 1000."""
    return _page(frame, path)


def parse_apply(frame: Any, *, path: str = "apply") -> ApplyFrame:
    """An ``ApplyFrame`` (``kind`` ``env.replica.apply``; ``reconciliationAttemptId`` optional)."""
    return _apply(frame, path)


def parse_commit(frame: Any, *, path: str = "commit") -> CommitFrame:
    """A ``CommitFrame``; versions strictly ascending by ``projectId``."""
    return _commit(frame, path)


def parse_binding_state(value: Any, *, path: str = "state") -> BindingState:
    """A ``BindingState``."""
    return _binding_state(value, path)


def parse_value_ref(value: Any, *, path: str = "valueRef") -> ValueRef:
    """A ``ValueRef`` (``StagedRef`` or ``LegacyRef``); null is not a ValueRef."""
    return _value_ref(value, path)


def parse_materialization(value: Any, *, path: str = "materialization") -> Materialization:
    """A ``Materialization``: installed, or withheld/unavailable with a ``Reason``."""
    return _materialization(value, path)


def parse_record_result(value: Any, *, path: str = "result") -> RecordResult:
    """A ``Result``: ``{"state", "materialization"}``."""
    return _record_result(value, path)


def parse_cursor(value: Any, *, path: str = "cursor") -> Cursor:
    """A ``Cursor``: ``{"streamId": Id, "sequence": Count}``."""
    return _cursor(value, path)


# ---------------------------------------------------------------------------
# Encoding: one dispatch table, type -> function. Values built in code are
# trusted (``spec.domain``), so encoding checks nothing but JSON-ness.
# ---------------------------------------------------------------------------


@functools.singledispatch
def encode(value: Any) -> Any:
    """The JSON shape (``dict``/``list``/``str``/``int``/``bool``/``None``) of a domain value."""
    raise TypeError(f"encode: {type(value).__name__} has no wire shape: {_show(value)}")


def _register(cls: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return encode.register(cls)


@_register(type(None))
def _(value: None) -> None:
    return None


@_register(bool)
def _(value: bool) -> bool:
    return value


@_register(int)
def _(value: int) -> int:
    return int(value)  # an IntEnum member becomes its plain int


@_register(str)
def _(value: str) -> str:
    # A str-valued enum (``RefusalCode``, ...) is a str: it becomes its value.
    return value.value if isinstance(value, enum.Enum) else str(value)


@_register(enum.Enum)
def _(value: enum.Enum) -> Any:
    return encode(value.value)


@_register(float)
def _(value: float) -> NoReturn:
    raise TypeError(f"encode: floats are not wire values (every number is a Count); got {value!r}")


@_register(list)
@_register(tuple)
def _(value: list[Any] | tuple[Any, ...]) -> list[Any]:
    return [encode(item) for item in value]


@_register(dict)
def _(value: dict[Any, Any]) -> _JsonObject:
    out: _JsonObject = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"encode: JSON object keys are strings; got {key!r}")
        out[encode(key)] = encode(item)
    return out


@_register(StagedRef)
def _(value: StagedRef) -> _JsonObject:
    return {"kind": "staged", "stagingId": value.staging_id}


@_register(LegacyRef)
def _(value: LegacyRef) -> _JsonObject:
    return {"kind": "legacy", "ssmVersion": value.ssm_version}


@_register(Head)
def _(value: Head) -> _JsonObject:
    return {
        "revision": value.revision,
        "generation": value.generation,
        "tombstone": value.tombstone,
        "valueRef": encode(value.value_ref),
    }


@_register(BindOmit)
def _(value: BindOmit) -> _JsonObject:
    return {"kind": "omit"}


@_register(BindWithhold)
def _(value: BindWithhold) -> _JsonObject:
    return {"kind": "withhold", "reason": encode(value.reason)}


@_register(BindingState)
def _(value: BindingState) -> _JsonObject:
    return {
        "key": value.key,
        "head": encode(value.head),
        "binding": encode(value.binding),
        "policyEpoch": value.policy_epoch,
        "listingGeneration": value.listing_generation,
    }


@_register(Materialization)
def _(value: Materialization) -> _JsonObject:
    if value.kind is MatKind.INSTALLED:
        return {"kind": "installed"}
    return {"kind": encode(value.kind), "reason": encode(value.reason)}


@_register(RecordResult)
def _(value: RecordResult) -> _JsonObject:
    return {"state": encode(value.state), "materialization": encode(value.materialization)}


@_register(Cursor)
def _(value: Cursor) -> _JsonObject:
    return {"streamId": value.stream_id, "sequence": value.sequence}


@_register(BeginFrame)
def _(value: BeginFrame) -> _JsonObject:
    return {
        "attempt": {"streamId": value.stream_id, "attemptId": value.attempt_id},
        "projectIds": list(value.project_ids),
    }


@_register(PageFrame)
def _(value: PageFrame) -> _JsonObject:
    return {
        "opId": value.op_id,
        "attemptId": value.attempt_id,
        "projectId": value.project_id,
        "after": value.after,
        "recordVersion": value.record_version,
        "records": [encode(r) for r in value.records],
        "complete": value.complete,
    }


@_register(ApplyFrame)
def _(value: ApplyFrame) -> _JsonObject:
    out: _JsonObject = {
        "kind": APPLY_KIND,
        "opId": value.op_id,
        "projectId": value.project_id,
        "recordVersion": value.record_version,
        "state": encode(value.state),
        "delivery": encode(value.delivery),
    }
    if value.reconciliation_attempt_id is not None:
        out["reconciliationAttemptId"] = value.reconciliation_attempt_id
    return out


@_register(DeliveryRequest)
def _(value: DeliveryRequest) -> _JsonObject:
    """Exactly what the receipt MAC covers (section 2): no opId, no reconciliationAttemptId."""
    return {
        "kind": APPLY_KIND,
        "projectId": value.project_id,
        "recordVersion": value.record_version,
        "state": encode(value.state),
        "delivery": encode(value.delivery),
    }


@_register(ProjectVersion)
def _(value: ProjectVersion) -> _JsonObject:
    return {"projectId": value.project_id, "recordVersion": value.record_version}


@_register(CommitFrame)
def _(value: CommitFrame) -> _JsonObject:
    return {
        "attemptId": value.attempt_id,
        "highWater": encode(value.high_water),
        "versions": [encode(v) for v in value.versions],
    }


@_register(BeginResult)
def _(value: BeginResult) -> _JsonObject:
    return {"appliedThrough": encode(value.applied_through), "policyEpochs": list(value.policy_epochs)}


@_register(PageOk)
def _(value: PageOk) -> _JsonObject:
    return {
        "ok": True,
        "attemptId": value.attempt_id,
        "projectId": value.project_id,
        "after": value.after,
        "recordVersion": value.record_version,
        "results": [encode(r) for r in value.results],
        "complete": value.complete,
        "policyEpochs": list(value.policy_epochs),
        "appliedThrough": encode(value.applied_through),
    }


@_register(PageRefused)
def _(value: PageRefused) -> _JsonObject:
    return {
        "ok": False,
        "attemptId": value.attempt_id,
        "code": encode(value.code),
        "policyEpochs": list(value.policy_epochs),
        "appliedThrough": encode(value.applied_through),
    }


@_register(ApplyOk)
def _(value: ApplyOk) -> _JsonObject:
    return {
        "ok": True,
        "replayed": value.replayed,
        "attemptId": value.attempt_id,
        "projectId": value.project_id,
        "recordVersion": value.record_version,
        "result": encode(value.result),
        "policyEpochs": list(value.policy_epochs),
        "appliedThrough": encode(value.applied_through),
    }


@_register(ApplyRefused)
def _(value: ApplyRefused) -> _JsonObject:
    return {
        "ok": False,
        "replayed": value.replayed,
        "consumed": value.consumed,
        "attemptId": value.attempt_id,
        "code": encode(value.code),
        "policyEpochs": list(value.policy_epochs),
        "appliedThrough": encode(value.applied_through),
    }


@_register(CommitOk)
def _(value: CommitOk) -> _JsonObject:
    return {
        "ok": True,
        "attemptId": value.attempt_id,
        "policyEpochs": list(value.policy_epochs),
        "appliedThrough": encode(value.applied_through),
    }


@_register(CommitRefused)
def _(value: CommitRefused) -> _JsonObject:
    return {
        "ok": False,
        "attemptId": value.attempt_id,
        "code": encode(value.code),
        "policyEpochs": list(value.policy_epochs),
        "appliedThrough": encode(value.applied_through),
    }


@_register(Status)
def _(value: Status) -> _JsonObject:
    return {
        "activated": value.activated,
        "gateOpen": value.gate_open,
        "attemptId": value.attempt_id,
        "orgId": value.org_id,
        "appliedThrough": encode(value.applied_through),
        "policyEpochs": list(value.policy_epochs),
        "projectIds": list(value.project_ids),
    }


@_register(SnapshotEntry)
def _(value: SnapshotEntry) -> _JsonObject:
    return {
        "state": encode(value.state),
        "materialization": encode(value.materialization),
        "value": value.value,
    }


@_register(SnapshotProject)
def _(value: SnapshotProject) -> _JsonObject:
    return {
        "projectId": value.project_id,
        "recordVersion": value.record_version,
        "entries": [encode(e) for e in value.entries],
    }


@_register(Snapshot)
def _(value: Snapshot) -> _JsonObject:
    return {"projects": [encode(p) for p in value.projects]}


@_register(ReceiptView)
def _(value: ReceiptView) -> _JsonObject:
    return {
        "streamId": value.stream_id,
        "sequence": value.sequence,
        "ok": value.ok,
        "code": encode(value.code),
        "result": encode(value.result),
        "recordVersion": value.record_version,
    }


@_register(Done)
def _(value: Done) -> _JsonObject:
    return {}  # section 5: close, restart and store.* answer {}


@_register(Failed)
def _(value: Failed) -> _JsonObject:
    return {"type": value.kind, "message": value.message}  # section 5's error object


@_register(ReplicaError)
def _(value: ReplicaError) -> _JsonObject:
    return {"type": value.wire_type, "message": value.message}  # section 5's error object


@_register(Crashed)
def _(value: Crashed) -> _JsonObject:
    return {"crashedAfterCommit": value.after_commit}


@_register(Readiness)
def _(value: Readiness) -> _JsonObject:
    return {"ready": value.ready}


@_register(Diagnosis)
def _(value: Diagnosis) -> _JsonObject:
    return {"reason": value.reason.value, "message": value.message}


@_register(Pending)
def _(value: Pending) -> _JsonObject:
    # Not a wire shape: a model-internal "waiting on a value-store read", for logs.
    return {"pending": value.slot}


# ---------------------------------------------------------------------------
# Serialisation as JavaScript does it.
# ---------------------------------------------------------------------------

#: Characters where Python's ``json`` and JavaScript's ``JSON.stringify`` may
#: differ: surrogates (JS escapes lone ones, joins pairs) and, for sorting,
#: code points whose UTF-16 order differs from their code point order.
_NEEDS_JS_PATH = re.compile("[\ud800-\U0010ffff]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf16_order(key: str) -> bytes:
    """JavaScript's ``Array.prototype.sort`` order: UTF-16 code units."""
    return key.encode("utf-16-be", "surrogatepass")


def _js_text(value: Any, sort_keys: bool) -> str:
    """Exact JavaScript serialisation of an encoded JSON value (the slow, careful path)."""
    if isinstance(value, dict):
        keys = sorted(value, key=_utf16_order) if sort_keys else list(value)
        return "{" + ",".join(
            json.dumps(k, ensure_ascii=False) + ":" + _js_text(value[k], sort_keys) for k in keys
        ) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_js_text(item, sort_keys) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _stringify(value: Any, sort_keys: bool) -> str:
    encoded = encode(value)  # also rejects floats and non-string keys
    text = json.dumps(encoded, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
    if _NEEDS_JS_PATH.search(text) is None:
        return text  # all of it below U+D800: Python and JavaScript agree exactly
    if sort_keys:
        text = _js_text(encoded, sort_keys)
    # Join surrogate pairs into their characters, then escape the lone ones the
    # way JSON.stringify does (``\udXXX``, lowercase hex).
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def canonical_json(value: Any) -> str:
    """The seed's ``exactJson`` of ``encode(value)``: keys sorted at every level, no whitespace.

    What the receipt MAC covers (``canonical_json(frame.request())``) and what
    the seed compares states and bindings by.
    """
    return _stringify(value, sort_keys=True)


def json_bytes_len(value: Any) -> int:
    """``Buffer.byteLength(JSON.stringify(value), "utf8")``, keys in insertion order.

    ``value`` is an already-encoded JSON value (a domain value is encoded
    first); used for the acknowledgement page-size bound.
    """
    return len(_stringify(value, sort_keys=False).encode("utf-8"))
