"""``envreplica.spec.wire``: every invalid field class is rejected with its path; frames round-trip.

Invalid cases start from a valid JSON frame and break exactly one thing, so a
rejection can only come from the rule under test; each asserts that the
message names the field path. Round trips are Hypothesis properties over
valid frames. ``canonical_json`` and ``json_bytes_len`` are checked against
fixed examples and, where Node.js is installed, against the seed's own
``exactJson`` and ``JSON.stringify``.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envreplica.spec.domain import (
    INSTALLED,
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
    CorruptReplica,
    Cursor,
    Done,
    Failed,
    Head,
    InvalidFrame,
    LegacyRef,
    Materialization,
    MatKind,
    PageFrame,
    PageOk,
    PageRefused,
    ProjectVersion,
    ReceiptView,
    RecordResult,
    RefusalCode,
    Snapshot,
    SnapshotEntry,
    SnapshotProject,
    StagedRef,
    Status,
    UnavailableReason,
    unavailable,
    withheld,
)
from envreplica.spec import wire
from envreplica.spec.wire import (
    canonical_json,
    encode,
    json_bytes_len,
    parse_apply,
    parse_begin,
    parse_binding_state,
    parse_commit,
    parse_cursor,
    parse_materialization,
    parse_org_id,
    parse_page,
    parse_policy_epochs,
    parse_project_ids,
    parse_record_result,
    parse_value_ref,
)

UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
MAX = 2**53 - 1

# ---------------------------------------------------------------------------
# Valid JSON frames to break.
# ---------------------------------------------------------------------------


def state_json(key: str = "API_KEY", tombstone: bool = False) -> dict:
    return {
        "key": key,
        "head": {
            "revision": 3,
            "generation": 2,
            "tombstone": tombstone,
            "valueRef": None if tombstone else {"kind": "staged", "stagingId": UUID},
        },
        "binding": {"kind": "withhold", "reason": "policy_says_no"},
        "policyEpoch": 7,
        "listingGeneration": 0,
    }


def begin_json() -> dict:
    return {"attempt": {"streamId": "stream-1", "attemptId": "attempt-1"}, "projectIds": ["p1", "p2"]}


def page_json() -> dict:
    legacy = state_json("B_KEY")
    legacy["head"]["valueRef"] = {"kind": "legacy", "ssmVersion": 4}
    legacy["binding"] = {"kind": "omit"}
    return {
        "opId": "op-1",
        "attemptId": "attempt-1",
        "projectId": "p1",
        "after": "AAA",
        "recordVersion": 5,
        "records": [state_json("A_KEY"), legacy, state_json("C_KEY", tombstone=True)],
        "complete": False,
    }


def apply_json() -> dict:
    return {
        "kind": "env.replica.apply",
        "opId": "op-2",
        "projectId": "p1",
        "recordVersion": 6,
        "state": state_json(),
        "delivery": {"streamId": "stream-1", "sequence": 9},
        "reconciliationAttemptId": "attempt-1",
    }


def commit_json() -> dict:
    return {
        "attemptId": "attempt-1",
        "highWater": {"streamId": "stream-1", "sequence": 0},
        "versions": [{"projectId": "p1", "recordVersion": 5}, {"projectId": "p2", "recordVersion": 0}],
    }


def result_json() -> dict:
    return {"state": state_json(), "materialization": {"kind": "withheld", "reason": "binding_omits"}}


BASES: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {
    "begin": (begin_json, parse_begin),
    "page": (page_json, parse_page),
    "apply": (apply_json, parse_apply),
    "commit": (commit_json, parse_commit),
    "result": (result_json, parse_record_result),
    "keptPolicyEpochs": (lambda: [1, 2, 3], parse_policy_epochs),
    "orgId": (lambda: "org-1", parse_org_id),
    "projectIds": (lambda: ["p1", "p1"], parse_project_ids),
    "cursor": (lambda: {"streamId": "s", "sequence": 1}, parse_cursor),
    "valueRef": (lambda: {"kind": "legacy", "ssmVersion": 1}, parse_value_ref),
    "materialization": (lambda: {"kind": "installed"}, parse_materialization),
    "state": (state_json, parse_binding_state),
}

_DELETE = object()


def _steps(path: str) -> list:
    """``page.records[1].head`` -> ``['records', 1, 'head']`` (the root names the base)."""
    steps: list = []
    for part in path.replace("[", ".[").split(".")[1:]:
        steps.append(int(part[1:-1]) if part.startswith("[") else part)
    return steps


def broken(path: str, value: Any) -> tuple[Callable[[Any], Any], Any]:
    """The parser for ``path``'s root and a valid frame with ``path`` set to ``value`` (or deleted)."""
    root = path.split(".")[0].split("[")[0]
    make, parse = BASES[root]
    frame = make()
    steps = _steps(path)
    if not steps:
        return parse, value
    target = frame
    for step in steps[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[steps[-1]]
    else:
        target[steps[-1]] = value
    return parse, frame


def assert_invalid(parse: Callable[[Any], Any], frame: Any, path: str, *words: str) -> str:
    with pytest.raises(InvalidFrame) as caught:
        parse(frame)
    message = str(caught.value)
    root = path.split(".")[0].split("[")[0]
    assert message.startswith(f"invalid {root}: {path} "), message
    assert "; got " in message and message.endswith("."), message
    for word in words:
        assert word in message, message
    return message


def test_bases_are_valid() -> None:
    for make, parse in BASES.values():
        parse(make())


# ---------------------------------------------------------------------------
# One parametrised test per invalid field class.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, value",
    [
        ("begin", ["not", "an", "object"]),
        ("begin.attempt", "stream-1/attempt-1"),
        ("begin.projectIds", "p1"),
        ("begin.projectIds[0]", 1),
        ("page.opId", 5),
        ("page.after", 3),
        ("page.records", {"0": state_json()}),
        ("page.records[0]", None),
        ("page.complete", "false"),
        ("page.complete", 0),
        ("page.records[0].head", []),
        ("page.records[0].head.tombstone", 1),
        ("page.records[0].head.valueRef", "staged"),
        ("page.records[0].binding", "omit"),
        ("page.records[0].policyEpoch", "7"),
        ("page.records[0].key", None),
        ("apply.state", None),
        ("apply.delivery", [1, 2]),
        ("apply.reconciliationAttemptId", 12),
        ("commit.highWater", "stream-1:0"),
        ("commit.versions", None),
        ("commit.versions[0]", ["p1", 5]),
        ("keptPolicyEpochs", {"0": 1}),
        ("keptPolicyEpochs", (1, 2)),
        ("orgId", None),
        ("projectIds", "p1"),
        ("materialization", "installed"),
        ("result.materialization.reason", 3),
    ],
)
def test_wrong_type(path: str, value: Any) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be")


