"""Mutants only production-shaped inputs reveal: ``INPUT_MUTANTS``.

Each is a realistic one-line bug in the implementation that stays invisible
while every stream stops short of sequence 10, every snapshot names its
projects sorted and once, every key is short and every page's
acknowledgement is far from its bound. Same machinery as
``tests/impl_mutants.py`` (``ImplMutant``, ``replica_edit``,
``decisions_edit``: an exact source edit that must match once, installed on
a subclass), each with a hand-written ``scenario`` on which it parts from
the model (``tests/test_conformance_mutants.py`` checks scenarios the same
way for ``MUTANTS``).

* ``receipts_in_text_order``: receipts listed in the text order of their
  sequence ("10" before "2"): needs ten consumed sequences and a
  ``receipts`` read.
* ``snapshot_duplicate_ids_served``: a snapshot naming a project twice is
  served (the project's entries twice) instead of failing closed: needs a
  snapshot with a duplicate id while the replica serves.
* ``ack_bound_exclusive``: the acknowledgement bound compared with ``<``
  (a page whose ack is exactly ``ackPageBytes`` is refused
  ``ack_page_too_large``): needs a page sized to the byte.
* ``legacy_name_length_unchecked``: a legacy value's parameter name checks
  the key's characters but not the Segment rule's 64-character bound: a
  65-character key is read from the store (``value_missing`` or a value)
  instead of ``value_reference_invalid``.
* ``snapshot_sorted_order``: the snapshot lists projects sorted, not in the
  task's order (the lead project's entries must come first): needs a
  served snapshot asked in an unsorted order.
* ``replay_compared_as_text``: the cursor compared with a delivery's
  sequence as text: the tenth delivery is taken for a replay
  (``receipt_missing``), a replay of 9 after 10 for a gap.
"""

from __future__ import annotations

from envreplica.spec import wire

from adapter_requests import BOOT, begin, commit, delivery, legacy, op, page, rec, reset, snapshot
from impl_mutants import ImplMutant, decisions_edit, replica_edit

__all__ = ["INPUT_MUTANTS"]

A = rec("A")
#: A legacy key of 65 characters: each one a Segment allows, one too many (no legacy parameter name).
LEGACY_65 = "L" + "0" * 64


def _stranger_deliveries(count: int, start: int = 1) -> list[dict]:
    """``count`` consecutive deliveries to a project the replica does not hold: each consumed, refused."""
    return [delivery(rec("A", listing=n), sequence=n, project="p3") for n in range(start, start + count)]


def _exact_ack_page() -> tuple[int, dict]:
    """A one-record page of the attempt ``begin()`` opens, and the bytes of its acknowledgement as the
    seed's ``pageFits`` counts them (every result with the longest reason)."""
    request = page([A], version=1)
    frame = request["frame"]
    ack = {"kind": "env.replica.ack", "opId": frame["opId"], "ok": True, "phase": "page",
           "attemptId": frame["attemptId"], "projectId": frame["projectId"], "after": frame["after"],
           "recordVersion": frame["recordVersion"],
           "results": [{"state": r, "materialization": {"kind": "unavailable", "reason": "x" * 64}}
                       for r in frame["records"]],
           "complete": frame["complete"], "policyEpochs": [1], "appliedThrough": {"streamId": "s1", "sequence": 0}}
    return wire.json_bytes_len(ack), request


_ACK_BYTES, _ACK_PAGE = _exact_ack_page()

M = ImplMutant
INPUT_MUTANTS: tuple[ImplMutant, ...] = (
    M(
        "receipts_in_text_order",
        "receipts are listed in the text order of their sequence (\"10\" before \"2\")",
        (replica_edit("list_receipts", (
            "receipts = sorted(((r.stream_id, r.sequence), receipt_of_row(r)) for r in rows)",
            "receipts = sorted((((r.stream_id, r.sequence), receipt_of_row(r)) for r in rows),"
            " key=lambda kv: (kv[0][0], str(kv[0][1])))  # MUTANT: sequence sorted as text")),),
        tuple(BOOT + _stranger_deliveries(10) + [op("receipts")]),
    ),
    M(
        "snapshot_duplicate_ids_served",
        "a snapshot naming a project twice is served (its entries twice), not failed closed",
        (replica_edit("_snapshot", (
            "if len(set(requested)) != len(requested) or set(requested) != set(live_projects):",
            "if set(requested) != set(live_projects):  # MUTANT: duplicate ids not refused")),),
        tuple(BOOT + [snapshot("p1", "p1")]),
    ),
    M(
        "ack_bound_exclusive",
        "the acknowledgement bound is compared with < (a page exactly at ackPageBytes is refused)",
        (decisions_edit("ack_fits", (
            "return wire.json_bytes_len(ack) <= limit",
            "return wire.json_bytes_len(ack) < limit  # MUTANT: the bound itself is too large")),),
        (reset(ackPageBytes=_ACK_BYTES), begin(), _ACK_PAGE),
    ),
    M(
        "legacy_name_length_unchecked",
        "a legacy parameter name checks the key's characters, not the Segment's 64-character bound",
        (decisions_edit("plan_read", (
            "name = legacy_parameter_name(prefix, project_id, state.key)",
            "name = legacy_parameter_name(prefix, project_id, state.key[:64]) and "
            "\"/\".join((prefix, \"projects\", project_id, \"env\", state.key))  # MUTANT: no length bound")),),
        tuple(BOOT + [delivery(rec(LEGACY_65, ref=legacy(1)))]),
    ),
    M(
        "snapshot_sorted_order",
        "the snapshot lists the projects sorted, not in the task's order (the lead project first)",
        (replica_edit("_snapshot", (
            "for project in requested:  # task order: the lead project wins duplicate keys",
            "for project in sorted(requested):  # MUTANT: sorted, not the task's order")),),
        (reset(), begin(projects=("p2", "p1")), page(project="p2"), page(project="p1"),
         commit(versions=[("p1", 0), ("p2", 0)]), snapshot("p2", "p1")),
    ),
    M(
        "replay_compared_as_text",
        "the cursor and a delivery's sequence are compared as text (\"10\" <= \"9\")",
        (replica_edit("_delivery_prepare", (
            "if delivery.sequence <= current.sequence:",
            "if str(delivery.sequence) <= str(current.sequence):  # MUTANT: compared as text")),),
        tuple(BOOT + _stranger_deliveries(10)),
        note="the tenth delivery already parts (taken for a replay of a sequence never consumed): any stream "
             "that reaches 10 shows it, and the lockstep's short streams alone rarely do",
    ),
)
