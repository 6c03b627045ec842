"""The JSON wire: one declaration of each frame, from which come its parser, its JSON Schema and its encoding.

Models: the JSON shapes and validation rules of ``docs/protocol.md`` sections 1-3. Each type there (the strings
``Id``, ``Segment``, ``Key``, ``Reason``, ``StagingId``; ``Count``; ``PolicyEpochs``; the records; the four frames)
is declared once below as a small tree of nodes (``Pattern``, ``Count``, ``Obj``, ``Tagged``, ``ListOf``, ...), and
each node makes three things of its declaration:

* ``parse``: a JSON-decoded value (as ``json.loads`` returns it) to the typed value of ``spec.domain``, or one
  ``InvalidFrame`` naming the field path, the rule, the offending value and the fix, e.g.::

      invalid page: page.records[1].head.revision must be a Count (a JSON integer
      0..2^53-1, not a boolean or float); got True. Send an integer.

* ``definition``: its JSON Schema; ``definitions()`` is what ``spec.schema`` puts in the contract
  (``spec/contract.schema.json``, and from it the TypeScript kit's types);
* ``encode``: the typed value back to JSON, ``parse(encode(v)) == v``.

Why one declaration with three products, and not the parser from the schema (``jsonschema`` against the generated
schema, its errors translated): facing a ``oneOf`` (``Head``, ``ValueRef``, ``Binding``, ``Materialization``) a
schema validator reports the failures of every alternative, and turning them back into "this field, this rule,
send this" would be a second hand-written truth that guesses which alternative was meant, where a declaration knows
that a ``kind`` chose one. And parsing is the hot path (every frame of every lockstep step): the node walk costs
what the hand-written parser did, Python's ``jsonschema`` about 40 times that (a 1,000-record page).

The rules JSON Schema cannot state are part of the declarations (``Ascending``, ``After``, ``Count``'s integer
literals), each naming its entry in ``spec.schema.BEYOND_THE_SCHEMA``, the one list of them with why each is
outside; a refusal for one is an ``InvalidFrame`` that ``beyond`` names the rule of. So parser and
schema agree by construction, and ``tests/test_wire_schema.py`` holds them to it: a value the parser accepts
conforms to the schema, and one it refuses for any other reason does not.

``encode`` turns any value of ``spec.domain`` (frames, records, results, reads, errors) into its JSON shape (section
3 for results), with one dispatch table. ``canonical_json`` is the seed's ``exactJson`` (sorted keys, no
whitespace: what the receipt MAC covers and what the seed compares states by), and ``json_bytes_len`` is
``Buffer.byteLength(JSON.stringify(v), "utf8")`` (the ack page-size bound).

Leaves out on purpose:

* The replica's own decisions: whether a page fits the ack bound, whether a project belongs to the attempt,
  whether a key is a legal advance. Those are refusals (results) or corruption, decided by the model against
  state; a frame that passes here is only well formed.
* Parsing results, reads and receipts: implementations produce them and the harness holds them to the schema
  (``spec.validator``) and compares them as JSON (``canonical_json``), so only ``encode`` exists for them, and
  their schema is written in ``spec.schema`` alone.
* The adapter envelope of section 5 (``id``, ``op``, ``duringFetch``, ``nested``) and the value-store envelopes of
  section 4.
* Non-integral JSON numbers. A JSON ``1.0`` decodes to a Python ``float`` and is rejected as a ``Count`` (the wire
  says "no floats"), although a JavaScript validator cannot tell ``1.0`` from ``1``; ``canonical_json`` and
  ``json_bytes_len`` refuse floats (``TypeError``) because no wire value has one, and JavaScript prints them
  differently from Python.
* Lengths not fixed by ``docs/protocol.md``: commit ``versions`` and the snapshot read's ``projectIds`` have no
  upper bound here.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import reprlib
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Generic, Mapping, NoReturn, Optional, TypeVar, cast

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
    DiagnosisReason,
    RefusalCode,
)

#: A JSON object as ``json`` reads it (a frame before parsing) or ``encode`` writes it.
_JsonObject = dict[str, Any]
#: A JSON Schema (or a part of one).
JSON = dict[str, Any]

__all__ = [
    "APPLY_KIND",
    "MAX_COUNT",
    "MAX_BEGIN_PROJECTS",
    "MAX_PAGE_RECORDS",
    "MAX_POLICY_EPOCHS",
    "beyond",
    "DECLARED",
    "definitions",
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


def beyond(error: InvalidFrame) -> Optional[str]:
    """The rule beyond the schema (its name in ``spec.schema.BEYOND_THE_SCHEMA``) ``error`` refused a frame for; None
    for a rule of the schema. (An attribute of the error, not a subclass: mypyc's ``InvalidFrame`` takes none.)"""
    rule = getattr(error, "beyond_the_schema", None)
    return rule if isinstance(rule, str) else None


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


def _invalid(path: str, rule: str, value: Any, fix: str, *, shown: Optional[str] = None,
             beyond: Optional[str] = None) -> NoReturn:
    """Raise the ``InvalidFrame`` for ``path`` (naming the rule ``beyond``, see ``beyond``); ``shown`` replaces
    the value's repr."""
    matched = _ROOT.match(path)
    assert matched is not None  # [^.\[]* matches every string (possibly empty)
    root = matched.group() or "frame"
    got = shown if shown is not None else _show(value)
    message = f"invalid {root}: {path} {rule}; got {got}. {fix}"
    error = InvalidFrame(message)
    if beyond is not None:
        error.beyond_the_schema = beyond  # type: ignore[attr-defined]
    raise error


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


# ---------------------------------------------------------------------------
# The nodes a declaration is made of: each parses, encodes, and renders its schema.
# ---------------------------------------------------------------------------


T = TypeVar("T")


@dataclass(frozen=True, eq=False, kw_only=True)
class Node(Generic[T]):
    """One wire type: ``parse`` checks a decoded JSON value and builds its domain value, ``encode`` writes one back,
    ``definition`` is its JSON Schema. A node with a ``ref`` is a definition of the contract: where it is used, its
    schema is ``{"$ref": ref}``; a node without one is written out where it is used. A node with only a ``ref`` stands
    for a definition ``spec.schema`` writes (a refusal code set)."""

    ref: str = ""  # its name in the contract
    description: str = ""  # what it is, for the schema's reader

    def parse(self, value: Any, path: str) -> T:
        raise NotImplementedError

    def shape(self) -> JSON:
        """The JSON Schema of the values ``parse`` accepts (but for the rules beyond the schema), undescribed."""
        raise NotImplementedError

    def encode(self, value: T) -> Any:
        """The JSON of a value ``parse`` builds: ``parse(encode(v)) == v``."""
        return encode(value)  # a scalar (a str-valued enum becomes its value)

    def schema(self) -> JSON:
        """The schema where the node is used: a reference to its definition, or the definition itself."""
        return {"$ref": self.ref} if self.ref else self.definition()

    def definition(self) -> JSON:
        """``shape`` with the description: after ``type`` for an object, first for a union, else last."""
        out = self.shape()
        if not self.description:
            return out
        if out.get("type") == "object":
            return {"type": "object", "description": self.description, **out}
        if "type" not in out:
            return {"description": self.description, **out}
        return {**out, "description": self.description}


@dataclass(frozen=True, eq=False)
class Pattern(Node[str]):
    """One string type of section 1: its regex (matched whole) and how a message explains it."""

    name: str  # what a message calls it: "an Id"
    regex: re.Pattern[str]
    fix: str

    @property
    def rule(self) -> str:
        return f"must be {self.name} (a string matching ^{self.regex.pattern}$)"

    def parse(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            _invalid(path, self.rule, value, "Send a string.")
        if self.regex.fullmatch(value) is None:
            _invalid(path, self.rule, value, self.fix)
        return str.__str__(value)  # a plain str even for a str subclass

    def encode(self, value: str) -> Any:
        return value if type(value) is str else encode(value)  # a str-valued enum becomes its value

    def shape(self) -> JSON:
        # ``$`` also matches before a final newline in Python's ``re`` (which ``jsonschema`` uses) and in PCRE;
        # ``(?![\s\S])`` is the end of the string in ECMA-262, Python and PCRE alike.
        return {"type": "string", "pattern": f"^(?:{self.regex.pattern})(?![\\s\\S])"}


@dataclass(frozen=True, eq=False)
class Count(Node[int]):
    """A ``Count``: an ``int`` (never ``bool``, never ``float``) in ``minimum..2^53-1``.

    An integral float in range (JSON ``1.0``) is a number the schema's ``integer`` admits: its refusal is the rule
    beyond the schema ``integer-literals``."""

    minimum: int = 0

    @property
    def rule(self) -> str:
        """What a refusal says the value must be (built only for a refusal: parsing is per message)."""
        low = self.minimum
        if low == 0:
            return "must be a Count (a JSON integer 0..2^53-1, not a boolean or float)"
        return f"must be a Count >= {low} (a JSON integer {low}..2^53-1, not a boolean or float)"

    def parse(self, value: Any, path: str) -> int:
        low = self.minimum
        if type(value) is not int:
            literal = type(value) is float and value.is_integer() and low <= value <= MAX_COUNT
            _invalid(path, self.rule, value, "Send an integer.", beyond="integer-literals" if literal else None)
        if not low <= value <= MAX_COUNT:
            _invalid(path, self.rule, value, f"Send an integer from {low} to 9007199254740991.")
        return value

    def encode(self, value: int) -> int:
        return value if type(value) is int else int(value)

    def shape(self) -> JSON:
        return {"type": "integer", "minimum": self.minimum, "maximum": MAX_COUNT}


@dataclass(frozen=True, eq=False)
class Bool(Node[bool]):
    """A JSON boolean."""

    def parse(self, value: Any, path: str) -> bool:
        if type(value) is not bool:
            _invalid(path, "must be a JSON boolean", value, "Send true or false.")
        return value

    def encode(self, value: bool) -> bool:
        return value

    def shape(self) -> JSON:
        return {"type": "boolean"}


@dataclass(frozen=True, eq=False)
class Const(Node[Any]):
    """Exactly this string or boolean (a frame's or a variant's ``kind``, a result's ``ok``). An ``Obj`` builds
    nothing of it, and encodes its value's own attribute of that name if it has one (faithfully: a wrong value stays
    wrong, for the schema to refuse), else the constant."""

    constant: Any

    def parse(self, value: Any, path: str) -> Any:
        if not (type(value) is type(self.constant) and value == self.constant):
            _invalid(path, f"must be exactly {self.constant!r}", value, f"Send {self.constant!r}.")
        return self.constant

    def shape(self) -> JSON:
        return {"const": self.constant}


@dataclass(frozen=True, eq=False)
class Nullable(Node[Optional[T]]):
    """``node``, or JSON null."""

    node: Node[T]

    def parse(self, value: Any, path: str) -> Optional[T]:
        return None if value is None else self.node.parse(value, path)

    def shape(self) -> JSON:
        return {"anyOf": [self.node.schema(), {"type": "null"}]}

    def encode(self, value: Optional[T]) -> Any:
        return None if value is None else self.node.encode(value)


@dataclass(frozen=True, eq=False)
class Ascending:
    """A rule beyond the schema: a list's items strictly ascending by ``key`` of each parsed item (its JSON field
    ``field``; "" for the item itself). Keys are ASCII or integers, so Python's order is JavaScript's."""

    rule: str  # its name in spec.schema.BEYOND_THE_SCHEMA
    field: str
    key: Callable[[Any], Any]
    says: str  # the rule in a message's words
    fix: str


@dataclass(frozen=True, eq=False)
class ListOf(Node[tuple[T, ...]]):
    """A JSON array of ``item``, at most ``max_items`` long, its items ``unique`` or in ``order``. The schema states
    of an order what it can: for items compared whole, that no two are equal (``uniqueItems``)."""

    item: Node[T]
    what: str  # the items in a message's words: "Segments"
    max_items: Optional[int] = None
    unique: bool = False
    order: Optional[Ascending] = None

    def parse(self, value: Any, path: str) -> tuple[T, ...]:
        if type(value) is not list:
            _invalid(path, f"must be a JSON array of {self.what}", value, "Send an array.")
        limit = self.max_items
        if limit is not None and len(value) > limit:
            _invalid(path, f"must have at most {limit} entries", value, f"Send at most {limit} entries.",
                     shown=f"{len(value)} entries")
        items: list[T] = []
        seen: dict[Any, int] = {}
        order = self.order
        for i, raw in enumerate(value):
            item = self.item.parse(raw, f"{path}[{i}]")
            if self.unique and seen.setdefault(item, i) != i:
                _invalid(f"{path}[{i}]", f"must be unique (it repeats {path}[{seen[item]}])", item,
                         "Remove the duplicate.")
            if order is not None and items and order.key(item) <= order.key(items[-1]):
                at = f".{order.field}" if order.field else ""
                _invalid(f"{path}[{i}]{at}", f"must be greater than {path}[{i - 1}]{at} ({order.key(items[-1])!r}) "
                         f"({order.says})", order.key(item), order.fix, beyond=order.rule)
            items.append(item)
        return tuple(items)

    def shape(self) -> JSON:
        out: JSON = {"type": "array", "items": self.item.schema()}
        if self.unique:
            out["uniqueItems"] = True
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        if self.order is not None and not self.order.field:
            out["uniqueItems"] = True
        return out

    def encode(self, value: tuple[T, ...]) -> list[Any]:
        return [self.item.encode(item) for item in value]


@dataclass(frozen=True, eq=False)
class NullWhen:
    """``field`` is JSON null exactly when the boolean ``flag`` (declared before it) is true; the schema states it as
    two objects, one per value of ``flag`` (their descriptions ``live`` and ``dead``). ``field``'s own node says what
    it is else."""

    flag: str
    field: str
    live: str
    dead: str
    send_null: str  # the fix for a value where null belongs
    send_value: str  # the fix for a null where a value belongs


@dataclass(frozen=True, eq=False)
class After:
    """A rule beyond the schema: the first of the list ``items`` has a ``key`` greater than the object's ``bound``
    field, unless that is null."""

    rule: str  # its name in spec.schema.BEYOND_THE_SCHEMA
    items: str
    field: str  # the JSON field ``key`` reads
    key: Callable[[Any], Any]
    bound: str
    says: str
    fix: str


_BUILT, _CHECKED, _RULED = range(3)  # how an ``Obj`` parses a field: see ``Obj._plan``


@dataclass(frozen=True, eq=False)
class Obj(Node[T]):
    """An exact JSON object: each of ``fields`` (every one required but the ``optional``; an optional one is never
    null unless its node is ``Nullable``), no other key. Parses its fields in order and ``build``s the domain value
    of their values (a ``Const``'s left out, an absent optional one ``None``)."""

    fields: Mapping[str, Node[Any]]
    build: Callable[..., T]
    optional: tuple[str, ...] = ()
    null_when: Optional[NullWhen] = None
    after: Optional[After] = None
    #: the values ``build`` took, from what it built; by default each field's attribute (``opId``: ``op_id``)
    unbuild: Optional[Callable[[T], tuple[Any, ...]]] = None

    @functools.cached_property
    def _required(self) -> tuple[str, ...]:
        return tuple(k for k in self.fields if k not in self.optional)

    @functools.cached_property
    def _allowed(self) -> str:
        return ", ".join(repr(k) for k in [*self._required, *self.optional])

    @functools.cached_property
    def _plan(self) -> tuple[tuple[str, Node[Any], int], ...]:
        """(key, node, how) of each field, ``how`` one of ``_BUILT``, ``_CHECKED`` (a Const), ``_RULED`` (optional,
        or under ``null_when``): decided once, as parsing is the hot path."""
        ruled = {*self.optional, self.null_when.field if self.null_when else ""}
        return tuple((key, node, _RULED if key in ruled else _CHECKED if isinstance(node, Const) else _BUILT)
                     for key, node in self.fields.items())

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        """Where each field's value is among the values built (a Const's is not)."""
        return {key: i for i, key in enumerate(key for key, _, how in self._plan if how != _CHECKED)}

    def exact(self, value: Any, path: str) -> None:
        """That ``value`` is an object with exactly the required keys, and perhaps optional ones."""
        if type(value) is not dict:
            _invalid(path, f"must be a JSON object with keys {self._allowed}", value, "Send an object.")
        for key in self._required:
            if key not in value:
                _invalid(f"{path}.{key}", "is required (objects are exact)", _ABSENT, f"Add the key {key!r}.")
        if len(value) == len(self._required):
            return  # no key beyond the required ones
        extra = [key for key in value if key not in self.fields]
        if extra:
            key = min(extra, key=repr)
            _invalid(f"{path}.{shown_key(key)}", f"is not allowed (objects are exact; allowed keys: {self._allowed})",
                     value[key], "Remove the key.", shown=unshown(value[key]))

    def parse(self, value: Any, path: str) -> T:
        self.exact(value, path)
        built: list[Any] = []
        after = self.after.items if self.after is not None else None
        for key, node, how in self._plan:
            if how == _BUILT:
                built.append(node.parse(value[key], f"{path}.{key}"))
            elif how == _CHECKED:
                node.parse(value[key], f"{path}.{key}")
            else:
                built.append(self._ruled(key, node, value, path, built))
            if key == after:
                self._after(built, path)
        return self.build(*built)

    def _ruled(self, key: str, node: Node[Any], value: Any, path: str, built: list[Any]) -> Any:
        """An optional field's value (``None`` when absent; never null unless ``Nullable``), or ``null_when``'s."""
        at, rule = f"{path}.{key}", self.null_when
        if rule is not None and key == rule.field:
            flag, raw = built[self._index[rule.flag]], value[key]
            if flag and raw is not None:
                _invalid(at, f"must be null when {path}.{rule.flag} is true ({rule.flag} <=> {key} is null)", raw,
                         rule.send_null)
            if not flag and raw is None:
                _invalid(at, f"must be a {node.ref} when {path}.{rule.flag} is false ({rule.flag} <=> {key} is "
                         "null)", raw, rule.send_value)
        elif key not in value:
            return None
        elif value[key] is None and not isinstance(node, Nullable):
            _invalid(at, f"must be {getattr(node, 'name', 'a value')} when present (JSON null is not allowed)", None,
                     "Omit the key instead of sending null.")
        return None if value[key] is None else node.parse(value[key], at)

    def _after(self, built: list[Any], path: str) -> None:
        rule = self.after
        assert rule is not None
        bound, items = built[self._index[rule.bound]], built[self._index[rule.items]]
        if bound is not None and items and rule.key(items[0]) <= bound:
            _invalid(f"{path}.{rule.items}[0].{rule.field}", f"must be greater than {path}.{rule.bound} ({bound!r}) "
                     f"({rule.says})", rule.key(items[0]), rule.fix, beyond=rule.rule)

    @functools.cached_property
    def _encoding(self) -> tuple[tuple[str, Optional[Callable[[Any], Any]], str, bool, Any], ...]:
        """(key, its node's encoder (None for a Const), its attribute (``opId``: ``op_id``; a Const's only when the
        built type has it, see ``Const``), optional, the Const's constant) of each field."""
        def attribute(key: str, how: int) -> str:
            name = re.sub("[A-Z]", lambda m: "_" + m.group().lower(), key)
            return name if how != _CHECKED or (isinstance(self.build, type) and hasattr(self.build, name)) else ""

        return tuple((key, None if how == _CHECKED else node.encode, attribute(key, how), key in self.optional,
                      node.constant if isinstance(node, Const) else None) for key, node, how in self._plan)

    def encode(self, value: T) -> JSON:
        source: Any = value
        get: Callable[..., Any] = getattr
        if self.unbuild is not None:
            source, get = dict(zip([a for _, c, a, _, _ in self._encoding if c], self.unbuild(value))), dict.get
        out: JSON = {}
        for key, coder, attribute, optional, constant in self._encoding:
            if coder is None:  # a Const: see there
                out[key] = encode(get(source, attribute)) if attribute else constant
                continue
            part = get(source, attribute)
            if part is not None:
                out[key] = coder(part)
            elif not optional:
                out[key] = None  # an absent optional key stays absent
        return out

    def _object(self, properties: Mapping[str, JSON], description: str = "") -> JSON:
        out: JSON = {"type": "object"}
        if description:
            out["description"] = description
        out["properties"] = dict(properties)
        out["required"] = list(self._required)
        out["additionalProperties"] = False
        return out

    def shape(self) -> JSON:
        properties = {key: node.schema() for key, node in self.fields.items()}
        rule = self.null_when
        if rule is None:
            return self._object(properties)
        return {"oneOf": [self._object({**properties, rule.flag: {"const": False}}, rule.live),
                          self._object({**properties, rule.flag: {"const": True}, rule.field: {"type": "null"}},
                                       rule.dead)]}


@dataclass(frozen=True, eq=False)
class Tagged(Node[T]):
    """One of several objects told apart by their ``kind`` (checked first, so that a message names the rule of the
    one it chose), or null when ``nullable``."""

    variants: Mapping[str, Obj[Any]]  # kind -> its object, whose "kind" field is that Const
    nullable: bool = False
    kind_of: Optional[Callable[[T], str]] = None  # a value's kind; by default, the kind whose object built its type

    def parse(self, value: Any, path: str) -> T:
        if value is None and self.nullable:
            return None  # type: ignore[return-value]  # T is then Optional
        if type(value) is not dict:
            _invalid(path, "must be a JSON object with a 'kind' key", value, "Send an object.")
        if "kind" not in value:
            _invalid(f"{path}.kind", "is required (objects are exact)", _ABSENT, "Add the key 'kind'.")
        kind = value["kind"]
        if not isinstance(kind, str) or kind not in self.variants:
            choices = " or ".join(repr(k) for k in self.variants)
            _invalid(f"{path}.kind", f"must be {choices}", kind, f"Send one of {choices}.")
        return cast(T, self.variants[kind].parse(value, path))

    @functools.cached_property
    def _kinds(self) -> dict[Any, str]:
        return {variant.build: kind for kind, variant in self.variants.items()}

    def encode(self, value: T) -> Any:
        if value is None:
            return None
        return self.variants[self.kind_of(value) if self.kind_of else self._kinds[type(value)]].encode(value)

    def shape(self) -> JSON:
        alternatives = [variant.schema() for variant in self.variants.values()]
        return {"oneOf": [{"type": "null"}, *alternatives] if self.nullable else alternatives}


@dataclass(frozen=True, eq=False)
class Shape(Node[Any]):
    """A value of a result described by its schema alone (a string, null, an enum's value): encoded as it is."""

    schema_of: JSON

    def shape(self) -> JSON:
        return dict(self.schema_of)


@dataclass(frozen=True, eq=False)
class OneOf(Node[T]):
    """One of ``alternatives``, for results only (encoded, never parsed): the one ``pick`` names, else the first
    that builds the value's type."""

    alternatives: tuple[Obj[Any], ...]
    pick: Optional[Callable[[T], int]] = None

    def encode(self, value: T) -> JSON:
        at = self.pick(value) if self.pick else [a.build for a in self.alternatives].index(type(value))
        return self.alternatives[at].encode(value)

    def shape(self) -> JSON:
        return {"oneOf": [alternative.schema() for alternative in self.alternatives]}


def _kinded(kind: str, fields: Mapping[str, Node[Any]], build: Callable[..., T], ref: str = "",
            description: str = "") -> Obj[T]:
    """The object of one ``kind`` of a ``Tagged``."""
    return Obj({"kind": Const(kind), **fields}, build, ref=ref, description=description)


def _items(*values: str) -> tuple[str, ...]:
    return values


# ---------------------------------------------------------------------------
# The declarations: the wire's one truth (docs/protocol.md sections 1 and 2).
# ---------------------------------------------------------------------------

# ``fullmatch`` and no ``$``: Python's ``$`` also matches before a final "\n".
ID = Pattern(
    "an Id", re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}"),
    "Send 1-128 characters: an ASCII letter or digit, then letters, digits, '_', '.', ':' or '-'.",
    ref="Id", description="streamId, attemptId, opId: 1-128 characters, an ASCII letter or digit first, then "
                          "letters, digits, '_', '.', ':' or '-'.")
SEGMENT = Pattern(
    "a Segment", re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"),
    "Send 1-64 characters: an ASCII letter or digit, then letters, digits, '_', '.' or '-'.",
    ref="Segment", description="projectId, orgId: 1-64 characters, an ASCII letter or digit first, then letters, "
                               "digits, '_', '.' or '-'. A parameter path segment.")
KEY = Pattern(
    "a Key", re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}"),
    "Send 1-128 characters: an ASCII letter or '_', then letters, digits or '_'.",
    ref="Key", description="An environment variable name: 1-128 characters, an ASCII letter or '_' first, then "
                           "letters, digits or '_'.")
