"""The writer fence judged by what it does (``impl.fence_probe``, through ``writer.check_writer``).

Every case alters the fence of one table and action of a version-2 store
(deleted, replaced under the same name, disabled beside an intact trigger,
moved to another table, ...) and checks that ``check_writer`` refuses the store
(``reason="fence"``) with a message naming that table and action; a fence that
works passes, whatever its triggers are called.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event

from envreplica.impl import fence_probe as FP
from envreplica.impl import schema
from envreplica.impl import writer as W

from test_writer import make_current

ACTIONS = ("INSERT", "UPDATE", "DELETE")
CASES = [(t, a) for t in W.FENCED_TABLES for a in ACTIONS]
WRITER_VERSION_SQL = "(SELECT value FROM \"store_meta\" WHERE key = 'writer_version')"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """One intact store of this version (copied for each case)."""
    return make_current(tmp_path_factory.mktemp("base") / "base.db")


@pytest.fixture
def store(base, tmp_path) -> Path:
    db = tmp_path / "r.db"
    shutil.copyfile(base, db)
    return db


def _connect(db: Path, version=W.WRITER_VERSION) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db), isolation_level=None)
    if version is not None:
        W.register_writer(conn, version)
    return conn


def _alter(db: Path, *statements: str) -> None:
    conn = _connect(db)
    for sql in statements:
        conn.execute(sql)
    conn.close()


def _check(db: Path):
    """``check_writer`` on a new connection to ``db``: its result, or the ``WriterVersionError`` it raised."""
    conn = _connect(db)
    try:
        return W.check_writer(conn)
    except W.WriterVersionError as e:
        return e
    finally:
        conn.close()


def _refused(db: Path, table: str, action: str) -> str:
    err = _check(db)
    assert isinstance(err, W.WriterVersionError), f"the store was not refused: {err!r}"
    assert err.reason == "fence" and err.found == schema.SCHEMA_VERSION
    message = str(err)
    assert f"{action} on {table}: " in message, message
    assert "does not work" in message and "Do not write it" in message and "backup" in message
    return message


def _fence(table: str, action: str) -> tuple[str, str]:
    return W.fence_trigger_sql(table, action)


def _message(table: str, action: str) -> str:
    """The fence's abort message for ``table`` and ``action``."""
    return _fence(table, action)[1].split("RAISE(ABORT, '")[1].split("')")[0]


def _columns(db: Path, table: str) -> list[str]:
    conn = sqlite3.connect(str(db))
    try:
        return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
    finally:
        conn.close()


def _replace(table: str, action: str, body_where: str, *, on: str = "") -> list[str]:
    """Drop the fence trigger of ``table`` and ``action`` and create another body under its name."""
    name, _ = _fence(table, action)
    return [f'DROP TRIGGER "{name}"',
            f'CREATE TRIGGER "{name}" BEFORE {action}{on} ON "{table}" BEGIN '
            f"SELECT RAISE(ABORT, '{_message(table, action)}') {body_where}; END"]


# --------------------------------------------------------------------------- a working fence passes


def test_an_intact_fence_passes_and_leaves_the_store_as_it_was(store):
    before = store.read_bytes()
    conn = _connect(store)
    schema_before = conn.execute("SELECT * FROM sqlite_master ORDER BY rowid").fetchall()
    assert W.check_writer(conn) == schema.SCHEMA_VERSION
    assert conn.total_changes == 0
    assert conn.execute("SELECT * FROM sqlite_master ORDER BY rowid").fetchall() == schema_before
    conn.close()
    assert store.read_bytes() == before
    verdict = FP.probe(_connect(store))
    assert verdict.works and verdict.recorded == str(W.WRITER_VERSION)
    assert verdict.writers == (None, str(W.WRITER_VERSION - 1), str(W.WRITER_VERSION + 1), str(W.WRITER_VERSION),
                               FP.PROBE_TOKEN)


def test_a_broken_fence_is_probed_without_changing_the_store(store):
    _alter(store, f'DROP TRIGGER "{_fence("records", "UPDATE")[0]}"')
    before = store.read_bytes()
    files = sorted(p.name for p in store.parent.iterdir())
    conn = _connect(store)
    with pytest.raises(W.WriterVersionError):
        W.check_writer(conn)
    assert conn.total_changes == 0
    conn.close()
    assert store.read_bytes() == before
    assert sorted(p.name for p in store.parent.iterdir()) == files


