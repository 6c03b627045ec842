"""The lock lockstep's real side: processes that run ``impl.lock`` on a real directory, paused at every step, and
the world of pids they probe.

``World`` is the kernel as the processes see it, owned by the harness (as the migration lockstep's world owns its
stand-ins): which pids of which PID namespace are taken, by a process of which start time, and whether it is a
zombie. A kill makes a lock user a zombie (or frees its pid at once), a reap frees its pid, a reuse gives a free
pid to a new, unrelated process with the next start time. ``HarnessCalls`` answers ``kill(pid, 0)`` and
``/proc/PID/stat`` from it, and the process's own identity; every other call is the real one, on the real
directory.

``Process`` is one lock user: a thread running ``impl.lock.with_projection_lock`` once per ``START``, whose
``Calls`` stops before each step the model takes as a move of its own (``harness.paused_at``), reports it on its
queue and waits for an order. A ``DIE`` makes it a killed process, faithfully: it raises ``Killed`` (which no
``except Exception`` catches) from where it stopped, and every call it would make after that (the lock's clean-up
on the way out, its release) raises ``Killed`` before it touches anything. What it made on disk stays.

Leaves out on purpose: real processes, and so the kernel's kill. A thread is the cheaper lock user (a forked
process costs 3 to 4.6 times as much a move, docs/lock.md), and nothing the lock does depends on being a process
but what the harness owns anyway: its pid, start time and namespace (``Calls.identity``), and the liveness probes
of the others. What a thread cannot show is that a kill runs nothing: its ``Killed`` unwinds through the lock's
``finally`` and ``except BaseException`` clauses, and only the calls they make through the ``Calls`` are refused.
``forked`` (``sides.Side.PROCESSES``) runs the same lockstep with each lock user a process forked from the harness
and killed with SIGKILL while paused; ``tests/test_lock_impl.py`` and the stress (``reliability.lock_stress``) run
the lock in real processes killed at any instant.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Union

from envreplica.conformance.lock import harness
from envreplica.impl import lock as il
from envreplica.spec.lock import Effect

#: Seconds a harness waits for a process to report: a safety net against a hung thread, never a verdict.
SAFETY = 60.0


class HarnessError(RuntimeError):
    """The harness itself broke (a process that does not report, an order it cannot take)."""


class Killed(BaseException):
    """Raised in a killed process wherever it would run on (a ``BaseException``: no clean-up catches it)."""


@dataclass
class World:
    """The kernel's processes as the harness stages them: (namespace, pid) -> (start time, zombie)."""

    occupants: dict[tuple[int, int], tuple[int, bool]] = field(default_factory=dict)
    starts: dict[tuple[int, int], int] = field(default_factory=dict)  # the last start time each pid was given

    def born(self, ns: int, pid: int, start: int) -> None:
        self.occupants[(ns, pid)] = (start, False)
        self.starts[(ns, pid)] = max(start, self.starts.get((ns, pid), 0))

    def killed(self, ns: int, pid: int, zombie: bool) -> None:
        start, _ = self.occupants.pop((ns, pid))
        if zombie:
            self.occupants[(ns, pid)] = (start, True)

    def reaped(self, ns: int, pid: int) -> None:
        self.occupants.pop((ns, pid), None)

    def reused(self, ns: int, pid: int) -> None:
        """A new, unrelated process takes the free ``pid``: the next start time."""
        assert (ns, pid) not in self.occupants, f"pid {pid} of namespace {ns} is not free"
        self.born(ns, pid, self.starts.get((ns, pid), 0) + 1)

    def kill_probe(self, ns: int, pid: int) -> il.Probe:
        return il.Probe.OK if (ns, pid) in self.occupants else il.Probe.ESRCH

    def proc_stat(self, ns: int, pid: int) -> Optional[il.ProcStat]:
        seen = self.occupants.get((ns, pid))
        return None if seen is None else il.ProcStat(seen[0], "Z" if seen[1] else "S")


class HarnessCalls(il.Calls):
    """The real calls on the directory; the probes and the identity from the harness's ``World``; each ``Calls``
    method run noted (``ran``), and a stop before each step of ``pause`` (``Process.hook``)."""

    def __init__(self, proc: "Process") -> None:
        super().__init__(on_call=proc.hook)
        self.proc = proc
        self.ran: list[str] = []  # the Calls methods run since the last step ended (their Call's value)

    def _run(self, call: il.Call) -> None:
        if self.proc.dead:
            raise Killed()
        self.ran.append(call.value)

    def identity(self) -> il.Identity:
        p = self.proc
        return il.Identity(p.pid, p.start, harness.PIDNS_BASE + p.ns)

    def nonce(self) -> str:
        nonce, self.proc.next_nonce = self.proc.next_nonce, None
        if nonce is None:
            raise HarnessError(f"p{self.proc.slot} drew a nonce the harness did not give it")
        return nonce

    def inspect(self, lock_path: str) -> il.PathFacts:
        self._run(il.Call.INSPECT)
        return super().inspect(lock_path)

    def readdir(self, path: str) -> Union[tuple[str, ...], str]:
        self._run(il.Call.READDIR)
        return super().readdir(path)

    def mkdir(self, path: str) -> str:
        self._run(il.Call.MKDIR)
        return super().mkdir(path)

    def rmdir(self, path: str) -> str:
        self._run(il.Call.RMDIR)
        return super().rmdir(path)

    def unlink(self, path: str) -> str:
        self._run(il.Call.UNLINK)
        return super().unlink(path)

    def write_private(self, path: str, data: bytes) -> None:
        self._run(il.Call.WRITE)
        super().write_private(path, data)

    def read(self, path: str) -> Union[bytes, str]:
        self._run(il.Call.READ)
        return super().read(path)

    def rename(self, src: str, dst: str) -> str:
        self._run(il.Call.RENAME)
        return super().rename(src, dst)

    def rm_tree(self, path: str) -> str:
        self._run(il.Call.REMOVE)
        return super().rm_tree(path)

    def kill_probe(self, pid: int) -> il.Probe:
        self._run(il.Call.KILL)
        return self.proc.world.kill_probe(self.proc.ns, pid)

    def proc_stat(self, pid: int) -> Optional[il.ProcStat]:
        self._run(il.Call.PROC)
        return self.proc.world.proc_stat(self.proc.ns, pid)

    def wait(self, seconds: float) -> None:
        self._run(il.Call.WAIT)  # no sleep: a wait is a step where others move, and the harness moves them


