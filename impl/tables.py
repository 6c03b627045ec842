"""One transaction's view of the replica's tables, every row authenticated (``impl.integrity``).

What it holds: ``Tables``, the table operations of one transaction (the
seed's ``tx`` helpers: ``authorityRow``, ``liveRecord``, ``putStageRecord``,
``resetStagedProject``, ``saveReceipt``'s insert, ...), and the conversions
between rows and values (``BindingState``, ``Materialization`` and the row
types of ``impl.rows``), with the statements they run. Three questions the
seed answers by comparing lists of rows are answered here by one SQL query
each, over rows this transaction has verified first:
``live_matches_staged`` (a complete page at the live record version:
the live records and the present staged ones hold the same states),
``stage_matches_versions`` (a commit: the attempt's staged projects are
exactly the versions it names, each complete) and ``unpromotable_record``
(a commit: the first present staged record whose value row contradicts its
materialization).

Integrity, as ``impl.integrity`` describes it:

* every row read is verified (its tag) before it is parsed; a row that does
  not verify raises ``TamperDetected`` naming its table and primary key;
* every row written is tagged, and the set digest of its parent (the
  ``projects`` or ``stage_projects`` row, or the authority row) moves by the
  difference of the old and new row's elements. The parents and the authority
  row are written once, by ``flush``, just before the transaction commits:
  the write counter goes up by one, every stored digest is re-masked under it;
* a row's old element comes from the verified row, never from trust: a write
  over a row that does not verify fails, so a tamper is never laundered;
* ``verified_*`` read a whole set (every tag, and the sum against the
  parent's digest). They run where a set is served or copied: a snapshot, a
  commit's promotion, a page that re-stages a project, the receipts list,
  the read-back and ``verify``.

Rows are parsed through the wire parsers of ``spec.wire``; a row that does not
parse is ``CorruptReplica`` naming its table and key, never a value.

Across transactions only what a stored row *means* is remembered (that its
tag verified, in ``RowAuthenticator``; how it parses, here): the same bytes
read again are not re-verified nor re-parsed. Rows themselves are read again
in every transaction, since another process may write between two.

Leaves out on purpose: the protocol decisions (``impl.decisions``,
``impl.replica``): a query here answers what the tables hold, never what to
do about it.
"""

from __future__ import annotations

import json
import sqlite3
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from typing import (TYPE_CHECKING, Any, Generic, Iterable, Literal, Mapping, Optional, Protocol, TypeVar, Union, cast,
                    overload)


from envreplica.impl import integrity as I
from envreplica.impl import schema as S
from envreplica.impl.integrity import RowAuthenticator, TamperDetected
from envreplica.impl.rows import AuthorityRow, LiveRecord, StagedProject, StagedRecord, StoredReceipt
from envreplica.spec import wire
from envreplica.spec.domain import (
    BindingState,
    CorruptReplica,
    Head,
    InvalidFrame,
    Materialization,
    MatKind,
    ProjectVersion,
    RefusalCode,
    ValueRef,
)

if TYPE_CHECKING:
    from sqlalchemy import Table

__all__ = ["AUTHORITY_ID", "Tables", "VerifiedProject", "json_text", "ref_json", "value_ref_of_row",
           "record_of_row", "receipt_of_row", "count_of", "where_text"]

AUTHORITY_ID = "replica"

_T = S.TAGGED
_AUTH_SCOPE = b"authority"  # the authority row's three digests are masked by one PRF output, cut in three
_AUTH_DIGEST_COLUMN = {"live": "live_digest", "stage": "stage_digest", "receipts": "receipts_digest"}
_AUTH_MASK_INDEX = {"live": 0, "stage": 1, "receipts": 2}

#: A column value as pysqlite reads it from the file: whatever the file holds (it is checked where it is parsed).
Cell = Any
#: A row's columns by name (read, or to be written).
Columns = dict[str, Any]
#: A row named for a message (its table's primary key values).
Ident = tuple[object, ...]


class StoredRow(Protocol):
    """A row as read: an instance of its table's ``ROW_TYPES`` namedtuple, built from the schema at import.

    Its fields are the table's columns, known only at run time: read by name (``row.key``), by position
    (``row[-1]`` is the tag), or all at once (``_asdict``).
    """

    def __getattr__(self, column: str) -> Cell: ...

    @overload
    def __getitem__(self, index: int) -> Cell: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Cell, ...]: ...

    def _asdict(self) -> Columns: ...


class _RowType(Protocol):
    """A ``ROW_TYPES`` namedtuple class: ``_make`` builds a row from the values of a ``SELECT`` of its columns."""

    def _make(self, iterable: Iterable[Cell]) -> StoredRow: ...


def _auth_mask(rows: RowAuthenticator, name: str, counter: int) -> int:
    return rows.masks(_AUTH_SCOPE, counter, 3)[_AUTH_MASK_INDEX[name]]


# ---------------------------------------------------------------------------
# Rows <-> values
# ---------------------------------------------------------------------------


def json_text(value: Any) -> str:
    """``JSON.stringify`` of an encoded wire value (insertion order, no whitespace)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@lru_cache(maxsize=1 << 14)
def ref_json(ref: ValueRef) -> str:
    """The value reference's column text (``JSON.stringify`` of its wire encoding); memoised (refs are values)."""
    return json_text(wire.encode(ref))


def where_text(table: str, ident: Ident) -> str:
    return f"{table} {'/'.join(str(part) for part in ident)}"


def count_of(value: Any) -> bool:
    return type(value) is int and 0 <= value <= wire.MAX_COUNT


def _state_columns(state: BindingState) -> Columns:
    ref = state.head.value_ref
    return {
        "revision": state.head.revision,
        "generation": state.head.generation,
        "tombstone": state.head.tombstone,
        "value_ref_json": None if ref is None else ref_json(ref),
        "binding_json": None if state.binding is None else json_text(wire.encode(state.binding)),
        "policy_epoch": state.policy_epoch,
        "listing_generation": state.listing_generation,
    }


def _mat_columns(mat: Materialization) -> Columns:
    return {
        "materialization": mat.kind.value,
        "materialization_reason": None if mat.kind is MatKind.INSTALLED else mat.reason,
    }


def _bool(value: Any) -> Any:
    """A Boolean column as read through pysqlite (0 or 1) as a bool; anything else as it is (it is then invalid)."""
    return bool(value) if type(value) is int and value in (0, 1) else value


def _parse_json_column(text: Cell, what: str, table: str, ident: Ident) -> Any:
    if text is None:
        return None
    if not isinstance(text, str):
        raise CorruptReplica(f"stored {what} is malformed ({where_text(table, ident)})")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise CorruptReplica(f"stored {what} is malformed ({where_text(table, ident)})") from None


