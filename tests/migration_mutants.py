"""Deliberately broken readings of the paired writer migration's steps, to test the tester.

Each mutant rewires ``model.migration.STEPS`` (the program counter's step table) the way a plausible bug in
``paired-writer-migration.js`` would: a step moved, a check dropped, a fence left out. The migration's model
check must catch each one with a short counterexample (``tests/test_migration_model.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from envreplica.model import migration as mm
from envreplica.model.migration import Pc


def _rerouted(step: Callable, routes: dict) -> Callable:
    """``step``, with its invocation sent to ``routes[pc]`` wherever it would go to ``pc`` next."""

    def mutated(cfg, st, proc, *extra):
        nxt, result = step(cfg, st, proc, *extra)
        moved = next((p for p in nxt.procs if p.pid == proc.pid), None)
        if moved is not None and moved.pc in routes:
            nxt = mm._with_proc(nxt, replace(moved, pc=routes[moved.pc]))
        return nxt, result

    return mutated


def _route(table: dict, at: Pc, routes: dict) -> None:
    fn, extra = table[at]
    table[at] = (_rerouted(fn, routes), extra)


def backup_after_apply(table: dict) -> None:
    """The children are applied first and backed up afterwards (the backups hold migrated content)."""
    _route(table, Pc.DRAIN, {Pc.BACKUP_RUN: Pc.APPLY_RUN})
    _route(table, Pc.APPLY_RESOURCE, {Pc.VERIFY: Pc.BACKUP_RUN})
    _route(table, Pc.BACKUP_RESOURCE, {Pc.APPLY_RUN: Pc.VERIFY})


def result_before_verify(table: dict) -> None:
    """The result is published right after the backups, before the applies and their verification."""

    def publish_unchecked(cfg, st, proc):
        files = replace(st.files, result=mm.Evidence(proc.backups))
        return mm._go(replace(st, files=files), proc, Pc.APPLY_RUN)

    table[Pc.PUBLISH_RESULT] = (publish_unchecked, ())
    _route(table, Pc.BACKUP_RESOURCE, {Pc.APPLY_RUN: Pc.PUBLISH_RESULT})
    _route(table, Pc.APPLY_RESOURCE, {Pc.VERIFY: Pc.COMPLETE_RUN})


def maintenance_released_early(table: dict) -> None:
    """Maintenance is completed (writers admitted again) after the verification, before the result is published."""
    _route(table, Pc.VERIFY, {Pc.PUBLISH_RESULT: Pc.COMPLETE_RUN})

    def complete(cfg, st, proc, i):
        st = mm._store(st, i, admission=mm.Admission.OPEN)
        return mm._go(st, proc, Pc.COMPLETE_RESOURCE if i == 0 else Pc.PUBLISH_RESULT)

    def publish_and_return(cfg, st, proc):
        nxt, result = mm.publish_result(cfg, st, proc)
        if isinstance(result, mm.Done):
            return mm._end(nxt, proc), mm.Done("migrated")
        return nxt, result

    table[Pc.COMPLETE_RUN] = (complete, (0,))
    table[Pc.COMPLETE_RESOURCE] = (complete, (1,))
    table[Pc.PUBLISH_RESULT] = (publish_and_return, ())


def recovery_unfenced(table: dict) -> None:
    """The recovery restores without fencing the stores: writers are still admitted while it runs."""
    _route(table, Pc.PUBLISH_RECOVERY, {Pc.FENCE_RUN: Pc.RESTORE_RUN})


def recovery_skips_revalidation(table: dict) -> None:
    """The recovery publishes its request without revalidating the stores against its plan under the lock."""

    def publish_unrevalidated(cfg, st, proc):
        return mm._go(st, proc, Pc.PUBLISH_RECOVERY)

    table[Pc.REVALIDATE] = (publish_unrevalidated, ())


def migration_ignores_recovery(table: dict) -> None:
    """A rerun of the migration does not look for a selected recovery before it applies."""

    def reconcile_regardless(cfg, st, proc):
        files = st.files
        nxt, result = mm.reconcile_before(cfg, replace(st, files=replace(files, recovery=None)), proc)
        return replace(nxt, files=replace(nxt.files, recovery=files.recovery)), result

    table[Pc.RECONCILE] = (reconcile_regardless, ())


MUTANTS: dict[str, Callable[[dict], None]] = {
    f.__name__: f for f in (backup_after_apply, result_before_verify, maintenance_released_early,
                            recovery_unfenced, recovery_skips_revalidation, migration_ignores_recovery)
}
