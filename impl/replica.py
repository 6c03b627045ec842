"""The reference implementation of the replica protocol on SQLite.

What it does: ``SqliteReplica`` runs the seed's operations (``begin``,
``apply_page``, ``apply_delivery``, ``complete``, ``close_gate``) and reads
(``read_status``, ``read_snapshot``, ``list_receipts``, readiness,
``diagnose``) on one SQLite file with the tables of ``impl.schema``. It is an
encoding of ``project-env-replica.ts`` of its own: it imports nothing of the
executable model (``envreplica.model``), only the shared contract
(``spec.domain``, ``spec.wire``, ``spec.variants``). The conformance
lockstep holds the two encodings against each other, so a slip in either
shows as a divergence instead of agreeing with itself.

* Where each decision is made. The seed's pure decisions (``stateOrder``,
  ``isReachableRecordAdvance``, ``desiredMaterialization``, what retaining a
  record does, ``pageFits``, ``readMaterializedValue``) are
  ``impl.decisions``, written table-driven from the seed; ``decisions`` is
  the instance a replica uses. Three comparisons the seed makes over lists
  of rows are single SQL queries in ``impl.tables`` (a complete page's live
  versus staged states, a commit's project set and versions, a commit's
  values against their records). The cursor and organisation helpers are
  methods of the authority row (``impl.rows``). This module holds the
  transactions and what crosses them.
* Transactions sit exactly where the seed has them: ``begin``, ``complete``
  and ``close_gate`` are one transaction each; a page is a prepare
  transaction, then for each key to fetch a before-transaction, the
  value-store read outside any transaction, an after-transaction, and a final
  transaction; a delivery is a prepare transaction, an optional
  before/read/after, and a final transaction. Write transactions begin with
  ``BEGIN IMMEDIATE``, read-only ones with a plain ``BEGIN`` (``impl.engine``).
  ``after_commit``, when set, is called right after each write transaction
  commits (the crash hook of docs/protocol.md section 6: what it raises ends
  the operation there).
* A refusal is a normal return from inside its transaction, so whatever that
  transaction wrote commits (a page refused with ``snapshot_version_conflict``
  keeps its staged writes, as in the seed). ``CorruptReplica`` raised inside
  a transaction rolls back that transaction only; earlier transactions of the
  same operation stay committed. A SQLite constraint violation is a
  ``CorruptReplica`` too.
* The value-store read: ``Decisions.plan_read`` decides whether there is a
  read at all, ``impl.valuestores.ask`` asks the reader, and
  ``Decisions.judge_answer`` alone decides what the answer means. An
  operation given ``during_fetch`` calls it once, at its first real read,
  after the read returned and before its answer is used: the seed's ``await``
  window.
* Variants ``seed``, ``fix-f1`` and ``fixed`` differ exactly at the places
  marked ``# FIX(F1)`` / ``# FIX(F2)`` / ``# FIX(F3)`` (docs/findings.md). F3
  is the text of a value: ``seed`` and ``fix-f1`` seal it as the seed's Node
  does (``Buffer.from(value, "utf8")``: a lone surrogate becomes U+FFFD),
  ``fixed`` seals exactly the value fetched (``impl.sealing.TextEncoding``).
  ``fixed`` also re-judges each served record against the kept epochs and its
  binding when it reads a snapshot (defence in depth; it never changes an
  answer of an untampered replica).
* Every stored fact is authenticated at rest (``impl.integrity``, through
  ``impl.tables``): rows carry tags, sets carry digests, the authority row
  counts writes. A tampered row, set or whole file (with an anchor) is
  ``TamperDetected``: the snapshot fails closed, ``diagnose`` and ``verify``
  name the table and row, and no write launders it.
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
* ``export_state`` reads every table back, verified, values opened, as the
  ``state`` document of docs/protocol.md section 6 (JSON); turning it into
  the model's shape is the harness's business (``conformance.readback``).

Leaves out on purpose: notifications to other processes (a waiter re-checks
the file every 50 ms), timestamps (never read), restart (a new
``SqliteReplica`` on the same file is the restarted process; the host then
calls ``close_gate``), and schema migration (the writer-version contract of
``impl.writer`` is checked when the file is opened; its triggers fence every
write).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, Union, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError

from envreplica.impl import files, writer
from envreplica.impl.anchor import Anchor
from envreplica.impl.config import ReplicaConfig
from envreplica.impl.decisions import DECISIONS, Decisions, Fetched, Order, View
from envreplica.impl.engine import dbapi_of, open_engine, read_transaction, write_transaction
from envreplica.impl.files import (
    PathKind,
    ReplicaKeyMismatch,
    ReplicaLock,
    ReplicaPathError,
    ReplicaUnavailable,
)
from envreplica.impl.integrity import TamperDetected
from envreplica.impl.rows import AuthorityRow, LiveRecord, OpenedValue, StagedProject, StagedRecord, StoredReceipt
from envreplica.impl.sealing import ENV_KEY, ENV_KEY_FILE, Sealer, SealError, TextEncoding
from envreplica.impl.tables import (
    StoredRow,
    Tables,
    VerifiedProject,
    count_of,
    json_text,
    ref_json,
    receipt_of_row,
    value_ref_of_row,
    where_text,
)
from envreplica.impl.valuestores import ValueReader, ask
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
    Diagnosis,
    DiagnosisReason,
    Head,
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
    UnavailableReason,
    ValueRef,
    unavailable,
)
from envreplica.spec.variants import Variant

__all__ = ["SqliteReplica", "request_mac", "READY_POLL_SECONDS"]

R = RefusalCode

#: How often ``await_ready`` re-reads the file (another process may change it).
READY_POLL_SECONDS = 0.05


_identity = files.identity


def request_mac(sealer: Sealer, frame: Union[ApplyFrame, Any]) -> str:
    """The receipt MAC of a delivery (or of its ``DeliveryRequest``).

    It covers exactly ``kind``, ``projectId``, ``recordVersion``, ``state`` and
    ``delivery``, canonically serialised (``wire.encode`` of a
    ``DeliveryRequest`` carries ``"kind": "env.replica.apply"``).
    """
    request = frame.request() if isinstance(frame, ApplyFrame) else frame
    return sealer.mac(wire.canonical_json(request).encode("utf-8"))


# ---------------------------------------------------------------------------
# What an operation carries between its transactions
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


@dataclass(frozen=True, slots=True)
class _Slot:
    """Where one record lives (live, or staged under an attempt), and the table operations on it."""

    view: View
    attempt: Optional[str]  # the attempt of a staged record; None for a live one
    project: str
    key: str

    @property
    def _attempt(self) -> str:
        """The attempt of a staged record (every staged slot is built with its attempt)."""
        return cast(str, self.attempt)

    @property
    def _value_ident(self) -> tuple[str, ...]:
        return (self.project, self.key) if self.view is View.LIVE else (self._attempt, self.project, self.key)

    def record(self, tx: Tables) -> Union[LiveRecord, StagedRecord, None]:
        """The stored record (``LiveRecord`` / ``StagedRecord``), or None."""
        if self.view is View.LIVE:
            return tx.live_record(self.project, self.key)
        return tx.stage_record(self._attempt, self.project, self.key)

    def put(self, tx: Tables, state: BindingState, mat: Materialization, present: bool = True) -> None:
        """``putLiveRecord`` / ``putStageRecord`` (a staged record written here is present unless told)."""
        if self.view is View.LIVE:
            tx.put_live_record(self.project, state, mat)
        else:
            tx.put_stage_record(self._attempt, self.project, StagedRecord(state, mat, present))

    def drop_value(self, tx: Tables) -> None:
        if self.view is View.LIVE:
            tx.delete_live_value(self.project, self.key)
        else:
            tx.delete_stage_value(self._attempt, self.project, self.key)

    def put_value(self, tx: Tables, head: Head, blob: bytes, *, had_none: bool) -> None:
        """Write the value row fetched for ``head``; ``had_none``: the record was not installed (no row to read)."""
        table = "record_values" if self.view is View.LIVE else "stage_values"
        if had_none:
            tx.assume_no_value(table, *self._value_ident)
        if self.view is View.LIVE:
            tx.put_live_value(self.project, self.key, head, blob)
        else:
            tx.put_stage_value(self._attempt, self.project, self.key, head, blob)


#: ``SqliteReplica._retain``'s default ``stored``: the slot's record is not read yet.
_UNREAD: Any = object()


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What a delivery's prepare transaction decided, carried across its read window."""

    fetch: bool  # a value must be fetched for it
    version: int  # the record version to answer with
    attempt: Optional[str]  # the attempt it applied under (None: the live view)

    @property
    def view(self) -> View:
        return View.LIVE if self.attempt is None else View.STAGE


