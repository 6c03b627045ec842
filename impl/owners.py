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
open flags (``/proc/PID/fdinfo``: a read-only descriptor cannot write and is
not an owner). A process that has exited owns nothing: the kernel closed its
files (no stale registration to judge).

What it leaves out on purpose:

- this process: its own connections are the migration's;
- processes this user cannot inspect (another user's, without privilege):
  ``observable()`` says whether ``/proc`` is there at all, and an owner we
  cannot see is not reported (run the migration as the stores' owner);
- a process that opens the store after the observation: the migration
  observes again before each step that writes, and the fences refuse what
  such a process writes while they are up;
- file locks held without an open descriptor (none exist on Linux).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence, Union

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


def _writable_flags(pid: str, fd: str) -> bool:
    """Whether descriptor ``fd`` of ``pid`` was opened for writing (``O_WRONLY`` or ``O_RDWR``)."""
    try:
        text = (_PROC / pid / "fdinfo" / fd).read_text()
    except OSError:
        return False  # it closed meanwhile
    for line in text.splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & (os.O_WRONLY | os.O_RDWR) != 0
    return False


def _command(pid: str) -> str:
    try:
        raw = (_PROC / pid / "cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def owners(stores: Sequence[Union[str, Path]], *, exclude: Iterable[int] = ()) -> list[Owner]:
    """The live processes (not this one, nor ``exclude``) holding any of ``stores`` open for writing.

    Each store's database file, ``-wal`` and ``-journal`` are looked for by
    device and inode among every process's open descriptors. Empty when
    ``/proc`` is not there (``observable()`` tells).
    """
    wanted: dict[tuple[int, int], str] = {}
    for named in stores:
        for suffix in SUFFIXES:
            ident = identity(f"{named}{suffix}")
            if ident is not None:
                wanted.setdefault(ident, str(named))
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
        for fd in fds:
            try:
                st = os.stat(fd_dir / fd)
            except OSError:
                continue
            store = wanted.get((st.st_dev, st.st_ino))
            if store is None or (int(pid), store) in found or not _writable_flags(pid, fd):
                continue
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
