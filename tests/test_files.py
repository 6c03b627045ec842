"""The replica's files: no destructive open, owner-only modes, the holder lock, reads that never block or lie."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
from envreplica.impl import files
from envreplica.impl.files import ReplicaBusy, ReplicaInUse, ReplicaKeyMismatch, ReplicaPathError
from envreplica.impl.replica import SqliteReplica
from envreplica.impl.sealing import Sealer

from adapter_requests import BOOT, op

KEY = TEST_MASTER_KEY


def replica(path, **options) -> SqliteReplica:
    return SqliteReplica(path, sealer=Sealer(KEY), reader=None, **options)


def booted(path: Path) -> None:
    driver = SqliteDriver("fixed", path, master_key=KEY)
    for i, request in enumerate(BOOT):
        assert driver.handle({"id": i, **request})["ok"]
    driver.close()


# ---------------------------------------------------------------------------
# What a path holds decides what is done with it
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p.write_text("my notes\n"), "not a SQLite database"),
    (lambda p: p.write_bytes(b""), "an empty file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE mine (x)").connection.close(), "not an envreplica replica"),
])
def test_a_path_holding_something_else_is_refused_and_left_alone(tmp_path, make, fragment):
    path = tmp_path / "thing"
    make(path)
    before = sorted(os.listdir(tmp_path)), path.read_bytes() if path.is_file() else None
    with pytest.raises(ReplicaPathError, match=fragment):
        replica(path)
    assert (sorted(os.listdir(tmp_path)), path.read_bytes() if path.is_file() else None) == before


def test_a_missing_directory_is_refused(tmp_path):
    with pytest.raises(ReplicaPathError, match="does not exist"):
        replica(tmp_path / "nowhere" / "r.db")
    with pytest.raises(ReplicaPathError, match="no replica there"):
        replica(tmp_path / "r.db", create=False)
    assert not (tmp_path / "r.db").exists()


def test_a_new_replica_is_created_whole_and_owner_only(tmp_path):
    path = tmp_path / "r.db"
    booted(path)
    r = replica(path)  # reopened, not created: WAL and SHM exist while it is open
    try:
        r.read_status()
        for name in ("r.db", "r.db-wal", "r.db-shm", "r.db.lock"):
            mode = (tmp_path / name).stat().st_mode & 0o777
            assert mode == 0o600, f"{name} is {mode:o}"
    finally:
        r.close()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".creating")]


def test_a_replica_under_another_key_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "r.db"
    booted(path)
    before = path.read_bytes()
    with pytest.raises(ReplicaKeyMismatch, match="another master key"):
        SqliteReplica(path, sealer=Sealer(bytes(32)), reader=None)
    assert path.read_bytes() == before


# ---------------------------------------------------------------------------
# The holder lock and a file removed under a running replica
# ---------------------------------------------------------------------------


def test_an_exclusive_holder_keeps_every_other_opener_out(tmp_path):
    path = tmp_path / "r.db"
    holder = replica(path, exclusive=True)
    try:
        with pytest.raises(ReplicaInUse, match=f"process {os.getpid()}"):
            replica(path)
        with pytest.raises(ReplicaInUse):
            replica(path, exclusive=True)
    finally:
        holder.close()
    replica(path).close()  # released


def test_shared_openers_coexist_and_keep_an_exclusive_one_out(tmp_path):
    path = tmp_path / "r.db"
    a, b = replica(path), replica(path)
    try:
        with pytest.raises(ReplicaInUse, match="needs the replica to itself"):
            replica(path, exclusive=True)
    finally:
        a.close()
        b.close()


def test_a_file_removed_under_a_running_replica_is_noticed(tmp_path):
    path = tmp_path / "r.db"
    r = replica(path)
    try:
        for name in ("r.db", "r.db-wal", "r.db-shm"):
            if (tmp_path / name).exists():
                os.remove(tmp_path / name)
        with pytest.raises(ReplicaPathError, match="removed or replaced"):
            r.close_gate()
        with pytest.raises(ReplicaPathError, match="removed or replaced"):
            r.read_snapshot(["p1"])
    finally:
        r.close()


# ---------------------------------------------------------------------------
# Reads never block on writers and never lie
# ---------------------------------------------------------------------------


def _hold_write_lock(path: Path, release: threading.Event, held: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    held.set()
    release.wait(10)
    conn.execute("ROLLBACK")
    conn.close()


def test_opening_and_reading_take_no_write_lock(tmp_path):
    path = tmp_path / "r.db"
    booted(path)
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(path, release, held))
    holder.start()
    held.wait(5)
    try:
        # No busy wait at all: were opening or reading to need a lock the writer holds, it would raise
        # ReplicaBusy at once (the verdict is the exception, not a clock).
        r = replica(path, create=False, busy_timeout_ms=0)
        try:
            assert r.read_snapshot(["p1"]) is not None  # served beside a writer holding the lock
            assert r.read_status().gate_open
            with pytest.raises(ReplicaBusy, match="another process holds"):
                r.close_gate()  # a write waits the busy timeout, then says so
        finally:
            r.close()
    finally:
        release.set()
        holder.join()


def test_an_open_against_a_held_exclusive_lock_is_busy(tmp_path):
    path = tmp_path / "r.db"
    booted(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("PRAGMA locking_mode=EXCLUSIVE")
        blocker.execute("BEGIN EXCLUSIVE")  # what a migration holds from start to end
        with pytest.raises(ReplicaBusy, match="another process holds"):
            replica(path, create=False, busy_timeout_ms=100)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_a_lock_error_on_read_is_busy_never_a_closed_gate(tmp_path, monkeypatch):
    from contextlib import contextmanager

    from sqlalchemy.exc import OperationalError

    from envreplica.impl import replica as replica_module

    path = tmp_path / "r.db"
    booted(path)
    r = replica(path, create=False)

    @contextmanager
    def locked(conn):
        raise OperationalError("BEGIN", {}, sqlite3.OperationalError("database is locked"))
        yield  # pragma: no cover

    try:
        monkeypatch.setattr(replica_module, "read_transaction", locked)
        with pytest.raises(ReplicaBusy):
            r.read_snapshot(["p1"])
        assert "another process holds" in r.snapshot_diagnostics(["p1"])
        monkeypatch.undo()
        assert r.read_snapshot(["p1"]) is not None
    finally:
        r.close()


def test_sqlite_errors_are_classified():
    assert isinstance(files.sqlite_error(sqlite3.OperationalError("database is locked"), "x"), ReplicaBusy)
    assert isinstance(files.sqlite_error(sqlite3.DatabaseError("file is not a database"), "x"), ReplicaPathError)
    assert isinstance(files.sqlite_error(sqlite3.OperationalError("disk I/O error"), "x"), files.ReplicaIOError)


# ---------------------------------------------------------------------------
# The adapter's reset empties its own replica in place
# ---------------------------------------------------------------------------


def test_reset_empties_the_replica_in_place_and_keeps_the_file(tmp_path):
    path = tmp_path / "r.db"
    driver = SqliteDriver("fixed", path, master_key=KEY, exclusive=True, created_by=files.CREATED_BY_ADAPTER)
    try:
        for i, request in enumerate(BOOT):
            assert driver.handle({"id": i, **request})["ok"]
        inode = path.stat().st_ino
        assert driver.handle({"id": 9, "op": "reset"})["ok"]
        assert path.stat().st_ino == inode  # the same file: emptied, never removed
        status = driver.handle({"id": 10, **op("status")})["result"]
        assert status["activated"] is False and status["projectIds"] == []
        assert driver.replica.verify() == []
    finally:
        driver.close()
    assert files.probe(path).meta.get("created_by") == files.CREATED_BY_ADAPTER


def test_a_commit_that_fails_rolls_back_and_leaves_the_connection_usable(tmp_path):
    """``impl.engine``'s transactions run BEGIN and COMMIT on pysqlite: a failed COMMIT must not wedge them."""
    from envreplica.impl.engine import open_engine, write_transaction

    engine = open_engine(tmp_path / "e.db")
    try:
        with engine.connect() as conn:
            with write_transaction(conn) as db:
                db.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
                db.execute("CREATE TABLE c (pid INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)")
            with pytest.raises(sqlite3.IntegrityError):
                with write_transaction(conn) as db:
                    db.execute("INSERT INTO c VALUES (42)")  # the deferred foreign key fails at COMMIT
            with write_transaction(conn) as db:  # not "a replica transaction is already open"
                assert db.execute("SELECT count(*) FROM c").fetchone()[0] == 0
    finally:
        engine.dispose()
