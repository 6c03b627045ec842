"""Benchmark of the SQLite replica (not a test): delivery throughput and snapshot read time, with floors.

Prints:

* live deliveries per second at ``synchronous=FULL`` and ``NORMAL``: each
  delivery creates a new key whose staged value is fetched from an
  ``EmbeddedStore`` and installed (prepare transaction, before-transaction,
  read, after-transaction, final transaction with the receipt);
* the time of one ``read_snapshot`` of a project with 1,000 installed values
  (each value opened with AES-GCM), and the model's ``read_snapshot`` of the
  same state (plaintext, in memory) for a ratio.

Those lines are as before this file had floors (the same scenario, file and
count: ``N`` deliveries on one fresh replica, rate = ``N`` / their summed
time), so old and new outputs compare. Each figure now has floors, measured
in the same process and interleaved with it (``bench/floors.py``):

* statement recording: the ``N`` deliveries are first run once on another
  replica (``synchronous=OFF``; not timed) while every statement it sends to
  SQLite is recorded with its parameters (``BEGIN IMMEDIATE`` / ``BEGIN`` and
  each ``commit()`` included). The counts per delivery are printed:
  transactions, statements, SELECTs. The replica runs its statements on the
  pysqlite connection itself, which SQLAlchemy's ``before_cursor_execute``
  event does not see (the line says how many it saw); the recorder proxies
  the pysqlite connection instead.
* same-statement floor: the recorded statements, replayed in order with the
  same parameters through a raw ``sqlite3`` connection (same pragmas:
  ``journal_mode=WAL``, the same ``synchronous``, ``foreign_keys=ON``,
  ``busy_timeout``; the writer function registered, as the fence triggers
  need) on a copy of that replica's file as it was before the deliveries.
  It is SQLite's cost of exactly the replica's transactions, with no Python
  above it but the loop. The copy ends in the recording replica's authority
  row (checked).
* minimal floor: the least SQL a delivery needs, one transaction:
  ``BEGIN IMMEDIATE``, read the authority row, insert or replace the record,
  value (the same sealed blob) and receipt rows, update the authority row,
  ``COMMIT`` (the rows recorded above; no sealing, tags or decisions).
* snapshot floor: the rows ``read_snapshot`` serves, read with one join
  through a raw connection and built into the same ``Snapshot`` (each JSON
  column parsed once, the binding state through ``spec.wire``, each value
  opened with the same ``Sealer``), none of the replica's integrity checks;
  it must equal the replica's snapshot (asserted).

Cryptography: the deliveries are run once more with the primitives they call
logged (HMAC row tags and receipt MAC, the SHAKE-256 digest masks, AES-GCM),
each logged call is made again alone, and the line prints the calls per
delivery and their cost. Each delivery figure then ends with the rest: the
implementation's time past the same-statement floor and that cost (Python:
the seed's decisions, rows built and parsed, the glue), and how much of it
an efficiency of 0.8 would leave.

Ratios are ``efficiency = floor time / implementation time``: 1.0 is as fast
as raw SQLite doing the floor's work, 0.25 means the implementation takes four
times the floor's time. The delivery runs alternate the three (implementation,
same statements, minimal) in ``--batches`` batches, each batch's order
rotated, and the efficiency printed is the median of the batches' ratios;
the snapshot alternates one implementation read and one floor read,
``--repeats`` times, and compares the medians.

``--cython N`` runs this benchmark ``N`` times with this checkout's committed
code (``HEAD``, in a worktree) and ``N`` times with the same code compiled by Cython
(``bench/baseline.py``'s ``compiled``: ``impl``, the wire and domain types,
the model; untyped; needs ``pip install cython`` and a C compiler),
alternating, each in its own process: what compiling the implementation as
it is would give the delivery and snapshot figures.

Run: ``.venv/bin/python bench/bench_impl.py [--deliveries N] [--values N] [--batches N] [--cython N]`` (about 20 s
a run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import sqlalchemy

from envreplica.conformance.readback import impl_model_state
from envreplica.impl.config import ReplicaConfig
from envreplica.impl.replica import SqliteReplica
from envreplica.impl.sealing import Sealer
from envreplica.impl.valuestores import EmbeddedStore, put_for_ref
from envreplica.model import replica as M
from envreplica.model.store import staged_envelope
from envreplica.spec.domain import (
    ApplyFrame,
    ApplyOk,
    BeginFrame,
    BindingState,
    CommitFrame,
    Cursor,
    Head,
    MatKind,
    PageFrame,
    PageOk,
    ProjectVersion,
    StagedRef,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors as F  # noqa: E402  (bench/floors.py, beside this file)
from baseline import CompileError, compiled, worktree  # noqa: E402  (bench/baseline.py)

#: What ``--cython`` compiles: the implementation and every module of the package its hot path calls.
COMPILED = ["impl/anchor.py", "impl/config.py", "impl/decisions.py", "impl/engine.py", "impl/files.py",
            "impl/integrity.py", "impl/replica.py", "impl/rows.py", "impl/schema.py", "impl/sealing.py",
            "impl/tables.py", "impl/valuestores.py", "impl/writer.py", "spec/frozen.py", "spec/domain.py",
            "spec/wire.py", "spec/gate.py", "model/fmap.py", "model/state.py", "model/rules.py", "model/store.py",
            "model/replica.py"]

MASTER = bytes(range(32))
ORG, STREAM, ATTEMPT, PROJECT = "org", "s1", "a1", "p1"
PAGE_SIZE = 250  # records per snapshot page (the ack bound allows ~900 of these)


def _uuid(i: int) -> str:
    return f"{i:08x}-0000-4000-8000-000000000000"


def _state(i: int) -> BindingState:
    return BindingState(f"K{i:05d}", Head(1, 1, False, StagedRef(_uuid(i))), None, 1, 0)


def _seed_store(n: int) -> EmbeddedStore:
    store = EmbeddedStore()
    prefix = ReplicaConfig().prefix
    for i in range(n):
        s = _state(i)
        put_for_ref(store, prefix, PROJECT, s.key, s.head.value_ref,
                    staged_envelope(ORG, PROJECT, s.key, _uuid(i), f"value-{i:05d}-" + "x" * 40))
    return store


def _open_empty(replica: SqliteReplica) -> None:
    replica.begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), (1, 2), ORG)
    assert replica.apply_page(PageFrame("op-p", ATTEMPT, PROJECT, None, 0, (), True)).ok
    assert replica.complete(CommitFrame(ATTEMPT, Cursor(STREAM, 0), (ProjectVersion(PROJECT, 0),))).ok


def _frames(n: int) -> list[ApplyFrame]:
    return [ApplyFrame(f"op{i}", PROJECT, i + 1, _state(i), Cursor(STREAM, i + 1)) for i in range(n)]


def _deliver(replica: SqliteReplica, frames: list[ApplyFrame]) -> None:
    for frame in frames:
        result = replica.apply_delivery(frame)
        assert isinstance(result, ApplyOk) and result.result.materialization.kind is MatKind.INSTALLED


def bench_deliveries(directory: Path, synchronous: str, n: int, store: EmbeddedStore) -> float:
    """Deliveries per second of ``n`` deliveries on a fresh replica, alone (``bench_vs_ref.py`` calls it)."""
    replica = SqliteReplica(directory / f"deliveries-{synchronous}.db", sealer=Sealer(MASTER),
                            reader=store, synchronous=synchronous)
    _open_empty(replica)
    frames = _frames(n)
    t0 = time.perf_counter()
    _deliver(replica, frames)
    elapsed = time.perf_counter() - t0
    replica.close()
    return n / elapsed


# ---------------------------------------------------------------------------
# Delivery floors
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """The statements of ``n`` deliveries on one replica, and its file before and after them."""

    base: Path  # a copy of the replica's file after ``_open_empty``, before the deliveries
    deliveries: list  # per delivery, its ``floors.Step`` list
    events: list  # per delivery, [statements SQLAlchemy's before_cursor_execute saw, its commit events]
    authority_after: tuple  # the authority row after the deliveries


def _authority_row(path: Path) -> tuple:
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        return conn.execute("SELECT * FROM authority").fetchone()
    finally:
        conn.close()


def record_deliveries(directory: Path, n: int, store: EmbeddedStore) -> Recording:
    """Run ``n`` deliveries on a fresh replica (``synchronous=OFF``: not timed), recording each one's statements."""
    path = directory / "recording.db"
    replica = SqliteReplica(path, sealer=Sealer(MASTER), reader=store, synchronous="OFF")
    _open_empty(replica)
    base = directory / "recording-base.db"
    F.copy_database(path, base)
    with F.StatementRecorder(replica) as recorder:
        for frame in _frames(n):
            recorder.mark()
            _deliver(replica, [frame])
    replica.close()
    return Recording(base, recorder.groups, recorder.events, _authority_row(path))


