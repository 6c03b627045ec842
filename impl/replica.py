"""The reference implementation of the replica protocol on SQLite.

What it does: ``SqliteReplica`` runs the seed's operations (``begin``,
``apply_page``, ``apply_delivery``, ``complete``, ``close_gate``) and reads
(``read_status``, ``read_snapshot``, ``list_receipts``, readiness) on one
SQLite file with the tables of ``impl.schema``, and behaves exactly like the
executable model ``envreplica.model.replica``: the model is the
specification, and where the two disagree this file is wrong.

* Transactions sit exactly where the model (the seed) has them: ``begin``,
  ``complete`` and ``close_gate`` are one transaction each; a page is a
  prepare transaction, then for each key to fetch a before-transaction, the
  value-store read outside any transaction, an after-transaction, and a final
  transaction; a delivery is a prepare transaction, an optional
  before/read/after, and a final transaction. Write transactions begin with
  ``BEGIN IMMEDIATE``, read-only ones with a plain ``BEGIN`` (``impl.engine``).
* A refusal is a normal return from inside its transaction, so whatever that
  transaction wrote commits (a page refused with ``snapshot_version_conflict``
  keeps its staged writes, as in the model). ``CorruptReplica`` raised inside
  a transaction rolls back that transaction only; earlier transactions of the
  same operation stay committed. A SQLite constraint violation is a
  ``CorruptReplica`` too.
* The value-store read is the model's: ``model.store.plan`` decides whether
  there is a read at all, ``impl.valuestores.answer_of`` asks the reader, and
  ``model.store.interpret`` alone decides what the answer means. An operation
  given ``during_fetch`` calls it once, at its first real read, after the read
  returned and before its answer is used: the seed's ``await`` window.
* Variants ``seed``, ``fix-f1`` and ``fixed`` differ exactly where the model's
  ``# FIX(F1)`` / ``# FIX(F2)`` do.
* Rows are rebuilt through the wire parsers of ``spec.wire`` on every read; a
  row that does not parse is ``CorruptReplica`` naming its table and key,
  never a value. Values are sealed at rest (``impl.sealing``), bound to
  project, key, revision, generation and value reference: a blob moved to
  another row does not open, and the snapshot read then fails closed.
* A delivery receipt stores the HMAC of the canonical semantic request
  (``canonical_json(frame.request())``), never the request.

The pure record rules (``model.rules``), the acknowledgement bound
(``model.replica.page_fits``) and the cursor helpers (``cursor``,
``required_cursor``, ``authority_org_id``) are the model's own functions:
they touch no storage, so sharing them removes a place to diverge without
hiding a storage bug.

Leaves out on purpose: notifications to other processes (a waiter re-checks
the file every 50 ms), timestamps (never read), restart (a new
``SqliteReplica`` on the same file is the restarted process; the host then
calls ``close_gate``, as the model's ``restart`` does), and schema migration
(the writer-version contract of ``impl.writer`` is checked when the file is opened; its triggers fence every write).
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

from sqlalchemy import Text, bindparam, delete, insert, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from envreplica.impl import schema as S
from envreplica.impl import writer
from envreplica.impl.engine import open_engine, read_transaction, write_transaction
from envreplica.impl.sealing import Sealer, SealError
from envreplica.impl.valuestores import ValueReader, answer_of
from envreplica.model.fmap import FMap
from envreplica.model.replica import authority_org_id, cursor, page_fits, required_cursor
from envreplica.model.rules import (
    Order,
    desired_materialization,
    is_reachable_record_advance,
    state_order,
)
from envreplica.model.state import (
    Authority,
    LiveRow,
    ModelConfig,
    ReadRequest,
    Receipt,
    StageProject,
    StageRow,
    State,
    StoredValue,
    Variant,
)
from envreplica.model.store import Fetched, interpret, plan
from envreplica.spec import wire
from envreplica.spec.domain import (
    INSTALLED,
    ApplyFrame,
    ApplyOk,
    ApplyRefused,
    ApplyResult,
    BeginFrame,
    BeginResult,
    BindingState,
    CommitFrame,
    CommitOk,
    CommitRefused,
    CommitResult,
    CorruptReplica,
    Cursor,
    InvalidFrame,
    Materialization,
    MatKind,
    PageFrame,
    PageOk,
    PageRefused,
    PageResult,
    ReceiptView,
    RecordResult,
    RefusalCode,
    ReplicaError,
    Snapshot,
    SnapshotEntry,
    SnapshotProject,
    Status,
    ValueRef,
    unavailable,
)
from envreplica.spec.gate import Gate

__all__ = ["SqliteReplica", "request_mac", "with_macs", "READY_POLL_SECONDS"]

R = RefusalCode

#: How often ``await_ready`` re-reads the file (another process may change it).
READY_POLL_SECONDS = 0.05

_AUTHORITY_ID = "replica"


# ---------------------------------------------------------------------------
# MACs
# ---------------------------------------------------------------------------


def request_mac(sealer: Sealer, frame: Union[ApplyFrame, Any]) -> str:
    """The receipt MAC of a delivery (or of its ``DeliveryRequest``).

    It covers exactly ``kind``, ``projectId``, ``recordVersion``, ``state`` and
    ``delivery``, canonically serialised (``wire.encode`` of a
    ``DeliveryRequest`` carries ``"kind": "env.replica.apply"``).
    """
    request = frame.request() if isinstance(frame, ApplyFrame) else frame
    return sealer.mac(wire.canonical_json(request).encode("utf-8"))


def with_macs(state: State, sealer: Sealer) -> State:
    """``state`` with each receipt's ``request`` replaced by its MAC (hex).

    ``with_macs(model_state, sealer) == replica.to_model_state()`` compares a
    model state with what an implementation holds: a MAC cannot be turned back
    into its request, but two requests have the same MAC exactly when equal.
    """
    receipts = FMap(
        {k: replace(r, request=request_mac(sealer, r.request)) for k, r in state.receipts.items()}
    )
    return replace(state, receipts=receipts)


# ---------------------------------------------------------------------------
# Rows <-> values
# ---------------------------------------------------------------------------


def _json(value: Any) -> str:
    """``JSON.stringify`` of an encoded wire value (insertion order, no whitespace)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _ref_json(ref: ValueRef) -> str:
    return _json(wire.encode(ref))


def _state_columns(state: BindingState) -> dict:
    ref = state.head.value_ref
    return {
        "revision": state.head.revision,
        "generation": state.head.generation,
        "tombstone": state.head.tombstone,
        "value_ref_json": None if ref is None else _ref_json(ref),
        "binding_json": None if state.binding is None else _json(wire.encode(state.binding)),
        "policy_epoch": state.policy_epoch,
        "listing_generation": state.listing_generation,
    }


def _mat_columns(mat: Materialization) -> dict:
    return {
        "materialization": mat.kind.value,
        "materialization_reason": None if mat.kind is MatKind.INSTALLED else mat.reason,
    }


def _where_text(table: str, ident: tuple) -> str:
    return f"{table} {'/'.join(str(part) for part in ident)}"


