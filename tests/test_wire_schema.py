"""``spec.wire``'s parser and the contract's JSON Schema are one truth: both come from one declaration per type.

For every declared type (``wire.DECLARED``: the value types and the four frames), Hypothesis draws values from the
declaration itself (``instances`` walks its nodes, so a field added there is drawn here with no change), some of
them broken at one place (``broken``: a key removed or added, a value of another JSON type or out of range, a list
of 1,001 items), and holds the parser to ``jsonschema`` (``schema_check.conforms``, the draft 2020-12
reference implementation) on each:

* the parser accepts the value => it conforms to the type's definition;
* the parser refuses it for a rule of the schema (an ``InvalidFrame`` whose ``wire.beyond`` is None) => it does not
  conform (so: it conforms => the parser accepts it, or refuses it for a rule beyond the schema);
* a refusal for a rule beyond the schema names one of ``spec.schema.BEYOND_THE_SCHEMA``.

Two mutants show the property catches a parser and a schema that disagree. The results (never parsed: declared for
their encoding and their definitions) are held the same way from the other side: each kind of result, drawn as a
domain value, encodes to a value of its definition. The example count is the budget's (``tests/budget.py``): a few
seconds at ``dev``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, Optional

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from envreplica.spec import schema as S
from envreplica.spec import wire
from envreplica.spec.domain import (
    COMMIT_REFUSALS,
    PAGE_REFUSALS,
    RECEIPT_REFUSALS,
    TRANSIENT_REFUSALS,
    ApplyOk,
    ApplyRefused,
    BeginResult,
    CommitOk,
    CommitRefused,
    Crashed,
    Cursor,
    Diagnosis,
    DiagnosisReason,
    Done,
    InvalidFrame,
    LegacyRef,
    MatKind,
    PageOk,
    PageRefused,
    Readiness,
    ReceiptView,
    RefusalCode,
    Snapshot,
    SnapshotEntry,
    SnapshotProject,
    Status,
)

from budget import examples
from schema_check import conforms, places, put

EXAMPLES = examples(ci=200, dev=30)
NAMES = [node.ref for node in wire.DECLARED]

# ---------------------------------------------------------------------------
# Values drawn from a declaration.
# ---------------------------------------------------------------------------


def _ordered(items: list[Any], order: wire.Ascending) -> list[Any]:
    """``items`` sorted and without repeats by the order's key, read from the JSON (the item, or its field)."""
    key: Callable[[Any], Any] = (lambda item: item[order.field]) if order.field else (lambda item: item)
    return list({key(item): item for item in sorted(items, key=key)}.values())


def instances(node: wire.Node[Any]) -> st.SearchStrategy[Any]:
    """JSON values the declaration ``node`` describes; the lists with an order sorted in most of them, so that the
    rules beyond the schema are both kept and broken."""
    if isinstance(node, wire.Pattern):
        return st.from_regex(node.regex, fullmatch=True)
    if isinstance(node, wire.Count):
        low = node.minimum
        return st.one_of(st.integers(low, low + 3), st.integers(low, wire.MAX_COUNT), st.just(wire.MAX_COUNT))
    if isinstance(node, wire.Bool):
        return st.booleans()
    if isinstance(node, wire.Const):
        return st.just(node.constant)
    if isinstance(node, wire.Nullable):
        return st.none() | instances(node.node)
    if isinstance(node, wire.ListOf):
        return _lists(node)
    if isinstance(node, wire.Obj):
        return _objects(node)
    if isinstance(node, wire.Tagged):
        variants = st.one_of([instances(variant) for variant in node.variants.values()])
        return st.none() | variants if node.nullable else variants
    raise TypeError(f"no strategy for {type(node).__name__}: add one")


def _lists(node: wire.ListOf[Any]) -> st.SearchStrategy[list[Any]]:
    items = st.lists(instances(node.item), max_size=min(node.max_items or 4, 4),
                     unique_by=(lambda item: json.dumps(item, sort_keys=True)) if node.unique else None)
    order = node.order
    if order is None:
        return items
    return st.tuples(items, st.integers(0, 3)).map(lambda drawn: drawn[0] if drawn[1] == 0 else _ordered(drawn[0],
                                                                                                         order))


