"""The projection lock: one process at a time inside an operation, across the processes of one machine.

``with projection_lock(path): ...`` (or ``with_projection_lock(path, operation)``, the seed's signature) runs its
body while no other process holding the same lock path runs its own; ``run_holding(path, argv)`` runs a command
so (``envreplica lock PATH -- COMMAND``). It is the ``fixed`` variant of ``model/lock.py`` (the CLAIM design of the
lead's design notes: the seed's ``withProjectionLock`` with its flaws fixed), built from what Node's ``fs`` and
``process`` offer too, so the seed's authors can adopt it in their language: ``mkdir``, ``rename``, ``rmdir``,
``unlink``, a private file write, ``readdir``, a read, a recursive remove of a private directory, the
``kill(pid, 0)`` probe and ``/proc/PID/stat``. No ``flock``, no native code.

It takes exactly the calls of the model's ``fixed`` steps, in their order (``Step``: one per model step, with the
model's names; a few the model leaves out are marked), because a lockstep (``conformance.lock``) drives this
module and the model side by side, pausing at every call. Every call goes through a ``Calls`` object (``Calls``
makes the real ones; a harness or a test passes its own, or a hook ``on_call(step, args, outcome)`` that sees each
step before it runs, with ``outcome`` None, and after, with its outcome or the exception it raised).

Names, all beside the lock path ``L`` in its parent directory ``P``; ``N`` is this call's nonce (16 hex digits,
``Calls.nonce``, drawn after the ticket's ``readdir``: names made with it are made by this call only, for ever):

* ``L/owner-<N>.json`` = ``{"version": 2, "pid", "started_at", "pidns", "nonce"}``: THE lock record, and the
  claim handle. ``L`` is held while it holds an owner file; it holds at most one.
* ``L.n.<N>``: the private directory (temp) that holds ``owner-<N>.json`` complete before it becomes ``L`` by
  ``rename(T, L)``, which replaces an empty ``L`` and fails (``ENOTEMPTY``/``EEXIST``) on a held one.
* ``L.g.<N>.<k>``: a grave, a file path a claimed owner file is renamed to, then unlinked (the k-th of this call).
* ``L.t.<seq:08d>.<N>.<pid>.<started_at>.<pidns>``: the ticket (a directory; its name carries its owner's
  identity: its pid, its start time in clock ticks after boot, field 22 of ``/proc/PID/stat``, and the inode
  number of its PID namespace). Acquisitions go in ticket order, ``(seq, N)``: a process only tries
  ``rename(T, L)`` when no ticket orders before its own; a ticket whose owner is proved dead is removed by
  whoever finds it.

The steps (the model's ``Pc`` names; *silent*: taken with the step before it in the model, with no pause of its
own in the lockstep; *not modelled*: a call the model leaves out)::

    INSPECT         (not modelled, silent) P a writable directory; L missing, or a directory that is empty or
                    holds one owner-<hex>.json; else LockPathError / LockNotUnderstood
    TICKET_READDIR  readdir(P): seq = 1 + the largest seq of the tickets there (1 when there is none); the nonce
    TICKET_MKDIR    mkdir(ticket)
    TEMP_MKDIR      mkdir(T)                                                   (silent)
    TEMP_WRITE      T/owner-<N>.json created, written, fsynced, closed          (silent)
    loop:
    QUEUE_READDIR   readdir(P): the first ticket ordered before ours? none: PUBLISH; another PID namespace's:
                    WAIT (not judged); else QUEUE_KILL
    QUEUE_KILL      kill(pid, 0): ESRCH: QUEUE_RMDIR; else QUEUE_PROC
    QUEUE_PROC      /proc/pid/stat: gone, another start time, or a zombie: QUEUE_RMDIR; else WAIT
    QUEUE_RMDIR     rmdir(that ticket) (ENOENT fine): QUEUE_READDIR
    PUBLISH         rename(T, L): ok: ENTER; ENOTEMPTY/EEXIST: LIST
    LIST            readdir(L): ENOENT or empty: QUEUE_READDIR (no wait); owner-<M>.json: READ
    READ            read L/owner-<M>.json: ENOENT: QUEUE_READDIR (no wait); not a version-2 record of nonce M:
                    LockNotUnderstood (after GIVE UP's clean-up); another PID namespace: WAIT; else KILL
    KILL            kill(pid, 0): ESRCH: CLAIM; else PROC
    PROC            /proc/pid/stat: gone, another start time, or a zombie: CLAIM; else WAIT
    CLAIM           rename(L/owner-<M>.json, grave): ENOENT: QUEUE_READDIR (no wait); ok: CLAIM_RMDIR
    CLAIM_RMDIR     rmdir(L) (ENOTEMPTY: published onto meanwhile; ENOENT: fine)  (silent)
    CLAIM_UNLINK    unlink(grave)                                              (not modelled, silent)
                    then QUEUE_READDIR
    WAIT            max_tries waits done: GIVE UP; else wait; QUEUE_READDIR    (silent)
    GIVE UP:
    GIVEUP_TEMP     rm -r T                                                    (silent)
    GIVEUP_TICKET   rmdir(own ticket); LockBusy (names whom it waited for: the ticket ahead, or the record)
    held:
    ENTER           the operation begins (no system call)
    LEAVE           the operation ended (no system call; silent: the model's Leave)
    RELEASE_CLAIM   rename(L/owner-<N>.json, grave): ENOENT: the answer is LockLost; ok: RELEASE_RMDIR
    RELEASE_RMDIR   rmdir(L) (ENOTEMPTY/ENOENT fine)                           (silent)
    RELEASE_UNLINK  unlink(grave)                                              (not modelled, silent)
    TICKET_RMDIR    rmdir(own ticket): the operation's result, or its error unchanged, or LockLost

``tries`` counts waits only. No inode number is ever compared, and nothing is removed by its path but what this
call made itself (its temp, its ticket, its graves) and a dead process's ticket (by its name, which no other call
ever makes again) and an emptied ``L`` (``rmdir``, which fails on a lock published onto it meanwhile). A claim is
by name: ``owner-<M>.json`` is only ever ``M``'s (no ABA), so a takeover acting on a stale belief, or a release
of a lock that is not ours any more, moves nothing but the file it was about, or fails.

Two things this module adds to the model, neither reachable in it: the input check (INSPECT), and a guard against
a lock this version cannot take over: after ``RESTART_GUARD`` returns to QUEUE_READDIR from LIST, READ and CLAIM
in a row with no wait between (only a hand or another program keeps an ``L`` that is neither empty nor held by an
owner file, and LIST refuses those at once), ``LockNotUnderstood`` instead of spinning for ever.

What each crash (SIGKILL, between any two steps) leaves, and why it is harmless:

* before TICKET_MKDIR, nothing. After it (ticket, then temp made): an orphan ticket, which every later process
  probes, proves dead (its name carries its owner) and removes (QUEUE_RMDIR); an orphan temp, which nobody reads.
* holding (after PUBLISH, up to RELEASE_CLAIM): ``L`` holds the dead owner's record, its ticket is there. The
  next process first in line proves the ticket's owner dead and removes it, then (PUBLISH refused, LIST, READ)
  proves the record's owner dead and claims its file (CLAIM), removes the emptied ``L`` and publishes its own: the
  first try takes it over, with no wait. A zombie (killed, not yet reaped) counts as dead; so does a pid reused by
  a process with another start time.
* between a claim and its ``rmdir`` (a takeover's or a release's): an empty ``L``, which ``rename(T, L)``
  replaces; and a grave file, garbage.
* after the release's claim: the ticket, proved dead as above.

Garbage (orphan temps and graves, ``L.n.*``, ``L.g.*``) is never removed by this module: collecting it safely
needs its creator proved dead, which is out of this module's scope. It is a few bytes per killed process;
removing it by hand is safe once no process that made it runs.

Where it holds: one machine (a pid and a start time mean nothing on another host), a local filesystem with an
atomic ``rename`` that refuses to replace a non-empty directory (ext4, tmpfs, xfs, btrfs), processes in one PID
namespace (an owner in another one is never judged: it is waited for, then ``LockBusy`` names it). Not held: a
network filesystem (NFS's rename and its attribute caches), a second host sharing the directory, an older version
of the lock running at the same time, and re-entry (a process that takes the lock it holds waits for itself, then
``LockBusy``). A hand that removes ``L`` while its holder runs lets another process in beside it (nothing can
prevent that); the holder's release then claims nothing, leaves the new holder's lock alone and reports
``LockLost``.
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
    "Step",
    "Ticket",
    "parse_record",
    "projection_lock",
    "run_holding",
    "with_projection_lock",
]

T = TypeVar("T")

#: How many returns to QUEUE_READDIR from LIST, READ and CLAIM in a row, without a wait, before the lock is judged
#: not one this version can take over (``LockNotUnderstood``). Each such return means the lock changed under us
#: (released, claimed, or taken over by another process), and those are bounded by the other processes'
#: acquisitions; only a hand or another program makes a lock that keeps sending us back.
RESTART_GUARD = 256

_ERRNO_NAMES = errno.errorcode


class Call(str, enum.Enum):
    """The system calls (the values are ``spec.lock.Call``'s, the lockstep's word), and the input check."""

    INSPECT = "inspect"  # the input check before the first step: not a call of the model
    READDIR = "readdir"
    MKDIR = "mkdir"
    WRITE = "write"  # T/owner-<N>.json: open (exclusive), write, fsync, close; a private file, one call
    RENAME = "rename"
    READ = "read"
    KILL = "kill"
    PROC = "proc"
    RMDIR = "rmdir"
    UNLINK = "unlink"
    REMOVE = "remove"  # rm -r of a private directory (our own temp): one call
    WAIT = "wait"
    ENTER = "enter"  # the operation begins (no system call: reported so a harness can pause there)
    LEAVE = "leave"  # the operation ended (args: its exception or None; outcome "ok" or "raised <type>")


class Step(str, enum.Enum):
    """The steps of the design (the values are ``model.lock.Pc``'s, but INSPECT and the two UNLINKs, which the
    model leaves out), each one call (``call``)."""

    INSPECT = "inspect"
    TICKET_READDIR = "readdir (ticket)"
    TICKET_MKDIR = "mkdir ticket"
    TEMP_MKDIR = "mkdir temp"
    TEMP_WRITE = "write temp owner.json"
    QUEUE_READDIR = "readdir (queue)"
    QUEUE_KILL = "kill probe (ticket)"
    QUEUE_PROC = "start-time probe (ticket)"
    QUEUE_RMDIR = "rmdir dead ticket"
    PUBLISH = "rename temp to L"
    LIST = "readdir L"
    READ = "read owner file"
    KILL = "kill probe"
    PROC = "start-time probe"
    CLAIM = "claim the dead owner's file"
    CLAIM_RMDIR = "rmdir L (claimed)"
    CLAIM_UNLINK = "unlink grave (claimed)"
    WAIT = "wait"
    ENTER = "enter"
    LEAVE = "leave"
    RELEASE_CLAIM = "claim own owner file (release)"
    RELEASE_RMDIR = "rmdir L (released)"
    RELEASE_UNLINK = "unlink grave (released)"
    TICKET_RMDIR = "rmdir own ticket"
    GIVEUP_TEMP = "remove own temp"
    GIVEUP_TICKET = "rmdir own ticket (busy)"

    @property
    def call(self) -> Call:
        return _STEP_CALLS[self]


_STEP_CALLS = {
    Step.INSPECT: Call.INSPECT, Step.TICKET_READDIR: Call.READDIR, Step.TICKET_MKDIR: Call.MKDIR,
    Step.TEMP_MKDIR: Call.MKDIR, Step.TEMP_WRITE: Call.WRITE, Step.QUEUE_READDIR: Call.READDIR,
    Step.QUEUE_KILL: Call.KILL, Step.QUEUE_PROC: Call.PROC, Step.QUEUE_RMDIR: Call.RMDIR, Step.PUBLISH: Call.RENAME,
    Step.LIST: Call.READDIR, Step.READ: Call.READ, Step.KILL: Call.KILL, Step.PROC: Call.PROC,
    Step.CLAIM: Call.RENAME, Step.CLAIM_RMDIR: Call.RMDIR, Step.CLAIM_UNLINK: Call.UNLINK, Step.WAIT: Call.WAIT,
    Step.ENTER: Call.ENTER, Step.LEAVE: Call.LEAVE, Step.RELEASE_CLAIM: Call.RENAME, Step.RELEASE_RMDIR: Call.RMDIR,
    Step.RELEASE_UNLINK: Call.UNLINK, Step.TICKET_RMDIR: Call.RMDIR, Step.GIVEUP_TEMP: Call.REMOVE,
    Step.GIVEUP_TICKET: Call.RMDIR,
}


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
    """Whom a lock record or a ticket name belongs to: one call of the lock by one process."""

    pid: int
    started_at: int
    pidns: int
    nonce: str

    def record(self) -> bytes:
        """The content of ``owner-<nonce>.json`` (version 2), in the design's key order."""
        return json.dumps({"version": 2, "pid": self.pid, "started_at": self.started_at, "pidns": self.pidns,
                           "nonce": self.nonce}).encode()

    def describe(self) -> str:
        return (f"pid {self.pid} (started {self.started_at} clock ticks after boot, PID namespace {self.pidns}, "
                f"nonce {self.nonce})")


