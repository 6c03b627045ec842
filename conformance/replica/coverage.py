"""What lockstep runs reached: ``LockstepCoverage``, the process-wide ``COVERAGE``, ``print_coverage``.

Counts ops, refusal codes, materialization reasons (read from results,
nested ones included), error types, gate transitions, and the classes of
values the replica held (``VALUE_CLASSES``, counted in the model's state
after each step, live and staged; the read-back compares every one of them
with the implementation's, opened from its seal: a pass that never held a
lone surrogate says nothing about F3). The gate
transitions are reported by the machine's tracing model driver
(``machine._TracingModel``); this module only counts them.

Production-shaped inputs (``INPUT_ITEMS``, counted in ``inputs``
by ``input_items`` per top-level request and ``sequence_items`` per
example): streams past sequence 10, 100 and 1,000 and replays below those
boundaries; snapshots asked in a task's (unsorted) order and served, with an
id twice while serving (null), with a project id other than p1/p2; keys of
128 characters installed, legacy keys at the Segment rule's length bound
(64: installed; 65: ``value_reference_invalid``); pages whose
acknowledgement (``page_ack_bytes``, the seed's ``pageFits`` count) is
exactly the bound (accepted) and one byte over (refused); each value class
installed and served by a snapshot. Every item is a row, so every one is
required, like the rest.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional

from envreplica.checker.coverage import (
    BINDING_REASON_ITEM,
    MATERIALIZATION_ITEMS,
    CoverageCounts,
    print_coverage_table,
)
from envreplica.conformance.drivers import OPS
from envreplica.conformance.replica.records import MOVES, move_label, moved_facets
from envreplica.spec.domain import RefusalCode, WithheldReason
from envreplica.spec.gate import TRANSITIONS, GateEdge


def _mat_item(mat: Any) -> Optional[str]:
    if not isinstance(mat, dict):
        return None
    kind = mat.get("kind")
    if kind == "installed":
        return "installed"
    reason = mat.get("reason")
    if kind == "withheld" and reason not in {w.value for w in WithheldReason}:
        return BINDING_REASON_ITEM
    return f"{kind}: {reason}"


_ERROR_TYPES = ("invalid", "corrupt", "unsupported")

#: Ops the lockstep never sends as a step: ``state`` is the harness's own out-of-band read of an
#: external implementation's tables (``external.StateProbe``), not a request under test.
OUT_OF_BAND_OPS = frozenset({"state"})

#: ``crashAfterCommit`` (docs/protocol.md section 6): a page / delivery that died right after its
#: 1st, 2nd or 3rd write commit, and a delivery that crashed before its receipt, sent again.
RESENT_ITEM = "half-applied delivery re-sent"
CRASH_ITEMS = tuple(f"{op} after commit {k}" for op in ("page", "delivery") for k in (1, 2, 3)) + (RESENT_ITEM,)

#: Classes of stored values (a value may be in several), each a string the wire allows.
VALUE_CLASSES: dict[str, Callable[[str], object]] = {  # truthy when the value is of the class
    "ascii": lambda v: v.isascii() and v != "",
    "empty": lambda v: v == "",
    "NUL": lambda v: "\x00" in v,
    # Fetched with a lone surrogate: kept as is (fixed), or as U+FFFD (seed, F3; no drawn value holds U+FFFD).
    "lone surrogate": re.compile("[\ud800-\udfff\ufffd]").search,
    "non-BMP": re.compile("[\U00010000-\U0010ffff]").search,
    "over 64 KiB": lambda v: len(v) > 21845 and len(v.encode("utf-8", "surrogatepass")) > 65536,
}


@dataclass
class LockstepCoverage(CoverageCounts):
    """What lockstep runs reached: ops, refusal codes, materialization reasons, errors, gate moves."""

    ops: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    edges: Counter = field(default_factory=Counter)
    values: Counter = field(default_factory=Counter)
    crashes: Counter = field(default_factory=Counter)
    inputs: Counter = field(default_factory=Counter)  # production-shaped inputs: ``INPUT_ITEMS``

    def observe(self, request: Any, response: Any) -> None:
        """Count one request and the model's response (nested ones included)."""
        op = request.get("op") if isinstance(request, dict) else None
        if isinstance(op, str) and op in OPS:
            self.ops[op] += 1
        if not isinstance(response, dict):
            return
        if response.get("ok") is True:
            self._observe_result(op, response.get("result"))
        elif isinstance(response.get("error"), dict):
            self.errors[response["error"].get("type")] += 1
        nested = response.get("nested")
        inner = request.get("duringFetch") if isinstance(request, dict) else None
        if isinstance(nested, list) and isinstance(inner, list):
            for sub_request, sub_response in zip(inner, nested):
                self.observe(sub_request, sub_response)

    def _observe_result(self, op: Optional[str], result: Any) -> None:
        if op in ("page", "delivery") and isinstance(result, dict) and "crashedAfterCommit" in result:
            self.crashes[f"{op} after commit {result['crashedAfterCommit']}"] += 1
            return
        if op in ("page", "delivery", "commit") and isinstance(result, dict):
            if result.get("ok") is False:
                self.refusals[result.get("code")] += 1
            elif op == "page":
                for item in result.get("results") or ():
                    self._mat(item.get("materialization"))
            elif op == "delivery" and isinstance(result.get("result"), dict):
                self._mat(result["result"].get("materialization"))
        elif op == "snapshot" and isinstance(result, dict):
            for project in result.get("projects") or ():
                for entry in project.get("entries") or ():
                    self._mat(entry.get("materialization"))
        elif op == "receipts" and isinstance(result, list):
            for receipt in result:
                if isinstance(receipt, dict) and isinstance(receipt.get("result"), dict):
                    self._mat(receipt["result"].get("materialization"))

    def _mat(self, mat: Any) -> None:
        item = _mat_item(mat)
        if item is not None:
            self.reasons[item] += 1

    def observe_edge(self, edge: GateEdge) -> None:
        self.edges[edge] += 1

    def rows(self) -> list[tuple[str, str, int]]:
        """(group, item, count) for every item a run should reach."""
        out = [("op", op, self.ops.get(op, 0)) for op in OPS if op not in OUT_OF_BAND_OPS]
        out += [("refusal", c.value, self.refusals.get(c.value, 0)) for c in RefusalCode]
        out += [("materialization", item, self.reasons.get(item, 0)) for item in MATERIALIZATION_ITEMS]
        out += [("error", kind, self.errors.get(kind, 0)) for kind in _ERROR_TYPES]
        out += [("gate", e.label(), self.edges.get(e, 0)) for e in TRANSITIONS]
        out += [("stored value", name, self.values.get(name, 0)) for name in VALUE_CLASSES]
        out += [("crash", item, self.crashes.get(item, 0)) for item in CRASH_ITEMS]
        out += [(group, item, self.inputs.get(item, 0)) for group, item in INPUT_ITEMS]
        return out

