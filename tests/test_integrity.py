"""Integrity at rest: each class of tampering fails closed, names its table and row, and is never laundered.

The threat (docs/integrity.md): someone who can write the file but
does not hold the master key. Each test tampers as such a writer would, with
a connection registered as an envreplica writer (the fence is not a defence
against a deliberate writer), then checks what the replica does:

* the snapshot fails closed (``None``; the adapter answers ``null``);
* ``snapshot_diagnostics`` and ``verify`` name the table and the row, and never
  a value;
* a later write does not make the tamper disappear.

Also here: whole-file rollback (not seen without an anchor, seen with one),
the 1 -> 2 migration that authenticates an existing replica, and a grep of
every file the replica writes for plaintext values and key material.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from envreplica.conformance.drivers import SqliteDriver
from envreplica.impl import integrity as I
from envreplica.impl import schema, writer
from envreplica.impl.anchor import FileAnchor
from envreplica.impl.integrity import TamperDetected
from envreplica.impl.replica import SqliteReplica
from envreplica.impl.sealing import Sealer
from envreplica.impl.tables import _auth_mask, _parent_scope

from adapter_requests import SID, SID2, SID3, begin, commit, delivery, op, page, put, rec, serving_a_and_b, staged

KEY = os.urandom(32)  # a real, random key: nothing below may depend on the public test key
PROJECTS = ["p1", "p2"]
SECRETS = {"A": "secret-A-9f3c1e", "B": "secret-B-77aa02", "C": "secret-C-4d5e6f"}


def _req(driver, request: dict) -> dict:
    response = driver.handle({"id": 1, **request})
    return response


def ok(driver, request: dict):
    response = _req(driver, request)
    assert response["ok"] is True, response
    result = response["result"]
    if isinstance(result, dict) and result.get("ok") is False:
        raise AssertionError(f"refused: {result}")
    return result


@pytest.fixture
def live(tmp_path):
    """A replica serving p1 {A, B, C} and p2 {}, built by a snapshot and three deliveries."""
    driver = SqliteDriver("fixed", tmp_path / "r.db", master_key=KEY)
    for request in serving_a_and_b(SECRETS):
        ok(driver, request)
    ok(driver, delivery(rec("C", ref=staged(SID3)), sequence=3, version=3))
    assert served(driver) == {"A": SECRETS["A"], "B": SECRETS["B"], "C": SECRETS["C"]}
    yield driver
    driver.close()


def served(driver) -> dict | None:
    snap = driver.replica.read_snapshot(PROJECTS)
    if snap is None:
        return None
    return {e.state.key: e.value for p in snap.projects for e in p.entries if e.value is not None}


def rows(path: Path, table: str, where: str = "1", params=()) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE {where}", params)]
    finally:
        conn.close()


def tamper(path: Path, *statements) -> None:
    """Write the file as someone without the key would: any SQL, as a registered writer."""
    conn = sqlite3.connect(path, isolation_level=None)
    writer.register_writer(conn)
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        for sql, *params in statements:
            conn.execute(sql, *params)
        conn.execute("COMMIT")
    finally:
        conn.close()


def put_rows(table: str, saved: list[dict]):
    """Statements that write ``saved`` rows back as they were (INSERT OR REPLACE)."""
    out = []
    for r in saved:
        cols = list(r)
        out.append((f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [r[c] for c in cols]))
    return out


def assert_fails_closed(driver, *fragments: str) -> str:
    """The snapshot is refused, the adapter answers null, and the diagnostic names the row, never a value."""
    assert driver.replica.read_snapshot(PROJECTS) is None
    assert _req(driver, op("snapshot", projectIds=PROJECTS))["result"] is None
    why = driver.replica.snapshot_diagnostics(PROJECTS)
    problems = driver.replica.verify()
    assert why is not None and problems, (why, problems)
    for fragment in fragments:
        assert fragment in why, why
        assert any(fragment in p for p in problems), problems
    for secret in SECRETS.values():
        assert secret not in why and all(secret not in p for p in problems)
    with pytest.raises(TamperDetected):
        driver.replica.export_state()
    return why


# ---------------------------------------------------------------------------
# One case per tamper class
# ---------------------------------------------------------------------------


def test_a_key_rolled_back_to_an_older_copy_does_not_serve_a_deleted_secret(live):
    path = Path(live.db_path)
    old = (rows(path, "records", "key = 'A'"), rows(path, "record_values", "key = 'A'"))
    ok(live, delivery(rec("A", rev=2, gen=2, tomb=True), sequence=4, version=4))  # the cloud deletes A
    assert "A" not in served(live)
    tamper(path, *put_rows("records", old[0]), *put_rows("record_values", old[1]))
    assert_fails_closed(live, "projects row p1", "set of its records and values")


def test_a_deleted_live_record_is_detected(live):
    path = Path(live.db_path)
    tamper(path, ("DELETE FROM record_values WHERE key = 'B'",), ("DELETE FROM records WHERE key = 'B'",))
    assert_fails_closed(live, "projects row p1")


def test_an_inserted_live_record_is_detected(live):
    path = Path(live.db_path)
    old = (rows(path, "records", "key = 'C'"), rows(path, "record_values", "key = 'C'"))
    # A new snapshot without C: C leaves the live view.
    ok(live, begin("a2", projects=PROJECTS))
    ok(live, page([rec("A", ref=staged(SID)), rec("B", ref=staged(SID2))], attempt="a2", project="p1", version=4))
    ok(live, page([], attempt="a2", project="p2"))
    ok(live, commit("a2", sequence=3, versions=(("p1", 4), ("p2", 0))))
    assert set(served(live)) == {"A", "B"}
    tamper(path, *put_rows("records", old[0]), *put_rows("record_values", old[1]))  # C comes back
    assert_fails_closed(live, "projects row p1")


@pytest.mark.parametrize("edit", [
    "binding_json = '{\"kind\":\"withhold\",\"reason\":\"legal_hold\"}'",
    "binding_json = '{\"kind\":\"omit\"}'",
    "policy_epoch = 9",
])
def test_a_binding_or_epoch_edited_under_an_installed_value_is_detected(live, edit):
    tamper(Path(live.db_path), (f"UPDATE records SET {edit} WHERE key = 'A'",))
    assert_fails_closed(live, "records row p1/A", "does not verify")


def test_a_project_version_edit_is_detected(live):
    tamper(Path(live.db_path), ("UPDATE projects SET record_version = 7 WHERE project_id = 'p1'",))
    assert_fails_closed(live, "projects row p1", "does not verify")


def test_swapped_rows_are_detected(live):
    path = Path(live.db_path)
    a, b = rows(path, "record_values", "key = 'A'")[0], rows(path, "record_values", "key = 'B'")[0]
    tamper(path, ("UPDATE record_values SET value_enc = ?, value_ref_json = ?, tag = ? WHERE key = 'A'",
                  [b["value_enc"], b["value_ref_json"], b["tag"]]),
           ("UPDATE record_values SET value_enc = ?, value_ref_json = ?, tag = ? WHERE key = 'B'",
            [a["value_enc"], a["value_ref_json"], a["tag"]]))
    assert_fails_closed(live, "record_values row p1/A", "does not verify")


def test_an_authority_edit_is_detected_and_status_refuses(live):
    tamper(Path(live.db_path), ("UPDATE authority SET applied_sequence = 0",))
    assert_fails_closed(live, "authority row", "does not verify")
    assert _req(live, op("status"))["error"]["type"] == "corrupt"


def test_an_edited_receipt_answer_is_not_replayed(live):
    path = Path(live.db_path)
    tamper(path, ("UPDATE receipts SET record_version = 99 WHERE sequence = 2",))
    replay = _req(live, delivery(rec("B", ref=staged(SID2)), sequence=2, version=2))
    assert replay["ok"] is False and replay["error"]["type"] == "corrupt", replay
    assert "receipts row s1/2" in replay["error"]["message"]
    with pytest.raises(TamperDetected, match="receipts row s1/2"):
        live.replica.list_receipts()
    assert any("receipts row s1/2" in p for p in live.replica.verify())


def test_a_deleted_receipt_is_detected(live):
    tamper(Path(live.db_path), ("DELETE FROM receipts WHERE sequence = 1",))
    with pytest.raises(TamperDetected, match="receipts: the set of receipt rows"):
        live.replica.list_receipts()
    assert _req(live, op("receipts"))["error"]["type"] == "corrupt"
    replay = _req(live, delivery(rec("A", ref=staged(SID)), sequence=1, version=1))
    assert replay["error"]["type"] == "corrupt" and "receipts" in replay["error"]["message"], replay


def test_a_receipt_of_an_earlier_run_of_the_stream_does_not_verify(live):
    path = Path(live.db_path)
    old = rows(path, "receipts", "sequence = 1")
    ok(live, begin("a2", stream="s2", projects=PROJECTS))  # another stream: receipts dropped
    ok(live, begin("a3", stream="s1", projects=PROJECTS))  # s1 again: a new incarnation
    tamper(path, *put_rows("receipts", old))
    with pytest.raises(TamperDetected, match="receipts row s1/1"):
        live.replica.list_receipts()


def test_a_tampered_staged_row_is_never_promoted(live):
    path = Path(live.db_path)
    ok(live, begin("a2", projects=PROJECTS))
    ok(live, page([rec("A", ref=staged(SID))], attempt="a2", project="p1", version=4))
    ok(live, page([], attempt="a2", project="p2"))
    tamper(path, ("UPDATE stage_records SET policy_epoch = 1, listing_generation = 5 WHERE key = 'A'",))
    response = _req(live, commit("a2", sequence=3, versions=(("p1", 4), ("p2", 0))))
    assert response["error"]["type"] == "corrupt" and "stage_records row a2/p1/A" in response["error"]["message"]
    status = ok(live, op("status"))
    assert status["gateOpen"] is False and status["attemptId"] == "a2"  # nothing promoted, nothing opened


def test_a_tamper_is_never_laundered_by_later_writes(live):
    path = Path(live.db_path)
    old = (rows(path, "records", "key = 'A'"), rows(path, "record_values", "key = 'A'"))
    ok(live, delivery(rec("A", rev=2, gen=2, tomb=True), sequence=4, version=4))
    tamper(path, *put_rows("records", old[0]), *put_rows("record_values", old[1]))
    # Writes that touch the same project keep its digest honest: the extra row stays unaccounted.
    ok(live, delivery(rec("B", ref=staged(SID2), listing=1), sequence=5, version=5))
    assert_fails_closed(live, "projects row p1")
    # Re-staging copies only a verified live view: the begin fails, nothing is copied.
    response = _req(live, begin("a2", projects=PROJECTS))
    assert response["error"]["type"] == "corrupt" and "projects row p1" in response["error"]["message"]
    # Reopening (a restart, which closes the gate) does not bless the file either.
    ok(live, op("restart"))
    assert any("projects row p1" in p for p in live.replica.verify())


def test_a_sealed_value_edited_in_place_is_detected(live):
    path = Path(live.db_path)
    blob = rows(path, "record_values", "key = 'A'")[0]["value_enc"]
    flipped = blob[:-1] + bytes([blob[-1] ^ 1])
    tamper(path, ("UPDATE record_values SET value_enc = ? WHERE key = 'A'", [flipped]))
    assert_fails_closed(live, "record_values row p1/A")


@pytest.mark.parametrize("table, column, where", [
    ("record_values", "value_enc", "key = 'A'"),  # a sealed blob written back as text
    ("records", "binding_json", "key = 'B'"),  # a text column given bytes that are not UTF-8
])
def test_a_column_of_another_storage_class_is_tampering_not_a_disk_error(live, table, column, where):
    """Bytes that are not UTF-8 stored as TEXT make SQLite's driver fail the whole read: that names the row as
    tampered (TamperDetected), not the disk (ReplicaIOError)."""
    path = Path(live.db_path)
    tamper(path, (f"UPDATE {table} SET {column} = CAST(X'80FF00C3' AS TEXT) WHERE {where}",))
    assert rows_typeof(path, table, column, where) == "text"
    why = assert_fails_closed(live, f"{table} row p1/")
    assert column in why and "not UTF-8" in why


def rows_typeof(path: Path, table: str, column: str, where: str) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT typeof({column}) FROM {table} WHERE {where}").fetchone()[0]
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# Whole-file rollback: not seen from inside the file; seen with an anchor
# ---------------------------------------------------------------------------


def _copy_file(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite file (the backup API), as a backup tool takes it."""
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()


