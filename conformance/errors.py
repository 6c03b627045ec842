"""The error a conformance front end raises for options that cannot go together, or a value an option cannot take.

``UsageError`` is raised where the options are judged (``conformance.adapter``: ``--impl model`` with
``--store ssm``, ``--protocol lock`` with ``--impl paired``, ...; the pytest plugin's options) and mapped to its
exit status by the command line (``cli.errors``: one line, exit 2), which re-exports it as
``envreplica.cli.errors.UsageError``. It lives here, below the command line, so that the layers that raise it
import nothing of the command line's (``docs/architecture.md``).

Leaves out: an input the implementation refuses (``impl.files.ReplicaPathError`` and the others) and a corrupt
state (``spec.domain.CorruptReplica``): different types, each where it is raised.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """Options that cannot go together, or a value an option cannot take."""