@pytest.mark.parametrize(
    "path",
    [
        "begin.attempt",
        "begin.attempt.attemptId",
        "begin.projectIds",
        "page.opId",
        "page.after",
        "page.complete",
        "page.records[1].head.generation",
        "page.records[0].binding",
        "page.records[2].policyEpoch",
        "page.records[0].head.valueRef.stagingId",
        "page.records[0].head.valueRef.kind",
        "page.records[0].binding.reason",
        "apply.kind",
        "apply.delivery.sequence",
        "apply.state.listingGeneration",
        "commit.highWater.streamId",
        "commit.versions[0].recordVersion",
        "result.materialization.reason",
        "cursor.sequence",
    ],
)
def test_missing_key(path: str) -> None:
    parse, frame = broken(path, _DELETE)
    assert_invalid(parse, frame, path, "is required", "absent")


@pytest.mark.parametrize(
    "path, value",
    [
        ("begin.orgId", "org-1"),
        ("begin.attempt.opId", "op-1"),
        ("page.ok", True),
        ("page.records[0].head.ssmVersion", 1),
        ("page.records[0].head.valueRef.ssmVersion", 1),  # a staged ref with a legacy field
        ("page.records[1].binding.reason", "why"),  # omit carries no reason
        ("page.records[0].value", "secret"),
        ("apply.delivery.attemptId", "a"),
        ("apply.kind2", "env.replica.apply"),
        ("commit.versions[1].complete", True),
        ("result.value", None),
        ("materialization.reason", "tombstone"),  # installed carries no reason
        ("cursor.ok", True),
    ],
)
def test_extra_key(path: str, value: Any) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "is not allowed", "Remove the key")


COUNT_PATHS = [
    "page.recordVersion",
    "page.records[0].head.revision",
    "page.records[1].head.generation",
    "page.records[1].head.valueRef.ssmVersion",
    "page.records[2].policyEpoch",
    "page.records[2].listingGeneration",
    "apply.recordVersion",
    "apply.delivery.sequence",
    "commit.highWater.sequence",
    "commit.versions[1].recordVersion",
    "keptPolicyEpochs[2]",
    "cursor.sequence",
    "valueRef.ssmVersion",
]