REASON = Pattern(
    "a Reason", re.compile(r"[a-z][a-z0-9_]{0,63}"),
    "Send 1-64 characters: a lowercase ASCII letter, then lowercase letters, digits or '_'.",
    ref="Reason", description="A withhold or unavailable reason: 1-64 characters, a lowercase ASCII letter first, "
                              "then lowercase letters, digits or '_'.")
COUNT = Count(ref="Count", description="A JSON integer from 0 to 2^53-1. Never a boolean; never written with a "
                                       "fraction or exponent (1.0 and 1e2 are not Counts: beyond the schema).")
STAGING_ID = Pattern(
    "a StagingId", re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    "Send a lowercase canonical UUID such as '0f8fad5b-d9cb-469f-a165-70867728950e'.",
    ref="StagingId", description="A lowercase canonical UUID.")
POLICY_EPOCHS = ListOf(
    COUNT, "Counts", MAX_POLICY_EPOCHS,
    order=Ascending("policy-epochs-ascending", "", lambda epoch: epoch, "policy epochs are strictly ascending",
                    "Sort the epochs and remove duplicates."),
    ref="PolicyEpochs", description="The policy epochs a replica keeps: Counts, strictly ascending (the order is "
                                    "beyond the schema), at most 64.")
STAGED_REF = _kinded("staged", {"stagingId": STAGING_ID}, StagedRef, ref="StagedRef",
                     description="An immutable staged parameter, named by its staging id.")
