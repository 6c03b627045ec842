"""Floors for ``bench_impl.py``: the same work through raw ``sqlite3``, with no envreplica above it.

What it holds:

* ``StatementRecorder``: records every statement a ``SqliteReplica`` sends to
  SQLite, in order, with its parameters (``BEGIN IMMEDIATE`` / ``BEGIN`` and
  the pysqlite ``commit()`` that ends each transaction included). The replica
  runs its statements on the pysqlite connection itself (``impl.tables``:
  ``dbapi_connection.execute``; ``impl.engine`` emits its BEGINs the same way),
  so SQLAlchemy's ``before_cursor_execute`` event does not see them; the
  recorder puts a forwarding proxy in place of the pool's pysqlite connection
  while it is active, and also counts what SQLAlchemy's ``before_cursor_execute``
  and ``commit`` events saw (to show what an event-based recording would miss).
* ``open_raw``: a plain ``sqlite3`` connection with the engine's pragmas
  (``isolation_level=None``, ``busy_timeout``, ``journal_mode=WAL``,
  ``synchronous``, ``foreign_keys=ON``) and the writer function registered
  (``impl.writer.register_writer``: the fence triggers call it).
* ``copy_database``: a consistent copy of a live WAL file (SQLite's backup API).
* ``replay``: run recorded steps on a raw connection (the same-statement floor).
* ``minimal_steps``: the least SQL of one delivery, one transaction (the minimal floor).
* ``snapshot_floor``: a project's served view read with one join and built
  into the same ``Snapshot``: JSON columns parsed once, the binding state
  through ``spec.wire``'s parser, each value opened with the same ``Sealer``.

Leaves out on purpose: the replica's integrity checks (tags, set digests,
write counter) and its decisions; a floor is what SQLite (and, for the
snapshot, the essential parsing and AES-GCM) costs on its own.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import event

from envreplica.impl import schema as S
from envreplica.impl.writer import register_writer
from envreplica.spec import wire
from envreplica.spec.domain import INSTALLED, Materialization, MatKind, Snapshot, SnapshotEntry, SnapshotProject

__all__ = ["QUERY", "WRITE", "COMMIT", "ROLLBACK", "Step", "StatementRecorder", "open_raw", "copy_database",
           "replay", "count_steps", "minimal_steps", "snapshot_floor"]

# What a step does on the raw connection.
QUERY, WRITE, COMMIT, ROLLBACK = "query", "write", "commit", "rollback"


@dataclass(frozen=True, slots=True)
class Step:
    """One recorded call: ``execute(sql, params)`` (a ``QUERY`` has rows, fetched), ``commit()`` or ``rollback()``."""

    op: str
    sql: str = ""
    params: Any = ()


class _RecordingCursor:
    """A pysqlite cursor whose ``execute`` is recorded (SQLAlchemy's own statements go through one)."""

    def __init__(self, real: sqlite3.Cursor, recorder: "StatementRecorder") -> None:
        self._real, self._recorder = real, recorder

    def execute(self, sql, params=()):
        result = self._real.execute(sql, params)
        self._recorder._add(Step(QUERY if self._real.description is not None else WRITE, sql, tuple(params)))
        return result

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __iter__(self):
        return iter(self._real)


class _RecordingConnection:
    """Stands in for the pool's pysqlite connection: records, then forwards."""

    def __init__(self, real: sqlite3.Connection, recorder: "StatementRecorder") -> None:
        self._real, self._recorder = real, recorder

    def execute(self, sql, params=()):
        cursor = self._real.execute(sql, params)
        self._recorder._add(Step(QUERY if cursor.description is not None else WRITE, sql, tuple(params)))
        return cursor

    def commit(self) -> None:
        self._real.commit()
        self._recorder._add(Step(COMMIT))

    def rollback(self) -> None:
        self._real.rollback()
        self._recorder._add(Step(ROLLBACK))

    def cursor(self, *args, **kwargs):
        return _RecordingCursor(self._real.cursor(*args, **kwargs), self._recorder)

    def __getattr__(self, name):
        return getattr(self._real, name)


class StatementRecorder:
    """``with StatementRecorder(replica) as rec:`` ... ``rec.mark()`` before each operation ... ``rec.groups``.

    ``groups``: one list of ``Step`` per ``mark()``. ``events``: per group, how
    many statements SQLAlchemy's ``before_cursor_execute`` saw and how many
    times its ``commit`` event fired.
    """

    def __init__(self, replica) -> None:
        self._replica = replica
        self.groups: list[list[Step]] = []
        self.events: list[list[int]] = []
        self._fairy = None
        self._real = None

    def mark(self) -> None:
        self.groups.append([])
        self.events.append([0, 0])

    def _add(self, step: Step) -> None:
        if self.groups:
            self.groups[-1].append(step)

    def _on_cursor_execute(self, *_args) -> None:
        if self.events:
            self.events[-1][0] += 1

    def _on_commit(self, *_args) -> None:
        if self.events:
            self.events[-1][1] += 1

    def __enter__(self) -> "StatementRecorder":
        engine = self._replica._engine
        event.listen(engine, "before_cursor_execute", self._on_cursor_execute)
        event.listen(engine, "commit", self._on_commit)
        self._fairy = self._replica._conn.connection  # the pool's proxy of the pysqlite connection
        self._real = self._fairy.dbapi_connection
        self._fairy.dbapi_connection = _RecordingConnection(self._real, self)
        return self

    def __exit__(self, *exc) -> None:
        self._fairy.dbapi_connection = self._real
        engine = self._replica._engine
        event.remove(engine, "before_cursor_execute", self._on_cursor_execute)
        event.remove(engine, "commit", self._on_commit)


def open_raw(path: Path, synchronous: str, busy_timeout_ms: int = 5000) -> sqlite3.Connection:
    """A raw connection with the replica engine's pragmas, in its order, and the writer function registered."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    register_writer(conn)
    return conn


def copy_database(source: Path, target: Path) -> None:
    """A consistent copy of ``source`` (a live WAL file: the backup API reads the WAL too) at ``target``."""
    src = sqlite3.connect(str(source), isolation_level=None)
    dst = sqlite3.connect(str(target), isolation_level=None)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def replay(conn: sqlite3.Connection, steps: list[Step]) -> None:
    """Run ``steps`` on ``conn``: each statement with its parameters (rows fetched), each commit."""
    execute = conn.execute
    for step in steps:
        op = step.op
        if op is QUERY:
            execute(step.sql, step.params).fetchall()
        elif op is WRITE:
            execute(step.sql, step.params)
        elif op is COMMIT:
            conn.commit()
        else:
            conn.rollback()


def _verb(step: Step) -> str:
    if step.op in (COMMIT, ROLLBACK):
        return step.op.upper()
    words = step.sql.split(None, 2)
    if words[0].upper() == "BEGIN":
        return " ".join(words[:2]).upper() if len(words) > 1 else "BEGIN"
    return words[0].upper()


def count_steps(steps: list[Step]) -> dict[str, int]:
    """Counts of one group's steps: ``transactions``, ``statements`` (BEGIN and COMMIT included), per verb."""
    counts: dict[str, int] = {}
    for step in steps:
        verb = _verb(step)
        counts[verb] = counts.get(verb, 0) + 1
    counts["statements"] = len(steps)
    counts["transactions"] = sum(n for verb, n in counts.items() if verb.startswith("BEGIN"))
    return counts


def _last_params(steps: list[Step], prefix: str) -> Any:
    found = [s.params for s in steps if s.op is WRITE and s.sql.startswith(prefix)]
    if not found:
        raise ValueError(f"no recorded statement starts with {prefix!r}")
    return found[-1]


def _insert_or_replace(table) -> str:
    cols = [c.name for c in table.c]
    return f"INSERT OR REPLACE INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


_AUTHORITY_SELECT = f"SELECT {', '.join(c.name for c in S.authority.c)} FROM authority WHERE id = ?"
_AUTHORITY_UPDATE_PREFIX = "UPDATE authority SET "


def minimal_steps(delivery: list[Step]) -> list[Step]:
    """One delivery's least SQL, one transaction, with the rows it recorded.

    ``BEGIN IMMEDIATE``; read the authority row; insert or replace the record
    row, the value row (the same sealed blob) and insert the receipt row, each
    with the last columns the replica wrote for it; update the authority row
    (its last recorded update); commit.
    """
    update = [s for s in delivery if s.op is WRITE and s.sql.startswith(_AUTHORITY_UPDATE_PREFIX)][-1]
    return [
        Step(WRITE, "BEGIN IMMEDIATE"),
        Step(QUERY, _AUTHORITY_SELECT, ("replica",)),
        Step(WRITE, _insert_or_replace(S.records), _last_params(delivery, f"INSERT INTO {S.records.name} ")),
        Step(WRITE, _insert_or_replace(S.values), _last_params(delivery, f"INSERT INTO {S.values.name} ")),
        Step(WRITE, _insert_or_replace(S.receipts), _last_params(delivery, f"INSERT INTO {S.receipts.name} ")),
        Step(WRITE, update.sql, update.params),
        Step(COMMIT),
    ]


_SNAPSHOT_SQL = """
SELECT r.key, r.revision, r.generation, r.tombstone, r.value_ref_json, r.binding_json, r.policy_epoch,
       r.listing_generation, r.materialization, r.materialization_reason, v.value_enc
FROM records AS r LEFT JOIN record_values AS v ON v.project_id = r.project_id AND v.key = r.key
WHERE r.project_id = ?
ORDER BY r.key"""


def snapshot_floor(conn: sqlite3.Connection, sealer, project_ids) -> Optional[Snapshot]:
    """The served view of ``project_ids`` in one read transaction: the rows ``read_snapshot`` serves, nothing checked.

    Each JSON column is parsed once (``json.loads``), the binding state built
    by ``wire.parse_binding_state``, the materialization directly, and each
    installed value opened with ``sealer`` for its record's own fields (the
    seal binds project, key, revision, generation and reference, so the value
    row's copies of them need not be read).
    """
    loads, parse_state, open_value = json.loads, wire.parse_binding_state, sealer.open
    projects = []
    conn.execute("BEGIN")
    try:
        for project in project_ids:
            row = conn.execute("SELECT record_version FROM projects WHERE project_id = ?", (project,)).fetchone()
            if row is None:
                return None
            entries = []
            for (key, revision, generation, tombstone, ref_json, binding_json, policy_epoch, listing_generation,
                 materialization, reason, blob) in conn.execute(_SNAPSHOT_SQL, (project,)).fetchall():
                ref = None if ref_json is None else loads(ref_json)
                state = parse_state({
                    "key": key,
                    "head": {"revision": revision, "generation": generation, "tombstone": bool(tombstone),
                             "valueRef": ref},
                    "binding": None if binding_json is None else loads(binding_json),
                    "policyEpoch": policy_epoch,
                    "listingGeneration": listing_generation,
                })
                if materialization == "installed":
                    mat, value = INSTALLED, open_value(blob, project_id=project, key=key, revision=revision,
                                                       generation=generation, value_ref=ref)
                else:
                    mat, value = Materialization(MatKind(materialization), reason), None
                entries.append(SnapshotEntry(state, mat, value))
            projects.append(SnapshotProject(project, row[0], tuple(entries)))
    finally:
        conn.execute("COMMIT")
    return Snapshot(tuple(projects))
