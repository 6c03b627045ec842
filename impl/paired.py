"""The paired writer migration on SQLite stores, and its explicitly selected recovery.

Models: the protocol ``model.migration`` checks (docs/migration.md), variant
``fixed`` (every ``Fix``), with the readings the model names (a backup that
is there is kept when it holds the store's source; a store this request
applied is skipped; a store counts as applied when it records this request's
receipt at the target version; a second invocation is refused while one
holds the installation lock), on two or more replica stores that must move
from one writer contract version to the next together or be restored
together: ``migrate`` (``envreplica migrate --db A --db B``) and ``recover``
(``envreplica recover --request FILE``).

Each step is the model's (``model.migration.Pc``; ``MIGRATE_STEPS`` and
``RECOVER_STEPS`` name them as the model does), and each calls ``hook(step)``
once it is done (durable, for a step that writes): the crash harness
(``tests/test_paired_crash.py``) abandons a run there, and the migration
lockstep (``conformance.migration``) pauses it there, lets the world move, and
lets it go on or kills it. A hook from the environment (``hook_from_env``):
``ENVREPLICA_PAIRED_KILL_AFTER=STEP`` kills the process after STEP;
``ENVREPLICA_PAIRED_STEP_SOCKET=PATH`` reports each step on that Unix socket
and waits to be told to go on (``STEP_PROTOCOL``).

The files, next to the request (``REQUEST``, default
``<first store>.paired-v<target>.request.json``), each published once and
never overwritten (the same bytes again are accepted, other bytes refused as
a conflict), owner-only (0600), each carrying its digest:

- ``REQUEST``: the stores (path, version, data digest, backup path) and a
  random permit id;
- ``REQUEST.result.json``: the migration's result, with the backups' digests;
- ``REQUEST.recovery.json``: the selected recovery: per store, restore from
  its backup or leave it unchanged;
- ``REQUEST.recovery.json.result.json``: the recovery's result;
- ``REQUEST.lock``: the installation lock (``flock``: a crashed holder's lock
  is free; a second invocation is refused while it is held).

The fences are the writer contract's (``writer.begin_admission``): while a
store is under maintenance or recovery, no writer of any version writes it,
``check_writer`` says which request holds it and what to run, and the token
itself says so to any release that prints ``store_meta``.

The implementation's contract, beyond the model's steps (each refusal one
line, its code first; ``exit_status`` gives the command's exit status):
before anything is written, it refuses a store named twice (another
spelling, a symlink, a hard link: compared by device and inode), a missing
master key or one the stores were not sealed with (``writer.key_problem``), a
store that cannot be written, a store held open for writing by another live
process (``impl.owners``; the seed's ``physical_owner_alive``), a request
edited since published, a file of the wrong kind at any path it opens (a FIFO,
a socket, a device, a directory: refused at once, never read), a backup path
that is not a file of its own (a symlink, a store or another store's backup),
a file at a new request's backup path that is not its store's source.
Mid-protocol, a store another process holds in a write transaction (after the
busy timeout) or that became read-only, a backup path that became unusable, a
file system fault (``storage_error``: a full disk, an I/O error) stops the
step before it writes (or rolls it back); what is done stays, and the message
says what stands and what a rerun or ``recover`` will do
(``_says_what_stands``). SIGINT and SIGTERM stop it between two atomic writes
with one line saying the same (``run_command``, ``impl.interrupts``). A refusal
before anything is written leaves the stores' directory as it was: a store is
read without leaving a ``-wal`` or ``-shm`` beside it (``_open_reading``).

Leaves out on purpose: child input files (derived from the request, they add
no fact), the schema bootstrap, and owners this user cannot see in ``/proc``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import socket
import sqlite3
import stat
import sys
import threading
import uuid
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar, Union, cast

from envreplica.impl import files, interrupts, owners, schema
from envreplica.impl import writer as W

_REQUEST_SCHEMA = "envreplica/paired-migration@1"
_RESULT_SCHEMA = "envreplica/paired-migration-result@1"
_RECOVERY_SCHEMA = "envreplica/paired-recovery@1"
_RECOVERY_RESULT_SCHEMA = "envreplica/paired-recovery-result@1"
#: ``store_meta`` key of a store's migration receipt: the request that applied it.
RECEIPT = "migration_request"

#: The steps of ``migrate`` and ``recover``, named as the model's program counters (``model.migration.Pc``),
#: in the order a run takes them. The model's ``retain run`` and ``retain resource`` (the child inputs) have no
#: counterpart here.
MIGRATE_STEPS = ("prepare", "retain parent", "lock", "reconcile", "maintenance run", "maintenance resource",
                 "drain", "backup run", "backup resource", "apply run", "apply resource", "verify",
                 "read evidence", "publish result", "complete run", "complete resource")
RECOVER_STEPS = ("recover", "lock prepare", "plan", "lock apply", "revalidate", "publish recovery", "fence run",
                 "fence resource", "restore run", "restore resource", "publish recovery result", "reopen run",
                 "reopen resource")

Hook = Callable[[str], None]
#: The migration steps by source version (``writer.MIGRATIONS``).
Steps = Mapping[int, Callable[[sqlite3.Connection, W.MigrationContext], None]]
#: A published JSON document (request, result, recovery plan): its fields by name.
Doc = dict[str, Any]
#: Parsed JSON, before it is checked: any JSON value.
Json = Any


class PairedRefused(W.MigrationRefused):
    """A paired migration or recovery stopped at a check; what it published and fenced stays, as the model's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


#: The command's exit status for each refusal: 2 when it could not run as asked (the input, the environment, a
#: publication edited, a second invocation, a request that is done), 1 when it stopped on what the stores hold
#: mid-protocol (a finding the operator must judge). The contract ``spec.migration.EXIT_STATUS`` states for the
#: model's refusals (this module states its own, so that the implementation imports nothing of the model's
#: side; tests/test_paired_errors.py holds the two equal, and the migration lockstep compares every exit).
EXIT_STATUS = {
    **dict.fromkeys((
        "physical_owner_alive", "content_only_route_required", "paired_migration_request_conflict",
        "paired_migration_result_conflict", "no_migration_request", "restore_original_recovery",
        "migration_completed", "paired_recovery_request_conflict", "backup_evidence_changed", "same_store_twice",
        "master_key_missing", "master_key_wrong", "store_read_only", "store_busy", "installation_lock_held",
        "paired_migration_request_changed", "migration_evidence_custody_changed", "invalid_recovery_intent",
        "backup_conflict", "recovery_backup_changed", "request_not_at_home",
        # this implementation's own (the model does not name them)
        "store_versions_differ", "store_fenced", "invalid_publication", "owners_unobservable",
        "backup_path_unusable", "storage_error", "store_unusable"), 2),
    **dict.fromkeys((
        "recovery_selected", "unknown_child_outcome", "completed_migration_changed", "verification_incomplete",
        "backup_exists", "store_under_recovery", "changed_store_has_no_backup", "store_not_original",
        "recovery_readback_failed"), 1),
}


def exit_status(code: str) -> int:
    """The command's exit status for a refusal ``code`` (``EXIT_STATUS``; 1 for a code it does not list)."""
    return EXIT_STATUS.get(code, 1)


class Status(str, Enum):
    """A store's outcome against a request (the reference code's ``reconcile``)."""

    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StoreFacts:
    """What a store holds now, read without writing."""

    version: int  # schema_version
    admission: Optional[str]  # None (open), "maintenance" or "recovery"
    holder: Optional[str]  # the request holding the fence
    data_sha256: str  # the content, as if open (the fence's own store_meta keys normalized)
    receipt: Optional[str]  # the request that applied it
    fence_request: Optional[str] = None  # the request file the fence names (None: open, or a fence without one)


# ---------------------------------------------------------------------------
# The step hooks: in this process, or from the environment


class StepperKilled(BaseException):
    """Raised by a stepping hook in a thread told to die at a step boundary (a process is killed instead)."""