LEGACY_REF = _kinded("legacy", {"ssmVersion": Count(1)}, LegacyRef, ref="LegacyRef",
                     description="One version (>= 1) of a project's legacy parameter.")
VALUE_REF: Tagged[ValueRef] = Tagged({"staged": STAGED_REF, "legacy": LEGACY_REF}, ref="ValueRef",
                   description="Where a record's value lives in the value store.")
HEAD = Obj(
    {"revision": COUNT, "generation": COUNT, "tombstone": Bool(), "valueRef": VALUE_REF}, Head,
    null_when=NullWhen("tombstone", "valueRef", "A live head: it has a value reference.",
                       "A tombstone: no value reference.", "Send null for a tombstone, or set tombstone to false.",
                       "Send the value's reference, or set tombstone to true."),
    ref="Head", description="A record's head: its counters, whether it is deleted, and its value's reference (null "
                            "exactly when it is a tombstone).")
BINDING: Tagged[Binding] = Tagged(
    {"omit": _kinded("omit", {}, BindOmit), "withhold": _kinded("withhold", {"reason": REASON}, BindWithhold)},
    nullable=True, ref="Binding",
    description="How the task binds the key: null (normally), omitted, or withheld for a reason.")
BINDING_STATE = Obj(
    {"key": KEY, "head": HEAD, "binding": BINDING, "policyEpoch": Nullable(COUNT), "listingGeneration": COUNT},
    BindingState, ref="BindingState", description="One record as the cloud describes it.")
