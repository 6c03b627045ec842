"""The writer contract's fence as names and SQL: the versions, the function a writer registers, the fenced tables
and each trigger's text.

Models: the part of the seed's store writer contract (``writer-contract.js``) that both the contract's keeper
(``impl.writer``: it installs the fence and checks a store) and the fence's judge (``impl.fence_probe``: it runs
each action as right and wrong writers) read. Kept apart so that neither imports the other to learn them
(``impl.writer`` asks ``impl.fence_probe`` whether a store's fence works; ``impl.fence_probe`` builds the fence it
compares against from here). ``impl.writer`` re-exports every name, so ``writer.FENCED_TABLES`` and the others
stay where the contract's readers look for them.

Leaves out: installing the fence and reading ``store_meta`` (``impl.writer``), and judging it (``impl.fence_probe``).
"""

from __future__ import annotations

from envreplica.impl import schema

__all__ = ["WRITER_VERSION", "WRITER_FUNCTION", "FENCE_MESSAGE", "FENCED_TABLES", "ACTIONS", "fence_trigger_sql"]

#: The writer contract version this code writes (``store_meta.writer_version``).
#: 2: every row carries an integrity tag under the master key (``impl.integrity``).
WRITER_VERSION = 2

#: The SQL function a writer registers on each connection; the fence calls it.
WRITER_FUNCTION = "envreplica_writer_version"

#: The prefix of the fence's abort message.
FENCE_MESSAGE = "envreplica writer fence"

#: The tables the fence guards: every replica table but ``store_meta``.
FENCED_TABLES = tuple(t.name for t in schema.TABLES if t is not schema.store_meta)

#: The actions the fence guards, one trigger each per table.
ACTIONS = ("INSERT", "UPDATE", "DELETE")

#: The table that records the contract (``schema_version``, ``writer_version``, ...).
META_TABLE = schema.store_meta.name


def quote(name: str) -> str:
    """``name`` as an SQL identifier (double-quoted, inner quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def fence_trigger_sql(table: str, action: str) -> tuple[str, str]:
    """The name and ``CREATE TRIGGER`` text of the fence on ``table`` for ``action``."""
    action = action.upper()
    if action not in ACTIONS:
        raise ValueError(f"action must be INSERT, UPDATE or DELETE; got {action!r}")
    name = f"envreplica_fence_{table}_{action.lower()}"
    message = (f"{FENCE_MESSAGE}: {action} on {table} refused: this connection is not an envreplica "
               f"writer of the version recorded in store_meta.writer_version")
    sql = (f"CREATE TRIGGER {quote(name)} BEFORE {action} ON {quote(table)} BEGIN "
           f"SELECT RAISE(ABORT, '{message}') "
           f"WHERE {WRITER_FUNCTION}() IS NOT "
           f"(SELECT value FROM {quote(META_TABLE)} WHERE key = 'writer_version'); END")
    return name, sql
