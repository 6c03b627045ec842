"""The projection lock, as an executable model: the seed's ``withProjectionLock`` step by step, and ``fixed``.

Models: processes that call the lock (``LockBounds.calls`` calls each), each step one filesystem or system
call (``spec.lock.Call``), the operation in between (``enter``, then ``leave`` with what it did), and the world:
a SIGKILL between any two steps (the process is a zombie until reaped, then its pid is free), a free pid taken
by a new, unrelated process with a new start time, inode numbers reused lowest-free (ext4) or always fresh
(tmpfs), and a process of another PID namespace (whose pid, read in ours, is nobody or somebody else).

Variant ``seed`` is ``projection-lock.js`` as written: ``mkdir(L)``, then ``owner.json`` created and written
(two calls); on ``EEXIST``, ``stat`` (the inode), ``read``, the ``kill`` probe and the start time (cached per pid
for the whole call), a stale lock taken over by ``stat`` again, ``rename`` to ``L.stale-<uuid>`` and its removal
(``unlink``, ``rmdir``); else a wait, up to ``max_tries``, then busy; the operation; ``rm -r`` of ``L`` by path.
Variant ``fixed`` is the design of docs/lock.md (``Fix`` names each part, and each can be left out to see
what it prevents): a lock published whole by ``rename`` of a private temp holding its owner's file
(``owner-<nonce>.json``), taken over and released only by claiming that file (``rename`` of it out of the lock,
which fails unless the lock is still that owner's), then ``rmdir`` of the emptied lock (which fails on a lock
published onto it meanwhile), a fresh probe that proves death (another PID namespace: never; a zombie: dead),
tickets for first-come order, and the operation's outcome reported as it was.

Leaves out on purpose: the parent directory's creation, permissions (``kill`` never answers EPERM), the
operation's work (three outcomes), the content of private directories (a temp before its rename, a grave:
nobody reads them, and their removal is one step), garbage collection of what a killed process left beside the
lock (names that nobody reads again), and time: a wait is a step; ``max_tries`` bounds the tries.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional, Union, cast

from envreplica.spec.frozen import HashOnce, replace
from envreplica.spec.lock import (
    Answer,
    Busy,
    Call,
    Crashed,
    Done,
    Effect,
    Ended,
    EnvDone,
    Instance,
    Removal,
    Status,
)


class Variant(enum.Enum):
    """The seed's steps, or the seed with every ``Fix``."""

    SEED = "seed"
    FIXED = "fixed"

    @property
    def fixes(self) -> frozenset["Fix"]:
        return frozenset() if self is Variant.SEED else frozenset(Fix)


class Fix(enum.Enum):
    """One part of the ``fixed`` design: each prevents one way the seed breaks a property (docs/lock.md)."""

    #: the lock appears whole: ``rename`` of a private directory holding a complete ``owner.json`` (never an empty
    #: directory, never an empty or half-written file a reader takes for "not stale" forever)
    ATOMIC_PUBLISH = "atomic-publish"
    #: a takeover claims the lock by renaming its dead owner's own file (``owner-<nonce>.json``) out of it, which
    #: fails unless the lock is still that owner's; then ``rmdir(L)``, which fails on a lock published onto the
    #: emptied directory meanwhile: no ``stat``-then-``rename`` window, no inode compared (reused or not)
    CLAIMED_TAKEOVER = "claimed-takeover"
    #: the release claims its own file the same way: it never removes a lock by its path, and a lock that is no
    #: longer its own is reported lost, never taken from its new holder
    CLAIMED_RELEASE = "claimed-release"
    #: the start time is read afresh at every probe (the seed caches it per pid for the whole call)
    FRESH_PROBE = "fresh-probe"
    #: an owner of another PID namespace is never judged (its pid means nothing here): never taken over
    NAMESPACE = "namespace"
    #: a zombie (killed, not reaped: ``kill`` still answers) is dead
    ZOMBIE_DEAD = "zombie-dead"
    #: tickets: a process tries the lock only when no live process queued before it
    TICKETS = "tickets"
    #: the operation's failure is reported as it was (unchanged, or committed), not always "committed"
    TRUE_ANSWERS = "true-answers"


class Inodes(enum.Enum):
    """How the filesystem numbers a new file or directory."""

    REUSE = "reuse"  # the lowest free number (ext4 hands freed inode numbers out again)
    FRESH = "fresh"  # a number never used before (tmpfs)


@dataclass(frozen=True)
class LockBounds:
    """Configuration: how far the checker explores (never part of a state)."""

    name: str
    processes: int = 2  # processes calling the lock (symmetric)
    calls: int = 1  # calls of the lock each process makes, one after the other
    crashes: int = 1  # SIGKILLs in all
    reuses: int = 0  # free pids taken by new, unrelated processes
    zombies: bool = False  # a killed process stays a zombie until reaped (else it is reaped at once)
    namespaces: bool = False  # the last process lives in another PID namespace (its pid: the first process's)
    inodes: Inodes = Inodes.REUSE
    max_tries: int = 1  # tries before busy (the seed's 80)
    effects: frozenset[Effect] = frozenset({Effect.OK})  # what an operation may do
    stale: bool = False  # the first state has a lock left by a process that died before it
    fixes: frozenset[Fix] = frozenset(Fix)  # the fixes applied (none: the seed's steps)

    def with_variant(self, variant: Variant) -> "LockBounds":
        return replace(self, fixes=variant.fixes)


#: Named bounds suites (``envreplica check --bounds NAME``). Each suite is checked bounds by bounds; its
#: "sometimes" properties must each be witnessed in one of them. ``lock`` is what the gate checks: three processes
#: racing on a lock a dead process left (``race``), a kill at any step with zombies and a pid reused (``crash``),
#: a process of another PID namespace (``namespace``), two processes calling three times (``fair``: enough calls
#: for a waiter to be overtaken twice), and every outcome of the operation (``answers``). ``lock-deep`` adds a kill to the race, inode numbers never reused, three
#: processes calling twice, and two calling twice with every world move at once. ``lock-tiny`` is the smallest
#: suite in which every "sometimes" property is still witnessed (``crash`` and ``answers``, a tenth of ``lock``'s
#: states): for a quick run of the gate's plumbing (``check --bounds tiny --lock-bounds lock-tiny``), never a
#: gate's verdict on the lock.
RACE = LockBounds("race", processes=3, calls=1, crashes=0, stale=True, max_tries=0)
CRASH = LockBounds("crash", processes=2, calls=1, crashes=1, reuses=1, zombies=True, max_tries=1)
NAMESPACE = LockBounds("namespace", processes=2, calls=1, crashes=1, namespaces=True, max_tries=1)
FAIR = LockBounds("fair", processes=2, calls=3, crashes=0, max_tries=1)
ANSWERS = LockBounds("answers", processes=2, calls=1, crashes=0, max_tries=1, effects=frozenset(Effect))
RACE_CRASH = LockBounds("race-crash", processes=3, calls=1, crashes=1, max_tries=1)
RACE_TMPFS = LockBounds("race-tmpfs", processes=3, calls=1, crashes=0, stale=True, max_tries=0, inodes=Inodes.FRESH)
FAIR3 = LockBounds("fair3", processes=3, calls=2, crashes=0, max_tries=1)
WORLD = LockBounds("world", processes=2, calls=2, crashes=1, reuses=1, zombies=True, max_tries=1,
                   effects=frozenset(Effect))
PRESETS: dict[str, tuple[LockBounds, ...]] = {
    "lock": (RACE, CRASH, NAMESPACE, FAIR, ANSWERS),
    "lock-deep": (RACE_CRASH, RACE_TMPFS, FAIR3, WORLD),
    "lock-tiny": (CRASH, ANSWERS),
}


class UnknownLockBounds(ValueError):
    """A bounds name that is not one of ``PRESETS``."""


