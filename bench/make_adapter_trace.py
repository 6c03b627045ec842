"""Writes bench/traces/adapter-throughput.jsonl: the fixed request trace of bench/bench_adapter.py.

A consistent cloud's traffic, built (not recorded from the lockstep, whose
examples are short, mostly odd on purpose, and carry values of up to 256 KiB)
with the builders of tests/adapter_requests.py, from ``random.Random(SEED)``:
so the file is the same whatever the Hypothesis version. Sessions, each:

* ``reset``, ``status``; a ``begin`` of stream ``sN`` over four projects
  (32 keys); the values put in the store (staged envelopes, and a few
  legacy versions); each project's records in pages of up to 6 (``after``
  chained, the last ``complete``) at the cloud's record versions; the
  ``commit`` at high-water 0;
* then 520 deliveries, one sequence after another, each moving a record one
  reachable step (mostly a rotation to a new staged value, put in the
  store just before; else withhold / omit / bind / a policy-epoch upgrade
  / delete / relist; a deleted record is saved again next) at its
  project's next record version; now and then an at-least-once
  retransmission (answered ``replayed``), one from beyond a lost delivery
  (refused ``delivery_gap``, not consumed), a ``snapshot`` of one or all
  projects, a ``status``;
* midway a reconciliation: a new attempt, every page again at the current
  record versions, a dozen deliveries carrying its
  ``reconciliationAttemptId``, the commit at the true high-water mark;
* at the end ``receipts``, a ``snapshot`` of every project, ``status``.

No ``duringFetch``, ``restart``, crashes or invalid requests: this is the
steady path, what a benchmark of an implementation's speed should time;
the lockstep covers the rest.

The script replays the trace on the model in process and prints what the
answers are (ok, refused, errors): a benchmark input that is mostly
refusals would measure the wrong path. ``bench/bench_adapter.py`` checks
that the model and the SQLite adapters answer it the same.

Run: ``.venv/bin/python bench/make_adapter_trace.py [--out PATH] [--check]``
(``--check`` rebuilds in memory and fails if the committed file differs).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import adapter_requests as R  # noqa: E402  (tests/adapter_requests.py: the request builders)

from envreplica.model.store import legacy_envelope  # noqa: E402

SEED = 20240511
SESSIONS = 4
DELIVERIES_PER_SESSION = 520
PROJECTS = ("p1", "p2", "p3", "p4")
KEYS_PER_PROJECT = (14, 9, 6, 3)
EPOCHS = (1, 2)
PAGE_SIZE = 6
DEFAULT_OUT = HERE / "traces" / "adapter-throughput.jsonl"

#: Weighted record moves of a delivery (``lockstep.records._moved``'s reachable ones).
MOVES = (("rotate", 72), ("withhold", 4), ("omit", 3), ("bind", 9), ("upgrade", 4), ("delete", 5),
         ("relist", 3))


class _Cloud:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.out: list[dict] = []

    # -- values -------------------------------------------------------------

    def value(self) -> str:
        n = self.rng.choice((8, 16, 24, 40, 64))
        return "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
                       for _ in range(n))

    def staged_ref(self) -> dict:
        return R.staged(str(uuid.UUID(int=self.rng.getrandbits(128), version=4)))

    def put_value(self, project: str, record: dict) -> None:
        ref = record["head"]["valueRef"]
        if ref is None:
            return
        key = record["key"]
        if ref["kind"] == "staged":
            self.out.append(R.put(key, ref, project=project, value=self.value()))
        else:
            self.out.append(R.put(key, ref, project=project, raw=legacy_envelope(project, key, self.value())))

    # -- records ------------------------------------------------------------

    def new_record(self, key: str, legacy_version: int = 0) -> dict:
        ref = R.legacy(legacy_version) if legacy_version else self.staged_ref()
        return R.rec(key, rev=1, gen=1, ref=ref, epoch=self.rng.choice(EPOCHS))

    def moved(self, project: str, r: dict, move: str) -> dict:
        out = json.loads(json.dumps(r))
        h, oh = r["head"], out["head"]
        rev, gen = h["revision"], h["generation"]
        if h["tombstone"]:  # the only reachable move from a tombstone: a save after the delete
            oh.update(revision=rev + 1, generation=gen + 1, tombstone=False, valueRef=self.staged_ref())
        elif move == "rotate":
            oh.update(generation=gen + 1, valueRef=self.staged_ref())
        elif move == "withhold":
            oh["revision"] = rev + 1
            out["binding"] = {"kind": "withhold", "reason": "legal_hold"}
        elif move == "omit":
            oh["revision"] = rev + 1
            out["binding"] = {"kind": "omit"}
        elif move == "upgrade":
            oh["revision"] = rev + 1
            out["policyEpoch"] = 2 if r["policyEpoch"] == 1 else 1
        elif move == "delete":
            oh.update(revision=rev + 1, generation=gen + 1, tombstone=True, valueRef=None)
        elif move == "relist":
            out["listingGeneration"] = r["listingGeneration"] + 1
        else:  # "bind" (an approval: a new revision, the value kept)
            oh["revision"] = rev + 1
            out["binding"] = None
        if oh["valueRef"] is not None and oh["valueRef"] != h["valueRef"]:
            self.put_value(project, out)
        return out

    # -- a session ----------------------------------------------------------

    def begin_and_pages(self, stream: str, attempt: str, records: dict, versions: dict) -> None:
        """A reconciliation's begin, then every project's records in pages at its current record version."""
        self.out.append(R.begin(attempt, stream, PROJECTS, EPOCHS))
        for project in PROJECTS:
            rows = [records[project][k] for k in sorted(records[project])]
            after = None
            for start in range(0, len(rows), PAGE_SIZE):
                chunk = rows[start:start + PAGE_SIZE]
                last = start + PAGE_SIZE >= len(rows)
                self.out.append(R.page(chunk, attempt, project, after, versions[project], complete=last))
                after = chunk[-1]["key"]

    def commit(self, stream: str, attempt: str, versions: dict, high_water: int) -> None:
        self.out.append(R.commit(attempt, stream, high_water, [(p, versions[p]) for p in PROJECTS]))

    def session(self, n: int) -> None:
        rng = self.rng
        stream = f"s{n}"
        self.out += [R.reset(), R.op("status")]
        records: dict[str, dict] = {}
        versions = {p: rng.randint(1, 40) for p in PROJECTS}  # the cloud's record versions when it begins
        for project, count in zip(PROJECTS, KEYS_PER_PROJECT):
            keys = sorted({f"KEY_{project.upper()}_{i:02d}" for i in range(count)})
            records[project] = {}
            for i, key in enumerate(keys):
                r = self.new_record(key, legacy_version=3 if i % 7 == 3 else 0)
                records[project][key] = r
                self.put_value(project, r)
        self.begin_and_pages(stream, f"a{n}-0", records, versions)
        self.commit(stream, f"a{n}-0", versions, 0)
        sequence = 0
        sent: collections.deque = collections.deque(maxlen=8)
        recon_at = DELIVERIES_PER_SESSION // 2
        open_attempt = None
        for d in range(DELIVERIES_PER_SESSION):
            if d == recon_at:  # a reconciliation: deliveries carry its attempt until its commit
                open_attempt = f"a{n}-1"
                self.begin_and_pages(stream, open_attempt, records, versions)
            if open_attempt is not None and d == recon_at + 12:
                self.commit(stream, open_attempt, versions, sequence)
                open_attempt = None
            roll = rng.random()
            if roll < 0.03 and sent:
                self.out.append(json.loads(json.dumps(rng.choice(list(sent)))))  # at-least-once: replayed
            elif roll < 0.10:
                self.out.append(R.snapshot(*(PROJECTS if rng.random() < 0.3 else (rng.choice(PROJECTS),))))
            elif roll < 0.12:
                self.out.append(R.op("status"))
            project = rng.choices(PROJECTS, weights=KEYS_PER_PROJECT)[0]
            key = rng.choice(sorted(records[project]))
            move = rng.choices([m for m, _ in MOVES], weights=[w for _, w in MOVES])[0]
            r = self.moved(project, records[project][key], move)
            records[project][key] = r
            versions[project] += 1
            sequence += 1
            request = R.delivery(r, sequence, versions[project], project, stream, attempt=open_attempt)
            self.out.append(request)
            sent.append(request)
            if rng.random() < 0.015:  # one from beyond a lost delivery: refused delivery_gap, not consumed
                ahead = json.loads(json.dumps(request))
                ahead["frame"]["delivery"]["sequence"] = sequence + 2
                ahead["frame"]["opId"] = f"op-{sequence + 2}"
                self.out.append(ahead)
        self.out += [R.op("receipts"), R.snapshot(*PROJECTS), R.op("status")]


def build(seed: int = SEED) -> list[dict]:
    """The trace's requests, numbered 1.. (deterministic for ``seed``)."""
    cloud = _Cloud(random.Random(seed))
    for n in range(1, SESSIONS + 1):
        cloud.session(n)
    return [dict(r, id=i) for i, r in enumerate(cloud.out, 1)]