def record_of_row(row: Union[StoredRow, _RecordFields], table: str,
                  ident: Ident) -> tuple[BindingState, Materialization]:
    """``rowState`` and ``rowMaterialization``: the record of a row, validated by the wire parsers."""
    ref = _parse_json_column(row.value_ref_json, "replica value reference", table, ident)
    binding = _parse_json_column(row.binding_json, "replica binding", table, ident)
    doc = {
        "key": row.key,
        "head": {"revision": row.revision, "generation": row.generation, "tombstone": _bool(row.tombstone),
                 "valueRef": ref},
        "binding": binding,
        "policyEpoch": row.policy_epoch,
        "listingGeneration": row.listing_generation,
    }
    try:
        state = wire.parse_binding_state(doc)
    except InvalidFrame:
        raise CorruptReplica(f"stored replica record is invalid ({where_text(table, ident)})") from None
    mat_doc = (
        {"kind": "installed"}
        if row.materialization == "installed" and row.materialization_reason is None
        else {"kind": row.materialization, "reason": row.materialization_reason}
    )
    try:
        mat = wire.parse_materialization(mat_doc)
    except InvalidFrame:
        raise CorruptReplica(f"stored replica materialization is invalid ({where_text(table, ident)})") from None
    return state, mat


#: The fields ``record_of_row`` reads, as a hashable value (the key of the parse memo).
_RecordFields = namedtuple("_RecordFields", ("key", "revision", "generation", "tombstone", "value_ref_json",
                                             "binding_json", "policy_epoch", "listing_generation", "materialization",
                                             "materialization_reason"))
_RECORD_FIELDS = _RecordFields._fields
_record_of_fields = lru_cache(maxsize=20_000)(record_of_row)


def parsed_record(row: StoredRow, table: str, ident: Ident) -> tuple[BindingState, Materialization]:
    """``record_of_row``, remembered: the same stored fields parse to the same record (a failure is not kept)."""
    return _record_of_fields(_RecordFields._make([getattr(row, f) for f in _RECORD_FIELDS]), table, ident)


def value_ref_of_row(row: StoredRow, table: str, ident: Ident) -> ValueRef:
    doc = _parse_json_column(row.value_ref_json, "replica value reference", table, ident)
    try:
        return wire.parse_value_ref(doc)
    except InvalidFrame:
        raise CorruptReplica(f"stored replica value reference is invalid ({where_text(table, ident)})") from None


def _parse_code(code: Cell, ident: Ident) -> RefusalCode:
    try:
        return RefusalCode(code)
    except ValueError:
        raise CorruptReplica(f"stored replica receipt code is invalid ({where_text('receipts', ident)})") from None


def receipt_of_row(row: StoredRow) -> StoredReceipt:
    """A receipt row, parsed: its MAC, outcome, code, result and record version."""
    return _receipt_of_columns(row.stream_id, row.sequence, row.request_mac, row.ok, row.code, row.result_json,
                               row.record_version)


@lru_cache(maxsize=4096)
def _receipt_of_columns(stream_id: Cell, sequence: Cell, request_mac: Cell, ok: Cell, code: Cell, result_json: Cell,
                        record_version: Cell) -> StoredReceipt:
    """``receipt_of_row`` of these column values: a pure parse (the same columns give the same receipt),
    memoised because receipts are read again on every readback; a CorruptReplica is not cached."""
    ident = (stream_id, sequence)
    code = None if code is None else _parse_code(code, ident)
    result = None
    if result_json is not None:
        doc = _parse_json_column(result_json, "replica delivery result", "receipts", ident)
        try:
            result = wire.parse_record_result(doc)
        except InvalidFrame:
            raise CorruptReplica("stored replica delivery result is invalid") from None
    return StoredReceipt(request_mac, bool(ok), code, result, record_version)


_AUTHORITY_FIELDS = ("activated", "gate_open", "stream_id", "applied_sequence", "attempt_id", "org_id",
                     "policy_epochs_json")


def _authority_of(cols: Columns) -> AuthorityRow:
    """``authorityRow``, parsed; a row whose columns contradict each other is corrupt."""
    return _authority_of_fields(tuple(cols[f] for f in _AUTHORITY_FIELDS))


@lru_cache(maxsize=1024)
def _authority_of_fields(fields: tuple[Cell, ...]) -> AuthorityRow:
    cols = dict(zip(_AUTHORITY_FIELDS, fields))
    text = cols["policy_epochs_json"]
    try:
        parsed = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        raise CorruptReplica("stored replica policy epochs are malformed") from None
    try:
        epochs = wire.parse_policy_epochs(parsed)
    except InvalidFrame:
        raise CorruptReplica("stored replica policy epochs are invalid") from None
    activated, gate_open, attempt = bool(cols["activated"]), bool(cols["gate_open"]), cols["attempt_id"]
    if attempt is not None and (not isinstance(attempt, str) or wire.ID.regex.fullmatch(attempt) is None):
        raise CorruptReplica("stored replica attempt is invalid")
    # Only three combinations are written: never activated (closed, no attempt), open without an
    # attempt, and closed with or without one.
    if (not activated and (gate_open or attempt is not None)) or (gate_open and attempt is not None):
        raise CorruptReplica("stored replica gate is invalid")
    stream, sequence, org = cols["stream_id"], cols["applied_sequence"], cols["org_id"]
    if activated:
        if not isinstance(stream, str) or wire.ID.regex.fullmatch(stream) is None or not count_of(sequence):
            raise CorruptReplica("stored replica delivery cursor is invalid")
        if not isinstance(org, str) or wire.SEGMENT.regex.fullmatch(org) is None:
            raise CorruptReplica("stored replica organization is invalid")
    return AuthorityRow(activated, gate_open, attempt, stream, sequence, org, epochs)


def _stage_project_of(cols: Columns, ident: Ident) -> StagedProject:
    rv, last_key = cols["record_version"], cols["last_key"]
    if (rv is not None and not count_of(rv)) or (
        last_key is not None and (not isinstance(last_key, str) or wire.KEY.regex.fullmatch(last_key) is None)
    ):
        raise CorruptReplica(f"stored replica staged project is invalid ({where_text('stage_projects', ident)})")
    return StagedProject(rv, last_key, bool(cols["complete"]))


def initial_authority_columns() -> Columns:
    """The authority row of a replica that was never activated (digests and tag added by ``Tables``)."""
    return {"id": AUTHORITY_ID, "activated": False, "gate_open": False, "stream_id": None, "applied_sequence": 0,
            "attempt_id": None, "org_id": None, "policy_epochs_json": "[]", "write_counter": 0, "stream_epoch": 0}


# ---------------------------------------------------------------------------
# Statements (written once from the schema, run on the pysqlite connection)
# ---------------------------------------------------------------------------