def suite(name: str, variant: Variant = Variant.FIXED,
          fixes: Optional[Iterable[Fix]] = None) -> tuple[LockBounds, ...]:
    """The bounds suite ``name`` under ``variant`` (or exactly ``fixes``)."""
    try:
        chosen = PRESETS[name]
    except KeyError:
        raise UnknownLockBounds(f"unknown lock bounds {name!r}: choose one of {', '.join(PRESETS)}") from None
    chosen_fixes = variant.fixes if fixes is None else frozenset(fixes)
    return tuple(replace(b, fixes=chosen_fixes) for b in chosen)


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Record(HashOnce):
    """An ``owner.json`` record: who wrote it (the seed's ``{pid, started_at}``; ``fixed`` adds its namespace and
    the instance, whose nonce names the file)."""

    slot: int  # the writer (ghost: -1 for the process dead before the first state)
    pid: int  # its pid, in its namespace
    start: int  # its start time (never 0: the seed's ``Boolean(started_at)`` reads 0 as absent)
    ns: int  # its PID namespace
    instance: Instance  # the attempt (fixed: the nonce in the file's name, ``owner-<nonce>.json``)


@dataclass(frozen=True, slots=True, eq=False)
class File(HashOnce):
    """``owner.json`` in a lock directory."""

    inode: int
    record: Optional[Record]  # None: empty (created, not yet written)


@dataclass(frozen=True, slots=True, eq=False)
class LockDir(HashOnce):
    """A lock directory, at the lock path or moved away."""

    inode: int
    maker: Instance  # the attempt that made it (mkdir, or the rename of its temp)
    owner: Optional[File]  # owner.json, if there


@dataclass(frozen=True, slots=True, eq=False)
class Ticket(HashOnce):
    """``L.t.<seq>.<nonce>.<pid>.<start>.<ns>``: a queued process (its identity is in the name). Tickets are ordered
    by (seq, nonce); the nonces are random, so among tickets of one seq the order is chance: ``rank`` is this
    ticket's place among them (0 first), chosen when it is made (``Step.choice``)."""

    seq: int
    rank: int  # its place among the tickets of its seq (their random nonces' order)
    slot: int
    pid: int
    start: int
    ns: int
    instance: Instance
    gone: bool = False  # removed by another process that judged its owner dead, the owner alive (ghost: not on
    # disk, read by nobody; its owner still orders itself by its own nonce, so the ranks stay those of the nonces)


@dataclass(frozen=True, slots=True, eq=False)
class Fs(HashOnce):
    """The lock's directory."""

    lock: Optional[LockDir] = None  # L
    moved: tuple[tuple[int, LockDir], ...] = ()  # the seed's L.stale-<uuid>: (the mover's slot, the directory)
    temps: frozenset[Instance] = frozenset()  # fixed: L.n.<instance>, a complete owner file in it (private)
    tickets: frozenset[Ticket] = frozenset()  # fixed: the queue
    next_inode: int = 1  # Inodes.FRESH: the next number


@dataclass(frozen=True, slots=True, eq=False)
class Occupant(HashOnce):
    """A process the kernel knows, in a PID namespace: a lock user (``slot`` >= 0) or another process (-1)."""

    ns: int
    pid: int
    start: int
    zombie: bool
    slot: int


@dataclass(frozen=True, slots=True, eq=False)
class Os(HashOnce):
    """The processes the kernel knows, and the start time the next process of each pid gets."""

    occupants: frozenset[Occupant]
    starts: tuple[tuple[tuple[int, int], int], ...]  # ((ns, pid), the last start time given), sorted


class Pc(str, enum.Enum):
    """Where a process is: the step it takes next."""

    IDLE = "idle"  # between calls (or before the first)
    # the seed's steps
    MKDIR = "mkdir L"
    CREATE = "create owner file"
    WRITE = "write owner file"
    RMDIR_FAILED = "rmdir L (write failed)"
    STAT = "stat L"
    LIST = "readdir L"
    READ = "read owner file"
    KILL = "kill probe"
    PROC = "start-time probe"
    STAT_AGAIN = "stat L again"
    RENAME_STALE = "rename L to stale"
    UNLINK_STALE = "unlink stale owner file"
    RMDIR_STALE = "rmdir stale"
    WAIT = "wait"
    ENTER = "enter"
    LEAVE = "leave"
    UNLINK_RELEASE = "unlink owner file (release)"
    RMDIR_RELEASE = "rmdir L (release)"
    # fixed's steps
    TICKET_READDIR = "readdir (ticket)"
    TICKET_MKDIR = "mkdir ticket"
    TEMP_MKDIR = "mkdir temp"
    TEMP_WRITE = "write temp owner.json"
    QUEUE_READDIR = "readdir (queue)"
    QUEUE_KILL = "kill probe (ticket)"
    QUEUE_PROC = "start-time probe (ticket)"
    QUEUE_RMDIR = "rmdir dead ticket"
    PUBLISH = "rename temp to L"
    CLAIM = "claim the dead owner's file"
    CLAIM_RMDIR = "rmdir L (claimed)"
    RELEASE_CLAIM = "claim own owner file (release)"
    RELEASE_RMDIR = "rmdir L (released)"
    TICKET_RMDIR = "rmdir own ticket"
    GIVEUP_TEMP = "remove own temp"
    GIVEUP_TICKET = "rmdir own ticket (busy)"


@dataclass(frozen=True, slots=True, eq=False)
class Proc(HashOnce):
    """One process calling the lock: its identity, where it is, and what a crash loses."""

    slot: int  # its place (processes are interchangeable: symmetry permutes slots)
    pid: int  # its pid, in its namespace
    start: int  # its start time
    ns: int  # its PID namespace
    status: Status = Status.RUNNING
    call: int = 0  # calls begun
    pc: Pc = Pc.IDLE  # the step it takes next
    tries: int = 0  # tries so far, this call
    inode: Optional[int] = None  # seed: the inode its first stat saw
    listed: Optional[Instance] = None  # fixed: the owner file readdir(L) found (its instance, from its name)
    read: Optional[Record] = None  # the record it read (the owner it judges)
    cache: frozenset[tuple[int, int]] = frozenset()  # seed: (pid, start) read this call (the ``observed`` map)
    fd: Optional[int] = None  # seed: the inode of the owner.json it opened (CREATE), written by WRITE
    holds: Optional[Instance] = None  # the lock instance it made and believes it holds
    made: bool = False  # this call changed the directory (a crash now leaves something)
    seq: int = 0  # fixed: the sequence number its readdir chose
    ahead: Optional[Ticket] = None  # fixed: the ticket ahead of it, being probed
    inside: bool = False  # inside the operation
    entered: bool = False  # this call ran its operation
    effect: Optional[Effect] = None  # what the operation did, this call
    answer: Optional[Answer] = None  # the answer of its last call
    queued: bool = False  # waiting for the lock (ghost, for overtakes)
    overtaken: int = 0  # acquisitions by others since it queued (ghost)


@dataclass(frozen=True, slots=True, eq=False)
class LockState(HashOnce):
    """Everything that is."""

    procs: tuple[Proc, ...]  # by slot
    fs: Fs  # the directory
    os: Os  # the kernel's processes
    crashes: int = 0  # SIGKILLs so far
    reuses: int = 0  # pids reused so far


# ---------------------------------------------------------------------------
# Actions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Process ``slot`` calls the lock (again)."""

    slot: int
    kind = "start"


@dataclass(frozen=True)
class Step:
    """Process ``slot`` makes its next call; ``choice``: where chance decides (the place of a new ticket among
    the tickets of its seq: its nonce's order), else 0."""

    slot: int
    choice: int = 0
    kind = "step"


@dataclass(frozen=True)
class Leave:
    """Process ``slot``'s operation ends, having done ``effect``."""

    slot: int
    effect: Effect
    kind = "leave"


@dataclass(frozen=True)
class Crash:
    """Process ``slot`` is killed (SIGKILL) between two of its steps."""

    slot: int
    kind = "crash"


@dataclass(frozen=True)
class Reap:
    """Process ``slot``, a zombie, is reaped by its parent: its pid is free."""

    slot: int
    kind = "reap"


@dataclass(frozen=True)
class Reuse:
    """A new, unrelated process takes the free pid ``pid`` of namespace ``ns`` (a new start time)."""

    ns: int
    pid: int
    kind = "reuse"


Action = Union[Start, Step, Leave, Crash, Reap, Reuse]
Result = Union[Done, Ended, Crashed, EnvDone]

#: The slot of the process dead before the first state (``LockBounds.stale``), and its pid.
GONE = -1
GONE_PID = 9


