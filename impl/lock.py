"""The projection lock: one process at a time inside an operation, across the processes of one machine.

``with projection_lock(path): ...`` (or ``with_projection_lock(path, operation)``, the seed's signature) runs its
body while no other process holding the same lock path runs its own; ``run_holding(path, argv)`` runs a command
so (``envreplica lock PATH -- COMMAND``). It is the ``fixed`` design of
``docs/lock.md`` (the lead's design notes: the seed's ``withProjectionLock`` with its flaws fixed), built from what
Node's ``fs`` and ``process`` offer too, so the seed's authors can adopt it in their language: ``mkdir``,
``rename``, a private file write, ``readdir``, a recursive remove of a private directory, the ``kill(pid, 0)``
probe and ``/proc/PID/stat``. No ``flock``, no native code.

It takes exactly the calls of the design's step-by-step algorithm, in its order (the numbers below are its
steps), because a lockstep drives this module and the model side by side, pausing the real processes at every
call. Every call goes through a ``Calls`` object (``Calls`` does the real ones; a harness or a test passes its
own, or a hook ``on_call(call, args, outcome)`` that sees each call before it runs, with ``outcome`` None, and
after, with its outcome or the exception it raised).

Names, all beside the lock path ``L`` in its parent directory ``P``; ``ID = <pid>.<started_at>.<pidns>.<nonce>``
(this process's identity: its pid, its start time in clock ticks after boot, field 22 of ``/proc/self/stat``, and
the inode number of its PID namespace, ``/proc/self/ns/pid``; a fresh 16-hex nonce per acquisition):

* ``L``: the lock, a directory holding ``owner.json`` =
  ``{"version": 2, "pid": int, "started_at": int, "pidns": int, "nonce": "16 hex"}``. It only ever appears by
  ``rename(T, L)`` of a complete private directory and only ever leaves by ``rename(L, A/lock)`` into its
  holder's own anchor, so a reader of ``L/owner.json`` sees a complete record, or nothing (L moved away).
* ``L.t.<seq:08d>.<ID>``: the ticket (a directory; its name carries its owner's identity). Acquisitions go in
  ticket order, ``(seq, ID)`` with ``ID`` compared as a string: a process only tries ``rename(T, L)`` when no
  ticket orders before its own; a ticket whose owner is proved dead is removed by whoever finds it.
* ``L.a.<ID>``: the anchor, made before ``rename(T, L)``. ``L`` is moved into ``L.a.<ID>/lock`` by its holder's
  release or by a takeover; ``rename`` refuses to replace a non-empty directory, so a mover acting on a stale
  belief "L is instance N" moves N or fails: it never moves another instance (a compare-and-delete; no inode
  number is ever compared).
* ``L.n.<ID>``: the private directory that becomes ``L``; ``L.g.<ID>.<k>``: a grave, an anchor renamed before
  its recursive removal (the k-th this acquisition makes).

The algorithm (the design's numbering)::

    before any step: inspect L (not a step of the model): P a writable directory; L missing, or a directory
      holding owner.json (not a regular file, a symlink, or an empty directory); else LockPathError
     1 readdir(P)           seq = 1 + the largest seq of the tickets there (1 when there is none)
     2 mkdir(K)  3 mkdir(A)  4 mkdir(T)  5 write(T/owner.json) (write, fsync, close: one step)
     loop:
     6 readdir(P)           the tickets ordered before K; the first of them, if any: its owner judged
                            (9a, 9b): dead -> 7 rmdir(it), back to 6; alive or unknown -> WAIT
     8 rename(T, L)         ok: HOLD; ENOTEMPTY/EEXIST: on
     9 read(L/owner.json)   ENOENT/ENOTDIR: back to 6; not a version-2 record: LockNotUnderstood (after
                            GIVE UP's clean-up); its pidns not ours: unknown -> WAIT
     9a kill(pid, 0)        ESRCH: dead; ok or EPERM: 9b
     9b proc(pid)           no such process, another start time, or a zombie: dead; else alive -> WAIT
     dead: 10 rename(L, L.a.<R.ID>/lock) -> ok: 11 rename(L.a.<R.ID>, G), 12 rm_tree(G), back to 6;
           ENOENT/ENOTEMPTY/EEXIST: back to 6
     WAIT: after max_tries waits GIVE UP, else 13 wait; back to 6
     GIVE UP: rm_tree(T), rename(A, G), rm_tree(G), rmdir(K); LockBusy (names the owner, and why it stands)
     HOLD: 14 enter, the operation, 15 leave, 16 rename(L, A/lock) (fails: LockLost), 17 rename(A, G),
           18 rm_tree(G), 19 rmdir(K)

Two things this module adds to the design, neither reachable in the model: the input check before step 1 (the
design's "before any step" rule, made by one ``inspect`` call), and a guard against a lock this version cannot
take over: after ``RESTART_GUARD`` returns to step 6 from steps 9 and 10 in a row with no wait between (a
``L`` that holds no ``owner.json`` although it is not empty, or a dead owner's record whose anchor is gone: only
a hand or an older version makes either), ``LockNotUnderstood`` instead of spinning for ever.

What each crash (SIGKILL, between any two steps) leaves, and why it is harmless:

* before 2, nothing. After 2, 3 or 4 (ticket, anchor, private directory made, ``L`` not yet ours): an orphan
  ticket, which every later process probes, proves dead (its name carries its owner) and removes (7); orphan
  anchor and private directories, which nobody reads: they are names no other acquisition will make (the
  nonce), so they are only garbage.
* holding (after 8, up to 16): ``L`` holds the dead owner's record, its anchor is there, its ticket too. The
  next process first in line proves the ticket's owner dead and removes it, then (8 refused, 9) proves the
  record's owner dead and moves ``L`` into the dead owner's anchor (10): the first try takes it over, with no
  wait. A zombie (killed, not yet reaped) counts as dead; so does a pid reused by a process with another start
  time.
* after 16 (``L`` moved into the anchor, ``L`` free): the anchor holding the old lock, then (after 17) a grave
  holding it, then (after 18) only the ticket: garbage, and a ticket proved dead as above.
* while giving up or taking over: the same names, in the same states, as above.

Garbage (orphan private directories, anchors and graves; ``L.n.*``, ``L.a.*``, ``L.g.*``) is never removed by
this module: collecting it safely needs the creator proved dead and a rename to a grave first (never a recursive
remove of an anchor in place: a late mover could land in a half-removed anchor), which is out of this module's
scope. It is a few bytes per killed process; removing it by hand is safe once no process that made it runs.

Where it holds: one machine (a pid and a start time mean nothing on another host), a local filesystem with an
atomic ``rename`` that refuses to replace a non-empty directory (ext4, tmpfs, xfs, btrfs), processes in one PID
namespace (an owner in another one cannot be judged: it is waited for, then ``LockBusy`` names it). Not held: a
network filesystem (NFS's rename and its attribute caches), a second host sharing the directory, a hand that
removes ``L`` while its holder runs (its release then fails ``LockLost``, or, when another process took the freed
lock meanwhile, moves that process's lock into the hand-removed holder's anchor: see ``docs/lock.md``), an older
version of the lock running at the same time, and re-entry (a process that takes the lock it holds waits for
itself, then ``LockBusy``).
"""