@dataclass(frozen=True)
class DeliveryFigures:
    rate: float  # implementation deliveries per second (n / summed time): today's figure
    same_ms: float  # the same statements through raw sqlite3, per delivery (summed time / n)
    minimal_ms: float  # the minimal single transaction, per delivery
    same_efficiency: float  # median over batches of same-statement time / implementation time
    minimal_efficiency: float  # median over batches of minimal time / implementation time


def bench_deliveries_with_floors(directory: Path, synchronous: str, n: int, store: EmbeddedStore,
                                 recording: Recording, batches: int) -> DeliveryFigures:
    """``bench_deliveries``, in ``batches`` batches, each followed or preceded by the floors of its deliveries."""
    replica = SqliteReplica(directory / f"deliveries-{synchronous}.db", sealer=Sealer(MASTER),
                            reader=store, synchronous=synchronous)
    _open_empty(replica)
    frames = _frames(n)
    paths = {name: directory / f"floor-{name}-{synchronous}.db" for name in ("same", "minimal")}
    for path in paths.values():
        F.copy_database(recording.base, path)
    raw = {name: F.open_raw(path, synchronous) for name, path in paths.items()}
    minimal = [F.minimal_steps(steps) for steps in recording.deliveries]
    bounds = [(b * n // batches, (b + 1) * n // batches) for b in range(batches)]
    totals = {"impl": 0.0, "same": 0.0, "minimal": 0.0}
    ratios: dict[str, list[float]] = {"same": [], "minimal": []}
    for b, (lo, hi) in enumerate(bounds):
        work = {
            "impl": lambda lo=lo, hi=hi: _deliver(replica, frames[lo:hi]),
            "same": lambda steps=[s for d in recording.deliveries[lo:hi] for s in d]: F.replay(raw["same"], steps),
            "minimal": lambda steps=[s for d in minimal[lo:hi] for s in d]: F.replay(raw["minimal"], steps),
        }
        order = list(work)[b % 3:] + list(work)[:b % 3]  # rotated each batch: no side always goes first
        took = {}
        for name in order:
            t0 = time.perf_counter()
            work[name]()
            took[name] = time.perf_counter() - t0
        for name in totals:
            totals[name] += took[name]
        for name in ratios:
            ratios[name].append(took[name] / took["impl"])
    for conn in raw.values():
        conn.close()
    replica.close()
    assert _authority_row(paths["same"]) == recording.authority_after, "the replay ends where the recording did"
    return DeliveryFigures(n / totals["impl"], totals["same"] * 1000 / n, totals["minimal"] * 1000 / n,
                           statistics.median(ratios["same"]), statistics.median(ratios["minimal"]))


def _per_delivery(values: list) -> str:
    """One count per delivery, as ``7`` when they are all equal, else ``mean 7.2 (min 7, max 9)``."""
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"mean {statistics.mean(values):.1f} (min {lo}, max {hi})"


class _CryptoLog:
    """The cryptographic primitives a delivery calls, logged with their arguments, to be replayed alone.

    ``with log.logging(sealer):`` puts logging stand-ins in place of ``hmac.digest``, ``hmac.new``,
    ``hashlib.shake_256`` and ``sealer``'s AES-GCM, and puts the real ones back after.
    """

    def __init__(self) -> None:
        self.calls: list = []  # (label, replay: a zero-argument function doing the same computation)

    def _log(self, label: str, replay) -> None:
        self.calls.append((label, replay))

    @contextlib.contextmanager
    def logging(self, sealer: Sealer):
        import hashlib
        import hmac
        from unittest import mock

        digest, new, shake, aead, log = hmac.digest, hmac.new, hashlib.shake_256, sealer._aead, self._log

        def logged_digest(key, msg, name):
            log(f"HMAC-{name.upper()}", lambda: digest(key, msg, name))
            return digest(key, msg, name)

        def logged_new(key, msg=None, digestmod=None):
            log("HMAC-SHA256 (receipt)", lambda: new(key, msg, digestmod).hexdigest())
            return new(key, msg, digestmod)

        class Shake:
            def __init__(self, data=b""):
                self._data = data

            def digest(self, n):
                log("SHAKE-256 (digest masks)", lambda: shake(self._data).digest(n))
                return shake(self._data).digest(n)

        class Aead:
            def encrypt(self, nonce, data, aad):
                log("AES-256-GCM seal", lambda: aead.encrypt(nonce, data, aad))
                return aead.encrypt(nonce, data, aad)

            def decrypt(self, nonce, data, aad):
                log("AES-256-GCM open", lambda: aead.decrypt(nonce, data, aad))
                return aead.decrypt(nonce, data, aad)

        with mock.patch.object(hmac, "digest", logged_digest), mock.patch.object(hmac, "new", logged_new), \
                mock.patch.object(hashlib, "shake_256", Shake), mock.patch.object(sealer, "_aead", Aead()):
            yield self


def crypto_per_delivery(directory: Path, n: int, store: EmbeddedStore) -> tuple[dict, float]:
    """The primitives ``n`` deliveries call ({label: calls per delivery}) and their replay's ms per delivery.

    The deliveries run once (``synchronous=OFF``) with ``hmac.digest``, ``hmac.new``, ``hashlib.shake_256``
    and the sealer's AES-GCM logged; then every logged call is made again alone, with the same arguments,
    three times, and the fastest pass is divided by ``n``: what the cryptography of a delivery costs by itself.
    """
    log = _CryptoLog()
    sealer = Sealer(MASTER)
    replica = SqliteReplica(directory / "crypto.db", sealer=sealer, reader=store, synchronous="OFF")
    _open_empty(replica)
    try:
        with log.logging(sealer):
            _deliver(replica, _frames(n))
    finally:
        replica.close()
    counts = Counter(label for label, _ in log.calls)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _, again in log.calls:
            again()
        best = min(best, time.perf_counter() - t0)
    return {k: v / n for k, v in sorted(counts.items())}, best / n * 1000


def describe_recording(recording: Recording) -> list[str]:
    """The recorded statement counts per delivery, and what SQLAlchemy's events saw of them."""
    counts = [F.count_steps(steps) for steps in recording.deliveries]
    first = ["SELECT", "DELETE", "INSERT", "UPDATE"]
    last = ["BEGIN IMMEDIATE", "BEGIN", "COMMIT", "ROLLBACK"]
    seen = {v for c in counts for v in c} - {"statements", "transactions"}
    verbs = [v for v in first if v in seen] + sorted(seen - set(first) - set(last)) + [v for v in last if v in seen]

    def each(name: str) -> str:
        return _per_delivery([c.get(name, 0) for c in counts])

    returning = _per_delivery([sum(1 for s in steps if s.op == F.QUERY and not s.sql.startswith("SELECT"))
                               for steps in recording.deliveries])
    begins = ", ".join(f"{each(v)} {v}" for v in verbs if v.startswith("BEGIN"))
    return [
        f"recorded per delivery ({len(counts)} deliveries): {each('transactions')} transactions ({begins}), "
        f"{each('statements')} statements: " + ", ".join(f"{each(v)} {v}" for v in verbs)
        + f" (writes with RETURNING: {returning}; COMMIT is pysqlite's commit())",
        f"  SQLAlchemy's before_cursor_execute event saw {_per_delivery([e[0] for e in recording.events])} "
        f"of them, its commit event {_per_delivery([e[1] for e in recording.events])} (the replica runs its "
        f"statements on the pysqlite connection; the recorder proxies that connection)",
    ]


# ---------------------------------------------------------------------------
# Snapshot
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotFigures:
    setup: float
    first: float  # the first read_snapshot
    impl: float  # median of repeats
    model: float  # the model's read_snapshot of the same state, median of repeats
    floor: Optional[float] = None  # the snapshot floor, median of repeats (interleaved with impl)


def _snapshot_figures(directory: Path, n: int, store: EmbeddedStore, repeats: int, with_floor: bool
                      ) -> SnapshotFigures:
    replica = SqliteReplica(directory / "snapshot.db", sealer=Sealer(MASTER), reader=store, synchronous="NORMAL")
    replica.begin(BeginFrame(STREAM, ATTEMPT, (PROJECT,)), (1, 2), ORG)
    states = [_state(i) for i in range(n)]
    after = None
    t_setup = time.perf_counter()
    for start in range(0, n, PAGE_SIZE):
        chunk = tuple(states[start:start + PAGE_SIZE])
        complete = start + PAGE_SIZE >= n
        page = replica.apply_page(PageFrame(f"op{start}", ATTEMPT, PROJECT, after, 1, chunk, complete))
        assert isinstance(page, PageOk), page
        after = chunk[-1].key
    assert replica.complete(CommitFrame(ATTEMPT, Cursor(STREAM, 0), (ProjectVersion(PROJECT, 1),))).ok
    setup = time.perf_counter() - t_setup

    first_t0 = time.perf_counter()
    snapshot = replica.read_snapshot([PROJECT])
    first = time.perf_counter() - first_t0
    assert snapshot is not None and len(snapshot.projects[0].entries) == n
    assert all(e.value is not None for e in snapshot.projects[0].entries)
    raw = None
    if with_floor:
        raw = F.open_raw(replica.path, "NORMAL")
        assert F.snapshot_floor(raw, replica.sealer, [PROJECT]) == snapshot, "the floor serves what the replica serves"
    impl_times, floor_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        replica.read_snapshot([PROJECT])
        impl_times.append(time.perf_counter() - t0)
        if raw is not None:
            t0 = time.perf_counter()
            F.snapshot_floor(raw, replica.sealer, [PROJECT])
            floor_times.append(time.perf_counter() - t0)
    if raw is not None:
        raw.close()

    model_state = impl_model_state(replica)  # the same tables, read back into the model's shape
    model_snapshot = M.read_snapshot(model_state, [PROJECT])
    assert model_snapshot == snapshot, "the implementation serves what the model serves"
    model_times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        M.read_snapshot(model_state, [PROJECT])
        model_times.append(time.perf_counter() - t0)
    replica.close()
    return SnapshotFigures(setup, first, statistics.median(impl_times), statistics.median(model_times),
                           statistics.median(floor_times) if floor_times else None)


def bench_snapshot(directory: Path, n: int, store: EmbeddedStore, repeats: int = 7):
    """(setup, first read, median read, model's median read) in seconds, no floor (``bench_vs_ref.py`` calls it)."""
    f = _snapshot_figures(directory, n, store, repeats, with_floor=False)
    return f.setup, f.first, f.impl, f.model


def against_compiled(rounds: int, args: list[str]) -> int:
    """This benchmark ``rounds`` times with ``HEAD`` interpreted and compiled by Cython, alternating.

    Both sides are worktrees of ``HEAD`` (one compiled, each module checked to import from it), so uncommitted
    changes in this checkout are in neither.
    """
    import subprocess

    try:
        with worktree("HEAD") as plain, compiled("HEAD", COMPILED) as pythonpath:
            for n in range(rounds):
                for label, path in (("HEAD compiled by Cython", pythonpath), ("HEAD interpreted", plain)):
                    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                    env["PYTHONPATH"] = path
                    print(f"== round {n + 1} of {rounds}: {label}", flush=True)
                    subprocess.run([sys.executable, __file__, *args], env=env, check=True)
    except CompileError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=500, help="deliveries per synchronous setting")
    parser.add_argument("--values", type=int, default=1000, help="installed values in the snapshot")
    parser.add_argument("--batches", type=int, default=5,
                        help="interleaved batches of the deliveries (implementation, same statements, minimal)")
    parser.add_argument("--cython", type=int, metavar="N",
                        help="N runs each of HEAD as it is and compiled by Cython, alternating, in subprocesses")
    args = parser.parse_args()
    if args.cython:
        return against_compiled(args.cython, [f"--deliveries={args.deliveries}", f"--values={args.values}",
                                              f"--batches={args.batches}"])
    batches = max(1, min(args.batches, args.deliveries))
    repeats = 7

    print(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"SQLAlchemy {sqlalchemy.__version__}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}")
    store = _seed_store(max(args.deliveries, args.values))
    with tempfile.TemporaryDirectory(prefix="envreplica-bench-") as tmp:
        directory = Path(tmp)
        print(f"database directory: {directory}")
        print("efficiency = floor time / implementation time (1.0: as fast as raw sqlite3 doing the floor's work); "
              f"deliveries: median of {batches} interleaved batches")
        recording = record_deliveries(directory, args.deliveries, store)
        for line in describe_recording(recording):
            print(line)
        minimal_count = len(F.minimal_steps(recording.deliveries[0]))
        calls, crypto_ms = crypto_per_delivery(directory, args.deliveries, store)
        print("cryptography per delivery: " + ", ".join(f"{v:g} {k}" for k, v in calls.items())
              + f"; replayed alone: {crypto_ms:.3f} ms each")
        for synchronous in ("FULL", "NORMAL"):
            f = bench_deliveries_with_floors(directory, synchronous, args.deliveries, store, recording, batches)
            rate = f.rate
            print(f"live deliveries, staged value fetched and installed, synchronous={synchronous:<6}: "
                  f"{rate:8.1f} deliveries/s ({1000 / rate:.2f} ms each, {args.deliveries} deliveries)")
            print(f"  floor, the same statements replayed through raw sqlite3:    {f.same_ms:6.2f} ms each; "
                  f"efficiency {f.same_efficiency:.2f}")
            print(f"  floor, minimal single transaction ({minimal_count} statements), raw:  {f.minimal_ms:6.2f} ms "
                  f"each; efficiency {f.minimal_efficiency:.2f}")
            rest = 1000 / rate - f.same_ms - crypto_ms
            print(f"  the rest, past the same-statement floor and the cryptography: {rest:.2f} ms each (Python: the "
                  f"seed's decisions, rows built and parsed, the glue"
                  + ("; and the disk's variance" if synchronous == "FULL" else "")
                  + f"); efficiency 0.8 would leave {max(0.0, f.same_ms / 0.8 - f.same_ms - crypto_ms) * 1000:.0f} "
                  f"us for it")
        s = _snapshot_figures(directory, args.values, store, repeats, with_floor=True)
        print(f"snapshot setup: {args.values} values paged, fetched and committed in {s.setup:.2f} s")
        print(f"read_snapshot of {args.values} installed values: first {s.first * 1000:.1f} ms, "
              f"median of {repeats} {s.impl * 1000:.1f} ms")
        print(f"  floor, the same rows through raw sqlite3 (one join, JSON parsed, values opened): median of "
              f"{repeats} {s.floor * 1000:.1f} ms; efficiency {s.floor / s.impl:.2f}")
        print(f"model read_snapshot of the same state: median of {repeats} {s.model * 1000:.2f} ms; "
              f"implementation / model = {s.impl / s.model:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
