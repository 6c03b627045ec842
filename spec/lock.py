"""The projection lock: its domain and its properties, one named predicate each.

Models: ``withProjectionLock(lockPath, operation)`` of the second seed (``projection-lock.js``): processes that
each call the lock (one filesystem or system call per step), run an operation inside it, and release it; and
the world around them: a process killed between any two of its steps (a zombie until its parent reaps it), a
dead process's pid taken by a new, unrelated process (a new start time), inode numbers reused or not, and a
process of another PID namespace sharing the directory. The model that runs it is ``envreplica.model.lock``.

The predicates read a state by its field names (``procs``, ``fs``, ``os``, ``crashes``: the shape of
``model.lock.LockState``) and import nothing of the model.

Leaves out on purpose: the operation's own work (it ends ok, failed having changed nothing, or failed having
committed: what it did is the caller's, the lock only reports it), time (a wait is a step where others move;
the 50 ms and the 80 tries are bounds), the parent directory's creation (it exists), other users' permissions
(``kill`` never answers EPERM: every process is one user's), and network filesystems (one machine, one local
filesystem: rename is atomic, a directory is never replaced by a rename unless empty).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, cast


class Call(str, enum.Enum):
    """A filesystem or system call: what one step of a process does (the lockstep's and the adapter's word)."""

    MKDIR = "mkdir"  # mkdir(path)
    RMDIR = "rmdir"  # rmdir(path)
    CREATE = "create"  # open(path, O_CREAT|O_TRUNC|O_WRONLY): an empty file (writeFileSync's first half)
    WRITE = "write"  # write(fd, content) (writeFileSync's second half); a private file's create+write+fsync
    READ = "read"  # open + read of a small file
    STAT = "stat"  # stat(path).ino
    RENAME = "rename"  # rename(src, dst)
    UNLINK = "unlink"  # unlink(path)
    READDIR = "readdir"  # the entries of the lock's directory
    REMOVE = "remove"  # rm -r of a private directory (a grave, a temp): nobody else reads it
    KILL = "kill"  # kill(pid, 0): ok, or ESRCH
    PROC = "proc"  # /proc/PID/stat: the start time and whether a zombie, or gone
    WAIT = "wait"  # the pause between two tries (Atomics.wait): others move
    ENTER = "enter"  # the operation begins
    LEAVE = "leave"  # the operation ends (ok, failed having changed nothing, failed having committed)


class Effect(str, enum.Enum):
    """What the operation did."""

    OK = "ok"  # it returned
    UNCHANGED = "failed-unchanged"  # it threw having changed nothing
    COMMITTED = "failed-committed"  # it threw having committed (the projection needs reconciliation)


class Answer(str, enum.Enum):
    """What a caller of the lock gets back when its call ends (a killed process gets nothing)."""

    OK = "ok"  # the operation ran and returned
    BUSY = "busy"  # the operation never ran: the lock stayed held (``publication_pending``, "busy")
    FAILED_UNCHANGED = "failed-unchanged"  # the operation ran and threw having changed nothing
    FAILED_COMMITTED = "failed-committed"  # the operation ran and threw having committed (needs reconciliation)
    LOST = "lost"  # the operation ran; at the release its lock was no longer there (someone removed it)
    RELEASE_FAILED = "release-failed"  # the release itself threw (replacing the operation's outcome)
    ERROR = "error"  # a filesystem error thrown before the operation ran (the seed's write path)


class Status(str, enum.Enum):
    """A process's life."""

    RUNNING = "running"
    ZOMBIE = "zombie"  # killed, not yet reaped: ``kill(pid, 0)`` still answers, ``/proc`` shows state Z
    REAPED = "reaped"  # gone: its pid is free


#: A lock instance: the (slot, call) of the attempt that made it (slot -1: a process dead before the first state).
Instance = tuple[int, int]


@dataclass(frozen=True)
class Removal:
    """A step moved or removed a lock instance from the lock path, or damaged it (its ``owner.json`` unlinked)."""

    instance: Instance  # whose lock
    how: str  # "release": the mover's release or the clean-up of its own attempt; "takeover": judged dead


@dataclass(frozen=True)
class Busy:
    """A step decided to give up busy: who held the lock or the turn (``slot``; None: nobody it could name), and
    whether this process could ever prove that one dead (False: another PID namespace)."""

    slot: Optional[int]
    provable: bool


@dataclass(frozen=True)
class Done:
    """A step's result: the call it made (``call``), what it found (``note``), a lock it removed (``removed``),
    and whether it decided to give up busy (``busy``: the answer follows once it has cleaned up)."""

    call: Call
    note: str = ""
    removed: Optional[Removal] = None
    busy: Optional[Busy] = None


@dataclass(frozen=True)
class Ended:
    """A step that ended a call of the lock: the answer its caller gets; a lock the step removed; whether this step
    decided to give up busy (``busy``, as ``Done.busy``; a call that cleaned up first decided it earlier)."""

    call: Call
    answer: Answer
    removed: Optional[Removal] = None
    busy: Optional[Busy] = None


