"""The replica's SQLite schema (SQLAlchemy Core), one table per table of the seed.

Models: the seed's tables (authority, projects, records, values, the three
staging tables, receipts) plus ``store_meta`` (the writer contract: which
schema version the file holds). Keys and constraints make impossible rows
impossible: exactly one authority row; an open gate has no attempt; a
tombstone has no value reference; a materialization reason exists exactly when
the record is not installed; a value needs its record and a record its
project (foreign keys); a refused receipt has a code and no result, an applied
one the reverse.

Integrity columns (schema version 2, ``impl.integrity``): every replica table
has ``tag``, the HMAC of the row's other columns under a subkey of the master
key. ``projects`` and ``stage_projects`` hold the masked set digest of their
rows (``rows_digest``) and the write counter that masked it (``written_at``);
the authority row holds the write counter, the stream incarnation that
receipts bind (``stream_epoch``), and the digests of the project rows, the
staged project rows and the receipts. ``TABLES_V1`` are the tables of
versions 0 and 1 (without them), for ``envreplica migrate`` and its tests.

Leaves out on purpose: the seed's ``updatedAt``/``createdAt`` columns (never
read), and indexes beyond the primary keys (every query here is by key prefix,
which the primary keys serve).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
)

#: The schema version this code writes. Opening a newer file fails; an older
#: file must be migrated (``envreplica migrate``) before this code writes it.
SCHEMA_VERSION = 2

MATERIALIZATIONS = ("installed", "withheld", "unavailable")


def _record_columns() -> list[Column[Any]]:
    """The columns of a record (live or staged): a BindingState and its materialization."""
    return [
        Column("revision", Integer, nullable=False),
        Column("generation", Integer, nullable=False),
        Column("tombstone", Boolean, nullable=False),
        Column("value_ref_json", Text),
        Column("binding_json", Text),
        Column("policy_epoch", Integer),
        Column("listing_generation", Integer, nullable=False),
        Column("materialization", Text, nullable=False),
        Column("materialization_reason", Text),
    ]


def _record_checks(prefix: str) -> list[CheckConstraint]:
    kinds = ", ".join(f"'{k}'" for k in MATERIALIZATIONS)
    return [
        CheckConstraint("revision >= 0 AND generation >= 0 AND listing_generation >= 0", name=f"{prefix}_counts"),
        CheckConstraint("tombstone = (value_ref_json IS NULL)", name=f"{prefix}_tombstone_has_no_ref"),
        CheckConstraint(f"materialization IN ({kinds})", name=f"{prefix}_materialization_kind"),
        CheckConstraint("(materialization = 'installed') = (materialization_reason IS NULL)",
                        name=f"{prefix}_reason_unless_installed"),
        CheckConstraint("NOT (tombstone AND materialization = 'installed')", name=f"{prefix}_tombstone_not_installed"),
    ]


def _value_columns() -> list[Column[Any]]:
    """A sealed value and the head it was fetched for."""
    return [
        Column("revision", Integer, nullable=False),
        Column("generation", Integer, nullable=False),
        Column("value_ref_json", Text, nullable=False),
        Column("value_enc", LargeBinary, nullable=False),  # impl.sealing: AES-256-GCM, bound to the record
    ]


def _build(metadata: MetaData, integrity: bool) -> tuple[Table, ...]:
    """The replica's tables in ``metadata``: of schema version 2 (``integrity``), or of versions 0 and 1."""

    def tag() -> list[Column[Any]]:
        """The row's integrity tag (``impl.integrity``): HMAC of every other column."""
        return [Column("tag", LargeBinary, nullable=False)] if integrity else []

    def digest() -> list[Column[Any]]:
        """A set digest of a parent row's children, and the write counter that masked it."""
        return [Column("rows_digest", LargeBinary, nullable=False),
                Column("written_at", Integer, nullable=False)] if integrity else []

    def authority_integrity() -> list[Column[Any]]:
        return [
            Column("write_counter", Integer, nullable=False),  # committed write transactions (impl.anchor)
            Column("stream_epoch", Integer, nullable=False),  # the write that started this stream's receipts
            Column("live_digest", LargeBinary, nullable=False),  # masked digest of the projects rows
            Column("stage_digest", LargeBinary, nullable=False),  # masked digest of the stage_projects rows
            Column("receipts_digest", LargeBinary, nullable=False),  # masked digest of the receipts rows
        ] if integrity else []

    store_meta = Table(
        "store_meta",
        metadata,
        Column("key", Text, primary_key=True),
        Column("value", Text, nullable=False),
    )
    authority = Table(
        "authority",
        metadata,
        Column("id", Text, primary_key=True),
        Column("activated", Boolean, nullable=False),
        Column("gate_open", Boolean, nullable=False),
        Column("stream_id", Text),
        Column("applied_sequence", Integer, nullable=False),
        Column("attempt_id", Text),
        Column("org_id", Text),
        Column("policy_epochs_json", Text, nullable=False),
        *authority_integrity(),
        *tag(),
        CheckConstraint("id = 'replica'", name="one_authority_row"),
        CheckConstraint("applied_sequence >= 0", name="sequence_not_negative"),
        CheckConstraint("NOT (gate_open AND attempt_id IS NOT NULL)", name="open_gate_has_no_attempt"),
        CheckConstraint("activated OR (NOT gate_open AND attempt_id IS NULL)", name="inactive_is_closed"),
        CheckConstraint("NOT activated OR (stream_id IS NOT NULL AND org_id IS NOT NULL)",
                        name="active_has_stream_and_org"),
    )
    projects = Table(
        "projects",
        metadata,
        Column("project_id", Text, primary_key=True),
        Column("record_version", Integer, nullable=False),
        *digest(),
        *tag(),
        CheckConstraint("record_version >= 0", name="project_version_not_negative"),
    )
    records = Table(
        "records",
        metadata,
        Column("project_id", Text, nullable=False),
        Column("key", Text, nullable=False),
        *_record_columns(),
        *tag(),
        PrimaryKeyConstraint("project_id", "key"),
        ForeignKeyConstraint(["project_id"], ["projects.project_id"]),
        *_record_checks("record"),
    )
    values = Table(
        "record_values",
        metadata,
        Column("project_id", Text, nullable=False),
        Column("key", Text, nullable=False),
        *_value_columns(),
        *tag(),
        PrimaryKeyConstraint("project_id", "key"),
        ForeignKeyConstraint(["project_id", "key"], ["records.project_id", "records.key"]),
    )
    stage_projects = Table(
        "stage_projects",
        metadata,
        Column("attempt_id", Text, nullable=False),
        Column("project_id", Text, nullable=False),
        Column("record_version", Integer),
        Column("last_key", Text),
        Column("complete", Boolean, nullable=False),
        *digest(),
        *tag(),
        PrimaryKeyConstraint("attempt_id", "project_id"),
        CheckConstraint("record_version IS NULL OR record_version >= 0", name="stage_version_not_negative"),
    )
    stage_records = Table(
        "stage_records",
        metadata,
        Column("attempt_id", Text, nullable=False),
        Column("project_id", Text, nullable=False),
        Column("key", Text, nullable=False),
        *_record_columns(),
        Column("present", Boolean, nullable=False),
        *tag(),
        PrimaryKeyConstraint("attempt_id", "project_id", "key"),
        ForeignKeyConstraint(["attempt_id", "project_id"],
                             ["stage_projects.attempt_id", "stage_projects.project_id"]),
        *_record_checks("stage_record"),
    )
    stage_values = Table(
        "stage_values",
        metadata,
        Column("attempt_id", Text, nullable=False),
        Column("project_id", Text, nullable=False),
        Column("key", Text, nullable=False),
        *_value_columns(),
        *tag(),
        PrimaryKeyConstraint("attempt_id", "project_id", "key"),
        ForeignKeyConstraint(
            ["attempt_id", "project_id", "key"],
            ["stage_records.attempt_id", "stage_records.project_id", "stage_records.key"],
        ),
    )
    receipts = Table(
        "receipts",
        metadata,
        Column("stream_id", Text, nullable=False),
        Column("sequence", Integer, nullable=False),
        Column("request_mac", Text, nullable=False),
        Column("result_json", Text),
        Column("record_version", Integer),
        Column("ok", Boolean, nullable=False),
        Column("code", Text),
        *tag(),
        PrimaryKeyConstraint("stream_id", "sequence"),
        CheckConstraint("sequence >= 1", name="receipt_sequence_positive"),
        CheckConstraint("length(request_mac) = 64", name="receipt_mac_is_sha256_hex"),
        CheckConstraint("ok = (code IS NULL)", name="receipt_code_iff_refused"),
        CheckConstraint("ok = (result_json IS NOT NULL) AND ok = (record_version IS NOT NULL)",
                        name="receipt_result_iff_applied"),
    )
    # In an order safe for inserts (parents first).
    return store_meta, authority, projects, records, values, stage_projects, stage_records, stage_values, receipts


metadata = MetaData()
#: Every replica table of this schema version, in an order safe for inserts (parents first).
TABLES = _build(metadata, integrity=True)
store_meta, authority, projects, records, values, stage_projects, stage_records, stage_values, receipts = TABLES

#: The tables of schema versions 0 and 1 (no integrity columns; version 0 has no ``store_meta`` rows).
TABLES_V1 = _build(MetaData(), integrity=False)

#: Per tagged table, the columns its tag covers, in order (every column but ``tag``).
TAGGED = {t.name: tuple(c.name for c in t.c if c.name != "tag") for t in TABLES if t is not store_meta}


def tables_of(version: int) -> tuple[Table, ...]:
    """The tables of schema ``version`` (0: without ``store_meta``)."""
    if version >= 2:
        return TABLES
    return tuple(t for t in TABLES_V1 if version >= 1 or t.name != "store_meta")