class Process:
    """One lock user (model slot ``slot``): a thread that calls the lock when told, paused at every step."""

    def __init__(self, slot: int, pid: int, start: int, ns: int, lock_path: str, max_tries: int,
                 pause: frozenset[il.Step], world: World) -> None:
        self.slot, self.pid, self.start, self.ns = slot, pid, start, ns
        self.lock_path, self.max_tries, self.pause, self.world = lock_path, max_tries, pause, world
        self.orders: "queue.Queue[harness.Order]" = queue.Queue()
        self.reports: "queue.Queue[harness.Report]" = queue.Queue()
        self.dead = False
        self.inside = False  # inside the operation (set by the operation itself)
        self.next_nonce: Optional[str] = None
        self.taken: list[harness.Taken] = []  # the steps taken since the harness last looked
        self.calls = HarnessCalls(self)
        self.thread = threading.Thread(target=self._main, name=f"lock-p{slot}", daemon=True)
        self.thread.start()

    # -- in the process's thread

    def hook(self, step: il.Step, args: tuple[object, ...], outcome: object) -> None:
        if self.dead:
            raise Killed()
        if outcome is None:
            if step in self.pause:
                self._stop(harness.Paused(step, args))
            self.calls.ran = []
            return
        ran, self.calls.ran = tuple(self.calls.ran), []
        self.taken.append(harness.Taken(step, ran, _shown(outcome)))

    def _stop(self, report: harness.Report) -> harness.Order:
        self.reports.put(report)
        order = self.orders.get()
        if isinstance(order, harness.Die):
            self.dead = True
            raise Killed()
        if isinstance(order, harness.Go) and order.nonce is not None:
            self.next_nonce = order.nonce
        return order

    def _operation(self) -> None:
        self.inside = True
        try:
            order = self._stop(harness.Inside())
        finally:
            self.inside = False
        end_operation(order, f"p{self.slot}")

    def _main(self) -> None:
        try:
            while True:
                order = self.orders.get()
                if isinstance(order, harness.Die):
                    self.dead = True
                    raise Killed()
                if not isinstance(order, harness.StartCall):
                    raise HarnessError(f"p{self.slot}, idle, was told {order}")
                error: Optional[BaseException] = None
                try:
                    il.with_projection_lock(self.lock_path, self._operation, max_tries=self.max_tries, wait=0,
                                            calls=self.calls)
                except Killed:
                    raise
                except Exception as raised:
                    error = raised
                self.reports.put(harness.answer_of(error))
        except Killed:
            self.reports.put(harness.Killed())
        except BaseException as broke:  # a harness error: reported, so that the harness does not hang
            self.reports.put(harness.Ended(None, error=f"harness: {type(broke).__name__}: {broke}"))

    # -- in the harness's thread

    def order(self, order: harness.Order) -> harness.Report:
        """Send ``order``; the process's next report (it stopped again, is inside, ended, or died)."""
        self.orders.put(order)
        try:
            return self.reports.get(timeout=SAFETY)
        except queue.Empty:
            raise HarnessError(f"p{self.slot} did not report within {SAFETY:g} s after {order}") from None

    def steps_taken(self) -> list[harness.Taken]:
        taken, self.taken = self.taken, []
        return taken

    def stop(self) -> None:
        """The example is over: a process still alive dies (its thread ends)."""
        if not self.dead and self.thread.is_alive():
            self.orders.put(harness.DIE)
        self.thread.join(SAFETY)


def end_operation(order: object, who: str) -> None:
    """The operation's end as the harness ordered it (``harness.Leave``): it returns, or raises the failure its
    effect names; any other order is the harness's own error (a thread's and a forked process's operation alike)."""
    if not isinstance(order, harness.Leave):
        raise HarnessError(f"{who} inside the operation was told {order}")
    if order.effect is Effect.UNCHANGED:
        raise harness.OperationUnchanged("failed having changed nothing")
    if order.effect is Effect.COMMITTED:
        raise harness.OperationCommitted("failed having committed")


def _shown(outcome: object) -> str:
    if isinstance(outcome, BaseException):
        return f"raised {type(outcome).__name__}"
    if isinstance(outcome, tuple):
        return "listed"
    if isinstance(outcome, bytes):
        return "read"
    return str(getattr(outcome, "value", outcome))


def lock_path_in(directory: str) -> str:
    return os.path.join(directory, "lock")


class LockUser(Protocol):
    """One lock user as a real side drives it, whatever runs it (``Process``: a thread of the harness;
    ``forked.Child``: a process forked from it): its model slot, whether it is inside the operation and whether it
    is dead (as the harness last saw it), an order and the report that answers it, the steps taken since the
    harness last looked, and the end of its example."""

    slot: int
    inside: bool
    dead: bool

    def order(self, order: harness.Order) -> harness.Report: ...

    def steps_taken(self) -> list[harness.Taken]: ...

    def stop(self) -> None: ...


Factory = Callable[[int], Process]
