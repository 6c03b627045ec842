"""Deliberately broken SQLite replicas that split one of the seed's transactions in two.

A blind spot of a lockstep without crash points: a crash between the transactions of one operation.
Each mutant moves part of a write transaction into a transaction of its own,
right after it. Without crashes such a split is invisible through the adapter
(nothing runs between the halves: they sit outside any value-store read), so
the single-process lockstep passed them before ``crashAfterCommit`` existed.
With it, the lockstep crashes the implementation after the first half and
compares the file it reopens with the model's crash successor.

Same machinery as ``tests/impl_mutants.py`` (exact source edits on a subclass).
"""

from __future__ import annotations

from impl_mutants import ImplMutant, replica_edit

from adapter_requests import BOOT, crash, delivery, op, put, rec

A = rec("A")

#: The cursor's move, split from its receipt: ``_save_receipt`` leaves it to a second transaction.
_RECEIPT_WITHOUT_CURSOR = replica_edit("_save_receipt", (
    "tx.set_authority(applied_sequence=frame.delivery.sequence)",
    "self._cursor_later = frame.delivery.sequence  # MUTANT: the cursor moves in its own transaction"))
_CURSOR_IN_ITS_OWN_TRANSACTION = replica_edit("apply_delivery", (
    "        return self._delivery_final(tx, frame, mac, prepared)\n",
    "        answer = self._delivery_final(tx, frame, mac, prepared)\n"
    "    if getattr(self, '_cursor_later', None):  # MUTANT\n"
    "        with self._write() as tx: tx.set_authority(applied_sequence=self._cursor_later); self._cursor_later = None\n"
    "    return answer\n"))

#: A live delivery's record version, bumped in a transaction of its own right after its prepare.
_BUMP_LATER = replica_edit("_delivery_prepare", (
    "tx.set_project_version(project, frame.record_version)",
    "self._bump_later = (project, frame.record_version)  # MUTANT: bumped in its own transaction"))
_BUMP_IN_ITS_OWN_TRANSACTION = replica_edit("apply_delivery", (
    "    if not isinstance(prepared, _Prepared):\n",
    "    if getattr(self, '_bump_later', None):  # MUTANT\n"
    "        with self._write() as tx: tx.set_project_version(*self._bump_later); self._bump_later = None\n"
    "    if not isinstance(prepared, _Prepared):\n"))

M = ImplMutant
CRASH_MUTANTS: tuple[ImplMutant, ...] = (
    M(
        "receipt_commits_before_cursor",
        "a delivery's receipt commits in one transaction and the cursor moves in the next",
        (_RECEIPT_WITHOUT_CURSOR, _CURSOR_IN_ITS_OWN_TRANSACTION),
        tuple(BOOT + [put(), crash(delivery(A), 3), op("status"), delivery(A)]),
        note="a crash between the halves leaves a receipt past the cursor: the re-sent delivery is corrupt",
    ),
    M(
        "version_bump_own_transaction",
        "a live delivery writes its record, then bumps its project's record version in a second transaction",
        (_BUMP_LATER, _BUMP_IN_ITS_OWN_TRANSACTION),
        tuple(BOOT + [put(), crash(delivery(A), 1), op("status")]),
        observe="state",
        note="a crash between the halves leaves the new record under the old record version",
    ),
)