#: The row type of each table: a namedtuple of its columns, in schema order (``tag`` is last).
#: (The checker cannot read columns taken from the schema: each class is typed by the rows its ``_make`` builds.)
ROW_TYPES: dict[str, _RowType] = {t.name: cast(_RowType, namedtuple(f"{t.name}_row", [c.name for c in t.c]))
                                  for t in S.TABLES}


@dataclass(frozen=True)
class _Q:
    """One statement, written once from the schema: its SQL, its row type, its parameter columns."""

    sql: str  # with ``?`` parameters
    table: str  # rows come back as ``ROW_TYPES[table]``
    columns: tuple[str, ...] = ()  # a write's parameters, in order, taken from a dict of columns


def undecodable_text(db: sqlite3.Connection, table: str, error: sqlite3.OperationalError) -> Exception:
    """What a read that SQLite could not hand back as text means: ``TamperDetected`` naming the row.

    Every column envreplica writes as TEXT holds UTF-8; a value written back into one as bytes that are not
    UTF-8 (a blob of another storage class, say) makes pysqlite fail the whole read ("Could not decode to
    UTF-8"). That is an edit made outside envreplica, not a failing disk: the table is scanned with its text
    read as bytes to name the row (by primary key, never a value). Any other error is returned as it was.
    """
    if "decode" not in str(error).lower():
        return error
    spec = next(t for t in S.TABLES if t.name == table)
    keys = [c.name for c in spec.c if c.primary_key] or ["rowid"]
    columns = [c.name for c in spec.c]
    listed = ", ".join([f"CAST({name} AS BLOB)" for name in keys]
                       + [f"typeof({name}), CAST({name} AS BLOB)" for name in columns])
    for values in db.execute(f"SELECT {listed} FROM {table}").fetchall():
        key, cells = values[:len(keys)], values[len(keys):]
        for i, name in enumerate(columns):
            kind, cell = cells[2 * i], cells[2 * i + 1]
            if kind == "text" and isinstance(cell, bytes):
                try:
                    cell.decode("utf-8")
                except UnicodeDecodeError:
                    shown = "/".join(k.decode("utf-8", "backslashreplace") if isinstance(k, bytes) else str(k)
                                     for k in key)
                    return TamperDetected(f"{table} row {shown}: column {name} holds text that is not UTF-8 "
                                          f"(written outside envreplica); the replica serves nothing until it is "
                                          f"replaced")
    return TamperDetected(f"{table}: a column holds text that is not UTF-8 (written outside envreplica); the "
                          f"replica serves nothing until it is replaced")


def _names(table: Table) -> list[str]:
    return [c.name for c in table.c]


def _select(table: Table, *keys: str) -> _Q:
    where = " AND ".join(f"{k} = ?" for k in keys) or "1"
    return _Q(f"SELECT {', '.join(_names(table))} FROM {table.name} WHERE {where}", table.name)


def _insert(table: Table) -> _Q:
    cols = _names(table)
    return _Q(f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
              table.name, tuple(cols))


def _upsert(table: Table, keys: tuple[str, ...]) -> _Q:
    """``INSERT ... ON CONFLICT (keys) DO UPDATE SET <every other column> = excluded.<column>``."""
    cols = _names(table)
    sets = ", ".join(f"{c} = excluded.{c}" for c in cols if c not in keys)
    return _Q(f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
              f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}", table.name, tuple(cols))


def _delete(table: Table, *keys: str, returning: bool = False) -> _Q:
    where = " AND ".join(f"{k} = ?" for k in keys) or "1"
    tail = f" RETURNING {', '.join(_names(table))}" if returning else ""
    return _Q(f"DELETE FROM {table.name} WHERE {where}{tail}", table.name)


def _update_authority() -> _Q:
    cols = [c for c in _names(S.authority) if c != "id"]
    return _Q(f"UPDATE authority SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = '{AUTHORITY_ID}'",
              "authority", tuple(cols))


class _Sql:
    """The replica's statements, written once from ``impl.schema`` and run on the DBAPI connection.

    The schema stays declared in SQLAlchemy; the hot path skips its per-statement
    compile-and-dispatch (about 13 us a statement here, against 3 us through
    pysqlite), inside the transactions ``impl.engine`` begins and ends.
    """

    authority = _select(S.authority, "id")
    write_authority = _update_authority()
    insert_authority = _insert(S.authority)

    project = _select(S.projects, "project_id")
    projects = _select(S.projects)
    put_project = _upsert(S.projects, ("project_id",))

    live_record = _select(S.records, "project_id", "key")
    live_records = _select(S.records, "project_id")
    put_live_record = _upsert(S.records, ("project_id", "key"))
    live_value = _select(S.values, "project_id", "key")
    live_values = _select(S.values, "project_id")
    delete_live_value = _delete(S.values, "project_id", "key", returning=True)
    put_live_value = _upsert(S.values, ("project_id", "key"))

    stage_project = _select(S.stage_projects, "attempt_id", "project_id")
    stage_projects = _select(S.stage_projects)
    put_stage_project = _upsert(S.stage_projects, ("attempt_id", "project_id"))
    stage_record = _select(S.stage_records, "attempt_id", "project_id", "key")
    stage_records_of = _select(S.stage_records, "attempt_id", "project_id")
    put_stage_record = _upsert(S.stage_records, ("attempt_id", "project_id", "key"))
    stage_value = _select(S.stage_values, "attempt_id", "project_id", "key")
    stage_values_of = _select(S.stage_values, "attempt_id", "project_id")
    delete_stage_value = _delete(S.stage_values, "attempt_id", "project_id", "key", returning=True)
    put_stage_value = _upsert(S.stage_values, ("attempt_id", "project_id", "key"))
    delete_stage_project_values = _delete(S.stage_values, "attempt_id", "project_id")
    delete_stage_project_records = _delete(S.stage_records, "attempt_id", "project_id")

    receipt = _select(S.receipts, "stream_id", "sequence")
    receipts = _select(S.receipts)
    put_receipt = _insert(S.receipts)

    #: The upsert of each kind of parent row.
    put_parent = {"projects": put_project, "stage_projects": put_stage_project}

    #: Whole-table deletes, children first.
    clear_live = tuple(_delete(t) for t in (S.values, S.records, S.projects))
    clear_stage = tuple(_delete(t) for t in (S.stage_values, S.stage_records, S.stage_projects))
    clear_receipts = (_delete(S.receipts),)


_STATE_COLUMNS = "key, revision, generation, tombstone, value_ref_json, binding_json, policy_epoch, listing_generation"

#: Rows of one side with no equal row on the other, both ways: 0 when the states are the same.
_SAME_STATES_SQL = f"""
SELECT COUNT(*) FROM (
  SELECT * FROM (SELECT {_STATE_COLUMNS} FROM records WHERE project_id = ?1
                 EXCEPT SELECT {_STATE_COLUMNS} FROM stage_records WHERE attempt_id = ?2 AND project_id = ?3 AND present)
  UNION ALL
  SELECT * FROM (SELECT {_STATE_COLUMNS} FROM stage_records WHERE attempt_id = ?2 AND project_id = ?3 AND present
                 EXCEPT SELECT {_STATE_COLUMNS} FROM records WHERE project_id = ?1)
)"""