MATERIALIZATION: Tagged[Materialization] = Tagged(
    {kind.value: _kinded(kind.value, {}, functools.partial(Materialization, kind, None)) if kind is MatKind.INSTALLED
     else _kinded(kind.value, {"reason": REASON}, functools.partial(Materialization, kind)) for kind in MatKind},
    kind_of=lambda materialization: materialization.kind.value,
    ref="Materialization", description="What the replica made of a record: its value installed, withheld (by the "
                                       "record itself) or unavailable (not fetched, or the fetch failed).")
RESULT = Obj({"state": BINDING_STATE, "materialization": MATERIALIZATION}, RecordResult, ref="Result",
             description="A record and what the replica made of it.")
CURSOR = Obj({"streamId": ID, "sequence": COUNT}, Cursor, ref="Cursor",
             description="A position in a delivery stream: the last sequence applied.")
#: The snapshot read's (and the diagnosis's) ``projectIds``: Segments; repeats pass (the read refuses them).
PROJECT_IDS = ListOf(SEGMENT, "Segments")

BEGIN = Obj(
    {"attempt": Obj({"streamId": ID, "attemptId": ID}, _items),  # encoded from the frame's stream_id, attempt_id
     "projectIds": ListOf(SEGMENT, "Segments", MAX_BEGIN_PROJECTS, unique=True)},
    lambda attempt, project_ids: BeginFrame(attempt[0], attempt[1], project_ids),
    unbuild=lambda frame: (frame, frame.project_ids), ref="BeginFrame",
    description="Closes the gate and opens a snapshot attempt over exactly these projects (unique, at most "
                f"{MAX_BEGIN_PROJECTS}).")