def test_whole_file_rollback_is_not_seen_without_an_anchor(live, tmp_path):
    path = Path(live.db_path)
    _copy_file(path, tmp_path / "older.db")
    ok(live, delivery(rec("A", rev=2, gen=2, tomb=True), sequence=4, version=4))
    live.close()
    _copy_file(tmp_path / "older.db", path)  # the whole file goes back, consistently
    reopened = SqliteReplica(path, sealer=Sealer(KEY), reader=None)
    try:
        # What docs/integrity.md states: without an anchor, the older copy is served.
        assert reopened.verify() == []
        assert reopened.read_snapshot(PROJECTS) is not None
    finally:
        reopened.close()


def test_whole_file_rollback_is_seen_with_an_anchor(tmp_path):
    path, anchor = tmp_path / "r.db", FileAnchor(tmp_path / "anchor")
    driver = SqliteDriver("fixed", path, master_key=KEY, anchor=anchor)
    ok(driver, put("A", staged(SID), value=SECRETS["A"]))
    ok(driver, begin(projects=PROJECTS))
    ok(driver, page([], project="p1"))
    ok(driver, page([], project="p2"))
    ok(driver, commit(versions=(("p1", 0), ("p2", 0))))
    _copy_file(path, tmp_path / "older.db")
    ok(driver, delivery(rec("A", ref=staged(SID)), sequence=1, version=1))
    driver.close()
    assert (tmp_path / "anchor").stat().st_mode & 0o777 == 0o600
    _copy_file(tmp_path / "older.db", path)
    with pytest.raises(TamperDetected, match="whole file was rolled back"):
        SqliteReplica(path, sealer=Sealer(KEY), reader=None, anchor=anchor)
    # The current file (not rolled back) opens with the same anchor.
    fresh = SqliteReplica(tmp_path / "other.db", sealer=Sealer(KEY), reader=None, anchor=FileAnchor(tmp_path / "a2"))
    fresh.close()


