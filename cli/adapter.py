"""``envreplica adapter`` and ``python -m envreplica.conformance.adapter``: the conformance adapter's options.

What it serves and how is ``conformance.adapter`` (``run``, ``serve``, ``build_driver``); this module reads the
options and ends the command as every command ends (``cli.errors.guarded``: one line and exit 2 on an error the
user can fix).
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, Sequence

from envreplica.cli.errors import guarded, path_option
from envreplica.conformance import adapter
from envreplica.spec.variants import Variant



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=["replica", "migration", "lock"], default="replica",
                        help="which adapter protocol: the replica's (docs/protocol.md, section 5; default), the "
                             "paired writer migration's (section 11) or the projection lock's (section 12)")
    parser.add_argument("--impl", choices=["sqlite", "paired", "lock", "model"], default=None,
                        help="what answers the requests: the replica's SQLite implementation (default of "
                             "--protocol replica), the paired writer migration (impl.paired; default of "
                             "--protocol migration), the projection lock (impl.lock; default of --protocol lock), "
                             "or the model")
    parser.add_argument("--without", action="append", default=[], metavar="FIX",
                        help="--protocol lock --impl model: leave this fix of the fixed variant out (repeatable; "
                             "model.lock.Fix's values, e.g. fresh-probe)")
    parser.add_argument("--side", default=None, choices=["threads", "processes"],
                        help="--protocol lock --impl lock: the lock users, threads of the adapter (default) or "
                             "processes forked from it, each killed with a real SIGKILL (docs/lock.md)")
    parser.add_argument("--modes", default="thread,fork",
                        help="--protocol migration --impl paired: how it runs invocations, comma-separated, the "
                             "first the default (thread, fork, exec; default: thread,fork)")
    parser.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant],
                        help="protocol variant (default: fixed)")
    parser.add_argument("--db", type=path_option,
                        help="the replica file: created if absent, or reopened if this adapter created it "
                             "(default: a file in a fresh temporary directory, removed at exit)")
    parser.add_argument("--store", choices=["embedded", "ssm"], default="embedded",
                        help="value store: in-process (default) or AWS SSM Parameter Store")
    parser.add_argument("--test-key", action="store_true",
                        help="seal under the public TEST key instead of ENVREPLICA_MASTER_KEY[_FILE] "
                             "(for conformance runs; refused with --store ssm)")
    parser.add_argument("--anchor", metavar="FILE",
                        help="a rollback anchor file outside the replica (impl.anchor; created if absent)")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``adapter`` subcommand to an ``argparse`` subparsers object (for cli/main.py)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "adapter", help="serve the conformance adapter protocol (JSON lines on stdin/stdout)",
        description=_DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=adapter.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m envreplica.conformance.adapter ARGS``: the same adapter as ``envreplica adapter ARGS``."""
    parser = argparse.ArgumentParser(prog="python -m envreplica.conformance.adapter", description=_DESCRIPTION)
    add_arguments(parser)
    return guarded("envreplica adapter", adapter.run, parser.parse_args(argv))


#: The first line of ``conformance.adapter``'s docstring, as before the options moved here.
_DESCRIPTION = (adapter.__doc__ or "").splitlines()[0]