PAGE = Obj(
    {"opId": ID, "attemptId": ID, "projectId": SEGMENT, "after": Nullable(KEY), "recordVersion": COUNT,
     "records": ListOf(BINDING_STATE, "BindingStates", MAX_PAGE_RECORDS, order=Ascending(
         "page-keys-ascending", "key", attrgetter("key"), "page keys are strictly ascending",
         "Sort the records by key and remove duplicates.")),
     "complete": Bool()},
    PageFrame, after=After("page-keys-after", "records", "key", attrgetter("key"), "after",
                           "every page key follows after", "Send only keys after the page cursor."),
    ref="PageFrame", description="One page of a project's snapshot: records after the key `after` (null: the first "
                                 "page), keys strictly ascending (beyond the schema), at most "
                                 f"{MAX_PAGE_RECORDS}.")
APPLY = Obj(
    {"kind": Const(APPLY_KIND), "opId": ID, "projectId": SEGMENT, "recordVersion": Count(1), "state": BINDING_STATE,
     "delivery": Obj({"streamId": ID, "sequence": Count(1)}, Cursor), "reconciliationAttemptId": ID},
    ApplyFrame, optional=("reconciliationAttemptId",), ref="ApplyFrame",
    description="One ordered delta (a delivery): a record's new state at a project's next record version. "
                "`reconciliationAttemptId` is present exactly while a snapshot attempt is open (never null).")