@pytest.mark.parametrize("path", COUNT_PATHS)
@pytest.mark.parametrize("value", [True, False])
def test_bool_as_count(path: str, value: bool) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be a Count", "not a boolean", f"got {value!r}", "Send an integer.")


def test_bool_as_count_message_is_exact() -> None:
    parse, frame = broken("page.records[1].head.revision", True)
    with pytest.raises(InvalidFrame) as caught:
        parse(frame)
    assert str(caught.value) == (
        "invalid page: page.records[1].head.revision must be a Count (a JSON integer 0..2^53-1, "
        "not a boolean or float); got True. Send an integer."
    )
    assert caught.value.wire_type == "invalid"


@pytest.mark.parametrize("path", COUNT_PATHS)
@pytest.mark.parametrize("value", [1.0, 2.5, float("nan"), float("inf")])
def test_float_as_count(path: str, value: float) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be a Count", "Send an integer.")


@pytest.mark.parametrize("path", COUNT_PATHS)
@pytest.mark.parametrize("value", [-1, -(2**53)])
def test_negative_count(path: str, value: int) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be a Count", "9007199254740991")


@pytest.mark.parametrize("path", COUNT_PATHS)
@pytest.mark.parametrize("value", [2**53, 2**64, 10**30])
def test_count_above_max_safe_integer(path: str, value: int) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be a Count", "9007199254740991")


@pytest.mark.parametrize("path", COUNT_PATHS)
def test_count_bounds_are_inclusive(path: str) -> None:
    parse, frame = broken(path, MAX)
    parse(frame)


@pytest.mark.parametrize(
    "path",
    ["apply.recordVersion", "apply.delivery.sequence", "page.records[1].head.valueRef.ssmVersion", "valueRef.ssmVersion"],
)
def test_count_at_least_one(path: str) -> None:
    parse, frame = broken(path, 0)
    assert_invalid(parse, frame, path, "must be a Count >= 1")


@pytest.mark.parametrize("path", ["page.recordVersion", "commit.highWater.sequence", "commit.versions[0].recordVersion"])
def test_zero_is_a_count(path: str) -> None:
    parse, frame = broken(path, 0)
    parse(frame)


ID_PATHS = [
    "begin.attempt.streamId",
    "begin.attempt.attemptId",
    "page.opId",
    "page.attemptId",
    "apply.opId",
    "apply.delivery.streamId",
    "apply.reconciliationAttemptId",
    "commit.attemptId",
    "commit.highWater.streamId",
    "cursor.streamId",
]
BAD_IDS = ["", "-lead", "_lead", "a b", "a/b", "a\n", "é", "a" * 129, "a;b"]


@pytest.mark.parametrize("path", ID_PATHS)
@pytest.mark.parametrize("value", BAD_IDS)
def test_bad_id(path: str, value: str) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be an Id")


@pytest.mark.parametrize("value", ["a", "A:b.c-d_e", "0" + "x" * 127])
def test_good_id(value: str) -> None:
    parse, frame = broken("apply.opId", value)
    assert parse(frame).op_id == value


SEGMENT_PATHS = [
    "begin.projectIds[1]",
    "page.projectId",
    "apply.projectId",
    "commit.versions[0].projectId",
    "orgId",
    "projectIds[0]",
]
BAD_SEGMENTS = ["", ".lead", "a:b", "a/b", "a\n", "a" * 65, "a b"]
KEY_PATHS = ["page.records[0].key", "page.after", "apply.state.key", "state.key"]
BAD_KEYS = ["", "1ABC", "A-B", "A.B", "A B", "A\n", "Ä", "A" * 129]
REASON_PATHS = ["page.records[0].binding.reason", "result.materialization.reason", "apply.state.binding.reason"]
BAD_REASONS = ["", "Upper", "_lead", "1lead", "a-b", "a b", "a\n", "a" * 65]
STAGING_PATHS = ["page.records[0].head.valueRef.stagingId", "apply.state.head.valueRef.stagingId"]
BAD_STAGING_IDS = [UUID.upper(), UUID.replace("-", ""), "{" + UUID + "}", UUID + "\n", UUID[:-1], UUID + "0", "x" * 36]
#: Each string type: where it stands in the frames, and values that are not one.
BAD_STRINGS = [("Segment", SEGMENT_PATHS, BAD_SEGMENTS), ("Key", KEY_PATHS, BAD_KEYS),
               ("Reason", REASON_PATHS, BAD_REASONS), ("StagingId", STAGING_PATHS, BAD_STAGING_IDS)]


@pytest.mark.parametrize("kind, path, value", [(kind, path, value) for kind, paths, values in BAD_STRINGS
                                               for path in paths for value in values])
