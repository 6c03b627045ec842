"""What a read serves, stated over the replica's state as the seed states it.

Models: ``readProjectEnvReplicaSnapshot`` of the seed, for the properties to
judge a state by: behind an activated, open gate with no attempt, each
requested project's live records in key order, an installed record with the
value stored for its head, the rest without a value. The read fails closed
(serves nothing) when the gate is not so, when the projects asked are not
exactly the replica's, or when the tables contradict themselves (an installed
record whose value row is missing or for another head, a withheld record that
kept a value, a value row of a held project without a record).

It is written here from the seed, apart from the executable model's read
(``model.replica.read_snapshot``), so that a property judges the model's
states instead of trusting the model's own read of them.

Leaves out on purpose: the fixed variant's re-judging of each served record
against the kept epochs (a defence in depth of the implementation, not the
seed's read: the properties ask what the seed would serve), task order and
duplicate project ids (the properties read every project once, in id order),
and the value's opening (the state holds plain values).

The state is read by its field names (``authority``, ``projects``,
``records``, ``values``), the shape every model state of this protocol has.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from envreplica.spec.domain import BindingState, MatKind
from envreplica.spec.frozen import Frozen


@dataclass(frozen=True)
class Served(Frozen):
    """One record a read serves: its project, its record, and its value (None: served without one)."""

    project_id: str  # the project it is served under
    state: BindingState  # the live record as stored
    value: Optional[str]  # the value stored for its head, when the record is installed


def serves(st: Any) -> bool:
    """Whether the gate lets a read through: activated, open, and no attempt open."""
    a = st.authority
    return a.gate.activated and a.gate.is_open and a.attempt_id is None


@lru_cache(maxsize=8192)
def served(st: Any) -> Optional[tuple[Served, ...]]:
    """What a read of every project of ``st`` serves, in (project, key) order; None when it fails closed.

    Cached (8,192 states): an invariant and the read step's properties ask it of the same state in turn."""
    if not serves(st):
        return None
    out = []
    for (project, key), row in sorted(st.records.items(), key=lambda kv: kv[0]):
        if project not in st.projects:
            continue  # not a project the replica holds: no read asks for it
        head = row.state.head
        value_row = st.values.get((project, key))
        if row.mat.kind is MatKind.INSTALLED:
            if (head.tombstone or value_row is None or value_row.revision != head.revision
                    or value_row.generation != head.generation or value_row.value_ref != head.value_ref):
                return None  # an installed record without the value of its head
            out.append(Served(project, row.state, value_row.value))
        elif value_row is not None:
            return None  # a record that is not installed kept a value
        else:
            out.append(Served(project, row.state, None))
    if any(k not in st.records for k in st.values if k[0] in st.projects):
        return None  # a value of a held project without a record
    return tuple(out)
