"""The value types of the replica protocol: records, frames, results, errors.

Models: the JSON shapes of ``docs/protocol.md`` sections 1-3 as immutable,
hashable Python values, so that the model, the checker and the conformance
driver share one vocabulary with the seed (``project-env-replica.ts``).

Leaves out on purpose: validation and JSON encoding (``spec.wire`` does both,
so a value built in code is trusted and cheap, which the checker needs), and
any notion of storage (``model.state``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from mypy_extensions import mypyc_attr

from envreplica.spec.frozen import Frozen, HashOnce

# ---------------------------------------------------------------------------
# Errors. Invalid input and corrupt state are different types; refusals are
# results, never exceptions.
# ---------------------------------------------------------------------------


@mypyc_attr(native_class=False)  # an exception, off the hot path: its class attributes stay class attributes
class ReplicaError(Exception):
    """Base of the two failures that are not results."""

    #: the wire name of the error type (``docs/protocol.md`` section 5)
    wire_type = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        #: the state committed by earlier transactions of the failing
        #: operation (set by the model; ``None`` means "nothing committed")
        self.committed: Optional[object] = None


@mypyc_attr(native_class=False)
class InvalidFrame(ReplicaError):
    """A frame or argument breaks a rule of ``docs/protocol.md``; nothing changes."""

    wire_type = "invalid"


@mypyc_attr(native_class=False)
class CorruptReplica(ReplicaError):
    """The stored replica breaks its own rules (the seed's ProjectEnvReplicaCorruptError)."""

    wire_type = "corrupt"


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of AssertionError
class ModelBug(AssertionError):
    """The model itself broke a declared rule (an undeclared gate edge, ...)."""


# ---------------------------------------------------------------------------
# Finite domains.
# ---------------------------------------------------------------------------


class ActionKind(str, enum.Enum):
    """The kinds of step of the protocol, named after the seed's functions (and the environment's moves)."""

    BEGIN = "begin"
    PAGE = "apply_page"
    DELIVERY = "apply_delivery"
    COMMIT = "complete"
    CLOSE = "close_gate"
    RESTART = "restart"
    RESUME = "resume"  # a value-store read answers, and the operation it suspended goes on
    STORE_OFF = "store_off"  # the process loses its value store
    CRASH = "crash_after"  # the process dies right after one of an operation's write commits
    READ = "read_snapshot"  # a task reads the served view (``readProjectEnvReplicaSnapshot``): changes nothing


class View(str, enum.Enum):
    """Which view a value-store read materializes into."""

    LIVE = "live"  # the live tables: a delivery while no attempt is open
    STAGE = "stage"  # the staging tables: a page, or a delivery during an attempt


class RefusalCode(str, enum.Enum):
    """Every refusal code the seed returns, named as on the wire."""

    # page and commit
    RECONCILIATION_ATTEMPT_MISMATCH = "reconciliation_attempt_mismatch"
    ACK_PAGE_TOO_LARGE = "ack_page_too_large"
    PROJECT_NOT_IN_ATTEMPT = "project_not_in_attempt"
    RECORD_VERSION_STALE = "record_version_stale"
    SNAPSHOT_PAGE_MISMATCH = "snapshot_page_mismatch"
    SNAPSHOT_VERSION_CONFLICT = "snapshot_version_conflict"
    DELIVERY_INCOMPLETE = "delivery_incomplete"
    RECORD_VERSION_CHANGED = "record_version_changed"
    # delivery, transient (not consumed)
    STREAM_MISMATCH = "stream_mismatch"
    RECEIPT_MISSING = "receipt_missing"
    DELIVERY_GAP = "delivery_gap"
    SNAPSHOT_INCOMPLETE = "snapshot_incomplete"
    RECORD_VERSION_GAP = "record_version_gap"
    REPLICA_STATE_CHANGED = "replica_state_changed"
    REPLICA_STATE_MISSING = "replica_state_missing"
    # delivery, replayed or consumed
    DELIVERY_CONFLICT = "delivery_conflict"
    RECORD_VERSION_CONFLICT = "record_version_conflict"
    PROJECT_NOT_IN_REPLICA = "project_not_in_replica"

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return self.value


# Which operation answers which refusal code (docs/protocol.md sections 3 and 10.5-10.7; ``model.replica`` is
# normative). The JSON Schema's per-op code definitions (``spec.schema``) are generated from these sets.

#: The codes a page answers (``applyProjectEnvReplicaPage``: its prepare and final transactions).
PAGE_REFUSALS = frozenset({RefusalCode.RECONCILIATION_ATTEMPT_MISMATCH, RefusalCode.ACK_PAGE_TOO_LARGE,
                           RefusalCode.PROJECT_NOT_IN_ATTEMPT, RefusalCode.RECORD_VERSION_STALE,
                           RefusalCode.SNAPSHOT_PAGE_MISMATCH, RefusalCode.SNAPSHOT_VERSION_CONFLICT})
#: The codes a commit answers (``completeProjectEnvReplica``).
COMMIT_REFUSALS = frozenset({RefusalCode.RECONCILIATION_ATTEMPT_MISMATCH, RefusalCode.DELIVERY_INCOMPLETE,
                             RefusalCode.RECORD_VERSION_CHANGED})
#: A delivery's transient codes: ``replayed: false, consumed: false``, nothing written, the cloud may resend it.
TRANSIENT_REFUSALS = frozenset({RefusalCode.STREAM_MISMATCH, RefusalCode.RECEIPT_MISSING, RefusalCode.DELIVERY_GAP,
                                RefusalCode.RECONCILIATION_ATTEMPT_MISMATCH, RefusalCode.SNAPSHOT_INCOMPLETE,
                                RefusalCode.RECORD_VERSION_GAP, RefusalCode.REPLICA_STATE_CHANGED,
                                RefusalCode.REPLICA_STATE_MISSING})
#: A delivery's codes that a refused receipt stores: consumed (a receipt, the cursor moved), replayed from it later.
RECEIPT_REFUSALS = frozenset({RefusalCode.RECORD_VERSION_CONFLICT, RefusalCode.PROJECT_NOT_IN_REPLICA})
#: A delivery's codes answered ``consumed: true``: a receipt's, and ``delivery_conflict`` (a replay, nothing written).
CONSUMED_REFUSALS = RECEIPT_REFUSALS | {RefusalCode.DELIVERY_CONFLICT}
#: The codes a delivery answers (``applyProjectEnvReplicaDelivery``): transient or consumed, never both.
DELIVERY_REFUSALS = TRANSIENT_REFUSALS | CONSUMED_REFUSALS


class MatKind(str, enum.Enum):
    """The three materialization kinds of a record."""

    INSTALLED = "installed"
    WITHHELD = "withheld"
    UNAVAILABLE = "unavailable"


class WithheldReason(str, enum.Enum):
    """Withheld reasons the replica itself decides (a binding adds its own)."""

    TOMBSTONE = "tombstone"
    POLICY_EPOCH_UNKNOWN = "policy_epoch_unknown"
    BINDING_OMITS = "binding_omits"


class UnavailableReason(str, enum.Enum):
    """Unavailable reasons: pending, plus each value-store failure of the seed."""

    MATERIALIZATION_PENDING = "materialization_pending"
    TOMBSTONE = "tombstone"
    CREDENTIAL_STORE_UNAVAILABLE = "credential_store_unavailable"
    VALUE_MISSING = "value_missing"
    VALUE_ENVELOPE_MISMATCH = "value_envelope_mismatch"
    VALUE_REFERENCE_INVALID = "value_reference_invalid"
    VALUE_VERSION_MISMATCH = "value_version_mismatch"
    VALUE_UNAVAILABLE = "value_unavailable"


# ---------------------------------------------------------------------------
# Records.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class StagedRef(HashOnce):
    """``{"kind": "staged", "stagingId": ...}``: an immutable staged SSM parameter."""

    staging_id: str


@dataclass(frozen=True, slots=True, eq=False)
class LegacyRef(HashOnce):
    """``{"kind": "legacy", "ssmVersion": n}``: one version of a legacy SSM parameter."""

    ssm_version: int


ValueRef = Union[StagedRef, LegacyRef]


@dataclass(frozen=True, slots=True, eq=False)
class Head(HashOnce):
    """A record's head; ``tombstone`` holds exactly when ``value_ref`` is None."""

    revision: int  # moves on approve / epoch upgrade / delete / save-after-delete
    generation: int  # moves on every value change (rotation, delete, save)
    tombstone: bool  # the record is deleted
    value_ref: Optional[ValueRef]  # where the value lives; None for a tombstone


@dataclass(frozen=True, slots=True, eq=False)
class BindOmit(HashOnce):
    """``{"kind": "omit"}``: the task binding leaves this key out."""


@dataclass(frozen=True, slots=True, eq=False)
class BindWithhold(HashOnce):
    """``{"kind": "withhold", "reason": r}``: the binding withholds with a reason."""

    reason: str


Binding = Optional[Union[BindOmit, BindWithhold]]


@dataclass(frozen=True, slots=True, eq=False)
class BindingState(HashOnce):
    """One record as the cloud describes it (``BindingState`` on the wire)."""

    key: str  # the environment variable name
    head: Head  # value identity and counters
    binding: Binding  # None: bound normally
    policy_epoch: Optional[int]  # the policy epoch the record was approved under
    listing_generation: int  # moves when only the listing changes


@dataclass(frozen=True, slots=True, eq=False)
class Materialization(HashOnce):
    """What the replica made of a record: installed, or withheld/unavailable with a reason."""

    kind: MatKind
    reason: Optional[str]  # None exactly when installed

    @property
    def installed(self) -> bool:
        return self.kind is MatKind.INSTALLED


INSTALLED = Materialization(MatKind.INSTALLED, None)


def withheld(reason: str) -> Materialization:
    return Materialization(MatKind.WITHHELD, str(reason.value if isinstance(reason, enum.Enum) else reason))


def unavailable(reason: str) -> Materialization:
    return Materialization(MatKind.UNAVAILABLE, str(reason.value if isinstance(reason, enum.Enum) else reason))


@dataclass(frozen=True, slots=True, eq=False)
class RecordResult(HashOnce):
    """``Result``: a record and its materialization."""

    state: BindingState
    materialization: Materialization


@dataclass(frozen=True, slots=True, eq=False)
class Cursor(HashOnce):
    """A delivery position: a stream and the last sequence consumed on it."""

    stream_id: str
    sequence: int


# ---------------------------------------------------------------------------
# Frames.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class BeginFrame(HashOnce):
    """Start a snapshot attempt for an exact project set; closes the gate."""

    stream_id: str
    attempt_id: str
    project_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class PageFrame(HashOnce):
    """One page of one project's snapshot, keys strictly ascending after ``after``."""

    op_id: str
    attempt_id: str
    project_id: str
    after: Optional[str]
    record_version: int
    records: tuple[BindingState, ...]
    complete: bool


@dataclass(frozen=True, slots=True, eq=False)
class ApplyFrame(HashOnce):
    """One ordered delta (``env.replica.apply``)."""

    op_id: str
    project_id: str
    record_version: int
    state: BindingState
    delivery: Cursor
    reconciliation_attempt_id: Optional[str] = None  # None: the key is absent

    def request(self) -> "DeliveryRequest":
        """The part the receipt MAC covers (not opId, not reconciliationAttemptId)."""
        return DeliveryRequest(self.project_id, self.record_version, self.state, self.delivery)


@dataclass(frozen=True, slots=True, eq=False)
class DeliveryRequest(HashOnce):
    """The semantic request of a delivery: what its receipt MAC covers."""

    project_id: str
    record_version: int
    state: BindingState
    delivery: Cursor


@dataclass(frozen=True, slots=True, eq=False)
class ProjectVersion(HashOnce):
    """One ``{"projectId", "recordVersion"}`` entry of a commit."""

    project_id: str
    record_version: int


@dataclass(frozen=True, slots=True, eq=False)
class CommitFrame(HashOnce):
    """Promote the staged view of an attempt if it is exactly what the cloud says."""

    attempt_id: str
    high_water: Cursor
    versions: tuple[ProjectVersion, ...]


# ---------------------------------------------------------------------------
# Results.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeginResult(Frozen):
    applied_through: Cursor
    policy_epochs: tuple[int, ...]
    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PageOk(Frozen):
    attempt_id: str
    project_id: str
    after: Optional[str]
    record_version: int
    results: tuple[RecordResult, ...]
    complete: bool
    policy_epochs: tuple[int, ...]
    applied_through: Cursor
    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PageRefused(Frozen):
    attempt_id: str
    code: RefusalCode
    policy_epochs: tuple[int, ...]
    applied_through: Cursor
    @property
    def ok(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class ApplyOk(Frozen):
    replayed: bool
    attempt_id: Optional[str]
    project_id: str
    record_version: int
    result: RecordResult
    policy_epochs: tuple[int, ...]
    applied_through: Cursor
    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class ApplyRefused(Frozen):
    replayed: bool
    consumed: bool
    attempt_id: Optional[str]
    code: RefusalCode
    policy_epochs: tuple[int, ...]
    applied_through: Cursor
    @property
    def ok(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class CommitOk(Frozen):
    attempt_id: str
    policy_epochs: tuple[int, ...]
    applied_through: Cursor
    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class CommitRefused(Frozen):
    attempt_id: str
    code: RefusalCode
    policy_epochs: tuple[int, ...]
    applied_through: Cursor
    @property
    def ok(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Done(Frozen):
    """The empty result of ``close``, ``restart`` and ``store.*`` operations."""

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Pending(Frozen):
    """An operation is now waiting on a value-store read (an ``await`` window)."""

    slot: int  # which in-flight slot holds it
    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Failed(Frozen):
    """An operation ended with an invalid or corrupt error."""

    kind: str  # "invalid" | "corrupt"
    message: str
    @property
    def ok(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Crashed(Frozen):
    """A page or delivery asked to crash (``crashAfterCommit``) did: its process died right after
    that write transaction committed, and the replica was reopened and its gate closed (as ``restart``)."""

    after_commit: int  # the write commit (1 = the operation's first) after which the process died
    @property
    def ok(self) -> bool:
        return True


PageResult = Union[PageOk, PageRefused]
ApplyResult = Union[ApplyOk, ApplyRefused]
CommitResult = Union[CommitOk, CommitRefused]


# ---------------------------------------------------------------------------
# Reads (no state change).
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Status(Frozen):
    """``readProjectEnvReplicaStatus``: the authority row, without values."""

    activated: bool
    gate_open: bool
    attempt_id: Optional[str]
    org_id: Optional[str]
    applied_through: Optional[Cursor]
    policy_epochs: tuple[int, ...]
    project_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SnapshotEntry(Frozen):
    """One served record: its state, materialization and value (None unless installed)."""

    state: BindingState
    materialization: Materialization
    value: Optional[str]


@dataclass(frozen=True, slots=True)
class SnapshotProject(Frozen):
    project_id: str
    record_version: int
    entries: tuple[SnapshotEntry, ...]


@dataclass(frozen=True, slots=True)
class Snapshot(Frozen):
    """``readProjectEnvReplicaSnapshot``: the served view, or None (fail closed)."""

    projects: tuple[SnapshotProject, ...]


@dataclass(frozen=True, slots=True)
class ReceiptView(Frozen):
    """One row of ``listProjectEnvReplicaReceipts`` as the adapter reports it (no MAC)."""

    stream_id: str
    sequence: int
    ok: bool
    code: Optional[RefusalCode]
    result: Optional[RecordResult]
    record_version: Optional[int]


@dataclass(frozen=True, slots=True)
class Readiness(Frozen):
    """The ``ready`` op: whether ``awaitProjectEnvReplicaReady`` returned before the timeout."""

    ready: bool


class DiagnosisReason(str, enum.Enum):
    """Why a snapshot read fails closed (``snapshot_diagnostics``), as a finite class."""

    NOT_ACTIVATED = "not_activated"  # no begin ever committed
    GATE_CLOSED = "gate_closed"  # activated, but the gate is closed (idle or staging)
    PROJECTS_MISMATCH = "projects_mismatch"  # the ids asked for are not exactly the replica's projects
    CORRUPT = "corrupt"  # a stored row, set or seal does not hold: nothing is served


@dataclass(frozen=True, slots=True)
class Diagnosis(Frozen):
    """Why ``read_snapshot`` would answer null: a reason class and a message naming no value."""

    reason: DiagnosisReason
    message: str  # for people; free text (the harness compares ``reason`` only)

