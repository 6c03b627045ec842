"""``envreplica recover --request FILE``: its options; what it does is ``impl.paired.recover_command`` (which the
migration lockstep also calls in-process), its exit statuses the paired contract's (``impl.paired.EXIT_STATUS``)."""

from __future__ import annotations

import argparse

from envreplica.impl import paired



def cmd_recover(args: argparse.Namespace) -> int:
    """``envreplica recover --request FILE``."""
    return paired.recover_command(args.request, busy_timeout=args.busy_timeout)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``recover --request FILE``."""
    p = subparsers.add_parser(
        "recover", help="select the recovery of a paired migration: restore its stores together",
        description=("Select the recovery of the paired migration whose request is FILE, or resume the selected "
                     "one: each store the migration changed is restored from its backup, an unchanged store is "
                     "left untouched, and all reopen at their old version. Refused once the migration's result "
                     "is published (rerun `envreplica migrate --request FILE` instead). Exit 0 recovered; 1 "
                     "stopped on what a store holds; 2 could not run as asked (in use, a store open for writing "
                     "in another process, locked or read-only, a publication edited)."))
    p.add_argument("--request", required=True, metavar="FILE", help="the paired migration's request file")
    p.add_argument("--busy-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for a store another process holds in a write transaction (default 5)")
    p.set_defaults(func=cmd_recover)