#: As many staged projects as asked, and every (project, version) asked is a complete staged project.
_STAGE_VERSIONS_SQL = """
WITH asked(project_id, record_version) AS (
  SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1))
SELECT (SELECT COUNT(*) FROM stage_projects WHERE attempt_id = ?2) = (SELECT COUNT(*) FROM asked)
   AND NOT EXISTS (SELECT project_id, record_version FROM asked
                   EXCEPT
                   SELECT project_id, record_version FROM stage_projects
                   WHERE attempt_id = ?3 AND complete AND record_version IS NOT NULL)"""

#: The first present staged record whose value row contradicts its materialization.
_UNPROMOTABLE_SQL = """
SELECT r.project_id, r.key, r.materialization = 'installed'
FROM stage_records AS r
LEFT JOIN stage_values AS v
  ON v.attempt_id = r.attempt_id AND v.project_id = r.project_id AND v.key = r.key
WHERE r.attempt_id = ?1 AND r.present AND (
  CASE WHEN r.materialization = 'installed'
       THEN v.key IS NULL OR v.revision IS NOT r.revision OR v.generation IS NOT r.generation
            OR v.value_ref_json IS NOT r.value_ref_json
       ELSE v.key IS NOT NULL END)
ORDER BY r.project_id, r.key
LIMIT 1"""


#: The record type of a view: ``LiveRecord`` (``LIVE``) or ``StagedRecord`` (``STAGE``).
_R = TypeVar("_R", LiveRecord, StagedRecord)


@dataclass(frozen=True)
class _View(Generic[_R]):
    """The live or the staged view: its tables, the key of its parent rows, its statements."""

    records: str  # the table of its records
    values: str  # the table of its values
    parent: str  # the table of its parent rows (``projects`` or ``stage_projects``)
    keys: tuple[str, ...]  # the columns naming a parent row
    record: _Q
    records_of: _Q
    put_record: _Q
    value: _Q
    values_of: _Q
    put_value: _Q
    delete_value: _Q


LIVE: _View[LiveRecord] = _View(
    "records", "record_values", "projects", ("project_id",), _Sql.live_record, _Sql.live_records,
    _Sql.put_live_record, _Sql.live_value, _Sql.live_values, _Sql.put_live_value, _Sql.delete_live_value)
STAGE: _View[StagedRecord] = _View(
    "stage_records", "stage_values", "stage_projects", ("attempt_id", "project_id"), _Sql.stage_record,
    _Sql.stage_records_of, _Sql.put_stage_record, _Sql.stage_value, _Sql.stage_values_of,
    _Sql.put_stage_value, _Sql.delete_stage_value)


# ---------------------------------------------------------------------------
# Parents: a projects / stage_projects row and the digest of its rows
# ---------------------------------------------------------------------------


class _Parent:
    """A ``projects`` or ``stage_projects`` row as this transaction sees it."""

    __slots__ = ("cols", "digest", "counted", "dirty")

    def __init__(self, cols: Columns, digest: int, counted: Optional[int]) -> None:
        self.cols = cols  # its columns but the digest, counter and tag
        self.digest = digest  # the digest of its rows (unmasked)
        self.counted = counted  # the element the authority's digest counts for it (None: not yet)
        self.dirty = False  # to be written by flush


@dataclass(frozen=True, slots=True)
class VerifiedProject(Generic[_R]):
    """A parent and its rows, each verified and their sum checked against the parent's digest."""

    records: tuple[tuple[str, _R], ...]  # (key, LiveRecord | StagedRecord) sorted by key
    values: dict[str, StoredRow]  # key -> the value row (as read)


# ---------------------------------------------------------------------------
# The tables of one transaction
# ---------------------------------------------------------------------------