def _parse_json_column(text: Any, what: str, table: str, ident: tuple) -> Any:
    if text is None:
        return None
    if not isinstance(text, str):
        raise CorruptReplica(f"stored {what} is malformed ({_where_text(table, ident)})")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise CorruptReplica(f"stored {what} is malformed ({_where_text(table, ident)})") from None


def _record_of_row(row, table: str, ident: tuple) -> tuple[BindingState, Materialization]:
    """``rowState`` and ``rowMaterialization``: the record of a row, validated by the wire parsers."""
    ref = _parse_json_column(row.value_ref_json, "replica value reference", table, ident)
    binding = _parse_json_column(row.binding_json, "replica binding", table, ident)
    doc = {
        "key": row.key,
        "head": {
            "revision": row.revision,
            "generation": row.generation,
            "tombstone": row.tombstone,
            "valueRef": ref,
        },
        "binding": binding,
        "policyEpoch": row.policy_epoch,
        "listingGeneration": row.listing_generation,
    }
    try:
        state = wire.parse_binding_state(doc)
    except InvalidFrame:
        raise CorruptReplica(f"stored replica record is invalid ({_where_text(table, ident)})") from None
    mat_doc = (
        {"kind": "installed"}
        if row.materialization == "installed" and row.materialization_reason is None
        else {"kind": row.materialization, "reason": row.materialization_reason}
    )
    try:
        mat = wire.parse_materialization(mat_doc)
    except InvalidFrame:
        raise CorruptReplica(
            f"stored replica materialization is invalid ({_where_text(table, ident)})"
        ) from None
    return state, mat


def _value_ref_of_row(row, table: str, ident: tuple) -> ValueRef:
    doc = _parse_json_column(row.value_ref_json, "replica value reference", table, ident)
    try:
        return wire.parse_value_ref(doc)
    except InvalidFrame:
        raise CorruptReplica(f"stored replica value reference is invalid ({_where_text(table, ident)})") from None


def _count_of(value: Any) -> bool:
    return type(value) is int and 0 <= value <= wire.MAX_COUNT


def _value_matches_head(vrow, head, table: str, ident: tuple) -> bool:
    """The value row was fetched for exactly this head (revision, generation, reference)."""
    if vrow is None or head.tombstone or head.value_ref is None:
        return False
    if vrow.revision != head.revision or vrow.generation != head.generation:
        return False
    try:
        return _value_ref_of_row(vrow, table, ident) == head.value_ref
    except CorruptReplica:  # an unreadable reference matches no head
        return False


def _parse_code(code: Any, ident: tuple) -> RefusalCode:
    try:
        return RefusalCode(code)
    except ValueError:
        raise CorruptReplica(f"stored replica receipt code is invalid ({_where_text('receipts', ident)})") from None


def _receipt_of_row(row) -> Receipt:
    """A receipt row as the model's ``Receipt``, its ``request`` being the stored MAC."""
    ident = (row.stream_id, row.sequence)
    code = None if row.code is None else _parse_code(row.code, ident)
    result = None
    if row.result_json is not None:
        doc = _parse_json_column(row.result_json, "replica delivery result", "receipts", ident)
        try:
            result = wire.parse_record_result(doc)
        except InvalidFrame:
            raise CorruptReplica("stored replica delivery result is invalid") from None
    return Receipt(row.request_mac, bool(row.ok), code, result, row.record_version)


# ---------------------------------------------------------------------------
# One transaction's view of the tables
# ---------------------------------------------------------------------------


def _key_where(table, *names):
    """``WHERE name = :w_name AND ...`` (bound parameters, so the statement is built once)."""
    return [table.c[n] == bindparam(f"w_{n}") for n in names]


def _upsert(table, keys: tuple[str, ...]):
    """``INSERT ... ON CONFLICT (keys) DO UPDATE SET <every other column> = excluded.<column>``."""
    stmt = sqlite_insert(table)
    return stmt.on_conflict_do_update(
        index_elements=list(keys),
        set_={c.name: stmt.excluded[c.name] for c in table.c if c.name not in keys},
    )


class _Sql:
    """The statements of the replica, built once (SQLAlchemy then caches their compiled form)."""

    authority = select(S.authority).where(S.authority.c.id == _AUTHORITY_ID)
    set_authority = update(S.authority).where(S.authority.c.id == _AUTHORITY_ID)

    project_version = select(S.projects.c.record_version).where(*_key_where(S.projects, "project_id"))
    projects = select(S.projects)
    insert_projects = insert(S.projects)  # executemany: the promoted projects
    set_project_version = (
        update(S.projects).where(*_key_where(S.projects, "project_id")).values(record_version=bindparam("v_version"))
    )

    live_record = select(S.records).where(*_key_where(S.records, "project_id", "key"))
    live_records = select(S.records).where(*_key_where(S.records, "project_id"))
    put_live_record = _upsert(S.records, ("project_id", "key"))
    live_values = select(S.values).where(*_key_where(S.values, "project_id"))
    delete_live_value = delete(S.values).where(*_key_where(S.values, "project_id", "key"))
    put_live_value = _upsert(S.values, ("project_id", "key"))
    insert_live_values = insert(S.values)  # executemany: the promoted values

    stage_project = select(S.stage_projects).where(*_key_where(S.stage_projects, "attempt_id", "project_id"))
    put_stage_project = _upsert(S.stage_projects, ("attempt_id", "project_id"))
    stage_record = select(S.stage_records).where(*_key_where(S.stage_records, "attempt_id", "project_id", "key"))
    stage_records = select(S.stage_records).where(*_key_where(S.stage_records, "attempt_id"))
    stage_records_of_project = select(S.stage_records).where(
        *_key_where(S.stage_records, "attempt_id", "project_id"))
    put_stage_record = _upsert(S.stage_records, ("attempt_id", "project_id", "key"))
    delete_stage_value = delete(S.stage_values).where(
        *_key_where(S.stage_values, "attempt_id", "project_id", "key"))
    put_stage_value = _upsert(S.stage_values, ("attempt_id", "project_id", "key"))
    delete_stage_project_values = delete(S.stage_values).where(
        *_key_where(S.stage_values, "attempt_id", "project_id"))
    delete_stage_project_records = delete(S.stage_records).where(
        *_key_where(S.stage_records, "attempt_id", "project_id"))
    copy_live_values_to_stage = insert(S.stage_values).from_select(
        ["attempt_id", "project_id", "key", "revision", "generation", "value_ref_json", "value_enc"],
        select(
            bindparam("v_attempt", type_=Text), S.values.c.project_id, S.values.c.key, S.values.c.revision,
            S.values.c.generation, S.values.c.value_ref_json, S.values.c.value_enc,
        ).where(*_key_where(S.values, "project_id")),
    )

    receipt = select(S.receipts).where(*_key_where(S.receipts, "stream_id", "sequence"))
    put_receipt = insert(S.receipts)