def test_a_running_replica_refuses_a_file_rolled_back_under_it(live, tmp_path):
    path = Path(live.db_path)
    _copy_file(path, tmp_path / "older.db")
    ok(live, delivery(rec("A", rev=2, gen=2, tomb=True), sequence=4, version=4))
    _copy_file(tmp_path / "older.db", path)  # behind the running process's back
    assert live.replica.read_snapshot(PROJECTS) is None
    assert "whole file was rolled back" in live.replica.snapshot_diagnostics(PROJECTS)


# ---------------------------------------------------------------------------
# Migration 1 -> 2 authenticates an existing replica
# ---------------------------------------------------------------------------


def _as_version_1(src: Path, dst: Path) -> None:
    """``dst``: the replica at ``src`` as envreplica wrote it at schema version 1 (no integrity columns)."""
    a = sqlite3.connect(src)
    b = sqlite3.connect(dst, isolation_level=None)
    writer.register_writer(b, 1)
    writer.create_tables(b, 1)
    b.execute("BEGIN")
    writer._install_contract(b, 1, 1)
    for table in schema.TABLES_V1:
        if table.name == "store_meta":
            continue
        cols = [c.name for c in table.c]
        for r in a.execute(f"SELECT {', '.join(cols)} FROM {table.name}"):
            b.execute(f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", r)
    b.execute("COMMIT")
    a.close()
    b.close()


def test_migrating_a_version_1_replica_authenticates_it(live, tmp_path):
    before = live.replica.read_snapshot(PROJECTS)
    live.close()
    old = tmp_path / "v1.db"
    _as_version_1(Path(live.db_path), old)
    with pytest.raises(writer.WriterVersionError, match="migrate"):
        SqliteReplica(old, sealer=Sealer(KEY), reader=None)
    with pytest.raises(writer.MigrationRefused, match="master key"):
        writer.migrate(old)
    ev = writer.migrate(old, master_key=KEY)
    assert (ev.status, ev.from_version, ev.to_version) == ("migrated", 1, schema.SCHEMA_VERSION)
    replica = SqliteReplica(old, sealer=Sealer(KEY), reader=None)
    try:
        assert replica.verify() == []
        assert replica.read_snapshot(PROJECTS) == before
    finally:
        replica.close()
    with pytest.raises(Exception, match="another master key"):
        SqliteReplica(old, sealer=Sealer(bytes(32)), reader=None)


# ---------------------------------------------------------------------------
# Nothing on disk in the clear
# ---------------------------------------------------------------------------


def test_no_file_the_replica_writes_holds_a_value_or_key_material(live, tmp_path):
    path = Path(live.db_path)
    live.close()
    writer.migrate(path)  # already at the version: writes nothing, but it is a command that takes the path
    reopened = SqliteReplica(path, sealer=Sealer(KEY), reader=None, anchor=FileAnchor(tmp_path / "anchor"))
    reopened.close()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"r.db", "r.db.lock", "anchor"}
    needles = [KEY, KEY.hex().encode(), KEY.hex().upper().encode()]
    for value in SECRETS.values():
        needles += [value.encode("utf-8"), value.encode("utf-16-le"), value.encode("utf-16-be")]
    for file in written:
        data = file.read_bytes()
        for needle in needles:
            assert needle not in data, f"{file.name} holds plaintext or key material"
        assert file.stat().st_mode & 0o077 == 0, f"{file.name} is readable by others"


