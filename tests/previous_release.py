"""The writer contract check of the release before the paired migration (``impl/writer.py`` at d443d54), as it was.

A store that a paired migration of this release fenced can be opened by a process of that release (an old
``SqliteReplica`` still running, a host not yet upgraded). Its check knows no fence: it reads the fence's
``writer_version`` token as a damaged contract and prints ``store_meta``. ``tests/test_paired_errors.py``
holds the token to saying, through that message, that the store is fenced, by which request, and what to
run. The functions below are that release's, unchanged but for the imports (its ``schema`` and
``FENCED_TABLES`` are this release's: the tables did not change).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Optional

from envreplica.impl import schema
from envreplica.impl.writer import FENCED_TABLES, WriterVersionError, fence_trigger_sql

WRITER_VERSION = 2
_META = schema.store_meta.name
Conn = Any


def _run(conn: Conn, sql: str, params: tuple = ()) -> list:
    return conn.execute(sql, params).fetchall()


def _db_file(conn: Conn) -> str:
    for _seq, name, file in _run(conn, "PRAGMA database_list"):
        if name == "main":
            return file or ":memory:"
    return "?"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(conn: Conn) -> list[str]:
    return [r[0] for r in _run(conn, "SELECT name FROM sqlite_master WHERE type='table' "
                                     "AND name NOT LIKE 'sqlite_%' ORDER BY name")]


def _meta(conn: Conn) -> Optional[dict[str, str]]:
    """``store_meta`` as a dict, or ``None`` when the table is absent."""
    if _META not in _tables(conn):
        return None
    return {k: v for k, v in _run(conn, f"SELECT key, value FROM {_q(_META)}")}


def _norm(sql: Optional[str]) -> str:
    return " ".join((sql or "").split())


def _fence_problems(conn: Conn) -> list[str]:
    present = {name: sql for name, sql in _run(conn, "SELECT name, sql FROM sqlite_master WHERE type='trigger'")}
    problems = []
    for table in FENCED_TABLES:
        for action in ("INSERT", "UPDATE", "DELETE"):
            name, sql = fence_trigger_sql(table, action)
            if name not in present:
                problems.append(f"missing trigger {name}")
            elif _norm(present[name]) != _norm(sql):
                problems.append(f"altered trigger {name}")
    return problems


def _has_rows(conn: Conn, tables: list[str]) -> bool:
    return any(_run(conn, f"SELECT 1 FROM {_q(t)} LIMIT 1") for t in tables)


def _int_or_none(value: Optional[str]) -> Optional[int]:
    try:
        return int(value) if value is not None and str(value).strip().lstrip("-").isdigit() else None
    except ValueError:
        return None


def _assess(conn: Conn) -> Optional[int]:
    """The checks of ``check_writer`` on an open connection (see there)."""
    path = _db_file(conn)
    tables = _tables(conn)
    replica = [t for t in tables if t in FENCED_TABLES]
    foreign = [t for t in tables if t not in FENCED_TABLES and t != _META]
    meta = _meta(conn)
    migrate_hint = f"Run `envreplica migrate --db {path}` (it backs the store up first), then open it again."
    if not meta:
        if foreign:
            raise WriterVersionError(
                f"{path}: not an envreplica replica store (unexpected tables: {', '.join(foreign)}); "
                f"refusing to write it.", reason="foreign", path=path)
        if not _has_rows(conn, replica):
            return None  # fresh: nothing recorded and no data; the caller stamps it
        if meta is None:
            raise WriterVersionError(
                f"{path}: this store has no store_meta but holds data: it was written by an older "
                f"envreplica, before the writer contract (schema version 0); this envreplica writes "
                f"schema version {schema.SCHEMA_VERSION}. {migrate_hint}",
                reason="older", found=0, path=path)
        raise WriterVersionError(
            f"{path}: store_meta is empty but the store holds data: its writer contract was removed. "
            f"Do not write it; restore it from a backup (envreplica migrate leaves <name>.v<N>.bak).",
            reason="malformed", path=path)
    found = _int_or_none(meta.get("schema_version"))
    writer = _int_or_none(meta.get("writer_version"))
    if found is None or writer is None:
        raise WriterVersionError(
            f"{path}: store_meta does not record a valid schema_version and writer_version "
            f"({meta!r}); the writer contract is damaged. Do not write the store; restore it from a backup.",
            reason="malformed", found=found, path=path)
    if found > schema.SCHEMA_VERSION or (found == schema.SCHEMA_VERSION and writer > WRITER_VERSION):
        raise WriterVersionError(
            f"{path}: this store was written by a newer envreplica (schema version {found}, writer "
            f"version {writer}); this envreplica writes schema version {schema.SCHEMA_VERSION}, writer "
            f"version {WRITER_VERSION}, and cannot write it safely. Upgrade envreplica to a release "
            f"that supports schema version {found}; do not downgrade the store or edit store_meta.",
            reason="newer", found=found, path=path)
    if found < schema.SCHEMA_VERSION or writer < WRITER_VERSION:
        raise WriterVersionError(
            f"{path}: this store was written by an older envreplica (schema version {found}, writer "
            f"version {writer}); this envreplica needs schema version {schema.SCHEMA_VERSION}, writer "
            f"version {WRITER_VERSION}. {migrate_hint}",
            reason="older", found=found, path=path)
    problems = _fence_problems(conn)
    if problems:
        raise WriterVersionError(
            f"{path}: the writer fence of this store is missing or altered ({'; '.join(problems[:4])}"
            f"{'; ...' if len(problems) > 4 else ''}): something that does not honour the writer "
            f"contract changed its schema. Do not write it; inspect it or restore it from a backup.",
            reason="fence", found=found, path=path)
    return found


def check_writer(conn: sqlite3.Connection) -> Optional[int]:
    """That release's ``check_writer`` on a sqlite3 connection."""
    return _assess(conn)