class _Tx:
    """The table operations of one transaction (the seed's ``tx`` helpers)."""

    __slots__ = ("conn", "notify")

    def __init__(self, conn) -> None:
        self.conn = conn
        self.notify = False  # the authority row or the live view changed

    def _one(self, stmt, params=None):
        return self.conn.execute(stmt, params).first()

    def _all(self, stmt, params=None):
        return self.conn.execute(stmt, params).all()

    def _run(self, stmt, params=None) -> None:
        self.conn.execute(stmt, params)

    # -- authority -------------------------------------------------------

    def authority(self) -> Authority:
        """``authorityRow`` read as the model's ``Authority``; a malformed row is corrupt."""
        row = self._one(_Sql.authority)
        if row is None:
            raise CorruptReplica("project environment replica authority row is missing")
        text = row.policy_epochs_json
        try:
            parsed = json.loads(text) if isinstance(text, str) else None
        except (ValueError, RecursionError):
            raise CorruptReplica("stored replica policy epochs are malformed") from None
        try:
            epochs = wire.parse_policy_epochs(parsed)
        except InvalidFrame:
            raise CorruptReplica("stored replica policy epochs are invalid") from None
        activated, gate_open, attempt = bool(row.activated), bool(row.gate_open), row.attempt_id
        if attempt is not None and (not isinstance(attempt, str) or wire.ID.regex.fullmatch(attempt) is None):
            raise CorruptReplica("stored replica attempt is invalid")
        if not activated:
            if gate_open or attempt is not None:
                raise CorruptReplica("stored replica gate is invalid")
            gate = Gate.INACTIVE
        elif gate_open:
            if attempt is not None:
                raise CorruptReplica("stored replica gate is invalid")
            gate = Gate.OPEN
        else:
            gate = Gate.IDLE if attempt is None else Gate.STAGING
        stream, sequence, org = row.stream_id, row.applied_sequence, row.org_id
        if activated:
            if not isinstance(stream, str) or wire.ID.regex.fullmatch(stream) is None or not _count_of(sequence):
                raise CorruptReplica("stored replica delivery cursor is invalid")
            if not isinstance(org, str) or wire.SEGMENT.regex.fullmatch(org) is None:
                raise CorruptReplica("stored replica organization is invalid")
        return Authority(gate, stream, sequence, attempt, org, epochs)

    def set_authority(self, **columns) -> None:
        self._run(_Sql.set_authority, columns)
        self.notify = True

    # -- projects --------------------------------------------------------

    def project_version(self, project: str) -> Optional[int]:
        row = self._one(_Sql.project_version, {"w_project_id": project})
        return None if row is None else row.record_version

    def projects(self) -> dict[str, int]:
        return {r.project_id: r.record_version for r in self._all(_Sql.projects)}

    def set_project_version(self, project: str, version: int) -> None:
        self._run(_Sql.set_project_version, {"w_project_id": project, "v_version": version})
        self.notify = True

    # -- live records and values ----------------------------------------

    def live_record(self, project: str, key: str) -> Optional[LiveRow]:
        row = self._one(_Sql.live_record, {"w_project_id": project, "w_key": key})
        if row is None:
            return None
        return LiveRow(*_record_of_row(row, "records", (project, key)))

    def live_records(self, project: str) -> list[tuple[str, LiveRow]]:
        """The project's live records, sorted by key (``ORDER BY key``)."""
        rows = self._all(_Sql.live_records, {"w_project_id": project})
        out = [(r.key, LiveRow(*_record_of_row(r, "records", (project, r.key)))) for r in rows]
        out.sort(key=lambda kv: kv[0])
        return out

    def put_live_record(self, project: str, state: BindingState, mat: Materialization) -> None:
        self._run(_Sql.put_live_record,
                  {"project_id": project, "key": state.key, **_state_columns(state), **_mat_columns(mat)})
        self.notify = True

    def live_value_rows(self, project: str) -> dict[str, Any]:
        return {r.key: r for r in self._all(_Sql.live_values, {"w_project_id": project})}

    def delete_live_value(self, project: str, key: str) -> None:
        self._run(_Sql.delete_live_value, {"w_project_id": project, "w_key": key})
        self.notify = True

    def put_live_value(self, project: str, key: str, head, blob: bytes) -> None:
        self._run(_Sql.put_live_value, {"project_id": project, "key": key, **_value_columns(head, blob)})
        self.notify = True

    # -- staged projects, records and values ----------------------------

    def stage_project(self, attempt: str, project: str) -> Optional[StageProject]:
        row = self._one(_Sql.stage_project, {"w_attempt_id": attempt, "w_project_id": project})
        return None if row is None else _stage_project_of_row(row)

    def put_stage_project(self, attempt: str, project: str, sp: StageProject) -> None:
        self._run(_Sql.put_stage_project, {
            "attempt_id": attempt, "project_id": project,
            "record_version": sp.record_version, "last_key": sp.last_key, "complete": sp.complete,
        })

    def stage_record(self, attempt: str, project: str, key: str) -> Optional[StageRow]:
        row = self._one(_Sql.stage_record, {"w_attempt_id": attempt, "w_project_id": project, "w_key": key})
        if row is None:
            return None
        state, mat = _record_of_row(row, "stage_records", (attempt, project, key))
        return StageRow(state, mat, bool(row.present))

    def stage_records(self, attempt: str, project: Optional[str] = None) -> list[tuple[tuple[str, str], StageRow]]:
        """Staged records of the attempt (and project), sorted by (project, key)."""
        if project is None:
            rows = self._all(_Sql.stage_records, {"w_attempt_id": attempt})
        else:
            rows = self._all(_Sql.stage_records_of_project, {"w_attempt_id": attempt, "w_project_id": project})
        out = []
        for r in rows:
            state, mat = _record_of_row(r, "stage_records", (attempt, r.project_id, r.key))
            out.append(((r.project_id, r.key), StageRow(state, mat, bool(r.present))))
        out.sort(key=lambda kv: kv[0])
        return out

    def put_stage_record(self, attempt: str, project: str, row: StageRow) -> None:
        self._run(_Sql.put_stage_record, {
            "attempt_id": attempt, "project_id": project, "key": row.state.key,
            **_state_columns(row.state), **_mat_columns(row.mat), "present": row.present,
        })

    def delete_stage_value(self, attempt: str, project: str, key: str) -> None:
        self._run(_Sql.delete_stage_value, {"w_attempt_id": attempt, "w_project_id": project, "w_key": key})

    def put_stage_value(self, attempt: str, project: str, key: str, head, blob: bytes) -> None:
        self._run(_Sql.put_stage_value,
                  {"attempt_id": attempt, "project_id": project, "key": key, **_value_columns(head, blob)})

    def clear_stage(self) -> None:
        """Delete every staged row (values, records, projects: children first)."""
        self._run(delete(S.stage_values))
        self._run(delete(S.stage_records))
        self._run(delete(S.stage_projects))

    def reset_staged_project(self, attempt: str, project: str) -> None:
        """``resetStagedProject``: the project's staged view becomes a copy of its live view."""
        where = {"w_attempt_id": attempt, "w_project_id": project}
        self._run(_Sql.delete_stage_project_values, where)
        self._run(_Sql.delete_stage_project_records, where)
        for _, live in self.live_records(project):
            self.put_stage_record(attempt, project, StageRow(live.state, live.mat, False))
        # Sealed blobs are copied as they are: their seal binds project, key and head, not the view.
        self._run(_Sql.copy_live_values_to_stage, {"v_attempt": attempt, "w_project_id": project})

    # -- receipts --------------------------------------------------------

    def receipt_row(self, stream: str, sequence: int):
        return self._one(_Sql.receipt, {"w_stream_id": stream, "w_sequence": sequence})

    def put_receipt(self, **columns) -> None:
        self._run(_Sql.put_receipt, columns)


