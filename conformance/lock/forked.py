"""The lock lockstep's real side in real processes: each lock user a child forked from the harness, running
``impl.lock`` on the real directory, paused at every step, killed by the kernel.

Models: ``ProcessSide``, one example's real side (``example.RealSide``) as ``threads.ThreadSide`` is, but each lock
user (``Child``) is a process of its own, forked from the harness at its first call (``os.fork``: the child starts
with the harness's modules loaded, a mutant's edit included, and runs no interpreter start-up). The child runs
``impl.lock.with_projection_lock`` once per ``START`` with a ``ChildCalls`` that stops before each step the model
takes as a move of its own (``harness.paused_at``), reports it over its end of a socket pair, with the steps taken
since its last report, and blocks for the order. What the harness owns is asked over the same pipe (``Asked``):
the probes, answered from the harness's ``World`` (``kill(pid, 0)`` and ``/proc/PID/stat``: a kill, a zombie, a
reap and a reused pid are the world's, staged as the model stages them), and the child's identity (the model's
pid, start time and PID namespace). Every other call is the real one, on the real directory, made by the child.

A kill is the kernel's: ``SIGKILL`` of the child while it is paused (blocked reading its next order), then the
harness reaps it (``waitpid``), so its pid is gone and its exit status says SIGKILL. No code of the child runs after
the order: no ``finally``, no ``except BaseException``, no release; what it made on disk stays, as the model keeps
it. That is what this side proves beyond the threads' (whose kill is a ``Killed`` exception raised where the thread
stopped, and every call after it refused by the harness's ``Calls``): that the lock agrees with the model when none
of its own clean-up runs at a kill, as none does at a real SIGKILL. The world's zombie is still the model's
stand-in: the real child is reaped at once (its real pid is never probed; the model's pid, the world's, is).

Costs (measured, docs/lock.md, ``bench/bench_lock_sides.py``): a fork per lock user (about 3 ms of the harness at
light load) and a round trip to another process per move; 3 to 4.6 times the threads' time per example on this
machine, the more the busier it is, so the gate keeps the threads and CI runs this side at the small budget of
``tests/test_lock_lockstep_processes.py``. An example's end closes each child's pipe: a child paused there exits
where it stopped (``os._exit``, running nothing), and the harness reaps it at a later example's end
(``reap_exited``) rather than wait for it.

Leaves out on purpose: real pids in the lock's records and real probes of them (the harness's ``World`` answers,
as for the threads: a SIGKILLed child's real pid is reaped at once, and a real pid cannot be reused on demand), a
child killed while it runs (it is only ever killed paused, before a step: a kill during one of the lock's calls
lands before or after it, each atomic on a local filesystem, which the model's steps already are), and time (a
wait returns at once).
"""

from __future__ import annotations

import enum
import gc
import os
import signal
import socket
import time
import warnings
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import NoReturn, Optional, Union

from envreplica.conformance.lock import harness
from envreplica.conformance.lock.processes import SAFETY, HarnessError, World, _shown, end_operation
from envreplica.conformance.lock.threads import ThreadSide
from envreplica.impl import lock as il


class Question(str, enum.Enum):
    """What a child asks the harness: a probe of another process, or its own identity."""

    KILL = "kill(pid, 0)"
    PROC = "/proc/PID/stat"
    IDENTITY = "identity"  # its pid, start time and PID namespace (read once per call of the lock)


@dataclass(frozen=True)
class Asked:
    """A child asks the harness ``question`` (of ``pid``, for a probe)."""

    question: Question
    pid: int = 0


@dataclass(frozen=True)
class Reported:
    """A child's report (``harness.Report``) with the steps it took since its last one."""

    taken: tuple[harness.Taken, ...]
    report: harness.Report


# -- in the child


