"""Records: building them, the reachable moves of one, and reading them from the model's state.

``record``, ``ref_for`` and ``staging_id`` build the wire form of a record;
``_moved`` is a record after one cloud-side change; ``_fetchable`` says
whether a record would be read from the value store. ``_View`` is what the
harness knows of the model's state, read the way a cloud learns it from
acks. None of these draws anything (that is ``draw`` and ``generate``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional, Sequence, Union, cast

from envreplica.conformance.replica.domains import LEGACY_KEYS, REASONS
from envreplica.model.state import LiveRow, StageRow, State
from envreplica.spec import wire
from envreplica.spec.domain import DeliveryRequest


def staging_id(key: str, generation: int, alt: int = 0) -> str:
    """A lowercase canonical UUID naming the staged value of ``key`` at ``generation``."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{digest}-{alt:04x}-4000-8000-{generation:012x}"


def ref_for(key: str, generation: int) -> dict:
    if key in LEGACY_KEYS:
        return {"kind": "legacy", "ssmVersion": max(generation, 1)}
    return {"kind": "staged", "stagingId": staging_id(key, generation)}


def record(key: str, revision: int = 1, generation: int = 1, tombstone: bool = False, ref: Any = "auto",
           binding: Any = None, epoch: Optional[int] = 1, listing: int = 0) -> dict:
    if ref == "auto":
        ref = None if tombstone else ref_for(key, generation)
    return {"key": key, "head": {"revision": revision, "generation": generation, "tombstone": tombstone,
                                 "valueRef": ref},
            "binding": binding, "policyEpoch": epoch, "listingGeneration": listing}


def _moved(r: dict, move: str) -> dict:
    """``r`` after one cloud-side change (each a reachable record advance, when it applies)."""
    key, h = r["key"], r["head"]
    rev, gen = h["revision"], h["generation"]
    out = json.loads(json.dumps(r))
    oh = out["head"]
    if move == "rotate":
        oh.update(generation=gen + 1, valueRef=ref_for(key, gen + 1))
    elif move == "upgrade":
        oh["revision"] = rev + 1
        out["policyEpoch"] = 1 if r["policyEpoch"] is None else r["policyEpoch"] % 3 + 1
    elif move == "withhold":
        oh["revision"] = rev + 1
        out["binding"] = {"kind": "withhold", "reason": REASONS[rev % len(REASONS)]}
    elif move == "omit":
        oh["revision"] = rev + 1
        out["binding"] = {"kind": "omit"}
    elif move == "bind":
        oh["revision"] = rev + 1
        out["binding"] = None
    elif move == "delete":
        oh.update(revision=rev + 1, generation=gen + 1, tombstone=True, valueRef=None)
    elif move == "restore":
        oh.update(revision=rev + 1, generation=gen + 1, tombstone=False, valueRef=ref_for(key, gen + 1))
    elif move == "relist":
        out["listingGeneration"] = r["listingGeneration"] + 1
    elif move == "older":
        oh["revision"] = max(rev - 1, 0)
    elif move == "twin":  # same counters, another binding: a conflict
        out["binding"] = {"kind": "withhold", "reason": "odd"} if r["binding"] is None else None
    return out


#: The fields one cloud-side move of a record can change at once. A tombstone flip changes the value
#: reference too (a tombstone has none), so a move with ``tombstone`` always has ``value ref``.
MOVE_FACETS = ("revision", "generation", "tombstone", "value ref", "epoch", "binding")


def move_label(facets: Sequence[str]) -> str:
    """The coverage item of a move that changes ``facets`` (in ``MOVE_FACETS`` order)."""
    return "+".join(f for f in MOVE_FACETS if f in facets)


#: Every move the record domain allows: each non-empty set of facets, with ``value ref`` whenever
#: ``tombstone`` (47 of the 63 sets).
MOVES = tuple(move_label(fs) for n in range(1, 2 ** len(MOVE_FACETS))
              for fs in [[f for i, f in enumerate(MOVE_FACETS) if n >> i & 1]]
              if "tombstone" not in fs or "value ref" in fs)


def moves_of(current: dict) -> tuple[str, ...]:
    """The ``MOVES`` that ``current`` can make: a tombstone has no value reference to change, so on a tombstone
    a move with ``value ref`` is one with ``tombstone`` (the restore)."""
    if not current["head"]["tombstone"]:
        return MOVES
    return tuple(m for m in MOVES if "value ref" not in m or "tombstone" in m)


def moved_facets(current: dict, incoming: dict) -> tuple[str, ...]:
    """Which of ``MOVE_FACETS`` ``incoming`` changes of ``current`` (wire records)."""
    ch, ih = current["head"], incoming["head"]
    changed = {
        "revision": ch["revision"] != ih["revision"],
        "generation": ch["generation"] != ih["generation"],
        "tombstone": ch["tombstone"] != ih["tombstone"],
        "value ref": ch["valueRef"] != ih["valueRef"],
        "epoch": current["policyEpoch"] != incoming["policyEpoch"],
        "binding": current["binding"] != incoming["binding"],
    }
    return tuple(f for f in MOVE_FACETS if changed[f])


