"""SIGINT and SIGTERM while a command changes files: it stops where it is, says what stands, and keeps its status.

Models: how the paired ``migrate`` and ``recover`` (``impl.paired.run_command``) end on a signal. While one
runs in the main thread of its process, ``guard()`` makes the first SIGINT or SIGTERM raise ``Interrupted``
where the command is: every step's writes are one SQLite transaction (rolled back when the exception leaves
it) or one atomic file operation (a complete, fsynced file linked into place), so it stops between two of
them and nothing is left half-written. Later signals are ignored while it unwinds and reports what stands,
and every signal is ignored once its outcome is decided (``Guard.settle``): done, refused, or interrupted.
The exit status of an interrupted command is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as
a shell reports it (``cli.errors``).

``ENTRY`` is set by the ``envreplica`` console entry point (``envreplica.cli.entry``): the
process ends when the command does, so the guard leaves its handlers in place (still ignoring) instead of
putting back the ones it found, and a signal between the command's last line and the process's exit cannot
turn a completed command into a killed one. Called in-process (tests), the guard puts the handlers back.

Leaves out on purpose: a signal before the entry point's first line runs (the interpreter's own start-up:
Python's default, a ``KeyboardInterrupt`` traceback for SIGINT, death for SIGTERM; nothing of envreplica has
run, so nothing changed), threads other than the main one (Python delivers signals to the main thread only:
there the guard installs nothing), and SIGKILL (``impl.paired``'s crash contract covers it).

This module imports nothing heavy: the entry point imports it before anything else.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Any, Iterator, Optional

#: Set by the console entry point: the process ends with the command, so handlers are never put back.
ENTRY = False

#: The signals a guarded command stops on.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal stopped the command (a ``KeyboardInterrupt``, so that whatever unwinds on Ctrl-C unwinds on it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signum_of(error: BaseException) -> int:
    """The signal behind ``error``: its own for ``Interrupted``, SIGINT for any other ``KeyboardInterrupt``."""
    return int(getattr(error, "signum", signal.SIGINT))


def exit_status(signum: int) -> int:
    """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


def name(signum: int) -> str:
    """How a message names the signal: ``Ctrl-C, SIGINT`` or ``SIGTERM``."""
    return "Ctrl-C, SIGINT" if signum == signal.SIGINT else signal.Signals(signum).name


class Guard:
    """The handlers of one guarded command: ``RUNNING`` (the first signal raises ``Interrupted``), then
    ``STOPPING`` (raised once; later signals ignored) or ``SETTLED`` (the outcome is decided; all ignored)."""

    RUNNING, STOPPING, SETTLED = "running", "stopping", "settled"

    def __init__(self) -> None:
        self.state = Guard.RUNNING
        self.signum: Optional[int] = None  # the signal that stopped it, once one did
        self.installed = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.state != Guard.RUNNING:
            return  # stopping already, or done: the outcome stands
        self.state, self.signum = Guard.STOPPING, signum
        raise Interrupted(signum)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handler)
        self.installed = True

    def settle(self) -> None:
        """The outcome is decided: every later signal is ignored."""
        if self.state == Guard.RUNNING:
            self.state = Guard.SETTLED

    @property
    def stopped(self) -> bool:
        """A signal came (and was raised once) before the outcome was decided."""
        return self.signum is not None

    def restore(self) -> None:
        if self.installed:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self.installed = False


@contextlib.contextmanager
def guard() -> Iterator[Guard]:
    """Install a ``Guard`` for the block (main thread only); its handlers are put back after it unless the
    console entry point runs the process (``ENTRY``)."""
    g = Guard()
    g.install()
    try:
        yield g
    finally:
        g.settle()
        if not ENTRY:
            g.restore()
