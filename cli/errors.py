"""How every command ends on an error the user can fix: one line on stderr, exit 2, never a traceback.

``guarded(prog, fn, args)`` runs a command's function and turns the errors
of a bad path, a file of the wrong kind, a replica in use or locked, a
missing or malformed master key, a store of another version, a projection
lock that is busy, lost or at a path it cannot use (``impl.lock``), or a bad
combination of options into one line, ``envreplica <command>: <what is wrong
and what to do>``, and exit status 2. Exit statuses of every command:

* 0: done (for ``check`` and ``conformance``: every property holds, the
  implementation agrees);
* 1: the check found something (a violation, a divergence, a migration
  refused or failed, a replica that does not verify);
* 2: the command could not run as asked (the errors above);
* 3: an internal error (a bug in envreplica): its traceback, then one line
  ``envreplica <command>: internal error: ...`` saying so;
* 130: interrupted (Ctrl-C, SIGINT): one line saying so, no traceback (128 +
  SIGINT, as a shell reports it). A replica's committed transactions stay
  committed; one in progress is rolled back. From the first line of the
  ``envreplica`` console entry point (``envreplica.cli.entry``: before any
  command runs) a Ctrl-C is one line too, and once a command has
  returned its status, SIGINT and SIGTERM are ignored until the process exits;
* 143: the paired ``migrate`` and ``recover`` stopped by SIGTERM (128 +
  SIGTERM). They end on SIGINT or SIGTERM alike (``impl.interrupts``): one line
  saying what is published and fenced and what completes it, 130 or 143; a
  signal once their outcome is decided is ignored. Other commands leave
  SIGTERM to the system (the process ends at once).

A Python traceback is printed only for a bug; ``ENVREPLICA_TRACEBACK=1``
shows the traceback of a user error too.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any, Callable

# raised below the command line (conformance.adapter, ...); re-exported here, where it is mapped to exit 2
from envreplica.conformance.errors import UsageError

__all__ = ["UsageError", "USER_ERROR_EXIT", "INTERNAL_ERROR_EXIT", "INTERRUPTED_EXIT", "TERMINATED_EXIT", "guarded",
           "input_file", "path_option", "user_errors"]

USER_ERROR_EXIT = 2
INTERNAL_ERROR_EXIT = 3
INTERRUPTED_EXIT = 130  # 128 + SIGINT
TERMINATED_EXIT = 143  # 128 + SIGTERM: the paired migrate and recover (impl.interrupts.exit_status)




def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the command cannot run as asked"."""
    from envreplica.impl.files import ReplicaPathError, ReplicaUnavailable
    from envreplica.impl.lock import LockError
    from envreplica.impl.sealing import KeyConfigError
    from envreplica.impl.writer import WriterVersionError
    from envreplica.model.presets import UnknownBounds
    from envreplica.spec.domain import CorruptReplica

    return (UsageError, KeyConfigError, ReplicaPathError, ReplicaUnavailable, WriterVersionError, CorruptReplica,
            UnknownBounds, LockError, OSError)


def _line(error: BaseException) -> str:
    if isinstance(error, OSError) and not type(error).__module__.startswith("envreplica"):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or type(error).__name__}"
    return " ".join(str(getattr(error, "message", None) or error).split())


def guarded(prog: str, fn: Callable[[Any], int], args: Any) -> int:
    """``fn(args)``, with a user error reported as one line and exit 2."""
    try:
        return fn(args)
    except user_errors() as error:
        if os.environ.get("ENVREPLICA_TRACEBACK"):
            raise
        print(f"{prog}: {_line(error)}", file=sys.stderr)
        return USER_ERROR_EXIT
    except KeyboardInterrupt:
        if os.environ.get("ENVREPLICA_TRACEBACK"):
            raise
        print(f"{prog}: interrupted (Ctrl-C) before it finished; its output above is incomplete", file=sys.stderr)
        return INTERRUPTED_EXIT
    except Exception as error:  # a bug: the traceback, then one line that says so (exit 3, not 1: not a finding)
        import traceback

        traceback.print_exc()
        print(f"{prog}: internal error: {type(error).__name__}: {_line(error)} (a bug in envreplica, not in what "
              f"it checked; please report it with the traceback above)", file=sys.stderr)
        return INTERNAL_ERROR_EXIT


def input_file(path: Path, what: str) -> Path:
    """``path`` if it names a regular file to read (``what``: what the command wants there).

    A missing path or a directory raises the ``OSError`` that names it; anything else that is not a regular
    file (a FIFO, a device, a socket) a ``UsageError``: reading a FIFO would wait for a writer forever.
    """
    path = Path(path)
    st = path.stat()  # FileNotFoundError, a symlink loop...: one line (guarded)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path} is not a regular file (a FIFO, a device or a socket); give {what}")
    return path



def path_option(text: str) -> str:
    """``--db PATH`` as given, for ``argparse`` (``type=``): an empty string names no file (``Path("")`` is the
    current directory, which would be refused as "." is a directory, a confusing line)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path; give the replica's file, for example "
                                         f"--db /var/lib/envreplica/replica.db")
    return text