def test_a_fence_recreated_under_other_names_passes(store):
    drops = [f'DROP TRIGGER "{_fence(t, a)[0]}"' for t, a in CASES]
    # created in another order too (actions first), under names that are not the fence's
    creates = [_fence(t, a)[1].replace('"envreplica_fence_', '"guard_') for a in ACTIONS for t in W.FENCED_TABLES]
    _alter(store, *drops, *creates)
    conn = _connect(store)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert names and not any(n.startswith("envreplica_fence_") for n in names)
    conn.close()
    assert _check(store) == schema.SCHEMA_VERSION
    # and it does fence
    wrong = _connect(store, W.WRITER_VERSION + 1)
    with pytest.raises(sqlite3.IntegrityError, match=W.FENCE_MESSAGE):
        wrong.execute("DELETE FROM projects")
    wrong.close()


def test_a_disabling_trigger_older_than_the_fence_does_not_disable_it(store):
    """Triggers fire newest first, as the file orders them: a disabler created before the fence never acts."""
    name, sql = _fence("projects", "UPDATE")
    _alter(store, f'DROP TRIGGER "{name}"',
           f"CREATE TRIGGER disabler BEFORE UPDATE ON projects WHEN envreplica_writer_version() IS NOT "
           f"{WRITER_VERSION_SQL} BEGIN SELECT RAISE(IGNORE); END",
           sql)  # the fence, newer than the disabler
    wrong = _connect(store, W.WRITER_VERSION - 1)
    with pytest.raises(sqlite3.IntegrityError, match=W.FENCE_MESSAGE):
        wrong.execute("UPDATE projects SET record_version = record_version")
    wrong.close()
    assert _check(store) == schema.SCHEMA_VERSION


def test_a_fence_through_a_sqlalchemy_connection(store):
    engine = create_engine(f"sqlite+pysqlite:///{store}")
    event.listen(engine, "connect", lambda dbapi_con, _rec: W.register_writer(dbapi_con))
    with engine.connect() as c:
        assert W.check_writer(c) == schema.SCHEMA_VERSION
    _alter(store, f'DROP TRIGGER "{_fence("receipts", "DELETE")[0]}"')
    with engine.connect() as c:
        with pytest.raises(W.WriterVersionError, match="DELETE on receipts: ") as err:
            W.check_writer(c)
    assert err.value.reason == "fence"
    engine.dispose()


def test_a_store_with_a_virtual_table_beside_the_replica_is_probed(store):
    """An FTS5 table's shadow tables are in the file as tables of their own; rebuilding it creates them."""
    _alter(store, "CREATE VIRTUAL TABLE notes USING fts5(body)")
    assert _check(store) == schema.SCHEMA_VERSION


# --------------------------------------------------------------------------- (a) deleted


@pytest.mark.parametrize("table, action", CASES)
def test_a_deleted_fence_trigger_is_refused(store, table, action):
    name, _ = _fence(table, action)
    _alter(store, f'DROP TRIGGER "{name}"')
    message = _refused(store, table, action)
    assert f"its fence trigger {name} is missing" in message
    assert "a connection that registers no writer" in message


# --------------------------------------------------------------------------- (b) another body under the same name


REPLACEMENTS = {
    # never raises
    "never_raises": "WHERE 0",
    # raises only for version 3 (a newer envreplica): an older one gets through
    "only_version_3": "WHERE envreplica_writer_version() = '3'",
    # raises only for older versions: a newer one gets through
    "only_older": f"WHERE envreplica_writer_version() < {WRITER_VERSION_SQL}",
    # the fence, but letting the next older envreplica through (it behaves in every other state)
    "lets_older_through": f"WHERE envreplica_writer_version() IS NOT {WRITER_VERSION_SQL} "
                          f"AND envreplica_writer_version() IS NOT '{W.WRITER_VERSION - 1}'",
    # the fence, but letting the next newer envreplica through
    "lets_newer_through": f"WHERE envreplica_writer_version() IS NOT {WRITER_VERSION_SQL} "
                          f"AND envreplica_writer_version() IS NOT '{W.WRITER_VERSION + 1}'",
    # compares with a constant, not with store_meta: a maintenance token does not fence the store
    "constant_version": f"WHERE envreplica_writer_version() IS NOT '{W.WRITER_VERSION}'",
    # != instead of IS NOT: with no writer_version row, every writer gets through
    "not_equal": f"WHERE envreplica_writer_version() != {WRITER_VERSION_SQL}",
}


@pytest.mark.parametrize("body", sorted(REPLACEMENTS))
@pytest.mark.parametrize("table, action", CASES)
def test_a_fence_trigger_with_another_body_is_refused(store, table, action, body):
    _alter(store, *_replace(table, action, REPLACEMENTS[body]))
    message = _refused(store, table, action)
    assert f"its fence trigger {_fence(table, action)[0]} is not the fence's text" in message
    said = {"constant_version": "the fence does not follow store_meta.writer_version",
            "not_equal": "the fence does not fail closed when that row is deleted"}
    if body in said:
        assert said[body] in message