# ---------------------------------------------------------------------------
# Production-shaped inputs: long streams, task orders, the Key rule, values, the ack bound
# ---------------------------------------------------------------------------

#: Examples whose stream consumed a sequence at or past each power of ten (``sequence_items``).
SEQUENCE_BOUNDS = (10, 100, 1000)


def sequence_item(n: int) -> str:
    """The coverage item of an example that consumed a sequence at or past ``n``."""
    return f"an example consumed >= {n:,}"


#: The fields of a legacy (v1) envelope (``generate.LEGACY_FIELD_TYPES`` draws another JSON type for each).
LEGACY_FIELDS = ("v", "kind", "projectId", "key", "value")

FAST_FORWARDED = "fast-forwarded deliveries"
SHORTER_REPLAY = "replayed below a decimal boundary"
INPUT_ITEMS = (
    *(("sequence", sequence_item(n)) for n in SEQUENCE_BOUNDS),
    ("sequence", FAST_FORWARDED),  # machine.do_ffwd: deliveries sent in a fast-forward (not counted as ops)
    ("sequence", SHORTER_REPLAY),  # a delivery at a consumed sequence of fewer digits than the cursor, replayed
    ("snapshot", "unsorted task order, served"),
    ("snapshot", "duplicate ids while serving: null"),
    ("snapshot", "project id other than p1/p2, served"),
    ("key", "128 characters, installed"),
    ("key", "legacy, 64 characters, installed"),
    ("key", "legacy, 65 characters: value_reference_invalid"),
    ("ack bound", "page exactly at the bound, accepted"),
    ("ack bound", "page 1 byte over the bound, refused"),
    *(("served value", name) for name in VALUE_CLASSES),  # a snapshot served an installed value of the class
    # A whole page at the project's live version whose records differ from the live ones by membership only.
    ("live-version page", "a live record left out"),
    ("live-version page", "a record added"),
    # A record sent (in a page or a delivery) that moves several of its fields at once against the one the
    # replica holds: every combination the record domain allows.
    *(("record move", move) for move in MOVES),
    # A legacy envelope whose field has another JSON type, read (the seed: value_unavailable).
    *(("legacy envelope", f"{field} of another JSON type, read") for field in LEGACY_FIELDS),
)
_MAX_REASON = "x" * 64


