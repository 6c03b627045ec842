"""Who holds a store open for writing: the physical owner processes a migration must observe before it writes.

Models: the seed's drain observation (``observeDrainedMigrationStores``),
which refuses a paired migration while a process that owns a store is alive
(``physical_owner_alive``): here, an owner is any process other than this one
that holds one of the store's files (the database, its ``-wal`` or its
``-journal``) open for writing. That is what an old ``SqliteReplica`` of the
previous release, the ``sqlite3`` shell or any writer does while it runs, and
it is observed without its cooperation, from ``/proc``: each process's open
file descriptors (``/proc/PID/fd``, compared by device and inode, so another
spelling, a symlink or a hard link of the path is the same file) and their
open flags (``/proc/PID/fdinfo``: a read-only descriptor cannot write, nor can
an ``O_PATH`` one, and neither makes an owner). A process that has exited owns
nothing: the kernel closed its files (no stale registration to judge).

Readers are told from writers as SQLite opens the files: every connection to
a WAL store, a read-only one too, opens the ``-wal`` (and the ``-shm``) for
reading and writing, while a read-only connection opens the database itself
read-only and a read-write one opens it read-write. So the ``-shm`` says
nothing of a writer, and a writable ``-wal`` makes an owner only of a process
that does not hold the database read-only: a process is an owner when it
holds the database or its ``-journal`` open for writing, or its ``-wal`` open
for writing without a read-only descriptor of the database (a SQLite reader
holds exactly that; a process writing the ``-wal`` alone is an owner). The
``-wal`` and ``-journal`` looked for are the ones beside the path as named
and beside the file it leads to (SQLite resolves symlinks, so a store named
by a symlink keeps them beside its target).

What it leaves out on purpose:

- this process: its own connections are the migration's;
- processes this user cannot inspect (another user's, without privilege):
  ``observable()`` says whether ``/proc`` is there at all, and an owner we
  cannot see is not reported (run the migration as the stores' owner);
- a process that opens the store after the observation: the migration
  observes again before each step that writes, and the fences refuse what
  such a process writes while they are up;
- file locks held without an open descriptor (none exist on Linux);
- a shared writable memory mapping of a store's file kept after its
  descriptor was closed (SQLite keeps its descriptors), and threads with a
  descriptor table of their own (``/proc/PID/task``);
- a process that writes the ``-wal`` while it holds the database read-only
  (what a SQLite reader looks like; such a process does not honour SQLite's
  locking, let alone the fence).

``tests/test_drain_generated.py`` holds it to this rule on generated holders:
real child processes, any of the store's files, any mode, any path to them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from envreplica.impl.files import identity

__all__ = ["Owner", "observable", "owners", "describe"]

_PROC = Path("/proc")
#: The files of a store a writer holds open: the database and its journals (the ``-shm`` of a WAL store is
#: opened for writing by readers too, so it says nothing of a writer).
SUFFIXES = ("", "-wal", "-journal")


@dataclass(frozen=True)
class Owner:
    """A live process holding a store's file open for writing."""

    pid: int  # its process id
    path: str  # the store (as the caller named it) whose file it holds
    command: str  # its command line, for the message (may be empty when it cannot be read)


def observable() -> bool:
    """Whether this system shows processes' open files (``/proc/self/fd``)."""
    return (_PROC / "self" / "fd").is_dir()


def _access(pid: str, fd: str) -> Optional[str]:
    """How descriptor ``fd`` of ``pid`` was opened: ``"w"`` for writing (``O_WRONLY`` or ``O_RDWR``), ``"r"``
    read-only, ``None`` when it cannot read or write (``O_PATH``) or it closed meanwhile."""
    try:
        text = (_PROC / pid / "fdinfo" / fd).read_text()
    except OSError:
        return None  # it closed meanwhile
    for line in text.splitlines():
        if line.startswith("flags:"):
            flags = int(line.split()[1], 8)
            if flags & getattr(os, "O_PATH", 0):
                return None
            return "w" if flags & (os.O_WRONLY | os.O_RDWR) else "r"
    return None


def _writes(held: set[tuple[str, str]]) -> bool:
    """Whether a process holding ``held`` (``(suffix, access)`` of a store's files) is an owner (the module's
    rule): the database or ``-journal`` for writing, or the ``-wal`` for writing without the database read-only."""
    if ("", "w") in held or ("-journal", "w") in held:
        return True
    return ("-wal", "w") in held and ("", "r") not in held


def _command(pid: str) -> str:
    try:
        raw = (_PROC / pid / "cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def owners(stores: Sequence[Union[str, Path]], *, exclude: Iterable[int] = ()) -> list[Owner]:
    """The live processes (not this one, nor ``exclude``) holding any of ``stores`` open for writing.

    Each store's database file, ``-wal`` and ``-journal`` (beside the path as
    named and beside the file it leads to) are looked for by device and inode
    among every process's open descriptors, and judged by the module's rule.
    Empty when ``/proc`` is not there (``observable()`` tells).
    """
    wanted: dict[tuple[int, int], tuple[str, str]] = {}  # (device, inode) -> (the store as named, suffix)
    for named in stores:
        for base in dict.fromkeys((str(named), os.path.realpath(named))):
            for suffix in SUFFIXES:
                ident = identity(f"{base}{suffix}")
                if ident is not None:
                    wanted.setdefault(ident, (str(named), suffix))
    if not wanted or not observable():
        return []
    skip = {os.getpid(), *exclude}
    found: dict[tuple[int, str], Owner] = {}
    try:
        pids = [p for p in os.listdir(_PROC) if p.isdigit() and int(p) not in skip]
    except OSError:
        return []
    for pid in pids:
        fd_dir = _PROC / pid / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to see
        held: dict[str, set[tuple[str, str]]] = {}  # the store as named -> (suffix, access) of what it holds
        for fd in fds:
            try:
                st = os.stat(fd_dir / fd)
            except OSError:
                continue
            hit = wanted.get((st.st_dev, st.st_ino))
            access = _access(pid, fd) if hit is not None else None
            if hit is not None and access is not None:
                held.setdefault(hit[0], set()).add((hit[1], access))
        for store, files in held.items():
            if _writes(files):
                found[(int(pid), store)] = Owner(int(pid), store, _command(pid))
    return sorted(found.values(), key=lambda o: (o.path, o.pid))


def describe(found: Sequence[Owner], limit: int = 3) -> str:
    """``"run.db is open for writing in process 1234 (python app.py)"``, the first ``limit`` owners."""
    parts = []
    for owner in found[:limit]:
        command = " ".join(owner.command.split())  # one line, whatever its arguments hold
        command = command if len(command) <= 80 else command[:77] + "..."
        parts.append(f"{owner.path} is open for writing in process {owner.pid}" + (f" ({command})" if command else ""))
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return "; ".join(parts) + more