def test_a_bad_string_is_named_with_its_type(kind: str, path: str, value: str) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, f"must be a {kind}")


@pytest.mark.parametrize(
    "path, tombstone, ref",
    [
        ("page.records[0].head", True, {"kind": "staged", "stagingId": UUID}),
        ("page.records[2].head", True, {"kind": "legacy", "ssmVersion": 1}),
        ("page.records[2].head", False, None),
        ("apply.state.head", False, None),
    ],
)
def test_tombstone_value_ref_mismatch(path: str, tombstone: bool, ref: Any) -> None:
    parse, frame = broken(f"{path}.tombstone", tombstone)
    target = frame
    for step in _steps(path):
        target = target[step]
    target["valueRef"] = ref
    assert_invalid(parse, frame, f"{path}.valueRef", "tombstone <=> valueRef is null")


@pytest.mark.parametrize("path", ["page.records[1].head.valueRef.ssmVersion", "valueRef.ssmVersion"])
def test_ssm_version_zero(path: str) -> None:
    parse, frame = broken(path, 0)
    assert_invalid(parse, frame, path, "must be a Count >= 1", "got 0")


@pytest.mark.parametrize(
    "keys, bad",
    [
        (["B_KEY", "A_KEY"], 1),  # descending
        (["A_KEY", "A_KEY"], 1),  # duplicate
        (["A", "C", "B"], 2),
        (["a", "B"], 1),  # ASCII order: uppercase before lowercase
        (["AB", "A"], 1),  # a prefix sorts first
    ],
)
def test_unsorted_or_duplicate_page_keys(keys: list[str], bad: int) -> None:
    frame = page_json()
    frame["after"] = None
    frame["records"] = [state_json(k) for k in keys]
    assert_invalid(parse_page, frame, f"page.records[{bad}].key", "strictly ascending")


@pytest.mark.parametrize("after, first", [("A_KEY", "A_KEY"), ("B", "A_KEY"), ("a", "Z"), ("AB", "A")])
def test_page_key_not_after(after: str, first: str) -> None:
    frame = page_json()
    frame["after"] = after
    frame["records"] = [state_json(first)]
    assert_invalid(parse_page, frame, "page.records[0].key", "page.after")


def test_page_keys_after_cursor_pass() -> None:
    frame = page_json()
    frame["after"] = "A"
    frame["records"] = [state_json("AA"), state_json("B"), state_json("_"), state_json("a")]
    assert [r.key for r in parse_page(frame).records] == ["AA", "B", "_", "a"]


def _keys(n: int) -> list[str]:
    return [f"K{i:05d}" for i in range(n)]


def test_too_many_records() -> None:
    frame = page_json()
    frame["after"] = None
    frame["records"] = [state_json(k) for k in _keys(1001)]
    assert_invalid(parse_page, frame, "page.records", "at most 1000", "1001 entries")
    frame["records"].pop()
    assert len(parse_page(frame).records) == 1000


@pytest.mark.parametrize("ids, bad", [(["p1", "p1"], 1), (["a", "b", "c", "b"], 3), (["x", "y", "x"], 2)])
def test_duplicate_begin_project_ids(ids: list[str], bad: int) -> None:
    frame = begin_json()
    frame["projectIds"] = ids
    assert_invalid(parse_begin, frame, f"begin.projectIds[{bad}]", "must be unique")


def test_too_many_begin_project_ids() -> None:
    frame = begin_json()
    frame["projectIds"] = [f"p{i}" for i in range(257)]
    assert_invalid(parse_begin, frame, "begin.projectIds", "at most 256", "257 entries")
    frame["projectIds"].pop()
    assert len(parse_begin(frame).project_ids) == 256


def test_begin_project_ids_need_not_be_sorted() -> None:
    frame = begin_json()
    frame["projectIds"] = ["p2", "p1"]
    assert parse_begin(frame).project_ids == ("p2", "p1")


def test_snapshot_project_ids_allow_duplicates() -> None:
    assert parse_project_ids(["p1", "p1", "p0"]) == ("p1", "p1", "p0")
    assert parse_project_ids([]) == ()


@pytest.mark.parametrize(
    "ids, bad",
    [(["p2", "p1"], 1), (["p1", "p1"], 1), (["a", "c", "b"], 2), (["a", "B"], 1), (["ab", "a"], 1)],
)
def test_unsorted_commit_versions(ids: list[str], bad: int) -> None:
    frame = commit_json()
    frame["versions"] = [{"projectId": p, "recordVersion": 1} for p in ids]
    assert_invalid(parse_commit, frame, f"commit.versions[{bad}].projectId", "strictly ascending")


