"""Benchmark of the SQLite replica (not a test): delivery throughput and snapshot read time.

Prints:

* live deliveries per second at ``synchronous=FULL`` and ``NORMAL``: each
  delivery creates a new key whose staged value is fetched from an
  ``EmbeddedStore`` and installed (prepare transaction, before-transaction,
  read, after-transaction, final transaction with the receipt);
* the time of one ``read_snapshot`` of a project with 1,000 installed values
  (each value opened with AES-GCM), and the model's ``read_snapshot`` of the
  same state (plaintext, in memory) for a ratio.

Run: ``.venv/bin/python bench/bench_impl.py [--deliveries N] [--values N]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

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


def bench_deliveries(directory: Path, synchronous: str, n: int, store: EmbeddedStore) -> float:
    replica = SqliteReplica(directory / f"deliveries-{synchronous}.db", sealer=Sealer(MASTER),
                            reader=store, synchronous=synchronous)
    _open_empty(replica)
    frames = [ApplyFrame(f"op{i}", PROJECT, i + 1, _state(i), Cursor(STREAM, i + 1)) for i in range(n)]
    t0 = time.perf_counter()
    for frame in frames:
        result = replica.apply_delivery(frame)
        assert isinstance(result, ApplyOk) and result.result.materialization.kind is MatKind.INSTALLED
    elapsed = time.perf_counter() - t0
    replica.close()
    return n / elapsed


def bench_snapshot(directory: Path, n: int, store: EmbeddedStore, repeats: int = 7):
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
    impl_times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        replica.read_snapshot([PROJECT])
        impl_times.append(time.perf_counter() - t0)

    model_state = impl_model_state(replica)  # the same tables, read back into the model's shape
    model_snapshot = M.read_snapshot(model_state, [PROJECT])
    assert model_snapshot == snapshot, "the implementation serves what the model serves"
    model_times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        M.read_snapshot(model_state, [PROJECT])
        model_times.append(time.perf_counter() - t0)
    replica.close()
    return setup, first, statistics.median(impl_times), statistics.median(model_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=500, help="deliveries per synchronous setting")
    parser.add_argument("--values", type=int, default=1000, help="installed values in the snapshot")
    args = parser.parse_args()

    print(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"SQLAlchemy {sqlalchemy.__version__}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}")
    store = _seed_store(max(args.deliveries, args.values))
    with tempfile.TemporaryDirectory(prefix="envreplica-bench-") as tmp:
        directory = Path(tmp)
        print(f"database directory: {directory}")
        for synchronous in ("FULL", "NORMAL"):
            rate = bench_deliveries(directory, synchronous, args.deliveries, store)
            print(f"live deliveries, staged value fetched and installed, synchronous={synchronous:<6}: "
                  f"{rate:8.1f} deliveries/s ({1000 / rate:.2f} ms each, {args.deliveries} deliveries)")
        setup, first, impl_median, model_median = bench_snapshot(directory, args.values, store)
        print(f"snapshot setup: {args.values} values paged, fetched and committed in {setup:.2f} s")
        print(f"read_snapshot of {args.values} installed values: first {first * 1000:.1f} ms, "
              f"median of 7 {impl_median * 1000:.1f} ms")
        print(f"model read_snapshot of the same state: median of 7 {model_median * 1000:.2f} ms; "
              f"implementation / model = {impl_median / model_median:.0f}x")


if __name__ == "__main__":
    main()