@pytest.mark.parametrize("table", W.FENCED_TABLES)
def test_an_update_fence_narrowed_to_one_column_is_refused(store, table):
    first = _columns(store, table)[0]
    name, sql = _fence(table, "UPDATE")
    narrowed = sql.replace(f'BEFORE UPDATE ON "{table}"', f'BEFORE UPDATE OF "{first}" ON "{table}"')
    assert narrowed != sql
    _alter(store, f'DROP TRIGGER "{name}"', narrowed)
    message = _refused(store, table, "UPDATE")
    assert "when it sets one of " in message and f"sets one of {first}" not in message


# --------------------------------------------------------------------------- (c) disabled beside an intact trigger


DISABLERS = {
    # skips every statement: the fence never fires, and this envreplica's own writes vanish too
    "always": "",
    # skips exactly the statements the fence would refuse: the recorded writer still writes
    "wrong_writers": f"WHEN envreplica_writer_version() IS NOT {WRITER_VERSION_SQL}",
    # swallows the recorded writer's statements: no other writer gets in, but this envreplica cannot write
    "recorded_writer": f"WHEN envreplica_writer_version() IS {WRITER_VERSION_SQL}",
}


@pytest.mark.parametrize("kind", sorted(DISABLERS))
@pytest.mark.parametrize("table, action", CASES)
def test_a_fence_disabled_by_another_trigger_is_refused(store, table, action, kind):
    _alter(store, f"CREATE TRIGGER envreplica_fence_skip BEFORE {action} ON \"{table}\" {DISABLERS[kind]} "
                  f"BEGIN SELECT RAISE(IGNORE); END")
    conn = _connect(store)
    fence_name, fence_sql = _fence(table, action)
    assert conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (fence_name,)).fetchone() == (fence_sql,)
    conn.close()
    message = _refused(store, table, action)
    assert f"other triggers on {table}: envreplica_fence_skip" in message
    if kind == "recorded_writer":
        assert f"the recorded writer (version {W.WRITER_VERSION}) changes no row" in message
    else:
        assert "is not refused (a trigger skips the statement silently)" in message


# --------------------------------------------------------------------------- (d) moved to another table


@pytest.mark.parametrize("table, action", CASES)
def test_a_fence_trigger_moved_to_another_table_is_refused(store, table, action):
    name, sql = _fence(table, action)
    other = W.FENCED_TABLES[(W.FENCED_TABLES.index(table) + 1) % len(W.FENCED_TABLES)]
    _alter(store, f'DROP TRIGGER "{name}"', sql.replace(f'ON "{table}"', f'ON "{other}"'))
    message = _refused(store, table, action)
    assert f"its fence trigger {name} is on table {other}" in message


# --------------------------------------------------------------------------- a connection that registers no writer


@pytest.mark.parametrize("table", W.FENCED_TABLES)
def test_a_fence_that_lets_an_unregistered_connection_update_a_column_is_refused(store, table):
    """Only the unregistered connection's probe sees this one: the sqlite3 shell may set the last column.

    The fence is narrowed to every column but the last (and, when it lets its
    writer through, notes that in a table); a second trigger on the last
    column refuses every connection that has the writer function
    registered, unless the fence noted its writer first. So every registered
    writer behaves as the contract says, and a connection without the
    function updates the last column unrefused.
    """
    columns = _columns(store, table)
    last, rest = columns[-1], columns[:-1]
    name, _ = _fence(table, "UPDATE")
    message = _message(table, "UPDATE")
    _alter(store,
           f'DROP TRIGGER "{name}"',
           "CREATE TABLE fence_scratch (x)",
           f'CREATE TRIGGER last_column BEFORE UPDATE OF "{last}" ON "{table}" '
           f"WHEN EXISTS (SELECT 1 FROM pragma_function_list WHERE name = '{W.WRITER_FUNCTION}') "
           f"AND NOT EXISTS (SELECT 1 FROM fence_scratch) BEGIN SELECT RAISE(ABORT, '{message}'); END",
           f'CREATE TRIGGER "{name}" BEFORE UPDATE OF {", ".join(f"{chr(34)}{c}{chr(34)}" for c in rest)} '
           f'ON "{table}" BEGIN SELECT RAISE(ABORT, \'{message}\') WHERE envreplica_writer_version() IS NOT '
           f"{WRITER_VERSION_SQL}; INSERT INTO fence_scratch VALUES (1); END")
    # as described: the shell writes the last column, a wrong writer cannot
    shell = _connect(store, None)
    assert shell.execute(f'UPDATE "{table}" SET "{last}" = "{last}"').rowcount >= 1
    shell.close()
    wrong = _connect(store, W.WRITER_VERSION + 1)
    with pytest.raises(sqlite3.IntegrityError, match=W.FENCE_MESSAGE):
        wrong.execute(f'UPDATE "{table}" SET "{last}" = "{last}"')
    wrong.close()
    message = _refused(store, table, "UPDATE")
    assert f"a connection that registers no writer, is not refused when it sets {last} alone" in message \
        or f"a connection that registers no writer is not refused when it sets {last} alone" in message