PROJECT_VERSION = Obj({"projectId": SEGMENT, "recordVersion": COUNT}, ProjectVersion)
COMMIT = Obj(
    {"attemptId": ID, "highWater": CURSOR,
     "versions": ListOf(PROJECT_VERSION, "{projectId, recordVersion} objects", order=Ascending(
                            "commit-versions-ascending", "projectId", attrgetter("project_id"),
                            "versions are strictly ascending by projectId",
                            "Sort the versions by projectId and remove duplicates."))},
    CommitFrame, ref="CommitFrame",
    description="Promotes the attempt's staged view and opens the gate, if the high-water mark and every project's "
                "version match what was staged; versions strictly ascending by projectId (beyond the schema).")

#: Every declared definition of the contract, in the contract's order.
DECLARED: tuple[Node[Any], ...] = (ID, SEGMENT, KEY, REASON, COUNT, STAGING_ID, POLICY_EPOCHS, STAGED_REF, LEGACY_REF,
                              VALUE_REF, HEAD, BINDING, BINDING_STATE, MATERIALIZATION, RESULT, CURSOR, BEGIN, PAGE,
                              APPLY, COMMIT)


#: What the receipt MAC covers (section 2): an apply frame without its opId and reconciliationAttemptId.
DELIVERY_REQUEST = Obj({key: APPLY.fields[key] for key in ("kind", "projectId", "recordVersion", "state", "delivery")},
                       DeliveryRequest)

# ---------------------------------------------------------------------------
# The results and reads (section 3): encoded, never parsed (implementations produce them, and the harness holds
# every answer to these definitions, ``spec.validator``). A refusal code set is ``spec.schema``'s, by name.
# ---------------------------------------------------------------------------

_EPOCHS_CURSOR: dict[str, Node[Any]] = {"policyEpochs": POLICY_EPOCHS, "appliedThrough": CURSOR}


