"""What a migration lockstep run reached: every step, refusal, write outcome, fault and way of running, counted.

Models: the coverage of the migration lockstep, so that a pass cannot come from never reaching the
interesting states. ``MigrationCoverage`` counts, on the model's side of each move: the step each invocation
took (``model.migration.Pc``, by the implementation's names), each refusal code an invocation ended with, each
foreign write's outcome, each fault and repair, each way an invocation ran (``Mode``), crashes after a step
that changed a store; ``REQUIRED`` is what a run of the ``ci`` budget must reach, and ``unreached`` lists
what it did not.

Leaves out on purpose (not in ``REQUIRED``), each with why:

- ``backup_exists``, ``completed_migration_changed``, ``verification_incomplete``,
  ``store_under_recovery``, ``changed_store_has_no_backup``: under
  the fixed steps and the implementation's readings no state reaches them (the backup is kept, a store reads
  as applied by its receipt whatever was written after it reopened, the installation lock orders two
  invocations' fences and publications, every apply comes after both backups); an exhaustive search of the
  model with the lockstep's readings never produced them (``tests/test_migration_lockstep.py``, nightly:
  7.3 million states at three bounds); and ``content_only_route_required``, a fresh request over two stores
  at the new version: the stores start at version 1, and a published request is never taken away (it is
  ``tests/test_paired_errors.py``'s, and ``tests/test_migration_adapter.py``'s through the adapter protocol's
  ``reset`` with two migrated stores);
- ``paired_recovery_request_conflict`` (two recoveries that planned differently, one publishing before the
  other), ``store_not_original`` (a rerun of the migration applies a store between a recovery's plan and
  its revalidation) and ``paired_migration_result_conflict`` (the result edited between a rerun's check of
  it and its publication): reachable, but too rare for a count budget; the model check covers the first two;
- ``exec``: a fresh interpreter costs most of a second, so only the ``nightly`` profile runs them (a test
  runs a few).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from envreplica.conformance.migration.observe import Outcome
from envreplica.impl.paired import MIGRATE_STEPS, RECOVER_STEPS
from envreplica.model import migration as mm
from envreplica.spec.migration import EXIT_STATUS, OLD_VERSION, Refusal

#: Refusals no state of the lockstep's bounds reaches (see the module).
UNREACHABLE = frozenset({Refusal.BACKUP_EXISTS, Refusal.COMPLETED_MIGRATION_CHANGED, Refusal.VERIFICATION_INCOMPLETE,
                         Refusal.STORE_UNDER_RECOVERY, Refusal.CHANGED_STORE_HAS_NO_BACKUP,
                         Refusal.CONTENT_ONLY_ROUTE})
#: Reachable, not required of a count budget (see the module).
RARE = frozenset({Refusal.RECOVERY_REQUEST_CONFLICT, Refusal.STORE_NOT_ORIGINAL, Refusal.RESULT_CONFLICT})

#: What a ``ci`` run must reach: each group's items.
REQUIRED: dict[str, frozenset[str]] = {
    "step": frozenset(MIGRATE_STEPS) | frozenset(RECOVER_STEPS),
    "refusal": frozenset(r.value for r in EXIT_STATUS) - {r.value for r in UNREACHABLE | RARE},
    "write": frozenset({"landed", "fence"}),
    "fault": frozenset({"lock", "unlock", "read-only", "writable", "edit request", "edit result", "edit recovery",
                        "edit backup", "repair request", "repair result", "repair recovery", "repair backup",
                        "move-away result"}),
    "invocation": frozenset({"migrate", "recover", "migrate no-key", "migrate wrong-key", "migrate same-path",
                             "migrate symlink", "migrate hardlink", "migrate copy", "recover copy"}),
    "mode": frozenset({"thread", "fork"}),
    "crash": frozenset({"after a store changed", "holding the lock"}),
    "end": frozenset({"migrated", "recovered"}),
}


@dataclass
class MigrationCoverage:
    """Counts per group and item (``REQUIRED`` names the groups)."""

    counts: dict[str, Counter[str]] = field(default_factory=lambda: {g: Counter() for g in REQUIRED})

    def add(self, group: str, item: str) -> None:
        self.counts.setdefault(group, Counter())[item] += 1

    def record(self, pre: mm.MigrationState, action: mm.Action, mode: str, outcome: Outcome) -> None:
        """Count one move, as the model took it (``pre``: the model state before it)."""
        if isinstance(action, mm.Invoke):
            self.add("invocation", action.role.value + ("" if action.fault is mm.InputFault.NONE
                                                        else f" {action.fault.value}"))
            self.add("mode", mode)
        elif isinstance(action, mm.Step):
            if outcome.kind == "step" or (outcome.kind == "exit" and outcome.step):
                self.add("step", str(outcome.step))
            if outcome.kind == "exit" and outcome.code:
                self.add("refusal", outcome.code)
            if outcome.kind == "exit" and outcome.status == 0:
                proc = next(p for p in pre.procs if p.pid == action.pid)
                self.add("end", "migrated" if proc.role is mm.Role.MIGRATE else "recovered")
        elif isinstance(action, mm.Crash):
            proc = next(p for p in pre.procs if p.pid == action.pid)
            if any(s.backup is not None or s.version != OLD_VERSION for s in pre.stores):
                self.add("crash", "after a store changed")
            if proc.lock:
                self.add("crash", "holding the lock")
        elif isinstance(action, mm.Write):
            self.add("write", str(outcome.code))
        elif isinstance(action, (mm.Edit, mm.Repair, mm.MoveAway)):
            self.add("fault", f"{action.kind} {action.doc.value}")
        elif isinstance(action, (mm.Lock, mm.Unlock, mm.ReadOnly, mm.Writable)):
            self.add("fault", action.kind)

    def merge(self, other: "MigrationCoverage") -> None:
        for group, counter in other.counts.items():
            self.counts.setdefault(group, Counter()).update(counter)

    def unreached(self, required: dict[str, frozenset[str]] = REQUIRED,
                  unavailable: Iterable[str] = ()) -> list[str]:
        """``group: item`` for each required item never counted (``unavailable``: items this machine cannot do)."""
        skip = set(unavailable)
        return [f"{g}: {item}" for g, items in required.items() for item in sorted(items)
                if not self.counts.get(g, Counter())[item] and f"{g}: {item}" not in skip]

    def reached(self, required: dict[str, frozenset[str]] = REQUIRED) -> tuple[int, int]:
        """(required items reached, required items)."""
        total = sum(len(items) for items in required.values())
        return total - len(self.unreached(required)), total

    def rows(self) -> list[tuple[str, str, int]]:
        return [(g, item, n) for g, counter in sorted(self.counts.items()) for item, n in sorted(counter.items())]


#: The refusals each class of the environment's faults causes (none of them without it).
FAULT_REFUSALS: dict[mm.Fault, frozenset[Refusal]] = {
    mm.Fault.INPUT: frozenset({Refusal.SAME_STORE, Refusal.MASTER_KEY_MISSING, Refusal.MASTER_KEY_WRONG,
                               Refusal.REQUEST_NOT_AT_HOME}),
    mm.Fault.LOCK: frozenset({Refusal.STORE_BUSY}),
    mm.Fault.READ_ONLY: frozenset({Refusal.STORE_READ_ONLY}),
    mm.Fault.EDIT: frozenset({Refusal.REQUEST_CHANGED, Refusal.EVIDENCE_CUSTODY_CHANGED,
                              Refusal.INVALID_RECOVERY_INTENT,
                              Refusal.BACKUP_EVIDENCE_CHANGED, Refusal.BACKUP_CONFLICT, Refusal.BACKUP_CHANGED}),
}
#: The fault coverage items of each class.
_FAULT_ITEMS = {
    mm.Fault.LOCK: frozenset({"lock", "unlock"}),
    mm.Fault.READ_ONLY: frozenset({"read-only", "writable"}),
    mm.Fault.EDIT: frozenset(f"{verb} {doc.value}" for verb in ("edit", "repair") for doc in mm.Doc),
    mm.Fault.MOVE_AWAY: frozenset({"move-away result"}),
}


def required_for(cfg: mm.MigrationBounds, steps: Iterable[mm.Pc], modes: Iterable[str],
                 input_faults: Iterable[mm.InputFault]) -> dict[str, frozenset[str]]:
    """What a ``ci`` run must reach of an implementation held under ``cfg`` that pauses at ``steps``, runs
    invocations in ``modes`` and takes ``input_faults`` (an adapter's declaration): ``REQUIRED`` without what
    its faults, its readings and its variant leave out (``migration_completed`` is the fix of F4's;
    ``installation_lock_held`` the lock's reading ``refuse``)."""
    refusals = set(REQUIRED["refusal"])
    for fault, codes in FAULT_REFUSALS.items():
        if fault not in cfg.faults:
            refusals -= {c.value for c in codes}
    if mm.Fix.RESULT_ENDS_RECOVERY not in cfg.fixes:
        refusals.discard(Refusal.MIGRATION_COMPLETED.value)
    if cfg.reading.lock is not mm.LockReading.REFUSE:
        refusals.discard(Refusal.LOCK_HELD.value)
    return {
        "step": frozenset(pc.value for pc in steps),
        "refusal": frozenset(refusals),
        "write": REQUIRED["write"],
        "fault": frozenset().union(*(_FAULT_ITEMS.get(f, frozenset()) for f in cfg.faults)),
        "invocation": frozenset({"migrate", "recover"}) | {f"migrate {f.value}" for f in input_faults}
        | ({"recover copy"} if mm.InputFault.COPY in set(input_faults) else set()),
        "mode": frozenset(modes),
        "crash": REQUIRED["crash"],
        "end": REQUIRED["end"],
    }