@dataclass(frozen=True)
class Crashed:
    """A process was killed (SIGKILL): it does not run again; what it made on disk stays."""


@dataclass(frozen=True)
class EnvDone:
    """An action of the world (a reap, a pid reused)."""

    note: str = ""


# ---------------------------------------------------------------------------
# The state as the predicates read it (``model.lock.LockState``)


class RecordView(Protocol):
    """An ``owner.json`` record."""

    @property
    def slot(self) -> int: ...


class InstanceView(Protocol):
    """A lock directory at the lock path (or moved away): who made it."""

    @property
    def maker(self) -> tuple[int, int]: ...  # (slot, call) of the attempt that made it (slot -1: a dead process)


class ProcView(Protocol):
    """One process calling the lock."""

    @property
    def slot(self) -> int: ...

    @property
    def status(self) -> Status: ...

    @property
    def call(self) -> int: ...

    @property
    def inside(self) -> bool: ...

    @property
    def holds(self) -> Optional[tuple[int, int]]: ...  # the lock instance this process made and believes it holds

    @property
    def entered(self) -> bool: ...  # the current call ran its operation

    @property
    def effect(self) -> Optional[Effect]: ...  # what its operation did (this call)

    @property
    def overtaken(self) -> int: ...  # acquisitions by others since this process queued (ghost)

    @property
    def queued(self) -> bool: ...  # waiting for the lock (a ticket, or a first try that failed)


class FsView(Protocol):
    @property
    def lock(self) -> Optional[InstanceView]: ...


class LockView(Protocol):
    @property
    def procs(self) -> Sequence[ProcView]: ...

    @property
    def fs(self) -> FsView: ...

    @property
    def crashes(self) -> int: ...


class StepAction(Protocol):
    @property
    def slot(self) -> int: ...


# ---------------------------------------------------------------------------
# Invariants


def _live(p: ProcView) -> bool:
    return p.status is Status.RUNNING


def mutual_exclusion(st: LockView) -> bool:
    """At most one live process is inside the operation."""
    return sum(1 for p in st.procs if p.inside and _live(p)) <= 1


def overtakes_are_bounded(st: LockView) -> bool:
    """Without crashes, a waiting process is overtaken by at most N-1 acquisitions of the others (N processes)."""
    if st.crashes:
        return True
    bound = len(st.procs) - 1
    return all(p.overtaken <= bound for p in st.procs)


# ---------------------------------------------------------------------------
# Step properties: (pre, action, result, post); a lock a step removed is in its result (``removed``)


def _removal(result: object) -> Optional[Removal]:
    return cast(Optional[Removal], getattr(result, "removed", None))


