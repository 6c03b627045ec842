"""The migration lockstep's report page (``envreplica conformance --protocol migration --report FILE``).

Models: one self-contained HTML page (``templates/migration.html.j2``, the report's style inline): the verdict,
what the adapter declared and the bounds it was held to, the divergence as a numbered trace (each move with the
model's and the implementation's answers, the move that parts marked, both observations where the files
differ), the finding it is when one fix of F4 to F6 explains it, and the coverage against what was required.

Leaves out on purpose: stepping through states (the replica's page does it from ITF traces; the migration's
trace is short and read as a table), and anything fetched when the page is opened.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from envreplica.report.html import _asset, environment


def write_migration_report(out: Path, report: Any, decl: Any, variant: Any, adapter: str,
                           required: dict[str, frozenset[str]]) -> Path:
    """Write the page for ``report`` (a ``MigrationLockstepReport``) to ``out``; the path written."""
    rows = []
    for i, line in enumerate(report.lines):
        record = report.records[i] if i < len(report.records) else {}
        parts = " | implementation " in line
        rows.append({"n": i + 1, "line": line, "parts": parts or i == len(report.lines) - 1 and not report.ok,
                     "model_state": record.get("model_state"),
                     "implementation_state": record.get("implementation_state")})
    coverage = [{"group": g, "item": item, "count": n, "required": item in required.get(g, frozenset())}
                for g, item, n in report.coverage.rows()]
    missing = report.coverage.unreached(required)
    page = environment().get_template("migration.html.j2").render(
        title=f"envreplica conformance --protocol migration --variant {variant.value}",
        css=_asset("report.css"), report=report, decl=decl, variant=variant.value, adapter=adapter, rows=rows,
        coverage=coverage, missing=missing, reached=report.coverage.reached(required),
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