def combined_move(current: dict, label: str) -> dict:
    """``current`` with every facet of the move ``label`` changed at once (each one step on; a value reference
    to another staging id or legacy version; the next policy epoch; the next binding). A move the current
    record cannot make (a new value reference on a tombstone, without a flip) changes the rest only."""
    facets = set(label.split("+"))
    key, h = current["key"], current["head"]
    out = json.loads(json.dumps(current))
    oh = out["head"]
    if "revision" in facets:
        oh["revision"] = h["revision"] + 1
    if "generation" in facets:
        oh["generation"] = h["generation"] + 1
    tombstone = h["tombstone"] != ("tombstone" in facets)
    oh["tombstone"] = tombstone
    if tombstone:
        oh["valueRef"] = None
    elif "value ref" in facets or h["tombstone"]:
        ref = ref_for(key, oh["generation"])
        if ref == h["valueRef"]:
            ref = ({"kind": "staged", "stagingId": staging_id(key, oh["generation"], 2)} if ref["kind"] == "staged"
                   else {"kind": "legacy", "ssmVersion": ref["ssmVersion"] + 1})
        oh["valueRef"] = ref
    if "epoch" in facets:
        out["policyEpoch"] = 1 if current["policyEpoch"] is None else current["policyEpoch"] % 3 + 1
    if "binding" in facets:
        binding = current["binding"]
        out["binding"] = ({"kind": "omit"} if binding is None
                          else {"kind": "withhold", "reason": REASONS[0]} if binding["kind"] == "omit" else None)
    return out


def _fetchable(r: Any, epochs: Sequence[int]) -> bool:
    """Whether a record would be fetched from the value store (before looking at what is stored)."""
    try:
        ref = r["head"]["valueRef"]
        return (ref is not None and not r["head"]["tombstone"] and r["binding"] is None
                and r["policyEpoch"] in epochs and not (ref["kind"] == "legacy" and r["key"].startswith("_")))
    except (KeyError, TypeError):
        return False


class _View:
    """What the harness knows: the model's state, read the way a cloud learns it from acks."""

    def __init__(self, state: State, sent: Sequence[tuple]) -> None:
        a = state.authority
        self.state = state
        self.activated = a.gate.activated
        self.gate_open = a.gate.is_open
        self.stream = a.stream_id
        self.applied = a.applied_sequence
        self.attempt = a.attempt_id
        self.org = a.org_id
        self.epochs = a.policy_epochs
        self.live_versions = dict(state.projects.items())
        self.stage = {p: sp for (att, p), sp in state.stage_projects.items() if att == a.attempt_id}
        self.sent = sent  # (projectId, key, record JSON) recently sent in frames

    def live(self, project: str) -> dict[str, dict]:
        return {k: wire.encode(row.state) for (p, k), row in self.state.records.items() if p == project}

    def staged(self, project: str) -> dict[str, dict]:
        return {k: wire.encode(row.state) for (att, p, k), row in self.state.stage_records.items()
                if att == self.attempt and p == project}

    def current(self, project: str, key: str, staged: bool) -> Optional[dict]:
        row: Union[LiveRow, StageRow, None]
        if staged and self.attempt is not None:
            row = self.state.stage_records.get((self.attempt, project, key))
        else:
            row = self.state.records.get((project, key))
        return None if row is None else wire.encode(row.state)

    def consumed(self) -> list[int]:
        """The sequences of the current stream whose receipts the replica keeps."""
        return sorted(n for (s, n) in self.state.receipts if s == self.stream)

    def superseded(self) -> list[int]:
        """Consumed sequences whose record is no longer what the replica holds for its key.

        Their retransmissions are the ones a dedupe bug would corrupt: a snapshot
        or a later delivery moved (or dropped) the record since they applied.
        """
        out: list[int] = []
        if self.stream is None:  # no stream: nothing consumed
            return out
        for n in self.consumed():
            # the model's own state: its receipts hold requests (only a read-back state holds MACs)
            frame = cast(DeliveryRequest, self.state.receipts[(self.stream, n)].request)
            held = self.current(frame.project_id, frame.state.key, staged=self.attempt is not None)
            if held != wire.encode(frame.state):
                out.append(n)
        return out

    def in_play(self) -> list[tuple[str, str, dict]]:
        """(projectId, key, record) of every record live, staged or recently sent."""
        out = [(p, k, wire.encode(row.state)) for (p, k), row in self.state.records.items()]
        out += [(p, k, wire.encode(row.state)) for (_a, p, k), row in self.state.stage_records.items()]
        out += list(self.sent)
        return out