from __future__ import annotations

import enum
import errno
import json
import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Callable, Optional, TypeVar, Union

__all__ = [
    "Call",
    "Calls",
    "Hook",
    "Identity",
    "Judgement",
    "LockBusy",
    "LockError",
    "LockLost",
    "LockNotUnderstood",
    "LockPathError",
    "Owner",
    "PathFacts",
    "PathKind",
    "Probe",
    "ProcStat",
    "ProjectionLock",
    "RESTART_GUARD",
    "Ticket",
    "parse_record",
    "projection_lock",
    "run_holding",
    "with_projection_lock",
]

T = TypeVar("T")

#: How many returns to step 6 from steps 9 and 10 in a row, without a wait, before the lock is judged not one this
#: version can take over (``LockNotUnderstood``). Each such return means the lock changed under us (another process
#: moved it), and those are bounded by the other processes' acquisitions; only a hand or an older version makes a
#: lock that keeps sending us back.
RESTART_GUARD = 256

_ERRNO_NAMES = errno.errorcode


class Call(str, enum.Enum):
    """The vocabulary of steps (the model's ``Call``, the lockstep's step names): one system call each."""

    INSPECT = "inspect"  # the input check before step 1: not a step of the model
    READDIR = "readdir"
    MKDIR = "mkdir"
    WRITE = "write"  # T/owner.json: open (exclusive), write, fsync, close; a private file, one step
    RENAME = "rename"
    READ = "read"
    KILL = "kill"
    PROC = "proc"
    RMDIR = "rmdir"
    RM_TREE = "rm_tree"  # a private directory (a grave, or our own T): one step
    WAIT = "wait"
    ENTER = "enter"  # the operation begins (no system call: reported so a harness can pause there)
    LEAVE = "leave"  # the operation ended (args: its exception or None; outcome "ok" or "raised <type>")


class Probe(str, enum.Enum):
    """What ``kill(pid, 0)`` answered."""

    OK = "ok"  # a process with that pid exists, and we may signal it
    ESRCH = "ESRCH"  # no process with that pid
    EPERM = "EPERM"  # a process with that pid exists, and we may not signal it


class Judgement(str, enum.Enum):
    """What a probe of an owner concluded."""

    DEAD = "dead"  # proved: no such process, another start time (the pid reused), or a zombie
    ALIVE = "alive"
    OTHER_NAMESPACE = "other PID namespace"  # its pid means nothing (or something else) here: not judged