class ChildCalls(il.Calls):
    """The calls of a forked lock user: the real ones on the directory, each ``Calls`` method run noted (``ran``);
    the probes and its identity asked of the harness over ``conn``; the nonce the harness's; a stop before
    each step of ``pause`` (``hook``)."""

    def __init__(self, conn: Connection, pause: frozenset[il.Step]) -> None:
        super().__init__(on_call=self.hook)
        self.conn = conn
        self.me: Optional[il.Identity] = None  # as the harness last answered
        self.pause = pause
        self.ran: list[str] = []  # the Calls methods run since the last step ended (their Call's value)
        self.taken: list[harness.Taken] = []  # the steps taken since the last report
        self.next_nonce: Optional[str] = None

    def hook(self, step: il.Step, args: tuple[object, ...], outcome: object) -> None:
        if outcome is None:
            if step in self.pause:
                self.stop(harness.Paused(step, _plain(args)))
            self.ran = []
            return
        ran, self.ran = tuple(self.ran), []
        self.taken.append(harness.Taken(step, ran, _shown(outcome)))

    def stop(self, report: harness.Report) -> harness.Order:
        """Report, with the steps taken since the last report; block for the order (a SIGKILL ends it here)."""
        taken, self.taken = tuple(self.taken), []
        self.conn.send(Reported(taken, report))
        order = self._recv()
        # a DIE is the harness's SIGKILL, never sent
        if not isinstance(order, (harness.Go, harness.Leave, harness.StartCall)):
            raise HarnessError(f"{_who(self.me)} was told {order!r}, which is no order")
        if isinstance(order, harness.Go) and order.nonce is not None:
            self.next_nonce = order.nonce
        return order

    def _ask(self, question: Question, pid: int = 0) -> object:
        self.conn.send(Asked(question, pid))
        return self._recv()

    def _recv(self) -> object:
        """The harness's next word; when its end is closed (the example is over, or the harness gone), the child
        exits where it stopped, running nothing more (no exception unwinds through the lock's clean-up)."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            os._exit(0)

    def identity(self) -> il.Identity:
        answer = self._ask(Question.IDENTITY)
        assert isinstance(answer, il.Identity)
        self.me = answer
        return answer

    def nonce(self) -> str:
        nonce, self.next_nonce = self.next_nonce, None
        if nonce is None:
            raise HarnessError(f"{_who(self.me)} drew a nonce the harness did not give it")
        return nonce

    def inspect(self, lock_path: str) -> il.PathFacts:
        self.ran.append(il.Call.INSPECT.value)
        return super().inspect(lock_path)

    def readdir(self, path: str) -> Union[tuple[str, ...], str]:
        self.ran.append(il.Call.READDIR.value)
        return super().readdir(path)

    def mkdir(self, path: str) -> str:
        self.ran.append(il.Call.MKDIR.value)
        return super().mkdir(path)

    def rmdir(self, path: str) -> str:
        self.ran.append(il.Call.RMDIR.value)
        return super().rmdir(path)

    def unlink(self, path: str) -> str:
        self.ran.append(il.Call.UNLINK.value)
        return super().unlink(path)

    def write_private(self, path: str, data: bytes) -> None:
        self.ran.append(il.Call.WRITE.value)
        super().write_private(path, data)

    def read(self, path: str) -> Union[bytes, str]:
        self.ran.append(il.Call.READ.value)
        return super().read(path)

    def rename(self, src: str, dst: str) -> str:
        self.ran.append(il.Call.RENAME.value)
        return super().rename(src, dst)

    def rm_tree(self, path: str) -> str:
        self.ran.append(il.Call.REMOVE.value)
        return super().rm_tree(path)

    def kill_probe(self, pid: int) -> il.Probe:
        self.ran.append(il.Call.KILL.value)
        answer = self._ask(Question.KILL, pid)
        assert isinstance(answer, il.Probe)
        return answer

    def proc_stat(self, pid: int) -> Optional[il.ProcStat]:
        self.ran.append(il.Call.PROC.value)
        answer = self._ask(Question.PROC, pid)
        assert answer is None or isinstance(answer, il.ProcStat)
        return answer

    def wait(self, seconds: float) -> None:
        self.ran.append(il.Call.WAIT.value)  # no sleep: a wait is a step where others move, and the harness moves them


def _who(me: Optional[il.Identity]) -> str:
    return f"the lock user of pid {me.pid}" if me is not None else "a lock user"


def _plain(args: tuple[object, ...]) -> tuple[object, ...]:
    """A step's arguments as the report carries them (paths, bytes and numbers; anything else by its repr)."""
    return tuple(a if isinstance(a, (str, bytes, int)) else repr(a) for a in args)