# --------------------------------------------------------------------------- what is not probed, and when


def test_a_store_under_maintenance_is_refused_as_fenced_before_the_probe(store, monkeypatch):
    _alter(store, f'DROP TRIGGER "{_fence("records", "INSERT")[0]}"')
    token = W.admission_token("maintenance", "req1")
    holder = _connect(store, None)
    holder.create_function(W.WRITER_FUNCTION, 0, lambda: token, deterministic=True)
    holder.execute("BEGIN")
    W.begin_admission(holder, token)
    holder.execute("COMMIT")
    holder.close()

    def no_probe(conn):
        raise AssertionError("the fence was probed on a store under maintenance")

    monkeypatch.setattr(FP, "probe", no_probe)
    err = _check(store)
    assert isinstance(err, W.WriterVersionError) and err.reason == "fenced"
    assert "req1" in str(err)


def test_a_fence_that_cannot_be_tested_is_refused(store):
    """A trigger that runs without end does not make the check endless: the statement runs out of steps."""
    _alter(store, "CREATE TRIGGER slow BEFORE INSERT ON projects WHEN (WITH RECURSIVE c(x) AS "
                  "(SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000) SELECT count(*) FROM c) < 0 "
                  "BEGIN SELECT RAISE(IGNORE); END")
    started = time.perf_counter()
    err = _check(store)
    assert time.perf_counter() - started < 2.0
    assert isinstance(err, W.WriterVersionError) and err.reason == "fence"
    assert "the fence cannot be tested" in str(err) and "budget" in str(err)


def test_a_store_meta_that_cannot_change_makes_the_fence_untestable(store):
    _alter(store, "CREATE TRIGGER frozen BEFORE UPDATE ON store_meta BEGIN SELECT RAISE(IGNORE); END")
    err = _check(store)
    assert isinstance(err, W.WriterVersionError) and err.reason == "fence"
    assert "keeps store_meta.writer_version from changing" in str(err)


# --------------------------------------------------------------------------- the verdict's cache


def test_the_verdict_is_remembered_per_schema_and_store_meta(store):
    FP._judge.cache_clear()
    conn = _connect(store)
    assert W.check_writer(conn) == schema.SCHEMA_VERSION
    assert W.check_writer(conn) == schema.SCHEMA_VERSION
    info = FP._judge.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    # a trigger that disables the fence when a store_meta row says so: the same schema, probed afresh
    conn.execute("CREATE TRIGGER switch BEFORE DELETE ON receipts WHEN (SELECT value FROM store_meta "
                 "WHERE key = 'fence_off') = 'yes' BEGIN SELECT RAISE(IGNORE); END")
    assert W.check_writer(conn) == schema.SCHEMA_VERSION  # a new schema: probed (a miss), and it works
    assert FP._judge.cache_info().misses == 2
    conn.execute("INSERT INTO store_meta (key, value) VALUES ('fence_off', 'yes')")
    with pytest.raises(W.WriterVersionError, match="DELETE on receipts: ") as err:
        W.check_writer(conn)
    assert err.value.reason == "fence" and FP._judge.cache_info().misses == 3
    conn.execute("DELETE FROM store_meta WHERE key = 'fence_off'")
    conn.execute('DROP TRIGGER "switch"')
    assert W.check_writer(conn) == schema.SCHEMA_VERSION  # the first schema again: remembered
    assert FP._judge.cache_info().misses == 3
    conn.execute(f'DROP TRIGGER "{_fence("receipts", "INSERT")[0]}"')
    with pytest.raises(W.WriterVersionError, match="INSERT on receipts: "):
        W.check_writer(conn)
    conn.close()


def test_a_store_reopened_after_maintenance_is_not_probed_again(store):
    """``end_admission`` re-inserts ``writer_version``: the same rows in another order are the same key."""
    FP._judge.cache_clear()
    conn = _connect(store)
    assert W.check_writer(conn) == schema.SCHEMA_VERSION
    rows = conn.execute("SELECT * FROM store_meta").fetchall()  # in the file's order
    token = W.admission_token("maintenance", "req1")
    holder = _connect(store, None)
    holder.create_function(W.WRITER_FUNCTION, 0, lambda: token, deterministic=True)
    holder.execute("BEGIN")
    W.begin_admission(holder, token)
    W.end_admission(holder)
    holder.execute("COMMIT")
    holder.close()
    after = conn.execute("SELECT * FROM store_meta").fetchall()
    assert after != rows and sorted(after) == sorted(rows)
    assert W.check_writer(conn) == schema.SCHEMA_VERSION
    assert FP._judge.cache_info().misses == 1
    conn.close()
