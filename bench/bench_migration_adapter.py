"""Benchmark of the migration lockstep through adapters (not a test): moves per second, per adapter.

One run of each row, in one process, the same derandomized generation (``--examples`` examples of the ``ci``
shape; the moves differ where the declarations differ: the seed's kit declares no faults):

* ``in-process``: ``impl.paired`` driven directly (every invocation a thread), no protocol: the baseline;
* ``python adapter (thread)``: ``envreplica adapter --protocol migration --impl paired --modes thread``: the
  same implementation behind the JSON-lines protocol;
* ``python adapter (fork)``: the same, every invocation a forked process;
* ``model adapter``: ``--impl model``: the protocol's own cost, with nothing real behind it;
* ``javascript kit (seed)``: the second seed's own ``paired-writer-migration.js`` through
  ``adapters/javascript`` (every invocation a Node process), under ``--variant seed`` (the variant it passes);
  with ``--seed-source PATH`` (or ``ENVREPLICA_SEED_MIGRATION_SOURCE``), and Node and the kit installed.

Prints examples, moves, seconds, moves per second and each row's ratio to the Python adapter (thread).
Run: ``.venv/bin/python bench/bench_migration_adapter.py [--examples N] [--seed-source PATH]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from envreplica.conformance.migration import run as R
from envreplica.conformance.migration.adapter_side import AdapterShared
from envreplica.conformance.migration.example import Shared
from envreplica.conformance.migration.invocations import Mode
from envreplica.model.migration import MigrationVariant

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "adapters" / "javascript" / "bin" / "envreplica-migration-adapter.js"


def _python_adapter(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "envreplica.cli.main", "adapter", "--protocol", "migration", *args])


def row(name: str, examples: int, shared, modes=None) -> tuple[str, int, int, float]:
    try:
        report = R.run_migration_lockstep("ci", max_examples=examples, shared=shared, modes=modes)
    finally:
        shared.close()
    if not report.ok:
        sys.exit(f"{name}: the lockstep failed: {report.divergence}")
    return name, report.examples, report.moves, report.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--seed-source", default=os.environ.get("ENVREPLICA_SEED_MIGRATION_SOURCE"),
                        help="the seed's storage/paired-writer-migration.js (extract-seed.mjs writes it)")
    args = parser.parse_args()
    console = Console()
    fixed = MigrationVariant.FIXED
    rows = [row("in-process", args.examples, Shared(), ((Mode.THREAD, 100),)),
            row("python adapter (thread)", args.examples,
                AdapterShared(_python_adapter("--impl", "paired", "--modes", "thread"), fixed)),
            row("python adapter (fork)", args.examples,
                AdapterShared(_python_adapter("--impl", "paired", "--modes", "fork"), fixed)),
            row("model adapter", args.examples, AdapterShared(_python_adapter("--impl", "model"), fixed))]
    source: Optional[str] = args.seed_source
    if source and Path(source).is_file():
        command = shlex.join(["node", str(KIT), "--source", source])
        rows.append(row("javascript kit (seed)", args.examples, AdapterShared(command, MigrationVariant.SEED)))
    else:
        console.print("no seed source (--seed-source or ENVREPLICA_SEED_MIGRATION_SOURCE): the JavaScript kit's "
                      "row is left out")
    base = next(r for r in rows if r[0] == "python adapter (thread)")
    base_rate = base[2] / base[3]
    table = Table(title=f"migration lockstep through adapters, {platform.python_implementation()} "
                        f"{platform.python_version()}, {os.cpu_count()} CPUs")
    for col in ("run", "examples", "moves", "seconds", "moves/s", "× python adapter"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, examples, moves, seconds in rows:
        rate = moves / seconds
        table.add_row(name, f"{examples:,}", f"{moves:,}", f"{seconds:.1f}", f"{rate:,.1f}", f"{rate / base_rate:.2f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