@pytest.mark.parametrize(
    "epochs, path, words",
    [
        ([2, 1], "keptPolicyEpochs[1]", ("strictly ascending",)),
        ([1, 1], "keptPolicyEpochs[1]", ("strictly ascending",)),
        ([0, 5, 9, 9], "keptPolicyEpochs[3]", ("strictly ascending",)),
        (list(range(65)), "keptPolicyEpochs", ("at most 64", "65 entries")),
    ],
)
def test_bad_policy_epochs(epochs: list[int], path: str, words: tuple[str, ...]) -> None:
    assert_invalid(parse_policy_epochs, epochs, path, *words)


def test_policy_epochs_bounds() -> None:
    assert parse_policy_epochs(list(range(64))) == tuple(range(64))
    assert parse_policy_epochs([]) == ()
    assert parse_policy_epochs([0, MAX]) == (0, MAX)


def test_reconciliation_attempt_id_null() -> None:
    parse, frame = broken("apply.reconciliationAttemptId", None)
    assert_invalid(parse, frame, "apply.reconciliationAttemptId", "JSON null is not allowed", "Omit the key")


def test_reconciliation_attempt_id_is_optional() -> None:
    parse, frame = broken("apply.reconciliationAttemptId", _DELETE)
    assert parse(frame).reconciliation_attempt_id is None


@pytest.mark.parametrize(
    "path, value",
    [
        ("apply.kind", "env.replica.ack"),
        ("apply.kind", "ENV.REPLICA.APPLY"),
        ("apply.kind", None),
        ("apply.kind", 1),
        ("page.records[0].head.valueRef.kind", "ssm"),
        ("page.records[0].head.valueRef.kind", None),
        ("page.records[0].binding.kind", "drop"),
        ("page.records[0].binding.kind", "Omit"),
        ("result.materialization.kind", "pending"),
        ("result.materialization.kind", ["withheld"]),
        ("materialization.kind", "Installed"),
    ],
)
def test_wrong_kind(path: str, value: Any) -> None:
    parse, frame = broken(path, value)
    assert_invalid(parse, frame, path, "must be")


def test_long_values_are_truncated_in_messages() -> None:
    parse, frame = broken("page.opId", "x" * 10_000)
    message = assert_invalid(parse, frame, "page.opId", "must be an Id")
    assert len(message) < 400 and "..." in message


def test_path_override_names_the_root() -> None:
    with pytest.raises(InvalidFrame, match=r"^invalid request: request\.frame\.opId "):
        parse_apply({**apply_json(), "opId": ""}, path="request.frame")


# ---------------------------------------------------------------------------
# Typed values and round trips.
# ---------------------------------------------------------------------------


def test_parse_builds_the_domain_values() -> None:
    page = parse_page(page_json())
    assert page.after == "AAA" and page.record_version == 5 and page.complete is False
    first, second, third = page.records
    assert first == BindingState(
        "A_KEY", Head(3, 2, False, StagedRef(UUID)), BindWithhold("policy_says_no"), 7, 0
    )
    assert second.head.value_ref == LegacyRef(4) and second.binding == BindOmit()
    assert third.head == Head(3, 2, True, None)
    assert parse_begin(begin_json()) == BeginFrame("stream-1", "attempt-1", ("p1", "p2"))
    assert parse_commit(commit_json()) == CommitFrame(
        "attempt-1", Cursor("stream-1", 0), (ProjectVersion("p1", 5), ProjectVersion("p2", 0))
    )
    apply = parse_apply(apply_json())
    assert apply.delivery == Cursor("stream-1", 9) and apply.reconciliation_attempt_id == "attempt-1"
    assert parse_materialization({"kind": "installed"}) == INSTALLED
    assert parse_materialization({"kind": "unavailable", "reason": "value_missing"}) == unavailable(
        UnavailableReason.VALUE_MISSING
    )
    assert parse_record_result(result_json()).materialization == withheld("binding_omits")
    binding_null = state_json()
    binding_null["binding"] = None
    assert parse_binding_state(binding_null).binding is None


ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}", fullmatch=True)
segments = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", fullmatch=True)
keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,127}", fullmatch=True)
reasons = st.from_regex(r"[a-z][a-z0-9_]{0,63}", fullmatch=True)
staging_ids = st.uuids().map(str)
counts = st.integers(0, MAX)
positive = st.integers(1, MAX)
value_refs = st.one_of(st.builds(StagedRef, staging_ids), st.builds(LegacyRef, positive))
heads = st.one_of(
    st.builds(Head, counts, counts, st.just(True), st.none()),
    st.builds(Head, counts, counts, st.just(False), value_refs),
)
bindings = st.one_of(st.none(), st.just(BindOmit()), st.builds(BindWithhold, reasons))


