"""The JavaScript migration kit under test: where its Node is, and where the second seed's files are.

The kit (``adapters/javascript``) needs Node.js 20.6 or newer and its packages (``npm ci``, which ``make test``
and ``.ci/run`` run). The second seed's own files (``paired-writer-migration.js``, ``writer-contract.js``, ...)
are not in this repository: ``ENVREPLICA_SEED_MIGRATION_SOURCE`` names ``storage/paired-writer-migration.js``
as the kit's extractor writes it (``.ci/run`` extracts it and sets it); without it, the reference seed's diff
that ``ENVREPLICA_SEED_MIGRATION_DIFF`` names (``.ci/run`` sets it too) is extracted into a temporary directory.

Without Node, the kit's packages or the seed's files, the tests that need them skip with one line saying what
to do, except under ``CI``, where they fail (as ``typescript_kit``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Optional

from typescript_kit import _unavailable, node_problem

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "adapters" / "javascript"
BIN = KIT / "bin" / "envreplica-migration-adapter.js"
EXTRACT = KIT / "scripts" / "extract-seed.mjs"
MUTANTS = KIT / "test" / "mutants.mjs"


@lru_cache(maxsize=None)
def _node_problem() -> Optional[str]:
    return node_problem("the JavaScript migration kit", (20, 6), KIT / "node_modules" / "better-sqlite3",
                        " (module.register)")


def require_kit() -> None:
    problem = _node_problem()
    if problem:
        _unavailable(problem)


def seed_diff() -> Optional[Path]:
    """The reference seed's diff of the second seed (``001_*.txt``), as ``ENVREPLICA_SEED_MIGRATION_DIFF`` names it."""
    named = os.environ.get("ENVREPLICA_SEED_MIGRATION_DIFF")
    # Resolved: the kit's own tests run with the kit as their working folder, so a relative name would miss.
    return Path(named).resolve() if named and Path(named).is_file() else None


@lru_cache(maxsize=None)
def _extracted() -> Optional[Path]:
    diff = seed_diff()
    if diff is None or shutil.which("node") is None:
        return None
    out = Path(tempfile.mkdtemp(prefix="envreplica-seed001-"))
    subprocess.run(["node", str(EXTRACT), str(diff), str(out)], check=True, capture_output=True)
    return out / "storage" / "paired-writer-migration.js"


def seed_source() -> Path:
    """The seed's ``storage/paired-writer-migration.js`` (skips, or under CI fails, without it)."""
    require_kit()
    named = os.environ.get("ENVREPLICA_SEED_MIGRATION_SOURCE")
    path = Path(named).resolve() if named else _extracted()
    if path is None or not path.is_file():
        _unavailable("the second seed's paired-writer-migration.js is not here: set ENVREPLICA_SEED_MIGRATION_SOURCE "
                     "to the storage/paired-writer-migration.js that adapters/javascript/scripts/extract-seed.mjs "
                     "writes from the reference seed's 001_*.txt")
    assert path is not None
    return path


def kit_command(source: Path) -> str:
    """The kit's adapter command line for the migration at ``source``."""
    return shlex.join(["node", str(BIN), "--source", str(source)])


def write_mutant(name: str, out: Path) -> Path:
    """A broken copy of the seed's file (``adapters/javascript/test/mutants.mjs``'s ``name``) under ``out``; its
    ``--source``."""
    storage = seed_source().parent
    done = subprocess.run(["node", str(MUTANTS), name, str(storage), str(out)], capture_output=True, text=True,
                          check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def mutant_names() -> list[str]:
    """Every broken copy the kit lists (``node test/mutants.mjs``: one name per line, then its bug)."""
    done = subprocess.run(["node", str(MUTANTS)], capture_output=True, text=True, check=True)
    return [line.split(":")[0] for line in done.stdout.splitlines() if line.strip() and not line.startswith(" ")]
