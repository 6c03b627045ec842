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
  ``# FIX(F1)`` / ``# FIX(F2)`` / ``# FIX(F3)`` do. F3 is the text of a value:
  ``seed`` and ``fix-f1`` seal it as the seed's Node does
  (``Buffer.from(value, "utf8")``: a lone surrogate becomes U+FFFD), ``fixed``
  seals exactly the value fetched (``impl.sealing.TextEncoding``). ``fixed``
  also re-judges each served record against the kept epochs and its binding
  when it reads a snapshot (defence in depth; it never changes an answer of
  an untampered replica).
* Every stored fact is authenticated at rest (``impl.integrity``, through
  ``impl.tables``): rows carry tags, sets carry digests, the authority row
  counts writes. A tampered row, set or whole file (with an anchor) is
  ``TamperDetected``: the snapshot fails closed, ``snapshot_diagnostics`` and
  ``verify`` name the table and row, and no write launders it.
* Rows are rebuilt through the wire parsers of ``spec.wire`` on every read; a
  row that does not parse is ``CorruptReplica`` naming its table and key,
  never a value. Values are sealed at rest (``impl.sealing``), bound to
  project, key, revision, generation and value reference: a blob moved to
  another row does not open, and the snapshot read then fails closed.
* Files (``impl.files``): opening never writes unless it creates the replica
  (atomically, owner-only); SQLite's lock errors are ``ReplicaBusy`` and I/O
  errors ``ReplicaIOError``, never a ``None`` snapshot.
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

import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError

from envreplica.impl import files, writer
from envreplica.impl.anchor import Anchor
from envreplica.impl.engine import open_engine, read_transaction, write_transaction
from envreplica.impl.files import (
    PathKind,
    ReplicaKeyMismatch,
    ReplicaLock,
    ReplicaPathError,
    ReplicaUnavailable,
)
from envreplica.impl.integrity import TamperDetected
from envreplica.impl.sealing import ENV_KEY, ENV_KEY_FILE, Sealer, SealError, TextEncoding
from envreplica.impl.tables import (
    Tables,
    count_of,
    json_text,
    receipt_of_row,
    value_ref_of_row,
    where_text,
)
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

__all__ = ["SqliteReplica", "request_mac", "with_macs", "READY_POLL_SECONDS"]

R = RefusalCode

#: How often ``await_ready`` re-reads the file (another process may change it).
READY_POLL_SECONDS = 0.05