@st.composite
def _objects(draw: Any, node: wire.Obj[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in node.fields.items():
        if key in node.optional and draw(st.booleans()):
            continue
        if node.null_when is not None and key == node.null_when.field and out[node.null_when.flag]:
            out[key] = None
            continue
        out[key] = draw(instances(field))
    after = node.after
    if after is not None and out[after.items] and draw(st.integers(0, 3)):
        first = out[after.items][0][after.field]
        out[after.bound] = None if draw(st.booleans()) else first[:-1] or None  # keeps the rule: a key before first
    return out


# ---------------------------------------------------------------------------
# The same values broken at one place.
# ---------------------------------------------------------------------------

#: Values of every JSON type, and out of range, that a break puts at a path.
ODD = [None, True, False, 0, -1, 1, 1.0, 2.5, 2**53, -(2**53), "", "x", "A" * 129, "a\n", "é", "env.replica.apply",
       "0f8fad5b-d9cb-469f-a165-70867728950e", [], [1], {}, {"kind": "omit"}, {"kind": "legacy", "ssmVersion": 1}]


def _changes(here: Any) -> list[Any]:
    """What a break may put in place of ``here``."""
    changes: list[Any] = list(ODD)
    if isinstance(here, dict):
        changes += [{k: v for k, v in here.items() if k != key} for key in here]
        changes += [{**here, "extra": 1}, {**here, "kind": "nope"}]
    if isinstance(here, list) and here:
        changes += [[*here, here[-1]], [here[0]] * 1001, list(reversed(here))]
    return changes


@st.composite
def broken(draw: Any, value: Any) -> Any:
    """``value`` with one place replaced by one of ``_changes``."""
    path, here = draw(st.sampled_from(list(places(value))))
    return put(value, path, draw(st.sampled_from(_changes(here))))


# ---------------------------------------------------------------------------
# The property.
# ---------------------------------------------------------------------------


def disagreement(node: wire.Node[Any], value: Any, conforming: Callable[[Any], bool]) -> Optional[str]:
    """Why the parser of ``node`` and the schema (``conforming``) disagree on ``value``; None when they agree."""
    try:
        node.parse(value, "frame")
    except InvalidFrame as error:
        rule = wire.beyond(error)
        if rule is not None:
            return None if rule in S.BEYOND_THE_SCHEMA else f"a rule not in BEYOND_THE_SCHEMA ({rule!r}): {error}"
        return f"the parser refuses for a rule of the schema, the schema admits it: {error}" if conforming(
            value) else None
    return None if conforming(value) else "the parser accepts it, the schema does not"


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_parser_and_the_schema_agree(name: str, data: Any) -> None:
    node = wire.DECLARED[NAMES.index(name)]
    value = data.draw(instances(node), label="declared")
    if data.draw(st.booleans(), label="broken"):
        value = data.draw(broken(value), label="value")
    else:  # drawn as declared: at most a rule beyond the schema is broken (a list's order)
        try:
            node.parse(value, "frame")
        except InvalidFrame as error:
            assert wire.beyond(error), error
    problem = disagreement(node, value, lambda v: conforms(name, v))
    assert problem is None, f"{name} {json.dumps(value)[:300]}: {problem}"


def test_the_declarations_are_the_contracts_definitions() -> None:
    """The schema's value types and frames are the declarations' (``spec.schema`` writes none of them itself), and
    every rule beyond the schema a declaration checks is one ``BEYOND_THE_SCHEMA`` lists."""
    defs = S.definitions()
    for name, definition in wire.definitions().items():
        assert defs[name] == {"$id": name, **definition}
    declared = {"integer-literals"} | {node.order.rule for node in _walk() if isinstance(node, wire.ListOf)
                                       and node.order is not None}
    declared |= {node.after.rule for node in _walk() if isinstance(node, wire.Obj) and node.after is not None}
    assert declared == {"integer-literals", "policy-epochs-ascending", "page-keys-ascending", "page-keys-after",
                        "commit-versions-ascending"}
    assert declared <= set(S.BEYOND_THE_SCHEMA)
    assert all("Why outside:" in why for why in S.BEYOND_THE_SCHEMA.values())


def _walk() -> Iterator[wire.Node[Any]]:
    todo: list[wire.Node[Any]] = list(wire.DECLARED)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (wire.Nullable,)):
            todo.append(node.node)
        elif isinstance(node, wire.ListOf):
            todo.append(node.item)
        elif isinstance(node, wire.Obj):
            todo.extend(node.fields.values())
        elif isinstance(node, wire.Tagged):
            todo.extend(node.variants.values())


# ---------------------------------------------------------------------------
# The property catches a disagreement (test the tester).
# ---------------------------------------------------------------------------

_FIND = settings(max_examples=2000, database=None, derandomize=True, phases=[Phase.generate],
                 suppress_health_check=list(HealthCheck))


def _fresh_conforms(definitions: dict[str, Any], name: str) -> Callable[[Any], bool]:
    document = {"$schema": S.DIALECT, "$id": S.BASE + "contract.json",
                "$defs": {n: {"$id": n, **d} for n, d in definitions.items()}}
    registry = Registry().with_resource(document["$id"], DRAFT202012.create_resource(document)).crawl()
    return Draft202012Validator({"$ref": S.BASE + name}, registry=registry).is_valid


def _values(node: wire.Node[Any]) -> st.SearchStrategy[Any]:
    return instances(node).flatmap(lambda value: st.just(value) | broken(value))


def test_a_parser_looser_than_its_schema_is_caught() -> None:
    """A LegacyRef parser that takes version 0 (its schema says >= 1)."""
    loose = wire.Obj({"kind": wire.Const("legacy"), "ssmVersion": wire.Count(0)}, LegacyRef)
    schema = _fresh_conforms(wire.definitions(), "LegacyRef")
    found = find(_values(wire.LEGACY_REF), lambda v: disagreement(loose, v, schema) is not None, settings=_FIND)
    assert found["ssmVersion"] == 0


def test_a_schema_looser_than_its_parser_is_caught() -> None:
    """A Cursor schema whose Count has no maximum."""
    definitions = wire.definitions()
    definitions["Count"] = {k: v for k, v in definitions["Count"].items() if k != "maximum"}
    schema = _fresh_conforms(definitions, "Cursor")
    found = find(_values(wire.CURSOR), lambda v: disagreement(wire.CURSOR, v, schema) is not None, settings=_FIND)
    assert found["sequence"] > wire.MAX_COUNT


# ---------------------------------------------------------------------------
# The results: encoded as declared, and each encoding is its definition's.
# ---------------------------------------------------------------------------


def _parsed(node: wire.Node[Any]) -> st.SearchStrategy[Any]:
    """Domain values of a declared type with no order rule (drawn as JSON, then parsed)."""
    return instances(node).map(lambda value: node.parse(value, "value"))


_EPOCHS = st.lists(st.integers(0, wire.MAX_COUNT), unique=True, max_size=4).map(lambda xs: tuple(sorted(xs)))
_IDS, _SEGMENTS = _parsed(wire.ID), _parsed(wire.SEGMENT)
_CURSORS, _RESULTS = _parsed(wire.CURSOR), _parsed(wire.RESULT)
_COUNTS, _MAYBE_IDS = st.integers(0, wire.MAX_COUNT), st.none() | _parsed(wire.ID)


def _codes(codes: Any) -> st.SearchStrategy[RefusalCode]:
    return st.sampled_from(sorted(codes, key=lambda code: code.value))


def _entries(state: Any, materialization: Any) -> st.SearchStrategy[SnapshotEntry]:
    text = st.text(max_size=5) if materialization.kind is MatKind.INSTALLED else st.none()
    return text.map(lambda value: SnapshotEntry(state, materialization, value))


#: (the definition a result's encoding follows, domain values of it) for every kind of result.
RESULT_VALUES: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("BeginResult", st.builds(BeginResult, _CURSORS, _EPOCHS)),
    ("PageResult", st.builds(PageOk, _IDS, _SEGMENTS, st.none() | _parsed(wire.KEY), _COUNTS,
                             st.lists(_RESULTS, max_size=3).map(tuple), st.booleans(), _EPOCHS, _CURSORS)),
    ("PageResult", st.builds(PageRefused, _IDS, _codes(PAGE_REFUSALS), _EPOCHS, _CURSORS)),
    ("ApplyResult", st.builds(ApplyOk, st.booleans(), _MAYBE_IDS, _SEGMENTS, _COUNTS, _RESULTS, _EPOCHS, _CURSORS)),
    ("ApplyResult", st.builds(ApplyRefused, st.just(False), st.just(False), _MAYBE_IDS, _codes(TRANSIENT_REFUSALS),
                              _EPOCHS, _CURSORS)),
    ("ApplyResult", st.builds(ApplyRefused, st.booleans(), st.just(True), _MAYBE_IDS, _codes(RECEIPT_REFUSALS),
                              _EPOCHS, _CURSORS)),
    ("ApplyResult", st.builds(ApplyRefused, st.just(True), st.just(True), _MAYBE_IDS,
                              st.just(RefusalCode.DELIVERY_CONFLICT), _EPOCHS, _CURSORS)),
    ("CommitResult", st.builds(CommitOk, _IDS, _EPOCHS, _CURSORS)),
    ("CommitResult", st.builds(CommitRefused, _IDS, _codes(COMMIT_REFUSALS), _EPOCHS, _CURSORS)),
    ("Status", st.builds(Status, st.booleans(), st.booleans(), _MAYBE_IDS, st.none() | _SEGMENTS,
                         st.none() | _CURSORS, _EPOCHS, st.lists(_SEGMENTS, max_size=3).map(tuple))),
    ("Snapshot", st.none() | st.builds(Snapshot, st.lists(st.builds(
        SnapshotProject, _SEGMENTS, _COUNTS, st.lists(st.tuples(_parsed(wire.BINDING_STATE), _parsed(
            wire.MATERIALIZATION)).flatmap(lambda pair: _entries(*pair)), max_size=3).map(tuple)),
        max_size=2).map(tuple))),
    ("Receipt", st.builds(ReceiptView, _IDS, _COUNTS, st.just(True), st.none(), _RESULTS, _COUNTS)),
    ("Receipt", st.builds(ReceiptView, _IDS, _COUNTS, st.just(False), _codes(RECEIPT_REFUSALS), st.none(),
                          st.none())),
    ("Readiness", st.builds(Readiness, st.booleans())),
    ("Diagnosis", st.none() | st.builds(Diagnosis, st.sampled_from(list(DiagnosisReason)), st.text(max_size=5))),
    ("Crashed", st.builds(Crashed, st.integers(1, wire.MAX_COUNT))),
    ("Empty", st.just(Done())),
]


@pytest.mark.parametrize("name, values", RESULT_VALUES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(RESULT_VALUES)])
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_result_encodes_to_its_definition(name: str, values: Any, data: Any) -> None:
    value = data.draw(values)
    assert conforms(name, wire.encode(value)), (name, wire.encode(value))


def test_every_result_definition_is_exercised() -> None:
    assert {name for name, _ in RESULT_VALUES} | {"Receipts", "SnapshotEntry"} == {n.ref for n in wire.RESULTS}


def test_a_result_that_breaks_its_definition_is_encoded_as_it_is() -> None:
    """A constant of a result's definition (``replayed`` false in a transient refusal) is written from the value, so
    that a wrong answer stays wrong for the schema to refuse, never mended by the encoder."""
    wrong = ApplyRefused(True, False, None, RefusalCode.DELIVERY_GAP, (), Cursor("s", 1))
    assert wire.encode(wrong)["replayed"] is True and not conforms("ApplyResult", wire.encode(wrong))
    right = ApplyRefused(False, False, None, RefusalCode.DELIVERY_GAP, (), Cursor("s", 1))
    assert conforms("ApplyResult", wire.encode(right))
