"""The writer fence judged by what it does: a behavioural probe of a store's fence triggers.

The fence (``impl.writer``) is a set of triggers in the file. Whether a trigger
has the fence's name and text says little about whether writes are fenced: a
fence can be deleted, replaced by another body under the same name, moved to
another table, or disabled beside an intact trigger (another ``BEFORE``
trigger that does ``RAISE(IGNORE)`` first, so the fence never fires). And a
trigger under another name that does the job is a fence. So ``probe`` tests
the fence's behaviour, from the store's own schema:

1. An in-memory SQLite database is built from the file's ``sqlite_master``,
   as the file holds it: every table and index, then ``store_meta``'s rows
   (``writer_version`` among them), one synthetic row per fenced table (a
   value fitting each column's declared type; ``CHECK`` constraints are
   ignored and foreign keys are off, so one row with no parents will do), then
   every view and trigger, in the file's order (which decides the order
   triggers fire in: the newest first; a virtual table's shadow tables,
   created with it, are not created twice). The store is only read: two
   ``SELECT``\\s, whatever the number of rows it holds.
2. For every fenced table (``writer.FENCED_TABLES``) and every action, one
   statement that touches the row: an ``INSERT`` of a second row, an
   ``UPDATE`` of each column on its own (to the second row's value; a fence
   narrowed to ``UPDATE OF`` some columns leaves the others unfenced), a
   ``DELETE``. Each
   runs on the in-memory copy, and is rolled back after, in three states of
   ``store_meta.writer_version``: as recorded (``V``); set to a maintenance
   token (what ``writer.begin_admission`` writes during a paired migration:
   a fence that compares with a constant ``'2'`` instead of reading
   ``store_meta`` shows here); and deleted (the fence must fail closed:
   ``IS NOT NULL`` is true; a fence written with ``!=`` would let every
   writer through). In every state, every writer of the probe: a connection
   that registers no writer function, writers of ``V - 1`` and ``V + 1`` (an
   older and a newer envreplica), the recorded writer ``V`` and the token's
   holder. The state's own writer (``V`` as recorded, the holder under the
   token, nobody once the row is deleted) must write, and runs one ``UPDATE``
   of every column (it fires every ``UPDATE`` trigger a single column's
   would); every other writer must be refused, each ``UPDATE`` column by
   column. (Every writer in every state, since a fence may fail in one state
   for one writer alone: one that fails closed only for ``V`` lets a writer of
   ``V + 1`` through once the row is deleted; ``tests/test_fence_probe_generated.py``
   holds the probe to what the fence does, on generated fences.)
3. The contract: a wrong writer's statement is aborted with the fence message
   (``writer.FENCE_MESSAGE``; ``sqlite3.IntegrityError``), or, for the
   unregistered connection, cannot be prepared (``no such function:
   envreplica_writer_version``), and keeps nothing it wrote to a fenced table;
   the right writer's statement succeeds and changes the row. Anything else
   is a ``Failure``: a wrong writer's statement that succeeds (also one
   skipped silently by a ``RAISE(IGNORE)``: it did not abort), fails with
   another error, or is refused with the fence message after its row was
   written and kept (``RAISE(FAIL)`` in an ``AFTER`` trigger ends the
   statement without undoing what it wrote; ``ABORT`` and ``ROLLBACK`` undo
   it); a right writer's statement that is refused, fails or changes no row.

Why the unregistered connection too: for an ``INSERT`` or a ``DELETE`` its
refusal follows from the others' (a statement that lets ``V`` through and
refuses ``V + 1`` calls the function, so it cannot be prepared without it),
but an ``UPDATE`` of one column is run by the wrong writers only. Triggers
that tell a connection with the function from one without it
(``pragma_function_list``), and let the recorded writer's ``UPDATE`` of
every column through by a note one trigger leaves for the other, can let the
sqlite3 shell set a column that every registered wrong writer is refused
(``tests/test_fence_probe.py`` builds one).

Cost: 1,292 statements on a database of one row per table for the schema of
version 2, a median of 15 ms and at least 9 ms on a busy 2-core machine
(``python bench/bench_proofs.py``; 415 statements, 9 ms and 4 ms, while only
the recorded state was probed with every writer). Most of it is preparing
statements and building the copy: the writer function is registered once
and answers for the writer of the moment, since registering it again would
expire every prepared statement (so the connection that registers none goes
through the three states first).
Every statement runs under a budget of SQLite steps (``STEP_BUDGET``; the
fence's take some 1,500), so a trigger that loops or scans without end makes
the fence untestable (refused), not the check endless. The verdict is a
function of the schema objects and ``store_meta``'s rows alone, so it is
remembered for them (the 32 most recent per process), and a later check of
the same store costs the two reads (``check_writer`` takes 0.1 ms then, 0.2
before). Any change to the schema or to ``store_meta`` is another key and is
probed afresh.

``fence_problems`` says the failures in short sentences, one per table and
action (what fails in the first state that fails), for
``writer.check_writer``'s ``reason="fence"``; when the fence trigger of that
table and action is missing, on another table or not the fence's text, or
other triggers share its table, it says so too (the names explain, the
behaviour decides: a fence re-created under another name passes, a trigger
with the fence's name and another body fails when it does not fence).

Leaves out on purpose:

- the values of ``store_meta`` that are one store's own (``PER_STORE_KEYS``:
  its id, its key check, the paired request that applied or fences it): the
  copy holds a placeholder for each, so that one verdict serves every store
  of a schema and contract (a trigger aimed at one store's id is not
  noticed: deliberate tampering, as below);
- writer versions and tokens other than the ones probed: a trigger that lets
  exactly some other version through (``WHEN ... NOT IN ('7')``), or refuses
  only the probed ones, is not noticed;
- the recorded writer's ``UPDATE`` of a single column (only the one of every
  column is run): a trigger that refuses it would stop this envreplica's own
  writes (fail closed), not let another writer in;
- row data: a trigger whose effect depends on the rows of the file (a
  condition on a fenced table's rows, or on another table's) or on the
  values a statement writes (``WHEN NEW.key = 'prod'``) is judged on the
  synthetic rows and ``store_meta``'s rows only, so that the probe's cost
  does not grow with the store;
- ``store_meta``'s own triggers: the maintenance and absent states are made
  by writing ``store_meta`` on the copy; if a trigger there keeps the write
  from landing, the fence cannot be tested (refused);
- ``TEMP`` triggers and connection settings (``recursive_triggers``,
  ``trusted_schema``): they are not in the file, and fence only the
  connection that made them;
- what the fence never covered: ``store_meta`` and any table outside
  ``writer.FENCED_TABLES``, schema changes (DDL), and deliberate tampering by
  someone who edits the schema to pass this probe (the integrity tags of
  ``impl.integrity`` detect what such a writer changes).
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable, Optional

from envreplica.impl import fence  # the fence's names and SQL (impl.writer re-exports them)

__all__ = ["ACTIONS", "STATES", "PROBE_TOKEN", "STEP_BUDGET", "Failure", "Verdict", "probe", "fence_problems"]

#: The actions the fence guards, in the order they are probed and reported.
ACTIONS = ("INSERT", "UPDATE", "DELETE")

#: The states of ``store_meta.writer_version`` the fence is probed in: as the store records it, set to a
#: maintenance token (``PROBE_TOKEN``), and deleted.
STATES = ("recorded", "token", "absent")

#: The ``writer_version`` of the ``"token"`` state: a paired migration's maintenance token (no version).
PROBE_TOKEN = "maintenance:fence-probe"

#: The SQLite virtual-machine steps one statement of the probe may take (the fence's take some 1,500).
STEP_BUDGET = 1_000_000

_META = "store_meta"
_TICK = 1000  # the steps between two calls of the progress handler


@dataclass(frozen=True)
class Failure:
    """One probe statement that did not behave as the contract says.

    ``writer`` is the version the probing connection registered (``None``:
    it registered no writer function); ``recorded`` whether that is the
    ``writer_version`` of the ``state`` probed (its write must succeed) or
    not (its write must be refused). ``column`` is the column an ``UPDATE``
    set on its own (``None`` for ``INSERT``, ``DELETE`` and an ``UPDATE`` of
    every column); ``outcome`` what happened; ``state`` one of ``STATES``.
    """

    table: str
    action: str
    column: Optional[str]
    writer: Optional[str]
    recorded: bool
    outcome: str
    state: str = "recorded"


@dataclass(frozen=True)
class Verdict:
    """What ``probe`` found: the fence works when nothing is listed.

    ``recorded`` is the store's ``writer_version`` (``None`` when it records
    none: then every writer must be refused, and only that state is probed).
    ``missing``: fenced tables the store does not hold. ``error``: the schema
    could not be rebuilt in memory or a statement ran out of its step budget,
    so the fence was not (fully) probed (a fence that cannot be tested is not
    taken to work).
    """

    recorded: Optional[str]
    writers: tuple[Optional[str], ...]
    failures: tuple[Failure, ...] = ()
    missing: tuple[str, ...] = ()
    error: Optional[str] = None

    @property
    def works(self) -> bool:
        return not (self.failures or self.missing or self.error)


# ---------------------------------------------------------------------------
# Reading the store (sqlite3 and SQLAlchemy connections alike; read only)


def _read(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    if isinstance(conn, sqlite3.Connection):
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    return [tuple(r) for r in conn.exec_driver_sql(sql).fetchall()]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------------------
# The in-memory copy


class _Unprobed(Exception):
    """The fence cannot be tested: the schema cannot be rebuilt in memory, or a statement ran out of steps."""


class _Budget:
    """A progress handler that interrupts a statement after ``STEP_BUDGET`` steps (``reset`` before each)."""

    def __init__(self) -> None:
        self.left = STEP_BUDGET
        self.spent = False

    def reset(self) -> None:
        self.left = STEP_BUDGET

    def __call__(self) -> int:
        self.left -= _TICK
        if self.left < 0:
            self.spent = True
            return 1
        return 0


def _exec(mem: sqlite3.Connection, budget: _Budget, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
    budget.reset()
    return mem.execute(sql, params)


def _synthetic(declared: str, n: int) -> object:
    """A value of row ``n`` (1 or 2) for a column declared ``declared``, by SQLite's affinity rules."""
    t = declared.upper()
    if "INT" in t:
        return n
    if "CHAR" in t or "CLOB" in t or "TEXT" in t:
        return "ab"[n - 1]
    if "BLOB" in t or not t:
        return bytes([n])
    if "REAL" in t or "FLOA" in t or "DOUB" in t:
        return float(n)
    return n  # NUMERIC affinity (BOOLEAN, ANY, ...)