def page_ack_bytes(frame: dict, states, epochs, applied: dict) -> int:
    """The bytes the seed's ``pageFits`` counts for a page frame (JSON): its acknowledgement with
    ``states``, each result with the longest reason, ``Buffer.byteLength(JSON.stringify(ack))``."""
    from envreplica.spec import wire

    results = [{"state": s, "materialization": {"kind": "withheld" if s["head"]["tombstone"] else "unavailable",
                                                "reason": _MAX_REASON}} for s in states]
    ack = {"kind": "env.replica.ack", "opId": frame["opId"], "ok": True, "phase": "page",
           "attemptId": frame["attemptId"], "projectId": frame["projectId"], "after": frame["after"],
           "recordVersion": frame["recordVersion"], "results": results, "complete": frame["complete"],
           "policyEpochs": list(epochs), "appliedThrough": applied}
    return wire.json_bytes_len(ack)


def sequence_items(max_applied: int) -> Counter:
    """The sequence items one example reached (its highest consumed sequence)."""
    return Counter(sequence_item(n) for n in SEQUENCE_BOUNDS if max_applied >= n)


def _key_items(item: Any) -> list[str]:
    try:
        key, ref, kind = item["state"]["key"], item["state"]["head"]["valueRef"], item["materialization"]["kind"]
        reason = item["materialization"].get("reason")
    except (KeyError, TypeError):
        return []
    legacy = isinstance(ref, dict) and ref.get("kind") == "legacy"
    if kind == "installed" and len(key) == 128:
        return ["128 characters, installed"]
    if legacy and kind == "installed" and len(key) == 64:
        return ["legacy, 64 characters, installed"]
    if legacy and reason == "value_reference_invalid" and len(key) == 65:
        return ["legacy, 65 characters: value_reference_invalid"]
    return []


def input_items(request: Any, response: Any, state, ack_page_bytes: int) -> Counter:
    """The production-shaped input items one top-level request reached (``INPUT_ITEMS``).

    ``state`` is the model's state after the request, ``ack_page_bytes`` its bound.
    """
    from envreplica.model.replica import read_snapshot

    out: Counter = Counter()
    if not isinstance(request, dict) or not isinstance(response, dict) or response.get("ok") is not True:
        return out
    op, result = request.get("op"), response.get("result")
    try:
        if op == "snapshot":
            ids = request["projectIds"]
            if result is None:
                if len(set(ids)) < len(ids) and read_snapshot(state, list(dict.fromkeys(ids))) is not None:
                    out["duplicate ids while serving: null"] += 1
                return out
            if len(ids) > 1 and ids != sorted(ids):
                out["unsorted task order, served"] += 1
            if any(p not in ("p1", "p2") for p in ids):
                out["project id other than p1/p2, served"] += 1
            for project in result["projects"]:
                for entry in project["entries"]:
                    out.update(_key_items(entry))
                    if entry["value"] is not None:
                        out.update(classes_of(entry["value"]))
        elif op in ("page", "delivery") and isinstance(result, dict):
            items = result.get("results") if op == "page" else [result.get("result")]
            for item in items or ():
                out.update(_key_items(item))
            if op == "page":
                frame = request["frame"]
                size = page_ack_bytes(frame, frame["records"], result["policyEpochs"], result["appliedThrough"])
                if size == ack_page_bytes and result["ok"] is True:
                    out["page exactly at the bound, accepted"] += 1
                elif size == ack_page_bytes + 1 and result.get("code") == "ack_page_too_large":
                    out["page 1 byte over the bound, refused"] += 1
            elif result.get("replayed") is True:
                sequence, applied = request["frame"]["delivery"]["sequence"], result["appliedThrough"]["sequence"]
                if len(str(sequence)) < len(str(applied)):
                    out[SHORTER_REPLAY] += 1
    except (KeyError, TypeError, AttributeError, ValueError):
        pass  # an odd request or result: nothing to count
    return out