def _value_columns(head, blob: bytes) -> dict:
    return {
        "revision": head.revision,
        "generation": head.generation,
        "value_ref_json": _ref_json(head.value_ref),
        "value_enc": blob,
    }


def _stage_project_of_row(row) -> StageProject:
    ident = (row.attempt_id, row.project_id)
    rv, last_key = row.record_version, row.last_key
    if (rv is not None and not _count_of(rv)) or (
        last_key is not None and (not isinstance(last_key, str) or wire.KEY.regex.fullmatch(last_key) is None)
    ):
        raise CorruptReplica(f"stored replica staged project is invalid ({_where_text('stage_projects', ident)})")
    return StageProject(rv, last_key, bool(row.complete))


# ---------------------------------------------------------------------------
# The replica
# ---------------------------------------------------------------------------


class _ReadWindow:
    """One operation's reads: its reader (fixed when it starts, as the seed's ``reader``
    argument), and ``during_fetch``, called once at its first real value-store read."""

    __slots__ = ("reader", "callback", "fired")

    def __init__(self, reader: Optional[ValueReader], callback: Optional[Callable[[], None]]) -> None:
        self.reader = reader
        self.callback = callback
        self.fired = False

    def read_returned(self) -> None:
        if self.callback is not None and not self.fired:
            self.fired = True
            self.callback()


