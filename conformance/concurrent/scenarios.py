"""Scenarios: a sequential setup, then a small batch of ops that race on several processes.

Models: a consistent cloud (one organisation ``o1``, one stream ``s1``, one
project ``p1``, keys ``A``..``C`` with staged value references, the value
store stocked with their envelopes, now and then a value left missing) that
activates a replica, sends a few deliveries, and opens an attempt; then the
races that a host with several processes on one file meets (``ScenarioKind``):

* ``DELIVERY_RACE``: the same delivery (same sequence) sent to two or three
  processes at once (the cloud's at-least-once retransmission), sometimes with
  a conflicting request at that sequence in place of one copy, live or inside
  an open attempt;
* ``COMMIT_VS_DELIVERY``: an attempt's commit racing the next delivery (tagged
  with the attempt, or not);
* ``READERS_DURING_COMMIT``: a commit that changes the served view, with
  ``snapshot`` and ``status`` readers around it;
* ``PAGE_VS_BEGIN``: a page that reads values racing a ``begin`` of another
  attempt, or of the same attempt under fewer kept epochs;
* ``DELIVERY_VS_CLOSE``: a delivery racing ``close`` (the host closing the
  gate on a reconnection);
* ``MIXED``: two to five ops drawn from all of the above and the readers.

Each batch op has a process and a start delay (µs after the barrier), so
that the ops of one batch start at slightly different moments.

Leaves out on purpose: more than one project or stream, legacy references
and adversarial frames (the single-process lockstep has them; a race is about
order, and these add nothing to it), ``restart`` and the value store's
failures (``store.*`` acts on one process; see ``history.BATCH_OPS``).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Optional, Sequence

from envreplica.conformance.concurrent.history import History, Op
from envreplica.conformance.replica.records import record, staging_id
from envreplica.model.state import State
from envreplica.model.store import staged_envelope

__all__ = ["BatchOp", "Scenario", "ScenarioKind", "generate_scenario", "KINDS", "THREAD_KINDS"]

ORG = "o1"
STREAM = "s1"
PROJECT = "p1"
KEYS = ("A", "B", "C")


class ScenarioKind(str, enum.Enum):
    DELIVERY_RACE = "delivery-race"
    COMMIT_VS_DELIVERY = "commit-vs-delivery"
    READERS_DURING_COMMIT = "readers-during-commit"
    PAGE_VS_BEGIN = "page-vs-begin"
    DELIVERY_VS_CLOSE = "delivery-vs-close"
    MIXED = "mixed"
    READINESS = "readiness"  # readers wait for readiness and diagnose while writers commit, close, deliver


#: The kinds the process mode runs in turn.
KINDS: tuple[ScenarioKind, ...] = tuple(k for k in ScenarioKind if k is not ScenarioKind.READINESS)
#: The kinds the threaded mode runs in turn: every kind, with readiness waiters beside the writers every
#: other history (a reader that waits in one process on a gate another process opens is a poll, not
#: this race; between threads it is the race the mode is for).
THREAD_KINDS: tuple[ScenarioKind, ...] = tuple(
    k for kind in KINDS for k in (kind, ScenarioKind.READINESS))


@dataclass(frozen=True)
class BatchOp:
    """One op of the batch: the process that runs it, its request, its start delay after the barrier."""

    process: int
    request: dict
    delay_us: int = 0


@dataclass(frozen=True)
class Scenario:
    kind: ScenarioKind
    setup: tuple[dict, ...]  # sequential: process 0, store.* to every process
    batch: tuple[BatchOp, ...]  # at once, after a barrier

    @property
    def processes(self) -> int:
        """Processes the batch uses (each opens the file before the setup)."""
        return max((op.process for op in self.batch), default=0) + 1

    def without_op(self, position: int) -> "Scenario":
        return Scenario(self.kind, self.setup, self.batch[:position] + self.batch[position + 1:])

    def history(self, variant: str, setup_responses: Sequence[dict], ops: Sequence[Op], final_state: Optional[State],
                readback_error: Optional[str], processes: int, earlier: int, unit: str = "process") -> History:
        """What one run of this scenario did (the threads' or the worker processes'): its setup and the answers to
        it, the batch's ``ops`` (put in the batch's order), the replica read back after it (or why it could not
        be), and who ran it."""
        return History(variant=variant, scenario=self.kind.value, setup=tuple(self.setup),
                       setup_responses=tuple(setup_responses), ops=tuple(sorted(ops, key=lambda op: op.index)),
                       final_state=final_state, readback_error=readback_error, processes=processes, earlier=earlier,
                       unit=unit)

    def without_setup(self, position: int) -> "Scenario":
        return Scenario(self.kind, self.setup[:position] + self.setup[position + 1:], self.batch)


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------


def _ref(key: str, generation: int) -> dict:
    return {"kind": "staged", "stagingId": staging_id(key, generation)}


def _put(rec: dict) -> dict:
    sid = rec["head"]["valueRef"]["stagingId"]
    value = f"value-{rec['key']}-g{rec['head']['generation']}"
    return {"op": "store.put", "projectId": PROJECT, "key": rec["key"], "ref": rec["head"]["valueRef"],
            "raw": staged_envelope(ORG, PROJECT, rec["key"], sid, value)}


def _begin(attempt: str, epochs=(1,)) -> dict:
    return {"op": "begin", "frame": {"attempt": {"streamId": STREAM, "attemptId": attempt}, "projectIds": [PROJECT]},
            "keptPolicyEpochs": list(epochs), "orgId": ORG}


def _page(attempt: str, version: int, records: list, complete: bool = True) -> dict:
    return {"op": "page", "frame": {"opId": f"page-{attempt}", "attemptId": attempt, "projectId": PROJECT,
                                    "after": None, "recordVersion": version,
                                    "records": sorted(records, key=lambda r: r["key"]), "complete": complete}}


def _commit(attempt: str, sequence: int, version: int) -> dict:
    return {"op": "commit", "frame": {"attemptId": attempt, "highWater": {"streamId": STREAM, "sequence": sequence},
                                      "versions": [{"projectId": PROJECT, "recordVersion": version}]}}


def _delivery(sequence: int, version: int, state: dict, attempt: Optional[str] = None) -> dict:
    frame = {"kind": "env.replica.apply", "opId": f"d-{sequence}", "projectId": PROJECT, "recordVersion": version,
             "state": state, "delivery": {"streamId": STREAM, "sequence": sequence}}
    if attempt is not None:
        frame["reconciliationAttemptId"] = attempt
    return {"op": "delivery", "frame": frame}


def _read(rng: random.Random) -> dict:
    choice = rng.random()
    if choice < 0.45:
        return {"op": "snapshot", "projectIds": [PROJECT]}
    if choice < 0.85:
        return {"op": "status"}
    return {"op": "receipts"}


# ---------------------------------------------------------------------------
# The cloud: what it has sent so far
# ---------------------------------------------------------------------------


class _Cloud:
    """A consistent cloud's view while it writes a setup (nothing here runs a replica)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.setup: list[dict] = []
        self.records: dict[str, dict] = {}  # the cloud's records of p1
        self.version = 0  # p1's record version
        self.sequence = 0  # the last delivery sequence sent
        self.attempt: Optional[str] = None  # the open attempt
        self.attempts = 0
        self.activated = False
        self.last_page: Optional[dict] = None  # the open attempt's page, as sent

    def _stock(self, rec: dict, missing_chance: float = 0.1) -> None:
        """Put the record's value in the store (mostly: sometimes it is missing)."""
        ref = rec["head"]["valueRef"]
        if ref is not None and self.rng.random() >= missing_chance:
            self.setup.append(_put(rec))

    def moved(self, rec: Optional[dict], key: str) -> dict:
        """``rec`` after one reachable move (a new record when None); its value stocked."""
        rng = self.rng
        if rec is None:
            out = record(key, 1, 1, ref=_ref(key, 1))
        else:
            h = rec["head"]
            rev, gen = h["revision"], h["generation"]
            roll = rng.random()
            if h["tombstone"]:
                out = record(key, rev + 1, gen + 1, ref=_ref(key, gen + 1), binding=rec["binding"],
                             epoch=rec["policyEpoch"])
            elif roll < 0.6:  # rotation: a new value to fetch
                out = record(key, rev, gen + 1, ref=_ref(key, gen + 1), binding=rec["binding"],
                             epoch=rec["policyEpoch"])
            elif roll < 0.75:  # withheld by a binding
                out = record(key, rev + 1, gen, ref=h["valueRef"], binding={"kind": "withhold", "reason": "policy"},
                             epoch=rec["policyEpoch"])
            elif roll < 0.85:  # an epoch upgrade (epoch 2 may not be kept)
                out = record(key, rev + 1, gen, ref=h["valueRef"], binding=None, epoch=2)
            else:  # deleted
                out = record(key, rev + 1, gen + 1, tombstone=True, binding=rec["binding"], epoch=rec["policyEpoch"])
        if out["head"]["valueRef"] is not None:
            self._stock(out)
        return out

    def activate(self) -> None:
        """The first snapshot: begin, one complete page of 1-3 records, commit."""
        keys = KEYS[: self.rng.randint(1, 3)]
        self.records = {k: self.moved(None, k) for k in keys}
        self.version = 1
        attempt = self.new_attempt()
        self.setup.append(_page(attempt, self.version, list(self.records.values())))
        self.setup.append(_commit(attempt, self.sequence, self.version))
        self.attempt = None
        self.activated = True

    def new_attempt(self, epochs=(1, 2)) -> str:
        self.attempts += 1
        attempt = f"a{self.attempts}"
        self.setup.append(_begin(attempt, epochs))
        self.attempt = attempt
        return attempt

    def next_delivery(self, key: Optional[str] = None) -> dict:
        """The next delivery (one record moved), for the batch: the cloud's view is not advanced."""
        key = key or self.rng.choice(sorted(self.records) + ["C"])
        state = self.moved(self.records.get(key), key)
        return _delivery(self.sequence + 1, self.version + 1, state, self.attempt)

    def deliver(self) -> None:
        """A delivery in the setup: sent, and the cloud's view advanced."""
        request = self.next_delivery()
        self.setup.append(request)
        frame = request["frame"]
        self.records[frame["state"]["key"]] = frame["state"]
        self.sequence += 1
        self.version += 1

    def stage(self, epochs=(1, 2), change: bool = False) -> None:
        """Open an attempt and send its one complete page (with a record moved when ``change``)."""
        attempt = self.new_attempt(epochs)
        records = dict(self.records)
        version = self.version
        if change:
            key = self.rng.choice(sorted(records) + ["C"])
            records[key] = self.moved(records.get(key), key)
            version += 1
        self.last_page = _page(attempt, version, list(records.values()))
        self.setup.append(self.last_page)
        self.records, self.version = records, version

    def commit(self) -> dict:
        """The open attempt's commit (after ``stage``)."""
        assert self.attempt is not None, "commit() needs an open attempt (stage() first)"
        return _commit(self.attempt, self.sequence, self.version)


