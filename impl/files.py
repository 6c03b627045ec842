"""The replica's files: what a path holds, owner-only creation, the holder lock, and the errors.

Rules every command follows (docs/implementation.md):

* **Nothing destroys a user's data.** A path is inspected (``probe``) before it
  is opened: a directory, a missing directory, a file that is not SQLite, or a
  SQLite file that is not an envreplica replica is refused with a
  ``ReplicaPathError`` that says what the path holds and what to do. A new
  replica is built whole in a hidden ``.NAME.<id>.creating`` file created with
  ``O_CREAT | O_EXCL`` and hard-linked into place (``SqliteReplica._create``),
  so envreplica never truncates or replaces a file it did not create. A kill
  in the middle can leave that hidden file behind; it is never used, and may
  be removed.
* **Owner-only files.** Everything envreplica creates (the database, and so
  its ``-wal`` and ``-shm`` files, which SQLite creates with the database's
  mode; backups; evidence; the lock file; an anchor) is created mode 0600.
* **The holder lock.** ``PATH.lock`` is ``flock``-ed by every process that
  opens the replica: shared by ``SqliteReplica`` (several processes may share
  a replica), exclusive by ``envreplica adapter``, whose ``reset`` empties the
  replica and so must be its only user. A lock that cannot be had is a
  ``ReplicaInUse`` naming the holder. The lock is a separate file because
  closing any descriptor of the database file would drop SQLite's own POSIX
  locks on it.

Errors: ``ReplicaPathError`` (the path cannot be used: invalid input, exit 2
at the command line) and its ``ReplicaInUse``; ``ReplicaUnavailable`` (the
file is there but cannot be used now: ``ReplicaBusy`` for a lock held past the
busy timeout, ``ReplicaIOError`` for the disk). Neither is ``CorruptReplica``:
a corrupt replica is one whose content breaks its rules.

Leaves out on purpose: Windows (``fcntl``), network file systems' lock
semantics, and checking the owner uid of an existing file.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

__all__ = [
    "CREATED_BY_ADAPTER",
    "PathKind",
    "Probe",
    "ReplicaBusy",
    "ReplicaIOError",
    "ReplicaInUse",
    "ReplicaKeyMismatch",
    "ReplicaLock",
    "ReplicaPathError",
    "ReplicaUnavailable",
    "create_private",
    "current_meta",
    "fsync_path",
    "probe",
    "refuse_unusable",
    "remove_replica",
    "sqlite_error",
]

#: ``store_meta.created_by`` of a replica that ``envreplica adapter`` created (it may empty it).
CREATED_BY_ADAPTER = "envreplica adapter"

_SQLITE_HEADER = b"SQLite format 3\x00"


class ReplicaPathError(Exception):
    """The path cannot be used as a replica (the message says what it holds and what to do)."""


class ReplicaInUse(ReplicaPathError):
    """Another process holds the replica in a way that excludes this use."""


class ReplicaKeyMismatch(ReplicaPathError):
    """The replica was sealed under another master key than the one configured."""


class ReplicaUnavailable(Exception):
    """The replica is there but cannot be read or written now (not a refusal, not corruption)."""


class ReplicaBusy(ReplicaUnavailable):
    """Another connection held SQLite's lock past the busy timeout."""


class ReplicaIOError(ReplicaUnavailable):
    """The disk failed a read or a write of the replica's files."""


class PathKind(str, enum.Enum):
    """What a path holds."""

    MISSING = "missing"  # nothing there; its directory exists
    NO_DIRECTORY = "no_directory"  # its directory does not exist
    DIRECTORY = "directory"
    SPECIAL = "special"  # a device, socket, fifo, ...
    EMPTY = "empty"  # a regular file of 0 bytes
    NOT_SQLITE = "not_sqlite"  # a regular file without SQLite's header
    SQLITE = "sqlite"  # a SQLite database that is not an envreplica replica
    REPLICA = "replica"  # a SQLite database with envreplica's store_meta


@dataclass(frozen=True)
class Probe:
    """What ``probe`` found at a path."""

    path: Path  # the path asked about
    kind: PathKind  # what it holds
    meta: dict[str, str] = field(default_factory=dict)  # store_meta of a replica