# ---------------------------------------------------------------------------
# Defence in depth: fixed re-judges what it serves; seed stays the seed
# ---------------------------------------------------------------------------


def _rewrite_with_a_valid_tag(path: Path, key: str, **columns) -> None:
    """Change a live record as only the key holder could (a writer's bug): its tag and every digest stay valid."""
    auth_rows, digests = Sealer(KEY).rows, I
    cols = {t: schema.TAGGED[t] for t in ("records", "projects", "authority")}

    def element(table: str, row: dict) -> int:
        return auth_rows.seal_row(table, tuple(row[c] for c in cols[table]))[1]

    old = rows(path, "records", "key = ?", (key,))[0]
    new = {**old, **columns}
    new["tag"] = auth_rows.seal_row("records", tuple(new[c] for c in cols["records"]))[0]
    project = rows(path, "projects", "project_id = ?", (old["project_id"],))[0]
    old_project = element("projects", project)
    scope = _parent_scope("projects", {"project_id": old["project_id"]})
    digest = auth_rows.load_digest(project["rows_digest"], scope, project["written_at"], "projects")
    digest = digests.add(digests.sub(digest, element("records", old)), element("records", new))
    project["rows_digest"] = auth_rows.store_digest(digest, scope, project["written_at"])
    project["tag"] = auth_rows.seal_row("projects", tuple(project[c] for c in cols["projects"]))[0]
    authority = rows(path, "authority")[0]
    mask = _auth_mask(auth_rows, "live", authority["write_counter"])
    live = digests.unmasked(authority["live_digest"], mask, "authority")
    live = digests.add(digests.sub(live, old_project), element("projects", project))
    authority["live_digest"] = digests.masked(live, mask)
    authority["tag"] = auth_rows.seal_row("authority", tuple(authority[c] for c in cols["authority"]))[0]
    tamper(path, *put_rows("records", [new]), *put_rows("projects", [project]), *put_rows("authority", [authority]))


