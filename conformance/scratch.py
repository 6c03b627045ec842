"""Scratch directories that name their owner, so that what a killed process leaves is removed by the next one.

Models: a directory a long-running process (an adapter, the migration lockstep) makes in a temporary root and
removes when it ends; when it is killed (SIGKILL runs no clean-up), the directory stays, and a store in it made
read-only as root carries the immutable flag (``chattr +i``), which not even ``rm -rf`` gets past. So each
such directory is named ``PREFIX`` + ``p<pid>s<start>n<pidns>-`` + mkdtemp's random part (``owned_dir``): the
owner's process id, its start time (clock ticks since boot, ``/proc/<pid>/stat``'s 22nd field: a pid is
reused, a pid with its start time is not) and its pid namespace (``/proc/self/ns/pid``'s inode: another
namespace's pids are not ours to judge). ``reap`` removes, in the roots it is given, every directory of a
prefix whose owner is gone (no such process, or another one started under its pid, or a zombie), clearing
the immutable flag first where it stops the removal (``remove_tree``). Whoever makes one of these
directories reaps its prefix first, so a killed run's directories are gone once the next one starts.

Leaves out on purpose: a directory of another pid namespace, or of a name without the owner's tag (made by
an older release): those are left alone, never guessed at. A process of the dead owner that still runs (a
child paused at a step boundary dies at the end of file of its step socket, which the owner's death closes)
may write into a directory being reaped: what it writes after the removal is its own, and small.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["Owner", "owner_of", "owned_dir", "reap", "remove_tree"]

_TAG = re.compile(r"p(\d+)s(\d+)n(\d+)-")


@dataclass(frozen=True)
class Owner:
    """A process as a directory's name records it."""

    pid: int
    start: int  # clock ticks since boot (0: unknown, where there is no /proc)
    namespace: int  # the inode of its pid namespace (0: unknown)

    @property
    def tag(self) -> str:
        return f"p{self.pid}s{self.start}n{self.namespace}-"


def _start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot); None when there is none, or it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return int(fields[19])  # field 22 of the whole line; fields[0] is field 3


def _namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_of(pid: Optional[int] = None) -> Owner:
    """Process ``pid`` (default: this one) as a directory's name records it."""
    pid = os.getpid() if pid is None else pid
    return Owner(pid, _start_time(pid) or 0, _namespace())


def _alive(owner: Owner) -> bool:
    if owner.start == 0:  # no /proc: the pid alone
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _start_time(owner.pid) == owner.start


def owned_dir(prefix: str, root: Optional[Path] = None) -> Path:
    """A fresh directory ``PREFIX<owner's tag><random>`` in ``root`` (default: the temporary directory)."""
    return Path(tempfile.mkdtemp(prefix=prefix + owner_of().tag, dir=None if root is None else str(root)))


def reap(prefix: str, roots: Iterable[Path]) -> list[Path]:
    """Remove each directory of ``prefix`` in ``roots`` whose owner is gone; the ones removed."""
    here = _namespace()
    removed = []
    for root in roots:
        try:
            names = [e.name for e in os.scandir(root) if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for name in names:
            found = _TAG.match(name, len(prefix))
            if found is None:
                continue  # not named by its owner: not ours to judge
            owner = Owner(int(found.group(1)), int(found.group(2)), int(found.group(3)))
            if owner.namespace != here or _alive(owner):
                continue
            path = Path(root) / name
            remove_tree(path)
            removed.append(path)
    return removed


def remove_tree(path: Path) -> None:
    """Remove ``path`` and all in it; as root, clear the immutable flag where it stops that (``chattr -R -i``)."""
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path) and os.geteuid() == 0:
        try:
            subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return
        shutil.rmtree(path, ignore_errors=True)
