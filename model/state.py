"""The replica's state as immutable values: the seed's SQLite tables, plus what is in flight.

Models: every table the seed writes (authority, projects, records, values, the
three staging tables, receipts) as one frozen ``State``, and the operations
suspended inside a value-store read (the seed's ``await`` windows) as
``inflight``. A restart keeps the tables and drops ``inflight``: that is
exactly what the seed commits to SQLite versus what lives in a process.

Leaves out on purpose: timestamps (``updatedAt``/``createdAt`` are never read),
the receipt MAC itself (the model keeps the semantic request it covers, so two
requests have the same MAC exactly when they are equal; HMAC strength is the
implementation's concern), and sealing (values are plaintext in the model;
``impl`` seals them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from envreplica.model.fmap import EMPTY, FMap
from envreplica.spec.domain import (
    View,
    BindingState,
    DeliveryRequest,
    Materialization,
    PageFrame,
    ApplyFrame,
    RecordResult,
    RefusalCode,
    ValueRef,
)
from envreplica.spec.frozen import Frozen, HashOnce
from envreplica.spec.gate import Gate
from envreplica.spec.variants import FIXES, Finding
from envreplica.spec.variants import Variant as Variant  # re-exported: the model's variants are the contract's


#: The seed's ``MAX_PROJECT_ENV_ACK_PAGE_BYTES`` default (docs/protocol.md section 2).
DEFAULT_ACK_PAGE_BYTES = 262144
#: The credential-store prefix of parameter names (docs/protocol.md section 4).
DEFAULT_PREFIX = "/envreplica"


class GateEngine(str, enum.Enum):
    """What moves the gate: the declared table compiled to a dict, or the ``transitions`` machine."""

    TABLE = "table"  # spec.gate.GATE_NEXT: ~0.2 us a move, for the exhaustive checker
    MACHINE = "machine"  # spec.gate.MachineGate: the declared HierarchicalMachine, for simulation


@dataclass(frozen=True, slots=True)
class ModelConfig(Frozen):
    """Constants of one replica (not state): variant and configuration values."""

    variant: Variant = Variant.FIXED  # the default is the variant whose properties hold
    ack_page_bytes: int = DEFAULT_ACK_PAGE_BYTES  # acknowledgement size bound
    prefix: str = DEFAULT_PREFIX  # parameter-name prefix of the value store
    gate_engine: GateEngine = GateEngine.TABLE  # how the gate moves (same table either way)
    #: fixes of the variant left out (never the checker's: naming a divergence's finding replays it on the model
    #: with one fix left out, ``conformance.replica.findings``)
    left_out: frozenset[Finding] = frozenset()


def has_fix(cfg: ModelConfig, finding: Finding) -> bool:
    """Whether the model runs ``finding``'s fix (``# FIX(Fn)``): the variant fixes it and it is not left out."""
    return finding in FIXES[cfg.variant] and finding not in cfg.left_out


@dataclass(frozen=True, slots=True, eq=False)
class Authority(HashOnce):
    """The single authority row."""

    gate: Gate  # inactive / closed.idle / closed.staging / open (activated, gateOpen, attemptId)
    stream_id: Optional[str]  # the delivery stream; None before the first begin
    applied_sequence: int  # the last sequence consumed on that stream
    attempt_id: Optional[str]  # the open snapshot attempt; set exactly when gate is closed.staging
    org_id: Optional[str]  # the organisation, fixed by the first begin
    policy_epochs: tuple[int, ...]  # the kept policy epochs of the last begin


INITIAL_AUTHORITY = Authority(Gate.INACTIVE, None, 0, None, None, ())


@dataclass(frozen=True, slots=True, eq=False)
class LiveRow(HashOnce):
    """A live record (``records`` table)."""

    state: BindingState  # the record as the cloud described it
    mat: Materialization  # what the replica made of it

    def result(self) -> RecordResult:
        return RecordResult(self.state, self.mat)


@dataclass(frozen=True, slots=True, eq=False)
class StageRow(HashOnce):
    """A staged record (``stage_records``): ``present`` once a page or delivery named it."""

    state: BindingState  # the record
    mat: Materialization  # its materialization in the staged view
    present: bool  # False: copied from live at reset, not (yet) re-sent; not promoted

    def result(self) -> RecordResult:
        return RecordResult(self.state, self.mat)