# ---------------------------------------------------------------------------
# The scenarios
# ---------------------------------------------------------------------------


def _delay(rng: random.Random, high: int = 300) -> int:
    return rng.randint(0, high)


def _on(processes: list[int], rng: random.Random) -> int:
    return rng.choice(processes)


def _warm(cloud: _Cloud, rng: random.Random, most: int, stage: bool = False) -> None:
    """Serve the replica, then consume up to ``most`` deliveries; with ``stage``, three times in ten a value is
    staged next (a changed one half the time), for the batch's delivery to read."""
    cloud.activate()
    for _ in range(rng.randint(0, most)):
        cloud.deliver()
    if stage and rng.random() < 0.3:
        cloud.stage(change=rng.random() < 0.5)


def _maybe_third(batch: list[BatchOp], rng: random.Random, delivery: dict, again: float, read: float,
                 again_delay: int) -> list[BatchOp]:
    """On process 2, sometimes the same delivery again (below ``again``), else sometimes a read (below ``read``)."""
    extra = rng.random()
    if extra < again:
        batch.append(BatchOp(2, delivery, _delay(rng, again_delay)))
    elif extra < read:
        batch.append(BatchOp(2, _read(rng), _delay(rng, 1500)))
    return batch


def _delivery_race(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    _warm(cloud, rng, 2, stage=True)
    frame = cloud.next_delivery()
    copies = rng.choice((2, 2, 3))
    batch = [BatchOp(p, frame, _delay(rng, 150)) for p in range(copies)]
    if rng.random() < 0.3:  # a conflicting request at the same sequence in place of one copy
        twin = cloud.next_delivery()
        batch[-1] = BatchOp(batch[-1].process, twin, batch[-1].delay_us)
    if rng.random() < 0.5:
        batch.append(BatchOp(_on(list(range(3)), rng), _read(rng), _delay(rng, 1500)))
    return batch


def _commit_vs_delivery(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    _warm(cloud, rng, 1)
    cloud.stage(change=rng.random() < 0.5)
    commit = cloud.commit()
    delivery = cloud.next_delivery()
    if rng.random() < 0.3:  # not tagged with the attempt: applies only once the commit opened the gate
        del delivery["frame"]["reconciliationAttemptId"]
    batch = [BatchOp(0, commit, _delay(rng, 200)), BatchOp(1, delivery, _delay(rng, 200))]
    return _maybe_third(batch, rng, delivery, 0.35, 0.8, 400)


def _readers_during_commit(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    _warm(cloud, rng, 1)
    cloud.stage(change=rng.random() < 0.8)
    batch = [BatchOp(0, cloud.commit(), _delay(rng, 300))]
    for _ in range(rng.randint(1, 3)):
        batch.append(BatchOp(rng.choice((1, 2)), rng.choice(({"op": "snapshot", "projectIds": [PROJECT]},
                                                            {"op": "status"})), _delay(rng, 1200)))
    return batch


def _page_vs_begin(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    if rng.random() < 0.7:
        _warm(cloud, rng, 1)
    attempt = cloud.new_attempt((1, 2))
    records = dict(cloud.records) or {"A": cloud.moved(None, "A")}
    version = max(cloud.version, 1)
    for key in rng.sample(sorted(records), k=rng.randint(0, len(records))):
        records[key] = cloud.moved(records[key], key)
    if records != cloud.records and cloud.activated:
        version += 1
    page = _page(attempt, version, list(records.values()))
    roll = rng.random()
    if roll < 0.7:  # the same attempt begun again (under fewer kept epochs: finding F1's race)
        other = _begin(attempt, rng.choice(((2,), (1, 2))))
    elif roll < 0.9:
        other = _begin(f"a{cloud.attempts + 1}", (1, 2))
    else:
        other = page  # the same page twice
    batch = [BatchOp(0, page, _delay(rng, 600)), BatchOp(1, other, _delay(rng, 600))]
    if rng.random() < 0.5:
        batch.append(BatchOp(2, rng.choice(({"op": "status"}, page, page)), _delay(rng, 1000)))
    return batch


def _delivery_vs_close(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    _warm(cloud, rng, 1, stage=True)
    delivery = cloud.next_delivery()
    batch = [BatchOp(0, delivery, _delay(rng, 200)), BatchOp(1, {"op": "close"}, _delay(rng, 900))]
    return _maybe_third(batch, rng, delivery, 0.3, 0.7, 300)


def _mixed(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    _warm(cloud, rng, 2)
    staged = rng.random() < 0.5
    if staged:
        cloud.stage(change=rng.random() < 0.5)
    delivery = cloud.next_delivery()
    pool = [delivery, delivery, {"op": "close"}, _read(rng), _read(rng), _begin(f"a{cloud.attempts + 1}", (1, 2))]
    if staged:  # the attempt's commit, its page sent again, and the attempt begun again
        assert cloud.attempt is not None and cloud.last_page is not None  # stage() opened it and sent its page
        pool += [cloud.commit(), cloud.commit(), cloud.last_page, _begin(cloud.attempt, (1, 2))]
    count = rng.randint(2, 5)
    processes = rng.choice((2, 3))
    chosen = rng.sample(pool, k=min(count, len(pool)))
    return [BatchOp(i % processes, request, _delay(rng, 800)) for i, request in enumerate(chosen)]


def _waiter(rng: random.Random) -> dict:
    """A reader of the readiness path: a wait (at once, or with a short deadline) or a diagnosis."""
    choice = rng.random()
    if choice < 0.55:
        return {"op": "ready", "timeoutMs": rng.choice((0, 5, 40))}
    if choice < 0.8:
        return {"op": "diagnostics", "projectIds": [PROJECT]}
    return {"op": "snapshot", "projectIds": [PROJECT]}


def _readiness(cloud: _Cloud, rng: random.Random) -> list[BatchOp]:
    """Writers move the gate (a commit opens it, a close or a begin closes it, a delivery writes beside it)
    while other threads wait for readiness, diagnose and read."""
    _warm(cloud, rng, 1)
    roll = rng.random()
    if roll < 0.6:  # staging: writes that leave the gate closed (a delivery into the attempt), then the commit
        cloud.stage(change=rng.random() < 0.5)
        writers = [cloud.commit()]
        if rng.random() < 0.6:
            writers.insert(0, cloud.next_delivery())
    elif roll < 0.8:
        writers = [{"op": "close"}, _begin(f"a{cloud.attempts + 1}", (1, 2))]
    else:
        writers = [cloud.next_delivery(), {"op": "close"}]
    # The writers start a little later than most waiters, so that a write lands while they wait.
    batch = [BatchOp(0, request, 200 + _delay(rng, 400)) for request in writers]
    for _ in range(rng.randint(2, 4)):
        batch.append(BatchOp(rng.choice((1, 2)), _waiter(rng), _delay(rng, 500)))
    return batch


_BUILD = {
    ScenarioKind.DELIVERY_RACE: _delivery_race,
    ScenarioKind.COMMIT_VS_DELIVERY: _commit_vs_delivery,
    ScenarioKind.READERS_DURING_COMMIT: _readers_during_commit,
    ScenarioKind.PAGE_VS_BEGIN: _page_vs_begin,
    ScenarioKind.DELIVERY_VS_CLOSE: _delivery_vs_close,
    ScenarioKind.MIXED: _mixed,
    ScenarioKind.READINESS: _readiness,
}


def generate_scenario(kind: ScenarioKind, rng: random.Random) -> Scenario:
    """One scenario of ``kind``; the batch's processes are numbered from 0 without gaps."""
    cloud = _Cloud(rng)
    batch = _BUILD[ScenarioKind(kind)](cloud, rng)
    used = sorted({op.process for op in batch})
    renumber = {p: i for i, p in enumerate(used)}
    batch = [BatchOp(renumber[op.process], op.request, op.delay_us) for op in batch]
    if len(used) < 2:  # always at least two processes
        batch[-1] = BatchOp(1, batch[-1].request, batch[-1].delay_us)
    return Scenario(ScenarioKind(kind), tuple(cloud.setup), tuple(batch))
