"""The writer contract of the replica's SQLite file, and its safe migration.

Models: the seed's store writer contract (``writer-contract.js``): the store
records which writer version may change it and fences writes with triggers, so
an envreplica of another version cannot change a store it does not
understand; and the seed's paired writer migration
(``paired-writer-migration.js``): back up, migrate, verify, write evidence, and
refuse to run a completed request again over a store that has changed since.

The contract, in ``store_meta`` (``impl/schema.py``):

- ``schema_version``: the schema the file holds (``SCHEMA_VERSION`` for this
  code). Version 0 is the tables of version 1 with no ``store_meta`` and no
  fence; version 2 adds the integrity columns (``impl.integrity``).
- ``writer_version``: the writer contract version (``WRITER_VERSION``).
- ``replica_id`` (a random id, for an anchor), ``key_check`` (the master key's
  public check value), and ``created_by`` for a replica the adapter created
  (it may empty it; nothing else is opened by the adapter).

The fence (the mechanism; checked by ``tests/test_writer.py``). Every replica
table (every table of ``schema.TABLES`` except ``store_meta``) carries three
triggers, ``BEFORE INSERT / UPDATE / DELETE``, each::

    SELECT RAISE(ABORT, 'envreplica writer fence: ...')
    WHERE envreplica_writer_version() IS NOT
          (SELECT value FROM store_meta WHERE key = 'writer_version');

``envreplica_writer_version()`` is an application-defined SQL function that a
writer registers on each of its connections (``register_writer``, called from
the engine's ``connect`` event). So:

- a connection that did not register it cannot even prepare an INSERT, UPDATE
  or DELETE on a replica table: ``no such function: envreplica_writer_version``
  (``sqlite3.OperationalError``), whatever the rows;
- a connection that registered another version (an older or newer envreplica)
  is aborted row by row with the fence message (``sqlite3.IntegrityError``,
  and the statement's changes are undone);
- a connection registered as the recorded version writes normally;
- deleting the ``writer_version`` row fails closed (``IS NOT NULL`` is true).

Why not the TEMP-table idea: a trigger on a main table cannot read a temp
table (SQLite: "trigger ... cannot reference objects in database temp"), and a
TEMP trigger exists only on the connection that created it, so it fences
nobody else. A function is per connection, and the trigger, stored in the
file, calls whatever the writing connection registered.

What the fence is not: a defence against deliberate tampering. It fences DML
only (``DROP TABLE``, ``DROP TRIGGER``, ``ALTER`` and writes to ``store_meta``
are not fenced); anyone can register the function. Deliberate tampering is
what the integrity tags and digests of schema version 2 detect
(``impl.integrity``).

``check_writer`` judges the fence by what it does, not by its triggers' names,
when a writer opens the store (``impl.fence_probe``): on an in-memory copy of
the file's schema with one synthetic row per table, with ``writer_version``
as recorded, set to a maintenance token and deleted, every fenced table's
INSERT, UPDATE (column by column) and DELETE must be refused, keeping
nothing, to every writer but the state's own (a connection that registered
no function, writers of the versions next to the recorded one, the recorded
writer, the token's holder), and must go through for the state's own writer
(the recorded one, the token's holder, nobody). So a fence trigger deleted,
replaced by another body under its name, narrowed to some columns, moved to
another table, turned into an ``AFTER`` trigger that raises ``FAIL`` (the
row stays written) or disabled by another trigger (a ``RAISE(IGNORE)`` that
fires first) is refused (``reason="fence"``, naming the table and action),
and a fence re-created under other names passes. The verdict is remembered
per schema and ``store_meta`` (some 9 to 15 ms the first time, two reads
after). It leaves
out: writer versions other than the ones probed, triggers whose effect
depends on row data (the probe runs on synthetic rows, so that its cost does
not grow with the store), ``TEMP`` triggers and connection settings, and a
schema edited on purpose to pass the probe (``impl.fence_probe`` lists them).

Migration (``migrate``, and ``envreplica migrate --db PATH``): under an
exclusive lock held from start to end (``PRAGMA locking_mode=EXCLUSIVE`` plus
``BEGIN EXCLUSIVE``; the lock is kept until the connection closes, so it
covers the backup, the steps, the checks after commit and any restore), it
writes a backup with SQLite's online backup API, applies the steps from the
file's version to the target in one transaction, verifies inside that
transaction (``integrity_check``, ``foreign_key_check``, row counts, the
contract), commits, checks again, and writes an evidence JSON file. Any
failure after the backup rolls back, restores the backup and raises
``MigrationFailed``. The step 1 -> 2 authenticates every row under the master
key (``migrate(master_key=...)``; the command reads it from the environment
and refuses before the backup without it). A store already at the target
version is ``already_at_version`` (exit 0), whatever was written since an
earlier migration: a deploy step may run ``migrate`` every time. Backups and
evidence are created mode 0600.

A plain ``BEGIN EXCLUSIVE`` alone cannot do it: SQLite's backup API refuses
(``SQLITE_BUSY``, forever) to read from a connection that holds a write
transaction, and a second connection cannot read a rollback-journal file
under an exclusive lock. The exclusive locking mode keeps the lock between
the transactions, and the backup reads through the locking connection.

Hashes: ``db_sha256_*`` hash the database file's bytes (taken after a WAL
checkpoint, under the lock); ``content_sha256_*`` hash a canonical dump (the
schema and every row, sorted). "The store changed" is decided on the content
hash: a different journal mode or a checkpoint changes bytes, not content.

Several stores that must move together: ``impl.paired``.

Before it takes the lock it refuses (``MigrationInputRefused``, exit 2,
nothing changed) a store that cannot be written, one another live process
holds open for writing (``impl.owners``: an old ``SqliteReplica`` between two
writes holds no SQLite lock, so the exclusive lock alone would not see it),
and, once locked, a store fenced by a paired migration, no master key, or a
key not every one of its sealed values opens under (``key_problem``).

Leaves out on purpose: downgrades (refused), and fencing of schema changes
(DDL).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sqlite3
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TypedDict, TypeVar, Union

from sqlalchemy.dialects import sqlite as _sqlite_dialect
from sqlalchemy.schema import CreateTable

from envreplica.impl import schema
# the fence's names and SQL, re-exported: the contract's readers find them here (impl.fence says why they are apart)
from envreplica.impl.fence import FENCE_MESSAGE, FENCED_TABLES, WRITER_FUNCTION, WRITER_VERSION, fence_trigger_sql, quote

__all__ = [
    "SCHEMA_VERSION",
    "WRITER_VERSION",
    "WRITER_FUNCTION",
    "FENCE_MESSAGE",
    "FENCED_TABLES",
    "MIGRATIONS",
    "WriterVersionError",
    "MigrationError",
    "MigrationRefused",
    "MigrationFailed",
    "MigrationContext",
    "StoreInUse",
    "read_meta",
    "wipe",
    "Evidence",
    "register_writer",
    "create_tables",
    "stamp",
    "check_writer",
    "detect_version",
    "fence_trigger_sql",
    "content_sha256",
    "copy_store",
    "table_dump",
    "ADMISSION_KINDS",
    "FENCED_WRITER_VERSION",
    "admission_of",
    "admission_token",
    "begin_admission",
    "end_admission",
    "unfenced",
    "migrate",
]

#: The schema version this code writes (``impl.schema.SCHEMA_VERSION``, re-exported).
SCHEMA_VERSION = schema.SCHEMA_VERSION

_META = schema.store_meta.name
_EVIDENCE_SCHEMA = "envreplica/migration-evidence@1"

Conn = Any  # a sqlite3.Connection, or a SQLAlchemy Connection on a pysqlite file


# ---------------------------------------------------------------------------
# Errors


class WriterVersionError(Exception):
    """This envreplica must not write the store as it is.

    ``reason`` is one of ``"newer"``, ``"older"``, ``"unstamped"``,
    ``"malformed"``, ``"fence"``, ``"foreign"``; ``found`` the store's schema
    version when known; ``path`` the database file.
    """

    def __init__(self, message: str, *, reason: str, found: Optional[int] = None, path: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.found = found
        self.path = path


class MigrationError(Exception):
    """A migration did not run to completion (see the two subclasses)."""


class MigrationRefused(MigrationError):
    """Refused before changing the store (it is as it was)."""


class MigrationInputRefused(MigrationRefused):
    """Refused on what was asked or the environment (no key, a wrong key, a store that cannot be written, one in
    use or fenced): the command could not run as asked (exit 2); nothing was changed."""


class StoreInUse(MigrationInputRefused):
    """Refused: another process holds the store (open for writing, or the exclusive lock could not be had)."""


class MigrationFailed(MigrationError):
    """Started, then failed; the store was rolled back and restored from the backup.

    ``restored`` says whether the restore succeeded and the store's content
    equals its content before the migration.
    """

    def __init__(self, message: str, *, restored: bool) -> None:
        super().__init__(message)
        self.restored = restored


# ---------------------------------------------------------------------------
# Connection helpers: raw sqlite3 and SQLAlchemy alike


def _is_sqlalchemy(conn: Conn) -> bool:
    return hasattr(conn, "exec_driver_sql")


def _run(conn: Conn, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(conn, sqlite3.Connection):
        return conn.execute(sql, params).fetchall()
    result = conn.exec_driver_sql(sql, params)
    return [tuple(r) for r in result.fetchall()] if result.returns_rows else []


_T = TypeVar("_T")


def _with_transaction(conn: Conn, body: Callable[[Conn], _T]) -> _T:
    """Run ``body`` in the caller's open transaction, or in a new immediate one."""
    if _is_sqlalchemy(conn):
        if conn.in_transaction():
            return body(conn)
        with conn.begin():
            return body(conn)
    if conn.in_transaction:
        return body(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = body(conn)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return out


def _read(conn: Conn, body: Callable[[Conn], _T]) -> _T:
    """Run read-only ``body``; on a SQLAlchemy connection, in a transaction it ends."""
    if _is_sqlalchemy(conn) and not conn.in_transaction():
        with conn.begin():
            return body(conn)
    return body(conn)


def _db_file(conn: Conn) -> str:
    for _seq, name, file in _run(conn, "PRAGMA database_list"):
        if name == "main":
            return file or ":memory:"
    return "?"


_q = quote


def _tables(conn: Conn) -> list[str]:
    return [r[0] for r in _run(conn, "SELECT name FROM sqlite_master WHERE type='table' "
                                     "AND name NOT LIKE 'sqlite_%' ORDER BY name")]


def _meta(conn: Conn) -> Optional[dict[str, str]]:
    """``store_meta`` as a dict, or ``None`` when the table is absent."""
    if _META not in _tables(conn):
        return None
    return {k: v for k, v in _run(conn, f"SELECT key, value FROM {_q(_META)}")}


# ---------------------------------------------------------------------------
# The contract: registration, tables, fence, stamp, check


def register_writer(dbapi_connection: Any, version: int = WRITER_VERSION) -> None:
    """Declare this connection an envreplica writer of ``version`` (default: this code's).

    Call it from the engine's ``connect`` event with the DBAPI (pysqlite)
    connection. Registration is per connection and never touches the file.
    """
    declared = str(int(version))
    dbapi_connection.create_function(WRITER_FUNCTION, 0, lambda: declared, deterministic=True)


def create_tables(conn: Conn, version: int = schema.SCHEMA_VERSION) -> None:
    """Create any missing table of the schema of ``version`` (0: no ``store_meta``; 0 and 1: no integrity columns).

    Creates tables only (``IF NOT EXISTS``): no ``store_meta`` rows and no
    fence (``stamp`` adds them). Runs in the caller's transaction if one is open.
    """
    tables = schema.tables_of(version)
    dialect = _sqlite_dialect.dialect()

    def body(c: Conn) -> None:
        for t in tables:
            _run(c, str(CreateTable(t, if_not_exists=True).compile(dialect=dialect)).strip())

    _with_transaction(conn, body)


def _install_fence(conn: Conn) -> None:
    for table in FENCED_TABLES:
        for action in ("INSERT", "UPDATE", "DELETE"):
            name, sql = fence_trigger_sql(table, action)
            _run(conn, f"DROP TRIGGER IF EXISTS {_q(name)}")
            _run(conn, sql)


def _install_contract(conn: Conn, schema_version: int, writer_version: int) -> None:
    """Record the versions and (re)install the fence; in the caller's transaction."""
    create_tables(conn, schema_version)  # store_meta, and any table a v0 file lacked
    _run(conn, f"INSERT OR REPLACE INTO {_q(_META)} (key, value) VALUES ('schema_version', ?)",
         (str(schema_version),))
    _run(conn, f"INSERT OR REPLACE INTO {_q(_META)} (key, value) VALUES ('writer_version', ?)",
         (str(writer_version),))
    _install_fence(conn)


def _fence_problems(conn: Conn) -> list[str]:
    """What does not work in the store's fence, one sentence per table and action (empty: it works).

    Judged by behaviour, not by trigger names: ``impl.fence_probe`` runs each
    action as right and wrong writers on an in-memory copy of the schema
    (remembered per schema and ``store_meta``, so a reopen costs two reads).
    """
    from envreplica.impl import fence_probe  # a probe's cost only when a store is checked

    return fence_probe.fence_problems(conn)


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
    admission, holder = admission_of(meta)
    if admission is not None:
        raise WriterVersionError(fenced_message(path, meta), reason="fenced", found=found, path=path)
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
        shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
        raise WriterVersionError(
            f"{path}: the writer fence of this store does not work: {shown}. The fence triggers must refuse "
            f"every write to the replica's tables by a connection that is not an envreplica writer of the "
            f"version recorded in store_meta.writer_version (another envreplica version, the sqlite3 shell, a "
            f"stray tool) and let that writer through; as they are, such writes could change what the replica "
            f"serves, or this envreplica could not write. Something that does not honour the writer contract "
            f"changed the store's schema. Do not write it: restore it from a backup (envreplica migrate leaves "
            f"<name>.v<N>.bak), or move it aside so that the host creates a new replica and the cloud re-sends "
            f"a snapshot.",
            reason="fence", found=found, path=path)
    return found


def fenced_message(path: Union[str, Path], meta: Mapping[str, str]) -> str:
    """The one line that says a store is fenced, by which request, and what to run."""
    admission, holder = admission_of(meta)
    request_file = meta.get(FENCE_REQUEST)
    what = "paired migration" if admission == "maintenance" else "paired recovery"
    run = (f"run `{fence_command(str(admission), request_file)}`" if request_file
           else "run the same `envreplica migrate` (or, once a recovery is selected, `envreplica recover`) again")
    return (f"{path}: this store is fenced for {admission} by the {what} of request {holder}"
            f"{f' ({request_file})' if request_file else ''}, which has not finished: no writer may change it "
            f"until it does. If the process that ran it died, {run}: it resumes and reopens the store. Do not "
            f"restore a backup or edit store_meta.")


def check_writer(conn: Conn) -> Optional[int]:
    """Check that this envreplica may write the store; call it when a writer opens the file.

    Returns ``SCHEMA_VERSION`` for a store this code writes, or ``None`` for a
    fresh store (no contract recorded and no rows: ``stamp`` it). Raises
    ``WriterVersionError``: ``newer`` (upgrade envreplica; never downgrade),
    ``older`` (run ``envreplica migrate --db PATH``; also a version-0 file,
    no ``store_meta`` but data), ``malformed`` (``store_meta`` damaged),
    ``fence`` (fence triggers missing or altered), ``foreign`` (not ours).
    """
    return _read(conn, _assess)


def stamp(conn: Conn, *, key_check: Optional[str] = None, created_by: Optional[str] = None) -> int:
    """Make a fresh store an envreplica store of this version; return ``SCHEMA_VERSION``.

    Creates the missing tables, records ``schema_version`` and
    ``writer_version`` in ``store_meta`` and installs the fence, in one
    transaction (the caller's if open). A fresh store also records
    ``replica_id`` (a random id, for an anchor), ``key_check`` (the master
    key's public check value, ``impl.integrity``) and ``created_by`` when
    given (``impl.files.CREATED_BY_ADAPTER`` marks a replica the adapter may
    empty). On a store already at this version it only checks it
    (idempotent); any other store raises ``WriterVersionError`` as
    ``check_writer`` would (an older one must go through ``migrate``).
    """

    def body(c: Conn) -> int:
        if _assess(c) is None:
            _install_contract(c, schema.SCHEMA_VERSION, WRITER_VERSION)
            _put_meta(c, "replica_id", uuid.uuid4().hex)
            if key_check is not None:
                _put_meta(c, "key_check", key_check)
            if created_by is not None:
                _put_meta(c, "created_by", created_by)
            _assess(c)
        return schema.SCHEMA_VERSION

    return _with_transaction(conn, body)


def read_meta(conn: Conn) -> Optional[dict[str, str]]:
    """``store_meta`` as a dict (None when the table is absent)."""
    return _meta(conn)


def _put_meta(conn: Conn, key: str, value: str) -> None:
    _run(conn, f"INSERT OR REPLACE INTO {_q(_META)} (key, value) VALUES (?, ?)", (key, value))


#: What fences a store for a paired migration or its recovery (``impl.paired``): ``store_meta.writer_version``
#: holds ``"<kind>:<request>"`` instead of a version, so that the fence triggers refuse every writer (none
#: registers that value) but the holder, which registers it; ``fenced_writer_version`` keeps the contract
#: version to restore when the store reopens.
#: The token says itself what holds the store and what to run (``admission_token``'s ``note``), so that any
#: release that prints ``store_meta`` (the previous one calls a fenced store's contract "damaged" and prints
#: it) shows the way out; ``fence_request`` records the holder's request file, for this release's message.
ADMISSION_KINDS = ("maintenance", "recovery")
FENCED_WRITER_VERSION = "fenced_writer_version"
FENCE_REQUEST = "fence_request"
#: The ``store_meta`` keys a fence adds (and reopening removes).
FENCE_KEYS = (FENCED_WRITER_VERSION, FENCE_REQUEST)


def admission_of(meta: Optional[Mapping[str, str]]) -> tuple[Optional[str], Optional[str]]:
    """``(kind, request)`` of the fence holding a store, or ``(None, None)`` when it is open to its writers."""
    value = str((meta or {}).get("writer_version") or "")
    kind, sep, rest = value.partition(":")
    holder = rest.split(" ", 1)[0]
    if sep and kind in ADMISSION_KINDS and holder:
        return kind, holder
    return None, None


def fence_command(kind: str, request_file: Union[str, Path]) -> str:
    """What finishes a fence of ``kind`` held by the request ``request_file``: rerun its migrate, or its recover."""
    verb = "migrate" if kind == "maintenance" else "recover"
    return f"envreplica {verb} --request {request_file}"


def admission_token(kind: str, request: str, request_file: Union[str, Path, None] = None) -> str:
    """The ``writer_version`` value that fences a store for ``kind`` (maintenance or recovery) by ``request``
    (an id); with ``request_file``, followed by a note that says what holds the store and what to run."""
    if kind not in ADMISSION_KINDS or not request or ":" in request or " " in request:
        raise ValueError(f"admission kind must be one of {ADMISSION_KINDS} and request a non-empty id without "
                         f"':' or spaces; got {kind!r}, {request!r}")
    if request_file is None:
        return f"{kind}:{request}"
    return (f"{kind}:{request} (fenced by an envreplica paired {'migration' if kind == 'maintenance' else 'recovery'}"
            f" that has not finished: run `{fence_command(kind, request_file)}`, which resumes it and reopens this "
            f"store; do not restore a backup or edit store_meta)")


def begin_admission(conn: Conn, token: str, request_file: Union[str, Path, None] = None) -> None:
    """Fence the store for ``token`` (``admission_token``): from now on only a connection registered as
    ``token`` writes its tables. Moving from one fence to another keeps the contract version recorded."""
    meta = _meta(conn) or {}
    if admission_of(meta)[0] is None:
        _put_meta(conn, FENCED_WRITER_VERSION, str(meta.get("writer_version")))
    _put_meta(conn, "writer_version", token)
    if request_file is not None:
        _put_meta(conn, FENCE_REQUEST, str(request_file))


def unfenced(meta: Mapping[str, str]) -> dict[str, str]:
    """``store_meta`` as it reads once its fence is undone (the contract version back, no fence keys)."""
    out = dict(meta)
    if admission_of(meta)[0] is not None:
        out["writer_version"] = meta[FENCED_WRITER_VERSION]
    for key in FENCE_KEYS:
        out.pop(key, None)
    return out


def end_admission(conn: Conn) -> None:
    """Reopen a fenced store to writers of its contract version (a no-op on an open store)."""
    meta = _meta(conn) or {}
    if admission_of(meta)[0] is None:
        return
    _put_meta(conn, "writer_version", str(meta[FENCED_WRITER_VERSION]))
    for key in FENCE_KEYS:
        _run(conn, f"DELETE FROM {_q(_META)} WHERE key = ?", (key,))


#: ``store_meta.key_source`` of a replica sealed under a key a harness sent (``reset``'s ``masterKeyHex``):
#: its data is the harness's test data, so the adapter that created it may replace it under another key.
KEY_FROM_RESET = "reset masterKeyHex"


def wipe(conn: Conn, *, key_check: str, key_source: Optional[str] = None) -> int:
    """Delete every replica row and record ``key_check``; return the write counter the rows had.

    For a replica's own ``empty``: run in its write transaction on a
    registered writer's connection. The counter is read without verifying
    anything (the rows are being discarded), so a damaged replica can be emptied.
    ``key_source`` records where the key came from (``KEY_FROM_RESET``); None
    (the configured key) removes the record.
    """
    rows = _run(conn, f"SELECT write_counter FROM {_q(schema.authority.name)}")
    counter = rows[0][0] if rows and type(rows[0][0]) is int and rows[0][0] >= 0 else 0
    for table in reversed(schema.TABLES):
        if table is not schema.store_meta:
            _run(conn, f"DELETE FROM {_q(table.name)}")
    _put_meta(conn, "key_check", key_check)
    if key_source is None:
        _run(conn, f"DELETE FROM {_q(_META)} WHERE key = ?", ("key_source",))
    else:
        _put_meta(conn, "key_source", key_source)
    return counter


def detect_version(conn: Conn) -> int:
    """The schema version a file holds: ``store_meta.schema_version``, or 0 for the v0 tables.

    Raises ``MigrationRefused`` for a file that is neither.
    """
    path = _db_file(conn)
    tables = _tables(conn)
    meta = _meta(conn)
    if meta is None:
        missing = [t for t in FENCED_TABLES if t not in tables]
        if not tables:
            raise MigrationRefused(f"{path}: the file holds no tables: nothing to migrate "
                                   f"(a new store is created by opening it with envreplica).")
        if missing:
            raise MigrationRefused(f"{path}: not an envreplica store of any known version "
                                   f"(no store_meta, and missing tables {', '.join(missing)}).")
        return 0
    version = _int_or_none(meta.get("schema_version"))
    if version is None or version < 1:
        raise MigrationRefused(f"{path}: store_meta records no valid schema_version ({meta!r}); "
                               f"refusing to migrate a store whose version is unknown.")
    return version


# ---------------------------------------------------------------------------
# Canonical content


def _sort_key(row: tuple[Any, ...]) -> tuple[tuple[int, Union[int, float, str, bytes]], ...]:
    key: list[tuple[int, Union[int, float, str, bytes]]] = []
    for v in row:
        if v is None:
            key.append((0, 0))
        elif isinstance(v, (int, float)):
            key.append((1, v))
        elif isinstance(v, str):
            key.append((2, v))
        else:
            key.append((3, bytes(v)))
    return tuple(key)


def table_dump(conn: Conn, *, exclude: tuple[str, ...] = ()) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, sorted (a canonical, order-free view of the data)."""
    out = {}
    for name in [r[0] for r in _run(conn, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]:
        if name in exclude:
            continue
        out[name] = sorted(_run(conn, f"SELECT * FROM {_q(name)}"), key=_sort_key)
    return out


def content_sha256(conn: Conn, *, meta: Optional[Callable[[dict[str, str]], dict[str, str]]] = None) -> str:
    """SHA-256 of the schema (``sqlite_master``) and every row, canonically ordered; with ``meta``, the rows
    of ``store_meta`` as that function maps them (``unfenced``: a fenced store hashes as the same store open)."""
    h = hashlib.sha256()
    for row in sorted(_run(conn, "SELECT type, name, tbl_name, sql FROM sqlite_master"), key=_sort_key):
        h.update(repr(row).encode() + b"\n")
    for name, rows in table_dump(conn).items():
        if meta is not None and name == _META:
            rows = sorted(meta(dict(rows)).items(), key=_sort_key)
        h.update(f"table {name!r}\n".encode())
        for row in rows:
            h.update(repr(row).encode() + b"\n")
    return h.hexdigest()


def _file_sha256(path: Union[str, Path]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _row_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) FROM {_q(t)}").fetchone()[0] for t in _tables(conn) if t != _META}


def _integrity(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]


def _fk_violations(conn: sqlite3.Connection) -> list[list[Any]]:
    return [list(r) for r in conn.execute("PRAGMA foreign_key_check").fetchall()]


# ---------------------------------------------------------------------------
# The master key, proven on a store without writing it


#: The tables that hold sealed values (every table with a ``value_enc`` column): the key proof opens them all.
SEALED_TABLES = tuple(t.name for t in schema.TABLES if "value_enc" in t.c)


@dataclass(frozen=True)
class KeyProblem:
    """Why a master key is refused on a store: ``opened`` of its ``sealed`` values open under the key
    (``sealed`` is 0 when its key check, not its values, decided)."""

    opened: int
    sealed: int

    @property
    def mixed(self) -> bool:
        """Some values open under the key and some do not: no key is the store's."""
        return 0 < self.opened < self.sealed

    def __str__(self) -> str:
        if self.sealed == 0:
            return "its key check (store_meta.key_check) is another key's"
        if self.opened == 0:
            return f"none of the {self.sealed} sealed values opens under it"
        return (f"{self.opened} of the {self.sealed} sealed values open under it and "
                f"{self.sealed - self.opened} do not")


def _opens(sealer: Any, project: Any, key: Any, revision: Any, generation: Any, ref_json: Any, blob: Any) -> bool:
    """Whether one stored value opens under ``sealer`` for its record; any malformed column is a value that does
    not (a blob of another type, a reference that is not JSON or nests too deep)."""
    from envreplica.impl.sealing import SealError

    try:
        ref = json.loads(ref_json)
    except (ValueError, TypeError, RecursionError):
        return False
    try:
        sealer.open(blob, project_id=project, key=key, revision=revision, generation=generation, value_ref=ref)
    except (SealError, ValueError, TypeError):
        return False
    return True


def key_problem(conn: sqlite3.Connection, master_key: bytes) -> Optional[KeyProblem]:
    """Why ``master_key`` is not the key the store at ``conn`` was sealed with, or ``None`` (proven, or nothing
    sealed to prove it on). Only reads.

    A store of schema version 2 records the key's public check value (``store_meta.key_check``): it must be
    this key's. An older one records none, so its sealed values decide, every one of them (``SEALED_TABLES``:
    the live values and the staged ones, so a replica stopped during its first snapshot is proven on what it
    staged): the key is proven when each opens under it for its record. When none opens, the key is not the
    store's. When some open and others do not (values sealed under two keys, or damaged), no key is the
    store's and every key is refused: a migration would tag the others as this key's, readable under none.
    A store with no sealed value and no key check has nothing to prove a key on, and nothing a wrong key
    could make unreadable: any key is accepted (the migration records its check value).

    Cost: one pass over the sealed values, some 20 us each (10,000 values: about 0.2 s; ``python
    bench/bench_proofs.py``); a migration reads and tags every row anyway. A value whose columns do not parse
    (a blob of another type, a reference that is not JSON or nests too deep) is one that does not open:
    nothing here raises on what a store holds. ``tests/test_key_proof_generated.py`` holds it to this rule on
    generated stores.
    """
    from envreplica.impl.sealing import Sealer

    sealer = Sealer(master_key)
    meta = _meta(conn) or {}
    if meta.get("key_check") is not None:
        return None if meta["key_check"] == sealer.rows.key_check else KeyProblem(0, 0)
    opened = sealed = 0
    tables = set(_tables(conn))
    for table in SEALED_TABLES:
        if table not in tables:
            continue
        rows = conn.execute(f"SELECT project_id, key, revision, generation, value_ref_json, value_enc "
                            f"FROM {_q(table)}")
        for row in rows:
            sealed += 1
            opened += _opens(sealer, *row)
    if opened == sealed:
        return None
    return KeyProblem(opened, sealed)


def refuse_wrong_key(path: Union[str, Path], why: Union[str, KeyProblem]) -> str:
    """The one-line message of a key that is not the store's (``why``: ``key_problem``'s answer)."""
    if isinstance(why, KeyProblem) and why.mixed:
        return (f"{path}: the master key given opens {why.opened} of this store's {why.sealed} sealed values and "
                f"not the other {why.sealed - why.opened}: they were sealed under another key, or damaged, so no "
                f"key is the store's, and a migration under this one would tag them as its own and leave them "
                f"readable under none. Nothing was changed. Move the store aside so that the host creates a new "
                f"replica and the cloud re-sends a snapshot (or restore a backup whose values all open under "
                f"one key), then migrate")
    return (f"{path}: the master key given is not the key this store was sealed with ({why}); a migration under "
            f"it would tag every row with the wrong key and leave no value readable under either key. Nothing "
            f"was changed. Set ENVREPLICA_MASTER_KEY or ENVREPLICA_MASTER_KEY_FILE to the key the replica was "
            f"created with, then run the migration again")


# ---------------------------------------------------------------------------
# Migration steps


@dataclass(frozen=True)
class MigrationContext:
    """What a migration step may need beyond the store: the master key (steps that authenticate rows)."""

    master_key: Optional[bytes] = None


def _step_0_to_1(conn: sqlite3.Connection, ctx: MigrationContext = MigrationContext()) -> None:
    """Version 0 (the tables, no store_meta, no fence) -> 1: stamp it."""
    _install_contract(conn, 1, 1)


def _step_1_to_2(conn: sqlite3.Connection, ctx: MigrationContext) -> None:
    """Version 1 -> 2: every row gets its integrity tag, every set its digest (``impl.integrity``).

    The rows are read, the tables dropped and created again with the tag and
    digest columns, and the rows written back with tags and digests computed
    under the master key from what the file holds now (migration is the moment
    the file's content is trusted). Then the contract of version 2: versions,
    key check, replica id, fence.
    """
    from envreplica.impl.sealing import Sealer
    from envreplica.impl.tables import authenticate_contents

    if ctx.master_key is None:
        raise MigrationError("the step to schema version 2 needs the master key")
    rows = Sealer(ctx.master_key).rows
    conn.row_factory = sqlite3.Row
    try:
        contents = {t: [dict(r) for r in conn.execute(f"SELECT * FROM {_q(t)}")] for t in FENCED_TABLES}
    finally:
        conn.row_factory = None
    for name in reversed(FENCED_TABLES):  # children first (their triggers go with them)
        _run(conn, f"DROP TABLE IF EXISTS {_q(name)}")
    create_tables(conn, 2)
    authenticated = authenticate_contents(rows, contents, counter=1)
    for table in schema.TABLES:
        for row in authenticated.get(table.name, []) if table is not schema.store_meta else []:
            cols = [c.name for c in table.c]
            _run(conn, f"INSERT INTO {_q(table.name)} ({', '.join(_q(c) for c in cols)}) "
                       f"VALUES ({', '.join('?' for _ in cols)})", tuple(row[c] for c in cols))
    _install_contract(conn, 2, 2)
    _put_meta(conn, "key_check", rows.key_check)
    if "replica_id" not in (_meta(conn) or {}):
        _put_meta(conn, "replica_id", uuid.uuid4().hex)


# A marker the migrations read with getattr (see MIGRATIONS); mypy allows no new attribute on a function.
_step_1_to_2.needs_key = True  # type: ignore[attr-defined]

#: ``from_version -> step``: a step takes the migration's sqlite3 connection
#: inside the migration's transaction, and a ``MigrationContext``, and must
#: leave the store at ``from_version + 1`` without committing. It runs
#: registered as the writer version recorded when it starts, so it can write
#: fenced tables; a step that changes ``writer_version`` should do so last. A
#: step with ``needs_key = True`` gets the master key (the migration refuses
#: to start without one).
MIGRATIONS: Mapping[int, Callable[[sqlite3.Connection, MigrationContext], None]] = {
    0: _step_0_to_1, 1: _step_1_to_2}


# ---------------------------------------------------------------------------
# Evidence


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


@dataclass
class Evidence:
    """The outcome of ``migrate``; for a migration (or failure), also the evidence file's content.

    ``status``: ``"migrated"``, ``"already_at_version"`` (nothing done, no
    backup) or ``"failed"`` (only ever written to the evidence file; the
    caller gets ``MigrationFailed``).
    """

    status: str
    message: str
    request_id: str
    db_path: str
    from_version: int
    to_version: int
    evidence_path: Optional[str] = None
    backup_path: Optional[str] = None
    backup_sha256: Optional[str] = None
    db_sha256_before: Optional[str] = None
    db_sha256_after: Optional[str] = None
    content_sha256_before: Optional[str] = None
    content_sha256_after: Optional[str] = None
    row_counts_before: dict[str, int] = field(default_factory=dict)
    row_counts_after: dict[str, int] = field(default_factory=dict)
    integrity_check: list[str] = field(default_factory=list)
    foreign_key_check: list[list[Any]] = field(default_factory=list)
    integrity_check_after_commit: list[str] = field(default_factory=list)
    writer_version: int = WRITER_VERSION
    sqlite_version: str = sqlite3.sqlite_version
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    error: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema_id": _EVIDENCE_SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Evidence":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def summary(self) -> str:
        lines = [self.message]
        if self.status == "migrated":
            lines += [
                f"  store:     {self.db_path}  (schema version {self.from_version} -> {self.to_version})",
                f"  backup:    {self.backup_path}  sha256 {self.backup_sha256}",
                f"  db sha256: {self.db_sha256_before} -> {self.db_sha256_after}",
                "  rows:      " + ", ".join(f"{t}={n}" for t, n in sorted(self.row_counts_after.items())),
                f"  checks:    integrity_check={'ok' if self.integrity_check == ['ok'] else self.integrity_check}, "
                f"foreign_key_check={'clean' if not self.foreign_key_check else self.foreign_key_check}",
                f"  evidence:  {self.evidence_path}  (request {self.request_id})",
            ]
        elif self.evidence_path:
            lines.append(f"  evidence:  {self.evidence_path}")
        return "\n".join(lines)


def _write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _open_readonly(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


#: The files SQLite keeps beside a database: its write-ahead log and that log's index, or its rollback journal.
SIDECARS = ("-wal", "-shm", "-journal")


def open_reading(path: Path) -> sqlite3.Connection:
    """A connection that reads the store at ``path`` and, once closed, leaves its directory as it found it.

    A read-only connection (``mode=ro``) to a store in WAL mode creates the store's ``-wal`` and ``-shm`` when
    they are not there, and, being read-only, never removes them: every refusal would leave two files beside
    the stores. So a WAL store none of whose sidecars is there (no connection has it open: one in WAL mode keeps
    its ``-wal`` while open) is read through a read-write connection held to ``PRAGMA query_only`` in exclusive
    locking mode: it keeps the log's index in its own memory (no ``-shm``), creates an empty ``-wal`` (an inode,
    no data: it works on a full file system too), and, closing as the store's last connection, removes it
    (SQLite's own rule). Nothing is written to the database (``query_only``; the log is empty). Its lock keeps
    other connections out only while it reads (they wait their busy timeout). A store in rollback-journal mode,
    one with a sidecar there already (in use, or left by a crash), or one this user cannot write is read
    read-only, as before: that creates no file then (the ``-shm`` that is there, SQLite's index of the log, may
    change; it holds no data). This was chosen over removing the files afterwards by hand, which cannot tell
    whether another process opened the store meanwhile, and over ``immutable=1``, which reads the main file
    alone, past a log another process may be writing."""
    if _wal_mode(path) and os.access(path, os.W_OK) and \
            not any(os.path.lexists(f"{path}{suffix}") for suffix in SIDECARS):
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=rw", uri=True, isolation_level=None)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        return conn
    return _open_readonly(path)


def _wal_mode(path: Path) -> bool:
    """The database at ``path`` says it is in WAL mode (its header's read and write versions are 2)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        header = os.pread(fd, 20, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return len(header) == 20 and header[18:20] == b"\x02\x02"


# ---------------------------------------------------------------------------
# migrate


def _refuse_wrong_key_early(db: Path, master_key: bytes, target: int, steps: Mapping[int, Any]) -> None:
    """Refuse a key the store was not sealed with before anything opens it for writing: read through
    ``open_reading`` (which leaves no file behind), so that a refusal leaves every byte as it was, a killed
    writer's log included (the lock's read-write connection would checkpoint it into the database on close).
    The same proof runs again under the lock."""
    conn = open_reading(db)
    try:
        version = detect_version(conn)
        if version >= target or not any(getattr(steps.get(v), "needs_key", False) for v in range(version, target)):
            return
        why = key_problem(conn, master_key)
    finally:
        conn.close()
    if why is not None:
        raise MigrationInputRefused(refuse_wrong_key(db, why))


def _default_evidence(db: Path, target: int) -> Path:
    return db.with_name(f"{db.name}.migrate-v{target}.evidence.json")


def _lock(db: Path, busy_timeout: float) -> sqlite3.Connection:
    """A connection holding the file's exclusive lock until it is closed."""
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=busy_timeout)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("COMMIT")  # exclusive locking mode keeps the lock after COMMIT
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # WAL content into the file (no-op otherwise)
    except sqlite3.OperationalError as e:
        conn.close()
        raise StoreInUse(
            f"{db}: cannot take the exclusive lock ({e}): the store is in use. Stop every envreplica "
            f"process using it (and any other reader), then run the migration again.") from None
    return conn