#: The step protocol on ``ENVREPLICA_PAIRED_STEP_SOCKET`` (a Unix stream socket the harness listens on), one
#: line each way: this process sends ``hello PID`` when it connects, ``ready`` when its run begins (nothing done
#: yet) and ``step NAME`` after each step, and waits after ``ready`` and each ``step`` for ``go`` (go on) or
#: ``kill`` (die here: a process kills itself with SIGKILL, a thread raises ``StepperKilled``); a process the
#: harness started from its zygote sends ``exit CODE`` last. End of file from the harness is a kill.
STEP_PROTOCOL = ("hello", "ready", "step", "exit", "go", "kill")


class _Stepper:
    """This process's (or thread's) connection to the stepping harness."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.reader: IO[str] = self.sock.makefile("r", encoding="utf-8", newline="\n")
        self.send(f"hello {os.getpid()}")

    def send(self, line: str) -> None:
        self.sock.sendall((line + "\n").encode())

    def wait(self) -> None:
        """Block until told: return on ``go``; die on ``kill`` or end of file."""
        answer = self.reader.readline().strip()
        if answer == "go":
            return
        if threading.current_thread() is not threading.main_thread():
            raise StepperKilled(answer or "end of file")
        os.kill(os.getpid(), 9)

    def hook(self, step: str) -> None:
        self.send(f"step {step}")
        self.wait()


_STEPPERS: dict[int, _Stepper] = {}  # the connection of each thread that made one (a process has one)


def stepper_connect(path: str) -> _Stepper:
    """Connect this thread to the stepping harness at ``path`` (once; later calls return the same connection)."""
    key = threading.get_ident()
    if key not in _STEPPERS:
        _STEPPERS[key] = _Stepper(path)
    return _STEPPERS[key]


def stepper_exit(code: int) -> None:
    """Report this process's exit status to its stepping harness, if connected (a zygote's child does)."""
    stepper = _STEPPERS.get(threading.get_ident())
    if stepper is not None:
        with contextlib.suppress(OSError):
            stepper.send(f"exit {code}")


def _no_hook(step: str) -> None:
    pass


def hook_from_env() -> Hook:
    """The hook the environment asks for: ``ENVREPLICA_PAIRED_STEP_SOCKET`` (step by step, as the harness says),
    ``ENVREPLICA_PAIRED_KILL_AFTER=STEP`` (SIGKILL once STEP is done), or none."""
    path = os.environ.get("ENVREPLICA_PAIRED_STEP_SOCKET")
    if path:
        stepper = stepper_connect(path)
        stepper.send("ready")
        stepper.wait()
        return stepper.hook
    target = os.environ.get("ENVREPLICA_PAIRED_KILL_AFTER")
    if not target:
        return _no_hook

    def hook(step: str) -> None:
        if step == target:
            os.kill(os.getpid(), 9)

    return hook


#: The former name of ``hook_from_env``.
kill_hook_from_env = hook_from_env


# ---------------------------------------------------------------------------
# Facts, digests, files


def data_sha256(conn: sqlite3.Connection) -> str:
    """``writer.content_sha256`` with the fence undone: a fenced store hashes as the same store open."""
    return W.content_sha256(conn, meta=W.unfenced)


def facts_of(path: Path) -> StoreFacts:
    with _reading(path) as conn:
        meta = W.read_meta(conn) or {}
        admission, holder = W.admission_of(meta)
        return StoreFacts(W.detect_version(conn), admission, holder, data_sha256(conn), meta.get(RECEIPT),
                          meta.get(W.FENCE_REQUEST) if admission is not None else None)


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[sqlite3.Connection]:
    """``_open_reading``, closed after the block; a file system fault while it reads (SQLite creates the store's
    ``-wal`` and ``-shm`` to read a WAL store: a full file system fails there) is ``storage_error`` naming the
    store, not a traceback."""
    try:
        conn = _open_reading(path)
    except sqlite3.OperationalError as e:
        raise _reading_fault(e, path) from None
    try:
        yield conn
    except sqlite3.OperationalError as e:
        if not _storage(e):
            raise
        raise _reading_fault(e, path) from None
    finally:
        conn.close()


def _reading_fault(error: sqlite3.OperationalError, path: Path) -> PairedRefused:
    return PairedRefused("storage_error", f"{_storage_fault(error, path)}; it could not be read (SQLite keeps its "
                                          f"-wal and -shm beside a store it reads)")


#: The files SQLite keeps beside a database while it is in use (the write-ahead log and its index, the journal).
_SIDECARS = W.SIDECARS


def _open_reading(path: Path) -> sqlite3.Connection:
    """``writer.open_reading`` of a store whose path is checked first (``_store_file``: never a FIFO)."""
    _store_file(path)
    return W.open_reading(path)


def _kind_words(mode: int) -> str:
    """What a file of ``mode`` is, in words (for a path that is not the regular file it should be)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISLNK, "a symbolic link"),
                        (stat.S_ISDIR, "a directory"),
                        (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


def _store_file(path: Path) -> None:
    """Refuse (``store_unusable``) a store path that holds something other than a regular file: SQLite would open
    a FIFO and wait for a writer forever. A missing file is left to the caller (SQLite names it)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise PairedRefused("store_unusable", f"{path} is {_kind_words(mode)}, not a store's database file; it is "
                                              f"never opened. Name the store's file (or put the store back "
                                              f"at that path)")


#: The largest publication read (the request, the result, the recovery plan are a few kilobytes).
_PUBLICATION_LIMIT = 1 << 22
#: The deepest publication read (envreplica's are 4 deep).
_PUBLICATION_DEPTH = 32
_PUT_BACK = "Put back the file as it was published (from where you keep a copy), then run again"


def _read_publication(path: Path) -> bytes:
    """The bytes of the publication at ``path``. A FIFO, a device, a socket or a directory there is refused at
    once (``invalid_publication``): it is opened without blocking and checked before a byte is read (reading a
    FIFO would wait for a writer forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise PairedRefused("invalid_publication", f"{path}: cannot be read ({e.strerror}); nothing was "
                                                   f"changed. {_PUT_BACK}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PairedRefused("invalid_publication", f"{path} is {_kind_words(st.st_mode)}, not a publication "
                                                       f"envreplica wrote; it is never read, and nothing was "
                                                       f"changed. Move it away (then put back the file that "
                                                       f"was published there, if one was), then run again")
        if st.st_size > _PUBLICATION_LIMIT:
            raise PairedRefused("invalid_publication", f"{path} holds {st.st_size} bytes, more than any "
                                                       f"publication envreplica writes; nothing was changed. "
                                                       f"{_PUT_BACK}")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise PairedRefused("invalid_publication", f"{path}: cannot be read ({e.strerror}); nothing was "
                                                   f"changed. {_PUT_BACK}") from None
    finally:
        os.close(fd)


def _depth(value: Json) -> int:
    """How deeply ``value`` nests (without recursion: a hostile file may nest as deep as it likes)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _storage_fault(error: BaseException, where: Union[str, Path, None] = None) -> str:
    """What a file system fault is, in one clause: the file, the error, and for a full one what frees it."""
    if isinstance(error, OSError):
        name = error.filename or where
        why = error.strerror or type(error).__name__
        code = errno.errorcode.get(error.errno or 0)
        what = f"{name}: {why}{f' ({code})' if code else ''}" if name else f"{why}{f' ({code})' if code else ''}"
        full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    else:
        text = " ".join(str(error).split())
        what = f"{where}: {text}" if where and str(where) not in text else text
        full = "full" in text.lower() or "no space left" in text.lower()
    if full:
        return f"{what}; the file system is full: free space on it"
    free = _free_bytes(where)
    return what + (f"; its file system has {free} bytes free: free space on it" if free is not None and
                   free < _NEARLY_FULL else "")


#: Free space under which a fault's message says how little is left (SQLite calls some writes on a full file system
#: a "disk I/O error").
_NEARLY_FULL = 1 << 20


def _free_bytes(where: Union[str, Path, None]) -> Optional[int]:
    """The bytes free to this user on the file system of ``where`` (its directory), or ``None``."""
    if where is None:
        return None
    try:
        st = os.statvfs(Path(where).parent)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _publish(path: Path, data: Doc, conflict: str) -> None:
    """Publish ``data`` at ``path`` once: the same bytes there are accepted, other bytes refused."""
    body = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    if os.path.lexists(path):
        if _read_publication(path) != body:
            raise PairedRefused(conflict, f"{path} holds another publication; it is never overwritten")
        return
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:  # from the temporary file's creation on, whatever stops this (a signal too) removes it
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise PairedRefused("invalid_publication", f"{path.parent}: cannot write {path.name} there "
                                                           f"({e.strerror}); make the directory writable") from None
            raise PairedRefused("storage_error", f"{_storage_fault(e, path)}; {path.name} was not "
                                                 f"published") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)  # atomic, and never over an existing file
        except FileExistsError:
            if _read_publication(path) != body:
                raise PairedRefused(conflict, f"{path} holds another publication; it is never overwritten") from None
        except OSError as e:  # a full file system, an I/O error: nothing is published
            raise PairedRefused("storage_error", f"{_storage_fault(e, path)}; {path.name} was not "
                                                 f"published") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    W._fsync_dir(path.parent)


def _read_json(path: Path) -> Json:
    """The publication at ``path``, parsed; one that is not JSON (truncated, edited, nested past any publication,
    not UTF-8) is refused as damaged (``invalid_publication``), saying to put it back."""
    data = _read_publication(path)
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        why = "its JSON nests deeper than Python reads"
    except ValueError as e:  # also UnicodeDecodeError
        why = str(e)
    else:
        if _depth(value) <= _PUBLICATION_DEPTH:
            return value
        why = f"its JSON nests {_depth(value)} deep, deeper than any publication envreplica writes"
    raise PairedRefused("invalid_publication", f"{path}: unreadable ({why}); it was damaged since it was "
                                               f"published, or was not written by envreplica; nothing was "
                                               f"changed. {_PUT_BACK}")


@contextlib.contextmanager
def _installation_lock(request: Path) -> Iterator[None]:
    lock = request.with_name(request.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise PairedRefused("storage_error", f"{_storage_fault(e, lock)}; the installation lock could not "
                                                 f"be created") from None
        raise PairedRefused("invalid_publication", f"{lock}: cannot open the installation lock ({e.strerror}); "
                                                   f"make {lock.parent} writable, or move away what is at that "
                                                   f"path") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PairedRefused("invalid_publication", f"{lock} is {_kind_words(mode)}, not the installation "
                                                       f"lock envreplica creates there; move it away, then run "
                                                       f"again")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PairedRefused("installation_lock_held",
                                f"{lock}: another envreplica migrate or recover of this request is running (it "
                                f"holds the installation lock); nothing was changed by this one. Wait for it to "
                                f"finish, then run again if it did not") from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _busy(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _storage(error: sqlite3.Error) -> bool:
    """SQLite's words for a file system fault: full (``SQLITE_FULL``), an I/O error, a file it cannot open."""
    text = str(error).lower()
    return "full" in text or "disk i/o" in text or "unable to open" in text


@contextlib.contextmanager
def _writing(path: Path, token: str, busy_timeout: float, doing: str) -> Iterator[sqlite3.Connection]:
    """A connection registered as ``token`` (the fence holder), in one exclusive transaction. ``doing`` says
    what the step does, for the refusal when the store cannot be written (read-only, or held by another
    process's write transaction past ``busy_timeout`` seconds)."""
    problem = files.unwritable(path)
    if problem is not None:
        raise PairedRefused("store_read_only", f"{path}: {problem}; stopped before {doing}")
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout)
    conn.create_function(W.WRITER_FUNCTION, 0, lambda: token, deterministic=True)
    try:
        try:
            conn.execute("BEGIN EXCLUSIVE")
            yield conn
            conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if _busy(e):
                raise PairedRefused("store_busy", f"{path}: another process holds a write transaction on it "
                                                  f"(waited {busy_timeout:g} s); stopped before {doing}") from None
            if "readonly" in str(e).lower():
                raise PairedRefused("store_read_only", f"{path}: it cannot be written ({e}); stopped before "
                                                       f"{doing}") from None
            if _storage(e):
                raise PairedRefused("storage_error", f"{_storage_fault(e, path)}; stopped before {doing} (its "
                                                     f"transaction rolled back)") from None
            raise
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def _digest(data: Doc) -> str:
    """SHA-256 of ``data``'s canonical JSON, its own ``sha256`` field left out."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _request_id(request: Doc) -> str:
    """The request's id in fences and receipts: the first 16 hex digits of its digest."""
    return _digest(request)[:16]


def _read_request(path: Path) -> Doc:
    """The published request, checked: its schema and its digest (an edited request is refused), and that it is
    read where it was published (``_at_home``)."""
    req = _read_json(path)
    if not isinstance(req, dict) or req.get("schema_id") != _REQUEST_SCHEMA or req.get("sha256") != _digest(req) \
            or not isinstance(req.get("stores"), list) or len(req["stores"]) < 2 \
            or not all(isinstance(s, dict) and isinstance(s.get("db"), str) for s in req["stores"]):
        raise PairedRefused("paired_migration_request_changed",
                            f"{path} was changed after it was published (its digest no longer matches); nothing "
                            f"was changed. Put back the request as it was published (from where you keep it), "
                            f"then run again; or reconcile the stores by hand")
    _at_home(req, path)
    return req


def _not_at_home(path: Path, home: str) -> PairedRefused:
    return PairedRefused("request_not_at_home",
                         f"{path} is a copy of the paired migration request published at {home} (or was moved from "
                         f"there); nothing was changed. A request's result, recovery and lock live beside where it "
                         f"was published, so a copy elsewhere cannot tell whether the migration completed: run the "
                         f"command again with `--request {home}` (if that file is gone, put this copy back there "
                         f"first: `cp {path} {home}`)")


def _at_home(req: Doc, path: Path) -> None:
    """Refuse a request read anywhere but where it was published (its ``home``): a copy kept elsewhere, or another
    pair's request put in its place, would find no result, recovery or lock beside it and act as if none existed.
    A request of the release before ``home`` is judged by the stores: a fence of this request names its file."""
    home = req.get("home")
    if home is not None:
        if home != str(path):
            raise _not_at_home(path, str(home))
        return
    rid = _request_id(req)
    for store in req["stores"]:
        try:
            facts = facts_of(Path(store["db"]))
        except Exception:  # a store that cannot be read now: the steps say so in their turn
            continue
        if facts.holder == rid and facts.fence_request and facts.fence_request != str(path):
            raise _not_at_home(path, facts.fence_request)


def _distinct(dbs: Sequence[Union[str, Path]]) -> list[Path]:
    """The stores, resolved; refused when one file is named twice (the same path, another spelling, a symlink or a
    hard link: compared by device and inode)."""
    paths = [Path(d).resolve() for d in dbs]
    seen: dict[tuple[int, int], Path] = {}
    for raw, path in zip(dbs, paths):
        ident = files.identity(path)
        key = ident if ident is not None else (-1, hash(str(path)))
        if key in seen:
            raise PairedRefused("same_store_twice", f"{raw} is the same file as {seen[key]} (another spelling, a "
                                                    f"symlink or a hard link); nothing was changed. A paired "
                                                    f"migration takes two or more different stores: give each once")
        seen[key] = path
    return paths


def _usable(paths: Sequence[Path]) -> None:
    """Each path holds an envreplica store (a missing or foreign file is refused before anything is changed)."""
    for p in paths:
        found = files.probe(p)
        if found.kind is files.PathKind.SPECIAL:
            _store_file(p)  # a FIFO, a socket, a device: store_unusable, at once
        if found.kind is files.PathKind.MISSING:
            raise files.ReplicaPathError(f"{p}: no such database file; nothing was changed (check the --db paths)")
        if found.kind is not files.PathKind.SQLITE:
            files.refuse_unusable(found, what="a store to migrate")


def _writable(paths: Sequence[Path], then: str) -> None:
    for p in paths:
        _store_file(p)  # a FIFO opens for writing at once, and SQLite would then wait on it forever
        problem = files.unwritable(p)
        if problem is not None:
            raise PairedRefused("store_read_only", f"{p}: {problem}; {then}. Make it writable for the user that "
                                                   f"runs envreplica, then run again")


def _drained(paths: Sequence[Path], then: str) -> None:
    """The seed's ``drained()``: refuse while another live process holds a store open for writing."""
    if not owners.observable():
        raise PairedRefused("owners_unobservable", "this system does not show which processes hold the stores open "
                                                   "(/proc); a paired migration refuses to run without observing "
                                                   "them. Run it on Linux")
    found = owners.owners(paths)
    if found:
        raise PairedRefused("physical_owner_alive", f"a store is in use ({owners.describe(found)}); {then}. Stop "
                                                    f"that process (or wait for it to close the store: envreplica "
                                                    f"never kills it), then run again")


def _status(request: Doc, i: int, facts: StoreFacts, rid: str) -> Status:
    source = request["stores"][i]
    if facts.version == request["target"] and facts.receipt == rid:
        return Status.APPLIED
    if facts.version == source["version"] and facts.data_sha256 == source["data_sha256"]:
        return Status.NOT_APPLIED
    return Status.UNKNOWN


def _pair(statuses: Sequence[Status]) -> str:
    if Status.UNKNOWN in statuses:
        return "unknown"
    applied = statuses.count(Status.APPLIED)
    return "applied" if applied == len(statuses) else "partial" if applied else "not_applied"


def _pair_now(req: Doc, paths: Sequence[Path], rid: str) -> str:
    return _pair([_status(req, i, facts_of(p), rid) for i, p in enumerate(paths)])


def default_request(dbs: Sequence[Path], target: int) -> Path:
    return dbs[0].with_name(f"{dbs[0].name}.paired-v{target}.request.json")


def _files(request: Path) -> tuple[Path, Path, Path]:
    recovery = request.with_name(request.name + ".recovery.json")
    return (request.with_name(request.name + ".result.json"), recovery,
            recovery.with_name(recovery.name + ".result.json"))


def _store_name(i: int, n: int) -> str:
    return ("run", "resource")[i] if n == 2 else f"store {i}"


def where_it_stands(req_path: Path, paths: Sequence[Path], then: str = "once that is fixed, ") -> str:
    """What a refused or interrupted invocation leaves, and what to run next (``then`` leads to it): the
    publications there, the fences up; a migration or recovery that completed says so."""
    result, recovery, recovery_result = _files(req_path)
    fenced = []
    for p in paths:
        try:
            admission = facts_of(p).admission
        except Exception:  # a store that cannot be read now: say nothing of its fence
            admission = None
        if admission is not None:
            fenced.append(f"{p.name} is fenced for {admission}")
    up = f", {', '.join(fenced)}" if fenced else ""
    if os.path.lexists(recovery_result):
        if not fenced:
            return "the recovery completed: its stores are open at their old version; nothing is left to do"
        state, run = "the recovery completed", f"`envreplica recover --request {req_path}` reopens what is fenced"
    elif os.path.lexists(recovery):
        state, run = "a recovery is selected", f"`envreplica recover --request {req_path}` finishes it"
    elif os.path.lexists(result):
        if not fenced:
            return "the migration completed: its result is published and no store is fenced; nothing is left to do"
        state, run = "the migration's result is published", f"`envreplica migrate --request {req_path}` finishes it"
    elif os.path.lexists(req_path):
        state, run = ("the request is published", f"`envreplica migrate --request {req_path}` resumes it (or "
                                                  f"`envreplica recover --request {req_path}` restores the stores)")
    elif fenced:
        return (f"{', '.join(fenced)} by the request {req_path}, which is missing: put back the copy of it you "
                f"kept, at that path; then {_resume(req_path)}")
    else:
        return "nothing was changed"
    return f"{state}{up}; {then}{run}"


def _resume(req_path: Union[str, Path]) -> str:
    return (f"`envreplica migrate --request {req_path}` resumes the migration (or `envreplica recover --request "
            f"{req_path}` restores the stores)")


#: The refusals a step may raise once something is published or fenced: each says what stands and what completes
#: it (``where_it_stands``, appended by ``_says_what_stands``).
_SAYS_WHAT_STANDS = ("store_busy", "store_read_only", "physical_owner_alive", "backup_conflict",
                     "backup_path_unusable", "storage_error", "store_unusable", "invalid_publication")

_NOTED = threading.local()  # the request and stores of the invocation this thread runs, once known


def _note(req_path: Path, paths: Sequence[Path]) -> None:
    """What ``run_command`` reports if a signal stops this invocation: where the request and its stores stand."""
    _NOTED.where = (req_path, list(paths))


def _stands_now() -> str:
    """``where_it_stands`` of the invocation this thread runs (``_note``), for a signal that stopped it: what
    completes it, with no refusal to fix first; before its request was known, nothing was changed."""
    where: Optional[tuple[Path, list[Path]]] = getattr(_NOTED, "where", None)
    if where is None:
        return "nothing was changed"
    req_path, paths = where
    return where_it_stands(req_path, paths, then="")


_Command = TypeVar("_Command", bound=Callable[..., "Outcome"])


def _says_what_stands(command: _Command) -> _Command:
    """``migrate_paired`` or ``recover_paired``, whose refusals say what stands once its request is known
    (``_note``): a refusal that may come once something is published or fenced (``_SAYS_WHAT_STANDS``) says what
    stands and what completes it (``where_it_stands``, unless its message says so already), and so does a file
    system fault (a full disk, an I/O error: an ``OSError``, SQLite's "database or disk is full", "disk I/O
    error", a file it cannot open), refused as ``storage_error`` instead of escaping as a traceback."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Outcome:
        _NOTED.where = None
        try:
            return command(*args, **kwargs)
        except PairedRefused as e:
            if e.code not in _SAYS_WHAT_STANDS:
                raise
            detail, stands = str(e).split(": ", 1)[1], _stands_said()
            if stands in detail or (stands == "nothing was changed" and stands in detail.lower()):
                raise
            raise PairedRefused(e.code, f"{detail}. {stands}") from None
        except (OSError, files.ReplicaPathError, files.ReplicaUnavailable) as e:
            fault, stands = _storage_fault(e), _stands_said()
            said = fault if stands in fault.lower() else f"{fault}. {stands}"  # said once, not twice
            raise PairedRefused("storage_error", said) from None
        except sqlite3.DatabaseError as e:
            text = str(e).lower()
            if not (_storage(e) or "malformed" in text or "not a database" in text):
                raise  # not the file system's: a bug (exit 3, with its traceback)
            raise PairedRefused("storage_error", f"{_storage_fault(e)}. {_stands_said()}") from None

    return cast(_Command, run)


def _stands_said() -> str:
    """``where_it_stands`` of the invocation this thread runs (``_note``), for a refusal; before its request was
    known, nothing was changed."""
    where: Optional[tuple[Path, list[Path]]] = getattr(_NOTED, "where", None)
    if where is None:
        return "nothing was changed"
    req_path, paths = where
    return where_it_stands(req_path, paths)


# ---------------------------------------------------------------------------
# migrate


@dataclass
class Outcome:
    """What ``migrate_paired`` or ``recover_paired`` did."""

    status: str  # "migrated", "recovered"
    request: Path
    message: str


@_says_what_stands
def migrate_paired(dbs: Sequence[Union[str, Path]], *, request: Union[str, Path, None] = None,
                   backup_dir: Union[str, Path, None] = None, master_key: Optional[bytes] = None,
                   target: int = schema.SCHEMA_VERSION, hook: Hook = _no_hook, busy_timeout: float = 5.0,
                   steps: Optional[Steps] = None) -> Outcome:
    """Migrate ``dbs`` together to schema version ``target``, or resume the published request (``dbs`` may then
    be empty: the request names them)."""
    steps = W.MIGRATIONS if steps is None else steps
    req_path = Path(request).resolve() if request is not None else None
    if not dbs:
        if req_path is None or not os.path.lexists(req_path):
            raise PairedRefused("no_migration_request", f"{req_path or 'no --request'}: without --db, --request must "
                                                        f"name a published request (its stores are migrated); "
                                                        f"nothing was changed. If it was there (a store says it is "
                                                        f"fenced by it), put back the copy you kept at that path, "
                                                        f"then run again")
        dbs = [s["db"] for s in _read_request(req_path)["stores"]]
    if len(dbs) < 2:  # the command never asks it (one --db is the single-store migration)
        raise ValueError("a paired migration takes two or more stores; one alone: writer.migrate")
    # prepare (or restore the published request): first the input and the environment, nothing written
    paths = _distinct(dbs)
    _usable(paths)
    if master_key is None:
        raise PairedRefused("master_key_missing", "the migration authenticates every row under the master key; "
                                                  "nothing was changed. Set ENVREPLICA_MASTER_KEY or "
                                                  "ENVREPLICA_MASTER_KEY_FILE to the key the stores were sealed "
                                                  "with, then run it again")
    _writable(paths, "nothing was changed")
    req_path = req_path or default_request(paths, target)
    _note(req_path, paths)
    _check_publication_paths(req_path)
    result_path, recovery_path, _ = _files(req_path)
    n = len(paths)
    restored = os.path.lexists(req_path)
    if restored:
        req = _read_request(req_path)
        if [s["db"] for s in req["stores"]] != [str(p) for p in paths]:
            raise PairedRefused("paired_migration_request_conflict",
                                f"{req_path} is a request for other stores ({[s['db'] for s in req['stores']]}); "
                                f"nothing was changed. Give the stores it names, or another --request")
        _prove_key(paths, master_key)
        _check_backups(req, paths, req_path, then="nothing was changed", fresh=False)
    else:
        facts = [facts_of(p) for p in paths]
        versions = {f.version for f in facts}
        if versions == {target} and all(f.admission is None for f in facts):  # the seed's order: before the drain
            raise PairedRefused("content_only_route_required", f"every store is at version {target} already; "
                                                               f"nothing to migrate")
        _drained(paths, "nothing was changed")
        held = [p for p, f in zip(paths, facts) if f.admission is not None]
        if held:
            raise PairedRefused("store_fenced", _fenced_elsewhere(held[0]))
        if len(versions) != 1 or min(versions) < 1 or min(versions) > target:
            raise PairedRefused("store_versions_differ",
                                f"the stores are at versions {[f.version for f in facts]}: a paired migration "
                                f"moves stores of one version (1 or later, below {target}) together; migrate "
                                f"the others alone first (envreplica migrate --db PATH)")
        _prove_key(paths, master_key)
        bdir = Path(backup_dir).resolve() if backup_dir is not None else None
        req = new_request(paths, facts, target, bdir, req_path)
        _check_backups(req, paths, req_path, then="nothing was changed", fresh=True)
    hook("prepare")
    if not restored:
        _publish(req_path, req, "paired_migration_request_conflict")  # retain parent
        hook("retain parent")
    rid = _request_id(req)
    token = W.admission_token("maintenance", rid, req_path)
    try:
        return _migrate_locked(paths, req, req_path, rid, token, target, steps, master_key, hook, busy_timeout, n)
    except PairedRefused as e:
        if e.code in ("store_busy", "store_read_only", "physical_owner_alive"):  # said once, with what stands
            raise PairedRefused(e.code, f"{str(e).split(': ', 1)[1]}. {where_it_stands(req_path, paths)}") from None
        raise


def _check_publication_paths(req_path: Path) -> None:
    """Refuse at once (``invalid_publication``, nothing changed) a FIFO, a socket, a device or a directory at the
    request's path or beside it (its result, recovery and recovery result, its lock): each would be opened later,
    once something is published or fenced, and a FIFO would be read (or locked) forever."""
    lock = req_path.with_name(req_path.name + ".lock")
    for path in (req_path, *_files(req_path), lock):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # nothing there (or a dangling link: the file's own reader says so)
        if not stat.S_ISREG(mode):
            raise PairedRefused("invalid_publication", f"{path} is {_kind_words(mode)}, not a file envreplica "
                                                       f"publishes there; it is never opened, and nothing was "
                                                       f"changed. Move it away (then put back the file that was "
                                                       f"published there, if one was), then run again")


def _fenced_elsewhere(path: Path) -> str:
    """``store_fenced``: the store is fenced by a request (not this one), and what finishes it; when that request's
    file is missing, what puts it back."""
    meta = files.current_meta(path)
    request_file = meta.get(W.FENCE_REQUEST)
    if request_file and not os.path.lexists(request_file):
        kind, holder = W.admission_of(meta)
        then = _resume(request_file) if kind == "maintenance" else \
            f"`envreplica recover --request {request_file}` finishes the recovery"
        return (f"{path}: this store is fenced for {kind} by request {holder}, whose request file {request_file} "
                f"is missing (moved or deleted); nothing was changed. Put back the copy of that request you kept, "
                f"at {request_file}; then {then}")
    return f"{W.fenced_message(path, meta)} Nothing was changed: finish that request first"


def _migrate_locked(paths: list[Path], req: Doc, req_path: Path, rid: str, token: str, target: int, steps: Steps,
                    master_key: bytes, hook: Hook, busy_timeout: float, n: int) -> Outcome:
    result_path, recovery_path, recovery_result_path = _files(req_path)
    with _installation_lock(req_path):
        hook("lock")
        # reconcile
        if recovery_path.exists():
            if recovery_result_path.exists():
                raise PairedRefused("recovery_selected", f"{recovery_result_path}: this request was recovered (its "
                                                         f"stores are back at their old version) and is closed; "
                                                         f"nothing was changed. To migrate them again, start a new "
                                                         f"request: `envreplica migrate --db {' --db '.join(map(str, paths))} "
                                                         f"--request <a new file>` (or move {req_path.name} and "
                                                         f"its .result/.recovery files aside)")
            raise PairedRefused("recovery_selected", f"{recovery_path}: a recovery of this request is selected, and "
                                                     f"a migration never undoes it; nothing was changed. Finish it: "
                                                     f"`envreplica recover --request {req_path}`")
        before = _pair_now(req, paths, rid)
        if before == "unknown":
            raise PairedRefused("unknown_child_outcome", f"a store is neither its source nor migrated by this "
                                                         f"request (written since the request was prepared); "
                                                         f"nothing was changed. Select recovery "
                                                         f"(`envreplica recover --request {req_path}`), or "
                                                         f"reconcile the store by hand")
        if result_path.exists() and before != "applied":
            raise PairedRefused("completed_migration_changed", f"{result_path} exists but the stores are not all "
                                                               f"migrated by this request; reconcile them by hand")
        # the evidence, before maintenance (Fix.EVIDENCE_BEFORE_MAINTENANCE: a refusal fences nothing)
        evidence = _read_evidence(result_path, rid) if result_path.exists() else None
        hook("reconcile")
        for i, p in enumerate(paths):  # maintenance begun
            f = facts_of(p)
            if f.admission == "recovery":
                raise PairedRefused("store_under_recovery", f"{p} is fenced for recovery; finish it: "
                                                            f"`envreplica recover --request {req_path}`")
            if f.admission == "maintenance" and f.holder != rid:
                raise PairedRefused("store_fenced", f"{p} is under maintenance by another request ({f.holder})")
            if f.admission is None:  # fenced by this request already: nothing to write
                with _writing(p, token, busy_timeout, "fencing it") as conn:
                    W.begin_admission(conn, token, req_path)
            hook(f"maintenance {_store_name(i, n)}")
        if evidence is None:
            _drained(paths, "stopped before backing up the stores")
            _check_backups(req, paths, req_path, then="stopped before backing up the stores", fresh=False)
            hook("drain")
            backups = []
            for i, p in enumerate(paths):  # each backup, all before any apply
                _drained(paths, f"stopped before backing up {p.name}")
                backups.append(_backup(p, Path(req["stores"][i]["backup"]), req["stores"][i]["data_sha256"]))
                hook(f"backup {_store_name(i, n)}")
            for i, p in enumerate(paths):  # each apply
                _drained(paths, f"stopped before migrating {p.name}")
                _apply(p, req, rid, token, steps, master_key, busy_timeout)
                hook(f"apply {_store_name(i, n)}")
            # verify
            if _pair_now(req, paths, rid) != "applied":
                raise PairedRefused("verification_incomplete", "after the applies a store is not migrated")
            for p in paths:
                _verify(p, target)
            evidence = {"schema_id": _RESULT_SCHEMA, "request": rid, "target": target,
                        "backups": [{"path": req["stores"][i]["backup"], "sha256": b} for i, b in enumerate(backups)]}
            hook("verify")
        else:
            if _pair_now(req, paths, rid) != "applied":  # the fence is up: the stores are still this migration
                raise PairedRefused("verification_incomplete", "a store is not migrated")
            hook("read evidence")
        if _pair_now(req, paths, rid) != "applied":
            raise PairedRefused("verification_incomplete", "a store is not migrated")
        _publish(result_path, evidence, "paired_migration_result_conflict")
        hook("publish result")
        for i, p in enumerate(paths):  # maintenance completed
            if facts_of(p).admission is not None:
                with _writing(p, token, busy_timeout, "reopening it") as conn:
                    W.end_admission(conn)
            hook(f"complete {_store_name(i, n)}")
    return Outcome("migrated", req_path, f"migrated {n} stores together to schema version {target}; result "
                                         f"{result_path}")


def new_request(paths: Sequence[Path], facts: Sequence[StoreFacts], target: int, backup_dir: Optional[Path],
                home: Path) -> Doc:
    """A new request: the stores as they are (``facts``), each one's backup path, a random permit id, and its
    ``home``, the path it is published at (a copy read anywhere else is refused: ``_at_home``)."""
    req = {"schema_id": _REQUEST_SCHEMA, "permit_id": uuid.uuid4().hex, "target": target, "home": str(home),
           "stores": [{"db": str(p), "version": f.version, "data_sha256": f.data_sha256,
                       "backup": str((backup_dir or p.parent) / f"{p.name}.v{f.version}.paired.bak")}
                      for p, f in zip(paths, facts)]}
    req["sha256"] = _digest(req)
    return req


def _prove_key(paths: Sequence[Path], master_key: bytes) -> None:
    """Refuse, before anything is written, a key that is not the one each store was sealed with."""
    for p in paths:
        with _reading(p) as conn:
            why = W.key_problem(conn, master_key)
        if why is not None:
            raise PairedRefused("master_key_wrong", W.refuse_wrong_key(p, why))


def _read_evidence(result_path: Path, rid: str) -> Doc:
    """The published result, checked: this request's, and its backups still the ones it recorded."""
    evidence = _read_json(result_path)
    if not isinstance(evidence, dict) or evidence.get("schema_id") != _RESULT_SCHEMA or evidence.get("request") != rid \
            or not isinstance(evidence.get("backups"), list) \
            or not all(isinstance(e, dict) and isinstance(e.get("path"), str) for e in evidence["backups"]):
        raise PairedRefused("migration_evidence_custody_changed",
                            f"{result_path} is not this request's result (edited, or another request's); nothing "
                            f"was changed. Put back the result as it was published, then run again; or reconcile "
                            f"the stores by hand")
    for entry in evidence["backups"]:
        if not Path(entry["path"]).is_file() or W._file_sha256(entry["path"]) != entry.get("sha256"):
            raise PairedRefused("backup_evidence_changed", f"{entry['path']} is not the backup the result recorded "
                                                           f"(sha256 {entry.get('sha256')}); nothing was changed. Put "
                                                           f"that backup back, then run again")
    return evidence


def _backup(path: Path, backup: Path, source_sha256: str) -> str:
    """The store's backup: written once (kept when there with the original data; anything else refused)."""
    problem = _backup_problem(backup, [path])
    if problem is not None:
        raise PairedRefused("backup_path_unusable", f"{backup}, the backup of {path}: {problem}; stopped before "
                                                    f"backing it up. Move it away")
    if os.path.lexists(backup):
        if _file_data_sha256(backup) != source_sha256:
            raise PairedRefused("backup_conflict", f"{backup} exists and does not hold {path}'s original data; "
                                                   f"move it aside only once you know what it holds")
        return W._file_sha256(backup)
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        if data_sha256(src) != source_sha256:
            raise PairedRefused("unknown_child_outcome", f"{path} changed since the request was prepared")
        try:
            return W.copy_store(src, backup, source_sha256, digest=data_sha256, overwrite=False)
        except FileExistsError:  # linked into place never over a file: one appeared there meanwhile
            raise PairedRefused("backup_conflict", f"{backup} appeared while {path.name}'s backup was written, and "
                                                   f"was kept; move it aside only once you know what it "
                                                   f"holds") from None
        except (OSError, sqlite3.Error, files.ReplicaPathError, files.ReplicaUnavailable, W.MigrationRefused) as e:
            raise PairedRefused("storage_error", f"{_storage_fault(e, backup)}; {path.name}'s backup was not "
                                                 f"written") from None
    finally:
        src.close()


def _file_data_sha256(path: Path) -> Optional[str]:
    """``data_sha256`` of the SQLite database at ``path`` (a regular file), or ``None`` when it is not one (a file
    system fault reading it is ``storage_error``, not an answer)."""
    try:
        with _reading(path) as conn:
            return data_sha256(conn)
    except (sqlite3.Error, W.WriterVersionError):
        return None


def _backup_problem(backup: Path, stores: Sequence[Path]) -> Optional[str]:
    """Why ``backup`` cannot take a store's backup (``None``: it can): a symbolic link there (a backup is a file
    of its own, never a link: one to the store would be "kept" as its own backup, one to nowhere would make the
    backup land elsewhere), anything but a regular file (a FIFO would be opened and wait forever; a directory,
    a device, a socket hold no backup), one of ``stores`` itself (a hard link: compared by device and inode), or
    a directory that is not one."""
    try:
        st = os.lstat(backup)
    except (FileNotFoundError, NotADirectoryError):
        return _directory_problem(backup.parent)
    except OSError as e:
        return f"it cannot be inspected ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(backup)
        dangling = "" if os.path.exists(backup) else ", which does not exist"
        return (f"it is a symbolic link (to {target}{dangling}); a backup is a file of its own, written once, never "
                f"a link to another file")
    if not stat.S_ISREG(st.st_mode):
        return f"it is {_kind_words(st.st_mode)}, not a backup"
    for store in stores:
        if files.identity(store) == (st.st_dev, st.st_ino):
            return (f"it is the store {store} itself (a hard link to it): it would be kept as the store's backup, "
                    f"and no copy of the original would exist")
    return None


def _directory_problem(directory: Path) -> Optional[str]:
    """Why a backup cannot be created in ``directory`` (``None``: it can; a missing one is created first)."""
    d = directory
    while True:
        try:
            mode = os.stat(d).st_mode
            break
        except (FileNotFoundError, NotADirectoryError):
            if d.parent == d:
                return None
            d = d.parent
        except OSError as e:
            return f"its directory {d} cannot be inspected ({e.strerror})"
    if not stat.S_ISDIR(mode):
        return f"its directory {d} is {_kind_words(mode)}, not a directory"
    return None


def _check_backups(req: Doc, paths: Sequence[Path], req_path: Path, *, then: str, fresh: bool) -> None:
    """Each store's backup path can take its backup (``_backup_problem``), and none is a store, a file of the
    request, or another store's backup (compared by resolved path, and for a file there by device and inode):
    refused ``backup_path_unusable``, saying ``then``. ``fresh`` (a request not yet published): a file there
    already must hold its store's source, else ``backup_conflict`` (a published request's rerun keeps or refuses
    it at its backup step, as the model does)."""
    lock = req_path.with_name(req_path.name + ".lock")
    taken = {os.path.realpath(p): f"the store {p}" for p in paths}
    taken.update({os.path.realpath(f): f"the request's file {f}" for f in (req_path, *_files(req_path), lock)})
    held: dict[tuple[int, int], str] = {}
    for i, s in enumerate(req["stores"]):
        backup, store = Path(s["backup"]), paths[i]
        real, ident = os.path.realpath(backup), files.identity(backup)
        problem = _backup_problem(backup, paths)
        if problem is None and real in taken:
            problem = f"it is {taken[real]}"
        if problem is None and ident is not None and ident in held:
            problem = f"it is {held[ident]} (a hard link to it)"
        if problem is not None:
            other = " (or choose another --backup-dir)" if fresh else ""
            raise PairedRefused("backup_path_unusable", f"{backup}, the backup of {store}: {problem}; {then}. Move "
                                                        f"it away{other}, then run again")
        taken[real] = f"the backup of {store}"
        if ident is not None:
            held[ident] = f"the backup of {store}"
            if fresh and _file_data_sha256(backup) != s["data_sha256"]:
                raise PairedRefused("backup_conflict", f"{backup} exists and does not hold {store}'s original data "
                                                       f"(the backup it would be); {then}. Move it aside only once "
                                                       f"you know what it holds (or choose another --backup-dir), "
                                                       f"then run again")


def _apply(path: Path, req: Doc, rid: str, token: str, steps: Steps, master_key: bytes,
           busy_timeout: float) -> None:
    """One store's steps to the target in one transaction, its receipt recorded, the fence kept."""
    f = facts_of(path)
    if f.version == req["target"] and f.receipt == rid:
        return  # applied already (a rerun after a crash between the applies)
    with _writing(path, token, busy_timeout, f"migrating {path.name}") as conn:
        version = W.detect_version(conn)
        for v in range(version, req["target"]):
            steps[v](conn, W.MigrationContext(master_key))
        W.begin_admission(conn, token)  # the steps record the new contract version: fence it again
        W._put_meta(conn, RECEIPT, rid)


def _verify(path: Path, target: int) -> None:
    conn = W._open_readonly(path)
    try:
        problems = []
        if W._integrity(conn) != ["ok"]:
            problems.append("integrity_check")
        if W._fk_violations(conn):
            problems.append("foreign_key_check")
        if W.detect_version(conn) != target:
            problems.append(f"schema version is not {target}")
    finally:
        conn.close()
    if problems:
        raise PairedRefused("verification_incomplete", f"{path}: {', '.join(problems)}")


# ---------------------------------------------------------------------------
# recover


@_says_what_stands
def recover_paired(request: Union[str, Path], *, hook: Hook = _no_hook, busy_timeout: float = 5.0) -> Outcome:
    """Select the recovery of ``request`` (or resume the selected one): each store the migration changed is
    restored from its backup, an unchanged one is left untouched, and both reopen at their old version."""
    req_path = Path(request).resolve()
    result_path, recovery_path, recovery_result_path = _files(req_path)
    if not os.path.lexists(req_path):
        raise PairedRefused("no_migration_request", f"{req_path}: no paired migration request there; nothing was "
                                                    f"changed (give the request file `envreplica migrate` wrote; if "
                                                    f"it was there, and a store says it is fenced by it, put back "
                                                    f"the copy you kept at that path, then run again)")
    req = _read_request(req_path)
    rid = _request_id(req)
    paths = [Path(s["db"]) for s in req["stores"]]
    _note(req_path, paths)
    _writable(paths, "nothing was changed")
    plan: Optional[Doc] = None
    if recovery_path.exists():  # restore the selected recovery
        plan = _read_plan(recovery_path, rid, len(paths))
    hook("recover")
    try:
        return _recover(req, req_path, rid, paths, plan, hook, busy_timeout)
    except PairedRefused as e:
        if e.code in ("store_busy", "store_read_only", "physical_owner_alive"):
            raise PairedRefused(e.code, f"{str(e).split(': ', 1)[1]}. {where_it_stands(req_path, paths)}") from None
        raise


def _read_plan(recovery_path: Path, rid: str, n: int) -> Doc:
    plan = _read_json(recovery_path)
    restores = plan.get("restores") if isinstance(plan, dict) else None
    if not isinstance(plan, dict) or plan.get("schema_id") != _RECOVERY_SCHEMA or plan.get("request") != rid or \
            plan.get("sha256") != _digest(plan) or not isinstance(restores, list) or len(restores) != n or \
            not all(isinstance(r, bool) for r in restores):
        raise PairedRefused("invalid_recovery_intent",
                            f"{recovery_path} is not this request's recovery (edited, or another's); nothing was "
                            f"changed. Put it back as it was published, then run again; or reconcile the stores "
                            f"by hand")
    return plan


def _recover(req: Doc, req_path: Path, rid: str, paths: list[Path], plan: Optional[Doc], hook: Hook,
             busy_timeout: float) -> Outcome:
    result_path, recovery_path, recovery_result_path = _files(req_path)
    n = len(paths)
    if plan is None:  # prepare under the lock, which is released once the plan is made (as the seed's prepare)
        with _installation_lock(req_path):
            hook("lock prepare")
            if recovery_path.exists() or recovery_result_path.exists():
                raise PairedRefused("restore_original_recovery", f"{recovery_path} appeared meanwhile: run "
                                                                 f"`envreplica recover --request {req_path}` again")
            if result_path.exists():
                raise PairedRefused("migration_completed", f"{result_path}: the migration completed, so there is "
                                                           f"nothing to recover; nothing was changed. If its stores "
                                                           f"are still fenced, `envreplica migrate --request "
                                                           f"{req_path}` reopens them")
            _completed_in_stores(req, req_path, paths, rid)
            _drained(paths, "nothing was changed")
            restores = []
            for i, p in enumerate(paths):
                if _unchanged(req, i, facts_of(p)):
                    restores.append(False)
                else:
                    _require_backup(req, i, p)
                    restores.append(True)
            plan = {"schema_id": _RECOVERY_SCHEMA, "request": rid, "restores": restores}
            plan["sha256"] = _digest(plan)
        hook("plan")
    token = W.admission_token("recovery", rid, req_path)
    with _installation_lock(req_path):
        hook("lock apply")
        # revalidate
        if result_path.exists():
            raise PairedRefused("migration_completed", f"{result_path}: the migration completed meanwhile; nothing "
                                                       f"was changed")
        _completed_in_stores(req, req_path, paths, rid)
        if recovery_result_path.exists():  # the result is the proof: only admission is left
            hook("revalidate")
            _reopen(paths, token, hook, busy_timeout)
            return Outcome("recovered", req_path, f"the recovery had completed; its stores are reopened at their "
                                                  f"old version. To migrate them again, start a new request: "
                                                  f"`envreplica migrate --db {' --db '.join(map(str, paths))} "
                                                  f"--request <a new file>`")
        _drained(paths, "nothing was changed")
        for i, p in enumerate(paths):
            if plan["restores"][i]:
                _require_backup(req, i, p)
            elif not _unchanged(req, i, facts_of(p)):
                raise PairedRefused("store_not_original", f"{p} changed since the recovery was planned; nothing was "
                                                          f"changed. Reconcile it by hand")
        hook("revalidate")
        _publish(recovery_path, plan, "paired_recovery_request_conflict")
        hook("publish recovery")
        for i, p in enumerate(paths):  # fence
            if facts_of(p).admission != "recovery":
                with _writing(p, token, busy_timeout, f"fencing {p.name} for recovery") as conn:
                    W.begin_admission(conn, token, req_path)
            hook(f"fence {_store_name(i, n)}")
        for i, p in enumerate(paths):  # restore, or check untouched
            _drained(paths, f"stopped before restoring {p.name}")
            if plan["restores"][i]:
                backup = Path(req["stores"][i]["backup"])
                if _backup_digest(backup) != req["stores"][i]["data_sha256"]:
                    raise PairedRefused("recovery_backup_changed", _backup_changed(backup, p))
                _restore(p, backup, token, req_path, busy_timeout)
            elif not _unchanged(req, i, facts_of(p)):
                raise PairedRefused("store_not_original", f"{p} changed under the recovery's fence")
            hook(f"restore {_store_name(i, n)}")
        _publish(recovery_result_path, {"schema_id": _RECOVERY_RESULT_SCHEMA, "request": rid,
                                        "restored": plan["restores"]}, "paired_recovery_result_conflict")
        hook("publish recovery result")
        _reopen(paths, token, hook, busy_timeout)
    return Outcome("recovered", req_path, f"recovered {n} stores: {sum(plan['restores'])} restored from their "
                                          f"backups, the others unchanged")


def _completed_in_stores(req: Doc, req_path: Path, paths: Sequence[Path], rid: str) -> None:
    """Refuse a recovery once a store records this request's receipt at the target version and is open to writers
    again (``Fix.STORES_PROVE_COMPLETION``): only the migration's completed maintenance reopens a migrated store,
    after its result is published, so the stores prove completion whatever files lie beside the request."""
    result_path = _files(req_path)[0]
    for p in paths:
        f = facts_of(p)
        if f.version == req["target"] and f.receipt == rid and f.admission is None:
            raise PairedRefused("migration_completed",
                                f"{p} records this request's migration (receipt {rid} at schema version "
                                f"{req['target']}) and is open to writers again: the migration completed, and a "
                                f"recovery would roll back every write made since; nothing was changed. Its result "
                                f"{result_path} is missing (moved away?): put it back, or `envreplica migrate "
                                f"--request {req_path}` publishes it again")


def _backup_digest(backup: Path) -> Optional[str]:
    if not backup.is_file():
        return None
    conn = W._open_readonly(backup)
    try:
        return data_sha256(conn)
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def _backup_changed(backup: Path, store: Path) -> str:
    return (f"{backup} no longer holds {store}'s data as it was before the migration (edited or replaced since it "
            f"was written); restoring it would not bring the store back. Put the backup the migration wrote back, "
            f"then run again")


def _require_backup(req: Doc, i: int, store: Path) -> None:
    """A store the recovery restores has its backup, holding its source."""
    backup = Path(req["stores"][i]["backup"])
    digest = _backup_digest(backup)
    if digest is None and not backup.exists():
        raise PairedRefused("changed_store_has_no_backup", f"{store} changed and has no backup ({backup}); "
                                                           f"nothing was changed")
    if digest != req["stores"][i]["data_sha256"]:
        raise PairedRefused("recovery_backup_changed", _backup_changed(backup, store))


def _unchanged(req: Doc, i: int, facts: StoreFacts) -> bool:
    """The store is as before the migration: still its prepared source, or never applied (old version, no
    backup: every apply comes after both backups), whatever writers of the old version wrote while open."""
    source = req["stores"][i]
    if facts.version == source["version"] and facts.data_sha256 == source["data_sha256"]:
        return True
    return facts.version == source["version"] and facts.receipt is None and not Path(source["backup"]).exists()


def _restore(path: Path, backup: Path, token: str, req_path: Path, busy_timeout: float) -> None:
    """The store's content replaced by its backup's (SQLite backup API), fenced for recovery, read back."""
    problem = files.unwritable(path)
    if problem is not None:
        raise PairedRefused("store_read_only", f"{path}: {problem}; stopped before restoring it")
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout)
    try:
        src = W._open_readonly(backup)
        try:
            expected = data_sha256(src)
            try:
                src.backup(conn)
            except sqlite3.OperationalError as e:
                if _busy(e):
                    raise PairedRefused("store_busy", f"{path}: another process holds a write transaction on it "
                                                      f"(waited {busy_timeout:g} s); stopped before restoring "
                                                      f"it") from None
                raise
        finally:
            src.close()
        conn.execute("BEGIN IMMEDIATE")
        W.end_admission(conn)  # the backup's own fence (it was taken under maintenance) ...
        W.begin_admission(conn, token, req_path)  # ... replaced by the recovery's
        conn.execute("COMMIT")
        if data_sha256(conn) != expected:
            raise PairedRefused("recovery_readback_failed", f"{path} does not read back as {backup}")
    finally:
        conn.close()