class Tables:
    """The table operations of one transaction, authenticated.

    ``flush`` must run before a write transaction commits (``SqliteReplica``
    does it); a read transaction never writes.
    """

    __slots__ = ("db", "rows", "notify", "_auth_cols", "_auth", "_digests", "_new_stream", "_projects", "_stage",
                 "_elements", "_dirty")

    def __init__(self, db: sqlite3.Connection, rows: RowAuthenticator) -> None:
        self.db = db  # pysqlite, inside the transaction ``impl.engine`` began (it yields the driver's connection)
        self.rows = rows
        self.notify = False  # the authority row or the live view changed
        self._auth_cols: Columns = {}  # the authority row's columns but digests and tag (once ``_auth`` is loaded)
        self._auth: Optional[AuthorityRow] = None
        self._digests: dict[str, int] = {}  # the authority row's live / stage / receipts digests, unmasked
        self._new_stream = False  # receipts were cleared: a new stream incarnation
        self._projects: dict[str, Optional[_Parent]] = {}
        self._stage: dict[tuple[str, str], Optional[_Parent]] = {}
        # (table, *pk) -> element of the stored row (None: absent)
        self._elements: dict[tuple[str, ...], Optional[int]] = {}
        self._dirty = False  # something was written

    # -- plumbing -----------------------------------------------------------

    def _one(self, q: _Q, *params: object) -> Optional[StoredRow]:
        try:
            row = self.db.execute(q.sql, params).fetchone()
        except sqlite3.OperationalError as error:
            raise undecodable_text(self.db, q.table, error) from None
        return None if row is None else ROW_TYPES[q.table]._make(row)

    def _all(self, q: _Q, *params: object) -> list[StoredRow]:
        make = ROW_TYPES[q.table]._make
        try:
            rows = self.db.execute(q.sql, params).fetchall()
        except sqlite3.OperationalError as error:
            raise undecodable_text(self.db, q.table, error) from None
        return [make(r) for r in rows]

    def _run(self, q: _Q, *params: object) -> None:
        self.db.execute(q.sql, params)

    def _write(self, q: _Q, cols: Columns) -> None:
        self.db.execute(q.sql, tuple([cols[c] for c in q.columns]))

    def _open(self, table: str, row: StoredRow, ident: Ident, extra: tuple[object, ...] = ()) -> int:
        """The element of a row read (its columns, ``tag`` last), verified."""
        return self.rows.open_row(table, row[:-1] + extra, row[-1], ident)

    def _seal(self, table: str, cols: Columns, extra: tuple[object, ...] = ()) -> int:
        """Add the tag to ``cols`` (a full row); return the row's element."""
        tag, element = self.rows.seal_row(table, tuple([cols[c] for c in _T[table]]) + extra)
        cols["tag"] = tag
        return element

    # -- the authority row --------------------------------------------------

    def _load_authority(self) -> AuthorityRow:
        row = self._one(_Sql.authority, AUTHORITY_ID)
        if row is None:
            raise CorruptReplica("project environment replica authority row is missing")
        self._open("authority", row, ("replica",))
        cols = row._asdict()
        self._digests = {name: I.unmasked(cols.pop(column), _auth_mask(self.rows, name, cols["write_counter"]),
                                          "authority row")
                         for name, column in _AUTH_DIGEST_COLUMN.items()}
        cols.pop("tag")
        self._auth_cols = cols
        self._auth = _authority_of(cols)
        return self._auth

    def authority(self) -> AuthorityRow:
        """``authorityRow``: the verified authority row, parsed."""
        if self._auth is None:
            return self._load_authority()
        return self._auth

    @property
    def write_counter(self) -> int:
        """Committed write transactions of this file, as of this transaction's start."""
        self.authority()
        counter: int = self._auth_cols["write_counter"]  # an int, as this code wrote it (its tag verified)
        return counter

    def _digest(self, name: str) -> int:
        """The authority row's digest ``name`` (``live``, ``stage`` or ``receipts``), unmasked."""
        self.authority()
        return self._digests[name]

    def _move_digest(self, name: str, old: Optional[int], new: Optional[int]) -> None:
        digest = self._digest(name)
        if old is not None:
            digest = I.sub(digest, old)
        if new is not None:
            digest = I.add(digest, new)
        self._digests[name] = digest
        self._dirty = True

    def _clear(self, statements: tuple[_Q, ...], digest: str, tables: tuple[str, ...]) -> None:
        """Delete every row of a view (children first): its set digest becomes the empty set's."""
        for q in statements:
            self._run(q)
        self.authority()  # loaded before its digest is replaced (flush rewrites the row)
        self._digests[digest] = I.ZERO_DIGEST
        self._elements = {k: v for k, v in self._elements.items() if k[0] not in tables}
        self._dirty = True

    def set_authority(self, **columns: Any) -> None:
        self.authority()
        self._auth_cols.update(columns)
        self._auth = _authority_of(self._auth_cols)
        self._dirty = True
        self.notify = True

    @property
    def stream_epoch(self) -> int:
        self.authority()
        epoch: int = self._auth_cols["stream_epoch"]  # an int, as this code wrote it (its tag verified)
        return epoch

    # -- flush: parents and the authority row, once, before commit ----------

    def flush(self) -> bool:
        """Write the changed parents and the authority row under the next write counter.

        Returns whether anything was written (the counter moved).
        """
        if not self._dirty:
            return False
        self.authority()
        counter = self._auth_cols["write_counter"] + 1
        for project, parent in self._projects.items():
            if parent is not None and parent.dirty:
                element = self._write_parent("projects", {"project_id": project}, parent, counter)
                self._move_digest("live", parent.counted, element)
                parent.counted, parent.dirty = element, False
        for (attempt, project), parent in self._stage.items():
            if parent is not None and parent.dirty:
                element = self._write_parent("stage_projects", {"attempt_id": attempt, "project_id": project},
                                             parent, counter)
                self._move_digest("stage", parent.counted, element)
                parent.counted, parent.dirty = element, False
        cols = dict(self._auth_cols)
        cols["write_counter"] = counter
        if self._new_stream:
            cols["stream_epoch"] = counter
        for name, column in _AUTH_DIGEST_COLUMN.items():
            cols[column] = I.masked(self._digests[name], _auth_mask(self.rows, name, counter))
        self._seal("authority", cols)
        self._write(_Sql.write_authority, cols)
        self._auth_cols["write_counter"] = counter
        self._auth_cols["stream_epoch"] = cols["stream_epoch"]
        self._new_stream = self._dirty = False
        return True

    def _write_parent(self, table: str, key: dict[str, str], parent: _Parent, counter: int) -> int:
        scope = _parent_scope(table, key)
        cols = {**key, **parent.cols, "rows_digest": self.rows.store_digest(parent.digest, scope, counter),
                "written_at": counter}
        element = self._seal(table, cols)
        self._write(_Sql.put_parent[table], cols)
        return element

    def insert_initial_authority(self, counter: int = 0) -> None:
        """Create the authority row of a replica that was never activated (empty digests) at ``counter``."""
        cols = {**initial_authority_columns(), "write_counter": counter}
        for name, column in _AUTH_DIGEST_COLUMN.items():
            cols[column] = I.masked(I.ZERO_DIGEST, _auth_mask(self.rows, name, cols["write_counter"]))
        self._seal("authority", cols)
        self._write(_Sql.insert_authority, cols)

    # -- parents ------------------------------------------------------------

    def _parent_of_row(self, table: str, row: StoredRow, key: dict[str, str]) -> _Parent:
        ident = tuple(key.values())
        element = self._open(table, row, ident)
        cols = {c: getattr(row, c) for c in _T[table] if c not in key and c not in ("rows_digest", "written_at")}
        where = f"{table} row {'/'.join(map(str, ident))}"
        digest = self.rows.load_digest(row.rows_digest, _parent_scope(table, key), row.written_at, where)
        return _Parent(cols, digest, element)

    def _project(self, project: str) -> Optional[_Parent]:
        if project not in self._projects:
            row = self._one(_Sql.project, project)
            self._projects[project] = None if row is None else self._parent_of_row(
                "projects", row, {"project_id": project})
        return self._projects[project]

    def _live_parent(self, project: str) -> _Parent:
        parent = self._project(project)
        if parent is None:
            raise CorruptReplica(f"replica record has no project row ({where_text('projects', (project,))})")
        return parent

    @overload
    def _stage_parent(self, attempt: str, project: str, *, required: Literal[True] = ...) -> _Parent: ...

    @overload
    def _stage_parent(self, attempt: str, project: str, *, required: bool) -> Optional[_Parent]: ...

    def _stage_parent(self, attempt: str, project: str, *, required: bool = True) -> Optional[_Parent]:
        k = (attempt, project)
        if k not in self._stage:
            row = self._one(_Sql.stage_project, attempt, project)
            self._stage[k] = None if row is None else self._parent_of_row(
                "stage_projects", row, {"attempt_id": attempt, "project_id": project})
        parent = self._stage[k]
        if parent is None and required:
            raise CorruptReplica(
                f"staged replica record has no staged project row ({where_text('stage_projects', k)})")
        return parent

    def _child_moved(self, parent: _Parent, old: Optional[int], new: Optional[int]) -> None:
        if old is not None:
            parent.digest = I.sub(parent.digest, old)
        if new is not None:
            parent.digest = I.add(parent.digest, new)
        parent.dirty = True
        self._dirty = True

    # -- projects -----------------------------------------------------------

    def project_version(self, project: str) -> Optional[int]:
        parent = self._project(project)
        return None if parent is None else parent.cols["record_version"]

    def projects(self) -> dict[str, int]:
        """Every live project and its record version; the set is verified against the authority."""
        if any(p is not None and p.dirty for p in self._projects.values()):
            raise RuntimeError("projects() after a change to a project in the same transaction")
        rows = self._all(_Sql.projects)
        elements: list[int] = []
        out = {}
        for row in rows:
            parent = self._parent_of_row("projects", row, {"project_id": row.project_id})
            if row.project_id not in self._projects:
                self._projects[row.project_id] = parent
            elements.append(cast(int, parent.counted))  # a parent read from its row counts its element
            out[row.project_id] = parent.cols["record_version"]
        if I.total(elements) != self._digest("live"):
            raise TamperDetected("projects: the set of project rows is not the one the authority row records "
                                 "(a project row was deleted, inserted or rolled back)")
        return out

    def set_project_version(self, project: str, version: int) -> None:
        parent = self._live_parent(project)
        parent.cols["record_version"] = version
        parent.dirty = self._dirty = True
        self.notify = True

    # -- records and values of a view (live or staged) ---------------------

    def _element(self, table: str, q: _Q, ident: tuple[str, ...]) -> Optional[int]:
        """The element of the stored row ``ident`` of ``table`` (verified), or None when absent."""
        k = (table, *ident)
        if k not in self._elements:
            row = self._one(q, *ident)
            self._elements[k] = None if row is None else self._open(table, row, ident)
        return self._elements[k]

    def _parent_of(self, view: _View[_R], key: tuple[str, ...]) -> _Parent:
        return self._live_parent(*key) if view is LIVE else self._stage_parent(*key)

    def _record_of(self, view: _View[_R], row: StoredRow, ident: tuple[str, ...]) -> _R:
        """A verified record row as a ``LiveRecord`` or ``StagedRecord`` (its element remembered)."""
        self._elements[(view.records, *ident)] = self._open(view.records, row, ident)
        state, mat = parsed_record(row, view.records, ident)
        # (``view is LIVE`` exactly when ``_R`` is ``LiveRecord``: the checker cannot follow the identity.)
        return cast(_R, LiveRecord(state, mat) if view is LIVE else StagedRecord(state, mat, bool(row.present)))

    def _get_record(self, view: _View[_R], ident: tuple[str, ...]) -> Optional[_R]:
        row = self._one(view.record, *ident)
        if row is None:
            self._elements[(view.records, *ident)] = None
            return None
        return self._record_of(view, row, ident)

    def _get_records(self, view: _View[_R], key: tuple[str, ...]) -> list[tuple[str, _R]]:
        """The records of one parent, sorted by key (``ORDER BY key``), each verified."""
        out = [(r.key, self._record_of(view, r, (*key, r.key))) for r in self._all(view.records_of, *key)]
        out.sort(key=lambda kv: kv[0])
        return out

    def _get_values(self, view: _View[_R], key: tuple[str, ...]) -> dict[str, StoredRow]:
        """The value rows of one parent, by key, each verified."""
        out = {}
        for r in self._all(view.values_of, *key):
            self._elements[(view.values, *key, r.key)] = self._open(view.values, r, (*key, r.key))
            out[r.key] = r
        return out

    def _put_record(self, view: _View[_R], key: tuple[str, ...], state: BindingState, mat: Materialization,
                    **extra: Any) -> None:
        ident: tuple[str, ...] = (*key, state.key)
        parent = self._parent_of(view, key)
        old = self._element(view.records, view.record, ident)
        cols = {**dict(zip(view.keys, key)), "key": state.key, **_state_columns(state), **_mat_columns(mat), **extra}
        new = self._seal(view.records, cols)
        self._write(view.put_record, cols)
        self._elements[(view.records, *ident)] = new
        self._child_moved(parent, old, new)

    def _put_value(self, view: _View[_R], ident: tuple[str, ...], columns: Columns) -> None:
        parent = self._parent_of(view, ident[:-1])
        old = self._element(view.values, view.value, ident)
        cols = {**dict(zip(view.keys + ("key",), ident)), **columns}
        new = self._seal(view.values, cols)
        self._write(view.put_value, cols)
        self._elements[(view.values, *ident)] = new
        self._child_moved(parent, old, new)

    def _delete_value(self, view: _View[_R], ident: tuple[str, ...]) -> bool:
        """Delete the value row ``ident`` (verified first: its element leaves its parent's digest)."""
        k = (view.values, *ident)
        if k in self._elements and self._elements[k] is None:
            return False  # known absent in this transaction
        rows = self._all(view.delete_value, *ident)
        self._elements[k] = None
        if not rows:
            return False
        self._child_moved(self._parent_of(view, ident[:-1]), self._open(view.values, rows[0], ident), None)
        return True

    def _verified_set(self, view: _View[_R], key: tuple[str, ...], parent: _Parent) -> VerifiedProject[_R]:
        """The records and values of one parent, each verified, their sum checked against its digest."""
        records = self._get_records(view, key)
        values = self._get_values(view, key)
        # Each row was just verified: its element is known (never None).
        got = I.total(cast(list[int], [self._elements[(view.records, *key, k)] for k, _ in records]
                           + [self._elements[(view.values, *key, k)] for k in values]))
        if got != parent.digest:
            raise TamperDetected(f"{view.parent} row {'/'.join(key)}: the set of its records and values is not "
                                 f"the one it records (a row was deleted, inserted or rolled back)")
        return VerifiedProject(tuple(records), values)

    def assume_no_value(self, table: str, *ident: str) -> None:
        """Skip reading the value row ``ident`` before writing it: its record is not installed.

        A record that is not installed has no value row (invariant
        ``unserved_records_carry_no_value``). Were one there anyway, it was never
        counted in its parent's digest (every row this code writes is), and the
        write replaces it: the digest stays the sum of the rows stored. Were it
        counted, the digest would no longer match and the set fails closed. So
        the hint saves a read and can never hide a tamper.
        """
        self._elements.setdefault((table, *ident), None)

    # -- live records and values -------------------------------------------

    def live_record(self, project: str, key: str) -> Optional[LiveRecord]:
        return self._get_record(LIVE, (project, key))

    def put_live_record(self, project: str, state: BindingState, mat: Materialization) -> None:
        self._put_record(LIVE, (project,), state, mat)
        self.notify = True

    def delete_live_value(self, project: str, key: str) -> None:
        if self._delete_value(LIVE, (project, key)):
            self.notify = True

    def put_live_value(self, project: str, key: str, head: Head, blob: bytes) -> None:
        self._put_value(LIVE, (project, key), _value_columns(head, blob))
        self.notify = True

    def put_live_value_row(self, project: str, key: str, vrow: StoredRow) -> None:
        """Install a (verified) staged value row as the live value of ``key``: the commit's promotion."""
        self._put_value(LIVE, (project, key), _copied_value(vrow))
        self.notify = True

    def verified_live_project(self, project: str) -> VerifiedProject[LiveRecord]:
        """The project's records and values, each verified, their sum checked against its row."""
        parent = self._project(project)
        if parent is None:
            if self._get_records(LIVE, (project,)) or self._get_values(LIVE, (project,)):
                raise TamperDetected(f"projects row {project} is missing but the project has rows "
                                     f"(the project row was deleted)")
            return VerifiedProject((), {})
        if parent.dirty:
            raise RuntimeError("verified_live_project after a change in the same transaction")
        return self._verified_set(LIVE, (project,), parent)

    def replace_live(self, projects: Iterable[tuple[str, int]]) -> None:
        """Delete the whole live view, then create these projects empty (the commit's promotion).

        The view it replaces is verified first (``TamperDetected`` otherwise), as every write verifies
        the rows it replaces: a commit must not launder a tampered live row by deleting it."""
        self.verified_live()
        self._clear(_Sql.clear_live, "live", (LIVE.records, LIVE.values))
        self._projects = {}
        self.notify = True
        for project, version in projects:
            self._projects[project] = self._create_parent("projects", {"project_id": project},
                                                          {"record_version": version})

    def _create_parent(self, table: str, key: dict[str, str], cols: Columns) -> _Parent:
        """Insert a new parent row now (its children need it); ``flush`` rewrites it with its digest."""
        parent = _Parent(dict(cols), I.ZERO_DIGEST, None)
        row = {**key, **parent.cols, "rows_digest": bytes(I.DIGEST_BYTES), "written_at": 0}
        self._seal(table, row)
        self._write(_Sql.put_parent[table], row)
        parent.dirty = self._dirty = True
        return parent

    # -- staged projects, records and values -------------------------------

    def stage_project(self, attempt: str, project: str) -> Optional[StagedProject]:
        parent = self._stage_parent(attempt, project, required=False)
        return None if parent is None else _stage_project_of(parent.cols, (attempt, project))

    def put_stage_project(self, attempt: str, project: str, sp: StagedProject) -> None:
        cols = {"record_version": sp.record_version, "last_key": sp.last_key, "complete": sp.complete}
        parent = self._stage_parent(attempt, project, required=False)
        if parent is None:
            parent = self._create_parent("stage_projects", {"attempt_id": attempt, "project_id": project}, cols)
            self._stage[(attempt, project)] = parent
        parent.cols.update(cols)
        parent.dirty = self._dirty = True

    def stage_record(self, attempt: str, project: str, key: str) -> Optional[StagedRecord]:
        return self._get_record(STAGE, (attempt, project, key))

    def put_stage_record(self, attempt: str, project: str, row: StagedRecord) -> None:
        self._put_record(STAGE, (attempt, project), row.state, row.mat, present=row.present)

    def delete_stage_value(self, attempt: str, project: str, key: str) -> None:
        self._delete_value(STAGE, (attempt, project, key))

    def put_stage_value(self, attempt: str, project: str, key: str, head: Head, blob: bytes) -> None:
        self._put_value(STAGE, (attempt, project, key), _value_columns(head, blob))

    def clear_stage(self) -> None:
        """Delete every staged row (values, records, projects: children first); the staged set is empty."""
        self._clear(_Sql.clear_stage, "stage", (STAGE.records, STAGE.values))
        self._stage = {}

    def reset_staged_project(self, attempt: str, project: str) -> None:
        """``resetStagedProject``: the project's staged view becomes a copy of its (verified) live view."""
        parent = self._stage_parent(attempt, project)
        self._run(_Sql.delete_stage_project_values, attempt, project)
        self._run(_Sql.delete_stage_project_records, attempt, project)
        self._elements = {k: v for k, v in self._elements.items()
                          if not (k[0] in (STAGE.records, STAGE.values) and k[1:3] == (attempt, project))}
        parent.digest = I.ZERO_DIGEST
        parent.dirty = self._dirty = True
        live = self.verified_live_project(project)  # a tamper is never copied into staging
        for key, row in live.records:
            self._elements[(STAGE.records, attempt, project, key)] = None
            self.put_stage_record(attempt, project, StagedRecord(row.state, row.mat, False))
        # Sealed blobs are copied as they are: their seal binds project, key and head, not the view.
        for key, vrow in sorted(live.values.items()):
            self._elements[(STAGE.values, attempt, project, key)] = None
            self._put_value(STAGE, (attempt, project, key), _copied_value(vrow))

    def verified_stage(self) -> dict[tuple[str, str], tuple[StagedProject, VerifiedProject[StagedRecord]]]:
        """Every staged project with its rows, each verified, every sum checked (a commit's promotion)."""
        out = {}
        elements: list[int] = []
        for row in self._all(_Sql.stage_projects):
            key: tuple[str, str] = (row.attempt_id, row.project_id)
            parent = self._parent_of_row("stage_projects", row, {"attempt_id": key[0], "project_id": key[1]})
            self._stage.setdefault(key, parent)
            elements.append(cast(int, parent.counted))  # a parent read from its row counts its element
            out[key] = (_stage_project_of(parent.cols, key), self._verified_set(STAGE, key, parent))
        orphans = self._owners(S.stage_records, S.stage_values) - set(out)
        if orphans:
            raise TamperDetected(f"staged records of {'/'.join(sorted(orphans)[0])} have no stage_projects row "
                                 f"(it was deleted)")
        if I.total(elements) != self._digest("stage"):
            raise TamperDetected("stage_projects: the set of staged project rows is not the one the authority row "
                                 "records (a row was deleted, inserted or rolled back)")
        return out

    # -- comparisons the seed makes over lists of rows, as SQL ---------------

    def live_matches_staged(self, attempt: str, project: str) -> bool:
        """The project's live records and the attempt's present staged records hold the same states.

        The seed's comparison of the two key-ordered lists, ``sameState`` row
        by row (a complete page at the live record version). Keys are unique
        in both tables, so the lists are equal exactly when neither set of
        (key, state columns) has a row the other lacks. Every row is verified
        (tag and parse) before the query trusts its columns; both tables are
        written through one encoder, so equal states have equal columns.
        """
        self._get_records(LIVE, (project,))
        self._get_records(STAGE, (attempt, project))
        differing: int = self.db.execute(_SAME_STATES_SQL, (project, attempt, project)).fetchone()[0]
        return differing == 0

    def stage_matches_versions(self, attempt: str, versions: Iterable[ProjectVersion]) -> bool:
        """The attempt's staged projects are exactly ``versions``, each complete at its record version.

        The seed's pairwise comparison of the sorted staged projects with the
        commit's versions (which the wire parser keeps strictly ascending by
        project, so unique). The staged projects must have been verified in
        this transaction (``verified_stage``), and not changed since.
        """
        if any(p is not None and p.dirty for p in self._stage.values()):
            raise RuntimeError("stage_matches_versions after a change to a staged project in the same transaction")
        asked = json.dumps([[v.project_id, v.record_version] for v in versions])
        return bool(self.db.execute(_STAGE_VERSIONS_SQL, (asked, attempt, attempt)).fetchone()[0])

    def unpromotable_record(self, attempt: str) -> Optional[tuple[str, str, bool]]:
        """The first present staged record (by project, key) whose value row contradicts it, or None.

        (project, key, installed): an installed record whose value row is
        missing or was fetched for another head (revision, generation,
        reference text), or a record that is not installed but has a value
        row. The rows must have been verified in this transaction.
        """
        row = self.db.execute(_UNPROMOTABLE_SQL, (attempt,)).fetchone()
        return None if row is None else (row[0], row[1], bool(row[2]))

    # -- receipts -----------------------------------------------------------

    def receipt_row(self, stream: str, sequence: int) -> Optional[StoredRow]:
        """The verified receipt row of (stream, sequence), or None."""
        row = self._one(_Sql.receipt, stream, sequence)
        if row is not None:
            self._open("receipts", row, (stream, sequence), (self.stream_epoch,))
        return row

    def put_receipt(self, **columns: Any) -> None:
        if self._new_stream:
            raise RuntimeError("a receipt written in the transaction that started its stream")
        cols = dict(columns)
        element = self._seal("receipts", cols, (self.stream_epoch,))
        self._write(_Sql.put_receipt, cols)
        self._move_digest("receipts", None, element)

    def clear_receipts(self) -> None:
        """Delete every receipt: a new stream incarnation begins (its receipts bind the next counter)."""
        self._clear(_Sql.clear_receipts, "receipts", ())
        self._new_stream = True

    def verified_receipts(self) -> list[StoredRow]:
        """Every receipt row, each verified, the set checked against the authority row."""
        rows = self._all(_Sql.receipts)
        epoch = (self.stream_epoch,)
        elements = [self._open("receipts", r, (r.stream_id, r.sequence), epoch) for r in rows]
        if I.total(elements) != self._digest("receipts"):
            raise TamperDetected("receipts: the set of receipt rows is not the one the authority row records "
                                 "(a receipt was deleted, inserted or rolled back)")
        return rows

    # -- the whole file -----------------------------------------------------

    def verified_live(self) -> dict[str, tuple[int, VerifiedProject[LiveRecord]]]:
        """Every live project with its rows, all verified (the project set against the authority)."""
        projects = self.projects()
        out = {p: (v, self.verified_live_project(p)) for p, v in sorted(projects.items())}
        orphans = self._owners(S.records, S.values) - set(projects)
        if orphans:
            raise TamperDetected(f"records of project {sorted(orphans)[0]} have no projects row (it was deleted)")
        return out

    def _owners(self, *tables: Table) -> set[Union[str, tuple[str, ...]]]:
        """The distinct parents that rows of ``tables`` name (project ids, or (attempt, project))."""
        out: set[Union[str, tuple[str, ...]]] = set()
        for t in tables:
            cols = "attempt_id, project_id" if "attempt_id" in t.c else "project_id"
            for r in self.db.execute(f"SELECT DISTINCT {cols} FROM {t.name}").fetchall():
                out.add(tuple(r) if len(r) > 1 else r[0])
        return out