def _columns(mem: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    """The columns an INSERT names (not generated ones), with their declared types."""
    return [(r[1], r[2] or "") for r in mem.execute(f"PRAGMA table_xinfo({_q(table)})") if r[6] == 0]


def _insert_sql(table: str, columns: list[tuple[str, str]]) -> str:
    return (f"INSERT INTO {_q(table)} ({', '.join(_q(c) for c, _ in columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})")


_Objects = tuple[tuple[str, str, str], ...]  # sqlite_master's (type, name, sql), in the file's order
_Rows = tuple[tuple[Any, ...], ...]


def _schema_of(conn: Any) -> tuple[_Objects, _Rows]:
    """What the verdict depends on: the file's schema objects and ``store_meta``'s rows (two reads).

    The rows are sorted, so that the same content is the same key however
    the file orders it (``begin_admission`` and ``end_admission`` re-insert
    ``writer_version``).
    """
    objects = tuple((str(k), str(n), str(s)) for k, n, s in _read(
        conn, "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
              "AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY rowid"))
    has_meta = any(kind == "table" and name == _META for kind, name, _ in objects)
    rows = tuple(sorted(((k, _PLACEHOLDER if k in PER_STORE_KEYS else v) for k, v in
                         _read(conn, f"SELECT key, value FROM {_q(_META)}")), key=repr)) if has_meta else ()
    return objects, rows


#: The ``store_meta`` keys whose values are one store's own (its id, its key's check value, who made it, the
#: paired request that applied or fences it): the probe's copy holds a placeholder instead, so that the
#: verdict, and the cache of verdicts, is one per schema and contract, not one per store (a store of each
#: replica a process opens would cost a probe). A trigger aimed at one store's values is not noticed.
PER_STORE_KEYS = frozenset({"replica_id", "key_check", "key_source", "created_by", "migration_request",
                            "fence_request"})
_PLACEHOLDER = "(one store's own value)"


def _rebuild(objects: _Objects, meta_rows: _Rows, fenced: list[str], budget: _Budget) -> sqlite3.Connection:
    """The in-memory copy of the store's schema, ``store_meta``'s rows and one synthetic row per fenced table."""
    mem = sqlite3.connect(":memory:", isolation_level=None, cached_statements=256)
    try:
        mem.set_progress_handler(budget, _TICK)
        mem.execute("PRAGMA foreign_keys = OFF")
        mem.execute("PRAGMA ignore_check_constraints = ON")
        # Tables and indexes first, then the rows (no trigger fires on them), then views and triggers in the
        # file's order: SQLite fires a table's triggers newest first, so the order is part of the behaviour.
        _create(mem, budget, [o for o in objects if o[0] in ("table", "index")])
        _fill(mem, budget, meta_rows, fenced)
        _create(mem, budget, [o for o in objects if o[0] not in ("table", "index")])
    except BaseException:
        mem.close()
        raise
    return mem


def _create(mem: sqlite3.Connection, budget: _Budget, objects: list[tuple[str, str, str]]) -> None:
    for kind, name, sql in objects:
        try:
            _exec(mem, budget, sql)
        except sqlite3.Error as e:
            # A virtual table's shadow tables are in the file too, and were created with it: not an error.
            if mem.execute("SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?", (kind, name)).fetchone():
                continue
            raise _Unprobed(f"its {kind} {name} cannot be rebuilt in memory ({e})") from None


def _fill(mem: sqlite3.Connection, budget: _Budget, meta_rows: _Rows, fenced: list[str]) -> None:
    try:
        budget.reset()
        if meta_rows:
            mem.executemany(f"INSERT INTO {_q(_META)} VALUES ({', '.join('?' for _ in meta_rows[0])})", meta_rows)
        for table in fenced:
            columns = _columns(mem, table)
            _exec(mem, budget, _insert_sql(table, columns), tuple(_synthetic(t, 1) for _, t in columns))
    except sqlite3.Error as e:
        raise _Unprobed(f"its rows cannot be copied into memory ({e})") from None


# ---------------------------------------------------------------------------
# The probes


_Statement = tuple[str, Optional[str], str, tuple[object, ...]]


def _statements(mem: sqlite3.Connection, table: str, *, each_column: bool) -> list[_Statement]:
    """``(action, column, sql, parameters)``: statements on ``table`` that each touch its one row.

    ``each_column``: one ``UPDATE`` per column (for the wrong writers: a
    fence narrowed to ``UPDATE OF`` some columns must show); otherwise one
    ``UPDATE`` of every column, which fires every ``UPDATE`` trigger any one
    column's would. An ``UPDATE`` sets the column to the second row's value,
    not to itself: a write that a trigger refuses but keeps (``RAISE(FAIL)``
    after the row was written) then shows in the table.
    """
    columns = _columns(mem, table)
    second = {c: _synthetic(t, 2) for c, t in columns}
    out: list[_Statement] = [("INSERT", None, _insert_sql(table, columns), tuple(second.values()))]
    if each_column:
        out += [("UPDATE", c, f"UPDATE {_q(table)} SET {_q(c)} = ?", (second[c],)) for c, _ in columns]
    else:
        out.append(("UPDATE", None, f"UPDATE {_q(table)} SET {', '.join(f'{_q(c)} = ?' for c, _ in columns)}",
                    tuple(second.values())))
    out.append(("DELETE", None, f"DELETE FROM {_q(table)}", ()))
    return out


def _refused(error: sqlite3.Error, registered: bool) -> bool:
    """Whether ``error`` is the fence refusing the statement (or, unregistered, the missing function)."""
    text = str(error)
    if isinstance(error, sqlite3.IntegrityError) and text.startswith(fence.FENCE_MESSAGE):
        return True
    return not registered and isinstance(error, sqlite3.OperationalError) and \
        text == f"no such function: {fence.WRITER_FUNCTION}"


def _contents(mem: sqlite3.Connection, fenced: list[str]) -> tuple[tuple[Any, ...], ...]:
    """The rows of the fenced tables on the copy (one or two each), in an order that does not depend on the file."""
    return tuple(tuple(sorted(mem.execute(f"SELECT * FROM {_q(t)}").fetchall(), key=repr)) for t in fenced)


def _run_one(mem: sqlite3.Connection, budget: _Budget, sql: str, params: tuple[object, ...], must_write: bool,
             registered: bool, kept: Callable[[], bool]) -> Optional[str]:
    """Run one probe statement in the open transaction and undo what it kept; what went wrong, or ``None``.

    An aborted statement keeps nothing (``total_changes`` does not move), so
    the transaction is rolled back and begun again only after a statement
    that changed something (or a ``RAISE(ROLLBACK)``, which ended it). A
    wrong writer's statement refused with the fence's error that kept a change
    to a fenced table (``kept``: a ``RAISE(FAIL)`` in an ``AFTER`` trigger
    refuses the statement after its row was written, and keeps the row) is
    not refused: what it wrote stays.
    """
    before = mem.total_changes
    try:
        try:
            changed = _exec(mem, budget, sql, params).rowcount
        except sqlite3.Error as e:
            if budget.spent:
                raise _Unprobed(f"a statement ran out of its budget of {STEP_BUDGET:,} SQLite steps "
                                f"(a trigger that loops or scans?): {sql}") from None
            if must_write:
                return "is refused by the fence" if _refused(e, True) else f"fails ({e})"
            if not _refused(e, registered):
                return f"fails with another error than the fence's ({e})"
            if mem.total_changes != before and mem.in_transaction and kept():
                return "is refused, but what it wrote stays (a RAISE(FAIL) after the row was written)"
            return None
        if must_write:
            return None if changed >= 1 else "changes no row (a trigger skips the statement)"
        return "is not refused" if changed >= 1 else "is not refused (a trigger skips the statement silently)"
    finally:
        if mem.total_changes != before or not mem.in_transaction:
            if mem.in_transaction:
                mem.execute("ROLLBACK")
            mem.execute("BEGIN")


def _others(recorded: Optional[str]) -> tuple[str, ...]:
    """The wrong writers probed: the versions next to the recorded one (or to this code's, if none is)."""
    text = (recorded or "").strip()
    base = int(text) if text.lstrip("-").isdigit() else fence.WRITER_VERSION
    near = [str(base - 1), str(base + 1)] + ([] if text.lstrip("-").isdigit() else [str(base)])
    return tuple(v for v in near if v != recorded)


def _set_writer_version(mem: sqlite3.Connection, budget: _Budget, value: Optional[str]) -> None:
    """Put the copy in a state: ``writer_version`` set to ``value`` (updated, or inserted when the row is
    gone), or deleted (``None``)."""
    where = f"FROM {_q(_META)} WHERE key = 'writer_version'"
    try:
        if value is None:
            _exec(mem, budget, f"DELETE {where}")
        elif _exec(mem, budget, f"UPDATE {_q(_META)} SET value = ? WHERE key = 'writer_version'",
                   (value,)).rowcount == 0 and not mem.execute(f"SELECT 1 {where}").fetchone():
            _exec(mem, budget, f"INSERT INTO {_q(_META)} (key, value) VALUES ('writer_version', ?)", (value,))
        now = mem.execute(f"SELECT value {where}").fetchall()
    except sqlite3.Error as e:
        raise _Unprobed(f"store_meta.writer_version cannot be changed on the copy ({e})") from None
    if now != ([] if value is None else [(value,)]):
        raise _Unprobed("a trigger on store_meta keeps store_meta.writer_version from changing on the copy")


def probe(conn: Any) -> Verdict:
    """Test the fence of the store ``conn`` is open on, on an in-memory copy of its schema (see the module).

    ``conn`` is a ``sqlite3.Connection`` or a SQLAlchemy connection; it is
    only read (``sqlite_master`` and ``store_meta``). Works on the schema of
    any version with ``store_meta`` (a version-0 file has no fence: every
    wrong writer's write is a failure).
    """
    return _judge(*_schema_of(conn))


@functools.lru_cache(maxsize=32)
def _judge(objects: _Objects, meta_rows: _Rows) -> Verdict:
    """The verdict on a schema and ``store_meta``'s rows: a function of them alone, so remembered."""
    tables = {name for kind, name, _ in objects if kind == "table"}
    fenced = [t for t in fence.FENCED_TABLES if t in tables]
    missing = tuple(t for t in fence.FENCED_TABLES if t not in tables)
    budget = _Budget()
    recorded: Optional[str] = None
    writers: list[Optional[str]] = []
    try:
        mem = _rebuild(objects, meta_rows, fenced, budget)
    except _Unprobed as e:
        return Verdict(recorded=None, writers=(), missing=missing, error=str(e))
    try:
        try:
            row = mem.execute(f"SELECT value FROM {_q(_META)} WHERE key = 'writer_version'").fetchone()
        except sqlite3.Error:
            row = None
        recorded = None if row is None or row[0] is None else str(row[0])
        # (state, writer_version in it): as recorded, then (when a version is recorded) a maintenance token,
        # then deleted. Every writer is probed in every state, each wrong one column by column.
        states: list[tuple[str, Optional[str]]] = [("recorded", recorded)]
        if recorded is not None:
            states += [("token", PROBE_TOKEN), ("absent", None)]
        registered_writers = [*_others(recorded)] + ([recorded, PROBE_TOKEN] if recorded is not None else [])
        writers = [None, *registered_writers]
        statements = {each: {t: _statements(mem, t, each_column=each) for t in fenced} for each in (True, False)}
        failures = []
        # Registered once, answering the writer of the moment: registering again would expire every prepared
        # statement. So the connection that registers no function goes through the states first (a function
        # cannot be unregistered once it is), then every registered writer.
        now: list[Optional[str]] = [None]
        registered = False
        for phase in ([None], registered_writers):
            for state, value in states:
                _set_writer_version(mem, budget, value)
                baseline = _contents(mem, fenced)
                for declared in phase:
                    now[0] = declared
                    if declared is not None and not registered:
                        mem.create_function(fence.WRITER_FUNCTION, 0, lambda: now[0], deterministic=True)
                        registered = True
                    must_write = declared is not None and declared == value
                    mem.execute("BEGIN")
                    for table in fenced:
                        for action, column, sql, params in statements[not must_write][table]:
                            outcome = _run_one(mem, budget, sql, params, must_write, declared is not None,
                                               lambda: _contents(mem, fenced) != baseline)
                            if outcome is not None:
                                failures.append(Failure(table, action, column, declared, must_write, outcome,
                                                        state))
                    mem.execute("ROLLBACK")
    except _Unprobed as e:
        return Verdict(recorded=recorded, writers=tuple(writers), missing=missing, error=str(e))
    finally:
        mem.close()
    return Verdict(recorded=recorded, writers=tuple(writers), failures=tuple(failures), missing=missing)


# ---------------------------------------------------------------------------
# Saying it


_STATE_SAID = {
    "recorded": "",
    "token": (" while store_meta.writer_version holds a maintenance token, as during a paired migration: the "
              "fence does not follow store_meta.writer_version"),
    "absent": " while store_meta records no writer_version: the fence does not fail closed when that row is deleted",
}


def _who(writers: list[Optional[str]], recorded: bool, state: str) -> str:
    if recorded:
        if state == "token":
            return f"the holder of that token ({writers[0]})"
        return f"the recorded writer (version {writers[0]})"
    versions = [w for w in writers if w is not None and w != PROBE_TOKEN]
    parts = [f"a writer of version {' or '.join(versions)}"] if versions else []
    if PROBE_TOKEN in writers:
        parts.append("the holder of a maintenance token")
    if None in writers:
        parts.append("a connection that registers no writer")
    return ", or ".join(parts) + ("," if len(parts) > 1 else "")


def _columns_said(columns: list[Optional[str]], all_columns: int) -> str:
    named = [c for c in columns if c is not None]
    if not named or len(named) == all_columns:
        return ""
    shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
    return f" when it sets {'one of ' if len(named) > 1 else ''}{shown} alone"


def _trigger_note(present: dict[str, tuple[str, str]], table: str, action: str) -> str:
    """What the name and text comparison adds: the state of the fence trigger of ``table`` and ``action``."""
    name, sql = fence.fence_trigger_sql(table, action)
    if name not in present:
        return f" (its fence trigger {name} is missing)"
    on, text = present[name]
    if on != table:
        return f" (its fence trigger {name} is on table {on})"
    if " ".join(text.split()) != " ".join(sql.split()):
        return f" (its fence trigger {name} is not the fence's text)"
    fences = {fence.fence_trigger_sql(table, a)[0] for a in ACTIONS}
    others = sorted(n for n, (t, _) in present.items() if t == table and n not in fences)
    return f" (other triggers on {table}: {', '.join(others)})" if others else ""


def fence_problems(conn: Any) -> list[str]:
    """The store's fence failures, one short sentence per table and action (empty: the fence works).

    A sentence says what fails in the first state that fails (``STATES``:
    as recorded, under a maintenance token, with no ``writer_version``), and
    what the fence trigger of that table and action looks like, e.g.
    ``"UPDATE on records: a writer of version 1 or 3, or a connection that
    registers no writer, is not refused (its fence trigger
    envreplica_fence_records_update is missing)"``.
    """
    verdict = probe(conn)
    if verdict.works:
        return []
    problems = [f"table {t} is missing from the store (no fence to test)" for t in verdict.missing]
    if verdict.error is not None:
        return problems + [f"the fence cannot be tested: {verdict.error}"]
    present = {name: (on, sql or "") for name, on, sql in
               _read(conn, "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'")}
    by_action: dict[tuple[str, str], list[Failure]] = {}
    for f in verdict.failures:
        by_action.setdefault((f.table, f.action), []).append(f)
    order = {t: i for i, t in enumerate(fence.FENCED_TABLES)}
    for (table, action), failures in sorted(by_action.items(), key=lambda kv: (order[kv[0][0]],
                                                                               ACTIONS.index(kv[0][1]))):
        state = min((f.state for f in failures), key=STATES.index)
        groups: dict[tuple[bool, str], list[Failure]] = {}
        for f in failures:
            if f.state == state:
                groups.setdefault((f.recorded, f.outcome), []).append(f)
        n_columns = len(_read(conn, f"PRAGMA table_info({_q(table)})")) if action == "UPDATE" else 0
        clauses = []
        for (recorded, outcome), fs in sorted(groups.items()):
            writers = list(dict.fromkeys(f.writer for f in fs))
            columns = list(dict.fromkeys(f.column for f in fs))
            clauses.append(f"{_who(writers, recorded, state)} {outcome}{_columns_said(columns, n_columns)}")
        problems.append(f"{action} on {table}: {', and '.join(clauses)}{_STATE_SAID[state]}"
                        f"{_trigger_note(present, table, action)}")
    return problems