class PathKind(str, enum.Enum):
    """What a path holds, as ``inspect`` saw it (``lstat``: a symlink is itself)."""

    MISSING = "missing"
    DIRECTORY = "directory"
    FILE = "regular file"
    SYMLINK = "symbolic link"
    OTHER = "special file"  # a FIFO, a socket, a device


@dataclass(frozen=True)
class Identity:
    """A process's own facts: its pid, its start time (clock ticks after boot) and its PID namespace's inode."""

    pid: int
    started_at: int
    pidns: int


@dataclass(frozen=True)
class Owner:
    """Whom a lock record or a ticket name belongs to: one acquisition of one process."""

    pid: int
    started_at: int
    pidns: int
    nonce: str

    @property
    def id(self) -> str:
        """``<pid>.<started_at>.<pidns>.<nonce>``: the part of the names this acquisition makes."""
        return f"{self.pid}.{self.started_at}.{self.pidns}.{self.nonce}"

    def record(self) -> bytes:
        """The content of ``owner.json`` (version 2), in the design's key order."""
        return json.dumps({"version": 2, "pid": self.pid, "started_at": self.started_at, "pidns": self.pidns,
                           "nonce": self.nonce}).encode()

    def describe(self) -> str:
        return (f"pid {self.pid} (started {self.started_at} clock ticks after boot, PID namespace {self.pidns}, "
                f"nonce {self.nonce})")


@dataclass(frozen=True)
class Ticket:
    """A ticket directory ``L.t.<seq>.<ID>`` read back from its name."""

    name: str
    seq: int
    owner: Owner

    @property
    def order(self) -> tuple[int, str]:
        return (self.seq, self.owner.id)


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/PID/stat`` says of a process: its start time (field 22) and its state (field 3)."""

    start: int
    state: str


@dataclass(frozen=True)
class PathFacts:
    """What ``inspect`` found: the parent directory, whether this process may create names in it, the lock path,
    and (a directory at the lock path) the names in it."""

    parent: PathKind
    parent_writable: bool
    lock: PathKind
    lock_entries: tuple[str, ...] = ()


#: ``on_call(call, args, outcome)``: before a call with outcome None, after it with its outcome (or exception).
Hook = Callable[[Call, tuple[object, ...], object], None]

#: The outcome of a ``mkdir``, ``rmdir``, ``rename`` or ``rm_tree``: ``"ok"`` or the errno's name (``"ENOENT"``).
Outcome = str


def _errno_name(error: OSError) -> str:
    return _ERRNO_NAMES.get(error.errno or 0, f"errno {error.errno}")


def _pidns_inode(link: str) -> int:
    """``pid:[4026531836]`` -> 4026531836."""
    match = re.fullmatch(r"pid:\[(\d+)\]", link)
    if match is None:
        raise OSError(errno.EINVAL, f"unexpected PID namespace link {link!r}", "/proc/self/ns/pid")
    return int(match.group(1))


def _proc_fields(text: str) -> list[str]:
    """The fields of a ``/proc/PID/stat`` line from field 3 (state) on (the command name may hold spaces)."""
    return text[text.rindex(")") + 2:].split()


class Calls:
    """The system calls the lock makes, one method per call of the vocabulary; this class makes the real ones.

    ``mkdir``, ``rmdir``, ``rename`` and ``rm_tree`` return ``"ok"`` or the errno's name (the lock decides which
    answers it expects; an answer it does not expect ends the acquisition with an ``OSError``); ``read`` the file's
    bytes or the errno's name; ``readdir`` the names (an error raises). ``on_call``: the hook that sees every call
    (``Hook``). A subclass may override any method (a test's probe that lies, another PID namespace). ``identity``
    and ``nonce`` are the process's own facts, not steps: they are read once per acquisition and not reported.
    """

    def __init__(self, on_call: Optional[Hook] = None) -> None:
        self.on_call = on_call

    # -- the process's own facts (not steps)

    def identity(self) -> Identity:
        """This process's pid, start time and PID namespace (read each time: a forked child has its own)."""
        with open("/proc/self/stat", encoding="ascii") as f:
            started_at = int(_proc_fields(f.read())[19])
        return Identity(os.getpid(), started_at, _pidns_inode(os.readlink("/proc/self/ns/pid")))

    def nonce(self) -> str:
        """A fresh 16-hex nonce (one per acquisition)."""
        return secrets.token_hex(8)

    # -- the steps

    def inspect(self, lock_path: str) -> PathFacts:
        """The input check's facts (``lstat`` of the lock path; ``stat`` and ``access`` of its parent)."""
        parent = os.path.dirname(lock_path) or "."
        try:
            parent_mode = os.stat(parent).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return PathFacts(PathKind.MISSING, False, PathKind.MISSING)
        parent_kind = _kind(parent_mode)
        if parent_kind is not PathKind.DIRECTORY:
            return PathFacts(parent_kind, False, PathKind.MISSING)
        writable = os.access(parent, os.W_OK | os.X_OK)
        try:
            kind = _kind(os.lstat(lock_path).st_mode)
        except FileNotFoundError:
            return PathFacts(parent_kind, writable, PathKind.MISSING)
        entries: tuple[str, ...] = ()
        if kind is PathKind.DIRECTORY:
            try:
                entries = tuple(sorted(os.listdir(lock_path)))
            except FileNotFoundError:  # moved into its anchor meanwhile: free
                kind = PathKind.MISSING
        return PathFacts(parent_kind, writable, kind, entries)

    def readdir(self, path: str) -> tuple[str, ...]:
        return tuple(sorted(os.listdir(path)))

    def mkdir(self, path: str) -> Outcome:
        return _outcome(os.mkdir, path)

    def rmdir(self, path: str) -> Outcome:
        return _outcome(os.rmdir, path)

    def write_private(self, path: str, data: bytes) -> None:
        """``path`` created (it must not exist), ``data`` written and fsynced, closed: a file nobody else reads."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, path: str) -> Union[bytes, Outcome]:
        try:
            with open(path, "rb") as f:
                return f.read(65536)
        except OSError as error:
            return _errno_name(error)

    def rename(self, src: str, dst: str) -> Outcome:
        return _outcome(os.rename, src, dst)

    def rm_tree(self, path: str) -> Outcome:
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            return "ENOENT"
        return "ok"

    def kill_probe(self, pid: int) -> Probe:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return Probe.ESRCH
        except PermissionError:
            return Probe.EPERM
        return Probe.OK

    def proc_stat(self, pid: int) -> Optional[ProcStat]:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                fields = _proc_fields(f.read())
        except (FileNotFoundError, ProcessLookupError):
            return None
        return ProcStat(start=int(fields[19]), state=fields[0])

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)


def _kind(mode: int) -> PathKind:
    if stat.S_ISDIR(mode):
        return PathKind.DIRECTORY
    if stat.S_ISREG(mode):
        return PathKind.FILE
    if stat.S_ISLNK(mode):
        return PathKind.SYMLINK
    return PathKind.OTHER


def _outcome(fn: Callable[..., None], *args: str) -> Outcome:
    try:
        fn(*args)
    except OSError as error:
        return _errno_name(error)
    return "ok"


# ---------------------------------------------------------------------------
# Errors


class LockError(Exception):
    """The lock's own errors (never the operation's: those propagate unchanged). ``path``: the lock path."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class LockBusy(LockError):
    """The lock was not had within ``max_tries`` waits; the operation never ran. ``owner``: whom we waited for
    (the holder's record, or the owner of a ticket ahead of ours); ``judgement``: alive, or not judged (another
    PID namespace); ``ticket``: that ticket's name when it was a ticket, else None."""

    def __init__(self, message: str, *, path: str, owner: Owner, judgement: Judgement,
                 ticket: Optional[str]) -> None:
        super().__init__(message, path=path)
        self.owner = owner
        self.judgement = judgement
        self.ticket = ticket


