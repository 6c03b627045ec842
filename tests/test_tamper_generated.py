"""Tampering generated from the schema, not listed: every table, every kind of edit, each fails closed.

``tests/test_integrity.py`` holds one hand-written case per class of tamper, each with its exact
message. Here the cases are derived from ``impl.schema.TABLES``, so a table or column nobody thought
of is covered the day it is added. For every table that holds rows in one of two replicas (one
serving, one with an attempt staged and not yet committed), as someone who can write the file but
does not hold the key would:

* delete a row (the last, and the first when there are two);
* insert a row (a copy of one, under another primary key);
* restore a row from an older copy of the file (the same row before the last writes), and restore a
  whole project (its ``projects`` row with its records and values);
* edit each column of a row (a number one up, a boolean flipped, text and JSON one character longer,
  a blob with its first byte flipped, a null given a value);
* swap two rows' contents (every column but the primary key).

Each case must fail closed where the tamper is read: the serving replica's snapshot is ``None``; the
staging replica's commit promotes nothing (refused, or a corrupt error: a commit verifies the live view
it replaces, so it never launders a tampered live row) and nothing is served; a tampered receipt is
refused by the receipts listing (the snapshot does not read receipts). And ``verify`` must report it, naming the tampered table's row or the row that holds its
set digest (a deleted row has no row of its own left to name). A case whose edit SQLite's own
constraints refuse (a CHECK, a NOT NULL) is no tamper at all: it is counted, not run.

Leaves out: whole-file rollback (an anchor's job: ``test_integrity``), and ``store_meta``'s schema
version (its edits are the migration's refusals: ``tests/test_migrate.py``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from envreplica.conformance.drivers import SqliteDriver
from envreplica.impl import schema, writer
from envreplica.impl.integrity import TamperDetected

from adapter_requests import SID, SID3, begin, commit, delivery, page, put, rec, serving_a_and_b, staged

KEY = bytes(range(1, 33))
PROJECTS = ["p1", "p2"]
SECRETS = {"A": "secret-A-9f3c1e", "B": "secret-B-77aa02", "C": "secret-C-4d5e6f"}
#: The row that holds each table's set digest (its parent scope), which ``verify`` names when a row of
#: the table is deleted, inserted or restored whole.
PARENT = {"projects": "authority", "records": "projects", "record_values": "projects",
          "stage_projects": "authority", "stage_records": "stage_projects", "stage_values": "stage_projects",
          "receipts": "authority", "authority": "authority"}
TABLES = [t for t in schema.TABLES if t.name != "store_meta"]


def _ok(driver, request: dict):
    response = driver.handle({"id": 1, **request})
    assert response["ok"] is True, response
    result = response["result"]
    assert not (isinstance(result, dict) and result.get("ok") is False), result
    return result


def _copy(src: Path, dst: Path) -> None:
    """A consistent copy of a replica file that is open (its WAL included), by SQLite's backup."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def _build(path: Path, stage: bool):
    """An open replica serving p1 {B, C} and p2 {} (with ``stage``: p1 {A, B}, then an attempt staging p1
    {A, B rotated} and p2 {}, not yet committed), and a copy of its file taken before its last writes (the
    "older copy"). The replica stays open: reopening a file is a restart, which closes the gate and purges
    staging, so a tamper must meet the running replica, as it would in production."""
    driver = SqliteDriver("fixed", path, master_key=KEY)
    older = path.with_name(path.stem + "-older.db")
    for request in serving_a_and_b(SECRETS):
        _ok(driver, request)
    if stage:
        _ok(driver, put("B", staged(SID3), value="secret-B-rotated"))
        _ok(driver, begin("a2", projects=PROJECTS))
        _ok(driver, page([rec("A", ref=staged(SID))], attempt="a2", project="p1", version=3, complete=False))
        _copy(path, older)
        _ok(driver, page([rec("B", gen=2, ref=staged(SID3))], attempt="a2", project="p1", after="A", version=3))
        _ok(driver, page([], attempt="a2", project="p2", version=0))
    else:
        _copy(path, older)
        _ok(driver, delivery(rec("C", ref=staged(SID3)), sequence=3, version=3))
        _ok(driver, delivery(rec("A", rev=2, gen=2, tomb=True), sequence=4, version=4))
    return driver, older


#: What each replica serves untampered (the staging one after its commit).
SERVED = {False: {"B": SECRETS["B"], "C": SECRETS["C"]}, True: {"A": SECRETS["A"], "B": "secret-B-rotated"}}
COMMIT = commit("a2", sequence=2, versions=(("p1", 3), ("p2", 0)))


def _rows(path: Path, table: str) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        conn.close()


def _pk(table) -> list[str]:
    return [c.name for c in table.primary_key.columns]


def _where(table, row: dict) -> tuple[str, list]:
    cols = _pk(table)
    return " AND ".join(f"{c} = ?" for c in cols), [row[c] for c in cols]