def _wire_state(row) -> dict:
    from envreplica.spec import wire

    return wire.encode(row.state)


def record_items(request: Any, response: Any, pre, answer_of) -> Counter:
    """The record-shape items one top-level request reached, judged against the model's state before it
    (``pre``): a whole page at the live version differing by membership only, a delivery's record move (the
    fields it changes of the record it moves), a legacy envelope with a field of another JSON type read.
    ``answer_of(project, key, ref)`` is what the model's value store answers for a reference."""
    import json

    out: Counter = Counter()
    if not isinstance(request, dict) or not isinstance(response, dict) or response.get("ok") is not True:
        return out
    frame: Any  # JSON values: an odd shape raises below, and is not counted
    items: Any
    op, result, frame = request.get("op"), response.get("result"), request.get("frame")
    try:
        if op == "page" and frame["after"] is None and frame["complete"] is True \
                and frame["recordVersion"] == pre.projects.get(frame["projectId"], 0):
            live = {k: _wire_state(row) for (p, k), row in pre.records.items() if p == frame["projectId"]}
            sent = {r["key"]: r for r in frame["records"]}
            if sent.keys() != live.keys() and all(live[k] == sent[k] for k in sent.keys() & live.keys()):
                if live.keys() - sent.keys():
                    out["a live record left out"] += 1
                if sent.keys() - live.keys():
                    out["a record added"] += 1
        if op in ("page", "delivery") and isinstance(result, dict):
            # Each record sent against the one the replica holds for its key (staged under the open attempt,
            # else live): the fields the move changes.
            attempt = pre.authority.attempt_id
            for sent in frame["records"] if op == "page" else [frame["state"]]:
                key = (frame["projectId"], sent["key"])
                row = pre.stage_records.get((attempt, *key)) if attempt is not None else None
                row = row if row is not None else pre.records.get(key)
                facets = () if row is None else moved_facets(_wire_state(row), sent)
                if facets:
                    out[move_label(facets)] += 1
        if op in ("page", "delivery") and isinstance(result, dict):
            items = result.get("results") if op == "page" else [result.get("result")]
            for item in items or ():
                if item["materialization"] != {"kind": "unavailable", "reason": "value_unavailable"}:
                    continue
                ref = item["state"]["head"]["valueRef"]
                raw = answer_of(frame["projectId"], item["state"]["key"], ref) if ref and ref["kind"] == "legacy" \
                    else None
                try:
                    envelope = json.loads(raw) if isinstance(raw, str) else None
                except ValueError:
                    envelope = None
                if isinstance(envelope, dict) and set(envelope) == set(LEGACY_FIELDS):
                    for field in LEGACY_FIELDS:
                        expected = int if field == "v" else str
                        if type(envelope[field]) is not expected:
                            out[f"{field} of another JSON type, read"] += 1
    except (KeyError, TypeError, AttributeError, ValueError):
        pass  # an odd request or result: nothing to count
    return out


@lru_cache(maxsize=4096)
def classes_of(value: str) -> tuple[str, ...]:
    """The ``VALUE_CLASSES`` of one value (cached: the same long values are classified at every step)."""
    return tuple(name for name, test in VALUE_CLASSES.items() if test(value))


def value_classes(state) -> Counter:
    """The classes of the values ``state`` holds (live and staged), each counted once per value."""
    return Counter(name for stored in (*state.values.values(), *state.stage_values.values())
                   for name in classes_of(stored.value))


#: Every lockstep run of this process adds here.
COVERAGE = LockstepCoverage()


def print_coverage(coverage: LockstepCoverage, console=None, title: str = "lockstep coverage") -> list:
    """Print the coverage table (rich); returns ``coverage.unreached()``."""
    from rich.console import Console

    return print_coverage_table(coverage, console or Console(), title, "reachable but not reached")