# ---------------------------------------------------------------------------
# The first state
# ---------------------------------------------------------------------------


def _identity(cfg: LockBounds, slot: int) -> tuple[int, int]:
    """(pid, ns) of process ``slot``: pids 1..N in namespace 0; with ``namespaces``, the last process has pid 1
    in namespace 1 (the first process's number: a probe of it from namespace 0 finds the first process)."""
    if cfg.namespaces and slot == cfg.processes - 1:
        return 1, 1
    return slot + 1, 0


def _start_of(cfg: LockBounds, slot: int) -> int:
    """Process ``slot``'s start time: 1, and 5 in another namespace (two namespaces' clocks of start are their
    own: the same pid there and here rarely started at the same tick)."""
    return 5 if _identity(cfg, slot)[1] == 1 else 1


def init(cfg: LockBounds) -> LockState:
    """Every process idle, the directory empty (or holding a dead process's lock: ``stale``)."""
    procs = []
    occupants = []
    starts = []
    for slot in range(cfg.processes):
        pid, ns = _identity(cfg, slot)
        start = _start_of(cfg, slot)
        procs.append(Proc(slot, pid, start, ns))
        occupants.append(Occupant(ns, pid, start, False, slot))
        starts.append(((ns, pid), start))
    fs = Fs()
    if cfg.stale:
        starts.append(((0, GONE_PID), 1))
        instance = (GONE, 0)
        record = Record(GONE, GONE_PID, 1, 0, instance)
        fs, dir_inode = _alloc(cfg, fs)
        fs, file_inode = _alloc(cfg, fs)
        fs = replace(fs, lock=LockDir(dir_inode, instance, File(file_inode, record)))
    return LockState(tuple(procs), fs, Os(frozenset(occupants), tuple(sorted(starts))))


# ---------------------------------------------------------------------------
# Helpers: the filesystem, the kernel, the probes
# ---------------------------------------------------------------------------


def _used_inodes(fs: Fs) -> set[int]:
    used = set()
    for d in (fs.lock, *(m for _, m in fs.moved)):
        if d is not None:
            used.add(d.inode)
            if d.owner is not None:
                used.add(d.owner.inode)
    return used


def _alloc(cfg: LockBounds, fs: Fs) -> tuple[Fs, int]:
    """A new inode number: the lowest free (``REUSE``) or the next never used (``FRESH``)."""
    if cfg.inodes is Inodes.FRESH:
        return replace(fs, next_inode=fs.next_inode + 1), fs.next_inode
    used = _used_inodes(fs)
    n = 1
    while n in used:
        n += 1
    return fs, n


def _occupant(st: LockState, ns: int, pid: int) -> Optional[Occupant]:
    return next((o for o in st.os.occupants if o.ns == ns and o.pid == pid), None)


def _proc(st: LockState, slot: int) -> Proc:
    return st.procs[slot]


def _with(st: LockState, proc: Proc) -> LockState:
    return replace(st, procs=tuple(proc if p.slot == proc.slot else p for p in st.procs))


def _go(st: LockState, proc: Proc, pc: Pc, call: Call, note: str = "", removed: Optional[Removal] = None,
        busy: Optional[Busy] = None, **changes: object) -> tuple[LockState, Done]:
    return _with(st, replace(proc, pc=pc, **changes)), Done(call, note, removed, busy)


def _kill_answers(st: LockState, prober: Proc, pid: int) -> bool:
    """``kill(pid, 0)`` from ``prober``'s namespace: a process (running or a zombie) has that pid there."""
    return _occupant(st, prober.ns, pid) is not None


def _proc_stat(st: LockState, prober: Proc, pid: int) -> Optional[tuple[int, bool]]:
    """``/proc/pid/stat`` in ``prober``'s namespace: (start time, zombie), or None (no such process)."""
    o = _occupant(st, prober.ns, pid)
    return None if o is None else (o.start, o.zombie)


def _alive_verdict(cfg: LockBounds, st: LockState, prober: Proc, pid: int, start: int, ns: int) -> Optional[bool]:
    """``fixed``'s judgement of an owner after both probes (kill, then /proc): True alive, False dead, None: cannot
    tell (another namespace). The caller made the probes as steps; this is their verdict on the state now."""
    if Fix.NAMESPACE in cfg.fixes and ns != prober.ns:
        return None
    seen = _proc_stat(st, prober, pid)
    if seen is None:
        return False
    seen_start, zombie = seen
    if seen_start != start:
        return False
    if zombie and Fix.ZOMBIE_DEAD in cfg.fixes:
        return False
    return True


def _provable(cfg: LockBounds, prober: Proc, record_ns: int) -> bool:
    """Whether ``prober`` could ever prove an owner of namespace ``record_ns`` dead."""
    return record_ns == prober.ns or Fix.NAMESPACE not in cfg.fixes


def _without_ticket(st: LockState, instance: Instance, by_other: bool = False) -> LockState:
    """The ticket of ``instance`` removed (``rmdir``; found by its instance: its rank may have moved since). Removed
    ``by_other`` while its owner lives (a wrong judgement: another PID namespace's ticket), it stays as a ghost
    (``Ticket.gone``): its owner still knows its own name."""
    owner_lives = by_other and any(p.status is Status.RUNNING and _instance(p) == instance for p in st.procs)
    removed = next((t for t in st.fs.tickets if t.instance == instance), None)
    if removed is None:  # already removed (ENOENT)
        return st
    if owner_lives:
        kept = frozenset(t for t in st.fs.tickets if t.instance != instance) | {replace(removed, gone=True)}
    else:  # the ranks of its seq close up: a new ticket can take any place among the ones left
        kept = frozenset(replace(t, rank=t.rank - 1) if t.seq == removed.seq and t.rank > removed.rank else t
                         for t in st.fs.tickets if t.instance != instance)
    return replace(st, fs=replace(st.fs, tickets=kept))


def _queued_ahead(cfg: LockBounds, st: LockState, proc: Proc) -> Optional[Ticket]:
    """The first ticket ordered before ``proc``'s (by (seq, nonce): ``(seq, rank)``), if any."""
    mine = next(t for t in st.fs.tickets if t.instance == _instance(proc))  # a ghost, if another removed it
    ahead = [t for t in st.fs.tickets if not t.gone and (t.seq, t.rank) < (mine.seq, mine.rank)]
    return min(ahead, key=lambda t: (t.seq, t.rank)) if ahead else None


def ticket_places(st: LockState, proc: Proc) -> int:
    """How many places a ticket ``proc`` makes now can take among the tickets of its seq (one more than them)."""
    return 1 + sum(1 for t in st.fs.tickets if t.seq == proc.seq)


def _acquired(st: LockState, proc: Proc, instance: Instance) -> LockState:
    """``proc`` got the lock: every other queued process is overtaken once more (ghost)."""
    procs = tuple(p if p.slot == proc.slot or not p.queued else replace(p, overtaken=p.overtaken + 1)
                  for p in st.procs)
    st = replace(st, procs=procs)
    return _with(st, replace(st.procs[proc.slot], holds=instance, queued=False, overtaken=0, pc=Pc.ENTER))


def _answer_of(cfg: LockBounds, effect: Effect) -> Answer:
    """What the caller is told of its operation's outcome (the seed: any failure is "needs reconciliation")."""
    if effect is Effect.OK:
        return Answer.OK
    if Fix.TRUE_ANSWERS not in cfg.fixes:
        return Answer.FAILED_COMMITTED
    return Answer.FAILED_UNCHANGED if effect is Effect.UNCHANGED else Answer.FAILED_COMMITTED


def _end(st: LockState, proc: Proc, call: Call, answer: Answer, busy: Optional[Busy] = None,
         removed: Optional[Removal] = None) -> tuple[LockState, Ended]:
    done = replace(proc, pc=Pc.IDLE, answer=answer, holds=None, ahead=None, read=None, inode=None,
                   fd=None, cache=frozenset(), made=False, queued=False, overtaken=0, inside=False)
    return _with(st, done), Ended(call, answer, removed, busy)


# ---------------------------------------------------------------------------
# The steps
# ---------------------------------------------------------------------------


