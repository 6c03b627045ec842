"""Deliberately broken SQLite replicas in the API that docs/protocol.md section 6 exposes.

Each ``ImplMutant`` here is one realistic 1-3 line bug in a method of
``SqliteReplica`` that section 5's ops never call: readiness
(``is_ready``, ``await_ready``), ``diagnose``, and the ``after_commit`` hook
that ``crashAfterCommit`` counts commits with. Before the ops ``ready``,
``diagnostics`` and ``crashAfterCommit`` existed, no adapter request could
tell any of them from the original; now the lockstep's ``ci`` profile must
catch each (``tests/test_api_mutants.py``). They are built with
``tests/impl_mutants.py``'s source-edit mechanism (``replica_edit``: an exact
text edit that must match exactly once, so a rewrite of the implementation
fails loudly instead of silently turning a mutant back into the original).

Each carries ``scenario``: adapter requests on which it parts from the
model (checked clean on the real implementation, divergent on the mutant).

Left out, as equivalent through the adapter (``EQUIVALENT_API_MUTANTS``,
checked equivalent on every scenario): ``is_ready`` ignoring the attempt id
(``activated and gate_open``). The write path never leaves the gate open with
an attempt (``begin`` closes it, ``complete`` clears the attempt in the same
transaction), so no reachable row tells the two apart.
"""

from __future__ import annotations

from impl_mutants import ImplMutant, replica_edit

from adapter_requests import (
    BOOT,
    begin,
    crash,
    delivery,
    diagnostics,
    op,
    page,
    put,
    ready,
    rec,
    reset,
)

__all__ = ["API_MUTANTS", "EQUIVALENT_API_MUTANTS"]

A = rec("A")

M = ImplMutant
API_MUTANTS: tuple[ImplMutant, ...] = (
    M(
        "ready_ignores_the_gate",
        "is_ready checks only that no attempt is open: a replica closed idle (close, restart) or never "
        "activated reports ready",
        (replica_edit("is_ready", (
            "return tx.authority().serving", "return tx.authority().attempt_id is None  # MUTANT: gate forgotten")),),
        tuple(BOOT + [op("restart"), ready(0)]),
    ),
    M(
        "await_ready_returns_at_the_deadline",
        "await_ready returns at its deadline instead of raising TimeoutError: a wait that timed out "
        "reads as ready",
        (replica_edit("await_ready", (
            'raise TimeoutError("the replica did not become ready before the deadline")',
            "return  # MUTANT: the deadline passed, but the caller is told it is ready")),),
        tuple([reset(), begin(), ready(1)]),
    ),
    M(
        "diagnose_closed_gate_as_mismatch",
        "diagnose skips its gate check: a closed gate (staging, idle) is reported as projects_mismatch",
        (replica_edit("diagnose", (
            "if not a.gate_open or a.attempt_id is not None:", "if False:  # MUTANT: the gate is not looked at")),),
        tuple(BOOT + [begin("a2"), diagnostics()]),
    ),
    M(
        "after_commit_only_on_change",
        "after_commit is called only after a transaction that changed a row: a write transaction that wrote "
        "nothing (a transient refusal) is not counted, and crashAfterCommit crashes late or never",
        (replica_edit("_write", (
            "    if hook is not None:\n", "    if hook is not None and moved:  # MUTANT\n")),),
        tuple(BOOT + [crash(delivery(A, sequence=3), 1), op("status")]),
    ),
)

#: Bugs no adapter request can tell from the original (see the module docstring).
EQUIVALENT_API_MUTANTS: dict[str, ImplMutant] = {
    "ready_ignores_the_attempt": M(
        "ready_ignores_the_attempt",
        "is_ready ignores the attempt id (activated and gate open only)",
        (replica_edit("is_ready", (
            "return tx.authority().serving",
            "return (lambda a: a.activated and a.gate_open)(tx.authority())  # MUTANT")),),
        (),
        observe="none",
    ),
}

# A scenario for the equivalent one to be held on (with every API mutant's): readiness across each gate.
READINESS_TOUR = tuple([reset(), ready(0), begin(), ready(0), put(), page([A], version=1), ready(1),
                        op("commit", frame={"attemptId": "a1", "highWater": {"streamId": "s1", "sequence": 0},
                                            "versions": [{"projectId": "p1", "recordVersion": 1}]}),
                        ready(0), diagnostics(), begin("a2"), ready(0), op("close"), ready(0), op("restart"),
                        ready(0), diagnostics()])
