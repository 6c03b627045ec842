"""The foreign writer: a process that holds a store open, writes to it as a writer of a contract version, and holds
a write transaction on it, as the migration lockstep tells it (``python -m envreplica.conformance.migration.writer``).

Models: what the migration model calls a foreign writer (``Connect``, ``Write``, ``Lock``, ``Unlock``,
``Disconnect``): an old ``SqliteReplica``, a shell, any process that holds a store open for writing. It is a
process of its own, so the implementation observes it as a live owner (``impl.owners``) exactly as it would
a real one. One connection at a time, as the model has it.

The protocol on standard input and output, one JSON object per line each way:

- ``{"op": "connect", "path": P}``: open ``P`` read-write (and read its schema, so the file is open);
- ``{"op": "write", "version": V, "marker": M}``: register as a writer of contract version ``V`` and insert the
  project row ``M`` (every NOT NULL column of that version's ``projects`` filled with a small value);
- ``{"op": "lock"}`` / ``{"op": "unlock"}``: begin an immediate (write) transaction and hold it / roll it back;
- ``{"op": "disconnect"}``: close the connection (a held transaction is rolled back);
- ``{"op": "quit"}``.

Each answer is ``{"ok": true}`` or, for a write, ``{"outcome": "landed" | "fence" | "read-only" | "busy"
| "error", "error": TEXT}``.

Leaves out on purpose: writes of other tables and other shapes (one row is a write; the model counts writes),
and a writer that never commits (a ``lock`` writes nothing).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Any, Optional

#: The marker rows' project id prefix: the lockstep counts a store's foreign writes by them.
MARKER_PREFIX = "zz-foreign-"
#: The fence's refusal (``writer.FENCE_MESSAGE``) and the missing writer function both mean "fenced".
_FENCE = ("envreplica writer fence", "no such function: envreplica_writer_version")


def _filler(declared: str) -> object:
    t = (declared or "").upper()
    if "INT" in t or "BOOL" in t:
        return 0
    if "CHAR" in t or "TEXT" in t or "CLOB" in t:
        return ""
    return b"\x00"


def classify(error: BaseException) -> str:
    """The outcome class of a write's error: fenced, read-only, busy, or another error."""
    text = str(error)
    if any(f in text for f in _FENCE):
        return "fence"
    low = text.lower()
    if "readonly" in low or "read-only" in low or "disk i/o error" in low:
        return "read-only"
    if "locked" in low or "busy" in low:
        return "busy"
    return "error"


class Writer:
    """The one connection, and what it does."""

    def __init__(self) -> None:
        self.conn: Optional[sqlite3.Connection] = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "connect":
            self.close()
            self.conn = sqlite3.connect(request["path"], isolation_level=None, timeout=0.0)
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return {"ok": True}
        if op == "disconnect":
            self.close()
            return {"ok": True}
        conn = self.conn
        if conn is None:
            return {"ok": False, "error": "not connected"}
        if op == "lock":
            conn.execute("BEGIN IMMEDIATE")
            return {"ok": True}
        if op == "unlock":
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return {"ok": True}
        if op == "write":
            return self.write(conn, int(request["version"]), str(request["marker"]))
        return {"ok": False, "error": f"unknown op {op!r}"}

    def write(self, conn: sqlite3.Connection, version: int, marker: str) -> dict[str, Any]:
        declared = str(version)
        conn.create_function("envreplica_writer_version", 0, lambda: declared, deterministic=True)
        try:
            columns = [(r[1], r[2], r[3], r[4]) for r in conn.execute('PRAGMA table_info("projects")')]
            values = [marker if name == "project_id" else (0 if name == "record_version" else _filler(kind))
                      for name, kind, _notnull, _default in columns]
            names = ", ".join(f'"{c[0]}"' for c in columns)
            conn.execute(f'INSERT INTO "projects" ({names}) VALUES ({", ".join("?" for _ in columns)})', values)
        except sqlite3.Error as error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return {"outcome": classify(error), "error": str(error)}
        return {"outcome": "landed"}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def main() -> int:
    writer = Writer()
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            answer = writer.handle(request)
        except sqlite3.Error as error:
            answer = {"ok": False, "error": str(error), "outcome": classify(error)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