class LockLost(LockError):
    """The release found our lock gone (``rename(L, A/lock)`` refused): someone removed or moved it while we held
    it. The operation ran (its outcome stands as it is); ``result``: what it returned, when it returned."""

    result: object = None


class LockPathError(LockError):
    """Bad input: the lock path cannot be used (its parent is not a writable directory; it is a regular file, a
    symlink, a special file or an empty directory). Nothing was created."""


class LockNotUnderstood(LockPathError):
    """Corrupt or foreign state at the lock path: ``L/owner.json`` is not a version-2 record (garbage, empty, an
    older version's ``{pid, started_at}``), or a lock this version cannot take over. Never taken over; what this
    acquisition made is removed."""


# ---------------------------------------------------------------------------
# Records and names

_HEX16 = re.compile(r"[0-9a-f]{16}")


def parse_record(data: bytes, *, where: str) -> Owner:
    """``owner.json``'s bytes as an ``Owner``, or ``LockNotUnderstood`` saying what it is (``where``: its path)."""
    lock = os.path.dirname(where)
    if not data.strip():
        raise LockNotUnderstood(
            f"{where} is empty: this version's lock always holds a complete owner record, so an older version (killed "
            f"while writing it) or a hand left it; remove {lock} once no process of an older version runs", path=lock)
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise LockNotUnderstood(
            f"{where} is not a lock owner record (not JSON: {data[:60]!r}); this version never writes one, so a hand "
            f"or another program left it; remove {lock} once no process that could hold it runs", path=lock) from None
    if isinstance(value, dict) and "version" not in value and "pid" in value:
        raise LockNotUnderstood(
            f"{lock} was left by an older version of the lock ({where} is {_short(value)}, with no \"version\": 2): "
            f"remove {lock} once no process of that version runs", path=lock)
    if not isinstance(value, dict) or value.get("version") != 2:
        version = value.get("version") if isinstance(value, dict) else None
        raise LockNotUnderstood(
            f"{where} is not a version-2 lock record ({_short(value)}; version {version!r}): another version or "
            f"program wrote it; remove {lock} once no process that could hold it runs", path=lock)
    fields = (value.get("pid"), value.get("started_at"), value.get("pidns"), value.get("nonce"))
    pid, started_at, pidns, nonce = fields
    if not (_int(pid, 1) and _int(started_at, 0) and _int(pidns, 1) and isinstance(nonce, str)
            and _HEX16.fullmatch(nonce)):
        raise LockNotUnderstood(
            f"{where} is a version-2 record with a malformed field ({_short(value)}: pid and pidns must be positive "
            f"integers, started_at an integer, nonce 16 hex digits): remove {lock} once no process that could hold "
            f"it runs", path=lock)
    assert isinstance(pid, int) and isinstance(started_at, int) and isinstance(pidns, int) and isinstance(nonce, str)
    return Owner(pid, started_at, pidns, nonce)