def _parent_scope(table: str, key: dict[str, str]) -> bytes:
    return table.encode("ascii") + b"\0" + b"\0".join(str(v).encode("utf-8") for v in key.values())


def _value_columns(head: Head, blob: bytes) -> Columns:
    """A value row's columns (but its key): the head it was fetched for, and its sealed blob."""
    return {
        "revision": head.revision,
        "generation": head.generation,
        "value_ref_json": ref_json(head.value_ref),
        "value_enc": blob,
    }


def _copied_value(vrow: StoredRow) -> Columns:
    """The columns of a (verified) value row, to write under another key of the same record."""
    return {"revision": vrow.revision, "generation": vrow.generation, "value_ref_json": vrow.value_ref_json,
            "value_enc": vrow.value_enc}


def authenticate_contents(rows: RowAuthenticator, contents: Mapping[str, Iterable[Columns]],
                          counter: int) -> dict[str, list[Columns]]:
    """Tags and digests, computed from scratch, for a whole replica's rows (the 1 -> 2 migration).

    ``contents`` maps each tagged table to its rows (dicts of the columns of
    schema version 1); returns the rows of schema version 2, with every tag,
    set digest, ``write_counter = stream_epoch = counter`` and
    ``written_at = counter``. It trusts the rows it is given: migration
    authenticates what the file holds when it runs.
    """
    out = {name: [dict(r) for r in contents.get(name, [])] for name in _T}
    children: dict[tuple[object, ...], list[int]] = {}
    for table, parent_key in (("records", ("project_id",)), ("record_values", ("project_id",)),
                              ("stage_records", ("attempt_id", "project_id")),
                              ("stage_values", ("attempt_id", "project_id"))):
        for r in out[table]:
            tag, element = rows.seal_row(table, tuple(r[c] for c in _T[table]))
            r["tag"] = tag
            children.setdefault((table in ("records", "record_values"),) + tuple(r[k] for k in parent_key),
                                []).append(element)
    sums: dict[str, list[int]] = {"live": [], "stage": [], "receipts": []}
    for table, key_cols, live in (("projects", ("project_id",), True),
                                  ("stage_projects", ("attempt_id", "project_id"), False)):
        for r in out[table]:
            key = {k: r[k] for k in key_cols}
            digest = I.total(children.pop((live,) + tuple(key.values()), []))
            r["rows_digest"] = rows.store_digest(digest, _parent_scope(table, key), counter)
            r["written_at"] = counter
            tag, element = rows.seal_row(table, tuple(r[c] for c in _T[table]))
            r["tag"] = tag
            sums["live" if live else "stage"].append(element)
    if children:
        raise CorruptReplica(f"rows without their parent row: {sorted(children)[0][1:]}")
    for r in out["receipts"]:
        tag, element = rows.seal_row("receipts", tuple(r[c] for c in _T["receipts"]) + (counter,))
        r["tag"] = tag
        sums["receipts"].append(element)
    if len(out["authority"]) != 1:
        raise CorruptReplica("project environment replica authority row is missing")
    auth = out["authority"][0]
    auth.update(write_counter=counter, stream_epoch=counter)
    for name, column in _AUTH_DIGEST_COLUMN.items():
        auth[column] = I.masked(I.total(sums[name]), _auth_mask(rows, name, counter))
    auth["tag"] = rows.seal_row("authority", tuple(auth[c] for c in _T["authority"]))[0]
    return out
