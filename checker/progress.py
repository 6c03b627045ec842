"""How far a long run has got: ``Tick``, what the model checks and the locksteps report while they run.

A stage that may take more than a few seconds (a breadth-first search, a lockstep's examples, the concurrent
histories, the minimization of a divergence) takes an optional ``progress`` callable and calls it with a
``Tick`` as it goes: ``done`` units of ``total`` (None: not known ahead, as a search's states), the finer
``work`` its rate is measured in (a lockstep's steps or moves), and a ``note`` (a search's depth, the phase a
run is in). What is shown, how often and where (a progress row on a terminal, a heartbeat line in a CI log, a
pipe from the gate's background process) is the command line's (``envreplica.cli.progress``); a tick carries
counts only, never a time, so a run reports the same ticks on a busy machine as on an idle one.

Left out: cancelling a run from its progress hook (a hook only watches).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

__all__ = ["Tick", "ProgressHook", "suite_tick"]


@dataclass(frozen=True)
class Tick:
    """One report of a running stage."""

    done: int  # units done so far (examples, states, histories, replays)
    total: Optional[int] = None  # units the stage will do, when known ahead (a budget); None: not known
    unit: str = "examples"
    work: Optional[int] = None  # the finer count its rate is of (steps, moves), when there is one
    work_unit: str = "steps"
    note: str = ""  # what else to say: the search's depth, the phase ("shrinking a divergence")

    def as_json(self) -> dict[str, Any]:
        """The tick as a JSON object (the gate's background process sends it so; ``from_json`` reads it)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Tick":
        """A tick from ``as_json``'s object; ``ValueError`` when it is not one."""
        try:
            tick = cls(**data)
        except TypeError as error:
            raise ValueError(f"not a progress tick: {data!r} ({error})") from None
        if not isinstance(tick.done, int) or not (tick.total is None or isinstance(tick.total, int)):
            raise ValueError(f"not a progress tick: {data!r} (done and total are integers)")
        return tick


#: What a stage calls as it goes.
ProgressHook = Callable[[Tick], None]


def suite_tick(progress: ProgressHook, before: int, where: str, states: int, depth: int, phase: str) -> None:
    """A suite's search, told to ``progress``: ``states`` reached at one bounds (``where``: which, of how many)
    after ``before`` at the bounds before it, at ``depth``, or in ``phase`` (its liveness check)."""
    progress(Tick(before + states, None, "states", note=f"{where}, {phase}" if phase else f"{where}, depth {depth}"))
