"""The SQLite engine of the replica: one file, WAL, explicit write and read transactions.

What it does: ``open_engine`` builds a SQLAlchemy ``Engine`` on a file with the
pysqlite recipe of SQLAlchemy's SQLite dialect documentation. The ``connect``
event turns off pysqlite's own transaction handling
(``dbapi_con.isolation_level = None``, so pysqlite never runs statements
outside the transaction we asked for, nor begins one we did not) and sets the
per-connection pragmas; the ``begin`` event emits ``BEGIN IMMEDIATE`` when
SQLAlchemy autobegins. ``write_transaction`` and ``read_transaction`` are
context managers on a held ``Connection`` that emit their ``BEGIN`` and
``COMMIT`` on its pysqlite connection directly (the hot path):

* a write transaction starts with ``BEGIN IMMEDIATE``: it takes the write lock
  at its start, so a read-then-write inside it can never lose an update to
  another connection or process (a deferred ``BEGIN`` that read a stale WAL
  snapshot and then writes fails at once with "database is locked");
* a read transaction starts with a plain (deferred) ``BEGIN``: its reads see
  one consistent WAL snapshot and take no write lock.

Either commits when the block ends normally and rolls back when it raises.

The durability choices:

* ``synchronous=FULL`` (the default): a committed delivery receipt is an
  acknowledgement the cloud relies on; it will not resend that sequence. With
  ``NORMAL`` in WAL mode, a commit can be lost on power failure (not on a
  process crash), and a delivery acknowledged and then lost would be a silent
  divergence between cloud and replica. ``FULL`` syncs the WAL on every commit.
  ``NORMAL`` is accepted for benchmarks and for callers who decide otherwise.
* ``journal_mode=WAL``: readers (task loaders reading the served snapshot) do
  not block the writer nor it them, and each read transaction sees a
  consistent snapshot.
* ``busy_timeout``: two processes (a sidecar and a restarted one, a CLI
  inspecting the file) may hold the file at once; a writer waits up to this
  long for the other's write lock instead of failing at once.
* ``foreign_keys=ON``: the schema's foreign keys are enforced (SQLite's
  default is off, per connection).

Leaves out on purpose: connection pooling beyond SQLAlchemy's default (the
replica holds one connection), in-memory databases (``:memory:`` is per
connection; the replica is a file by definition), and retrying "database is
locked" after the busy timeout (the caller's error to see).
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Union, cast

from sqlalchemy import Connection, Engine, create_engine, event

from envreplica.impl.writer import register_writer

if TYPE_CHECKING:
    from sqlalchemy.pool import ConnectionPoolEntry

__all__ = ["SYNCHRONOUS_LEVELS", "open_engine", "write_transaction", "read_transaction"]

#: The ``PRAGMA synchronous`` settings accepted.
SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")

_IMMEDIATE = "BEGIN IMMEDIATE"
_DEFERRED = "BEGIN"


def open_engine(
    path: Union[str, Path], *, synchronous: str = "FULL", busy_timeout_ms: int = 5000, journal_mode: str = "WAL"
) -> Engine:
    """An ``Engine`` on the SQLite file ``path``, with the replica's pragmas.

    ``journal_mode`` is WAL but while a replica is being created
    (``SqliteReplica._create`` builds it in a rollback-journal file first).
    """
    if journal_mode not in ("WAL", "DELETE"):
        raise ValueError(f"journal_mode must be WAL or DELETE; got {journal_mode!r}")
    level = str(synchronous).upper()
    if level not in SYNCHRONOUS_LEVELS:
        raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}; got {synchronous!r}")
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
        raise ValueError("busy_timeout_ms must be a non-negative integer")
    path = Path(path)
    if str(path) in ("", ":memory:"):
        raise ValueError("the replica needs a file path, not an in-memory database")
    engine = create_engine(
        f"sqlite+pysqlite:///{path}",
        # The replica serialises use of its one connection with a lock; the
        # connection may be used from the thread that waits for readiness.
        connect_args={"check_same_thread": False},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_con: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        # pysqlite must not begin or commit anything on its own.
        dbapi_con.isolation_level = None
        cur = dbapi_con.cursor()
        try:
            # The busy timeout first: switching a fresh file to WAL takes a
            # lock that another process opening the file may hold.
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.execute(f"PRAGMA journal_mode={journal_mode}")
            cur.execute(f"PRAGMA synchronous={level}")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()
        # Declare this connection a writer of this envreplica version: the
        # store's fence triggers refuse writes from any other (impl.writer).
        register_writer(dbapi_con)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # SQLAlchemy autobegins: BEGIN IMMEDIATE, unless ``_transaction`` already began one.
        dbapi = dbapi_of(conn)
        if not dbapi.in_transaction:
            dbapi.execute(_IMMEDIATE)

    return engine


def dbapi_of(conn: Connection) -> sqlite3.Connection:
    """The pysqlite connection under ``conn``: every engine here is ``sqlite+pysqlite``, and a held connection
    is checked out (SQLAlchemy types it as any DB-API connection, or None once detached)."""
    return cast(sqlite3.Connection, conn.connection.dbapi_connection)


@contextmanager
def _transaction(conn: Connection, begin: str) -> Iterator[sqlite3.Connection]:
    """``begin`` ... COMMIT on the held connection's pysqlite connection, which it yields (ROLLBACK on error).

    The hot path of every operation runs on the driver: through SQLAlchemy's ``Transaction`` and
    ``exec_driver_sql`` a BEGIN and a COMMIT cost about 15 us more each, a tenth of a delivery at
    ``synchronous=NORMAL``. The schema stays declared in SQLAlchemy (``impl.schema``); the statements
    are ``impl.tables``'s, prepared once by pysqlite's statement cache.
    """
    dbapi = dbapi_of(conn)
    if conn.in_transaction() or dbapi.in_transaction:
        raise RuntimeError("a replica transaction is already open on this connection")
    dbapi.execute(begin)
    try:
        yield dbapi
        dbapi.commit()  # a COMMIT that fails (busy, disk full) rolls back below: the connection stays usable
    except BaseException:
        if dbapi.in_transaction:
            dbapi.rollback()
        raise


def write_transaction(conn: Connection) -> AbstractContextManager[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` when the block raises)."""
    return _transaction(conn, _IMMEDIATE)


def read_transaction(conn: Connection) -> AbstractContextManager[sqlite3.Connection]:
    """``BEGIN`` (deferred: one consistent WAL snapshot) ... ``COMMIT`` (``ROLLBACK`` on error)."""
    return _transaction(conn, _DEFERRED)