def release_removes_only_its_own(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """A process's release (or clean-up of its own attempt) never removes or damages a lock another process made."""
    removal = _removal(result)
    if removal is None or removal.how != "release":
        return True
    mover = cast(StepAction, action).slot
    return removal.instance[0] == mover


def takeover_only_of_the_dead(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """A lock is taken over only when its owner is dead: never a live owner's lock."""
    removal = _removal(result)
    if removal is None or removal.how != "takeover":
        return True
    maker = removal.instance[0]
    owner = next((p for p in pre.procs if p.slot == maker), None)
    return owner is None or not _live(owner)


def answers_are_true(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """Every answer a caller gets says truly what happened: busy only when its operation never ran, a failure
    as unchanged or committed as its operation did it, ok only when it returned."""
    if not isinstance(result, Ended):
        return True
    proc = next(p for p in pre.procs if p.slot == cast(StepAction, action).slot)
    answer, effect = result.answer, proc.effect
    if answer in (Answer.BUSY, Answer.ERROR):
        return not proc.entered
    if answer is Answer.OK:
        return effect is Effect.OK
    if answer is Answer.FAILED_UNCHANGED:
        return effect is Effect.UNCHANGED
    if answer is Answer.FAILED_COMMITTED:
        return effect is Effect.COMMITTED
    # LOST, RELEASE_FAILED: the operation ran; the answer says the release went wrong, not what the operation did
    return False


def busy_only_while_a_live_owner_holds(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """A caller gives up busy only while the lock (or its turn) is held by a live process, or by one whose death
    no process here can prove (another PID namespace): a dead owner's lock is taken over within the tries."""
    busy = cast(Optional[Busy], getattr(result, "busy", None))
    if busy is None:
        return True
    if busy.slot is None:
        return False  # it gave up though it could name no holder: the lock was free, or changing, on its last try
    owner = next((p for p in pre.procs if p.slot == busy.slot), None)
    return (owner is not None and _live(owner)) or not busy.provable


# ---------------------------------------------------------------------------
# Sometimes: so that a pass is not vacuous


def sometimes_takeover(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """Sometimes a dead owner's lock is taken over."""
    removal = _removal(result)
    return removal is not None and removal.how == "takeover"


def sometimes_busy(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """Sometimes a waiter gives up, busy."""
    return getattr(result, "busy", None) is not None


def sometimes_crash_inside(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """Sometimes a process is killed inside the operation."""
    if not isinstance(result, Crashed):
        return False
    proc = next(p for p in pre.procs if p.slot == cast(StepAction, action).slot)
    return proc.inside


def sometimes_crash_acquiring(pre: LockView, action: object, result: object, post: LockView) -> bool:
    """Sometimes a process is killed inside the acquisition, having changed the directory."""
    if not isinstance(result, Crashed):
        return False
    proc = next(p for p in pre.procs if p.slot == cast(StepAction, action).slot)
    return not proc.entered and bool(getattr(proc, "made", False))


def sometimes_acquired_after_takeover(
    takeover: object, pre: LockView, action: object, result: object, post: LockView
) -> bool:
    """Sometimes, after a takeover, a process enters the operation on the same path."""
    return isinstance(result, Done) and result.call is Call.ENTER


# ---------------------------------------------------------------------------
# The tables the checker reads


@dataclass(frozen=True)
class Property:
    """A named predicate and the sentence it checks (the shape ``checker.bfs`` reads)."""

    name: str
    check: Callable[..., bool]
    kind: str  # "invariant" | "step" | "sometimes-state" | "sometimes-step" | "sometimes-after"
    after: Optional["Property"] = None
    actions: Optional[frozenset[str]] = None
    results: Optional[tuple[type, ...]] = None

    @property
    def statement(self) -> str:
        # compiled by mypyc, a function keeps no docstring: read it from the source beside it, as the replica's do
        from envreplica.spec.properties import _docstring_in_source

        text = (self.check.__doc__ or _docstring_in_source(self.check) or "").strip()
        return text.splitlines()[0] if text else self.name


def _props(kind: str, *fns: Callable[..., bool]) -> tuple[Property, ...]:
    return tuple(Property(f.__name__, f, kind) for f in fns)


INVARIANTS = _props("invariant", mutual_exclusion, overtakes_are_bounded)
STEP_PROPERTIES = (
    Property("release_removes_only_its_own", release_removes_only_its_own, "step", actions=frozenset({"step"})),
    Property("takeover_only_of_the_dead", takeover_only_of_the_dead, "step", actions=frozenset({"step"})),
    Property("answers_are_true", answers_are_true, "step", actions=frozenset({"step", "leave"}),
             results=(Ended,)),
    Property("busy_only_while_a_live_owner_holds", busy_only_while_a_live_owner_holds, "step",
             actions=frozenset({"step"})),
)
_TAKEOVER = Property("sometimes_takeover", sometimes_takeover, "sometimes-step", actions=frozenset({"step"}))
SOMETIMES = (
    _TAKEOVER,
    Property("sometimes_busy", sometimes_busy, "sometimes-step", actions=frozenset({"step"})),
    Property("sometimes_crash_inside", sometimes_crash_inside, "sometimes-step", results=(Crashed,)),
    Property("sometimes_crash_acquiring", sometimes_crash_acquiring, "sometimes-step", results=(Crashed,)),
    Property("sometimes_acquired_after_takeover", sometimes_acquired_after_takeover, "sometimes-after",
             after=_TAKEOVER),
)

class RecordLike(Protocol):
    @property
    def slot(self) -> int: ...

    @property
    def ns(self) -> int: ...


def settled(st: LockView, empty_is_free: bool = True) -> bool:
    """Nobody runs a call, and the lock is free (no lock directory, or an empty one, ``empty_is_free``: a design that
    publishes with ``rename`` replaces an empty directory),
    or held by a dead process of another PID namespace than every live process (which no process here can prove
    dead: an operator's to remove). An empty directory a seed process left is not free for the seed (its mkdir
    fails on it): the seed's own processes never settle there."""
    procs = cast(Sequence[Any], st.procs)
    if any(p.status is Status.RUNNING and p.pc.value != "idle" for p in procs):
        return False
    lock = cast(Any, st.fs.lock)
    if lock is None:
        return True
    if lock.owner is None:
        return empty_is_free
    writer = cast(Optional[RecordLike], lock.owner.record)
    if writer is None:
        return False
    live = [p for p in procs if p.status is Status.RUNNING]
    return not any(p.slot == writer.slot for p in live) and all(p.ns != writer.ns for p in live)


#: The bounded-liveness property ``checker.lock`` checks (its sentence).
RECOVERABLE = ("lock_never_wedged",
               "From every reachable state, the processes alone (no more kills) reach a state where nobody runs a "
               "call and the lock is free, or held by a dead process of another PID namespace, which no process "
               "here can prove dead (the busy answer names it for the operator).")