def _operation(calls: ChildCalls) -> None:
    """The operation: inside, told how it ends (``harness.Leave``)."""
    end_operation(calls.stop(harness.Inside()), _who(calls.me))


def _child(conn: Connection, lock_path: str, max_tries: int, calls: ChildCalls) -> NoReturn:
    """The child's life: a call of the lock per ``START`` told, its answer reported; until its end of the pipe
    closes (``ChildCalls._recv`` exits) or a SIGKILL."""
    while True:
        order = calls._recv()  # the example's end (its pipe closed) exits here
        if not isinstance(order, harness.StartCall):
            raise HarnessError(f"{_who(calls.me)}, idle, was told {order}")
        error: Optional[BaseException] = None
        try:
            il.with_projection_lock(lock_path, lambda: _operation(calls), max_tries=max_tries, wait=0, calls=calls)
        except HarnessError:
            raise
        except Exception as raised:
            error = raised
        taken, calls.taken = tuple(calls.taken), []
        conn.send(Reported(taken, harness.answer_of(error)))


def _child_main(conn: Connection, lock_path: str, max_tries: int, pause: frozenset[il.Step]) -> NoReturn:
    """A forked child, from its first instruction to its exit (``os._exit``: never back into the harness's stack,
    no ``atexit``, no flush of the harness's buffers)."""
    code = 0
    try:
        gc.disable()  # the cyclic collector neither walks (and so copies) nor finalizes the harness's objects
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the harness's to handle
        _child(conn, lock_path, max_tries, ChildCalls(conn, pause))
    except BaseException as broke:  # a harness error: reported, so that the harness does not hang
        code = 1
        try:
            conn.send(Reported((), harness.Ended(None, error=f"harness: {type(broke).__name__}: {broke}")))
        except BaseException:  # noqa: BLE001 - the harness is gone; nothing to tell
            pass
    finally:
        os._exit(code)


# -- in the harness