def _check_recorded(db: Path, conn: sqlite3.Connection, ev_path: Path, target: int,
                    request_id: Optional[str]) -> Optional[Evidence]:
    """Judge an earlier evidence file for this request: ``Evidence`` to return, or ``None`` to proceed."""
    try:
        recorded = Evidence.from_dict(json.loads(ev_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as e:
        raise MigrationRefused(f"{ev_path}: the evidence file of this request is unreadable ({e}); "
                               f"move it aside only once you know what it recorded.") from e
    if recorded.status != "migrated":
        return None  # an earlier attempt failed (and restored the store): try again
    if request_id is not None and recorded.request_id != request_id:
        raise MigrationRefused(f"{ev_path}: this evidence file records request {recorded.request_id}, "
                               f"not {request_id}; use another --evidence path for a new request.")
    if Path(recorded.db_path) != db:
        raise MigrationRefused(f"{ev_path}: this evidence file records a migration of {recorded.db_path}, "
                               f"not {db}; use another --evidence path.")
    if recorded.to_version != target:
        raise MigrationRefused(f"{ev_path}: this evidence file records a migration to version "
                               f"{recorded.to_version}, not {target}; use another --evidence path.")
    backup = Path(recorded.backup_path or "")
    restore = (f"If the change was not intended, restore the store from the backup: stop envreplica, "
               f"then copy {backup} over {db} (check its sha256 first: {recorded.backup_sha256}).")
    now = content_sha256(conn)
    if now != recorded.content_sha256_after:
        counts = _row_counts(conn)
        changed = sorted(t for t in set(counts) | set(recorded.row_counts_after)
                         if counts.get(t) != recorded.row_counts_after.get(t))
        detail = ("row counts changed in " + ", ".join(
            f"{t} ({recorded.row_counts_after.get(t)} -> {counts.get(t)})" for t in changed)
                  if changed else "same row counts, different rows or schema")
        raise MigrationRefused(
            f"{db}: the store changed after migration request {recorded.request_id} completed "
            f"(content sha256 then {recorded.content_sha256_after}, now {now}; {detail}). Refusing to run "
            f"the request again over a changed store. Reconcile: find what wrote it. If the change was "
            f"intended, the migration stands (version {recorded.to_version}); move {ev_path} aside to "
            f"start a new request. {restore}")
    if not backup.is_file():
        raise MigrationRefused(
            f"{backup}: the backup recorded by migration request {recorded.request_id} is missing; the "
            f"evidence in {ev_path} no longer proves a restorable backup. Reconcile: find the backup "
            f"(sha256 {recorded.backup_sha256}) and put it back; do not migrate again until it is.")
    if _file_sha256(backup) != recorded.backup_sha256:
        raise MigrationRefused(
            f"{backup}: the backup changed since migration request {recorded.request_id} recorded it "
            f"(sha256 then {recorded.backup_sha256}, now {_file_sha256(backup)}). Reconcile: it is no "
            f"longer the pre-migration store; find the original backup before relying on it.")
    return Evidence(
        status="already_at_version",
        message=(f"{db}: already at version {recorded.to_version}; nothing to do (migrated by request "
                 f"{recorded.request_id} at {recorded.finished_at}; store and backup unchanged since)."),
        request_id=recorded.request_id, db_path=str(db), from_version=recorded.to_version,
        to_version=recorded.to_version, evidence_path=str(ev_path))


def _write_backup(conn: sqlite3.Connection, backup: Path, content_before: str) -> str:
    """Back the locked store up to ``backup`` with the online backup API; return its sha256."""
    backup.parent.mkdir(parents=True, exist_ok=True)
    if backup.exists():
        old = _open_readonly(backup)
        try:
            same = content_sha256(old) == content_before
        finally:
            old.close()
        if not same:
            raise MigrationRefused(
                f"{backup}: a different backup already exists there (its content is not the store's "
                f"current content). Move it aside or pass --backup-dir, then run the migration again.")
    return copy_store(conn, backup, content_before)


def copy_store(conn: sqlite3.Connection, target: Path, expected: str, *, digest: Callable[[Any], str] = content_sha256,
               overwrite: bool = True) -> str:
    """A copy of ``conn``'s database at ``target`` (SQLite's online backup API into an owner-only file of its
    own journal, fsynced), checked (``digest`` of the copy is ``expected``, integrity ok) and installed
    atomically: over what is there (``os.replace``), or never over an existing file (``overwrite=False``:
    ``os.link``). Returns the copy's file sha256; ``MigrationRefused`` when the check fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    from envreplica.impl.files import create_private

    try:  # from the temporary file's creation on, whatever stops this (a signal too) removes it
        create_private(tmp)  # owner-only, like the store it copies
        dst = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            conn.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # a self-contained file, whatever the store's mode
        finally:
            dst.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        check = _open_readonly(tmp)
        try:
            if digest(check) != expected or _integrity(check) != ["ok"]:
                raise MigrationRefused(f"{target}: the backup just written does not match the store; "
                                       f"nothing was migrated.")
        finally:
            check.close()
        if overwrite:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)
        _fsync_dir(target.parent)
    finally:
        if tmp.exists():
            tmp.unlink()
    return _file_sha256(target)


def _restore(conn: sqlite3.Connection, backup: Path, content_before: str) -> bool:
    """Restore the locked store from ``backup`` (backup API); whether its content is as before."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    src = _open_readonly(backup)
    try:
        src.backup(conn)
    finally:
        src.close()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return content_sha256(conn) == content_before and _integrity(conn) == ["ok"]


class _Facts(TypedDict):
    """What ``_verify`` checked, as the evidence records it."""

    integrity_check: list[str]
    foreign_key_check: list[list[Any]]
    row_counts_after: dict[str, int]


def _verify(conn: sqlite3.Connection, target: int, counts_before: dict[str, int]) -> tuple[list[str], _Facts]:
    """Problems with the migrated store (empty: verified) and the facts checked."""
    facts: _Facts = {"integrity_check": _integrity(conn), "foreign_key_check": _fk_violations(conn),
                     "row_counts_after": _row_counts(conn)}
    problems = []
    if facts["integrity_check"] != ["ok"]:
        problems.append(f"integrity_check: {facts['integrity_check'][:5]}")
    if facts["foreign_key_check"]:
        problems.append(f"foreign_key_check: {facts['foreign_key_check'][:5]}")
    for t, n in counts_before.items():
        if facts["row_counts_after"].get(t) != n:
            problems.append(f"row count of {t}: {n} before, {facts['row_counts_after'].get(t)} after")
    try:
        version = detect_version(conn)
    except MigrationRefused as e:
        problems.append(str(e))
    else:
        if version != target:
            problems.append(f"schema version after the steps is {version}, not {target}")
    if target == schema.SCHEMA_VERSION and not problems:
        try:
            _assess(conn)
        except WriterVersionError as e:
            problems.append(f"writer contract: {e}")
    return problems, facts


def _post_commit_problems(conn: sqlite3.Connection, content_after: str) -> list[str]:
    """Checks of the committed file's content, still under the lock (``migrate`` runs its integrity check)."""
    if content_sha256(conn) != content_after:
        return ["the committed content differs from the verified content"]
    return []


def migrate(
    db_path: Union[str, Path],
    *,
    backup_dir: Union[str, Path, None] = None,
    evidence_path: Union[str, Path, None] = None,
    target: int = schema.SCHEMA_VERSION,
    steps: Mapping[int, Callable[[sqlite3.Connection, MigrationContext], None]] = MIGRATIONS,
    request_id: Optional[str] = None,
    busy_timeout: float = 5.0,
    master_key: Optional[bytes] = None,
) -> Evidence:
    """Migrate the store at ``db_path`` to schema version ``target``; return the evidence.

    The request is identified by its evidence file (default: next to the
    store, ``<name>.migrate-v<target>.evidence.json``). The backup goes to
    ``backup_dir`` (default: next to the store) as ``<name>.v<from>.bak``.

    ``master_key`` is needed by the steps that authenticate rows (1 -> 2).

    Outcomes: ``Evidence(status="migrated")`` (evidence file written);
    ``Evidence(status="already_at_version")`` when the store is at ``target``
    (no backup, nothing written; also when it was written since an earlier
    migration: that is normal use); ``MigrationRefused`` (nothing changed: the
    store is in use, newer than ``target``, a step is missing, the master key
    is missing, or a completed request's evidence no longer matches);
    ``MigrationFailed`` (verification or a step failed: rolled back, restored
    from the backup, evidence written with status ``failed``). A path that is
    not an envreplica store raises ``impl.files.ReplicaPathError``.
    """
    from envreplica.impl import files

    raw = Path(db_path)
    found = files.probe(raw)
    if found.kind is files.PathKind.MISSING:
        raise files.ReplicaPathError(f"{raw}: no such database file; nothing to migrate (check the --db path)")
    if found.kind is files.PathKind.SQLITE:
        pass  # version 0 has no store_meta: detect_version decides
    else:
        files.refuse_unusable(found, what="the store to migrate")
    if backup_dir is not None and Path(backup_dir).exists() and not Path(backup_dir).is_dir():
        raise files.ReplicaPathError(f"{backup_dir} is not a directory; --backup-dir names the directory "
                                     f"the backup is written to (created if absent)")
    db = raw.resolve()
    ev_path = Path(evidence_path).resolve() if evidence_path is not None else _default_evidence(db, target)
    if ev_path.is_dir():
        raise files.ReplicaPathError(f"{ev_path} is a directory; --evidence names the evidence JSON file")
    problem = files.unwritable(db)
    if problem is not None:
        raise MigrationInputRefused(f"{db}: {problem}; nothing was changed. Make it writable for the user that "
                                    f"runs envreplica, then run the migration again")
    from envreplica.impl import owners

    holders = owners.owners([db])
    if holders:
        raise StoreInUse(f"{db}: the store is in use ({owners.describe(holders)}); nothing was changed. Stop that process (or wait for it to "
                         f"close the store: envreplica never kills it), then run the migration again")
    if master_key is not None:  # before the lock, whose read-write connection checkpoints a log when it closes
        _refuse_wrong_key_early(db, master_key, target, steps)
    started = _now()
    conn = _lock(db, busy_timeout)
    try:
        rid = request_id or uuid.uuid4().hex
        held = _meta(conn) or {}
        if admission_of(held)[0] is not None:
            raise StoreInUse(fenced_message(db, held) + " A store of a paired migration is migrated with its "
                                                        "pair, never alone.")
        version = detect_version(conn)
        if version == target:
            note = " (no backup taken)"
            if ev_path.exists():
                note = f"; an earlier migration's evidence is {ev_path}"
            return Evidence(status="already_at_version",
                            message=f"{db}: already at schema version {target}; nothing to do{note}.",
                            request_id=rid, db_path=str(db), from_version=version, to_version=target,
                            evidence_path=str(ev_path) if ev_path.exists() else None)
        if ev_path.exists():
            done = _check_recorded(db, conn, ev_path, target, request_id)
            if done is not None:
                return done
        if version > target:
            raise MigrationRefused(f"{db}: the store is at schema version {version}, newer than the target "
                                   f"{target}; downgrades are not supported. Upgrade envreplica instead.")
        missing = [v for v in range(version, target) if v not in steps]
        if missing:
            raise MigrationRefused(f"{db}: no migration step from version(s) {missing}; cannot migrate "
                                   f"{version} -> {target} with this envreplica.")
        needs_key = any(getattr(steps[v], "needs_key", False) for v in range(version, target))
        if master_key is None and needs_key:
            raise MigrationInputRefused(
                f"{db}: migrating to schema version {target} authenticates every row under the replica's master "
                f"key, and none was given; nothing was changed. Set ENVREPLICA_MASTER_KEY or "
                f"ENVREPLICA_MASTER_KEY_FILE to the key the replica's values were sealed with, then run the "
                f"migration again.")
        if master_key is not None and needs_key:
            why = key_problem(conn, master_key)
            if why is not None:
                raise MigrationInputRefused(refuse_wrong_key(db, why))
        ctx = MigrationContext(master_key)

        ev = Evidence(status="failed", message="", request_id=rid, db_path=str(db), from_version=version,
                      to_version=target, evidence_path=str(ev_path), started_at=started)
        ev.db_sha256_before = _file_sha256(db)
        ev.content_sha256_before = content_sha256(conn)
        ev.row_counts_before = _row_counts(conn)
        backup = (Path(backup_dir).resolve() if backup_dir is not None else db.parent) / f"{db.name}.v{version}.bak"
        ev.backup_sha256 = _write_backup(conn, backup, ev.content_sha256_before)
        ev.backup_path = str(backup)

        # From here on, any failure restores the backup.
        writer: dict[str, Optional[str]] = {"version": None}
        conn.create_function(WRITER_FUNCTION, 0, lambda: writer["version"])
        try:
            conn.execute("BEGIN EXCLUSIVE")
            for v in range(version, target):
                meta = _meta(conn) or {}
                writer["version"] = meta.get("writer_version")
                steps[v](conn, ctx)
                if not conn.in_transaction:
                    raise MigrationError(f"the step from version {v} ended the migration's transaction")
            problems, facts = _verify(conn, target, ev.row_counts_before)
            ev.integrity_check = facts["integrity_check"]
            ev.foreign_key_check = facts["foreign_key_check"]
            ev.row_counts_after = facts["row_counts_after"]
            if problems:
                raise MigrationError("verification failed: " + "; ".join(problems))
            ev.content_sha256_after = content_sha256(conn)
            conn.execute("COMMIT")
            ev.integrity_check_after_commit = integrity = _integrity(conn)
            post = [f"integrity_check after commit: {integrity[:5]}"] if integrity != ["ok"] else []
            post += _post_commit_problems(conn, ev.content_sha256_after)
            if post:
                raise MigrationError("verification after commit failed: " + "; ".join(post))
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            ev.db_sha256_after = _file_sha256(db)
        except Exception as e:
            try:
                restored = _restore(conn, backup, ev.content_sha256_before)
            except Exception as restore_error:  # pragma: no cover - the disk failed us
                restored = False
                e = MigrationError(f"{e}; and restoring the backup failed: {restore_error}")
            ev.error = str(e)
            ev.finished_at = _now()
            ev.db_sha256_after = _file_sha256(db)
            ev.content_sha256_after = content_sha256(conn) if restored else None
            if restored:
                ev.message = (f"{db}: migration {version} -> {target} failed and was undone: {e}. The store "
                              f"was restored from the backup {backup} and is at version {version}, as before.")
            else:
                ev.message = (f"{db}: migration {version} -> {target} failed: {e}; restoring the backup did "
                              f"NOT bring the store back. Stop envreplica and copy {backup} (sha256 "
                              f"{ev.backup_sha256}) over {db} by hand.")
            _write_json_atomically(ev_path, ev.to_dict())
            raise MigrationFailed(ev.message, restored=restored) from e

        ev.status = "migrated"
        ev.finished_at = _now()
        ev.message = f"{db}: migrated from schema version {version} to {target}; verified."
        _write_json_atomically(ev_path, ev.to_dict())
        return ev
    finally:
        conn.close()