def encode(requests: list[dict]) -> str:
    return "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=True) + "\n" for r in requests)


def classify(response: dict) -> str:
    """``ok``, ``refused`` (a result with ``ok: false``: its code), or ``error`` (its type)."""
    if response.get("ok") is not True:
        return "error " + str((response.get("error") or {}).get("type"))
    result = response.get("result")
    if isinstance(result, dict) and result.get("ok") is False:
        return "refused " + str(result.get("code"))
    return "ok"


def tally(responses: list[dict]) -> collections.Counter:
    return collections.Counter(classify(r) for r in responses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="fail if the file differs from a rebuild")
    args = parser.parse_args()
    requests = build()
    text = encode(requests)
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            print(f"{args.out} differs from what {Path(__file__).name} builds: rerun it without --check",
                  file=sys.stderr)
            return 1
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.model.state import Variant

    model = ModelDriver(Variant.FIXED)
    responses = [model.handle(json.loads(json.dumps(r))) for r in requests]
    counts = tally(responses)
    replayed = sum(1 for r in responses if isinstance(r.get("result"), dict) and r["result"].get("replayed") is True)
    kinds = collections.Counter()
    for r in responses:
        result = r.get("result") if isinstance(r.get("result"), dict) else {}
        items = [result["result"]] if isinstance(result.get("result"), dict) else result.get("results") or []
        kinds.update(str((i.get("materialization") or {}).get("kind")) for i in items if isinstance(i, dict))
    ops = collections.Counter(r["op"] for r in requests)
    print(f"{args.out}: {len(requests)} requests, {len(text.encode()):,} bytes")
    print("  ops: " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))
    print("  model answers: " + ", ".join(f"{kind} {n}" for kind, n in counts.most_common())
          + f" ({replayed} of the ok ones replayed)")
    print("  materializations (pages and deliveries): " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
