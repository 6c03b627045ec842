"""envreplica.cli: the ``envreplica`` console entry point (``entry``); the command line is ``cli.main``."""

from __future__ import annotations

from typing import Any, Callable, Optional


def entry(run: Optional[Callable[[], Any]] = None) -> int:
    """The ``envreplica`` console script: ``cli.main.main``, with a signal at either end of it kept to one line.

    From this function's first line, a Ctrl-C (SIGINT) while the command line is imported or its arguments are
    parsed (before a command runs) is one line and exit 130, not a ``KeyboardInterrupt`` traceback; a command's
    own interrupts are its own (``cli.errors.guarded``; the paired ``migrate`` and ``recover``:
    ``impl.interrupts``). Once the command has returned its exit status, SIGINT and SIGTERM are ignored, so a
    signal between its last line and the process's exit cannot turn a completed command into a killed one.
    ``run``: the command line's ``main`` when it is imported already (``python -m envreplica.cli.main``).
    Before this function's first line (the interpreter's own start-up, a few milliseconds) Python's defaults
    stand: nothing of envreplica has run, so nothing changed.
    """
    import signal
    import sys

    from envreplica.impl import interrupts

    interrupts.ENTRY = True
    try:
        if run is None:
            from envreplica.cli.main import main as command_line

            run = command_line
        status = int(run() or 0)
    except KeyboardInterrupt as error:
        for sig in interrupts.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        signum = interrupts.signum_of(error)
        print(f"envreplica: interrupted ({interrupts.name(signum)}) while starting, before any command ran; nothing "
              f"was done", file=sys.stderr)
        return interrupts.exit_status(signum)
    for sig in interrupts.SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    return status