def _reopen(paths: Sequence[Path], token: str, hook: Hook, busy_timeout: float) -> None:
    for i, p in enumerate(paths):
        if facts_of(p).admission is not None:
            with _writing(p, token, busy_timeout, f"reopening {p.name}") as conn:
                W.end_admission(conn)
        hook(f"reopen {_store_name(i, len(paths))}")


# ---------------------------------------------------------------------------
# The invocations: what ``envreplica migrate`` and ``recover`` do once their options are read (``cli.migrate``,
# ``cli.recover`` read them; the migration lockstep calls these in-process, ``conformance.migration.invocations``)


def migrate_command(dbs: Sequence[Union[str, Path]], *, request: Union[str, Path, None] = None,
                    backup_dir: Union[str, Path, None] = None, master_key: Optional[bytes] = None,
                    busy_timeout: float = 5.0) -> int:
    """``envreplica migrate --db A --db B ...`` (or ``--request FILE`` alone): the paired migration run as the
    command runs it (``run_command``: its one line, its exit status), its steps told to the hook the environment
    names (``hook_from_env``)."""
    return run_command(lambda: migrate_paired(
        dbs, request=request, backup_dir=backup_dir, master_key=master_key, hook=hook_from_env(),
        busy_timeout=busy_timeout), "migrate")