class SqliteReplica:
    """The replica on one SQLite file; behaves exactly like ``envreplica.model.replica``."""

    def __init__(
        self,
        path: Union[str, Path],
        *,
        sealer: Sealer,
        reader: Optional[ValueReader],
        config: ModelConfig = ModelConfig(),
        synchronous: str = "FULL",
    ) -> None:
        if not isinstance(sealer, Sealer):
            raise TypeError("sealer must be an impl.sealing.Sealer")
        self.path = Path(path)
        self.sealer = sealer
        self.reader = reader
        self.config = config
        self._engine = open_engine(self.path, synchronous=synchronous)
        self._conn = self._engine.connect()
        self._lock = threading.RLock()  # one transaction at a time on the held connection
        self._changed = threading.Condition()
        self._generation = 0  # bumped after each committed change to the authority row or live view
        self._closed = False
        try:
            with self._write(setup=True):
                pass
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_environment(cls, path, *, reader: Optional[ValueReader], config: ModelConfig = ModelConfig(),
                         synchronous: str = "FULL", env=None) -> "SqliteReplica":
        """Open a replica sealed under the configured master key.

        The key comes from ``ENVREPLICA_MASTER_KEY`` (64 hex digits) or
        ``ENVREPLICA_MASTER_KEY_FILE`` (an owner-only file); anything else
        raises ``KeyConfigError`` saying how to set one (``impl.sealing``).
        """
        import os

        from envreplica.impl.sealing import load_master_key

        key = load_master_key(os.environ if env is None else env)
        return cls(path, sealer=Sealer(key), reader=reader, config=config, synchronous=synchronous)

    # -- plumbing --------------------------------------------------------

    def _setup(self, conn) -> None:
        """Check the writer contract (stamping a fresh file), then create the initial authority row.

        A fresh file is stamped with this schema and writer version and gets
        the fence triggers (``impl.writer``); a file of a newer envreplica is
        refused, an older one must be migrated first (``WriterVersionError``).
        """
        writer.stamp(conn)  # checks the contract; stamps (tables, versions, fence) only a fresh file
        conn.execute(
            sqlite_insert(S.authority)
            .values(
                id=_AUTHORITY_ID, activated=False, gate_open=False, stream_id=None, applied_sequence=0,
                attempt_id=None, org_id=None, policy_epochs_json="[]",
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )

    @contextmanager
    def _write(self, *, setup: bool = False) -> Iterator[_Tx]:
        """One ``BEGIN IMMEDIATE`` transaction: commits on return (refusals too), rolls back on error."""
        self._ensure_open()
        tx: Optional[_Tx] = None
        with self._lock:
            try:
                with write_transaction(self._conn) as conn:
                    if setup:
                        self._setup(conn)
                    tx = _Tx(conn)
                    yield tx
            except IntegrityError as error:
                # The message names the constraint (never a bound value).
                raise CorruptReplica(f"replica constraint violated: {error.orig}") from None
        if tx is not None and tx.notify:
            self._notify()

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        """One read-only transaction (deferred ``BEGIN``: one consistent WAL snapshot)."""
        self._ensure_open()
        with self._lock:
            with read_transaction(self._conn) as conn:
                yield _Tx(conn)

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError("the replica is closed")

    def _notify(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def _seal(self, value: str, project: str, key: str, head) -> bytes:
        return self.sealer.seal(
            value, project_id=project, key=key, revision=head.revision, generation=head.generation,
            value_ref=wire.encode(head.value_ref),
        )

    def _open_value(self, vrow, table: str, ident: tuple, project: str, key: str,
                    ref: Optional[ValueRef] = None) -> StoredValue:
        """Open a value row's sealed blob for its own record fields (``ref``: already parsed)."""
        ref = _value_ref_of_row(vrow, table, ident) if ref is None else ref
        if not _count_of(vrow.revision) or not _count_of(vrow.generation):
            raise CorruptReplica(f"stored replica value is invalid ({_where_text(table, ident)})")
        try:
            value = self.sealer.open(
                vrow.value_enc, project_id=project, key=key, revision=vrow.revision,
                generation=vrow.generation, value_ref=wire.encode(ref),
            )
        except SealError as error:
            raise CorruptReplica(
                f"sealed replica value does not open for its record ({_where_text(table, ident)}): {error}"
            ) from None
        return StoredValue(vrow.revision, vrow.generation, ref, value)

    # -- the value-store read, split at its await --------------------------

    def _fetch(self, project: str, state: BindingState, org: str, window: _ReadWindow) -> Fetched:
        """``readMaterializedValue``: the model's plan, the reader's answer, the model's interpretation."""
        planned = plan(self.config.prefix, project, state, reader_on=window.reader is not None)
        if not isinstance(planned, ReadRequest):
            return planned  # answered without I/O: not a window
        answer = answer_of(window.reader, planned)
        window.read_returned()
        return interpret(org, project, state, planned, answer)

    def _still_awaits_value(self, row, epochs: tuple[int, ...]) -> bool:
        """FIX(F1): install only onto a row still awaiting a value under today's kept epochs."""
        if self.config.variant is Variant.SEED:
            return True
        return (
            row.mat.kind is MatKind.UNAVAILABLE
            and desired_materialization(row.state, epochs).kind is MatKind.UNAVAILABLE
        )

    def _materialize_stage(self, attempt: str, project: str, key: str, window: _ReadWindow) -> None:
        """``materializeStage``: before-transaction, read (no transaction), after-transaction."""
        with self._read() as tx:
            a = tx.authority()
            if a.attempt_id != attempt:
                return
            row = tx.stage_record(attempt, project, key)
            if row is None or row.mat.kind is not MatKind.UNAVAILABLE:
                return
            before, org = row.state, authority_org_id(a)
        fetched = self._fetch(project, before, org, window)
        blob = None if fetched.value is None else self._seal(fetched.value, project, key, before.head)
        with self._write() as tx:
            a = tx.authority()
            if a.attempt_id != attempt:
                return
            current = tx.stage_record(attempt, project, key)
            if current is None or current.state != before:
                return
            if not self._still_awaits_value(current, a.policy_epochs):  # FIX(F1)
                return
            if blob is not None:
                tx.put_stage_value(attempt, project, key, before.head, blob)
                tx.put_stage_record(attempt, project, StageRow(before, INSTALLED, current.present))
            else:
                tx.delete_stage_value(attempt, project, key)
                tx.put_stage_record(attempt, project, StageRow(before, unavailable(fetched.reason), current.present))

    def _materialize_live(self, project: str, key: str, window: _ReadWindow) -> None:
        """``materializeLive``: before-transaction, read (no transaction), after-transaction."""
        with self._read() as tx:
            a = tx.authority()
            row = tx.live_record(project, key)
            if row is None or row.mat.kind is not MatKind.UNAVAILABLE:
                return
            before, org = row.state, authority_org_id(a)
        fetched = self._fetch(project, before, org, window)
        blob = None if fetched.value is None else self._seal(fetched.value, project, key, before.head)
        with self._write() as tx:
            current = tx.live_record(project, key)
            if current is None or current.state != before:
                return
            if self.config.variant is not Variant.SEED:
                if not self._still_awaits_value(current, tx.authority().policy_epochs):  # FIX(F1)
                    return
            if blob is not None:
                tx.put_live_value(project, key, before.head, blob)
                tx.put_live_record(project, before, INSTALLED)
            else:
                tx.delete_live_value(project, key)
                tx.put_live_record(project, before, unavailable(fetched.reason))

    # -- retain (``retainStageState`` / ``retainLiveState``) ---------------

    def _retain_stage_state(
        self, tx: _Tx, attempt: str, project: str, incoming: BindingState, epochs: tuple[int, ...]
    ) -> tuple[RecordResult, bool]:
        key = incoming.key
        stored = tx.stage_record(attempt, project, key)
        if stored is not None:
            current = stored.state
            order = state_order(incoming, current)
            if order is Order.OLDER or order is Order.CONFLICT:
                mat = stored.mat
                if self.config.variant is Variant.FIXED:  # FIX(F2)
                    desired = desired_materialization(current, epochs)
                    if desired.kind is MatKind.WITHHELD:
                        mat = desired
                        tx.delete_stage_value(attempt, project, key)
                row = StageRow(current, mat, True)
                tx.put_stage_record(attempt, project, row)
                fetch = (
                    not current.head.tombstone
                    and row.mat.kind is not MatKind.INSTALLED
                    and desired_materialization(current, epochs).kind is MatKind.UNAVAILABLE
                )
                return row.result(), fetch
            if order is Order.SAME:
                desired = desired_materialization(current, epochs)
                if stored.mat.kind is MatKind.INSTALLED or desired.kind is MatKind.WITHHELD:
                    keep = desired if desired.kind is MatKind.WITHHELD else stored.mat
                else:
                    keep = desired
                if keep.kind is not MatKind.INSTALLED:
                    tx.delete_stage_value(attempt, project, key)
                row = StageRow(current, keep, True)
                tx.put_stage_record(attempt, project, row)
                return row.result(), keep.kind is MatKind.UNAVAILABLE
        desired = desired_materialization(incoming, epochs)
        row = StageRow(incoming, desired, True)
        tx.delete_stage_value(attempt, project, key)
        tx.put_stage_record(attempt, project, row)
        return row.result(), desired.kind is MatKind.UNAVAILABLE

    @staticmethod
    def _retained_existing(row, epochs: tuple[int, ...]) -> tuple[RecordResult, bool]:
        state = row.state
        fetch = (
            not state.head.tombstone
            and row.mat.kind is not MatKind.INSTALLED
            and desired_materialization(state, epochs).kind is MatKind.UNAVAILABLE
        )
        return row.result(), fetch

    def _retain_live_state(
        self, tx: _Tx, project: str, incoming: BindingState, epochs: tuple[int, ...]
    ) -> tuple[RecordResult, bool]:
        key = incoming.key
        stored = tx.live_record(project, key)
        if stored is not None:
            current = stored.state
            order = state_order(incoming, current)
            if order is Order.OLDER or order is Order.CONFLICT:
                return self._retained_existing(stored, epochs)
            if order is Order.SAME:
                desired = desired_materialization(current, epochs)
                if stored.mat.kind is MatKind.INSTALLED and desired.kind is not MatKind.WITHHELD:
                    return stored.result(), False
                tx.delete_live_value(project, key)
                tx.put_live_record(project, current, desired)
                return RecordResult(current, desired), desired.kind is MatKind.UNAVAILABLE
        desired = desired_materialization(incoming, epochs)
        tx.delete_live_value(project, key)
        tx.put_live_record(project, incoming, desired)
        return RecordResult(incoming, desired), desired.kind is MatKind.UNAVAILABLE

    # -- begin -------------------------------------------------------------

    def begin(self, frame: BeginFrame, kept_epochs: tuple[int, ...], org_id: str) -> BeginResult:
        """``beginProjectEnvReplica``: close the gate and create an exact whole-task staging view."""
        frame = wire.parse_begin(wire.encode(frame))
        epochs = wire.parse_policy_epochs(list(kept_epochs))
        org_id = wire.parse_org_id(org_id)
        with self._write() as tx:
            a = tx.authority()
            if a.gate.activated and a.org_id != org_id:
                raise CorruptReplica("replica organization cannot change after activation")
            changed_stream = a.stream_id != frame.stream_id
            if changed_stream:
                # Receipts only deduplicate one stream: a new stream drops them.
                tx._run(delete(S.receipts))
            tx.clear_stage()
            for project in frame.project_ids:
                tx.put_stage_project(frame.attempt_id, project, StageProject(None, None, False))
                tx.reset_staged_project(frame.attempt_id, project)
            sequence = 0 if changed_stream else a.applied_sequence
            tx.set_authority(
                activated=True, gate_open=False, stream_id=frame.stream_id, applied_sequence=sequence,
                attempt_id=frame.attempt_id, org_id=org_id, policy_epochs_json=_json(list(epochs)),
            )
        return BeginResult(Cursor(frame.stream_id, sequence), epochs)

    # -- apply_page --------------------------------------------------------

    def apply_page(self, frame: PageFrame, during_fetch: Optional[Callable[[], None]] = None) -> PageResult:
        """``applyProjectEnvReplicaPage``: install one canonical page into the closed staging view."""
        frame = wire.parse_page(wire.encode(frame))
        window = _ReadWindow(self.reader, during_fetch)
        with self._write() as tx:
            prepared = self._page_prepare(tx, frame)
        if isinstance(prepared, PageRefused):
            return prepared
        for key in prepared:
            self._materialize_stage(frame.attempt_id, frame.project_id, key, window)
        with self._read() as tx:
            return self._page_final(tx, frame)

    def _page_prepare(self, tx: _Tx, frame: PageFrame) -> Union[PageRefused, tuple[str, ...]]:
        cfg = self.config
        a = tx.authority()
        applied = required_cursor(a)
        epochs = a.policy_epochs

        def refuse(code: RefusalCode) -> PageRefused:
            return PageRefused(frame.attempt_id, code, epochs, applied)

        if a.attempt_id != frame.attempt_id or a.gate.is_open:
            return refuse(R.RECONCILIATION_ATTEMPT_MISMATCH)
        if not page_fits(cfg, frame, frame.records, epochs, applied):
            return refuse(R.ACK_PAGE_TOO_LARGE)
        attempt, project = frame.attempt_id, frame.project_id
        staged = tx.stage_project(attempt, project)
        if staged is None:
            return refuse(R.PROJECT_NOT_IN_ATTEMPT)
        live_version = tx.project_version(project)
        live_version = 0 if live_version is None else live_version
        if frame.record_version < live_version:
            return refuse(R.RECORD_VERSION_STALE)
        if frame.after is None:
            tx.reset_staged_project(attempt, project)
            tx.put_stage_project(attempt, project, StageProject(frame.record_version, None, False))
        elif staged.complete or staged.record_version != frame.record_version or staged.last_key != frame.after:
            return refuse(R.SNAPSHOT_PAGE_MISMATCH)
        fetch_keys: list[str] = []
        retained_states: list[BindingState] = []
        same_version_conflict = False
        for state in frame.records:
            if frame.record_version == live_version:
                before = tx.stage_record(attempt, project, state.key)
                if before is None or state_order(state, before.state) is not Order.SAME:
                    same_version_conflict = True
            result, fetch = self._retain_stage_state(tx, attempt, project, state, epochs)
            retained_states.append(result.state)
            if fetch:
                fetch_keys.append(result.state.key)
        # Refusals from here on leave the staged writes above committed (as the seed).
        if not page_fits(cfg, frame, retained_states, epochs, applied):
            return refuse(R.ACK_PAGE_TOO_LARGE)
        if same_version_conflict:
            return refuse(R.SNAPSHOT_VERSION_CONFLICT)
        if frame.complete and frame.record_version == live_version:
            live_rows = [row for _, row in tx.live_records(project)]
            staged_rows = [row for _, row in tx.stage_records(attempt, project) if row.present]
            if len(live_rows) != len(staged_rows) or any(
                l.state != s.state for l, s in zip(live_rows, staged_rows)
            ):
                return refuse(R.SNAPSHOT_VERSION_CONFLICT)
        last_key = frame.records[-1].key if frame.records else None
        tx.put_stage_project(attempt, project, StageProject(frame.record_version, last_key, frame.complete))
        return tuple(fetch_keys)

    def _page_final(self, tx: _Tx, frame: PageFrame) -> PageResult:
        a = tx.authority()
        applied = required_cursor(a)
        epochs = a.policy_epochs
        if a.attempt_id != frame.attempt_id or a.gate.is_open:
            return PageRefused(frame.attempt_id, R.RECONCILIATION_ATTEMPT_MISMATCH, epochs, applied)
        results = []
        for state in frame.records:
            row = tx.stage_record(frame.attempt_id, frame.project_id, state.key)
            if row is None:
                raise CorruptReplica("staged replica page record disappeared")
            results.append(row.result())
        return PageOk(
            frame.attempt_id, frame.project_id, frame.after, frame.record_version, tuple(results),
            frame.complete, epochs, applied,
        )

    # -- apply_delivery ----------------------------------------------------

    @staticmethod
    def _transient(a: Authority, code: RefusalCode) -> ApplyRefused:
        """``transientApply``: refused, not consumed; the cloud may send it again."""
        return ApplyRefused(False, False, a.attempt_id, code, a.policy_epochs, required_cursor(a))

    def _save_receipt(self, tx: _Tx, frame: ApplyFrame, mac: str, *, ok: bool,
                      code: Optional[RefusalCode] = None, result: Optional[RecordResult] = None,
                      record_version: Optional[int] = None) -> None:
        """``saveReceipt``: record the answer and consume the sequence."""
        k = (frame.delivery.stream_id, frame.delivery.sequence)
        if tx.receipt_row(*k) is not None:  # the primary key would reject it
            raise CorruptReplica(f"replica receipt {k} already exists")
        tx.put_receipt(
            stream_id=k[0], sequence=k[1], request_mac=mac,
            result_json=None if result is None else _json(wire.encode(result)),
            record_version=record_version, ok=ok, code=None if code is None else code.value,
        )
        tx.set_authority(applied_sequence=frame.delivery.sequence)

    def apply_delivery(self, frame: ApplyFrame, during_fetch: Optional[Callable[[], None]] = None) -> ApplyResult:
        """``applyProjectEnvReplicaDelivery``: apply or replay exactly one ordered delta."""
        frame = wire.parse_apply(wire.encode(frame))
        mac = request_mac(self.sealer, frame)
        window = _ReadWindow(self.reader, during_fetch)
        with self._write() as tx:
            prepared = self._delivery_prepare(tx, frame, mac)
        if not isinstance(prepared, tuple):
            return prepared
        result, fetch, actual_version, attempt = prepared
        if fetch:
            if attempt is None:
                self._materialize_live(frame.project_id, frame.state.key, window)
            else:
                self._materialize_stage(attempt, frame.project_id, frame.state.key, window)
        with self._write() as tx:
            return self._delivery_final(tx, frame, mac, actual_version, attempt)

    def _delivery_prepare(self, tx: _Tx, frame: ApplyFrame, mac: str):
        """The first transaction: a result, or (result, fetch, actual version, attempt)."""
        a = tx.authority()
        if not a.gate.activated:
            raise CorruptReplica("replica delivery arrived before activation")
        current = required_cursor(a)
        if frame.delivery.stream_id != current.stream_id:
            return self._transient(a, R.STREAM_MISMATCH)
        if frame.delivery.sequence <= current.sequence:
            row = tx.receipt_row(frame.delivery.stream_id, frame.delivery.sequence)
            if row is None:
                return self._transient(a, R.RECEIPT_MISSING)
            if not Sealer.same_mac(row.request_mac, mac):
                return ApplyRefused(True, True, a.attempt_id, R.DELIVERY_CONFLICT, a.policy_epochs, current)
            return self._receipt_result(_receipt_of_row(row), a, frame.project_id)
        if frame.delivery.sequence != current.sequence + 1:
            return self._transient(a, R.DELIVERY_GAP)
        if (
            frame.reconciliation_attempt_id is not None
            if a.gate.is_open
            else (a.attempt_id is None or frame.reconciliation_attempt_id != a.attempt_id)
        ):
            return self._transient(a, R.RECONCILIATION_ATTEMPT_MISMATCH)
        epochs = a.policy_epochs

        def consumed(code: RefusalCode) -> ApplyRefused:
            self._save_receipt(tx, frame, mac, ok=False, code=code)
            after = tx.authority()
            return ApplyRefused(False, True, after.attempt_id, code, epochs, required_cursor(after))

        key = frame.state.key
        project = frame.project_id
        if a.attempt_id is not None:
            staged = tx.stage_project(a.attempt_id, project)
            if staged is None or not staged.complete or staged.record_version is None:
                return self._transient(a, R.SNAPSHOT_INCOMPLETE)
            if frame.record_version > staged.record_version + 1:
                return self._transient(a, R.RECORD_VERSION_GAP)
            stored = tx.stage_record(a.attempt_id, project, key)
            order = Order.NEWER if stored is None else state_order(frame.state, stored.state)
            advances = (
                frame.record_version == staged.record_version + 1
                and order is Order.NEWER
                and is_reachable_record_advance(frame.state, None if stored is None else stored.state)
            )
            if advances:
                result, fetch = self._retain_stage_state(tx, a.attempt_id, project, frame.state, epochs)
                actual = frame.record_version
                tx.put_stage_project(a.attempt_id, project, replace(staged, record_version=actual))
                return result, fetch, actual, a.attempt_id
            if stored is not None:
                # A lower/equal version, an older state, or an invalid transition is
                # answered with what this replica actually retained.
                result, fetch = self._retained_existing(stored, epochs)
                return result, fetch, staged.record_version, a.attempt_id
            return consumed(R.RECORD_VERSION_CONFLICT)
        project_version = tx.project_version(project)
        if project_version is None:
            return consumed(R.PROJECT_NOT_IN_REPLICA)
        if frame.record_version > project_version + 1:
            return self._transient(a, R.RECORD_VERSION_GAP)
        stored = tx.live_record(project, key)
        order = Order.NEWER if stored is None else state_order(frame.state, stored.state)
        advances = (
            frame.record_version == project_version + 1
            and order is Order.NEWER
            and is_reachable_record_advance(frame.state, None if stored is None else stored.state)
        )
        if advances:
            result, fetch = self._retain_live_state(tx, project, frame.state, epochs)
            actual = frame.record_version
            tx.set_project_version(project, actual)
            return result, fetch, actual, None
        if stored is not None:
            result, fetch = self._retained_existing(stored, epochs)
            return result, fetch, project_version, None
        return consumed(R.RECORD_VERSION_CONFLICT)

    @staticmethod
    def _receipt_result(receipt: Receipt, a: Authority, project_id: str) -> ApplyResult:
        """``receiptResult``: the stored answer, with today's epochs and cursor."""
        applied = required_cursor(a)
        if not receipt.ok:
            if receipt.code is None:
                raise CorruptReplica("replica refusal has no code")
            return ApplyRefused(True, True, a.attempt_id, receipt.code, a.policy_epochs, applied)
        if receipt.result is None or receipt.record_version is None:
            raise CorruptReplica("stored replica delivery result is invalid")
        return ApplyOk(True, a.attempt_id, project_id, receipt.record_version, receipt.result,
                       a.policy_epochs, applied)

    def _delivery_final(self, tx: _Tx, frame: ApplyFrame, mac: str, actual_version: int,
                        attempt: Optional[str]) -> ApplyResult:
        a = tx.authority()
        current = required_cursor(a)
        if (
            frame.delivery.stream_id != current.stream_id
            or frame.delivery.sequence != current.sequence + 1
            or a.attempt_id != attempt
        ):
            return self._transient(a, R.REPLICA_STATE_CHANGED)
        if attempt is None:
            row = tx.live_record(frame.project_id, frame.state.key)
        else:
            row = tx.stage_record(attempt, frame.project_id, frame.state.key)
        if row is None:
            return self._transient(a, R.REPLICA_STATE_MISSING)
        result = row.result()
        self._save_receipt(tx, frame, mac, ok=True, result=result, record_version=actual_version)
        after = tx.authority()
        return ApplyOk(False, after.attempt_id, frame.project_id, actual_version, result,
                       after.policy_epochs, required_cursor(after))

    # -- complete, close_gate ----------------------------------------------

    def complete(self, frame: CommitFrame) -> CommitResult:
        """``completeProjectEnvReplica``: promote the exact staged view and open the gate atomically."""
        frame = wire.parse_commit(wire.encode(frame))
        with self._write() as tx:
            return self._complete(tx, frame)

    def _complete(self, tx: _Tx, frame: CommitFrame) -> CommitResult:
        a = tx.authority()
        applied = required_cursor(a)
        epochs = a.policy_epochs

        def refuse(code: RefusalCode) -> CommitRefused:
            return CommitRefused(frame.attempt_id, code, epochs, applied)

        if a.attempt_id != frame.attempt_id or a.gate.is_open:
            return refuse(R.RECONCILIATION_ATTEMPT_MISMATCH)
        if frame.high_water != applied:
            return refuse(R.DELIVERY_INCOMPLETE)
        attempt = frame.attempt_id
        rows = tx._all(select(S.stage_projects).where(S.stage_projects.c.attempt_id == attempt))
        staged_projects = sorted(((r.project_id, _stage_project_of_row(r)) for r in rows), key=lambda kv: kv[0])
        if len(staged_projects) != len(frame.versions) or any(
            not sp.complete
            or sp.record_version is None
            or p != frame.versions[i].project_id
            or sp.record_version != frame.versions[i].record_version
            for i, (p, sp) in enumerate(staged_projects)
        ):
            return refuse(R.RECORD_VERSION_CHANGED)
        records = [(k, row) for k, row in tx.stage_records(attempt) if row.present]
        value_rows = {
            (r.project_id, r.key): r
            for r in tx._all(select(S.stage_values).where(S.stage_values.c.attempt_id == attempt))
        }
        for k, row in records:
            vrow = value_rows.get(k)
            if row.mat.kind is MatKind.INSTALLED:
                if not _value_matches_head(vrow, row.state.head, "stage_values", (attempt, *k)):
                    raise CorruptReplica("staged installed value does not match its replica head")
            elif vrow is not None:
                raise CorruptReplica("staged withheld replica record still has a value")
        live_keys = {k for k, _ in records}
        tx._run(delete(S.values))
        tx._run(delete(S.records))
        tx._run(delete(S.projects))
        if staged_projects:
            tx._run(_Sql.insert_projects,
                    [{"project_id": p, "record_version": sp.record_version} for p, sp in staged_projects])
        for (p, _), row in records:
            tx.put_live_record(p, row.state, row.mat)
        promoted = [
            {"project_id": k[0], "key": k[1], "revision": vrow.revision, "generation": vrow.generation,
             "value_ref_json": vrow.value_ref_json, "value_enc": vrow.value_enc}
            for k, vrow in sorted(value_rows.items(), key=lambda kv: kv[0]) if k in live_keys
        ]
        if promoted:
            tx._run(_Sql.insert_live_values, promoted)
        tx.clear_stage()
        tx.set_authority(gate_open=True, attempt_id=None)
        return CommitOk(frame.attempt_id, epochs, applied)

    def close_gate(self) -> None:
        """``closeProjectEnvReplicaGate``: purge the attempt and close the gate (an inactive replica stays inactive)."""
        with self._write() as tx:
            tx.clear_stage()
            tx.set_authority(gate_open=False, attempt_id=None)

    # -- reads ---------------------------------------------------------------

    def read_status(self) -> Status:
        """``readProjectEnvReplicaStatus``."""
        with self._read() as tx:
            a = tx.authority()
            return Status(
                a.gate.activated, a.gate.is_open, a.attempt_id, a.org_id, cursor(a), a.policy_epochs,
                tuple(sorted(tx.projects())),
            )

    def is_ready(self) -> bool:
        """Activated, open, no attempt (the ready condition of ``awaitProjectEnvReplicaReady``)."""
        with self._read() as tx:
            a = tx.authority()
        return a.gate.activated and a.gate.is_open and a.attempt_id is None

    def await_ready(self, timeout: float) -> None:
        """Return once ready; ``TimeoutError`` at the deadline.

        Subscribe, then re-check: the change generation is taken before each
        check, so a commit between the check and the wait is never lost. Another
        process can change the file too, so the wait also wakes every 50 ms.
        """
        deadline = time.monotonic() + max(0.0, float(timeout))
        while True:
            with self._changed:
                seen = self._generation
            if self.is_ready():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the replica did not become ready before the deadline")
            with self._changed:
                if self._generation == seen:
                    self._changed.wait(min(READY_POLL_SECONDS, remaining))

    def _snapshot(self, tx: _Tx, project_ids) -> Optional[Snapshot]:
        a = tx.authority()
        if not a.gate.activated or not a.gate.is_open or a.attempt_id is not None:
            return None
        requested = list(project_ids)
        expected = sorted(set(requested))
        live_projects = tx.projects()
        if len(expected) != len(requested) or expected != sorted(live_projects):
            return None
        projects = []
        for project in requested:  # task order: the lead project wins duplicate keys
            version = live_projects.get(project)
            if version is None:
                raise CorruptReplica("replica project is missing")
            value_rows = tx.live_value_rows(project)
            entries = []
            for key, row in tx.live_records(project):
                head = row.state.head
                vrow = value_rows.pop(key, None)
                value = None
                if row.mat.kind is MatKind.INSTALLED:
                    if not _value_matches_head(vrow, head, "record_values", (project, key)):
                        raise CorruptReplica("installed replica value does not match its head")
                    value = self._open_value(vrow, "record_values", (project, key), project, key,
                                             head.value_ref).value
                elif vrow is not None:
                    raise CorruptReplica("withheld replica record still has a value")
                entries.append(SnapshotEntry(row.state, row.mat, value))
            if value_rows:
                raise CorruptReplica("replica value has no authority record")
            projects.append(SnapshotProject(project, version, tuple(entries)))
        return Snapshot(tuple(projects))

    def read_snapshot(self, project_ids) -> Optional[Snapshot]:
        """``readProjectEnvReplicaSnapshot``: the served view of exactly these projects, or None.

        Fails closed: any mismatch, corrupt row or seal that does not open gives None.
        """
        try:
            with self._read() as tx:
                return self._snapshot(tx, project_ids)
        except Exception:  # the seed's catch-all: never serve on doubt
            return None

    def snapshot_diagnostics(self, project_ids) -> Optional[str]:
        """Why ``read_snapshot`` fails closed (None when it serves); never includes a value."""
        try:
            with self._read() as tx:
                a = tx.authority()
                if not a.gate.activated:
                    return "replica is not activated"
                if not a.gate.is_open or a.attempt_id is not None:
                    return "serving gate is closed"
                if self._snapshot(tx, project_ids) is None:
                    return "requested projects are not exactly the replica's projects"
        except ReplicaError as error:
            return error.message
        except Exception as error:  # a database error: its type only (messages may quote parameters)
            return f"replica read failed ({type(error).__name__})"
        return None

    def list_receipts(self) -> tuple[ReceiptView, ...]:
        """``listProjectEnvReplicaReceipts`` without MACs, ordered by stream and sequence."""
        with self._read() as tx:
            rows = tx._all(select(S.receipts))
        receipts = sorted(((r.stream_id, r.sequence), _receipt_of_row(r)) for r in rows)
        return tuple(ReceiptView(s, n, r.ok, r.code, r.result, r.record_version) for (s, n), r in receipts)

    def to_model_state(self) -> State:
        """Every table read back into the model's ``State`` (values opened; receipts carry their MAC)."""
        with self._read() as tx:
            authority = tx.authority()
            projects = FMap(tx.projects())
            records = {}
            for r in tx._all(select(S.records)):
                records[(r.project_id, r.key)] = LiveRow(*_record_of_row(r, "records", (r.project_id, r.key)))
            values = {}
            for r in tx._all(select(S.values)):
                ident = (r.project_id, r.key)
                values[ident] = self._open_value(r, "record_values", ident, r.project_id, r.key)
            stage_projects = {
                (r.attempt_id, r.project_id): _stage_project_of_row(r) for r in tx._all(select(S.stage_projects))
            }
            stage_records = {}
            for r in tx._all(select(S.stage_records)):
                ident = (r.attempt_id, r.project_id, r.key)
                state, mat = _record_of_row(r, "stage_records", ident)
                stage_records[ident] = StageRow(state, mat, bool(r.present))
            stage_values = {}
            for r in tx._all(select(S.stage_values)):
                ident = (r.attempt_id, r.project_id, r.key)
                stage_values[ident] = self._open_value(r, "stage_values", ident, r.project_id, r.key)
            receipts = {(r.stream_id, r.sequence): _receipt_of_row(r) for r in tx._all(select(S.receipts))}
        return State(
            authority=authority,
            projects=projects,
            records=FMap(records),
            values=FMap(values),
            stage_projects=FMap(stage_projects),
            stage_records=FMap(stage_records),
            stage_values=FMap(stage_values),
            receipts=FMap(receipts),
            inflight=(),
            store_on=self.reader is not None,
        )

    def close(self) -> None:
        """Close the connection and the engine (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
            self._engine.dispose()
        self._notify()

    def __enter__(self) -> "SqliteReplica":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteReplica({str(self.path)!r}, variant={self.config.variant.value!r})"