@dataclass(frozen=True)
class Ticket:
    """A ticket directory ``L.t.<seq>.<nonce>.<pid>.<started_at>.<pidns>`` read back from its name."""

    name: str
    seq: int
    owner: Owner

    @property
    def order(self) -> tuple[int, str]:
        return (self.seq, self.owner.nonce)


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


#: ``on_call(step, args, outcome)``: before a step with outcome None, after it with its outcome (or exception).
Hook = Callable[[Step, tuple[object, ...], object], None]

#: The outcome of a ``mkdir``, ``rmdir``, ``rename``, ``unlink`` or ``rm_tree``: ``"ok"`` or the errno's name.
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

    ``mkdir``, ``rmdir``, ``rename``, ``unlink`` and ``rm_tree`` return ``"ok"`` or the errno's name (the lock
    decides which answers it expects; an answer it does not expect ends the acquisition with an ``OSError``);
    ``read`` the file's bytes or the errno's name; ``readdir`` the names or the errno's name. ``on_call``: the hook
    that sees every step (``Hook``). A subclass may override any method (a test's probe that lies, another PID
    namespace, a harness's world). ``identity`` and ``nonce`` are the process's own facts, not steps: they are read
    once per call of the lock and not reported.
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
        """A fresh 16-hex nonce (one per call of the lock; ticket order among tickets of one seq is its order)."""
        return secrets.token_hex(8)

    # -- the calls

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
            except FileNotFoundError:  # removed meanwhile: free
                kind = PathKind.MISSING
        return PathFacts(parent_kind, writable, kind, entries)

    def readdir(self, path: str) -> Union[tuple[str, ...], Outcome]:
        try:
            return tuple(sorted(os.listdir(path)))
        except OSError as error:
            return _errno_name(error)

    def mkdir(self, path: str) -> Outcome:
        return _outcome(os.mkdir, path)

    def rmdir(self, path: str) -> Outcome:
        return _outcome(os.rmdir, path)

    def unlink(self, path: str) -> Outcome:
        return _outcome(os.unlink, path)

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
    """The release found our owner file gone (its claim failed): someone removed the lock while we held it. The
    operation ran (its outcome stands as it is); ``result``: what it returned, when it returned."""

    result: object = None


class LockPathError(LockError):
    """Bad input: the lock path cannot be used (its parent is not a writable directory; it is a regular file, a
    symlink or a special file). Nothing was created."""


class LockNotUnderstood(LockPathError):
    """Corrupt or foreign state at the lock path: ``L`` holds what this version never makes (an older version's
    ``owner.json``, other names, two owner files), or an owner file that is not a version-2 record of its own
    nonce (garbage, empty), or a lock this version cannot take over. Never taken over; what this call made is
    removed."""


# ---------------------------------------------------------------------------
# Records and names

_HEX16 = re.compile(r"[0-9a-f]{16}")


def parse_record(data: bytes, *, where: str) -> Owner:
    """An owner file's bytes as an ``Owner``, or ``LockNotUnderstood`` saying what it is (``where``: its path)."""
    lock = os.path.dirname(where)
    if not data.strip():
        raise LockNotUnderstood(
            f"{where} is empty: this version's lock always holds a complete owner record (written before the lock "
            f"appears), so a hand or another program left it; remove {lock} once no process that could hold it runs",
            path=lock)
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise LockNotUnderstood(
            f"{where} is not a lock owner record (not JSON: {data[:60]!r}); this version never writes one, so a hand "
            f"or another program left it; remove {lock} once no process that could hold it runs", path=lock) from None
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


#: An owner file's name: ``owner-<nonce>.json``.
OWNER_FILE = re.compile(r"owner-([0-9a-f]{16})\.json")


class _Names:
    """The names one call of the lock makes or reads, beside ``L`` in ``P``."""

    def __init__(self, lock_path: str) -> None:
        self.lock = lock_path
        self.parent = os.path.dirname(lock_path) or "."
        self.base = os.path.basename(lock_path)
        self.ticket_name = re.compile(
            re.escape(self.base) + r"\.t\.(\d{8,})\.([0-9a-f]{16})\.(\d+)\.(\d+)\.(\d+)")
        self.graves = 0

    def at(self, name: str) -> str:
        return os.path.join(self.parent, name)

    def ticket(self, seq: int, me: Owner) -> str:
        return self.at(f"{self.base}.t.{seq:08d}.{me.nonce}.{me.pid}.{me.started_at}.{me.pidns}")

    def temp(self, me: Owner) -> str:
        return self.at(f"{self.base}.n.{me.nonce}")

    def owner_file(self, nonce: str) -> str:
        return os.path.join(self.lock, f"owner-{nonce}.json")

    def grave(self, me: Owner) -> str:
        name = self.at(f"{self.base}.g.{me.nonce}.{self.graves}")
        self.graves += 1
        return name

    def tickets(self, entries: tuple[str, ...]) -> list[Ticket]:
        """The tickets among a listing of ``P``, in ticket order."""
        found = []
        for name in entries:
            match = self.ticket_name.fullmatch(name)
            if match:
                seq, nonce, pid, started_at, pidns = match.groups()
                found.append(Ticket(name, int(seq), Owner(int(pid), int(started_at), int(pidns), nonce)))
        return sorted(found, key=lambda t: (t.order, t.name))


class _Restart(Exception):
    """Back to QUEUE_READDIR at once (no wait): the lock changed under us."""


class _Wait(Exception):
    """Not this time: wait (or give up), naming whom we wait for."""

    def __init__(self, owner: Owner, judgement: Judgement, ticket: Optional[str]) -> None:
        super().__init__()
        self.owner, self.judgement, self.ticket = owner, judgement, ticket


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
        self.owner: Optional[Owner] = None  # our record, from TICKET_READDIR on (kept after the release)
        self.held = False  # between PUBLISH and the release
        self.waits = 0  # how many waits the last acquisition took
        self._names = _Names(self.path)
        self._ticket: Optional[str] = None  # our ticket's path, while it is there
        self._temp: Optional[str] = None  # our temp's path, while it is there

    # -- one step, reported to the hook before and after

    def _step(self, step: Step, fn: Callable[..., T], *args: object) -> T:
        hook = self.calls.on_call
        if hook is not None:
            hook(step, args, None)
        try:
            out = fn(*args)
        except BaseException as error:
            if hook is not None:
                hook(step, args, error)
            raise
        if hook is not None:  # an outcome is never None (None means "before"): a call that returns nothing is
            # "ok", except proc, whose None is the design's ENOENT (no such process)
            hook(step, args, out if out is not None else "ENOENT" if step.call is Call.PROC else "ok")
        return out

    # -- the context manager

    def __enter__(self) -> "ProjectionLock":
        if self.held:
            raise RuntimeError(f"this ProjectionLock object holds {self.path} already (it is not re-entrant)")
        self._acquire()
        try:
            self._step(Step.ENTER, _nothing)
        except BaseException:
            self._release()
            self._leave_queue()
            raise
        return self

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self._step(Step.LEAVE, _left, error)  # args: the operation's exception, or None
        lost = self._release()
        self._leave_queue()
        if lost is None:
            return
        if error is None:
            raise lost
        error.add_note(f"and then: {lost}")  # the operation's error propagates as it is; the lost lock beside it
        error.lock_lost = lost  # type: ignore[attr-defined]  # for a caller (or a harness) that asks

    # -- acquisition

    def _acquire(self) -> None:
        self.waits = 0
        self.owner = None
        self._ticket = self._temp = None
        self._names = _Names(self.path)
        self._check_input()
        try:
            self._take()
        except BaseException:
            if self.held:  # interrupted once the lock was ours (PUBLISH done, ENTER not): give it back
                self._release()
                self._leave_queue()
            else:
                self._clean_up()  # GIVE UP's clean-up, on every way out of an acquisition
            raise

    def _check_input(self) -> None:
        """INSPECT: bad input refused before anything is made."""
        facts = self._step(Step.INSPECT, self.calls.inspect, self.path)
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
        if facts.lock is PathKind.DIRECTORY:
            self._understood(facts.lock_entries)

    def _understood(self, entries: tuple[str, ...]) -> Optional[str]:
        """The nonce of the one owner file ``L`` holds (None: ``L`` is empty), or ``LockNotUnderstood``."""
        owners = [m.group(1) for m in map(OWNER_FILE.fullmatch, entries) if m]
        if len(owners) == 1 and len(entries) == 1:
            return owners[0]
        if not entries:
            return None
        lock = self.path
        if "owner.json" in entries:
            raise LockNotUnderstood(f"{lock} was left by an older version of the lock (it holds owner.json, this "
                                    f"version's lock holds owner-<nonce>.json): remove {lock} once no process of "
                                    f"that version runs", path=lock)
        held = ", ".join(entries[:5]) + (", …" if len(entries) > 5 else "")
        raise LockNotUnderstood(f"{lock} holds what this version's lock never holds ({held}; it holds one "
                                f"owner-<nonce>.json, or nothing): a hand or another program made it; remove {lock} "
                                f"once no process that could hold it runs", path=lock)

    def _take(self) -> None:
        """From TICKET_READDIR to a held lock (PUBLISH ok), or ``LockBusy`` (GIVE UP)."""
        calls, names = self.calls, self._names
        entries = self._listing(Step.TICKET_READDIR, names.parent)
        seq = 1 + max((t.seq for t in names.tickets(entries)), default=0)
        me = Owner(*self._identity(), calls.nonce())
        self.owner = me
        ticket = names.ticket(seq, me)
        self._expect(self._step(Step.TICKET_MKDIR, calls.mkdir, ticket), ticket, "ok")
        self._ticket = ticket
        temp = names.temp(me)
        self._expect(self._step(Step.TEMP_MKDIR, calls.mkdir, temp), temp, "ok")
        self._temp = temp
        self._step(Step.TEMP_WRITE, calls.write_private, os.path.join(temp, f"owner-{me.nonce}.json"), me.record())
        mine = (seq, me.nonce)
        restarts = 0
        while True:
            try:
                if self._try(names, me, mine):
                    return
                restarts = 0  # a dead ticket removed: progress
            except _Restart:
                restarts = self._restart(restarts)
            except _Wait as wait:
                if self.waits == self.max_tries:
                    self._give_up(wait)
                self._step(Step.WAIT, calls.wait, self.wait)
                self.waits += 1
                restarts = 0

    def _identity(self) -> tuple[int, int, int]:
        me = self.calls.identity()
        return me.pid, me.started_at, me.pidns

    def _try(self, names: _Names, me: Owner, mine: tuple[int, str]) -> bool:
        """One turn of the loop from QUEUE_READDIR: True once the lock is ours; False after a dead ticket was
        removed; ``_Restart`` or ``_Wait`` otherwise."""
        calls = self.calls
        entries = self._listing(Step.QUEUE_READDIR, names.parent)
        ahead = [t for t in names.tickets(entries) if t.order < mine]
        if ahead:
            first = ahead[0]
            if self._judge(first.owner, me, Step.QUEUE_KILL, Step.QUEUE_PROC) is Judgement.DEAD:
                path = names.at(first.name)
                self._expect(self._step(Step.QUEUE_RMDIR, calls.rmdir, path), path, "ok", "ENOENT")
                return False
            raise _Wait(first.owner, self._judged, first.name)
        assert self._temp is not None
        published = self._step(Step.PUBLISH, calls.rename, self._temp, self.path)
        if published == "ok":
            self._temp = None
            self.held = True
            return True
        self._not_a_directory(published)
        self._expect(published, self.path, "ENOTEMPTY", "EEXIST")
        listed = self._step(Step.LIST, calls.readdir, self.path)
        if not isinstance(listed, tuple):
            self._not_a_directory(listed)
            self._expect(listed, self.path, "ENOENT")
            raise _Restart()
        nonce = self._understood(listed)
        if nonce is None:
            raise _Restart()
        where = names.owner_file(nonce)
        data = self._step(Step.READ, calls.read, where)
        if not isinstance(data, bytes):
            self._unreadable(data, where)
            raise _Restart()
        holder = parse_record(data, where=where)
        if holder.nonce != nonce:
            raise LockNotUnderstood(f"{where} holds the record of another nonce ({holder.nonce}): this version "
                                    f"names each owner file by its record's nonce, so a hand or another program made "
                                    f"it; remove {self.path} once no process that could hold it runs", path=self.path)
        if self._judge(holder, me, Step.KILL, Step.PROC) is not Judgement.DEAD:
            raise _Wait(holder, self._judged, None)
        self._claim(Step.CLAIM, Step.CLAIM_RMDIR, Step.CLAIM_UNLINK, where)
        raise _Restart()

    def _listing(self, step: Step, path: str) -> tuple[str, ...]:
        entries = self._step(step, self.calls.readdir, path)
        if not isinstance(entries, tuple):
            code = getattr(errno, entries, errno.EIO)
            raise OSError(code, f"{os.strerror(code)} (the projection lock at {self.path} lists its directory)", path)
        return entries

    _judged = Judgement.ALIVE  # the last judgement (``_judge``'s answer, kept for the ``_Wait`` it raises)

    def _judge(self, owner: Owner, me: Owner, kill: Step, proc: Step) -> Judgement:
        """The probes (QUEUE_KILL and QUEUE_PROC, or KILL and PROC): dead only on proof, fresh each time (no
        cache); another PID namespace's owner never judged (no probe)."""
        self._judged = self._verdict(owner, me, kill, proc)
        return self._judged

    def _verdict(self, owner: Owner, me: Owner, kill: Step, proc: Step) -> Judgement:
        if owner.pidns != me.pidns:
            return Judgement.OTHER_NAMESPACE
        if self._step(kill, self.calls.kill_probe, owner.pid) is Probe.ESRCH:
            return Judgement.DEAD
        seen = self._step(proc, self.calls.proc_stat, owner.pid)
        if seen is None or seen.start != owner.started_at or seen.state in ("Z", "X"):
            return Judgement.DEAD
        return Judgement.ALIVE

    def _claim(self, claim: Step, rmdir: Step, unlink: Step, owner_file: str) -> bool:
        """CLAIM (or RELEASE_CLAIM): ``owner_file`` renamed to a grave of ours, which fails (ENOENT) unless ``L``
        still holds it; then ``rmdir(L)``, which fails on a lock published onto the emptied ``L`` meanwhile, and
        the grave unlinked. False: the file was not there (claimed, released or removed meanwhile)."""
        assert self.owner is not None
        grave = self._names.grave(self.owner)
        claimed = self._step(claim, self.calls.rename, owner_file, grave)
        if claimed in ("ENOENT", "ENOTDIR"):
            return False
        self._expect(claimed, owner_file, "ok")
        self._expect(self._step(rmdir, self.calls.rmdir, self.path), self.path, "ok", "ENOTEMPTY", "EEXIST",
                     "ENOENT")
        self._step(unlink, self.calls.unlink, grave)
        return True

    def _restart(self, restarts: int) -> int:
        """One more return to QUEUE_READDIR with no wait between; past ``RESTART_GUARD``, not understood."""
        restarts += 1
        if restarts <= RESTART_GUARD:
            return restarts
        raise LockNotUnderstood(f"the lock {self.path} sent this process back {restarts} times in a row without a "
                                f"wait and is not one this version can take over: a hand or another program keeps "
                                f"changing it; remove {self.path} once no process that could hold it runs",
                                path=self.path)

    def _unreadable(self, outcome: Outcome, where: str) -> None:
        """READ could not read the owner file: ENOENT or ENOTDIR (claimed or released meanwhile) go back to
        QUEUE_READDIR; anything else (a directory there, no permission) is a record this process cannot judge."""
        if outcome in ("ENOENT", "ENOTDIR"):
            return
        raise LockNotUnderstood(f"{where} cannot be read ({outcome}: {os.strerror(getattr(errno, outcome, 0))}), so "
                                f"its owner cannot be judged: this version always writes a readable file there; "
                                f"remove {self.path} once no process that could hold it runs", path=self.path)

    def _not_a_directory(self, outcome: Outcome) -> None:
        if outcome == "ENOTDIR":
            raise LockPathError(f"the lock path {self.path} is not a directory any more (a file or a symlink was put "
                                f"there while this process waited): remove it if nothing else uses it, or choose "
                                f"another lock path", path=self.path)

    def _expect(self, outcome: Outcome, path: str, *expected: str) -> None:
        """An answer the algorithm does not expect: an ``OSError`` (what this call made is removed on the way out:
        ``_acquire``)."""
        if outcome in expected:
            return
        code = getattr(errno, outcome, errno.EIO)
        raise OSError(code, f"{os.strerror(code)} (the projection lock at {self.path} did not expect it)", path)

    def _give_up(self, wait: _Wait) -> None:
        """GIVE UP: ``LockBusy`` (its clean-up, GIVEUP_TEMP and GIVEUP_TICKET, runs on the way out: ``_acquire``)."""
        owner, judged, ticket = wait.owner, wait.judgement, wait.ticket
        assert self.owner is not None
        if judged is Judgement.OTHER_NAMESPACE:
            why = (f"which runs in another PID namespace ({owner.pidns}; ours is {self.owner.pidns}), so whether it "
                   f"is alive cannot be judged here; look for it from its own namespace, and once it has ended")
            act = f"remove {self._names.at(ticket) if ticket else self.path} by hand"
        else:
            why = "which is alive"
            act = "retry later, or wait longer (--max-tries, --wait)"
        where = f"the ticket {ticket} ahead of ours belongs to" if ticket else f"{self.path} is held by"
        waits = f"{self.waits} wait{'' if self.waits == 1 else 's'} of {self.wait:g} s"
        raise LockBusy(f"lock busy after {waits}: {where} {owner.describe()}, {why}; "
                       f"{act}", path=self.path, owner=owner, judgement=judged, ticket=ticket)

    def _clean_up(self) -> None:
        """GIVE UP's clean-up, of what this call made: GIVEUP_TEMP (``rm -r`` of our temp), GIVEUP_TICKET
        (``rmdir`` of our ticket). On the way out of an error (busy, not understood, an unexpected answer, an
        interrupt): an error here must not hide that one, so it stops the clean-up silently (what is left is
        garbage, as a crash's)."""
        try:
            if self._temp is not None:
                self._step(Step.GIVEUP_TEMP, self.calls.rm_tree, self._temp)
                self._temp = None
            if self._ticket is not None:
                self._step(Step.GIVEUP_TICKET, self.calls.rmdir, self._ticket)
                self._ticket = None
        except Exception:
            pass

    # -- release

    def _release(self) -> Optional[LockLost]:
        """RELEASE_CLAIM (with RELEASE_RMDIR, RELEASE_UNLINK); a ``LockLost`` (returned, not raised) when our owner
        file was gone."""
        me = self.owner
        assert me is not None
        self.held = False
        if self._claim(Step.RELEASE_CLAIM, Step.RELEASE_RMDIR, Step.RELEASE_UNLINK, self._names.owner_file(me.nonce)):
            return None
        return LockLost(f"lock lost: at release, {self.path} did not hold this process's owner file "
                        f"owner-{me.nonce}.json any more (someone removed the lock while the operation ran, so "
                        f"another process may have run at the same time; its lock, if any, was left as it is); the "
                        f"operation's outcome stands; check what it did, and why {self.path} was touched",
                        path=self.path)

    def _leave_queue(self) -> None:
        """TICKET_RMDIR: our ticket removed, the call is over."""
        if self._ticket is not None:
            ticket, self._ticket = self._ticket, None
            self._step(Step.TICKET_RMDIR, self.calls.rmdir, ticket)


def _int(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _short(value: object, width: int = 80) -> str:
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= width else text[:width - 1] + "…"


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