def _identity(path: Path) -> Optional[tuple[int, int]]:
    """(device, inode) of the file at ``path``, or None when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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
# Rows
# ---------------------------------------------------------------------------


def _value_matches_head(vrow, head, table: str, ident: tuple) -> bool:
    """The value row was fetched for exactly this head (revision, generation, reference)."""
    if vrow is None or head.tombstone or head.value_ref is None:
        return False
    if vrow.revision != head.revision or vrow.generation != head.generation:
        return False
    try:
        return value_ref_of_row(vrow, table, ident) == head.value_ref
    except CorruptReplica:  # an unreadable reference matches no head
        return False


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
    """The replica on one SQLite file; behaves exactly like ``envreplica.model.replica``.

    Opening it checks the file and takes no write lock unless it creates the
    replica (``create=True`` and nothing at ``path``): a missing directory, a
    directory, a file that is not an envreplica replica, a replica of another
    version or sealed under another master key are refused (``impl.files``,
    ``impl.writer``). ``created_by`` marks a replica it creates, and then an
    existing replica without that mark is refused too (the adapter opens only
    its own). While open it holds ``PATH.lock`` shared (``exclusive=True``:
    alone, as ``envreplica adapter`` does) and notices when the file at
    ``path`` is removed or replaced.
    """

    def __init__(
        self,
        path: Union[str, Path],
        *,
        sealer: Sealer,
        reader: Optional[ValueReader],
        config: ModelConfig = ModelConfig(),
        synchronous: str = "FULL",
        create: bool = True,
        exclusive: bool = False,
        anchor: Optional[Anchor] = None,
        created_by: Optional[str] = None,
        busy_timeout_ms: int = 5000,
    ) -> None:
        if not isinstance(sealer, Sealer):
            raise TypeError("sealer must be an impl.sealing.Sealer")
        self.path = Path(path)
        self.sealer = sealer
        self.reader = reader
        self.config = config
        self.anchor = anchor
        self._lock = threading.RLock()  # one transaction at a time on the held connection
        self._changed = threading.Condition()
        self._generation = 0  # bumped after each committed change to the authority row or live view
        self._floor = 0  # the highest write counter seen: a file below it was rolled back
        self._closed = True
        self._holder: Optional[ReplicaLock] = None
        self._engine = None
        self._conn = None
        found = files.probe(self.path)
        if found.kind is PathKind.MISSING and not create:
            raise ReplicaPathError(f"{self.path}: no replica there (the file does not exist)")
        if found.kind is not PathKind.MISSING:
            files.refuse_unusable(found, what="a replica")
        if created_by is not None and found.kind is PathKind.REPLICA and found.meta.get("created_by") != created_by:
            raise ReplicaPathError(
                f"{self.path} is an envreplica replica that {created_by} did not create; {created_by} opens only "
                f"a replica it created (its reset empties the replica). Choose a new path")
        self._holder = ReplicaLock(self.path, exclusive=exclusive)
        try:
            if found.kind is PathKind.MISSING:
                with self._sql_errors():
                    self._create(created_by)
            self._identity = _identity(self.path)
            self._engine = open_engine(self.path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
            with self._sql_errors():
                self._conn = self._engine.connect()
                self._closed = False
                self.replica_id = self._open_file()
            if self.anchor is not None:
                self._floor = max(self._floor, self.anchor.read(self.replica_id))
                with self._read():  # refuses a file below its anchor
                    pass
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_environment(cls, path, *, reader: Optional[ValueReader], config: ModelConfig = ModelConfig(),
                         synchronous: str = "FULL", env=None, **options) -> "SqliteReplica":
        """Open a replica sealed under the configured master key.

        The key comes from ``ENVREPLICA_MASTER_KEY`` (64 hex digits) or
        ``ENVREPLICA_MASTER_KEY_FILE`` (an owner-only file); anything else
        raises ``KeyConfigError`` saying how to set one (``impl.sealing``).
        """
        from envreplica.impl.sealing import load_master_key

        key = load_master_key(os.environ if env is None else env)
        return cls(path, sealer=Sealer(key), reader=reader, config=config, synchronous=synchronous, **options)

    # -- opening, emptying ------------------------------------------------

    def _create(self, created_by: Optional[str]) -> None:
        """Create a complete, stamped, empty replica at ``path``, atomically.

        It is built in a hidden file beside ``path`` (rollback journal, FULL
        sync), then hard-linked into place, which fails if anything appeared
        there: a kill at any moment leaves either no replica or a whole one,
        and never replaces a file. The hidden file is removed.
        """
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.creating")
        files.create_private(tmp)
        try:
            engine = open_engine(tmp, synchronous="FULL", journal_mode="DELETE")
            try:
                with engine.connect() as conn, write_transaction(conn):
                    writer.stamp(conn, key_check=self.sealer.rows.key_check, created_by=created_by)
                    Tables(conn, self.sealer.rows).insert_initial_authority()
            finally:
                engine.dispose()
            files.fsync_path(tmp)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                raise ReplicaPathError(f"{self.path}: another process created a file at this path at the same "
                                       f"moment; nothing was overwritten. Open it again") from None
            files.fsync_path(self.path.parent)
        finally:
            for leftover in (tmp, Path(f"{tmp}-journal")):
                try:
                    leftover.unlink()
                except FileNotFoundError:
                    pass

    def _open_file(self) -> str:
        """Check the file's writer contract and master key (a read transaction); return the replica's id.

        A file of a newer envreplica is refused, an older one must be migrated
        first (``WriterVersionError``); one sealed under another master key is
        refused (``ReplicaKeyMismatch``).
        """
        with read_transaction(self._conn) as conn:
            version = writer.check_writer(conn)
            meta = writer.read_meta(conn) or {}
        if version is None:
            raise ReplicaPathError(f"{self.path}: an envreplica store with no writer contract recorded and no rows "
                                   f"(not created by this envreplica); move it aside")
        if meta.get("key_check") != self.sealer.rows.key_check:
            raise ReplicaKeyMismatch(
                f"{self.path}: this replica was sealed under another master key than the one configured (its key "
                f"check differs). Set {ENV_KEY} or {ENV_KEY_FILE} to the key it was created with; a replica cannot "
                f"be read under another key (move it aside and let the cloud re-send a snapshot)")
        return meta.get("replica_id", "")

    def empty(self, sealer: Optional[Sealer] = None) -> None:
        """Delete every row, under a new ``sealer`` if given: a fresh, empty replica in the same file.

        The write counter keeps counting (an anchor never sees it go back).
        """
        sealer = self.sealer if sealer is None else sealer
        with self._lock, self._sql_errors():
            self._ensure_open()
            with write_transaction(self._conn) as conn:
                counter = writer.wipe(conn, key_check=sealer.rows.key_check)
                Tables(conn, sealer.rows).insert_initial_authority(counter + 1)
            self.sealer = sealer
            self._floor = counter + 1
        if self.anchor is not None:
            self.anchor.advance(self.replica_id, self._floor)
        self._notify()

    # -- plumbing --------------------------------------------------------

    @contextmanager
    def _sql_errors(self) -> Iterator[None]:
        """SQLite errors as envreplica's: a constraint is corrupt, a lock busy, the disk I/O."""
        try:
            yield
        except (IntegrityError, sqlite3.IntegrityError) as error:
            # The message names the constraint (never a bound value).
            raise CorruptReplica(f"replica constraint violated: {getattr(error, 'orig', None) or error}") from None
        except (OperationalError, DatabaseError, sqlite3.OperationalError, sqlite3.DatabaseError) as error:
            raise files.sqlite_error(error, self.path) from None

    def _check_file(self, tx: Tables) -> None:
        """The file is still the one opened, and not older than any counter seen (nor the anchor)."""
        if _identity(self.path) != self._identity:
            raise ReplicaPathError(f"{self.path} was removed or replaced while this replica had it open; nothing "
                                   f"more is read or written through it. Open the replica again")
        if tx.write_counter < self._floor:
            raise TamperDetected(
                f"authority row: the write counter is {tx.write_counter}, below {self._floor}, which this replica "
                f"or its anchor has already seen: the whole file was rolled back to an older copy")

    @contextmanager
    def _write(self) -> Iterator[Tables]:
        """One ``BEGIN IMMEDIATE`` transaction: commits on return (refusals too), rolls back on error.

        ``Tables.flush`` writes the changed parents and the authority row just
        before the commit; the anchor, if any, advances just after it.
        """
        self._ensure_open()
        tx: Optional[Tables] = None
        moved = False
        with self._lock:
            with self._sql_errors():
                with write_transaction(self._conn) as conn:
                    tx = Tables(conn, self.sealer.rows)
                    self._check_file(tx)
                    yield tx
                    moved = tx.flush()
            if moved:
                self._floor = tx.write_counter
                if self.anchor is not None:
                    self.anchor.advance(self.replica_id, self._floor)
        if tx is not None and tx.notify:
            self._notify()

    @contextmanager
    def _read(self) -> Iterator[Tables]:
        """One read-only transaction (deferred ``BEGIN``: one consistent WAL snapshot)."""
        self._ensure_open()
        with self._lock:
            with self._sql_errors():
                with read_transaction(self._conn) as conn:
                    tx = Tables(conn, self.sealer.rows)
                    self._check_file(tx)
                    self._floor = tx.write_counter
                    yield tx

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
            value_ref=wire.encode(head.value_ref), text=self._text,
        )

    @property
    def _text(self) -> TextEncoding:
        """How a value's text becomes the bytes sealed: the seed's Node encoding, or exactly (FIX(F3))."""
        return TextEncoding.NODE_UTF8 if self.config.variant is not Variant.FIXED else TextEncoding.EXACT

    def _open_value(self, vrow, table: str, ident: tuple, project: str, key: str,
                    ref: Optional[ValueRef] = None) -> StoredValue:
        """Open a value row's sealed blob for its own record fields (``ref``: already parsed)."""
        ref = value_ref_of_row(vrow, table, ident) if ref is None else ref
        if not count_of(vrow.revision) or not count_of(vrow.generation):
            raise CorruptReplica(f"stored replica value is invalid ({where_text(table, ident)})")
        try:
            value = self.sealer.open(
                vrow.value_enc, project_id=project, key=key, revision=vrow.revision,
                generation=vrow.generation, value_ref=wire.encode(ref),
            )
        except SealError as error:
            raise TamperDetected(
                f"sealed replica value does not open for its record ({where_text(table, ident)}): {error}"
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
                if current.mat.kind is not MatKind.INSTALLED:
                    tx.assume_no_value("stage_values", attempt, project, key)
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
                if current.mat.kind is not MatKind.INSTALLED:
                    tx.assume_no_value("record_values", project, key)
                tx.put_live_value(project, key, before.head, blob)
                tx.put_live_record(project, before, INSTALLED)
            else:
                tx.delete_live_value(project, key)
                tx.put_live_record(project, before, unavailable(fetched.reason))

    # -- retain (``retainStageState`` / ``retainLiveState``) ---------------

    def _retain_stage_state(
        self, tx: Tables, attempt: str, project: str, incoming: BindingState, epochs: tuple[int, ...]
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
        self, tx: Tables, project: str, incoming: BindingState, epochs: tuple[int, ...]
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
                tx.clear_receipts()
            tx.clear_stage()
            for project in frame.project_ids:
                tx.put_stage_project(frame.attempt_id, project, StageProject(None, None, False))
                tx.reset_staged_project(frame.attempt_id, project)
            sequence = 0 if changed_stream else a.applied_sequence
            tx.set_authority(
                activated=True, gate_open=False, stream_id=frame.stream_id, applied_sequence=sequence,
                attempt_id=frame.attempt_id, org_id=org_id, policy_epochs_json=json_text(list(epochs)),
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

    def _page_prepare(self, tx: Tables, frame: PageFrame) -> Union[PageRefused, tuple[str, ...]]:
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

    def _page_final(self, tx: Tables, frame: PageFrame) -> PageResult:
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

    def _save_receipt(self, tx: Tables, frame: ApplyFrame, mac: str, *, ok: bool,
                      code: Optional[RefusalCode] = None, result: Optional[RecordResult] = None,
                      record_version: Optional[int] = None) -> None:
        """``saveReceipt``: record the answer and consume the sequence."""
        k = (frame.delivery.stream_id, frame.delivery.sequence)
        if tx.receipt_row(*k) is not None:  # the primary key would reject it
            raise CorruptReplica(f"replica receipt {k} already exists")
        tx.put_receipt(
            stream_id=k[0], sequence=k[1], request_mac=mac,
            result_json=None if result is None else json_text(wire.encode(result)),
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

    def _delivery_prepare(self, tx: Tables, frame: ApplyFrame, mac: str):
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
                # Unreachable unless the file was changed (receipts cover 1..applied): the set's
                # digest names the tamper; if it somehow verifies, answer as the seed does.
                tx.verified_receipts()
                return self._transient(a, R.RECEIPT_MISSING)
            if not Sealer.same_mac(row.request_mac, mac):
                return ApplyRefused(True, True, a.attempt_id, R.DELIVERY_CONFLICT, a.policy_epochs, current)
            return self._receipt_result(receipt_of_row(row), a, frame.project_id)
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

    def _delivery_final(self, tx: Tables, frame: ApplyFrame, mac: str, actual_version: int,
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

    def _complete(self, tx: Tables, frame: CommitFrame) -> CommitResult:
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
        staged = {p: view for (a_id, p), view in tx.verified_stage().items() if a_id == attempt}
        staged_projects = sorted(((p, sp) for p, (sp, _) in staged.items()), key=lambda kv: kv[0])
        if len(staged_projects) != len(frame.versions) or any(
            not sp.complete
            or sp.record_version is None
            or p != frame.versions[i].project_id
            or sp.record_version != frame.versions[i].record_version
            for i, (p, sp) in enumerate(staged_projects)
        ):
            return refuse(R.RECORD_VERSION_CHANGED)
        promoted = []
        for project, (_, view) in sorted(staged.items()):
            for key, row in view.records:
                if not row.present:
                    continue
                vrow = view.values.get(key)
                if row.mat.kind is MatKind.INSTALLED:
                    if not _value_matches_head(vrow, row.state.head, "stage_values", (attempt, project, key)):
                        raise CorruptReplica("staged installed value does not match its replica head")
                elif vrow is not None:
                    raise CorruptReplica("staged withheld replica record still has a value")
                promoted.append((project, row, vrow))
        tx.replace_live((p, sp.record_version) for p, sp in staged_projects)
        for project, row, vrow in promoted:
            tx.put_live_record(project, row.state, row.mat)
            if vrow is not None:
                # Sealed blobs move as they are: their seal binds project, key and head, not the view.
                tx.put_live_value_row(project, row.state.key, vrow)
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

    def _snapshot(self, tx: Tables, project_ids) -> Optional[Snapshot]:
        a = tx.authority()
        if not a.gate.activated or not a.gate.is_open or a.attempt_id is not None:
            return None
        requested = list(project_ids)
        expected = sorted(set(requested))
        live_projects = tx.projects()  # the project set, verified against the authority row
        if len(expected) != len(requested) or expected != sorted(live_projects):
            return None
        rejudge = self.config.variant is Variant.FIXED
        projects = []
        for project in requested:  # task order: the lead project wins duplicate keys
            version = live_projects.get(project)
            if version is None:
                raise CorruptReplica("replica project is missing")
            view = tx.verified_live_project(project)  # every row, and the set, verified
            value_rows = dict(view.values)
            entries = []
            for key, row in view.records:
                head = row.state.head
                vrow = value_rows.pop(key, None)
                value = None
                if row.mat.kind is MatKind.INSTALLED:
                    if not _value_matches_head(vrow, head, "record_values", (project, key)):
                        raise CorruptReplica("installed replica value does not match its head")
                    if rejudge and desired_materialization(row.state, a.policy_epochs).kind is MatKind.WITHHELD:
                        # Defence in depth (variant fixed): serve nothing the kept policy or binding withholds.
                        raise CorruptReplica(f"records row {project}/{key} is installed, but its binding or policy "
                                             f"epoch withholds it under the kept epochs; nothing is served")
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
        except (ReplicaUnavailable, ReplicaPathError):
            raise  # a lock or the disk is not "nothing to serve": the caller must see it
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
        except (ReplicaUnavailable, ReplicaPathError) as error:
            return str(error)
        except Exception as error:  # anything else: its type only (messages may quote parameters)
            return f"replica read failed ({type(error).__name__})"
        return None

    def list_receipts(self) -> tuple[ReceiptView, ...]:
        """``listProjectEnvReplicaReceipts`` without MACs, ordered by stream and sequence (the set verified)."""
        with self._read() as tx:
            rows = tx.verified_receipts()
        receipts = sorted(((r.stream_id, r.sequence), receipt_of_row(r)) for r in rows)
        return tuple(ReceiptView(s, n, r.ok, r.code, r.result, r.record_version) for (s, n), r in receipts)

    def to_model_state(self) -> State:
        """Every table read back into the model's ``State``, every row and set verified.

        Values are opened; receipts carry their MAC. Any tamper raises
        ``TamperDetected``.
        """
        with self._read() as tx:
            authority = tx.authority()
            live = tx.verified_live()
            stage = tx.verified_stage()
            receipt_rows = tx.verified_receipts()
        projects, records, values = {}, {}, {}
        for project, (version, view) in live.items():
            projects[project] = version
            for key, row in view.records:
                records[(project, key)] = row
            for key, vrow in view.values.items():
                values[(project, key)] = self._open_value(vrow, "record_values", (project, key), project, key)
        stage_projects, stage_records, stage_values = {}, {}, {}
        for (attempt, project), (sp, view) in stage.items():
            stage_projects[(attempt, project)] = sp
            for key, row in view.records:
                stage_records[(attempt, project, key)] = row
            for key, vrow in view.values.items():
                ident = (attempt, project, key)
                stage_values[ident] = self._open_value(vrow, "stage_values", ident, project, key)
        receipts = {(r.stream_id, r.sequence): receipt_of_row(r) for r in receipt_rows}
        return State(
            authority=authority,
            projects=FMap(projects),
            records=FMap(records),
            values=FMap(values),
            stage_projects=FMap(stage_projects),
            stage_records=FMap(stage_records),
            stage_values=FMap(stage_values),
            receipts=FMap(receipts),
            inflight=(),
            store_on=self.reader is not None,
        )

    def verify(self) -> list[str]:
        """Every check of integrity at rest: SQLite's own, then every row, set and seal. [] when all hold.

        Each problem names a table and a row, never a value.
        """
        problems: list[str] = []
        with self._lock, self._sql_errors():
            self._ensure_open()
            with read_transaction(self._conn) as conn:
                lines = [line for (line,) in conn.exec_driver_sql("PRAGMA integrity_check").fetchall()]
            problems += [f"SQLite integrity_check: {line}" for line in lines if line != "ok"]
        try:
            self.to_model_state()
        except ReplicaError as error:
            problems.append(error.message)
        return problems

    def close(self) -> None:
        """Close the connection and the engine, then release the holder lock (idempotent)."""
        with self._lock:
            was_open, self._closed = not self._closed, True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None
            if self._holder is not None:
                self._holder.release()
                self._holder = None
        if was_open:
            self._notify()

    def __enter__(self) -> "SqliteReplica":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteReplica({str(self.path)!r}, variant={self.config.variant.value!r})"