def _value_matches_head(vrow: Optional[StoredRow], head: Head) -> Optional[Any]:
    """``wire.encode(head.value_ref)`` when the value row was fetched for exactly this head, else None.

    The seed compares the reference as JSON text; the encoded reference is
    returned for ``_open_value``, so it is encoded once.
    """
    if (vrow is None or head.tombstone or head.value_ref is None
            or vrow.revision != head.revision or vrow.generation != head.generation):
        return None
    if vrow.value_ref_json != ref_json(head.value_ref):
        return None
    return wire.encode(head.value_ref)


# ---------------------------------------------------------------------------
# The replica
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TablesRead:
    """Every table of one read transaction, verified and parsed (``SqliteReplica.read_tables``)."""

    authority: AuthorityRow  # the authority row
    live: dict[str, tuple[int, VerifiedProject[LiveRecord]]]  # the live records, sorted by key, by project
    live_values: dict[tuple[str, str], OpenedValue]  # (project, key) -> OpenedValue
    stage: dict[tuple[str, str], tuple[StagedProject, VerifiedProject[StagedRecord]]]  # by (attempt, project)
    stage_values: dict[tuple[str, str, str], OpenedValue]  # (attempt, project, key) -> OpenedValue
    receipts: dict[tuple[str, int], StoredReceipt]  # (stream, sequence) -> StoredReceipt