def recover_command(request: Union[str, Path], *, busy_timeout: float = 5.0) -> int:
    """``envreplica recover --request FILE``: the recovery run as the command runs it (``run_command``), its steps
    told to the hook the environment names (``hook_from_env``)."""
    return run_command(lambda: recover_paired(request, hook=hook_from_env(), busy_timeout=busy_timeout), "recover")


def run_command(action: Callable[[], Outcome], name: str) -> int:
    """0 done; a refusal's exit status (``exit_status``: 2 could not run as asked, 1 stopped on what the stores
    hold); 128 + the signal's number (130 SIGINT, 143 SIGTERM) when a signal stopped it before its outcome was
    decided (``impl.interrupts``: it stops between two atomic writes; once the outcome is decided, a signal is
    ignored and the outcome stands). Each ends in one line: a refusal's code, the file, and what to do; an
    interruption's signal and what stands (``where_it_stands``: what is published and fenced, and the command
    that completes it)."""
    _NOTED.where = None
    with interrupts.guard() as guard:
        try:
            try:
                outcome = action()
            finally:
                guard.settle()
        except KeyboardInterrupt as e:  # the guard's Interrupted, or a Ctrl-C where it installs none (a thread)
            return _interrupted(name, interrupts.signum_of(e))
        except Exception as e:
            if guard.stopped:  # the signal's exception turned into another on its way out (an SQLite callback)
                return _interrupted(name, int(guard.signum or 0))
            if isinstance(e, PairedRefused):
                print(f"envreplica {name}: refused: {e}", file=sys.stderr)
                return exit_status(e.code)
            if isinstance(e, W.StoreInUse):
                print(f"envreplica {name}: refused: {e}", file=sys.stderr)
                return 2
            if isinstance(e, W.MigrationError):
                print(f"envreplica {name}: refused: {e}", file=sys.stderr)
                return 2 if isinstance(e, W.MigrationRefused) else 1
            raise
        print(outcome.message)
        return 0


def _interrupted(name: str, signum: int) -> int:
    """The one line of an invocation a signal stopped, and its exit status."""
    stands = _stands_now()
    if stands == "nothing was changed":
        stands += "; run the same command again to do it"
    print(f"envreplica {name}: interrupted ({interrupts.name(signum)}): {stands}", file=sys.stderr)
    return interrupts.exit_status(signum)
