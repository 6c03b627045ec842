"""What a lock lockstep run reached: the spec's "sometimes" items, every step, every answer, counted.

Models: the coverage of the lock lockstep, so that a pass cannot come from never reaching the interesting
states. ``LockCoverage`` counts, on the model's side of each move (``example.Example.reached``): each of
``spec.lock.SOMETIMES`` (a takeover, a busy answer, a kill inside the operation, a kill inside the acquisition
having changed the directory, an entry after a takeover), each step the model took as a move (``Pc``, by the
implementation's names: ``step:<name>``), each answer (``answer:<value>``). ``REQUIRED`` is what a run of the
tests' budget must reach; ``unreached`` lists what it did not.

Leaves out on purpose (not in ``REQUIRED``): the answers ``lost``, ``release-failed`` and ``error``, which no
state of the ``fixed`` variant reaches (a release always finds its own owner file: only a live owner's lock is
never taken over, and nothing else removes it; the write path of the seed is gone), and the silent steps (never
a move of their own).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from envreplica.conformance.lock import harness
from envreplica.impl import lock as il
from envreplica.model import lock as ml
from envreplica.spec import lock as sl

#: The spec's "sometimes" items, by name.
SOMETIMES = tuple(p.name for p in sl.SOMETIMES)
#: Answers the fixed variant never gives (see the module).
UNREACHABLE_ANSWERS = frozenset({sl.Answer.LOST, sl.Answer.RELEASE_FAILED, sl.Answer.ERROR})


def required(steps: Iterable[il.Step]) -> frozenset[str]:
    """What a run must reach, given the steps its processes stop at (``harness.paused_at``)."""
    return frozenset(SOMETIMES) | {f"step:{s.value}" for s in steps} | {
        f"answer:{a.value}" for a in sl.Answer if a not in UNREACHABLE_ANSWERS}


#: What a run of the tests' budget must reach (every bounds stops at the same steps: the fixed variant's).
REQUIRED = required(harness.paused_at(ml.LockBounds("any")))

#: The seed's steps a run must reach (its write-failed ``rmdir`` aside: only a takeover between another's
#: ``mkdir`` and its owner file's creation reaches it), and the answers its design gives.
SEED_REQUIRED_STEPS = (ml.Pc.MKDIR, ml.Pc.CREATE, ml.Pc.WRITE, ml.Pc.STAT, ml.Pc.READ, ml.Pc.KILL, ml.Pc.PROC,
                       ml.Pc.STAT_AGAIN, ml.Pc.RENAME_STALE, ml.Pc.UNLINK_STALE, ml.Pc.RMDIR_STALE, ml.Pc.ENTER,
                       ml.Pc.UNLINK_RELEASE, ml.Pc.RMDIR_RELEASE)
SEED_ANSWERS = (sl.Answer.OK, sl.Answer.BUSY, sl.Answer.FAILED_COMMITTED)


def required_for(design: str, max_tries: int) -> frozenset[str]:
    """What a run of an implementation of ``design`` (``protocol.DESIGNS``) must reach. With many tries before busy
    (the seed's 80), no example of the lockstep's length gives up busy: neither the busy answer nor the
    "sometimes" item of a busy waiter is required then."""
    if design == "claim":
        wanted = set(REQUIRED)
    else:
        wanted = set(SOMETIMES) | {f"step:{pc.value}" for pc in SEED_REQUIRED_STEPS} | {
            f"answer:{a.value}" for a in SEED_ANSWERS}
    if max_tries > 4:
        wanted -= {f"answer:{sl.Answer.BUSY.value}", "sometimes_busy"}
    return frozenset(wanted)


@dataclass
class LockCoverage:
    """Counts of each item reached, over a run's examples."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: int = 0
    moves: int = 0

    def add(self, reached: Iterable[str], moves: int) -> None:
        self.counts.update(reached)
        self.examples += 1
        self.moves += moves

    def unreached(self, wanted: Iterable[str] = REQUIRED) -> list[str]:
        return sorted(item for item in wanted if not self.counts[item])

    def sometimes(self) -> dict[str, int]:
        return {name: self.counts[name] for name in SOMETIMES}
