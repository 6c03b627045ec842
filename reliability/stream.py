"""A long, realistic cloud stream as adapter requests: the input of the reliability harnesses.

``Cloud(shape)`` is a consistent cloud, deterministic from ``shape.seed``: it
owns ``shape.projects`` projects of ``shape.keys`` records each, and changes
them ``shape.deliveries`` times, each change a reachable head move (create,
rotate, approve an epoch, withhold, release, delete, restore, relist) logged
as the next delivery of its stream. It answers what a harness needs:

* ``store_requests()``: a ``store.put`` for every value any record ever
  references (the value store lives outside the replica, so a harness sends
  them again after each restart);
* ``snapshot(attempt, through)``: ``begin``, the pages of every project as the
  cloud held them after ``through`` deliveries (a few records per page), and
  the ``commit`` at that high-water mark;
* ``delivery(sequence)``: the delivery of change ``sequence`` (1-based);
* ``value(project, key, ref)``: the value a reference names.

Values come in every class the wire allows now and then: empty, NUL, lone
surrogates, non-BMP text, and a 20 KB value.

Leaves out on purpose: legacy (SSM-version) references and adversarial frames
(the lockstep has both), and more than one stream.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from typing import Optional

from envreplica.model.store import staged_envelope

__all__ = ["StreamShape", "Cloud", "ORG", "STREAM"]

ORG = "o1"
STREAM = "s1"
_SPECIAL = ["", "a\x00b", "bad\ud800", "\U0001F600 é", "x" * 20_000]


@dataclass(frozen=True)
class StreamShape:
    """How big a stream is (configuration, not state)."""

    projects: int = 2  # projects in the task
    keys: int = 8  # records per project at the start
    deliveries: int = 300  # changes after the first snapshot
    seed: int = 0  # everything is derived from it
    page_size: int = 4  # records per snapshot page
    epochs: tuple[int, ...] = (1, 2)  # the kept policy epochs


@dataclass(frozen=True)
class _Record:
    key: str
    revision: int
    generation: int
    tombstone: bool
    ref: Optional[str]  # staging id; None for a tombstone
    binding: Optional[dict]
    epoch: int
    listing: int

    def wire(self) -> dict:
        return {"key": self.key,
                "head": {"revision": self.revision, "generation": self.generation, "tombstone": self.tombstone,
                         "valueRef": None if self.ref is None else {"kind": "staged", "stagingId": self.ref}},
                "binding": self.binding, "policyEpoch": self.epoch, "listingGeneration": self.listing}


class Cloud:
    """The cloud of one task: its records after each delivery, and the requests that describe them."""

    def __init__(self, shape: StreamShape = StreamShape()) -> None:
        self.shape = shape
        self._rng = random.Random(shape.seed)
        self.projects = [f"p{i}" for i in range(1, shape.projects + 1)]
        self._values: dict[tuple[str, str, str], str] = {}
        records: dict[str, dict[str, _Record]] = {p: {} for p in self.projects}
        for p in self.projects:
            for i in range(shape.keys):
                key = f"K{i:03d}"
                records[p][key] = _Record(key, 1, 1, False, self._new_ref(p, key), None, 1, 0)
        versions = {p: 1 if shape.keys else 0 for p in self.projects}  # version 0 is the empty project
        #: (records, versions) after n deliveries, n = 0..deliveries
        self._history = [({p: dict(r) for p, r in records.items()}, dict(versions))]
        self._changes: list[tuple[str, _Record, int]] = []  # (project, record, record version)
        for _ in range(shape.deliveries):
            project = self._rng.choice(self.projects)
            record = self._move(project, records[project])
            records[project][record.key] = record
            versions[project] += 1
            self._changes.append((project, record, versions[project]))
            self._history.append(({p: dict(r) for p, r in records.items()}, dict(versions)))

    # -- generation ---------------------------------------------------------

    def _new_ref(self, project: str, key: str) -> str:
        ref = str(uuid.UUID(int=self._rng.getrandbits(128)))
        n = len(self._values)
        value = self._rng.choice(_SPECIAL) + f"#{n}" if self._rng.random() < 0.08 else f"value-{project}-{key}-{n}"
        self._values[(project, key, ref)] = value
        return ref

    def _move(self, project: str, records: dict) -> _Record:
        rng = self._rng
        if rng.random() < 0.08:  # a new key
            key = f"N{len(records):03d}"
            if key not in records:
                return _Record(key, 1, 1, False, self._new_ref(project, key), None, 1, 0)
        current = records[rng.choice(sorted(records))]
        if current.tombstone:
            move = rng.choice(["restore", "relist"])
        else:
            move = rng.choice(["rotate", "rotate", "rotate", "epoch", "withhold", "delete", "relist"])
        if move == "rotate":
            return replace(current, generation=current.generation + 1, ref=self._new_ref(project, current.key))
        if move == "epoch":
            return replace(current, revision=current.revision + 1, epoch=1 if current.epoch == 2 else 2)
        if move == "withhold":
            binding = None if current.binding is not None else {"kind": "withhold", "reason": "legal_hold"}
            return replace(current, revision=current.revision + 1, binding=binding)
        if move == "delete":
            return replace(current, revision=current.revision + 1, generation=current.generation + 1,
                           tombstone=True, ref=None)
        if move == "restore":
            return replace(current, revision=current.revision + 1, generation=current.generation + 1,
                           tombstone=False, ref=self._new_ref(project, current.key))
        return replace(current, listing=current.listing + 1)

    # -- requests -----------------------------------------------------------

    def store_requests(self) -> list[dict]:
        """A ``store.put`` for every value any record of the stream references."""
        return [{"op": "store.put", "projectId": p, "key": k, "ref": {"kind": "staged", "stagingId": ref},
                 "raw": staged_envelope(ORG, p, k, ref, value)}
                for (p, k, ref), value in self._values.items()]

    def value(self, project: str, key: str, ref: str) -> str:
        return self._values[(project, key, ref)]

    def records_after(self, through: int) -> tuple[dict, dict]:
        """({project: {key: wire record}}, {project: record version}) after ``through`` deliveries."""
        records, versions = self._history[through]
        return {p: {k: r.wire() for k, r in rs.items()} for p, rs in records.items()}, dict(versions)

    def snapshot(self, attempt: str, through: int) -> list[dict]:
        """``begin``, every page, and the ``commit`` of the cloud as it was after ``through`` deliveries."""
        records, versions = self._history[through]
        out = [{"op": "begin", "frame": {"attempt": {"streamId": STREAM, "attemptId": attempt},
                                         "projectIds": list(self.projects)},
                "keptPolicyEpochs": list(self.shape.epochs), "orgId": ORG}]
        size = self.shape.page_size
        for p in self.projects:
            keys = sorted(records[p])
            chunks = [keys[i:i + size] for i in range(0, len(keys), size)] or [[]]
            after = None
            for n, chunk in enumerate(chunks):
                out.append({"op": "page", "frame": {
                    "opId": f"page-{attempt}-{p}-{n}", "attemptId": attempt, "projectId": p, "after": after,
                    "recordVersion": versions[p], "records": [records[p][k].wire() for k in chunk],
                    "complete": n == len(chunks) - 1}})
                after = chunk[-1] if chunk else after
        out.append({"op": "commit", "frame": {"attemptId": attempt,
                                              "highWater": {"streamId": STREAM, "sequence": through},
                                              "versions": [{"projectId": p, "recordVersion": versions[p]}
                                                           for p in self.projects]}})
        return out

    def delivery(self, sequence: int) -> dict:
        """The delivery of change ``sequence`` (1-based), for an open gate."""
        project, record, version = self._changes[sequence - 1]
        return {"op": "delivery", "frame": {
            "kind": "env.replica.apply", "opId": f"op-{sequence}", "projectId": project,
            "recordVersion": version, "state": record.wire(),
            "delivery": {"streamId": STREAM, "sequence": sequence}}}