def _int(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _short(value: object, width: int = 80) -> str:
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= width else text[:width - 1] + "…"


class _Names:
    """The names one acquisition makes or reads, beside ``L`` in ``P``."""

    def __init__(self, lock_path: str, me: Owner) -> None:
        self.lock = lock_path
        self.parent = os.path.dirname(lock_path) or "."
        self.base = os.path.basename(lock_path)
        self.me = me
        self.ticket_name = re.compile(
            re.escape(self.base) + r"\.t\.(\d{8,})\.(\d+)\.(\d+)\.(\d+)\.([0-9a-f]{16})")
        self.graves = 0

    def at(self, name: str) -> str:
        return os.path.join(self.parent, name)

    def ticket(self, seq: int) -> str:
        return self.at(f"{self.base}.t.{seq:08d}.{self.me.id}")

    def anchor(self, owner: Owner) -> str:
        return self.at(f"{self.base}.a.{owner.id}")

    @property
    def temp(self) -> str:
        return self.at(f"{self.base}.n.{self.me.id}")

    def grave(self) -> str:
        name = self.at(f"{self.base}.g.{self.me.id}.{self.graves}")
        self.graves += 1
        return name

    def tickets(self, entries: tuple[str, ...]) -> list[Ticket]:
        """The tickets among a listing of ``P``, in ticket order."""
        found = []
        for name in entries:
            match = self.ticket_name.fullmatch(name)
            if match:
                seq, pid, started_at, pidns, nonce = match.groups()
                found.append(Ticket(name, int(seq), Owner(int(pid), int(started_at), int(pidns), nonce)))
        return sorted(found, key=lambda t: t.order)


# ---------------------------------------------------------------------------
# The lock


class ProjectionLock:
    """``with ProjectionLock(path): ...``: the body runs holding the lock (``projection_lock`` makes one).

    ``max_tries``: how many waits of ``wait`` seconds before ``LockBusy`` (the seed's 80 and 50 ms: 4 s at least
    behind a live holder). ``calls``: the system calls (``Calls()``: the real ones). An object may be entered again
    once it has left; it is not re-entrant (a process that takes a lock it holds waits for itself).
    """

    def __init__(self, path: Union[str, os.PathLike[str]], *, max_tries: int = 80, wait: float = 0.05,
                 calls: Optional[Calls] = None) -> None:
        if max_tries < 0 or wait < 0:
            raise ValueError(f"max_tries and wait must not be negative (got {max_tries}, {wait})")
        self.path = os.path.abspath(os.fspath(path))
        self.max_tries = max_tries
        self.wait = wait
        self.calls = calls if calls is not None else Calls()
        self.owner: Optional[Owner] = None  # our record, from the lock's step 8 on (kept after the release)
        self.held = False  # between step 8 and the release
        self.waits = 0  # how many waits the last acquisition took
        self._names: Optional[_Names] = None
        self._made: set[str] = set()  # what this acquisition made and has not removed: "ticket", "anchor", "temp"
        self._ticket = ""

    # -- one call, reported to the hook before and after

    def _step(self, call: Call, fn: Callable[..., T], *args: object) -> T:
        hook = self.calls.on_call
        if hook is not None:
            hook(call, args, None)
        try:
            out = fn(*args)
        except BaseException as error:
            if hook is not None:
                hook(call, args, error)
            raise
        if hook is not None:  # an outcome is never None (None means "before"): a call that returns nothing is
            # "ok", except proc, whose None is the design's ENOENT (no such process)
            hook(call, args, out if out is not None else "ENOENT" if call is Call.PROC else "ok")
        return out

    # -- the context manager

    def __enter__(self) -> "ProjectionLock":
        if self.held:
            raise RuntimeError(f"this ProjectionLock object holds {self.path} already (it is not re-entrant)")
        self._acquire()
        try:
            self._step(Call.ENTER, _nothing)
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self._step(Call.LEAVE, _left, error)  # args: the operation's exception, or None
        lost = self._release()
        if lost is None:
            return
        if error is None:
            raise lost
        error.add_note(f"and then: {lost}")  # the operation's error propagates as it is; the lost lock beside it

    # -- acquisition (steps 1-13)

    def _acquire(self) -> None:
        self._made = set()
        self.waits = 0
        self.owner = None
        self._check_input()
        me = self.calls.identity()
        names = self._names = _Names(self.path, Owner(me.pid, me.started_at, me.pidns, self.calls.nonce()))
        try:
            self._take(names)
        except BaseException:
            if self.held:  # interrupted once the lock was ours (between 8 and 14): give it back
                self._release()
            else:
                self._clean_up(names)  # GIVE UP's clean-up, on every way out of an acquisition
            raise

    def _check_input(self) -> None:
        facts = self._step(Call.INSPECT, self.calls.inspect, self.path)
        lock, parent = self.path, os.path.dirname(self.path)
        if facts.parent is not PathKind.DIRECTORY:
            what = "does not exist" if facts.parent is PathKind.MISSING else f"is a {facts.parent.value}"
            raise LockPathError(f"the lock path {lock} cannot be used: its parent {parent} {what}, and the lock's "
                                f"names are made there; create it as a directory, or choose another lock path",
                                path=lock)
        if not facts.parent_writable:
            raise LockPathError(f"the lock path {lock} cannot be used: its parent {parent} cannot be written by "
                                f"this process (uid {os.geteuid()}), and the lock makes its names there; make it "
                                f"writable, or choose a lock path in a writable directory", path=lock)
        if facts.lock in (PathKind.FILE, PathKind.SYMLINK, PathKind.OTHER):
            raise LockPathError(f"the lock path {lock} is a {facts.lock.value}: this lock is a directory that only it "
                                f"makes; remove it if nothing else uses it, or choose another lock path", path=lock)
        if facts.lock is PathKind.DIRECTORY and "owner.json" not in facts.lock_entries:
            held = ", ".join(facts.lock_entries[:5]) or "nothing"
            raise LockPathError(f"the lock path {lock} is a directory without owner.json (it holds {held}): this "
                                f"version's lock always holds one, so an older version (killed between its mkdir and "
                                f"its owner.json) or a hand made it; remove {lock} once no process of an older version "
                                f"runs", path=lock)

    def _take(self, names: _Names) -> None:
        calls, me = self.calls, names.me
        entries = self._step(Call.READDIR, calls.readdir, names.parent)  # 1
        seq = 1 + max((t.seq for t in names.tickets(entries)), default=0)
        self._ticket = names.ticket(seq)
        self._expect(self._step(Call.MKDIR, calls.mkdir, self._ticket), self._ticket, "ok")  # 2
        self._made.add("ticket")
        anchor = names.anchor(me)
        self._expect(self._step(Call.MKDIR, calls.mkdir, anchor), anchor, "ok")  # 3
        self._made.add("anchor")
        self._expect(self._step(Call.MKDIR, calls.mkdir, names.temp), names.temp, "ok")  # 4
        self._made.add("temp")
        record = os.path.join(names.temp, "owner.json")
        self._step(Call.WRITE, calls.write_private, record, me.record())  # 5
        mine = (seq, me.id)
        restarts = 0
        while True:
            entries = self._step(Call.READDIR, calls.readdir, names.parent)  # 6
            ahead = [t for t in names.tickets(entries) if t.order < mine]
            if ahead:
                first = ahead[0]
                judged = self._judge(first.owner, me)
                if judged is Judgement.DEAD:
                    self._expect(self._step(Call.RMDIR, calls.rmdir, names.at(first.name)),  # 7
                                 names.at(first.name), "ok", "ENOENT")
                    continue
                blocker, ticket = first.owner, first.name
            else:
                moved = self._step(Call.RENAME, calls.rename, names.temp, self.path)  # 8
                if moved == "ok":
                    self._made.discard("temp")
                    self.owner, self.held = me, True
                    return
                self._not_a_directory(moved)
                self._expect(moved, self.path, "ENOTEMPTY", "EEXIST")
                data = self._step(Call.READ, calls.read, os.path.join(self.path, "owner.json"))  # 9
                if not isinstance(data, bytes):
                    self._unreadable(data)
                    restarts = self._restart(restarts, None)
                    continue
                holder = parse_record(data, where=os.path.join(self.path, "owner.json"))
                judged = self._judge(holder, me)  # 9a, 9b
                if judged is Judgement.DEAD:
                    restarts = 0 if self._take_over(holder, names) else self._restart(restarts, holder)  # 10-12
                    continue
                blocker, ticket = holder, None
            if self.waits == self.max_tries:
                self._give_up(names, blocker, judged, ticket)
            self._step(Call.WAIT, calls.wait, self.wait)  # 13
            self.waits += 1
            restarts = 0

    def _judge(self, owner: Owner, me: Owner) -> Judgement:
        """Steps 9a and 9b: dead only on proof, fresh each time (no cache)."""
        if owner.pidns != me.pidns:
            return Judgement.OTHER_NAMESPACE
        if self._step(Call.KILL, self.calls.kill_probe, owner.pid) is Probe.ESRCH:  # 9a
            return Judgement.DEAD
        seen = self._step(Call.PROC, self.calls.proc_stat, owner.pid)  # 9b
        if seen is None or seen.start != owner.started_at or seen.state in ("Z", "X"):
            return Judgement.DEAD
        return Judgement.ALIVE

    def _take_over(self, holder: Owner, names: _Names) -> bool:
        """Steps 10-12: the dead holder's instance moved into its own anchor, the anchor graved and removed.
        False when step 10 was refused (the lock is not that instance any more, or was never ours to move)."""
        anchor = names.anchor(holder)
        moved = self._step(Call.RENAME, self.calls.rename, self.path, os.path.join(anchor, "lock"))  # 10
        if moved != "ok":
            self._expect(moved, self.path, "ENOENT", "ENOTEMPTY", "EEXIST")
            return False
        grave = names.grave()
        self._expect(self._step(Call.RENAME, self.calls.rename, anchor, grave), anchor, "ok")  # 11
        self._step(Call.RM_TREE, self.calls.rm_tree, grave)  # 12
        return True

    def _restart(self, restarts: int, holder: Optional[Owner]) -> int:
        """One more return to step 6 from 9 or 10 with no wait between; past ``RESTART_GUARD``, not understood."""
        restarts += 1
        if restarts <= RESTART_GUARD:
            return restarts
        assert self._names is not None
        whose = (f"its owner {holder.describe()} is dead but its anchor {self._names.anchor(holder)} is gone"
                 if holder is not None else "its owner.json could not be read although it is not empty")
        raise LockNotUnderstood(f"the lock {self.path} sent this process back {restarts} times in a row and is "
                                f"not one this version can take over ({whose}): a hand or an older version made it; "
                                f"remove {self.path} once no process that could hold it runs", path=self.path)

    def _unreadable(self, outcome: Outcome) -> None:
        """Step 9 could not read ``L/owner.json``: ENOENT or ENOTDIR (``L`` moved away meanwhile) go back to step 6;
        anything else (a directory there, no permission) is a record this process cannot judge."""
        if outcome in ("ENOENT", "ENOTDIR"):
            return
        where = os.path.join(self.path, "owner.json")
        raise LockNotUnderstood(f"{where} cannot be read ({outcome}: {os.strerror(getattr(errno, outcome, 0))}), so "
                                f"its owner cannot be judged: this version always writes a readable file there; "
                                f"remove {self.path} once no process that could hold it runs", path=self.path)

    def _not_a_directory(self, outcome: Outcome) -> None:
        if outcome == "ENOTDIR":
            raise LockPathError(f"the lock path {self.path} is not a directory any more (a file or a symlink was put "
                                f"there while this process waited): remove it if nothing else uses it, or choose "
                                f"another lock path", path=self.path)

    def _expect(self, outcome: Outcome, path: str, *expected: str) -> None:
        """An answer the algorithm does not expect: an ``OSError`` (what this acquisition made is removed on the
        way out: ``_acquire``)."""
        if outcome in expected:
            return
        code = getattr(errno, outcome, errno.EIO)
        raise OSError(code, f"{os.strerror(code)} (the projection lock at {self.path} did not expect it)", path)

    def _give_up(self, names: _Names, owner: Owner, judged: Judgement, ticket: Optional[str]) -> None:
        """GIVE UP: ``LockBusy`` (its clean-up runs on the way out: ``_acquire``)."""
        if judged is Judgement.OTHER_NAMESPACE:
            why = (f"which runs in another PID namespace ({owner.pidns}; ours is {names.me.pidns}), so whether it "
                   f"is alive cannot be judged here; look for it from its own namespace, and once it has ended")
            act = f"remove {names.at(ticket) if ticket else self.path} by hand"
        else:
            why = "which is alive"
            act = "retry later, or wait longer (--max-tries, --wait)"
        where = f"the ticket {ticket} ahead of ours belongs to" if ticket else f"{self.path} is held by"
        waits = f"{self.waits} wait{'' if self.waits == 1 else 's'} of {self.wait:g} s"
        raise LockBusy(f"lock busy after {waits}: {where} {owner.describe()}, {why}; "
                       f"{act}", path=self.path, owner=owner, judgement=judged, ticket=ticket)

    def _clean_up(self, names: _Names) -> None:
        """GIVE UP's clean-up, of what this acquisition made: ``rm_tree(T)``, ``rename(A, G)``, ``rm_tree(G)``,
        ``rmdir(K)``. On the way out of an error (busy, not understood, an unexpected answer, an interrupt): an
        error here must not hide that one, so it stops the clean-up silently (what is left is garbage, as a crash's)."""
        try:
            if "temp" in self._made:
                self._step(Call.RM_TREE, self.calls.rm_tree, names.temp)
                self._made.discard("temp")
            if "anchor" in self._made:
                grave = names.grave()
                if self._step(Call.RENAME, self.calls.rename, names.anchor(names.me), grave) == "ok":
                    self._step(Call.RM_TREE, self.calls.rm_tree, grave)
                self._made.discard("anchor")
            if "ticket" in self._made:
                self._step(Call.RMDIR, self.calls.rmdir, self._ticket)
                self._made.discard("ticket")
        except Exception:
            pass

    # -- release (steps 16-19)

    def _release(self) -> Optional[LockLost]:
        """Steps 16-19; a ``LockLost`` (returned, not raised) when step 16 found our lock gone."""
        names, me = self._names, self.owner
        assert names is not None and me is not None
        self.held = False
        anchor = names.anchor(me)
        moved = self._step(Call.RENAME, self.calls.rename, self.path, os.path.join(anchor, "lock"))  # 16
        graved = names.grave()
        if self._step(Call.RENAME, self.calls.rename, anchor, graved) == "ok":  # 17
            self._step(Call.RM_TREE, self.calls.rm_tree, graved)  # 18
        self._made.discard("anchor")
        self._step(Call.RMDIR, self.calls.rmdir, self._ticket)  # 19
        self._made.discard("ticket")
        if moved == "ok":
            return None
        return LockLost(f"lock lost: at release, {self.path} was not this process's lock any more (rename into our "
                        f"anchor: {moved}; someone removed or moved it while the operation ran, so another process "
                        f"may have run at the same time); the operation's outcome stands; check what it did, and why "
                        f"{self.path} was touched", path=self.path)


def _nothing() -> None:
    return None


def _left(error: Optional[BaseException]) -> str:
    return "ok" if error is None else f"raised {type(error).__name__}"


def projection_lock(path: Union[str, os.PathLike[str]], *, max_tries: int = 80, wait: float = 0.05,
                    calls: Optional[Calls] = None) -> ProjectionLock:
    """``with projection_lock(path): ...``: the body runs holding the lock at ``path`` (see the module's text).

    Raises ``LockBusy`` (never entered), ``LockPathError`` / ``LockNotUnderstood`` (bad input, foreign state:
    nothing taken over), ``LockLost`` (after the body, when our lock was gone at release); the body's own exception
    propagates as it is (with a note if the lock was lost too).
    """
    return ProjectionLock(path, max_tries=max_tries, wait=wait, calls=calls)


def run_holding(path: Union[str, os.PathLike[str]], argv: list[str], *, max_tries: int = 80,
                wait: float = 0.05) -> int:
    """Run the command ``argv`` holding the lock at ``path`` (``envreplica lock``); its return code (-N: killed by
    signal N). Raises what ``projection_lock`` raises, and ``OSError`` for a command that cannot start.

    The lock's owner is this process, not the command, so the command must not outlive it: SIGTERM and SIGHUP are
    passed on to the command (this process waits for it, then releases), SIGINT is left to the terminal (it
    reaches the command's process group too) and does nothing here meanwhile, and the command is started with
    ``PR_SET_PDEATHSIG`` = SIGKILL, so a SIGKILL of this process (after which the lock is taken over as a dead
    owner's) kills the command too. Processes the command started itself and left running are not covered.
    """
    import signal
    import subprocess

    parent = os.getpid()

    def die_with_parent() -> None:  # in the child, before exec
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the prctl: do not run unlocked
            os._exit(128 + signal.SIGKILL)

    status: Optional[int] = None
    try:
        with projection_lock(path, max_tries=max_tries, wait=wait):
            children: list[subprocess.Popen[bytes]] = []
            caught: list[int] = []  # a signal that came before the command started: passed on once it has

            def pass_on(signum: int, frame: object) -> None:
                caught.append(signum)
                for child in children:
                    child.send_signal(signum)

            previous = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGTERM, signal.SIGHUP)}
            # not SIG_IGN, which the command would inherit: a handler is reset to the default by exec
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda signum, frame: None)
            try:
                children.append(subprocess.Popen(argv, preexec_fn=die_with_parent))
                for signum in caught:
                    children[0].send_signal(signum)
                status = children[0].wait()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
    except LockLost as lost:
        lost.result = status  # the command's return code (a LockLost is raised after it ended)
        raise
    assert status is not None
    return status


def with_projection_lock(path: Union[str, os.PathLike[str]], operation: Callable[[], T], *, max_tries: int = 80,
                         wait: float = 0.05, calls: Optional[Calls] = None) -> T:
    """``operation()`` holding the lock at ``path``; its result, or its exception unchanged (the seed's
    ``withProjectionLock(lockPath, operation)``, without the seed's rewrapping of every error as "committed").
    A ``LockLost`` after a returned operation carries its return value as ``result``."""
    returned: list[T] = []
    try:
        with projection_lock(path, max_tries=max_tries, wait=wait, calls=calls):
            returned.append(operation())
    except LockLost as lost:
        if returned:
            lost.result = returned[0]
        raise
    return returned[0]