def probe(path: Union[str, Path]) -> Probe:
    """What ``path`` holds, found without writing anything (SQLite opened read-only)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        parent = path.parent if str(path.parent) else Path(".")
        return Probe(path, PathKind.MISSING if parent.is_dir() else PathKind.NO_DIRECTORY)
    except NotADirectoryError:
        return Probe(path, PathKind.NO_DIRECTORY)
    except OSError as error:
        raise ReplicaIOError(f"{path}: cannot be inspected ({error.strerror or type(error).__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        return Probe(path, PathKind.DIRECTORY)
    if not stat.S_ISREG(st.st_mode):
        return Probe(path, PathKind.SPECIAL)
    if st.st_size == 0:
        return Probe(path, PathKind.EMPTY)
    try:
        with open(path, "rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError as error:
        raise ReplicaIOError(f"{path}: cannot be read ({error.strerror or type(error).__name__})") from None
    if header != _SQLITE_HEADER:
        return Probe(path, PathKind.NOT_SQLITE)
    try:
        # immutable: no lock, no -wal/-shm created beside someone else's file. A replica is created
        # whole in rollback-journal mode, so its store_meta is in the main file; if the file is
        # being written (a torn read), read it again the ordinary (read-only) way. A process writing
        # the file keeps its write-ahead log (or, in rollback mode, its journal) beside it: with
        # neither, the main file is all there is and a failure means a damaged file, which is refused
        # as it is (a read-only open would make the -wal and -shm of a file about to be refused).
        return _probe_sqlite(path, "?mode=ro&immutable=1")
    except sqlite3.Error as error:
        if not any(os.path.lexists(f"{path}{suffix}") for suffix in ("-wal", "-journal")):
            raise sqlite_error(error, path) from None
        try:
            return _probe_sqlite(path, "?mode=ro")
        except sqlite3.Error as error:
            raise sqlite_error(error, path) from None


def current_meta(path: Union[str, Path]) -> dict[str, str]:
    """A replica's ``store_meta`` as SQLite reads it now: through its write-ahead log when one is beside
    the file (``probe`` reads the main file alone), else from the main file, creating nothing."""
    path = Path(path)
    options = "?mode=ro" if Path(f"{path}-wal").exists() else "?mode=ro&immutable=1"
    try:
        return _probe_sqlite(path, options).meta
    except sqlite3.Error as error:
        raise sqlite_error(error, path) from None


def remove_replica(path: Union[str, Path]) -> None:
    """Remove a replica's file with its write-ahead log, index and journal (those first: a removal cut
    short never leaves a log beside another database at the path). For a caller holding its lock."""
    for suffix in ("-wal", "-shm", "-journal", ""):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _probe_sqlite(path: Path, options: str) -> Probe:
    conn = sqlite3.connect(path.resolve().as_uri() + options, uri=True, timeout=5.0)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "store_meta" not in tables:
            return Probe(path, PathKind.SQLITE)
        meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM store_meta")}
        return Probe(path, PathKind.REPLICA, meta)
    finally:
        conn.close()


def refuse_unusable(found: Probe, *, what: str, missing_ok: bool = True) -> None:
    """Raise ``ReplicaPathError`` for a path that holds something no replica command may open.

    ``what`` names the command's use ("the adapter's replica", ...). ``missing_ok``: nothing at the path
    (its directory there) is fine, a replica will be created; else it is refused too.
    """
    path = found.path
    if found.kind is PathKind.MISSING and not missing_ok:
        raise ReplicaPathError(f"{path}: no replica there (the file does not exist)")
    if found.kind is PathKind.NO_DIRECTORY:
        raise ReplicaPathError(f"{path}: its directory {path.parent} does not exist; create it first "
                               f"(mkdir -p {path.parent}) or choose another path for {what}")
    if found.kind is PathKind.DIRECTORY:
        raise ReplicaPathError(f"{path} is a directory; name a file inside it for {what} "
                               f"(for example {path / 'replica.db'})")
    if found.kind is PathKind.SPECIAL:
        raise ReplicaPathError(f"{path} is not a regular file; name a regular file for {what}")
    if found.kind in (PathKind.EMPTY, PathKind.NOT_SQLITE):
        raise ReplicaPathError(f"{path} exists and is not an envreplica replica ("
                               f"{'an empty file' if found.kind is PathKind.EMPTY else 'not a SQLite database'}); "
                               f"envreplica never overwrites a file it did not create. Choose another path "
                               f"for {what}, or move that file away")
    if found.kind is PathKind.SQLITE:
        raise ReplicaPathError(f"{path} is a SQLite database but not an envreplica replica (no store_meta); "
                               f"envreplica never writes a database it did not create. Choose another path "
                               f"for {what}")


def identity(path: Union[str, Path]) -> Optional[tuple[int, int]]:
    """(device, inode) of the file at ``path`` (a symlink followed), or None when nothing is there: the same for
    every path to one file (another spelling, a symlink, a hard link)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def unwritable(path: Union[str, Path]) -> Optional[str]:
    """Why the database file at ``path`` cannot be written now (``None``: it can), found without writing: the
    file cannot be opened for writing (its mode, an immutable flag, a read-only mount), or its directory, where
    SQLite creates its journal, cannot be written."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return f"the file cannot be opened for writing ({error.strerror or type(error).__name__})"
    os.close(fd)
    parent = path.parent if str(path.parent) else Path(".")
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"its directory {parent} cannot be written (SQLite creates the store's journal there)"
    return None


def create_private(path: Union[str, Path]) -> None:
    """Create ``path`` empty with mode 0600; fail if anything is there (never truncates)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        raise ReplicaPathError(f"{path}: something appeared at this path while envreplica was creating its "
                               f"replica there; nothing was overwritten. Run again, or choose another path") from None
    except OSError as error:
        raise _os_error(error, path, "created") from None
    os.close(fd)


