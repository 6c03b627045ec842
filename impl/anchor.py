"""An optional monotonic anchor outside the replica file, against whole-file rollback.

Nothing inside a file can tell an older copy of the whole file from the
current one: every row, tag and digest of the copy is consistent, because the
key holder wrote them. The replica counts its committed write transactions
(``authority.write_counter``, covered by the authority row's tag); an anchor
keeps the highest count seen somewhere the file's writer cannot reach, and a
replica whose counter is below it was rolled back.

``FileAnchor`` keeps it in a small file (put it on another volume, or owned by
another user, than the replica; or point it at a file the host's
configuration management keeps). ``SqliteReplica(anchor=...)`` checks it when
it opens and before each snapshot, and advances it after each committed write.

What holds, and what does not (docs/integrity.md):

* the anchor is advanced *after* the commit: a crash between the two leaves
  the anchor one transaction behind, so a rollback of exactly that one
  transaction after such a crash is not detected; every older copy is;
* without an anchor, a whole-file rollback is not detected. A running replica
  still refuses a file whose counter went below one it has already seen.

The anchor file is one line, ``envreplica-anchor 1 <replica id> <counter>``,
rewritten in place under ``flock`` (several processes may advance it) and
fsynced. It is created mode 0600.

Leaves out on purpose: an SSM-parameter anchor (the ``Anchor`` protocol is
two methods; a host can implement it on any monotonic store).
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from pathlib import Path
from typing import Optional, Protocol, Union, runtime_checkable

from envreplica.impl.files import ReplicaIOError, ReplicaPathError

__all__ = ["Anchor", "FileAnchor"]

_LINE = re.compile(r"envreplica-anchor 1 ([0-9a-f]{32}) ([0-9]{1,20})\n?")
_MAX_READ = 256  # more than one anchor line: a longer file is not an anchor


@runtime_checkable
class Anchor(Protocol):
    """A monotonic counter outside the replica."""

    def read(self, replica_id: str) -> int:
        """The highest write counter recorded for this replica (0 when none)."""
        ...

    def advance(self, replica_id: str, counter: int) -> None:
        """Record ``counter`` if it is higher than what is recorded."""
        ...


class FileAnchor:
    """An anchor kept in one small file."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ReplicaPathError(f"{self.path} is a directory; --anchor names a file (created if absent)")
        if not self.path.parent.is_dir():
            raise ReplicaPathError(f"{self.path}: its directory {self.path.parent} does not exist; create it first")
        self._check_existing()

    def _check_existing(self) -> None:
        """An existing file must be a regular file holding one anchor line, or nothing: checked here, before
        the replica is opened or created, so that a wrong ``--anchor`` leaves no new replica behind."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            raise ReplicaPathError(f"{self.path} is not a regular file; --anchor names a file (created if absent)")
        try:
            with open(self.path, "rb") as f:
                self._parse(f.read(_MAX_READ))
        except OSError as error:
            raise ReplicaIOError(f"{self.path}: the anchor cannot be read ({error.strerror})") from None

    def _parse(self, data: bytes) -> Optional[re.Match[str]]:
        """The anchor line in ``data`` (None for an empty file), or ``ReplicaPathError`` for anything else."""
        text = data.decode("ascii", "replace")
        if not text.strip():
            return None
        found = _LINE.fullmatch(text)
        if found is None:
            raise ReplicaPathError(f"{self.path} is not an envreplica anchor file (its content is not one anchor "
                                   f"line); point --anchor at the replica's own anchor file")
        return found

    def __repr__(self) -> str:
        return f"FileAnchor({str(self.path)!r})"

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as error:
            raise ReplicaIOError(f"{self.path}: the anchor cannot be opened ({error.strerror})") from None

    def _recorded(self, fd: int, replica_id: str) -> int:
        found = self._parse(os.pread(fd, _MAX_READ, 0))
        if found is None:
            return 0
        if found.group(1) != replica_id:
            raise ReplicaPathError(f"{self.path} anchors another replica (id {found.group(1)}, not {replica_id}); "
                                   f"each replica needs its own anchor file")
        return int(found.group(2))

    def read(self, replica_id: str) -> int:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return self._recorded(fd, replica_id)
        finally:
            os.close(fd)

    def advance(self, replica_id: str, counter: int) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self._recorded(fd, replica_id) >= counter:
                return
            data = f"envreplica-anchor 1 {replica_id} {counter}\n".encode("ascii")
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except OSError as error:
            raise ReplicaIOError(f"{self.path}: the anchor could not be advanced ({error.strerror})") from None
        finally:
            os.close(fd)
