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

from envreplica.conformance.migration.adapter_side import AdapterShared
from envreplica.conformance.migration.example import Shared
from envreplica.conformance.migration.invocations import Mode
from envreplica.model.migration import MigrationVariant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from migration_rows import Row, rates, row  # noqa: E402  (bench/migration_rows.py, beside this file)

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "adapters" / "javascript" / "bin" / "envreplica-migration-adapter.js"


def _python_adapter(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "envreplica.cli.main", "adapter", "--protocol", "migration", *args])


def _closing(name: str, examples: int, shared, modes=None) -> Row:
    """``migration_rows.row``, the adapter closed after it."""
    try:
        return row(name, examples, shared, modes)
    finally:
        shared.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--seed-source", default=os.environ.get("ENVREPLICA_SEED_MIGRATION_SOURCE"),
                        help="the seed's storage/paired-writer-migration.js (extract-seed.mjs writes it)")
    args = parser.parse_args()
    console = Console()
    fixed = MigrationVariant.FIXED
    rows = [_closing("in-process", args.examples, Shared(), ((Mode.THREAD, 100),)),
            _closing("python adapter (thread)", args.examples,
                     AdapterShared(_python_adapter("--impl", "paired", "--modes", "thread"), fixed)),
            _closing("python adapter (fork)", args.examples,
                     AdapterShared(_python_adapter("--impl", "paired", "--modes", "fork"), fixed)),
            _closing("model adapter", args.examples, AdapterShared(_python_adapter("--impl", "model"), fixed))]
    source: Optional[str] = args.seed_source
    if source and Path(source).is_file():
        command = shlex.join(["node", str(KIT), "--source", source])
        rows.append(_closing("javascript kit (seed)", args.examples, AdapterShared(command, MigrationVariant.SEED)))
    else:
        console.print("no seed source (--seed-source or ENVREPLICA_SEED_MIGRATION_SOURCE): the JavaScript kit's "
                      "row is left out")
    table, _ = rates(f"migration lockstep through adapters, {platform.python_implementation()} "
                     f"{platform.python_version()}, {os.cpu_count()} CPUs", rows, "python adapter (thread)", 1)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