def _refused(replayed: Node[Any], consumed: Node[Any], code: Node[Any], description: str) -> Obj[ApplyRefused]:
    return Obj({"ok": Const(False), "replayed": replayed, "consumed": consumed, "attemptId": Nullable(ID),
                "code": code, **_EPOCHS_CURSOR}, ApplyRefused, description=description)


BEGIN_RESULT = Obj({"appliedThrough": CURSOR, "policyEpochs": POLICY_EPOCHS}, BeginResult, ref="BeginResult",
                   description="The result of `begin`.")
PAGE_RESULT: OneOf[Any] = OneOf((
    Obj({"ok": Const(True), "attemptId": ID, "projectId": SEGMENT, "after": Nullable(KEY), "recordVersion": COUNT,
         "results": ListOf(RESULT, "Results"), "complete": Bool(), **_EPOCHS_CURSOR}, PageOk),
    Obj({"ok": Const(False), "attemptId": ID, "code": Node(ref="PageRefusalCode"), **_EPOCHS_CURSOR}, PageRefused),
), ref="PageResult", description="The result of `page`: the page staged, or refused.")
APPLY_RESULT: OneOf[Any] = OneOf((
    Obj({"ok": Const(True), "replayed": Bool(), "attemptId": Nullable(ID), "projectId": SEGMENT,
         "recordVersion": COUNT, "result": RESULT, **_EPOCHS_CURSOR}, ApplyOk,
        description="Applied, or replayed from an applied receipt."),
    _refused(Const(False), Const(False), Node(ref="TransientRefusalCode"),
             "A transient refusal: nothing written, no receipt, the cursor unchanged."),
    _refused(Bool(), Const(True), Node(ref="ReceiptRefusalCode"),
             "Consumed: a refused receipt written and the cursor moved (replayed: answered from it)."),
    _refused(Const(True), Const(True), Const(RefusalCode.DELIVERY_CONFLICT.value),
             "A replay whose MAC differs from its receipt's: nothing written."),
), ref="ApplyResult", description="The result of `delivery`: applied (or replayed), or refused; a refusal that is "
                                  "`consumed` advanced the cursor and has a receipt, except a `delivery_conflict`.")
COMMIT_RESULT: OneOf[Any] = OneOf((
    Obj({"ok": Const(True), "attemptId": ID, **_EPOCHS_CURSOR}, CommitOk),
    Obj({"ok": Const(False), "attemptId": ID, "code": Node(ref="CommitRefusalCode"), **_EPOCHS_CURSOR}, CommitRefused),
), ref="CommitResult", description="The result of `commit`: promoted and open, or refused.")
STATUS = Obj(
    {"activated": Bool(), "gateOpen": Bool(), "attemptId": Nullable(ID), "orgId": Nullable(SEGMENT),
     "appliedThrough": Nullable(CURSOR), "policyEpochs": POLICY_EPOCHS, "projectIds": PROJECT_IDS}, Status,
    ref="Status", description="The result of `status`: the authority row and the live project ids (sorted), no value.")
SNAPSHOT_ENTRY: OneOf[SnapshotEntry] = OneOf((
    Obj({"state": BINDING_STATE, "materialization": MATERIALIZATION.variants[MatKind.INSTALLED.value],
         "value": Shape({"type": "string"})}, SnapshotEntry, description="Installed: its plaintext value."),
    Obj({"state": BINDING_STATE, "materialization": Tagged(
        {k: v for k, v in MATERIALIZATION.variants.items() if k != MatKind.INSTALLED.value},
        kind_of=MATERIALIZATION.kind_of), "value": Shape({"type": "null"})}, SnapshotEntry,
        description="Withheld or unavailable: no value."),
), pick=lambda entry: 0 if entry.materialization.kind is MatKind.INSTALLED else 1, ref="SnapshotEntry",
    description="One served record; `value` is its plaintext when installed, else null.")
SNAPSHOT_PROJECT = Obj({"projectId": SEGMENT, "recordVersion": COUNT, "entries": ListOf(SNAPSHOT_ENTRY, "entries")},
                       SnapshotProject)
SNAPSHOT = Nullable(Obj({"projects": ListOf(SNAPSHOT_PROJECT, "projects")}, Snapshot), ref="Snapshot",
                    description="The result of `snapshot`: the served view in the order the ids were asked for, or "
                                "null (the read fails closed).")
RECEIPT = Obj(
    {"streamId": ID, "sequence": COUNT, "ok": Bool(), "code": Nullable(Node(ref="ReceiptRefusalCode")),
     "result": Nullable(RESULT), "recordVersion": Nullable(COUNT)}, ReceiptView, ref="Receipt",
    description="One receipt of a consumed delivery, as `receipts` lists it (no MAC). Whether `ok` goes with a code "
                "or with a result and a version is beyond the schema (state-receipt-shape).")
DIAGNOSIS = Nullable(Obj(
    {"reason": Shape({"type": "string", "enum": [r.value for r in DiagnosisReason]},
                     description="Checked in this order."), "message": Shape({"type": "string"})}, Diagnosis),
    ref="Diagnosis", description="The result of `diagnostics`: null when `snapshot` of the same ids would serve, "
                                 "else why not (`message` is for people, names no value, and is not compared).")
READINESS = Obj({"ready": Bool()}, Readiness, ref="Readiness", description="The result of `ready`.")
CRASHED = Obj({"crashedAfterCommit": Count(1)}, Crashed, unbuild=lambda crashed: (crashed.after_commit,), ref="Crashed",
              description="A page or delivery with `crashAfterCommit: k` crashed right after its k-th write commit; "
                          "the replica was reopened and its gate closed.")