@dataclass(frozen=True, slots=True, eq=False)
class StoredValue(HashOnce):
    """A value row (``values`` / ``stage_values``): sealed at rest in ``impl``."""

    revision: int  # the head revision the value was fetched for
    generation: int  # the head generation the value was fetched for
    value_ref: ValueRef  # the reference it was read from
    value: str  # the plaintext (the model does not seal)


@dataclass(frozen=True, slots=True, eq=False)
class StageProject(HashOnce):
    """A project of the open attempt (``stage_projects``)."""

    record_version: Optional[int]  # the snapshot's record version; None before its first page
    last_key: Optional[str]  # the last key of the last accepted page
    complete: bool  # the last accepted page was the final one


@dataclass(frozen=True, slots=True, eq=False)
class Receipt(HashOnce):
    """A consumed delivery (``receipts``): what it asked and what it was answered."""

    # what the request MAC covers; a state read back from an implementation holds the MAC itself
    # (conformance.readback), which is all it keeps and all the model compares
    request: Union[DeliveryRequest, str]
    ok: bool  # applied (True) or consumed with a refusal (False)
    code: Optional[RefusalCode]  # the refusal code when not ok
    result: Optional[RecordResult]  # the record as answered when ok
    record_version: Optional[int]  # the project's record version as answered when ok


@dataclass(frozen=True, slots=True, eq=False)
class ReadRequest(HashOnce):
    """One value-store read: what is asked of the store."""

    ref: ValueRef  # the reference being read
    name: str  # the parameter name (docs/protocol.md section 4)


@dataclass(frozen=True, slots=True, eq=False)
class AwaitRead(HashOnce):
    """A suspended materialization: the before-transaction ran, the read is in flight."""

    view: View  # live or staged materialization
    attempt_id: Optional[str]  # the attempt it materializes for (stage only)
    project_id: str  # the record's project
    key: str  # the record's key
    before: BindingState  # the record as the before-transaction saw it
    org_id: str  # the organisation the envelope must name
    request: ReadRequest  # the read in flight


@dataclass(frozen=True, slots=True, eq=False)
class PreparedDelivery(HashOnce):
    """What a delivery's first transaction decided, carried across its await window."""

    result: RecordResult  # the record as retained
    fetch: bool  # a value must be fetched
    changed: bool  # the live view changed (for notifications)
    actual_version: int  # the record version to answer with
    attempt_id: Optional[str]  # the attempt it applied under (None: live)


@dataclass(frozen=True, slots=True, eq=False)
class PageInFlight(HashOnce):
    """A page suspended in a value-store read."""

    frame: PageFrame  # the page being applied
    keys_left: tuple[str, ...]  # keys still to materialize after the current read
    read: AwaitRead  # the read in flight
    reader_on: bool  # whether the operation has a value store


@dataclass(frozen=True, slots=True, eq=False)
class DeliveryInFlight(HashOnce):
    """A delivery suspended in a value-store read."""

    frame: ApplyFrame  # the delivery being applied
    prepared: PreparedDelivery  # its first transaction's decision
    read: AwaitRead  # the read in flight


InFlight = Union[PageInFlight, DeliveryInFlight]


@dataclass(frozen=True, slots=True, eq=False)
class State(HashOnce):
    """The whole replica: durable tables, and the volatile operations in flight."""

    authority: Authority = INITIAL_AUTHORITY  # the authority row
    projects: FMap[str, int] = EMPTY  # projectId -> live record version
    records: FMap[tuple[str, str], LiveRow] = EMPTY  # (projectId, key) -> LiveRow
    values: FMap[tuple[str, str], StoredValue] = EMPTY  # (projectId, key) -> StoredValue
    stage_projects: FMap[tuple[str, str], StageProject] = EMPTY  # (attemptId, projectId) -> StageProject
    stage_records: FMap[tuple[str, str, str], StageRow] = EMPTY  # (attemptId, projectId, key) -> StageRow
    stage_values: FMap[tuple[str, str, str], StoredValue] = EMPTY  # (attemptId, projectId, key) -> StoredValue
    receipts: FMap[tuple[str, int], Receipt] = EMPTY  # (streamId, sequence) -> Receipt
    inflight: tuple[InFlight, ...] = ()  # operations inside an await window (lost on restart)
    store_on: bool = True  # the process has a value store (False: credential_store_unavailable)

    def durable(self) -> "State":
        """What a crash keeps: every table, nothing in flight."""
        return State(
            self.authority, self.projects, self.records, self.values,
            self.stage_projects, self.stage_records, self.stage_values, self.receipts,
            (), self.store_on,
        )


INITIAL = State()