class Child:
    """One lock user (model slot ``slot``) in a process of its own, forked at its first ``START`` (see the module);
    the harness's end of its pipe, its real pid (``os_pid``) and, once reaped, its wait status (``status``)."""

    def __init__(self, slot: int, pid: int, start: int, ns: int, lock_path: str, max_tries: int,
                 pause: frozenset[il.Step], world: World) -> None:
        self.slot, self.pid, self.start, self.ns = slot, pid, start, ns
        self.lock_path, self.max_tries, self.pause, self.world = lock_path, max_tries, pause, world
        self.conn: Optional[Connection] = None
        self.os_pid: Optional[int] = None
        self.status: Optional[int] = None  # waitpid's status, once reaped
        self.dead = False
        self.inside = False
        self.taken: list[harness.Taken] = []

    def _fork(self) -> Connection:
        ours, theirs = socket.socketpair()
        with warnings.catch_warnings():  # Python 3.12 warns of fork in a threaded process: the child takes no lock
            warnings.simplefilter("ignore", DeprecationWarning)
            os_pid = os.fork()
        if os_pid == 0:
            ours.close()
            _child_main(Connection(theirs.detach()), self.lock_path, self.max_tries, self.pause)
        theirs.close()
        self.os_pid = os_pid
        self.conn = Connection(ours.detach())
        return self.conn

    def order(self, order: harness.Order) -> harness.Report:
        """Send ``order``; the child's next report (it stopped again, is inside, or ended), answering its probes
        meanwhile from the world. ``DIE``: SIGKILL and reap it (``Killed``)."""
        if isinstance(order, harness.Die):
            self.kill()
            return harness.Killed()
        if self.dead:
            raise HarnessError(f"p{self.slot} is dead and was told {order}")
        conn = self.conn or self._fork()
        self.inside = False
        conn.send(order)
        while True:
            if not conn.poll(SAFETY):
                raise HarnessError(f"p{self.slot} (pid {self.os_pid}) did not report within {SAFETY:g} s after "
                                   f"{order}")
            try:
                said = conn.recv()
            except EOFError:
                raise HarnessError(f"p{self.slot} (pid {self.os_pid}) exited unasked after {order}") from None
            if isinstance(said, Asked):
                conn.send(self._answer(said))
                continue
            assert isinstance(said, Reported)
            self.taken.extend(said.taken)
            self.inside = isinstance(said.report, harness.Inside)
            return said.report

    def _answer(self, asked: Asked) -> Union[il.Identity, il.Probe, Optional[il.ProcStat]]:
        """The harness's answer to a child's question: its identity (the model's), or the world's probe from the
        child's PID namespace."""
        if asked.question is Question.IDENTITY:
            return il.Identity(self.pid, self.start, harness.PIDNS_BASE + self.ns)
        if asked.question is Question.KILL:
            return self.world.kill_probe(self.ns, asked.pid)
        return self.world.proc_stat(self.ns, asked.pid)

    def kill(self) -> None:
        """SIGKILL the child (paused: it runs nothing more), and reap it."""
        self.dead, self.inside = True, False
        if self.os_pid is not None and self.status is None:
            os.kill(self.os_pid, signal.SIGKILL)
            _, self.status = os.waitpid(self.os_pid, 0)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @property
    def killed_by_sigkill(self) -> bool:
        """The child was reaped, and the kernel's SIGKILL ended it."""
        return self.status is not None and os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) == signal.SIGKILL

    def steps_taken(self) -> list[harness.Taken]:
        taken, self.taken = self.taken, []
        return taken

    def stop(self) -> None:
        """The example is over: a child still alive is told so by its pipe's end (it exits where it stopped,
        running nothing more: ``ChildCalls.stop``), and reaped later (``reap_exited``), while the harness goes on."""
        self.dead, self.inside = True, False
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.os_pid is not None and self.status is None:
            _EXITING.add(self.os_pid)


#: Children whose example is over, told to exit (their pipe closed) and not reaped yet (``reap_exited``).
_EXITING: set[int] = set()


def reap_exited(block: bool = False) -> None:
    """Reap the children of ended examples that have exited (``block``: wait for each)."""
    for os_pid in sorted(_EXITING):
        try:
            done, _ = os.waitpid(os_pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            done = os_pid
        if done:
            _EXITING.discard(os_pid)


def reap_all(polls: int = 200, pause: float = 0.01) -> None:
    """Every child of an ended example reaped, so that a run leaves no zombie behind: each was told to exit by its
    closed pipe (``Child.stop``); one still there after ``polls`` looks ``pause`` seconds apart (two seconds) is
    killed (SIGKILL) and reaped. The end of every lockstep run (``run.run_lock_lockstep``) calls it."""
    for _ in range(polls):
        reap_exited()
        if not _EXITING:
            return
        time.sleep(pause)
    for os_pid in sorted(_EXITING):
        try:
            os.kill(os_pid, signal.SIGKILL)
        except ProcessLookupError:  # exited between the last look and now: the wait below reaps it
            pass
    reap_exited(block=True)


class ProcessSide(ThreadSide):
    """``impl.lock`` in processes forked from the harness (see the module): ``threads.ThreadSide`` with a ``Child``
    for each lock user; the directory, the world, the observation and the checks of each move's steps are the
    same."""

    def _user(self, slot: int, pid: int, start: int, ns: int, max_tries: int, pause: frozenset[il.Step]) -> Child:
        return Child(slot, pid, start, ns, self.lock_path, max_tries, pause, self.world)

    def close(self) -> None:
        super().close()
        reap_exited()


__all__ = ["Asked", "Child", "ChildCalls", "ProcessSide", "Question", "Reported", "reap_all", "reap_exited"]