def _put(table: str, row: dict) -> tuple[str, list]:
    cols = list(row)
    return (f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [row[c] for c in cols])


def _other(value, column) -> object:
    """Another value of the same storage class (a tamper that keeps the type; the type's own check is
    ``test_integrity``'s)."""
    if value is None:
        return 1 if column.type.python_type in (int, bool) else "x"
    if isinstance(value, bool) or (column.type.python_type is bool):
        return 0 if value else 1
    if isinstance(value, int):
        return value + 1
    if isinstance(value, bytes):
        return bytes([value[0] ^ 1]) + value[1:] if value else b"\x01"
    return value + " " if value.startswith(("{", "[")) else value + "x"


@dataclass(frozen=True)
class Case:
    """One generated tamper: its name, the replica it runs on, and the statements it makes."""

    name: str
    stage: bool  # on the staging replica (else the serving one)
    table: str  # the table it tampers with
    statements: Callable[[Path, Path], list]  # (file, older copy) -> [(sql, params)]; [] when it cannot apply


def _cases() -> list[Case]:
    out: list[Case] = []
    for stage in (False, True):
        where = "staging" if stage else "serving"
        for table in TABLES:
            name = table.name

            def delete(path, older, table=table, which=-1):
                rows = _rows(path, table.name)
                if not rows:
                    return []
                clause, params = _where(table, rows[which])
                return [(f"DELETE FROM {table.name} WHERE {clause}", params)]

            def delete_first(path, older, table=table):
                return delete(path, older, table, 0) if len(_rows(path, table.name)) > 1 else []

            def insert(path, older, table=table):
                rows = _rows(path, table.name)
                if not rows or table.name == "authority":  # one authority row: its CHECK refuses a second
                    return []
                row = dict(rows[-1])
                last = _pk(table)[-1]
                row[last] = _other(row[last], table.c[last])
                return [_put(table.name, row)]

            def restore(path, older, table=table):
                now = {tuple(r[c] for c in _pk(table)): r for r in _rows(path, table.name)}
                for row in _rows(older, table.name):
                    if now.get(tuple(row[c] for c in _pk(table))) != row:
                        return [_put(table.name, row)]
                return []

            def swap(path, older, table=table):
                rows = _rows(path, table.name)
                if len(rows) < 2:
                    return []
                a, b = rows[-2], rows[-1]
                body = [c for c in a if c not in _pk(table)]
                out = []
                for mine, theirs in ((a, b), (b, a)):
                    clause, params = _where(table, mine)
                    out.append((f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in body)} WHERE {clause}",
                                [theirs[c] for c in body] + params))
                return out

            for kind, fn in (("delete", delete), ("delete-first", delete_first), ("insert", insert),
                             ("restore", restore), ("swap", swap)):
                out.append(Case(f"{where}-{name}-{kind}", stage, name, fn))
            for column in table.c:
                def edit(path, older, table=table, column=column):
                    rows = _rows(path, table.name)
                    if not rows:
                        return []
                    row = rows[-1]
                    clause, params = _where(table, row)
                    return [(f"UPDATE {table.name} SET {column.name} = ? WHERE {clause}",
                             [_other(row[column.name], column)] + params)]

                out.append(Case(f"{where}-{name}-edit-{column.name}", stage, name, edit))

        def whole_project(path, older):
            out = []
            for table in ("projects", "records", "record_values"):
                out += [_put(table, r) for r in _rows(older, table) if r.get("project_id") == "p1"]
                keep = {r["key"] for r in _rows(older, table) if r.get("project_id") == "p1"} \
                    if table != "projects" else None
                if keep is not None:
                    out += [(f"DELETE FROM {table} WHERE project_id = 'p1' AND key = ?", [r["key"]])
                            for r in _rows(path, table) if r["project_id"] == "p1" and r["key"] not in keep]
            return out

        if not stage:  # the staging replica's live tables did not move since its older copy
            out.append(Case(f"{where}-whole-project-restore", stage, "projects", whole_project))
    return out


CASES = _cases()


def _tamper(path: Path, statements: list) -> Optional[str]:
    """Run ``statements`` as a key-less writer would; the SQLite error when its own constraints refuse."""
    conn = sqlite3.connect(path, isolation_level=None)
    writer.register_writer(conn)
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        for sql, params in statements:
            conn.execute(sql, params)
        conn.execute("COMMIT")
    except sqlite3.IntegrityError as error:
        conn.execute("ROLLBACK")
        return str(error)
    finally:
        conn.close()
    return None


def _named(problems: list[str], table: str) -> bool:
    wanted = {f"{table} row", f"{PARENT[table]} row"}
    return any(w in p for p in problems for w in wanted)


def _served_keys(driver) -> Optional[set]:
    snap = driver.replica.read_snapshot(PROJECTS)
    return None if snap is None else {e.state.key for p in snap.projects for e in p.entries if e.value}


def _served(driver) -> Optional[dict]:
    snap = driver.replica.read_snapshot(PROJECTS)
    return None if snap is None else {e.state.key: e.value for p in snap.projects for e in p.entries if e.value}