def fsync_path(path: Union[str, Path]) -> None:
    """fsync a file or a directory (a directory: so that a new name in it is durable)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _os_error(error: OSError, path: Union[str, Path], done: str) -> Exception:
    why = error.strerror or type(error).__name__
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ReplicaPathError(f"{path}: cannot be {done} ({why}); check the permissions of the file and its "
                                f"directory")
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return ReplicaPathError(f"{path}: cannot be {done} ({why}); does its directory exist?")
    return ReplicaIOError(f"{path}: cannot be {done} ({why})")


def sqlite_error(error: BaseException, path: Union[str, Path]) -> Exception:
    """The envreplica error for a SQLite error on ``path`` (lock, I/O, not a database, corrupt)."""
    from envreplica.spec.domain import CorruptReplica

    text = str(getattr(error, "orig", None) or error)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return ReplicaBusy(f"{path}: another process holds the replica's lock and did not release it in time "
                           f"({text}); try again, or find the process (a migration holds it from start to end)")
    if "not a database" in low or "file is encrypted" in low:
        return ReplicaPathError(f"{path} is not an envreplica replica (not a SQLite database); envreplica never "
                                f"overwrites a file it did not create. Choose another path")
    if "malformed" in low or "corrupt" in low:
        return CorruptReplica(f"{path}: the SQLite file is damaged ({text}); restore it from a backup or move it "
                              f"aside so the host re-creates the replica and the cloud re-sends a snapshot")
    if "unable to open" in low or "readonly" in low or "read-only" in low or "permission" in low:
        return ReplicaPathError(f"{path}: cannot be opened for writing ({text}); check the permissions of the file "
                                f"and its directory")
    return ReplicaIOError(f"{path}: SQLite failed ({text})")


#: How long an exclusive holder (the adapter) waits for a previous holder that is exiting: a harness that
#: closed one adapter and starts the next on the same file may beat the old process's last breath.
EXCLUSIVE_GRACE_SECONDS = 3.0


class ReplicaLock:
    """``flock`` on ``PATH.lock``: shared for replicas, exclusive for the adapter (never blocks for long).

    A shared request fails at once if the adapter holds it; an exclusive one retries for
    ``EXCLUSIVE_GRACE_SECONDS`` (a predecessor still exiting), then fails naming the holder.
    """

    def __init__(self, db_path: Union[str, Path], *, exclusive: bool) -> None:
        self.path = Path(f"{db_path}.lock")
        self.exclusive = exclusive
        self._fd: Optional[int] = None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as error:
            raise _os_error(error, self.path, "opened as the replica's lock file") from None
        try:
            _flock(fd, exclusive)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            if exclusive:
                raise ReplicaInUse(f"{db_path} is in use by {who}; `envreplica adapter` needs the replica to itself "
                                   f"(its reset empties it). Stop that process, or choose another --db path") from None
            raise ReplicaInUse(f"{db_path} is held by `envreplica adapter` ({who}), which empties it on reset; "
                               f"stop the adapter first, or use another replica") from None
        except OSError as error:
            os.close(fd)
            raise _os_error(error, self.path, "locked") from None
        if exclusive:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            if self.exclusive:
                try:
                    os.ftruncate(fd, 0)
                except OSError:
                    pass
            os.close(fd)  # closing the descriptor releases the flock

    def __del__(self) -> None:  # pragma: no cover - safety net
        self.release()


def _flock(fd: int, exclusive: bool) -> None:
    """``flock`` without blocking; an exclusive one tries again for ``EXCLUSIVE_GRACE_SECONDS`` first."""
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    give_up = time.monotonic() + (EXCLUSIVE_GRACE_SECONDS if exclusive else 0.0)
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= give_up:
                raise
            time.sleep(0.05)


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
