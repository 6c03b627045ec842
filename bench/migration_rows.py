"""The rows of the migration lockstep's benchmarks (``bench_migration_lockstep.py``, per way of running an
invocation; ``bench_migration_adapter.py``, per adapter): one run's figures, and the table of moves per second
with each row's ratio to a base row.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from rich.table import Table

from envreplica.conformance.migration import run as R

Row = tuple[str, int, int, float]  # name, examples, moves, seconds


def row(name: str, examples: int, shared: Any, modes: Optional[Any] = None) -> Row:
    """One run of ``examples`` examples of the ``ci`` shape through ``shared`` (its ``modes``, if given); exits
    naming the row if the lockstep fails."""
    report = R.run_migration_lockstep("ci", max_examples=examples, shared=shared, modes=modes)
    if not report.ok:
        sys.exit(f"{name}: the lockstep failed: {report.divergence}")
    return name, report.examples, report.moves, report.seconds


def rates(title: str, rows: list[Row], base: str, digits: int) -> tuple[Table, float]:
    """The rows as a table (moves per second to ``digits`` decimals, and each row's ratio to row ``base``), and
    the base row's moves per second."""
    base_row = next(r for r in rows if r[0] == base)
    base_rate = base_row[2] / base_row[3]
    table = Table(title=title)
    for col in ("run", "examples", "moves", "seconds", "moves/s", f"× {base}"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, examples, moves, seconds in rows:
        rate = moves / seconds
        table.add_row(name, f"{examples:,}", f"{moves:,}", f"{seconds:.1f}", f"{rate:,.{digits}f}",
                      f"{rate / base_rate:.2f}")
    return table, base_rate
