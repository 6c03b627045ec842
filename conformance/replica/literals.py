"""The old name of ``envreplica.conformance.literals`` (moved to ``conformance``'s top: every lockstep pins its
literals there, issue 41), kept so that code importing ``envreplica.conformance.replica.literals`` (or the
deprecated ``envreplica.conformance.lockstep.literals``) still runs.

The names are the new module's own functions; patch them there (``envreplica.conformance.literals``): a run reads
them from it, not from here.
"""

from __future__ import annotations

from envreplica.conformance.literals import applies, own_constants, pinned, source_files  # noqa: F401
