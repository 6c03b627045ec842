"""What of the caller's environment reaches the processes a conformance run starts: nothing of envreplica's.

Models: the rule that a run's verdict is a function of the implementation and the run's own inputs (its
command line), not of the shell it was started from. The processes under test (an external adapter,
``external.SubprocessDriver``; the migration lockstep's real invocations, ``migration.invocations``: threads of
this process, forks of its zygote, fresh interpreters; its foreign writer, ``migration.sides.WriterProcess``)
get the caller's environment without its ``ENVREPLICA_*`` variables (``child_env``): an exported master key, a
step socket or kill hook of ``impl.paired``, ``ENVREPLICA_TRACEBACK`` would change what they answer. The harness
adds back what it sets on purpose (an invocation's master key and step socket). ``KEPT`` passes:
``ENVREPLICA_PURE_PYTHON`` says whether envreplica's own code runs compiled or interpreted, which is never a
verdict (``tests/test_compiled.py``). Everything else (``PATH``, ``HOME``, ``NODE_*``, ...) is the adapter's to
need, and passes. An adapter that needs an ``ENVREPLICA_*`` variable gets it from its command:
``env ENVREPLICA_MASTER_KEY_FILE=/path/key envreplica adapter --impl sqlite``.

A thread invocation runs in this process and reads its environment (``impl.paired``'s hooks when it starts,
``cli.errors.guarded`` when it ends), so for the whole of a migration lockstep run this process's own
``ENVREPLICA_*`` variables are set aside and put back after (``scrubbed_environ``).

The working directory: the harness's own processes (the zygote and its forks, fresh interpreters, the writer)
start in a scratch directory of the run (``python -m`` puts its working directory first on the module path: a
caller's directory holding an ``envreplica/`` would be imported in place of envreplica). An external adapter
starts in the caller's working directory, because that is where its command was written and is read
(``./adapter``, ``node dist/adapter.js``, ``npm run adapter``); nothing else of the caller's reaches it.

Leaves out on purpose: the rest of the environment (``PYTHONPATH``, ``LANG``, ``TMPDIR``: the caller's, as for
any program it runs), and the processes a run does not start (a background model check is the gate's own).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping, Optional

__all__ = ["PREFIX", "KEPT", "child_env", "caller_keys", "scrubbed_environ"]

#: The variables of envreplica's own: none of the caller's reaches a process under test, but ``KEPT``.
PREFIX = "ENVREPLICA_"
#: The ones that pass: how envreplica's own code runs (compiled or interpreted), never what it answers.
KEPT = frozenset({"ENVREPLICA_PURE_PYTHON"})


def _dropped(name: str) -> bool:
    return name.startswith(PREFIX) and name not in KEPT


def caller_keys(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """The caller's ``ENVREPLICA_*`` variables a process under test does not get (sorted)."""
    return sorted(k for k in (os.environ if environ is None else environ) if _dropped(k))


def child_env(extra: Optional[Mapping[str, str]] = None,
              environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment of a process under test: ``environ`` (default this process's) without its
    ``ENVREPLICA_*`` variables (``KEPT`` aside), then ``extra`` (what the harness sets on purpose)."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if not _dropped(k)}
    env.update(extra or {})
    return env


@contextlib.contextmanager
def scrubbed_environ() -> Iterator[None]:
    """This process's ``ENVREPLICA_*`` variables (``KEPT`` aside) set aside for the block, then put back (each
    one the block did not set again itself)."""
    saved = {k: os.environ.pop(k) for k in caller_keys()}
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.setdefault(k, v)
