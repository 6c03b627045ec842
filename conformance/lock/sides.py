"""Which real side runs ``impl.lock`` in the lock lockstep: one name each, for the command line and the tests.

Models: ``Side``, the built-in real sides of ``example.RealSide``: ``THREADS`` (``threads.ThreadSide``: each lock
user a thread of the harness, a kill a ``Killed`` exception where it stopped; the gate's, the cheapest) and
``PROCESSES`` (``forked.ProcessSide``: each lock user a process forked from the harness, a kill the kernel's
SIGKILL of it, paused, then reaped). Both run the real calls on a real directory, stop before every step the model
takes as a move, and take the probes of other processes from the harness's ``World``; ``factory`` makes an
example's side (``example.SideFactory``).

Leaves out on purpose: an adapter's side (``adapter_side``: any implementation over docs/protocol.md section 12,
the project's own among them with ``envreplica adapter --protocol lock --impl lock --side SIDE``).
"""

from __future__ import annotations

import enum

from envreplica.conformance.lock.example import SideFactory
from envreplica.conformance.lock.forked import ProcessSide
from envreplica.conformance.lock.threads import ThreadSide


class Side(str, enum.Enum):
    """A built-in real side of the lock lockstep (see the module)."""

    THREADS = "threads"
    PROCESSES = "processes"

    @property
    def factory(self) -> SideFactory:
        """What makes an example's side (``run.run_lock_lockstep``'s ``side``)."""
        return self.kind.of

    @property
    def kind(self) -> type[ThreadSide]:
        """The class of its sides (``serve.ImplServer`` makes them itself)."""
        return ThreadSide if self is Side.THREADS else ProcessSide


__all__ = ["Side"]