def binding_states(key=keys):
    return st.builds(BindingState, key, heads, bindings, st.one_of(st.none(), counts), counts)


materializations = st.one_of(
    st.just(INSTALLED),
    st.builds(Materialization, st.sampled_from([MatKind.WITHHELD, MatKind.UNAVAILABLE]), reasons),
)
record_results = st.builds(RecordResult, binding_states(), materializations)
cursors = st.builds(Cursor, ids, counts)
policy_epochs = st.lists(counts, unique=True, max_size=64).map(lambda xs: tuple(sorted(xs)))

begin_frames = st.builds(BeginFrame, ids, ids, st.lists(segments, unique=True, max_size=20).map(tuple))


@st.composite
def page_frames(draw) -> PageFrame:
    ordered = sorted(draw(st.lists(keys, unique=True, max_size=12)))
    after = None
    if ordered and draw(st.booleans()):
        after, ordered = ordered[0], ordered[1:]
    records = tuple(draw(binding_states(st.just(k))) for k in ordered)
    return PageFrame(draw(ids), draw(ids), draw(segments), after, draw(counts), records, draw(st.booleans()))


apply_frames = st.builds(
    ApplyFrame,
    ids,
    segments,
    positive,
    binding_states(),
    st.builds(Cursor, ids, positive),
    st.one_of(st.none(), ids),
)
commit_frames = st.builds(
    CommitFrame,
    ids,
    cursors,
    st.lists(segments, unique=True, max_size=12).flatmap(
        lambda ps: st.tuples(*(st.builds(ProjectVersion, st.just(p), counts) for p in sorted(ps)))
    ),
)

ROUND_TRIPS = [
    (begin_frames, parse_begin),
    (page_frames(), parse_page),
    (apply_frames, parse_apply),
    (commit_frames, parse_commit),
    (binding_states(), parse_binding_state),
    (value_refs, parse_value_ref),
    (materializations, parse_materialization),
    (record_results, parse_record_result),
    (cursors, parse_cursor),
]


@pytest.mark.parametrize(
    "strategy, parse", ROUND_TRIPS, ids=[p.__name__ for _, p in ROUND_TRIPS]
)
@given(data=st.data())
def test_round_trip(strategy, parse, data) -> None:
    value = data.draw(strategy)
    encoded = encode(value)
    # The encoding is plain JSON: it survives a trip through text unchanged.
    assert json.loads(json.dumps(encoded)) == encoded
    assert parse(encoded) == value
    assert parse(json.loads(canonical_json(value))) == value


@given(policy_epochs)
def test_policy_epochs_round_trip(epochs: tuple[int, ...]) -> None:
    assert parse_policy_epochs(encode(epochs)) == epochs


@given(st.lists(segments, max_size=10))
def test_project_ids_round_trip(project_ids: list[str]) -> None:
    assert parse_project_ids(encode(tuple(project_ids))) == tuple(project_ids)


@given(apply_frames)
def test_apply_encoding_omits_absent_reconciliation(frame: ApplyFrame) -> None:
    encoded = encode(frame)
    assert encoded["kind"] == "env.replica.apply"
    assert ("reconciliationAttemptId" in encoded) == (frame.reconciliation_attempt_id is not None)
    # The receipt MAC covers exactly kind, projectId, recordVersion, state, delivery.
    request = encode(frame.request())
    assert request == {k: encoded[k] for k in ("kind", "projectId", "recordVersion", "state", "delivery")}


# ---------------------------------------------------------------------------
# Encoding results and reads (section 3).
# ---------------------------------------------------------------------------

CUR = Cursor("stream-1", 4)
STATE = BindingState("K", Head(1, 1, False, LegacyRef(2)), None, None, 0)
RESULT = RecordResult(STATE, unavailable("materialization_pending"))
RESULT_JSON = {
    "state": {
        "key": "K",
        "head": {"revision": 1, "generation": 1, "tombstone": False, "valueRef": {"kind": "legacy", "ssmVersion": 2}},
        "binding": None,
        "policyEpoch": None,
        "listingGeneration": 0,
    },
    "materialization": {"kind": "unavailable", "reason": "materialization_pending"},
}
CUR_JSON = {"streamId": "stream-1", "sequence": 4}