@pytest.mark.parametrize("variant, served", [("fixed", False), ("seed", True)])
def test_fixed_rejudges_an_installed_record_its_binding_withholds(tmp_path, variant, served):
    driver = SqliteDriver(variant, tmp_path / "r.db", master_key=KEY)
    try:
        ok(driver, put("A", staged(SID), value=SECRETS["A"]))
        ok(driver, begin(projects=["p1"]))
        ok(driver, page([], project="p1"))
        ok(driver, commit(versions=(("p1", 0),)))
        ok(driver, delivery(rec("A", ref=staged(SID)), sequence=1, version=1))
        _rewrite_with_a_valid_tag(tmp_path / "r.db", "A", binding_json='{"kind":"withhold","reason":"legal_hold"}')
        assert driver.replica.verify() == []  # every tag and digest is valid: only the re-judge can see it
        snapshot = driver.replica.read_snapshot(["p1"])
        assert (snapshot is not None) == served
        if not served:
            why = driver.replica.snapshot_diagnostics(["p1"])
            assert "records row p1/A is installed, but its binding or policy epoch withholds it" in why
            assert SECRETS["A"] not in why
    finally:
        driver.close()


def test_ssm_refuses_the_public_test_key_in_reset(tmp_path):
    from envreplica.conformance.drivers import TEST_MASTER_KEY_HEX

    driver = SqliteDriver("fixed", tmp_path / "r.db", master_key=KEY, forbid_test_key=True)
    try:
        response = _req(driver, {"op": "reset", "config": {"masterKeyHex": TEST_MASTER_KEY_HEX}})
        assert response["error"]["type"] == "invalid" and "public test key" in response["error"]["message"]
        assert TEST_MASTER_KEY_HEX not in response["error"]["message"]
        assert ok(driver, {"op": "reset", "config": {"masterKeyHex": os.urandom(32).hex()}}) == {}
    finally:
        driver.close()
    with pytest.raises(ValueError, match="public test key"):
        SqliteDriver("fixed", tmp_path / "s.db", master_key=bytes(range(32)), forbid_test_key=True)
