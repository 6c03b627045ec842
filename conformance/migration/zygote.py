"""The zygote: a process with envreplica imported that forks one real ``migrate`` or ``recover`` process per request
(``python -m envreplica.conformance.migration.zygote``).

Models: nothing of the protocol. A fresh interpreter costs most of a second to import envreplica; a fork of
this one costs a few milliseconds, and the child is a process of its own (its own pid, its own open files,
killed for real with SIGKILL at a step boundary) running what ``envreplica ARGV`` does once its options are read
(``invocations.library_call``: the library's ``impl.paired.migrate_command`` or ``recover_command``) with its
own environment and exit status. The lockstep uses it for most of its subprocess invocations
(``conformance.migration.invocations``); a few run as fresh interpreters to keep that path honest.

The protocol on standard input and output, one JSON object per line: ``{"argv": [...], "env": {...},
"socket": PATH, "stdout": FILE, "stderr": FILE}`` forks a child, answered ``{"pid": PID}``. The child
connects to the step socket first (``impl.paired.stepper_connect``: ``hello PID``), redirects its output to
the files, runs the call and reports ``exit CODE`` on the socket before it exits with that code.
Children are reaped by the kernel (SIGCHLD ignored). End of input ends the zygote.

Leaves out on purpose: the interpreter's own start and the command line's reading of its options (the
invocations' ``EXEC`` mode runs both), and threads (the zygote has none when it forks).
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _child(request: dict) -> None:  # pragma: no cover - runs in the forked child
    from envreplica.conformance.migration.invocations import library_call
    from envreplica.impl import paired

    code = 3
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        paired.stepper_connect(request["socket"])
        code = library_call(request["argv"])()
    except BaseException:  # a bug that escaped the call: its traceback, as the command reports one
        import traceback

        traceback.print_exc()
        code = 3
    finally:
        try:
            paired.stepper_exit(code)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> int:
    # Everything a migrate or recover imports, imported once here, before any fork.
    import envreplica.conformance.migration.invocations  # noqa: F401
    import envreplica.impl.integrity  # noqa: F401
    import envreplica.impl.paired  # noqa: F401
    import envreplica.impl.sealing  # noqa: F401
    import envreplica.impl.tables  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