@pytest.mark.parametrize(
    "value, expected",
    [
        (BeginResult(CUR, (1, 2)), {"appliedThrough": CUR_JSON, "policyEpochs": [1, 2]}),
        (
            PageOk("a", "p", None, 3, (RESULT,), True, (), CUR),
            {
                "ok": True, "attemptId": "a", "projectId": "p", "after": None, "recordVersion": 3,
                "results": [RESULT_JSON], "complete": True, "policyEpochs": [], "appliedThrough": CUR_JSON,
            },
        ),
        (
            PageRefused("a", RefusalCode.ACK_PAGE_TOO_LARGE, (1,), CUR),
            {"ok": False, "attemptId": "a", "code": "ack_page_too_large", "policyEpochs": [1], "appliedThrough": CUR_JSON},
        ),
        (
            ApplyOk(False, None, "p", 2, RESULT, (), CUR),
            {
                "ok": True, "replayed": False, "attemptId": None, "projectId": "p", "recordVersion": 2,
                "result": RESULT_JSON, "policyEpochs": [], "appliedThrough": CUR_JSON,
            },
        ),
        (
            ApplyRefused(True, True, "a", RefusalCode.DELIVERY_CONFLICT, (), CUR),
            {
                "ok": False, "replayed": True, "consumed": True, "attemptId": "a", "code": "delivery_conflict",
                "policyEpochs": [], "appliedThrough": CUR_JSON,
            },
        ),
        (CommitOk("a", (5,), CUR), {"ok": True, "attemptId": "a", "policyEpochs": [5], "appliedThrough": CUR_JSON}),
        (
            CommitRefused("a", RefusalCode.DELIVERY_INCOMPLETE, (), CUR),
            {"ok": False, "attemptId": "a", "code": "delivery_incomplete", "policyEpochs": [], "appliedThrough": CUR_JSON},
        ),
        (
            Status(False, False, None, None, None, (), ()),
            {
                "activated": False, "gateOpen": False, "attemptId": None, "orgId": None, "appliedThrough": None,
                "policyEpochs": [], "projectIds": [],
            },
        ),
        (
            Status(True, True, "a", "org", CUR, (1,), ("p1", "p2")),
            {
                "activated": True, "gateOpen": True, "attemptId": "a", "orgId": "org", "appliedThrough": CUR_JSON,
                "policyEpochs": [1], "projectIds": ["p1", "p2"],
            },
        ),
        (
            Snapshot((SnapshotProject("p", 3, (SnapshotEntry(STATE, INSTALLED, "v"),)),)),
            {
                "projects": [
                    {
                        "projectId": "p", "recordVersion": 3,
                        "entries": [{"state": RESULT_JSON["state"], "materialization": {"kind": "installed"}, "value": "v"}],
                    }
                ]
            },
        ),
        (
            ReceiptView("s", 1, True, None, RESULT, 2),
            {"streamId": "s", "sequence": 1, "ok": True, "code": None, "result": RESULT_JSON, "recordVersion": 2},
        ),
        (
            ReceiptView("s", 2, False, RefusalCode.DELIVERY_GAP, None, None),
            {"streamId": "s", "sequence": 2, "ok": False, "code": "delivery_gap", "result": None, "recordVersion": None},
        ),
        (Done(), {}),
        (Failed("corrupt", "boom"), {"type": "corrupt", "message": "boom"}),
        (CorruptReplica("boom"), {"type": "corrupt", "message": "boom"}),
        (InvalidFrame("bad"), {"type": "invalid", "message": "bad"}),
        (RefusalCode.STREAM_MISMATCH, "stream_mismatch"),
        (withheld("tombstone"), {"kind": "withheld", "reason": "tombstone"}),
        ((1, (2, "x")), [1, [2, "x"]]),
    ],
    ids=lambda v: type(v).__name__,
)
def test_encode_results(value: Any, expected: Any) -> None:
    encoded = encode(value)
    assert encoded == expected
    # Exact key order as in section 3 (it changes no length, but keeps output readable).
    if isinstance(expected, dict):
        assert list(encoded) == list(expected)
    assert json.loads(json.dumps(encoded)) == encoded
    assert "Refusal" not in canonical_json(value) and "MatKind" not in canonical_json(value)


def test_encoded_enums_are_plain_strings() -> None:
    encoded = encode(PageRefused("a", RefusalCode.ACK_PAGE_TOO_LARGE, (), CUR))
    assert type(encoded["code"]) is str
    assert type(encode(withheld("tombstone"))["kind"]) is str


