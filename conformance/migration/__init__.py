"""The migration lockstep: the paired writer migration's implementation held to its model, move by move.

``run_migration_lockstep`` (``run``) drives ``model.migration`` and the real ``impl.paired`` (two version-1
stores on disk, ``envreplica migrate`` and ``envreplica recover`` invoked in this process and as processes)
with the same moves, drawn by Hypothesis (``machine``): invocations and each of their steps, a crash after
any step, a foreign writer that connects, writes and holds write transactions at any moment, input faults
(no key, a wrong key, one store named twice), read-only stores, publications and backups edited by hand. After
every move both sides' outcomes (the step taken, the exit status and refusal code) and observations (every
store's version, data, fence and backup, the publications, the lock, the live invocations) must be equal
(``example``); a divergence is shrunk to a few moves (``run.minimize``) and reported with coverage of every
step, refusal and fault (``coverage``).

The same lockstep drives any implementation that speaks the migration adapter protocol (docs/protocol.md,
section 11): ``protocol`` holds its words, ``adapter_side`` is the real side behind an adapter command
(``envreplica conformance --protocol migration``), ``serve`` the project's own adapters (``envreplica adapter
--protocol migration --impl paired|model``).

Modules, each importing only those above it: ``writer`` (the foreign writer process), ``zygote`` (forks real
invocations), ``observe`` (the compared shape), ``disk`` (the real files and faults), ``invocations`` (real
invocations paused at each step), ``sides`` (the two sides), ``protocol`` (the adapter protocol's words),
``coverage``, ``traces``, ``example`` (one example's judgement, and a trace replayed on fresh sides), ``tour``
(the coverage tour), ``adapter_side`` (the real side behind an adapter), ``serve`` (the project's adapters),
``machine`` (Hypothesis), ``findings`` (the finding a divergence is), ``run``.
"""

from typing import Any

__all__ = ["MigrationLockstepReport", "migration_settings", "minimize", "replay_moves", "run_migration_lockstep"]


def __getattr__(name: str) -> Any:
    """The run's names, imported on first use: ``python -m envreplica.conformance.migration.writer`` (and
    ``.zygote``) then start without the lockstep's imports."""
    if name in __all__:
        from envreplica.conformance.migration import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
