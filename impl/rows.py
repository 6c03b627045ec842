"""The replica's rows as the implementation reads them: the seed's columns, parsed and checked.

What it holds: one frozen type per table the protocol reads
(``AuthorityRow``, ``LiveRecord``, ``StagedRecord``, ``StagedProject``,
``StoredReceipt``, ``OpenedValue``), each with the seed's columns rather than
any model abstraction: the authority row keeps ``activated``, ``gate_open``
and ``attempt_id`` as three columns, exactly as the seed's
``hostProjectEnvReplicaAuthority`` does. ``AuthorityRow`` also carries the
seed's helpers on that row: ``cursor`` (``cursor``), ``required_cursor``
(``requiredCursor``) and ``organisation`` (``authorityOrgId``), each raising
``CorruptReplica`` with the seed's message where the seed throws. The only
place an ``AuthorityRow`` is built (``impl.tables``) has already checked an
activated row's stream id, sequence and organisation, so these helpers are
left to check activation only.

Leaves out on purpose: reading and writing rows (``impl.tables``), integrity
columns (tags, digests, counters: ``impl.integrity``), and every protocol
decision (``impl.decisions``, ``impl.replica``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, cast

from envreplica.spec.domain import (
    BindingState,
    CorruptReplica,
    Cursor,
    Materialization,
    RecordResult,
    RefusalCode,
    ValueRef,
)

__all__ = ["AuthorityRow", "LiveRecord", "StagedRecord", "StagedProject", "StoredReceipt", "OpenedValue"]


@dataclass(frozen=True, slots=True)
class AuthorityRow:
    """The single authority row (``hostProjectEnvReplicaAuthority``), its columns as stored."""

    activated: bool  # a begin has committed once
    gate_open: bool  # the committed view is served
    attempt_id: Optional[str]  # the open snapshot attempt (None: none)
    stream_id: Optional[str]  # the delivery stream (None before the first begin)
    applied_sequence: int  # the last sequence consumed on that stream
    org_id: Optional[str]  # the organisation fixed by the first begin
    policy_epochs: tuple[int, ...]  # the kept policy epochs of the last begin

    @property
    def serving(self) -> bool:
        """Activated, open and without an attempt: what ``awaitProjectEnvReplicaReady`` waits for."""
        return self.activated and self.gate_open and self.attempt_id is None

    def cursor(self) -> Optional[Cursor]:
        """The seed's ``cursor``: None before activation.

        The seed's check of a malformed stored cursor ("stored replica delivery
        cursor is invalid") is made where the row is parsed (``impl.tables``):
        an activated row reaches here with a valid stream id and sequence.
        """
        if not self.activated:
            return None
        # An activated row's stream id was checked to be an id where it was parsed (``impl.tables``).
        return Cursor(cast(str, self.stream_id), self.applied_sequence)

    def required_cursor(self) -> Cursor:
        """The seed's ``requiredCursor``: the cursor of an activated replica, else corrupt."""
        found = self.cursor()
        if found is None:
            raise CorruptReplica("project environment replica has not been activated")
        return found

    def organisation(self) -> str:
        """The seed's ``authorityOrgId``: the organisation of an activated replica, else corrupt.

        An activated row's organisation was checked where the row is parsed
        (``impl.tables``); only activation is left to check here.
        """
        if not self.activated:
            raise CorruptReplica("stored replica organization is invalid")
        return cast(str, self.org_id)  # checked to be a segment where an activated row is parsed


@dataclass(frozen=True, slots=True)
class LiveRecord:
    """A ``records`` row: a served record and what the replica made of it."""

    state: BindingState
    mat: Materialization

    def result(self) -> RecordResult:
        return RecordResult(self.state, self.mat)


@dataclass(frozen=True, slots=True)
class StagedRecord:
    """A ``stage_records`` row; ``present`` once a page or delivery of the attempt named it."""

    state: BindingState
    mat: Materialization
    present: bool  # False: copied from the live view at reset; not promoted unless named again

    def result(self) -> RecordResult:
        return RecordResult(self.state, self.mat)


@dataclass(frozen=True, slots=True)
class StagedProject:
    """A ``stage_projects`` row: how far the attempt's snapshot of one project got."""

    record_version: Optional[int]  # None until its first page
    last_key: Optional[str]  # the last key of the last accepted page
    complete: bool  # the last accepted page was the final one


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    """A ``receipts`` row: the MAC of what a delivery asked, and what it was answered."""

    request_mac: str  # hex HMAC of the canonical semantic request (never the request)
    ok: bool
    code: Optional[RefusalCode]
    result: Optional[RecordResult]
    record_version: Optional[int]


@dataclass(frozen=True, slots=True)
class OpenedValue:
    """A value row with its sealed blob opened (the plaintext; only tests and ``export_state`` hold one)."""

    revision: int
    generation: int
    value_ref: ValueRef
    value: str