class SqliteReplica:
    """The replica on one SQLite file, deciding as the seed does (``impl.decisions``).

    Opening it checks the file and takes no write lock unless it creates the
    replica (``create=True`` and nothing at ``path``): a missing directory, a
    directory, a file that is not an envreplica replica, a replica of another
    version or sealed under another master key are refused (``impl.files``,
    ``impl.writer``). ``created_by`` marks a replica it creates, and then an
    existing replica without that mark is refused too (the adapter opens only
    its own). While open it holds ``PATH.lock`` shared (``exclusive=True``:
    alone, as ``envreplica adapter`` does) and notices when the file at
    ``path`` is removed or replaced.

    ``after_commit`` (None by default) is called with no arguments right
    after each write transaction commits, whether or not it changed a row;
    an exception it raises propagates out of the operation, which then writes
    nothing more (the adapter's ``crashAfterCommit``).
    """

    #: The seed's pure decisions this replica makes; a subclass may hold another ``Decisions``.
    decisions: Decisions = DECISIONS

    def __init__(
        self,
        path: Union[str, Path],
        *,
        sealer: Sealer,
        reader: Optional[ValueReader],
        config: ReplicaConfig = ReplicaConfig(),
        synchronous: str = "FULL",
        create: bool = True,
        exclusive: bool = False,
        anchor: Optional[Anchor] = None,
        created_by: Optional[str] = None,
        busy_timeout_ms: int = 5000,
    ) -> None:
        if not isinstance(sealer, Sealer):
            raise TypeError("sealer must be an impl.sealing.Sealer")
        if not isinstance(config, ReplicaConfig):
            raise TypeError(f"config must be an impl.config.ReplicaConfig (variant, ack_page_bytes, prefix); got a "
                            f"{type(config).__name__}. Build one with ReplicaConfig(variant=...)")
        self.path = Path(path)
        self.sealer = sealer
        self.reader = reader
        self.config = config
        self.anchor = anchor
        #: Called right after each write transaction commits (None: nothing is called).
        self.after_commit: Optional[Callable[[], None]] = None
        self._lock = threading.RLock()  # one transaction at a time on the held connection
        self._changed = threading.Condition()
        self._generation = 0  # bumped after each committed change to the authority row or live view
        self._floor = 0  # the highest write counter seen: a file below it was rolled back
        self._closed = True
        self._holder: Optional[ReplicaLock] = None
        self._engine: Optional[Engine] = None
        self._connection: Optional[Connection] = None  # held while open (``_conn``)
        found = files.probe(self.path)
        files.refuse_unusable(found, what="a replica", missing_ok=create)
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
                self._connection = self._engine.connect()
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
    def from_environment(cls, path: Union[str, Path], *, reader: Optional[ValueReader],
                         config: ReplicaConfig = ReplicaConfig(), synchronous: str = "FULL",
                         env: Optional[Mapping[str, str]] = None, **options: Any) -> "SqliteReplica":
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
                with engine.connect() as conn, write_transaction(conn) as db:  # one transaction: both or neither
                    writer.stamp(db, key_check=self.sealer.rows.key_check, created_by=created_by)
                    Tables(db, self.sealer.rows).insert_initial_authority()
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

    def empty(self, sealer: Optional[Sealer] = None, key_source: Optional[str] = None) -> None:
        """Delete every row, under a new ``sealer`` if given: a fresh, empty replica in the same file.

        The write counter keeps counting (an anchor never sees it go back).
        ``key_source``: ``writer.KEY_FROM_RESET`` when the sealer's key came
        from a harness's request (recorded in ``store_meta``).
        """
        sealer = self.sealer if sealer is None else sealer
        with self._lock, self._sql_errors():
            self._ensure_open()
            with write_transaction(self._conn) as conn:
                counter = writer.wipe(conn, key_check=sealer.rows.key_check, key_source=key_source)
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
        before the commit; the anchor, if any, advances just after it, and
        then ``after_commit`` is called (not after a rollback).
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
        hook = self.after_commit
        if hook is not None:
            hook()  # right after the commit: what it raises ends the operation here

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

    @property
    def _conn(self) -> Connection:
        """The held connection (used once ``_ensure_open`` has passed: an open replica holds one)."""
        conn = self._connection
        if conn is None:
            raise RuntimeError("the replica is closed")
        return conn

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError("the replica is closed")

    def _notify(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def _seal(self, value: str, project: str, key: str, head: Head) -> bytes:
        return self.sealer.seal(
            value, project_id=project, key=key, revision=head.revision, generation=head.generation,
            value_ref=wire.encode(head.value_ref), text=self._text,
        )

    @property
    def _text(self) -> TextEncoding:
        """How a value's text becomes the bytes sealed: the seed's Node encoding, or exactly (FIX(F3))."""
        return TextEncoding.NODE_UTF8 if self.config.variant is not Variant.FIXED else TextEncoding.EXACT

    def _open_value(self, vrow: StoredRow, table: str, ident: tuple[str, ...], project: str, key: str,
                    ref: Optional[ValueRef] = None, encoded_ref: Any = None) -> OpenedValue:
        """Open a value row's sealed blob for its own record fields.

        ``ref``: the reference, already parsed; ``encoded_ref``: its ``wire.encode``, already computed.
        """
        ref = value_ref_of_row(vrow, table, ident) if ref is None else ref
        if not count_of(vrow.revision) or not count_of(vrow.generation):
            raise CorruptReplica(f"stored replica value is invalid ({where_text(table, ident)})")
        encoded = wire.encode(ref) if encoded_ref is None else encoded_ref
        try:
            value = self.sealer.open(
                vrow.value_enc, project_id=project, key=key, revision=vrow.revision,
                generation=vrow.generation, value_ref=encoded,
            )
        except SealError as error:
            raise TamperDetected(
                f"sealed replica value does not open for its record ({where_text(table, ident)}): {error}"
            ) from None
        return OpenedValue(vrow.revision, vrow.generation, ref, value)


    # -- the value-store read, split at its await --------------------------

    def _fetch(self, project: str, state: BindingState, org: str, window: _ReadWindow) -> Fetched:
        """``readMaterializedValue``: plan the read, make it (the window), judge the answer."""
        planned = self.decisions.plan_read(self.config.prefix, project, state, window.reader is not None)
        if isinstance(planned, Fetched):
            return planned  # answered without I/O: not a window
        answer = ask(cast(ValueReader, window.reader), planned)  # a read is planned only with a reader
        window.read_returned()
        return self.decisions.judge_answer(org, project, state, planned, answer)

    def _still_awaits_value(self, row: Union[LiveRecord, StagedRecord], epochs: tuple[int, ...]) -> bool:
        """FIX(F1): a fetched value lands only on a row that still awaits one under today's kept epochs.

        The seed checks only that the record is unchanged; a begin with other
        kept epochs inside the read window can make the same record withheld,
        and the seed then installs onto it.
        """
        if self.config.variant is Variant.SEED:
            return True
        return (row.mat.kind is MatKind.UNAVAILABLE
                and self.decisions.desired(row.state, epochs).kind is MatKind.UNAVAILABLE)

    def _materialize(self, slot: _Slot, window: _ReadWindow) -> None:
        """``materializeStage`` / ``materializeLive``: before-transaction, the read (no transaction), after-transaction.

        A staged record is materialized only while its attempt is the open
        one; a live record whatever the gate (as the seed). The value lands
        only on the very record the read was made for.
        """
        staged = slot.view is View.STAGE
        with self._read() as tx:
            a = tx.authority()
            if staged and a.attempt_id != slot.attempt:
                return
            row = slot.record(tx)
            if row is None or row.mat.kind is not MatKind.UNAVAILABLE:
                return
            before, org = row.state, a.organisation()
        fetched = self._fetch(slot.project, before, org, window)
        blob = None if fetched.value is None else self._seal(fetched.value, slot.project, slot.key, before.head)
        with self._write() as tx:
            a = tx.authority()
            if staged and a.attempt_id != slot.attempt:
                return
            current = slot.record(tx)
            if current is None or current.state != before:
                return
            if not self._still_awaits_value(current, a.policy_epochs):  # FIX(F1)
                return
            present = current.present if isinstance(current, StagedRecord) else True  # (staged: StagedRecord)
            if blob is not None:
                slot.put_value(tx, before.head, blob, had_none=current.mat.kind is not MatKind.INSTALLED)
                slot.put(tx, before, INSTALLED, present)
            else:
                slot.drop_value(tx)
                slot.put(tx, before, unavailable(cast(UnavailableReason, fetched.reason)), present)  # no value: a reason

    # -- retaining a record -----------------------------------------------

    def _retain(self, tx: Tables, slot: _Slot, incoming: BindingState,
                epochs: tuple[int, ...], stored: Any = _UNREAD) -> tuple[RecordResult, bool]:
        """Apply ``Decisions.retention`` of ``incoming`` to its slot: (the record as retained, fetch?).

        ``stored``: the slot's record (or None) already read in this transaction, with nothing
        written to the slot since; by default it is read here.
        """
        rejudge = slot.view is View.STAGE and self.config.variant is Variant.FIXED  # FIX(F2)
        if stored is _UNREAD:
            stored = slot.record(tx)
        plan = self.decisions.retention(slot.view, stored, incoming, epochs, rejudge_retained=rejudge)
        if plan.drop_value:
            slot.drop_value(tx)
        if plan.rewrite:
            slot.put(tx, plan.state, plan.mat)
        return RecordResult(plan.state, plan.mat), plan.fetch

    # -- begin -------------------------------------------------------------

    def begin(self, frame: BeginFrame, kept_epochs: tuple[int, ...], org_id: str) -> BeginResult:
        """``beginProjectEnvReplica``: close the gate and create an exact whole-task staging view."""
        frame = wire.parse_begin(wire.encode(frame))
        epochs = wire.parse_policy_epochs(list(kept_epochs))
        org_id = wire.parse_org_id(org_id)
        with self._write() as tx:
            a = tx.authority()
            if a.activated and a.org_id != org_id:
                raise CorruptReplica("replica organization cannot change after activation")
            new_stream = a.stream_id != frame.stream_id
            if new_stream:
                # Receipts only deduplicate one stream: a new stream drops them.
                tx.clear_receipts()
            tx.clear_stage()
            for project in frame.project_ids:
                tx.put_stage_project(frame.attempt_id, project, StagedProject(None, None, False))
                tx.reset_staged_project(frame.attempt_id, project)
            sequence = 0 if new_stream else a.applied_sequence
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
            self._materialize(_Slot(View.STAGE, frame.attempt_id, frame.project_id, key), window)
        with self._read() as tx:
            return self._page_final(tx, frame)

    def _page_prepare(self, tx: Tables, frame: PageFrame) -> Union[PageRefused, tuple[str, ...]]:
        """The prepare transaction: a refusal, or the keys to fetch (refusals after the records keep their writes)."""
        a = tx.authority()
        applied = a.required_cursor()
        epochs = a.policy_epochs
        attempt, project = frame.attempt_id, frame.project_id

        def refuse(code: RefusalCode) -> PageRefused:
            return PageRefused(attempt, code, epochs, applied)

        if a.attempt_id != attempt or a.gate_open:
            return refuse(R.RECONCILIATION_ATTEMPT_MISMATCH)
        if not self.decisions.ack_fits(self.config.ack_page_bytes, frame, frame.records, epochs, applied):
            return refuse(R.ACK_PAGE_TOO_LARGE)
        staged = tx.stage_project(attempt, project)
        if staged is None:
            return refuse(R.PROJECT_NOT_IN_ATTEMPT)
        live_version = tx.project_version(project)
        live_version = 0 if live_version is None else live_version
        if frame.record_version < live_version:
            return refuse(R.RECORD_VERSION_STALE)
        if frame.after is None:
            tx.reset_staged_project(attempt, project)
            tx.put_stage_project(attempt, project, StagedProject(frame.record_version, None, False))
        elif staged.complete or staged.record_version != frame.record_version or staged.last_key != frame.after:
            return refuse(R.SNAPSHOT_PAGE_MISMATCH)
        at_live_version = frame.record_version == live_version
        fetch_keys: list[str] = []
        retained: list[BindingState] = []
        version_conflict = False
        for state in frame.records:
            slot = _Slot(View.STAGE, attempt, project, state.key)
            before = _UNREAD
            if at_live_version and not version_conflict:
                before = slot.record(tx)
                version_conflict = before is None or self.decisions.order(state, before.state) is not Order.SAME
            result, fetch = self._retain(tx, slot, state, epochs, before)
            retained.append(result.state)
            if fetch:
                fetch_keys.append(state.key)
        # A replica ahead of (or conflicting with) the page echoes what it retained, which may be wider
        # (retained states equal to the page's serialise the same: the check above answered for them).
        if (tuple(retained) != tuple(frame.records)
                and not self.decisions.ack_fits(self.config.ack_page_bytes, frame, retained, epochs, applied)):
            return refuse(R.ACK_PAGE_TOO_LARGE)
        if version_conflict:
            return refuse(R.SNAPSHOT_VERSION_CONFLICT)
        if frame.complete and at_live_version and not tx.live_matches_staged(attempt, project):
            return refuse(R.SNAPSHOT_VERSION_CONFLICT)
        last_key = frame.records[-1].key if frame.records else None
        tx.put_stage_project(attempt, project, StagedProject(frame.record_version, last_key, frame.complete))
        return tuple(fetch_keys)

    def _page_final(self, tx: Tables, frame: PageFrame) -> PageResult:
        """The final (read-only) transaction: each record of the page as it is staged now."""
        a = tx.authority()
        applied = a.required_cursor()
        if a.attempt_id != frame.attempt_id or a.gate_open:
            return PageRefused(frame.attempt_id, R.RECONCILIATION_ATTEMPT_MISMATCH, a.policy_epochs, applied)
        results = []
        for state in frame.records:
            row = tx.stage_record(frame.attempt_id, frame.project_id, state.key)
            if row is None:
                raise CorruptReplica("staged replica page record disappeared")
            results.append(row.result())
        return PageOk(frame.attempt_id, frame.project_id, frame.after, frame.record_version, tuple(results),
                      frame.complete, a.policy_epochs, applied)

    # -- apply_delivery ----------------------------------------------------

    @staticmethod
    def _transient(a: AuthorityRow, code: RefusalCode) -> ApplyRefused:
        """``transientApply``: refused, not consumed; the cloud may send it again."""
        return ApplyRefused(False, False, a.attempt_id, code, a.policy_epochs, a.required_cursor())

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
        if not isinstance(prepared, _Prepared):
            return prepared
        if prepared.fetch:
            self._materialize(_Slot(prepared.view, prepared.attempt, frame.project_id, frame.state.key), window)
        with self._write() as tx:
            return self._delivery_final(tx, frame, mac, prepared)

    def _delivery_prepare(self, tx: Tables, frame: ApplyFrame, mac: str) -> Union[ApplyResult, _Prepared]:
        """The prepare transaction: an answer now (refused, replayed, consumed), or what the rest needs."""
        a = tx.authority()
        if not a.activated:
            raise CorruptReplica("replica delivery arrived before activation")
        current = a.required_cursor()
        delivery = frame.delivery
        if delivery.stream_id != current.stream_id:
            return self._transient(a, R.STREAM_MISMATCH)
        if delivery.sequence <= current.sequence:
            row = tx.receipt_row(delivery.stream_id, delivery.sequence)
            if row is None:
                # Unreachable unless the file was changed (receipts cover 1..applied): the set's
                # digest names the tamper; if it somehow verifies, answer as the seed does.
                tx.verified_receipts()
                return self._transient(a, R.RECEIPT_MISSING)
            if not Sealer.same_mac(row.request_mac, mac):
                return ApplyRefused(True, True, a.attempt_id, R.DELIVERY_CONFLICT, a.policy_epochs, current)
            return self._receipt_result(receipt_of_row(row), a, frame.project_id)
        if delivery.sequence != current.sequence + 1:
            return self._transient(a, R.DELIVERY_GAP)
        if (
            frame.reconciliation_attempt_id is not None
            if a.gate_open
            else (a.attempt_id is None or frame.reconciliation_attempt_id != a.attempt_id)
        ):
            return self._transient(a, R.RECONCILIATION_ATTEMPT_MISMATCH)
        epochs = a.policy_epochs
        project = frame.project_id
        base: Optional[int]  # (an int past the checks below)
        if a.attempt_id is not None:  # staging: the delta goes into the attempt's view
            staged = tx.stage_project(a.attempt_id, project)
            if staged is None or not staged.complete or staged.record_version is None:
                return self._transient(a, R.SNAPSHOT_INCOMPLETE)
            base, view = staged.record_version, View.STAGE
        else:
            base, view = tx.project_version(project), View.LIVE
            if base is None:
                self._save_receipt(tx, frame, mac, ok=False, code=R.PROJECT_NOT_IN_REPLICA)
                return self._consumed(tx, R.PROJECT_NOT_IN_REPLICA, epochs)
        if frame.record_version > base + 1:
            return self._transient(a, R.RECORD_VERSION_GAP)
        slot = _Slot(view, a.attempt_id, project, frame.state.key)
        stored = slot.record(tx)
        if self._advances(frame, base, stored):
            _, fetch = self._retain(tx, slot, frame.state, epochs, stored)
            if view is View.STAGE:  # staging: the attempt and its staged project were checked above
                attempt, staged_project = cast(str, a.attempt_id), cast(StagedProject, staged)
                tx.put_stage_project(attempt, project, replace(staged_project, record_version=frame.record_version))
            else:
                tx.set_project_version(project, frame.record_version)
            return _Prepared(fetch, frame.record_version, a.attempt_id)
        if stored is not None:
            # A lower or equal version, an older state or an unreachable move is answered with
            # what this replica retained: the cloud can reconcile without the stream getting stuck.
            return _Prepared(self.decisions.awaits_fetch(stored.state, stored.mat, epochs), base, a.attempt_id)
        self._save_receipt(tx, frame, mac, ok=False, code=R.RECORD_VERSION_CONFLICT)
        return self._consumed(tx, R.RECORD_VERSION_CONFLICT, epochs)

    def _advances(self, frame: ApplyFrame, base: int, stored: Union[LiveRecord, StagedRecord, None]) -> bool:
        """The delta is the next record version, newer than what is stored, and one reachable head move."""
        current = None if stored is None else stored.state
        return (frame.record_version == base + 1
                and (current is None or self.decisions.order(frame.state, current) is Order.NEWER)
                and self.decisions.reachable(frame.state, current))

    @staticmethod
    def _consumed(tx: Tables, code: RefusalCode, epochs: tuple[int, ...]) -> ApplyRefused:
        """A refusal whose receipt was just saved: consumed, the cursor moved on."""
        after = tx.authority()
        return ApplyRefused(False, True, after.attempt_id, code, epochs, after.required_cursor())

    @staticmethod
    def _receipt_result(receipt: StoredReceipt, a: AuthorityRow, project_id: str) -> ApplyResult:
        """``receiptResult``: the stored answer, with today's epochs and cursor."""
        applied = a.required_cursor()
        if not receipt.ok:
            if receipt.code is None:
                raise CorruptReplica("replica refusal has no code")
            return ApplyRefused(True, True, a.attempt_id, receipt.code, a.policy_epochs, applied)
        if receipt.result is None or receipt.record_version is None:
            raise CorruptReplica("stored replica delivery result is invalid")
        return ApplyOk(True, a.attempt_id, project_id, receipt.record_version, receipt.result,
                       a.policy_epochs, applied)

    def _delivery_final(self, tx: Tables, frame: ApplyFrame, mac: str, prepared: _Prepared) -> ApplyResult:
        """The final transaction: nothing moved under the delivery, then its receipt and answer."""
        a = tx.authority()
        current = a.required_cursor()
        if (
            frame.delivery.stream_id != current.stream_id
            or frame.delivery.sequence != current.sequence + 1
            or a.attempt_id != prepared.attempt
        ):
            return self._transient(a, R.REPLICA_STATE_CHANGED)
        row = _Slot(prepared.view, prepared.attempt, frame.project_id, frame.state.key).record(tx)
        if row is None:
            return self._transient(a, R.REPLICA_STATE_MISSING)
        result = row.result()
        self._save_receipt(tx, frame, mac, ok=True, result=result, record_version=prepared.version)
        after = tx.authority()
        return ApplyOk(False, after.attempt_id, frame.project_id, prepared.version, result,
                       after.policy_epochs, after.required_cursor())

    # -- complete, close_gate ----------------------------------------------

    def complete(self, frame: CommitFrame) -> CommitResult:
        """``completeProjectEnvReplica``: promote the exact staged view and open the gate atomically."""
        frame = wire.parse_commit(wire.encode(frame))
        with self._write() as tx:
            return self._complete(tx, frame)

    def _complete(self, tx: Tables, frame: CommitFrame) -> CommitResult:
        a = tx.authority()
        applied = a.required_cursor()
        epochs = a.policy_epochs

        def refuse(code: RefusalCode) -> CommitRefused:
            return CommitRefused(frame.attempt_id, code, epochs, applied)

        if a.attempt_id != frame.attempt_id or a.gate_open:
            return refuse(R.RECONCILIATION_ATTEMPT_MISMATCH)
        if frame.high_water != applied:
            return refuse(R.DELIVERY_INCOMPLETE)
        attempt = frame.attempt_id
        staged = {p: view for (a_id, p), view in tx.verified_stage().items() if a_id == attempt}
        if not tx.stage_matches_versions(attempt, frame.versions):
            return refuse(R.RECORD_VERSION_CHANGED)
        bad = tx.unpromotable_record(attempt)
        if bad is not None:
            _project, _key, installed = bad
            raise CorruptReplica("staged installed value does not match its replica head" if installed
                                 else "staged withheld replica record still has a value")
        # Each staged project matched its version above: complete, at a record version (never None).
        tx.replace_live(sorted((p, cast(int, sp.record_version)) for p, (sp, _) in staged.items()))
        for project, (_, view) in sorted(staged.items()):
            for key, row in view.records:
                if not row.present:
                    continue
                tx.put_live_record(project, row.state, row.mat)
                vrow = view.values.get(key)
                if vrow is not None:
                    # Sealed blobs move as they are: their seal binds project, key and head, not the view.
                    tx.put_live_value_row(project, key, vrow)
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
            return Status(a.activated, a.gate_open, a.attempt_id, a.org_id, a.cursor(), a.policy_epochs,
                          tuple(sorted(tx.projects())))

    def is_ready(self) -> bool:
        """Activated, open, no attempt (the ready condition of ``awaitProjectEnvReplicaReady``)."""
        with self._read() as tx:
            return tx.authority().serving

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


    def _snapshot(self, tx: Tables, project_ids: Iterable[str]) -> Optional[Snapshot]:
        """The served view of exactly ``project_ids`` (task order), None when it must not serve; corrupt raises."""
        a = tx.authority()
        if not a.serving:
            return None
        requested = list(project_ids)
        live_projects = tx.projects()  # the project set, verified against the authority row
        if len(set(requested)) != len(requested) or set(requested) != set(live_projects):
            return None
        rejudge = self.config.variant is Variant.FIXED
        projects = []
        for project in requested:  # task order: the lead project wins duplicate keys
            version = live_projects.get(project)
            if version is None:
                raise CorruptReplica("replica project is missing")
            view = tx.verified_live_project(project)  # every row, and the set, verified
            unclaimed = dict(view.values)
            entries = []
            for key, row in view.records:
                vrow = unclaimed.pop(key, None)
                value = None
                if row.mat.kind is MatKind.INSTALLED:
                    encoded_ref = _value_matches_head(vrow, row.state.head)
                    if encoded_ref is None:
                        raise CorruptReplica("installed replica value does not match its head")
                    if rejudge and self.decisions.desired(row.state, a.policy_epochs).kind is MatKind.WITHHELD:
                        # Defence in depth (variant fixed): serve nothing the kept policy or binding withholds.
                        raise CorruptReplica(f"records row {project}/{key} is installed, but its binding or policy "
                                             f"epoch withholds it under the kept epochs; nothing is served")
                    matched = cast(StoredRow, vrow)  # the value row matched the head just above: there is one
                    value = self._open_value(matched, "record_values", (project, key), project, key,
                                             row.state.head.value_ref, encoded_ref).value
                elif vrow is not None:
                    raise CorruptReplica("withheld replica record still has a value")
                entries.append(SnapshotEntry(row.state, row.mat, value))
            if unclaimed:
                raise CorruptReplica("replica value has no authority record")
            projects.append(SnapshotProject(project, version, tuple(entries)))
        return Snapshot(tuple(projects))

    def read_snapshot(self, project_ids: Iterable[str]) -> Optional[Snapshot]:
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

    def diagnose(self, project_ids: Iterable[str]) -> Optional[Diagnosis]:
        """Why ``read_snapshot(project_ids)`` fails closed, or None when it serves.

        The reason is checked in the order of ``DiagnosisReason``: not
        activated, gate closed, projects mismatch; corrupt when reading the
        rows raises (the message names the table and row, never a value; an
        unexpected exception is named by its type only). A busy, failing or
        replaced file raises (``ReplicaUnavailable`` / ``ReplicaPathError``):
        that is not the replica's answer.
        """
        try:
            with self._read() as tx:
                a = tx.authority()
                if not a.activated:
                    return Diagnosis(DiagnosisReason.NOT_ACTIVATED, "replica is not activated")
                if not a.gate_open or a.attempt_id is not None:
                    return Diagnosis(DiagnosisReason.GATE_CLOSED, "serving gate is closed")
                if self._snapshot(tx, project_ids) is None:
                    return Diagnosis(DiagnosisReason.PROJECTS_MISMATCH,
                                     "requested projects are not exactly the replica's projects")
        except ReplicaError as error:
            return Diagnosis(DiagnosisReason.CORRUPT, error.message)
        except (ReplicaUnavailable, ReplicaPathError):
            raise
        except Exception as error:  # anything else: its type only (messages may quote parameters)
            return Diagnosis(DiagnosisReason.CORRUPT, f"replica read failed ({type(error).__name__})")
        return None

    def snapshot_diagnostics(self, project_ids: Iterable[str]) -> Optional[str]:
        """``diagnose``'s message (None when the snapshot serves); a busy or failing file's error text."""
        try:
            found = self.diagnose(project_ids)
        except (ReplicaUnavailable, ReplicaPathError) as error:
            return str(error)
        return None if found is None else found.message

    def list_receipts(self) -> tuple[ReceiptView, ...]:
        """``listProjectEnvReplicaReceipts`` without MACs, ordered by stream and sequence (the set verified)."""
        with self._read() as tx:
            rows = tx.verified_receipts()
        receipts = sorted(((r.stream_id, r.sequence), receipt_of_row(r)) for r in rows)
        return tuple(ReceiptView(s, n, r.ok, r.code, r.result, r.record_version) for (s, n), r in receipts)

    def read_tables(self) -> "TablesRead":
        """Every table in one read transaction, each row and set verified and each value opened.

        The typed form of ``export_state`` (rows as the replica's own types, each JSON column parsed
        once), for harnesses that compare tables in process. Holds plaintext: never logged. A tamper
        raises ``TamperDetected``; a row that does not parse, ``CorruptReplica``.
        """
        with self._read() as tx:
            a = tx.authority()
            live = tx.verified_live()
            stage = tx.verified_stage()
            receipt_rows = tx.verified_receipts()
        opened_live = {
            (project, key): self._open_value(vrow, "record_values", (project, key), project, key)
            for project, (_, view) in live.items() for key, vrow in view.values.items()
        }
        opened_stage = {
            (attempt, project, key): self._open_value(vrow, "stage_values", (attempt, project, key), project, key)
            for (attempt, project), (_, view) in stage.items() for key, vrow in view.values.items()
        }
        receipts = {(row.stream_id, row.sequence): receipt_of_row(row) for row in receipt_rows}
        return TablesRead(a, live, opened_live, stage, opened_stage, receipts)

    def export_state(self) -> dict[str, Any]:
        """Every table, each row and set verified and each value opened: the ``state`` document.

        The shape is docs/protocol.md section 6's ``state`` (JSON-ready: dicts,
        lists, strings, integers, booleans, None), every list sorted by its
        primary key. Receipts carry their ``requestMac``. Holds plaintext: a
        test and verification read, never logged. A tamper raises
        ``TamperDetected``; a row that does not parse, ``CorruptReplica``.
        """
        read = self.read_tables()
        a = read.authority
        doc: dict[str, Any] = {
            "authority": {"activated": a.activated, "gateOpen": a.gate_open, "attemptId": a.attempt_id,
                          "streamId": a.stream_id, "appliedSequence": a.applied_sequence, "orgId": a.org_id,
                          "policyEpochs": list(a.policy_epochs)},
            "projects": [], "records": [], "values": [],
            "stageProjects": [], "stageRecords": [], "stageValues": [], "receipts": [],
        }

        def opened(value: OpenedValue) -> dict[str, Any]:
            return {"revision": value.revision, "generation": value.generation,
                    "valueRef": wire.encode(value.value_ref), "value": value.value}

        for project, (version, view) in sorted(read.live.items()):
            doc["projects"].append({"projectId": project, "recordVersion": version})
            for key, row in view.records:
                doc["records"].append({"projectId": project, "key": key, "state": wire.encode(row.state),
                                       "materialization": wire.encode(row.mat)})
            for key in sorted(view.values):
                doc["values"].append({"projectId": project, "key": key, **opened(read.live_values[project, key])})
        for (attempt, project), (sp, staged) in sorted(read.stage.items()):
            doc["stageProjects"].append({"attemptId": attempt, "projectId": project,
                                         "recordVersion": sp.record_version, "lastKey": sp.last_key,
                                         "complete": sp.complete})
            for key, srow in staged.records:
                doc["stageRecords"].append({"attemptId": attempt, "projectId": project, "key": key,
                                            "state": wire.encode(srow.state), "materialization": wire.encode(srow.mat),
                                            "present": srow.present})
            for key in sorted(staged.values):
                doc["stageValues"].append({"attemptId": attempt, "projectId": project, "key": key,
                                           **opened(read.stage_values[attempt, project, key])})
        for (stream, sequence), receipt in sorted(read.receipts.items()):
            doc["receipts"].append({
                "streamId": stream, "sequence": sequence, "requestMac": receipt.request_mac,
                "ok": receipt.ok, "code": None if receipt.code is None else receipt.code.value,
                "result": None if receipt.result is None else wire.encode(receipt.result),
                "recordVersion": receipt.record_version,
            })
        return doc

    def verify(self) -> list[str]:
        """Every check of integrity at rest: SQLite's own, then every row, set and seal. [] when all hold.

        Each problem names a table and a row, never a value.
        """
        problems: list[str] = []
        with self._lock, self._sql_errors():
            self._ensure_open()
            with read_transaction(self._conn) as conn:
                lines = [line for (line,) in conn.execute("PRAGMA integrity_check").fetchall()]
            problems += [f"SQLite integrity_check: {line}" for line in lines if line != "ok"]
        try:
            self.export_state()
        except ReplicaError as error:
            problems.append(error.message)
        return problems

    @property
    def rows_changed(self) -> Optional[int]:
        """SQLite's count of rows this connection has inserted, updated or deleted (``total_changes``).

        It counts rolled-back changes too, so an unchanged count means nothing was written through this
        connection since it was read; None once closed. For harnesses deciding whether the tables can have
        moved (``conformance.replica``); never a substitute for reading them.
        """
        conn = self._connection
        if conn is None:
            return None
        return dbapi_of(conn).total_changes

    def close(self) -> None:
        """Close the connection and the engine, then release the holder lock (idempotent)."""
        with self._lock:
            was_open, self._closed = not self._closed, True
            if self._connection is not None:
                self._connection.close()
                self._connection = None
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

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteReplica({str(self.path)!r}, variant={self.config.variant.value!r})"
