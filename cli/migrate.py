"""``envreplica migrate``: its options, and what it does with them.

One store (``--db PATH``): ``impl.writer.migrate`` (back up, migrate, verify, write evidence). Two or more, or
``--request FILE`` alone: the paired migration (``impl.paired.migrate_command``, which the migration lockstep
also calls in-process). This module reads the options, the master key from the environment, and maps the single
store's refusals to exit statuses; the paired migration's statuses are its contract's (``impl.paired.EXIT_STATUS``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from envreplica.cli.errors import path_option
from envreplica.impl import paired
from envreplica.impl.writer import MigrationError, MigrationInputRefused, MigrationRefused, migrate

__all__ = ["cmd_migrate", "register"]


def cmd_migrate(args: argparse.Namespace) -> int:
    """``envreplica migrate``: 0 migrated or already at the version; 1 refused or failed; 2 bad input or in use.

    The master key (``ENVREPLICA_MASTER_KEY`` / ``_FILE``) is read when set; a
    step that authenticates rows refuses to start without it.
    """
    from envreplica.impl.sealing import master_key_if_set  # cryptography: imported by the command that uses it

    key = master_key_if_set()
    dbs = list(args.db or [])
    if len(dbs) > 1 or (not dbs and getattr(args, "request", None) is not None):
        return _cmd_migrate_paired(args, dbs, key)
    if not dbs:
        print("envreplica migrate: give the store to migrate (--db PATH; two or more for a paired migration), or "
              "--request FILE to resume a paired migration", file=sys.stderr)
        return 2
    if getattr(args, "request", None) is not None:
        print("envreplica migrate: --request names a paired migration's request: give two or more --db, or only "
              "--request", file=sys.stderr)
        return 2
    try:
        ev = migrate(dbs[0], backup_dir=args.backup_dir, evidence_path=args.evidence,
                     request_id=getattr(args, "request_id", None), master_key=key,
                     busy_timeout=args.busy_timeout)
    except MigrationInputRefused as e:
        print(f"envreplica migrate: refused: {e}", file=sys.stderr)
        return 2
    except MigrationError as e:
        kind = "refused" if isinstance(e, MigrationRefused) else "failed"
        print(f"envreplica migrate: {kind}: {e}", file=sys.stderr)
        return 1
    print(ev.summary())
    return 0


def _cmd_migrate_paired(args: argparse.Namespace, dbs: list[str], key: Optional[bytes]) -> int:
    """``envreplica migrate --db A --db B ...``: the paired protocol (``impl.paired.migrate_command``)."""
    if args.evidence is not None or getattr(args, "request_id", None) is not None:
        print("envreplica migrate: a paired migration is identified by its --request file (no --evidence or "
              "--request-id)", file=sys.stderr)
        return 2
    return paired.migrate_command(dbs, request=args.request, backup_dir=args.backup_dir, master_key=key,
                                  busy_timeout=args.busy_timeout)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``migrate --db PATH [--backup-dir DIR] [--evidence FILE]`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "migrate",
        help="back up, migrate, verify a replica store to this version, and write evidence",
        description=("Migrate a replica's SQLite store to the schema version of this envreplica, under an "
                     "exclusive lock: back it up (SQLite backup API), apply the steps in one transaction, "
                     "verify (integrity, foreign keys, row counts, writer contract), write evidence JSON. "
                     "Exit 0 when migrated or already at the version; 1 when it stopped on what the store "
                     "holds or failed (a failure restores the backup); 2 when it could not run as asked (a bad "
                     "path, a file of the wrong kind, a store open for writing in another process, locked, "
                     "fenced or read-only, no master key or not the store's). Migrating to schema version 2 "
                     "needs the master key the store was sealed with (ENVREPLICA_MASTER_KEY or "
                     "ENVREPLICA_MASTER_KEY_FILE). With two or more --db, or --request alone: the paired "
                     "migration (docs/migration.md)."))
    p.add_argument("--db", metavar="PATH", type=path_option, action="append",
                   help="the replica's SQLite file; given twice or more, the stores move together (the paired "
                        "migration, docs/migration.md): a rerun after a crash resumes, and `envreplica recover` "
                        "restores them together")
    p.add_argument("--request", metavar="FILE", default=None,
                   help="paired: the request file, which identifies the migration "
                        "(default: <first store>.paired-v<version>.request.json); alone, without --db, it resumes "
                        "the published request on the stores it names")
    p.add_argument("--busy-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for a store another process holds in a write transaction (default 5)")
    p.add_argument("--backup-dir", metavar="DIR", default=None,
                   help="where to write <name>.v<from>.bak (default: next to the store)")
    p.add_argument("--evidence", metavar="FILE", default=None,
                   help="the evidence JSON file, which identifies the request "
                        "(default: <store>.migrate-v<version>.evidence.json next to the store)")
    p.add_argument("--request-id", default=None, help="an id to record (default: a new UUID)")
    p.set_defaults(func=cmd_migrate)
    return p