@pytest.mark.parametrize("value", [1.5, {"a": 1.0}, [float("nan")], {1: "x"}, object(), {"a": {2, 3}}])
def test_encode_rejects_non_wire_values(value: Any) -> None:
    with pytest.raises(TypeError):
        encode(value)
    with pytest.raises(TypeError):
        canonical_json(value)


# ---------------------------------------------------------------------------
# canonical_json and json_bytes_len.
# ---------------------------------------------------------------------------


def test_canonical_json_sorts_keys_recursively() -> None:
    value = {"b": [{"z": 1, "a": None}, {"y": {"d": True, "c": False}}], "a": "x", "A": 0, "_": [], "aa": {}}
    assert canonical_json(value) == (
        '{"A":0,"_":[],"a":"x","aa":{},"b":[{"a":null,"z":1},{"y":{"c":false,"d":true}}]}'
    )


def test_canonical_json_of_a_frame_is_its_sorted_encoding() -> None:
    frame = parse_apply(apply_json())
    text = canonical_json(frame)
    assert " " not in text and "\n" not in text
    assert text == json.dumps(apply_json(), sort_keys=True, separators=(",", ":"))
    assert canonical_json(frame) == canonical_json(encode(frame))


def test_canonical_json_sorts_by_utf16_code_units() -> None:
    # U+1F600 is the pair D83D DE00, which sorts before U+FFFF in JavaScript.
    assert canonical_json({"\uffff": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uffff":1}'


def test_canonical_json_escapes_like_json_stringify() -> None:
    assert canonical_json("\x00\x1f\x7f\"\\\n\u2028é") == '"\\u0000\\u001f\x7f\\"\\\\\\n\u2028é"'
    assert canonical_json("\ud83d") == '"\\ud83d"'  # a lone surrogate is escaped
    assert canonical_json("\ud83d\ude00") == '"\U0001f600"'  # a pair is one character


def test_json_bytes_len_counts_utf8_bytes() -> None:
    assert json_bytes_len({}) == 2
    assert json_bytes_len({"a": "x"}) == len('{"a":"x"}')
    assert json_bytes_len("é") == 4  # quotes + 2 bytes
    assert json_bytes_len("€") == 5  # quotes + 3 bytes
    assert json_bytes_len("\U0001f600") == 6  # quotes + 4 bytes
    assert json_bytes_len("\ud83d") == 8  # quotes + the 6-character escape
    assert json_bytes_len("\n") == 4  # quotes + "\n" escaped
    assert json_bytes_len([1, True, None]) == len("[1,true,null]")
    assert json_bytes_len({"b": 1, "a": 2}) == len('{"b":1,"a":2}')


@given(page_frames())
def test_json_bytes_len_of_frames(frame: PageFrame) -> None:
    encoded = encode(frame)
    assert json_bytes_len(encoded) == len(json.dumps(encoded, separators=(",", ":")).encode())
    assert json_bytes_len(frame) == json_bytes_len(encoded)


# The seed's exactJson, verbatim, and its page-size measure.
NODE_SCRIPT = r"""
function exactJson(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(exactJson).join(",")}]`;
  const object = value;
  return `{${Object.keys(object)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${exactJson(object[key])}`)
    .join(",")}}`;
}
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(input.map((v) => [exactJson(v), Buffer.byteLength(JSON.stringify(v), "utf8")])));
"""

_ALPHABET = ["a", "B", "_", "é", "€", "\U0001f600", "\uffff", "\ue000", "\ud83d", "\ude00", "\x00", "\n", '"', "\\", "\u2028", "\x7f"]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    def text() -> str:
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(4)))

    pick = rng.randrange(7 if depth < 3 else 4)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.choice([0, 1, MAX, rng.randrange(MAX)])
    if pick in (2, 3):
        return text()
    if pick == 4:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {text(): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_agrees_with_the_seed_in_node() -> None:
    rng = random.Random(1234)
    values = [_random_json(rng) for _ in range(400)]
    values += [encode(parse_page(page_json())), encode(parse_apply(apply_json())), {"\uffff": 1, "\U0001f600": 2}]
    proc = subprocess.run(
        ["node", "-e", NODE_SCRIPT],
        input=json.dumps(values),  # ensure_ascii: lone surrogates travel as escapes
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=True,
    )
    expected = json.loads(proc.stdout)
    for value, (exact, size) in zip(values, expected, strict=True):
        assert canonical_json(value) == exact, value
        assert json_bytes_len(value) == size, value


def test_module_documents_itself() -> None:
    assert wire.__doc__ and "Leaves out on purpose" in wire.__doc__
