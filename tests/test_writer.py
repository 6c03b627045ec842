"""The writer contract (fence, version checks) and ``envreplica migrate``."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event

from envreplica.impl import schema
from envreplica.impl import writer as W
from envreplica.impl.files import ReplicaPathError
from envreplica.impl.sealing import Sealer
from envreplica.impl.tables import authenticate_contents

KEY = bytes(range(32))
_SEALER = Sealer(KEY)


def sealed(value: str, project: str, key: str, revision: int, generation: int, ref_json: str) -> bytes:
    """``value`` sealed under ``KEY`` for its record, as a replica stores it (a migration proves its key on it)."""
    return _SEALER.seal(value, project_id=project, key=key, revision=revision, generation=generation,
                        value_ref=json.loads(ref_json))


# One valid row per fenced table (FKs satisfied), and a second one to insert.
ROWS = {
    "authority": [("replica", 0, 0, None, 0, None, None, "{}")],
    "projects": [("p1", 3), ("p2", 0)],
    "records": [("p1", "k1", 1, 1, 0, '{"r":1}', None, None, 0, "installed", None),
                ("p1", "k2", 2, 1, 1, None, None, None, 0, "withheld", "tombstone")],
    "record_values": [("p1", "k1", 1, 1, '{"r":1}', sealed("value-1", "p1", "k1", 1, 1, '{"r":1}'))],
    "stage_projects": [("a1", "p1", 3, None, 0), ("a1", "p2", None, None, 0)],
    "stage_records": [("a1", "p1", "k1", 1, 1, 0, "{}", None, None, 0, "installed", None, 1),
                      ("a1", "p1", "k2", 1, 1, 0, "{}", None, None, 0, "installed", None, 1)],
    "stage_values": [("a1", "p1", "k1", 1, 1, "{}", sealed("staged-1", "p1", "k1", 1, 1, "{}")),
                     ("a1", "p1", "k2", 1, 1, "{}", sealed("staged-2", "p1", "k2", 1, 1, "{}"))],
    "receipts": [("s1", 1, "a" * 64, "{}", 3, 1, None), ("s1", 2, "b" * 64, None, None, 0, "refused")],
}
FIRST = {t: rows[:1] for t, rows in ROWS.items()}
assert set(ROWS) == set(W.FENCED_TABLES)


def _insert(conn: sqlite3.Connection, table: str, row: tuple) -> None:
    conn.execute(f'INSERT INTO "{table}" VALUES ({", ".join("?" * len(row))})', row)


def _fill(conn: sqlite3.Connection, rows=FIRST) -> None:
    for t in W.FENCED_TABLES:  # parents first
        for row in rows[t]:
            _insert(conn, t, row)


def _connect(path: Path, version=None) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    if version is not None:
        W.register_writer(conn, version)
    return conn


def current_rows(rows=FIRST) -> dict:
    """``rows`` (of schema version 1) with the integrity columns of this version, as tuples."""
    v1 = {t.name: [c.name for c in t.c] for t in schema.TABLES_V1}
    contents = {t: [dict(zip(v1[t], r)) for r in rows[t]] for t in W.FENCED_TABLES}
    tagged = authenticate_contents(Sealer(KEY).rows, contents, counter=1)
    cols = {t.name: [c.name for c in t.c] for t in schema.TABLES}
    return {t: [tuple(r[c] for c in cols[t]) for r in tagged[t]] for t in W.FENCED_TABLES}


CURRENT = current_rows(ROWS)


def make_current(path: Path, rows=FIRST) -> Path:
    """A stamped store of this version holding ``rows`` (tagged)."""
    conn = _connect(path, W.WRITER_VERSION)
    assert W.check_writer(conn) is None  # fresh
    assert W.stamp(conn, key_check=Sealer(KEY).rows.key_check) == schema.SCHEMA_VERSION
    conn.execute("BEGIN")
    _fill(conn, current_rows(rows))
    conn.execute("COMMIT")
    conn.close()
    return path


def make_v1(path: Path, rows=FIRST) -> Path:
    """A store as envreplica wrote it at schema version 1 (writer version 1, no integrity columns)."""
    conn = _connect(path, 1)
    W.create_tables(conn, 1)
    conn.execute("BEGIN")
    W._install_contract(conn, 1, 1)
    _fill(conn, rows)
    conn.execute("COMMIT")
    conn.close()
    return path


def make_v0(path: Path, rows=FIRST) -> Path:
    conn = _connect(path)
    W.create_tables(conn, 0)
    conn.execute("BEGIN")
    _fill(conn, rows)
    conn.execute("COMMIT")
    conn.close()
    return path


def dump(path: Path, exclude=()) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return W.table_dump(conn, exclude=exclude)
    finally:
        conn.close()


# --------------------------------------------------------------------------- fence


def _attempts(table: str):
    """An INSERT, an UPDATE and a DELETE on ``table`` that touch at least one row."""
    col = "rowid"
    return [
        ("INSERT", f'INSERT INTO "{table}" SELECT * FROM "{table}"'),
        ("UPDATE", f'UPDATE "{table}" SET {col} = {col}'),
        ("DELETE", f'DELETE FROM "{table}"'),
    ]


@pytest.mark.parametrize("declared", [None, 0, W.WRITER_VERSION - 1, W.WRITER_VERSION + 1])
def test_fence_refuses_every_write_by_a_connection_that_is_not_the_recorded_writer(tmp_path, declared):
    db = make_current(tmp_path / "r.db")
    before = dump(db)
    conn = _connect(db, declared)
    for table in W.FENCED_TABLES:
        for action, sql in _attempts(table):
            with pytest.raises(sqlite3.DatabaseError) as err:
                conn.execute(sql)
            if declared is None:
                assert isinstance(err.value, sqlite3.OperationalError)
                assert f"no such function: {W.WRITER_FUNCTION}" in str(err.value)
            else:
                assert isinstance(err.value, sqlite3.IntegrityError)
                assert str(err.value).startswith(f"{W.FENCE_MESSAGE}: {action} on {table} refused")
    # a fresh, valid row is refused too (the fence is not a constraint side effect)
    with pytest.raises(sqlite3.DatabaseError):
        _insert(conn, "projects", CURRENT["projects"][1])
    conn.close()
    assert dump(db) == before


def test_fence_lets_the_recorded_writer_insert_update_and_delete(tmp_path):
    db = make_current(tmp_path / "r.db")
    conn = _connect(db, W.WRITER_VERSION)
    conn.execute("BEGIN")
    for t in W.FENCED_TABLES:
        for row in CURRENT[t][1:]:
            _insert(conn, t, row)
    for t in W.FENCED_TABLES:
        assert conn.execute(f'UPDATE "{t}" SET rowid = rowid').rowcount >= 1
    for t in reversed(W.FENCED_TABLES):
        assert conn.execute(f'DELETE FROM "{t}"').rowcount >= 1
    conn.execute("COMMIT")
    assert all(not rows for t, rows in dump(db, exclude=("store_meta",)).items())
    assert W.check_writer(conn) == schema.SCHEMA_VERSION
    conn.close()


def test_fence_fails_closed_when_writer_version_row_is_deleted(tmp_path):
    db = make_current(tmp_path / "r.db")
    conn = _connect(db, W.WRITER_VERSION)
    conn.execute("DELETE FROM store_meta WHERE key = 'writer_version'")
    with pytest.raises(sqlite3.IntegrityError, match=W.FENCE_MESSAGE):
        conn.execute("DELETE FROM projects")
    with pytest.raises(W.WriterVersionError) as err:
        W.check_writer(conn)
    assert err.value.reason == "malformed"
    conn.close()


def test_fence_through_sqlalchemy_connect_event(tmp_path):
    db = tmp_path / "r.db"
    engine = create_engine(f"sqlite+pysqlite:///{db}")
    event.listen(engine, "connect", lambda dbapi_con, _rec: W.register_writer(dbapi_con))
    with engine.connect() as c:
        assert W.check_writer(c) is None
        W.stamp(c)
        assert W.check_writer(c) == schema.SCHEMA_VERSION
        with c.begin():
            c.exec_driver_sql("INSERT INTO projects (project_id, record_version, rows_digest, written_at, tag) "
                              "VALUES ('p1', 1, x'00', 0, x'00')")
    engine.dispose()
    plain = create_engine(f"sqlite+pysqlite:///{db}")
    with plain.connect() as c:
        with pytest.raises(Exception, match="no such function"):
            c.exec_driver_sql("UPDATE projects SET record_version = 2")
    plain.dispose()
    assert [row[:2] for row in dump(db)["projects"]] == [("p1", 1)]


def test_stamp_is_idempotent_and_fence_triggers_are_checked(tmp_path):
    db = make_current(tmp_path / "r.db")
    conn = _connect(db, W.WRITER_VERSION)
    assert W.stamp(conn) == schema.SCHEMA_VERSION
    n = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='trigger'").fetchone()[0]
    assert n == 3 * len(W.FENCED_TABLES)
    conn.execute('DROP TRIGGER "envreplica_fence_records_update"')
    with pytest.raises(W.WriterVersionError) as err:
        W.check_writer(conn)
    assert err.value.reason == "fence" and "envreplica_fence_records_update" in str(err.value)
    conn.close()


# --------------------------------------------------------------------------- version checks


def test_newer_store_is_refused_on_open(tmp_path):
    db = make_current(tmp_path / "r.db")
    conn = _connect(db, W.WRITER_VERSION)
    conn.execute("UPDATE store_meta SET value = ? WHERE key = 'schema_version'", (str(schema.SCHEMA_VERSION + 1),))
    with pytest.raises(W.WriterVersionError) as err:
        W.check_writer(conn)
    msg = str(err.value)
    assert err.value.reason == "newer" and err.value.found == schema.SCHEMA_VERSION + 1
    assert "newer envreplica" in msg and "Upgrade envreplica" in msg and "do not downgrade" in msg
    with pytest.raises(W.WriterVersionError):
        W.stamp(conn)
    conn.close()


def test_older_store_is_refused_on_open_and_told_to_migrate(tmp_path):
    db = make_v0(tmp_path / "old.db")
    conn = _connect(db, W.WRITER_VERSION)
    with pytest.raises(W.WriterVersionError) as err:
        W.check_writer(conn)
    assert err.value.reason == "older" and err.value.found == 0
    assert f"envreplica migrate --db {db}" in str(err.value)
    with pytest.raises(W.WriterVersionError):
        W.stamp(conn)  # stamping is no way around migrate
    conn.close()
    # a store of schema version 1 (before integrity at rest), too
    db1 = make_v1(tmp_path / "r.db")
    conn = _connect(db1)
    with pytest.raises(W.WriterVersionError, match="envreplica migrate --db") as err:
        W.check_writer(conn)
    assert err.value.reason == "older" and err.value.found == 1
    conn.close()


def test_unrecognised_files(tmp_path):
    db = tmp_path / "x.db"
    conn = _connect(db)
    conn.execute("CREATE TABLE something (x)")
    with pytest.raises(W.WriterVersionError) as err:
        W.check_writer(conn)
    assert err.value.reason == "foreign"
    conn.close()
    with pytest.raises(W.MigrationRefused, match="not an envreplica store"):
        W.migrate(db)
    with pytest.raises(ReplicaPathError, match="no such database file"):
        W.migrate(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    with pytest.raises(ReplicaPathError, match="not a SQLite database"):
        W.migrate(text)
    assert text.read_text() == "not a database\n"
    with pytest.raises(ReplicaPathError, match="is a directory"):
        W.migrate(tmp_path)
    db1 = make_v1(tmp_path / "v1.db")
    with pytest.raises(ReplicaPathError, match="is not a directory"):
        W.migrate(db1, backup_dir=text)


# --------------------------------------------------------------------------- migrate


def test_migrate_v0_to_v1_preserves_data_and_writes_evidence(tmp_path):
    db = make_v0(tmp_path / "r.db", ROWS)
    before = dump(db)
    before_bytes_sha = W._file_sha256(db)
    ev = W.migrate(db, request_id="req-1", target=1)

    assert ev.status == "migrated" and (ev.from_version, ev.to_version) == (0, 1)
    assert dump(db, exclude=("store_meta",)) == before
    assert dict(dump(db)["store_meta"]) == {"schema_version": "1", "writer_version": "1"}
    conn = _connect(db, 1)
    assert W.detect_version(conn) == 1
    conn.close()

    # evidence file
    ev_path = Path(ev.evidence_path)
    assert ev_path == tmp_path / "r.db.migrate-v1.evidence.json"
    assert ev_path.stat().st_mode & 0o777 == 0o600
    assert Path(ev.backup_path).stat().st_mode & 0o777 == 0o600
    data = json.loads(ev_path.read_text())
    assert data["schema_id"] == "envreplica/migration-evidence@1"
    assert data["status"] == "migrated" and data["request_id"] == "req-1"
    assert data["db_path"] == str(db.resolve())
    assert (data["from_version"], data["to_version"]) == (0, 1)
    assert data["backup_path"] == str(tmp_path / "r.db.v0.bak")
    assert data["backup_sha256"] == W._file_sha256(tmp_path / "r.db.v0.bak")
    assert data["db_sha256_before"] == before_bytes_sha
    assert data["db_sha256_after"] == W._file_sha256(db)
    assert data["row_counts_before"] == data["row_counts_after"] == {t: len(r) for t, r in ROWS.items()}
    assert data["integrity_check"] == ["ok"] and data["integrity_check_after_commit"] == ["ok"]
    assert data["foreign_key_check"] == []
    assert data["started_at"] <= data["finished_at"]
    assert data == ev.to_dict()

    # the backup is the pre-migration store, and restorable
    backup = Path(data["backup_path"])
    assert dump(backup) == before
    restored = tmp_path / "restored.db"
    src, dst = sqlite3.connect(f"file:{backup}?mode=ro", uri=True), sqlite3.connect(str(restored))
    src.backup(dst)
    src.close()
    dst.close()
    assert dump(restored) == before
    conn = _connect(restored)
    with pytest.raises(W.WriterVersionError, match="migrate"):
        W.check_writer(conn)  # it is the v0 store again
    conn.close()


def test_migrate_again_is_already_at_version_without_a_second_backup(tmp_path):
    db = make_v0(tmp_path / "r.db")
    first = W.migrate(db, target=1)
    backup = Path(first.backup_path)
    backup_sha, backup_mtime = W._file_sha256(backup), backup.stat().st_mtime_ns
    evidence_text = Path(first.evidence_path).read_text()

    again = W.migrate(db, target=1)
    assert again.status == "already_at_version" and again.backup_path is None
    assert "already at schema version 1" in again.message
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["r.db", "r.db.v0.bak", "r.db.migrate-v1.evidence.json"])
    assert (W._file_sha256(backup), backup.stat().st_mtime_ns) == (backup_sha, backup_mtime)
    assert Path(first.evidence_path).read_text() == evidence_text

    # a store made at this version (no evidence) is also already there
    (tmp_path / "fresh").mkdir()
    out = W.migrate(make_current(tmp_path / "fresh" / "n.db"))
    assert out.status == "already_at_version"
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["n.db"]


def test_rerun_over_a_store_written_since_is_already_at_version(tmp_path):
    """A deploy step that always runs migrate must pass on the second deploy, after the replica wrote."""
    db = make_v0(tmp_path / "r.db")
    ev = W.migrate(db, target=1, backup_dir=tmp_path / "backups", evidence_path=tmp_path / "ev.json")
    conn = _connect(db, 1)  # the replica writes, as it does between deploys
    conn.execute("INSERT INTO projects VALUES ('p7', 0)")
    conn.close()
    after_change = dump(db)

    again = W.migrate(db, target=1, backup_dir=tmp_path / "backups", evidence_path=tmp_path / "ev.json")
    assert again.status == "already_at_version" and str(tmp_path / "ev.json") in again.message
    assert dump(db) == after_change  # nothing touched
    assert Path(ev.backup_path).is_file()


def test_rerun_over_a_restored_store_is_refused(tmp_path):
    """The store went back below the target after the request completed: the same request does not run again."""
    db = make_v0(tmp_path / "r.db")
    ev = W.migrate(db, target=1)
    src, dst = sqlite3.connect(f"file:{ev.backup_path}?mode=ro", uri=True), sqlite3.connect(str(db))
    src.backup(dst)  # someone restored the pre-migration backup over the store
    src.close()
    dst.close()
    with pytest.raises(W.MigrationRefused) as err:
        W.migrate(db, target=1)
    assert "changed after migration request" in str(err.value) and ev.request_id in str(err.value)
    with open(ev.backup_path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(W.MigrationRefused, match="changed after migration request"):
        W.migrate(db, target=1)
    # a new request (another evidence file) migrates it
    assert W.migrate(db, target=1, evidence_path=tmp_path / "ev2.json",
                     backup_dir=tmp_path / "b2").status == "migrated"


def _delete_a_row_then_stamp(conn, ctx):
    # (in this order: once stamped, the fence holds the step to the writer
    # version recorded when it started, here none)
    conn.execute("DELETE FROM projects WHERE project_id = 'p2'")
    W.MIGRATIONS[0](conn, ctx)


def test_verification_failure_restores_the_backup_and_raises(tmp_path):
    db = make_v0(tmp_path / "r.db", ROWS)
    before = dump(db)
    with pytest.raises(W.MigrationFailed) as err:
        W.migrate(db, target=1, steps={0: _delete_a_row_then_stamp})
    assert err.value.restored
    assert "row count of projects: 2 before, 1 after" in str(err.value)
    assert "restored from the backup" in str(err.value)
    assert dump(db) == before  # still the v0 store, every row there
    data = json.loads((tmp_path / "r.db.migrate-v1.evidence.json").read_text())
    assert data["status"] == "failed" and data["content_sha256_after"] == data["content_sha256_before"]

    # the real migration then runs (the failed attempt does not block it)
    ev = W.migrate(db, target=1)
    assert ev.status == "migrated"
    assert dump(db, exclude=("store_meta",)) == before


def test_failure_after_commit_restores_the_backup(tmp_path, monkeypatch):
    db = make_v0(tmp_path / "r.db", ROWS)
    before = dump(db)
    monkeypatch.setattr(W, "_post_commit_problems", lambda conn, content: ["injected"])
    with pytest.raises(W.MigrationFailed, match="injected") as err:
        W.migrate(db, target=1)
    assert err.value.restored
    assert dump(db) == before  # the committed v1 store was replaced by the backup


def test_a_step_that_raises_leaves_the_store_as_it_was(tmp_path):
    db = make_v0(tmp_path / "r.db")
    before = dump(db)

    def broken(conn, ctx):
        W.MIGRATIONS[0](conn, ctx)
        raise RuntimeError("boom")

    with pytest.raises(W.MigrationFailed, match="boom"):
        W.migrate(db, target=1, steps={0: broken})
    assert dump(db) == before


def test_migration_holds_the_exclusive_lock_and_refuses_a_store_in_use(tmp_path):
    db = make_v0(tmp_path / "r.db")
    seen = []

    def probing(conn, ctx):
        other = sqlite3.connect(str(db), timeout=0)
        try:
            other.execute("SELECT count(*) FROM projects").fetchall()
            seen.append("read")
        except sqlite3.OperationalError as e:
            seen.append(str(e))
        finally:
            other.close()
        W.MIGRATIONS[0](conn, ctx)

    assert W.migrate(db, target=1, steps={0: probing}).status == "migrated"
    assert seen == ["database is locked"]

    db2 = make_v0(tmp_path / "busy.db")
    holder = sqlite3.connect(str(db2), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(W.StoreInUse, match="in use"):
            W.migrate(db2, target=1, busy_timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not (tmp_path / "busy.db.v0.bak").exists()


def test_migrate_a_wal_store(tmp_path):
    db = make_v0(tmp_path / "r.db", ROWS)
    conn = sqlite3.connect(str(db), isolation_level=None)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    before = dump(db)
    ev = W.migrate(db, target=1)
    assert ev.status == "migrated" and ev.db_sha256_after == W._file_sha256(db)
    assert dump(Path(ev.backup_path)) == before
    assert dump(db, exclude=("store_meta",)) == before


def test_refuses_downgrade_and_missing_steps(tmp_path):
    db = make_current(tmp_path / "r.db")
    with pytest.raises(W.MigrationRefused, match="downgrades are not supported"):
        W.migrate(db, target=0, evidence_path=tmp_path / "e.json")
    db0 = make_v0(tmp_path / "o.db")
    with pytest.raises(W.MigrationRefused, match="no migration step"):
        W.migrate(db0, steps={})
    with pytest.raises(W.MigrationRefused, match="needs? the master key|authenticates every row"):
        W.migrate(db0)  # 0 -> 2 passes through the step that tags every row
    assert not (tmp_path / "o.db.v0.bak").exists()


# --------------------------------------------------------------------------- CLI


def _cli(argv):
    parser = argparse.ArgumentParser(prog="envreplica")
    from envreplica.cli import migrate  # the command's options (cli/migrate.py)

    migrate.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_migrate(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ENVREPLICA_MASTER_KEY", KEY.hex())
    db = make_v0(tmp_path / "r.db")
    bdir, evf = tmp_path / "b", tmp_path / "e" / "ev.json"
    assert _cli(["migrate", "--db", str(db), "--backup-dir", str(bdir), "--evidence", str(evf)]) == 0
    out = capsys.readouterr().out
    assert f"migrated from schema version 0 to {schema.SCHEMA_VERSION}" in out and str(bdir / "r.db.v0.bak") in out
    assert json.loads(evf.read_text())["status"] == "migrated"

    assert _cli(["migrate", "--db", str(db), "--backup-dir", str(bdir), "--evidence", str(evf)]) == 0
    assert f"already at schema version {schema.SCHEMA_VERSION}" in capsys.readouterr().out

    conn = _connect(db, W.WRITER_VERSION)
    conn.execute("INSERT INTO projects VALUES ('p8', 0, x'00', 0, x'00')")  # the store is written since
    conn.close()
    assert _cli(["migrate", "--db", str(db), "--backup-dir", str(bdir), "--evidence", str(evf)]) == 0
    assert "already at schema version" in capsys.readouterr().out


def test_cli_migrate_without_a_key_refuses_before_touching_anything(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ENVREPLICA_MASTER_KEY", raising=False)
    monkeypatch.delenv("ENVREPLICA_MASTER_KEY_FILE", raising=False)
    db = make_v1(tmp_path / "r.db")
    before = dump(db)
    assert _cli(["migrate", "--db", str(db)]) == 2  # could not run as asked
    assert "ENVREPLICA_MASTER_KEY" in capsys.readouterr().err
    assert dump(db) == before and sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]


# --------------------------------------------------------------------------- maintenance and recovery fences


def test_a_fenced_store_refuses_every_writer_but_its_holder_and_reopens_as_it_was(tmp_path):
    db = make_current(tmp_path / "r.db")
    token = W.admission_token("maintenance", "req1")
    holder = _connect(db)
    holder.create_function(W.WRITER_FUNCTION, 0, lambda: token, deterministic=True)
    holder.execute("BEGIN")
    W.begin_admission(holder, token)
    holder.execute("COMMIT")
    assert W.admission_of(W.read_meta(holder)) == ("maintenance", "req1")
    writer = _connect(db, W.WRITER_VERSION)
    with pytest.raises(W.WriterVersionError, match="fenced for maintenance by the paired migration of request req1") \
            as info:
        W.check_writer(writer)
    assert info.value.reason == "fenced"
    with pytest.raises(sqlite3.IntegrityError, match=W.FENCE_MESSAGE):
        writer.execute("INSERT INTO projects VALUES ('p8', 0, x'00', 0, x'00')")
    holder.execute("INSERT INTO projects VALUES ('p8', 0, x'00', 0, x'00')")  # the holder writes
    holder.execute("BEGIN")
    W.begin_admission(holder, W.admission_token("recovery", "req1"))  # one fence for another: the version kept
    W.end_admission(holder)
    holder.execute("COMMIT")
    meta = W.read_meta(holder)
    assert meta["writer_version"] == str(W.WRITER_VERSION) and W.FENCED_WRITER_VERSION not in meta
    assert W.check_writer(writer) == schema.SCHEMA_VERSION
    writer.execute("INSERT INTO projects VALUES ('p9', 0, x'00', 0, x'00')")
    holder.close()
    writer.close()


@pytest.mark.parametrize("kind, request_id", [("open", "r"), ("maintenance", ""), ("recovery", "a:b")])
def test_an_admission_token_names_a_kind_and_a_request(kind, request_id):
    with pytest.raises(ValueError, match="admission kind"):
        W.admission_token(kind, request_id)