EMPTY = Obj({}, Done, ref="Empty", description="The result of `reset`, `close`, `restart` and `store.*`.")
#: Every declared result of the contract, in the contract's order.
RESULTS: tuple[Node[Any], ...] = (
    BEGIN_RESULT, PAGE_RESULT, APPLY_RESULT, COMMIT_RESULT, STATUS, SNAPSHOT_ENTRY, SNAPSHOT, RECEIPT,
    ListOf(RECEIPT, "Receipts", ref="Receipts", description="The result of `receipts`: sorted by streamId, then "
                                                            "sequence."),
    READINESS, DIAGNOSIS, CRASHED, EMPTY)


def definitions(nodes: tuple[Node[Any], ...] = DECLARED) -> dict[str, JSON]:
    """The JSON Schema of each of ``nodes`` (the frames' by default; ``RESULTS``), by its name in the contract
    (``spec.schema`` adds the ``$id``)."""
    return {node.ref: node.definition() for node in nodes}


# ---------------------------------------------------------------------------
# Public parsers. ``path`` names the root in messages (an adapter may pass,
# say, ``"request.frame"``); the defaults name the argument as the seed does.
# ---------------------------------------------------------------------------


def parse_begin(frame: Any, *, path: str = "begin") -> BeginFrame:
    """A ``BeginFrame``: ``{"attempt": {"streamId", "attemptId"}, "projectIds"}``."""
    return BEGIN.parse(frame, path)


def parse_policy_epochs(value: Any, *, path: str = "keptPolicyEpochs") -> tuple[int, ...]:
    """``PolicyEpochs``: at most 64 Counts, strictly ascending (begin's ``keptPolicyEpochs``)."""
    return POLICY_EPOCHS.parse(value, path)


def parse_org_id(value: Any, *, path: str = "orgId") -> str:
    """begin's ``orgId``: a ``Segment``."""
    return SEGMENT.parse(value, path)


def parse_project_ids(value: Any, *, path: str = "projectIds") -> tuple[str, ...]:
    """The snapshot read's ``projectIds``: Segments; repeats pass (the read refuses them)."""
    return PROJECT_IDS.parse(value, path)


def parse_page(frame: Any, *, path: str = "page") -> PageFrame:
    """A ``PageFrame``; keys strictly ascending, all after ``after``, at most 1000."""
    return PAGE.parse(frame, path)


def parse_apply(frame: Any, *, path: str = "apply") -> ApplyFrame:
    """An ``ApplyFrame`` (``kind`` ``env.replica.apply``; ``reconciliationAttemptId`` optional)."""
    return APPLY.parse(frame, path)


def parse_commit(frame: Any, *, path: str = "commit") -> CommitFrame:
    """A ``CommitFrame``; versions strictly ascending by ``projectId``."""
    return COMMIT.parse(frame, path)


def parse_binding_state(value: Any, *, path: str = "state") -> BindingState:
    """A ``BindingState``."""
    return BINDING_STATE.parse(value, path)


def parse_value_ref(value: Any, *, path: str = "valueRef") -> ValueRef:
    """A ``ValueRef`` (``StagedRef`` or ``LegacyRef``); null is not a ValueRef."""
    return VALUE_REF.parse(value, path)


def parse_materialization(value: Any, *, path: str = "materialization") -> Materialization:
    """A ``Materialization``: installed, or withheld/unavailable with a ``Reason``."""
    return MATERIALIZATION.parse(value, path)


def parse_record_result(value: Any, *, path: str = "result") -> RecordResult:
    """A ``Result``: ``{"state", "materialization"}``."""
    return RESULT.parse(value, path)


def parse_cursor(value: Any, *, path: str = "cursor") -> Cursor:
    """A ``Cursor``: ``{"streamId": Id, "sequence": Count}``."""
    return CURSOR.parse(value, path)


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


#: The declared types and results encode as declared (``Node.encode``).
for _type, _node in ((StagedRef, STAGED_REF), (LegacyRef, LEGACY_REF), (Head, HEAD), (BindOmit, BINDING),
                     (BindWithhold, BINDING), (BindingState, BINDING_STATE), (Materialization, MATERIALIZATION),
                     (RecordResult, RESULT), (Cursor, CURSOR), (BeginFrame, BEGIN), (PageFrame, PAGE),
                     (ApplyFrame, APPLY), (ProjectVersion, PROJECT_VERSION), (CommitFrame, COMMIT),
                     (DeliveryRequest, DELIVERY_REQUEST), (BeginResult, BEGIN_RESULT), (PageOk, PAGE_RESULT),
                     (PageRefused, PAGE_RESULT), (ApplyOk, APPLY_RESULT), (ApplyRefused, APPLY_RESULT),
                     (CommitOk, COMMIT_RESULT), (CommitRefused, COMMIT_RESULT), (Status, STATUS),
                     (SnapshotEntry, SNAPSHOT_ENTRY), (SnapshotProject, SNAPSHOT_PROJECT), (Snapshot, SNAPSHOT),
                     (ReceiptView, RECEIPT), (Readiness, READINESS), (Crashed, CRASHED), (Done, EMPTY),
                     (Diagnosis, DIAGNOSIS)):
    encode.register(_type, _node.encode)


@_register(Failed)
def _(value: Failed) -> _JsonObject:
    return {"type": value.kind, "message": value.message}  # section 5's error object


@_register(ReplicaError)
def _(value: ReplicaError) -> _JsonObject:
    return {"type": value.wire_type, "message": value.message}  # section 5's error object


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
