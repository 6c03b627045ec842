"""Benchmark of the proofs a writer or a migration runs before it writes (not a test).

Prints:

* the fence probe's first verdict on a store of this version (``impl.fence_probe.probe`` with its cache
  cleared): the statements it runs, and the median and least time of ``--rounds`` probes;
* the master-key proof on a version-1 store of ``--values`` sealed values (``writer.key_problem``: every
  value opened), the right key and a wrong one: the median time of ``--rounds`` proofs, and per value.

Run: ``python bench/bench_proofs.py [--rounds 30] [--values 10000]``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from envreplica.impl import fence_probe as FP
from envreplica.impl import schema
from envreplica.impl import writer as W
from envreplica.impl.sealing import Sealer

KEY = bytes(range(32))
WRONG = bytes(range(1, 33))


def _v2_store(path: Path) -> None:
    conn = sqlite3.connect(str(path), isolation_level=None)
    W.register_writer(conn)
    W.stamp(conn, key_check=Sealer(KEY).rows.key_check)
    conn.close()


def _v1_store(path: Path, n: int) -> None:
    sealer = Sealer(KEY)
    conn = sqlite3.connect(str(path), isolation_level=None)
    W.register_writer(conn, 1)
    W.create_tables(conn, 1)
    conn.execute("BEGIN")
    W._install_contract(conn, 1, 1)
    conn.execute("INSERT INTO projects VALUES ('p1', 1)")
    ref = {"kind": "staged", "stagingId": "00000000-0000-4000-8000-000000000001"}
    for i in range(n):
        key = f"K{i}"
        conn.execute("INSERT INTO records VALUES ('p1', ?, 1, 1, 0, ?, NULL, 1, 0, 'installed', NULL)",
                     (key, json.dumps(ref)))
        blob = sealer.seal("x" * 40, project_id="p1", key=key, revision=1, generation=1, value_ref=ref)
        conn.execute("INSERT INTO record_values VALUES ('p1', ?, 1, 1, ?, ?)", (key, json.dumps(ref), blob))
    conn.execute("COMMIT")
    conn.close()


def _times(rounds: int, run) -> list[float]:
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        out.append(time.perf_counter() - started)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--values", type=int, default=10_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        current = Path(tmp) / "current.db"
        _v2_store(current)
        conn = sqlite3.connect(str(current))
        counted = [0]
        real = FP._exec

        def counting(*a, **k):
            counted[0] += 1
            return real(*a, **k)

        FP._exec = counting
        FP._judge.cache_clear()
        assert FP.probe(conn).works
        FP._exec = real

        def cold() -> None:
            FP._judge.cache_clear()
            FP.probe(conn)

        t = _times(args.rounds, cold)
        conn.close()
        print(f"fence probe, schema version {schema.SCHEMA_VERSION}: {counted[0]:,} statements; "
              f"median {statistics.median(t) * 1e3:.1f} ms, least {min(t) * 1e3:.1f} ms ({args.rounds} probes)")
        old = Path(tmp) / "v1.db"
        _v1_store(old, args.values)
        conn = W._open_readonly(old)
        for name, key in (("right key", KEY), ("wrong key", WRONG)):
            rounds = max(3, args.rounds // 10)
            t = _times(rounds, lambda: W.key_problem(conn, key))
            print(f"key proof, {args.values:,} sealed values, {name}: median {statistics.median(t) * 1e3:.0f} ms "
                  f"({statistics.median(t) / args.values * 1e6:.1f} us a value, {rounds} proofs)")
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