@pytest.mark.parametrize("stage", [False, True], ids=["serving", "staging"])
def test_untampered_replicas_verify_and_serve(stage, tmp_path):
    """The control: without a tamper, ``verify`` is clean and the replica serves (after its commit)."""
    driver, _ = _build(tmp_path / "r.db", stage)
    try:
        assert driver.replica.verify() == []
        if stage:
            _ok(driver, COMMIT)
        assert _served(driver) == SERVED[stage]
    finally:
        driver.close()


class NotApplicable(Exception):
    """The case has nothing to edit in its replica, or SQLite's own constraints refuse its edit."""


def check_case(case: Case, directory: Path) -> None:
    """Build the case's replica in ``directory``, tamper, and assert it fails closed and is named."""
    driver, older = _build(directory / "r.db", case.stage)
    path = Path(driver.db_path)
    try:
        statements = case.statements(path, older)
        if not statements:
            raise NotApplicable(f"{case.table} has nothing this edit applies to in this replica")
        refused = _tamper(path, statements)
        if refused is not None:
            raise NotApplicable(f"SQLite's own constraints refuse it ({refused}): not a tamper")
        if case.table == "receipts":  # read by a replay and the receipts listing, never by the snapshot
            response = driver.handle({"id": 1, "op": "receipts"})
            assert response["ok"] is False and response["error"]["type"] == "corrupt", (case.name, response)
        else:
            if case.stage:  # the commit promotes nothing: refused, or a corrupt error
                response = driver.handle({"id": 1, **COMMIT})
                assert not (response.get("ok") is True and response["result"].get("ok") is True), \
                    (case.name, response)
            assert _served(driver) is None, case.name
        problems = driver.replica.verify()
        assert problems and _named(problems, case.table), (case.name, problems)
        for secret in [*SECRETS.values(), "secret-B-rotated"]:
            assert all(secret not in p for p in problems)
    finally:
        driver.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_generated_tamper_fails_closed_and_is_named(case: Case, tmp_path):
    try:
        check_case(case, tmp_path)
    except NotApplicable as why:
        pytest.skip(str(why))


def test_every_table_has_generated_cases_that_apply(tmp_path):
    """The generator's coverage: in one of the two replicas, every table has rows to delete and a tag to
    edit (else all its cases would be skips)."""
    applied = set()
    built = {stage: _build(tmp_path / f"r{int(stage)}.db", stage) for stage in (False, True)}
    try:
        for case in CASES:
            if case.name.endswith(("-delete", "-edit-tag")):
                driver, older = built[case.stage]
                if case.statements(Path(driver.db_path), older):
                    applied.add((case.table, case.name.rsplit("-", 1)[-1]))
    finally:
        for driver, _ in built.values():
            driver.close()
    for table in TABLES:
        assert (table.name, "delete") in applied, table.name
        assert (table.name, "tag") in applied, table.name


# ---------------------------------------------------------------------------
# Test the tester: implementations that stopped checking a set, each caught by the generated cases
# ---------------------------------------------------------------------------


def _tables_edit(name: str, old: str, new: str):
    from impl_mutants import source_mutant

    from envreplica.impl import tables as tables_module

    return name, source_mutant(tables_module.Tables, name, tables_module, (old, new))


#: Each a realistic slip in ``impl.tables``: (mutant, the method it edits, the text it replaces, by what).
TAMPER_MUTANTS = {
    "project_set_unchecked": ("projects", 'if I.total(elements) != self._digest("live"):',
                              "if False:  # MUTANT: the project set is not compared"),
    "stage_set_unchecked": ("verified_stage", 'if I.total(elements) != self._digest("stage"):',
                            "if False:  # MUTANT: the staged project set is not compared"),
    "record_set_unchecked": ("_verified_set", "if got != parent.digest:",
                             "if False:  # MUTANT: a project's records and values are not compared"),
    "commit_launders_live": ("replace_live", "self.verified_live()\n", "pass  # MUTANT: the live view is not verified\n"),
}


@pytest.mark.parametrize("mutant", sorted(TAMPER_MUTANTS))
def test_generated_cases_catch_each_tamper_mutant(mutant, tmp_path, monkeypatch):
    """Each mutant lets at least one generated case through (it serves, promotes, or verifies clean)."""
    from envreplica.impl import tables as tables_module

    name, method = _tables_edit(*TAMPER_MUTANTS[mutant])
    monkeypatch.setattr(tables_module.Tables, name, method)
    caught = []
    for i, case in enumerate(CASES):
        directory = tmp_path / str(i)
        directory.mkdir()
        try:
            check_case(case, directory)
        except NotApplicable:
            continue
        except (AssertionError, TamperDetected):
            caught.append(case.name)
    assert caught, f"{mutant}: no generated tamper case noticed it"
    print(f"{mutant}: caught by {len(caught)} cases, e.g. {caught[0]}")