def start(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """The call begins: ``fixed`` takes its ticket first and prepares its temp; the seed goes for ``mkdir(L)``."""
    fresh = replace(proc, call=proc.call + 1, tries=0, entered=False, effect=None, answer=None, queued=False,
                    overtaken=0)
    first = Pc.TICKET_READDIR if Fix.TICKETS in cfg.fixes else \
        Pc.TEMP_MKDIR if Fix.ATOMIC_PUBLISH in cfg.fixes else Pc.MKDIR
    return _with(st, replace(fresh, pc=first)), Done(Call.ENTER, "called")


def _instance(proc: Proc) -> Instance:
    return (proc.slot, proc.call)


def _record(proc: Proc) -> Record:
    return Record(proc.slot, proc.pid, proc.start, proc.ns, _instance(proc))


def _claimed(cfg: LockBounds) -> bool:
    """The owner file is named by its instance (``owner-<nonce>.json``): a reader lists L to find it, and a claim
    renames exactly that file (``fixed``); else it is ``owner.json`` (the seed's)."""
    return Fix.CLAIMED_TAKEOVER in cfg.fixes or Fix.CLAIMED_RELEASE in cfg.fixes


def _after_setup(cfg: LockBounds) -> Pc:
    """Where the loop begins: the queue (tickets), or the publication."""
    return Pc.QUEUE_READDIR if Fix.TICKETS in cfg.fixes else _publish_pc(cfg)


def _publish_pc(cfg: LockBounds) -> Pc:
    return Pc.PUBLISH if Fix.ATOMIC_PUBLISH in cfg.fixes else Pc.MKDIR


def _loop_pc(cfg: LockBounds) -> Pc:
    return _after_setup(cfg)


def step_ticket_readdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    seq = 1 + max((t.seq for t in st.fs.tickets if not t.gone), default=0)
    return _go(st, proc, Pc.TICKET_MKDIR, Call.READDIR, f"seq {seq}", seq=seq)


def step_ticket_mkdir(cfg: LockBounds, st: LockState, proc: Proc, choice: int = 0) -> tuple[LockState, Done]:
    """``mkdir(K)``: the ticket takes place ``choice`` among the tickets of its seq (its random nonce's order)."""
    ticket = Ticket(proc.seq, choice, proc.slot, proc.pid, proc.start, proc.ns, _instance(proc))
    shifted = frozenset(replace(t, rank=t.rank + 1) if t.seq == proc.seq and t.rank >= choice else t
                        for t in st.fs.tickets)
    st = replace(st, fs=replace(st.fs, tickets=shifted | {ticket}))
    nxt = Pc.TEMP_MKDIR if Fix.ATOMIC_PUBLISH in cfg.fixes else Pc.QUEUE_READDIR
    return _go(st, proc, nxt, Call.MKDIR, "ticket", made=True, queued=True)


def step_temp_mkdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    return _go(st, proc, Pc.TEMP_WRITE, Call.MKDIR, "temp", made=True)


def step_temp_write(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    st = replace(st, fs=replace(st.fs, temps=st.fs.temps | {_instance(proc)}))
    return _go(st, proc, _after_setup(cfg), Call.WRITE, "temp owner file")


def step_queue_readdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    ahead = _queued_ahead(cfg, st, proc)
    if ahead is None:
        return _go(st, proc, _publish_pc(cfg), Call.READDIR, "first in the queue", ahead=None)
    if not _provable(cfg, proc, ahead.ns):
        return _wait_or_busy(cfg, st, replace(proc, ahead=ahead), Call.READDIR, Busy(ahead.slot, False))
    return _go(st, proc, Pc.QUEUE_KILL, Call.READDIR, "a ticket ahead", ahead=ahead)


def step_queue_kill(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    ahead = proc.ahead
    assert ahead is not None
    if not _kill_answers(st, proc, ahead.pid):
        return _go(st, proc, Pc.QUEUE_RMDIR, Call.KILL, "ESRCH: dead")
    return _go(st, proc, Pc.QUEUE_PROC, Call.KILL, "answers")


def step_queue_proc(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    ahead = proc.ahead
    assert ahead is not None
    verdict = _alive_verdict(cfg, st, proc, ahead.pid, ahead.start, ahead.ns)
    if verdict is False:
        return _go(st, proc, Pc.QUEUE_RMDIR, Call.PROC, "dead")
    return _wait_or_busy(cfg, st, proc, Call.PROC, Busy(ahead.slot, True))


def step_queue_rmdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    ahead = proc.ahead
    assert ahead is not None
    return _go(_without_ticket(st, ahead.instance, by_other=True), proc, Pc.QUEUE_READDIR, Call.RMDIR, "a dead process's ticket",
               ahead=None)


def step_publish(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """``rename(T, L)``: fails while L holds an owner file; replaces an empty L (rename's rule for directories)."""
    lock = st.fs.lock
    if lock is not None and lock.owner is not None:
        return _go(st, proc, _contend_pc(cfg), Call.RENAME, "ENOTEMPTY: held", queued=True)
    fs, dir_inode = _alloc(cfg, replace(st.fs, lock=None))
    fs, file_inode = _alloc(cfg, fs)
    new = LockDir(dir_inode, _instance(proc), File(file_inode, _record(proc)))
    st = replace(st, fs=replace(fs, lock=new, temps=fs.temps - {_instance(proc)}))
    return _acquired(st, proc, _instance(proc)), Done(Call.RENAME, "acquired")


def _contend_pc(cfg: LockBounds) -> Pc:
    """After a failed try: ``fixed`` lists L to find its owner file; the seed stats L first (its inode)."""
    return Pc.LIST if Fix.CLAIMED_TAKEOVER in cfg.fixes else Pc.STAT


def step_mkdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """The seed's ``mkdirSync(lockPath)``."""
    if st.fs.lock is not None:
        return _go(st, proc, _contend_pc(cfg), Call.MKDIR, "EEXIST", queued=True)
    fs, inode = _alloc(cfg, st.fs)
    st = replace(st, fs=replace(fs, lock=LockDir(inode, _instance(proc), None)))
    return _go(st, proc, Pc.CREATE, Call.MKDIR, "made L", holds=_instance(proc), made=True)


def step_create(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """``writeFileSync``'s open of the owner file in L (by path: whatever L is now), creating or truncating it."""
    lock = st.fs.lock
    if lock is None:  # L was moved away: ENOENT; the seed's catch removes L (rmdirSync) and rethrows
        return _go(st, proc, Pc.RMDIR_FAILED, Call.CREATE, "ENOENT")
    removed = Removal(lock.maker, "release") if lock.owner is not None and lock.maker != _instance(proc) \
        and lock.owner.record is not None and not _claimed(cfg) else None
    if lock.owner is None or _claimed(cfg) and lock.owner.record is not None \
            and lock.owner.record.instance != _instance(proc):
        if lock.owner is not None:  # another instance's file (named by its nonce) stays: ours is a second file
            return _go(st, proc, Pc.WRITE, Call.CREATE, "a second owner file", fd=-1)
        fs, inode = _alloc(cfg, st.fs)
    else:
        fs, inode = st.fs, lock.owner.inode
    st = replace(st, fs=replace(fs, lock=replace(lock, owner=File(inode, None))))
    return _go(st, proc, Pc.WRITE, Call.CREATE, "empty owner file", removed=removed, fd=inode)


def step_write(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """The write through the opened file: into that file wherever it is now (L, a moved directory, or nowhere)."""
    record = _record(proc)
    fs = st.fs
    if fs.lock is not None and fs.lock.owner is not None and fs.lock.owner.inode == proc.fd:
        fs = replace(fs, lock=replace(fs.lock, owner=File(proc.fd, record)))
    else:
        moved = []
        for mover, d in fs.moved:
            if d.owner is not None and d.owner.inode == proc.fd:
                d = replace(d, owner=File(proc.fd, record))
            moved.append((mover, d))
        fs = replace(fs, moved=tuple(moved))
    st = replace(st, fs=fs)
    holds = proc.holds
    assert holds is not None
    return _acquired(st, proc, holds), Done(Call.WRITE, "owner file written")


def step_rmdir_failed(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Ended]:
    """The seed's ``rmdirSync(lockPath)`` after the write failed: by path, whatever L is now; then the error."""
    lock = st.fs.lock
    removed = None
    if lock is not None and lock.owner is None:
        removed = Removal(lock.maker, "release")
        st = replace(st, fs=replace(st.fs, lock=None))
    return _end(st, proc, Call.RMDIR, Answer.ERROR, removed=removed)


def step_stat(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    if st.fs.lock is None:  # ENOENT: caught, not stale
        return _not_stale(cfg, st, proc, Call.STAT, None)
    nxt = Pc.LIST if _claimed(cfg) else Pc.READ
    return _go(st, proc, nxt, Call.STAT, f"inode {st.fs.lock.inode}", inode=st.fs.lock.inode)


def step_list(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    """``readdir(L)``: the owner file's name says its instance; none (L empty or gone): try again at once."""
    lock = st.fs.lock
    record = lock.owner.record if lock is not None and lock.owner is not None else None
    if lock is None or lock.owner is None:
        if Fix.CLAIMED_TAKEOVER in cfg.fixes:
            return _go(st, proc, _loop_pc(cfg), Call.READDIR, "no owner file: try again")
        return _not_stale(cfg, st, proc, Call.READDIR, lock.maker[0] if lock is not None else None)
    listed = record.instance if record is not None else lock.maker
    return _go(st, proc, Pc.READ, Call.READDIR, "an owner file", listed=listed)


def step_read(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    lock = st.fs.lock
    record = lock.owner.record if lock is not None and lock.owner is not None else None
    if _claimed(cfg) and record is not None and record.instance != proc.listed:
        record = None  # the file listed is gone (claimed): another is there now
    if record is None:  # no file, or empty: JSON.parse fails; fixed: the listed file was claimed meanwhile
        if Fix.CLAIMED_TAKEOVER in cfg.fixes:
            return _go(st, proc, _loop_pc(cfg), Call.READ, "ENOENT: claimed meanwhile")
        return _not_stale(cfg, st, proc, Call.READ, lock.maker[0] if lock is not None else None)
    if Fix.NAMESPACE in cfg.fixes and record.ns != proc.ns:
        return _wait_or_busy(cfg, st, replace(proc, read=record), Call.READ, Busy(record.slot, False))
    return _go(st, proc, Pc.KILL, Call.READ, "a record", read=record)


def step_kill(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    record = proc.read
    assert record is not None
    if not _kill_answers(st, proc, record.pid):
        return _go(st, proc, _take_pc(cfg), Call.KILL, "ESRCH: stale")
    cached = next((s for p, s in proc.cache if p == record.pid), None)
    if cached is not None and Fix.FRESH_PROBE not in cfg.fixes:
        if cached != record.start:
            return _go(st, proc, _take_pc(cfg), Call.KILL, "cached start differs: stale")
        return _not_stale(cfg, st, proc, Call.KILL, record.slot)
    return _go(st, proc, Pc.PROC, Call.KILL, "answers")


def step_proc(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    record = proc.read
    assert record is not None
    seen = _proc_stat(st, proc, record.pid)
    seen_start = seen[0] if seen is not None else 0  # 0: undefined (the process is gone)
    cache = proc.cache if Fix.FRESH_PROBE in cfg.fixes else proc.cache | {(record.pid, seen_start)}
    proc = replace(proc, cache=cache)
    if Fix.FRESH_PROBE in cfg.fixes or Fix.ZOMBIE_DEAD in cfg.fixes or Fix.NAMESPACE in cfg.fixes:
        stale = _alive_verdict(cfg, st, proc, record.pid, record.start, record.ns) is False
    else:
        stale = seen_start != record.start
    if stale:
        return _go(st, proc, _take_pc(cfg), Call.PROC, "stale")
    return _not_stale(cfg, st, proc, Call.PROC, record.slot)


def _take_pc(cfg: LockBounds) -> Pc:
    return Pc.CLAIM if Fix.CLAIMED_TAKEOVER in cfg.fixes else Pc.STAT_AGAIN


def _not_stale(cfg: LockBounds, st: LockState, proc: Proc, call: Call,
               holder: Optional[int]) -> tuple[LockState, Union[Done, Ended]]:
    """Not judged stale: wait, or after ``max_tries`` give up busy (the holder, or nobody seen)."""
    record_ns = proc.read.ns if proc.read is not None else proc.ns
    return _wait_or_busy(cfg, st, proc, call, Busy(holder, _provable(cfg, proc, record_ns)))


def _wait_or_busy(cfg: LockBounds, st: LockState, proc: Proc, call: Call,
                  busy: Busy) -> tuple[LockState, Union[Done, Ended]]:
    """After a try that did not get the lock: wait, or (``max_tries`` tries done) give up busy, naming ``busy``;
    the design with files of its own cleans them up first, and answers busy after."""
    if proc.tries >= cfg.max_tries:
        if Fix.ATOMIC_PUBLISH in cfg.fixes or Fix.TICKETS in cfg.fixes:
            first = Pc.GIVEUP_TEMP if Fix.ATOMIC_PUBLISH in cfg.fixes else Pc.GIVEUP_TICKET
            return _go(st, proc, first, call, "gives up", busy=busy)
        return _end(st, proc, call, Answer.BUSY, busy)
    return _go(st, proc, Pc.WAIT, call, "not stale: waits")


def step_wait(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    return _go(st, proc, _loop_pc(cfg), Call.WAIT, "", tries=proc.tries + 1, read=None, inode=None, ahead=None,
               listed=None)


def step_stat_again(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """The seed's check before its takeover: ``statSync(L).ino === observedInode``."""
    lock = st.fs.lock
    if lock is not None and proc.inode is not None and lock.inode == proc.inode:
        return _go(st, proc, Pc.RENAME_STALE, Call.STAT, "same inode")
    return _continue(cfg, st, proc, Call.STAT, "changed: tries again")


def _continue(cfg: LockBounds, st: LockState, proc: Proc, call: Call, note: str,
              removed: Optional[Removal] = None) -> tuple[LockState, Done]:
    """The seed's ``continue``: the next iteration at once (its ``tries`` counts it); fixed: the loop again."""
    tries = proc.tries + 1 if Fix.CLAIMED_TAKEOVER not in cfg.fixes else proc.tries
    return _go(st, proc, _loop_pc(cfg), call, note, removed, tries=tries, read=None, inode=None, listed=None)


def step_rename_stale(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """``renameSync(lockPath, L.stale-<uuid>)``: whatever L is now."""
    lock = st.fs.lock
    if lock is None:
        return _continue(cfg, st, proc, Call.RENAME, "ENOENT")
    st = replace(st, fs=replace(st.fs, lock=None, moved=st.fs.moved + ((proc.slot, lock),)))
    return _go(st, proc, Pc.UNLINK_STALE, Call.RENAME, "moved L away", Removal(lock.maker, "takeover"))


def _my_moved(st: LockState, proc: Proc) -> int:
    """The index in ``Fs.moved`` of the directory ``proc`` moved away (by position, never by identity: compiled
    code may rebuild a tuple it unboxed, so ``is`` on one is not a test)."""
    return next(i for i, m in enumerate(st.fs.moved) if m[0] == proc.slot)


def step_unlink_stale(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """``rmSync(moved, {recursive})``: its entries first (the owner file, if there), then the directory."""
    at = _my_moved(st, proc)
    mover, d = st.fs.moved[at]
    if d.owner is None:
        moved = st.fs.moved[:at] + st.fs.moved[at + 1:]
        return _continue(cfg, replace(st, fs=replace(st.fs, moved=moved)), proc, Call.RMDIR, "removed")
    moved = st.fs.moved[:at] + ((mover, replace(d, owner=None)),) + st.fs.moved[at + 1:]
    return _go(replace(st, fs=replace(st.fs, moved=moved)), proc, Pc.RMDIR_STALE, Call.UNLINK, "")


def step_rmdir_stale(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    at = _my_moved(st, proc)
    moved = st.fs.moved[:at] + st.fs.moved[at + 1:]
    return _continue(cfg, replace(st, fs=replace(st.fs, moved=moved)), proc, Call.RMDIR, "removed")


def _claim(st: LockState, instance: Instance) -> tuple[LockState, Optional[LockDir]]:
    """``rename(L/owner-<instance>.json, a grave)``: succeeds only while L holds that instance's owner file."""
    lock = st.fs.lock
    if lock is None or lock.owner is None or lock.owner.record is None or lock.owner.record.instance != instance:
        return st, None
    return replace(st, fs=replace(st.fs, lock=replace(lock, owner=None))), lock


def _rmdir_lock(st: LockState) -> LockState:
    """``rmdir(L)``: removes L only while it is empty (a lock published onto it meanwhile stays: ENOTEMPTY)."""
    lock = st.fs.lock
    if lock is not None and lock.owner is None:
        return replace(st, fs=replace(st.fs, lock=None))
    return st


def step_claim(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    """The takeover's claim: the dead owner's file renamed out of L (by its name: nobody else's can move)."""
    record = proc.read
    assert record is not None
    claimed, lock = _claim(st, record.instance)
    if lock is None:
        return _continue(cfg, st, proc, Call.RENAME, "ENOENT: claimed or released meanwhile")
    return _go(claimed, proc, Pc.CLAIM_RMDIR, Call.RENAME, "claimed", Removal(lock.maker, "takeover"))


def step_claim_rmdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    return _continue(cfg, _rmdir_lock(st), proc, Call.RMDIR, "L removed (or published onto meanwhile)")


def step_enter(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Done]:
    return _go(st, proc, Pc.LEAVE, Call.ENTER, "", inside=True, entered=True)


def leave(cfg: LockBounds, st: LockState, proc: Proc, effect: Effect) -> tuple[LockState, Done]:
    nxt = Pc.RELEASE_CLAIM if Fix.CLAIMED_RELEASE in cfg.fixes else Pc.UNLINK_RELEASE
    return _go(st, proc, nxt, Call.LEAVE, effect.value, inside=False, effect=effect)


def step_unlink_release(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    """``rmSync(lockPath, {recursive, force})`` by path: its files first (whoever's), then the directory."""
    lock = st.fs.lock
    assert proc.effect is not None
    if lock is None:  # force: nothing there is no error
        return _after_release(cfg, st, proc, Call.UNLINK, _answer_of(cfg, proc.effect))
    removed = Removal(lock.maker, "release")
    if lock.owner is None:
        st = replace(st, fs=replace(st.fs, lock=None))
        return _after_release(cfg, st, proc, Call.RMDIR, _answer_of(cfg, proc.effect), removed)
    st = replace(st, fs=replace(st.fs, lock=replace(lock, owner=None)))
    return _go(st, proc, Pc.RMDIR_RELEASE, Call.UNLINK, "owner file", removed)


def step_rmdir_release(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    lock = st.fs.lock
    assert proc.effect is not None
    if lock is None:
        return _after_release(cfg, st, proc, Call.RMDIR, _answer_of(cfg, proc.effect))
    if lock.owner is not None:  # someone created an owner file meanwhile: ENOTEMPTY, rmSync throws
        return _after_release(cfg, st, proc, Call.RMDIR, Answer.RELEASE_FAILED)
    st = replace(st, fs=replace(st.fs, lock=None))
    return _after_release(cfg, st, proc, Call.RMDIR, _answer_of(cfg, proc.effect), Removal(lock.maker, "release"))


def _after_release(cfg: LockBounds, st: LockState, proc: Proc, call: Call, answer: Answer,
                   removed: Optional[Removal] = None) -> tuple[LockState, Union[Done, Ended]]:
    """The release is done: ``fixed`` still has its ticket to remove."""
    if Fix.TICKETS in cfg.fixes:
        return _go(st, replace(proc, answer=answer), Pc.TICKET_RMDIR, call, "released", removed)
    return _end(st, proc, call, answer, removed=removed)


def step_release_claim(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    """The release's claim of its own owner file: it moves nothing but that file; gone, the lock was lost."""
    assert proc.effect is not None
    claimed, lock = _claim(st, _instance(proc))
    if lock is None:
        return _after_release(cfg, st, proc, Call.RENAME, Answer.LOST)
    return _go(claimed, replace(proc, answer=_answer_of(cfg, proc.effect)), Pc.RELEASE_RMDIR, Call.RENAME,
               "released", Removal(lock.maker, "release"))


def step_release_rmdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    answer = proc.answer
    assert answer is not None
    return _after_release(cfg, _rmdir_lock(st), proc, Call.RMDIR, answer)


def step_ticket_rmdir(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Ended]:
    answer = proc.answer
    assert answer is not None
    return _end(_without_ticket(st, _instance(proc)), proc, Call.RMDIR, answer)


def step_giveup_temp(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Union[Done, Ended]]:
    st = replace(st, fs=replace(st.fs, temps=st.fs.temps - {_instance(proc)}))
    if Fix.TICKETS in cfg.fixes:
        return _go(st, proc, Pc.GIVEUP_TICKET, Call.REMOVE, "cleans up")
    return _end(st, proc, Call.REMOVE, Answer.BUSY)


def step_giveup_ticket(cfg: LockBounds, st: LockState, proc: Proc) -> tuple[LockState, Ended]:
    return _end(_without_ticket(st, _instance(proc)), proc, Call.RMDIR, Answer.BUSY)


#: Each program counter's step.
STEPS: dict[Pc, Callable[[LockBounds, LockState, Proc], tuple[LockState, Union[Done, Ended]]]] = {
    Pc.MKDIR: step_mkdir, Pc.CREATE: step_create, Pc.WRITE: step_write, Pc.RMDIR_FAILED: step_rmdir_failed,
    Pc.STAT: step_stat, Pc.LIST: step_list, Pc.READ: step_read, Pc.KILL: step_kill, Pc.PROC: step_proc,
    Pc.STAT_AGAIN: step_stat_again, Pc.RENAME_STALE: step_rename_stale, Pc.UNLINK_STALE: step_unlink_stale,
    Pc.RMDIR_STALE: step_rmdir_stale, Pc.WAIT: step_wait, Pc.ENTER: step_enter,
    Pc.UNLINK_RELEASE: step_unlink_release, Pc.RMDIR_RELEASE: step_rmdir_release,
    Pc.TICKET_READDIR: step_ticket_readdir, Pc.TEMP_MKDIR: step_temp_mkdir, Pc.TEMP_WRITE: step_temp_write,
    Pc.QUEUE_READDIR: step_queue_readdir, Pc.QUEUE_KILL: step_queue_kill, Pc.QUEUE_PROC: step_queue_proc,
    Pc.QUEUE_RMDIR: step_queue_rmdir, Pc.PUBLISH: step_publish, Pc.CLAIM: step_claim,
    Pc.CLAIM_RMDIR: step_claim_rmdir, Pc.RELEASE_CLAIM: step_release_claim, Pc.RELEASE_RMDIR: step_release_rmdir,
    Pc.TICKET_RMDIR: step_ticket_rmdir, Pc.GIVEUP_TEMP: step_giveup_temp, Pc.GIVEUP_TICKET: step_giveup_ticket,
}


#: Steps nobody else can tell from their neighbours (taken with the step before them, in one transition):
#: ``wait`` changes nothing on disk; the others touch only a private temp no other process ever reads. A kill
#: between such a step and its neighbour is a kill after the neighbour: what the private step leaves is garbage
#: nobody reads. The reduction keeps every behaviour others can see, and spares the checker their interleavings.
#: (The grave a claim renames a file to is not modelled at all: only its creator ever removes it.)
SILENT = frozenset({Pc.WAIT, Pc.TEMP_MKDIR, Pc.TEMP_WRITE, Pc.GIVEUP_TEMP})


def _merge(first: Result, then: Result) -> Result:
    """The result of a step and the silent steps taken with it: the last one's, with what any of them removed and
    whether one decided to give up busy."""
    removed = getattr(first, "removed", None) or getattr(then, "removed", None)
    busy = getattr(first, "busy", None) or getattr(then, "busy", None)
    if isinstance(then, Ended):
        return Ended(then.call, then.answer, removed, busy)
    if isinstance(then, Done):
        return Done(getattr(first, "call", then.call), getattr(first, "note", then.note), removed, busy)
    return then


#: With ``Fix.ATOMIC_PUBLISH`` (a lock published by ``rename``, which replaces an empty directory), an empty lock
#: directory and none are alike to every process: the ``rmdir`` after a claim is silent too.
SILENT_ATOMIC = SILENT | {Pc.CLAIM_RMDIR, Pc.RELEASE_RMDIR}


def silent_steps(cfg: LockBounds) -> frozenset[Pc]:
    """The steps taken with the step before them under ``cfg`` (``SILENT``, ``SILENT_ATOMIC``)."""
    return SILENT_ATOMIC if Fix.ATOMIC_PUBLISH in cfg.fixes else SILENT


def _silent_after(cfg: LockBounds, st: LockState, slot: int, result: Result) -> tuple[LockState, Result]:
    """Take the silent steps that follow (``silent_steps``), in the same transition."""
    proc = st.procs[slot]
    silent = silent_steps(cfg)
    while proc.status is Status.RUNNING and proc.pc in silent:
        st, more = STEPS[proc.pc](cfg, st, proc)
        result = _merge(result, more)
        proc = st.procs[slot]
    return st, result


# ---------------------------------------------------------------------------
# The narrow interface: enabled actions and next
# ---------------------------------------------------------------------------


def enabled(cfg: LockBounds, st: LockState, environment: bool = True,
            extra_calls: int = 0) -> Iterator[Action]:
    """The actions enabled in ``st``. Without ``environment``: the processes alone (no kill, no pid reused;
    zombies are not reaped either), each allowed ``extra_calls`` more calls (the liveness check)."""
    for p in st.procs:
        if p.status is not Status.RUNNING:
            if p.status is Status.ZOMBIE and environment:
                yield Reap(p.slot)
            continue
        if p.pc is Pc.IDLE:
            if p.call < cfg.calls + extra_calls:
                yield Start(p.slot)
        elif p.pc is Pc.LEAVE:
            for effect in sorted(cfg.effects, key=lambda e: e.value):
                yield Leave(p.slot, effect)
        elif p.pc is Pc.TICKET_MKDIR:
            for choice in range(ticket_places(st, p)):
                yield Step(p.slot, choice)
        else:
            yield Step(p.slot)
        if environment and st.crashes < cfg.crashes and p.pc is not Pc.IDLE:
            yield Crash(p.slot)
    if environment and st.reuses < cfg.reuses:
        for ns, pid in sorted({(o.ns, o.pid) for o in _reusable(cfg, st)}):
            yield Reuse(ns, pid)


def _reusable(cfg: LockBounds, st: LockState) -> list[Occupant]:
    """The pids of reaped lock users (and the dead process's of ``stale``), free to be taken."""
    out = []
    for p in st.procs:
        if p.status is Status.REAPED and _occupant(st, p.ns, p.pid) is None:
            out.append(Occupant(p.ns, p.pid, 0, False, p.slot))
    if cfg.stale and _occupant(st, 0, GONE_PID) is None:
        out.append(Occupant(0, GONE_PID, 0, False, GONE))
    return out


def next_state(cfg: LockBounds, st: LockState, action: Action) -> tuple[LockState, Result]:
    """The state after ``action``, and its result. Deterministic."""
    if isinstance(action, Start):
        nxt, started = start(cfg, st, _proc(st, action.slot))
        return _silent_after(cfg, nxt, action.slot, started)
    if isinstance(action, Step):
        proc = _proc(st, action.slot)
        res: Union[Done, Ended]
        if proc.pc is Pc.TICKET_MKDIR:
            nxt, res = step_ticket_mkdir(cfg, st, proc, action.choice)
        else:
            nxt, res = STEPS[proc.pc](cfg, st, proc)
        return _silent_after(cfg, nxt, action.slot, res)
    if isinstance(action, Leave):
        nxt, left = leave(cfg, st, _proc(st, action.slot), action.effect)
        return _silent_after(cfg, nxt, action.slot, left)
    if isinstance(action, Crash):
        proc = _proc(st, action.slot)
        occupants = {o for o in st.os.occupants if not (o.slot == proc.slot and o.ns == proc.ns)}
        status = Status.ZOMBIE if cfg.zombies else Status.REAPED
        if cfg.zombies:
            occupants.add(Occupant(proc.ns, proc.pid, proc.start, True, proc.slot))
        dead = replace(proc, status=status, queued=False)
        st = replace(_with(st, dead), os=replace(st.os, occupants=frozenset(occupants)), crashes=st.crashes + 1)
        return st, Crashed()
    if isinstance(action, Reap):
        proc = _proc(st, action.slot)
        kept = frozenset(o for o in st.os.occupants if not (o.slot == proc.slot and o.ns == proc.ns))
        st = replace(_with(st, replace(proc, status=Status.REAPED)), os=replace(st.os, occupants=kept))
        return st, EnvDone("reaped")
    assert isinstance(action, Reuse)
    starts = dict(st.os.starts)
    start_time = starts.get((action.ns, action.pid), 0) + 1
    starts[(action.ns, action.pid)] = start_time
    taken = st.os.occupants | {Occupant(action.ns, action.pid, start_time, False, -1)}
    st = replace(st, os=Os(taken, tuple(sorted(starts.items()))), reuses=st.reuses + 1)
    return st, EnvDone(f"pid {action.pid} taken by another process")


def describe_action(action: Action, st: Optional[LockState] = None) -> str:
    """One line for a trace."""
    if isinstance(action, Step) and st is not None:
        place = f" (place {action.choice} among its seq)" if st.procs[action.slot].pc is Pc.TICKET_MKDIR else ""
        return f"p{action.slot} {st.procs[action.slot].pc.value}{place}"
    if isinstance(action, Start):
        return f"p{action.slot} calls the lock"
    if isinstance(action, Leave):
        return f"p{action.slot} leaves the operation ({action.effect.value})"
    if isinstance(action, Crash):
        return f"kill -9 p{action.slot}"
    if isinstance(action, Reap):
        return f"p{action.slot} reaped"
    if isinstance(action, Reuse):
        return f"pid {action.pid} (namespace {action.ns}) taken by another process"
    return repr(action)


def describe_state(st: LockState) -> str:
    """One line: L, and each process."""
    lock = st.fs.lock
    where = "L free" if lock is None else \
        f"L by p{lock.maker[0]}#{lock.maker[1]} (ino {lock.inode}, owner " + (
            "none" if lock.owner is None else "empty" if lock.owner.record is None else
            f"p{lock.owner.record.slot}") + ")"
    procs = ", ".join(f"p{p.slot}:{p.status.value}:{p.pc.value}" + (" INSIDE" if p.inside else "")
                      for p in st.procs)
    return f"{where}; {procs}"


# ---------------------------------------------------------------------------
# Symmetry: the processes of one namespace are interchangeable
# ---------------------------------------------------------------------------


class _Renaming:
    """A permutation of the processes (``to[old slot] = new slot``), and of their pids with them."""

    def __init__(self, cfg: LockBounds, to: tuple[int, ...]) -> None:
        self.to = to
        self.pids = {_identity(cfg, old): _identity(cfg, new)[0] for old, new in enumerate(to)}

    def slot(self, slot: int) -> int:
        return self.to[slot] if slot >= 0 else slot

    def pid(self, pid: int, ns: int) -> int:
        return self.pids.get((pid, ns), pid)

    def instance(self, instance: Instance) -> Instance:
        return (self.slot(instance[0]), instance[1])

    def record(self, r: Optional[Record]) -> Optional[Record]:
        if r is None:
            return None
        return Record(self.slot(r.slot), self.pid(r.pid, r.ns), r.start, r.ns, self.instance(r.instance))

    def lockdir(self, d: Optional[LockDir]) -> Optional[LockDir]:
        if d is None:
            return None
        owner = None if d.owner is None else File(d.owner.inode, self.record(d.owner.record))
        return LockDir(d.inode, self.instance(d.maker), owner)

    def ticket(self, t: Optional[Ticket]) -> Optional[Ticket]:
        if t is None:
            return None
        return Ticket(t.seq, t.rank, self.slot(t.slot), self.pid(t.pid, t.ns), t.start, t.ns, self.instance(t.instance),
                      t.gone)

    def key(self, st: LockState) -> tuple[object, ...]:
        """``_key`` of ``self.state(st)``, computed without building that state (the representative's choice
        compares candidates by key; only the winner is built)."""
        fs = st.fs
        procs: list[tuple[object, ...]] = [()] * len(st.procs)
        for p in st.procs:
            procs[self.to[p.slot]] = (
                self.pid(p.pid, p.ns), p.start, p.ns, p.status.value, p.call, p.pc.value, p.tries,
                p.inode if p.inode is not None else -1, self.instance(p.listed) if p.listed is not None else (),
                _rec_key(self.record(p.read)), tuple(sorted((self.pid(pid, p.ns), s) for pid, s in p.cache)),
                p.fd if p.fd is not None else -1, self.instance(p.holds) if p.holds is not None else (), p.made,
                p.seq, _ticket_key(self.ticket(p.ahead)), p.inside, p.entered, p.effect.value if p.effect else "",
                p.answer.value if p.answer else "", p.queued, p.overtaken)
        return (tuple(procs), _dir_key(self.lockdir(fs.lock)),
                tuple(sorted((self.slot(m), _dir_key(self.lockdir(d))) for m, d in fs.moved)),
                tuple(sorted(self.instance(i) for i in fs.temps)),
                tuple(sorted(_ticket_key(self.ticket(t)) for t in fs.tickets)), fs.next_inode,
                tuple(sorted((o.ns, self.pid(o.pid, o.ns), o.start, o.zombie, self.slot(o.slot))
                             for o in st.os.occupants)),
                tuple(sorted(((ns, self.pid(pid, ns)), gen) for (ns, pid), gen in st.os.starts)),
                st.crashes, st.reuses)

    def state(self, st: LockState) -> LockState:
        fs = st.fs
        moved = tuple(sorted(((self.slot(m), cast(LockDir, self.lockdir(d))) for m, d in fs.moved),
                             key=lambda x: x[0]))
        new_fs = Fs(self.lockdir(fs.lock), moved, frozenset(self.instance(i) for i in fs.temps),
                    frozenset(cast(Ticket, self.ticket(t)) for t in fs.tickets), fs.next_inode)
        occupants = frozenset(Occupant(o.ns, self.pid(o.pid, o.ns), o.start, o.zombie, self.slot(o.slot))
                              for o in st.os.occupants)
        starts = tuple(sorted(((ns, self.pid(pid, ns)), gen) for (ns, pid), gen in st.os.starts))
        procs: list[Optional[Proc]] = [None] * len(st.procs)
        for p in st.procs:
            new = self.slot(p.slot)
            procs[new] = replace(p, slot=new, pid=self.pid(p.pid, p.ns), read=self.record(p.read),
                                 listed=None if p.listed is None else self.instance(p.listed),
                                 cache=frozenset((self.pid(pid, p.ns), s) for pid, s in p.cache),
                                 holds=None if p.holds is None else self.instance(p.holds),
                                 ahead=self.ticket(p.ahead))
        return replace(st, procs=tuple(cast(Proc, p) for p in procs), fs=new_fs, os=Os(occupants, starts))


def _rec_key(r: Optional[Record]) -> tuple[int, ...]:
    return () if r is None else (r.slot, r.pid, r.start, r.ns, *r.instance)


def _dir_key(d: Optional[LockDir]) -> tuple[object, ...]:
    if d is None:
        return ()
    return (d.inode, *d.maker, () if d.owner is None else (d.owner.inode, _rec_key(d.owner.record)))


def _ticket_key(t: Optional[Ticket]) -> tuple[int, ...]:
    return () if t is None else (t.seq, t.rank, t.slot, t.pid, t.start, t.ns, *t.instance, int(t.gone))


def _proc_key(p: Proc) -> tuple[object, ...]:
    return (p.pid, p.start, p.ns, p.status.value, p.call, p.pc.value, p.tries, p.inode if p.inode is not None else -1,
            p.listed if p.listed is not None else (), _rec_key(p.read), tuple(sorted(p.cache)), p.fd if p.fd is not None else -1,
            p.holds if p.holds is not None else (), p.made, p.seq, _ticket_key(p.ahead),
            p.inside, p.entered, p.effect.value if p.effect else "", p.answer.value if p.answer else "", p.queued,
            p.overtaken)


def _key(st: LockState) -> tuple[object, ...]:
    """A total order on states that depends on no hash (sets are sorted): the representative is the least."""
    fs = st.fs
    return (tuple(_proc_key(p) for p in st.procs), _dir_key(fs.lock),
            tuple(sorted((m, _dir_key(d)) for m, d in fs.moved)),
            tuple(sorted(fs.temps)), tuple(sorted(_ticket_key(t) for t in fs.tickets)), fs.next_inode,
            tuple(sorted((o.ns, o.pid, o.start, o.zombie, o.slot) for o in st.os.occupants)), st.os.starts,
            st.crashes, st.reuses)


def symmetric_slots(cfg: LockBounds) -> tuple[int, ...]:
    """The interchangeable processes: those of namespace 0 (a process of another namespace is not like them)."""
    return tuple(slot for slot in range(cfg.processes) if _identity(cfg, slot)[1] == 0)


def renamings(cfg: LockBounds) -> list[_Renaming]:
    """Every permutation of the interchangeable processes (the others stay)."""
    movable = symmetric_slots(cfg)
    out = []
    for perm in itertools.permutations(movable):
        to = list(range(cfg.processes))
        for old, new in zip(movable, perm):
            to[old] = new
        out.append(_Renaming(cfg, tuple(to)))
    return out


def _signature(p: Proc) -> tuple[object, ...]:
    """What of a process no renaming changes: its place in the program and its counters (no slot, no pid)."""
    return (p.status.value, p.call, p.pc.value, p.tries, p.inside, p.entered, p.effect.value if p.effect else "",
            p.answer.value if p.answer else "", p.queued, p.overtaken, p.made, p.seq, p.listed is not None,
            p.read is not None, p.holds is not None, p.ahead is not None,
            p.inode if p.inode is not None else -1, len(p.cache), p.fd if p.fd is not None else -1)


def _untouched(p: Proc) -> bool:
    """A process that has not called the lock yet: nothing in the state names it but its own row and its pid's
    occupant (without a second PID namespace, nobody probes its pid), so processes like it are interchangeable
    in any order: renaming them among themselves gives the same state."""
    return p.call == 0 and p.pc is Pc.IDLE and p.status is Status.RUNNING


def canonical_function(cfg: LockBounds) -> Callable[[LockState], LockState]:
    """``st``'s representative under the permutations of interchangeable processes (sort-and-relabel, as
    ``model.symmetry``): the processes of namespace 0 are sorted by ``_signature`` and renumbered in that order;
    processes whose signatures tie are arranged every way and the renamed state with the least ``_key`` kept.
    Sound because nothing in the steps, the world or the properties tells two processes of one namespace apart
    by their number (the order of tickets of one seq is a chance recorded in the state: ``rank``)."""
    movable = symmetric_slots(cfg)
    if len(movable) < 2:
        return lambda st: st
    identity = tuple(range(cfg.processes))
    one_way = not cfg.namespaces

    def canonical(st: LockState) -> LockState:
        sigs = {slot: _signature(st.procs[slot]) for slot in movable}
        ordered = sorted(movable, key=lambda slot: sigs[slot])
        groups: list[list[int]] = []
        for slot in ordered:
            if groups and sigs[groups[-1][0]] == sigs[slot]:
                groups[-1].append(slot)
            else:
                groups.append([slot])
        candidates = []
        # processes that never called are named nowhere (without a second namespace): one arrangement of them
        for arrangement in itertools.product(*((tuple(g),) if one_way and _untouched(st.procs[g[0]])
                                               else itertools.permutations(g) for g in groups)):
            order = [slot for group in arrangement for slot in group]  # old slots, in their new order
            to = list(identity)
            for new, old in zip(movable, order):
                to[old] = new
            candidates.append(tuple(to))
        if len(candidates) == 1:
            return st if candidates[0] == identity else _Renaming(cfg, candidates[0]).state(st)
        best: Optional[_Renaming] = None
        best_key: Optional[tuple[object, ...]] = None
        for to_ in candidates:
            renaming = _Renaming(cfg, to_)
            k = renaming.key(st)
            if best_key is None or k < best_key:
                best, best_key = renaming, k
        assert best is not None
        return st if best.to == identity else best.state(st)

    return canonical
