"""The TypeScript adapter kit under test: where its Node is, and where the seed's file is.

The kit (``adapters/typescript``) needs Node.js 20 or newer and its packages
(``npm ci``, which ``make test`` and ``.ci/run`` run). The seed's own file,
``project-env-replica.ts`` of ``@runuai/host``, is not in this repository:

``ENVREPLICA_SEED_SOURCE`` names it (the file, or a checkout of
``@runuai/host``); CI's entry point extracts the file and sets it.

Without Node, the kit's packages or the seed's file, the tests that need them
skip with one line saying what to do, except under ``CI``, where they fail.
This is the one test helper that reads the seed's file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "adapters" / "typescript"
BIN = KIT / "bin" / "envreplica-ts-adapter.js"


def _unavailable(reason: str) -> None:
    """Skip the test with ``reason``; under CI, fail it (CI installs everything the kit needs)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must provide it: see .ci/run)", pytrace=False)
    pytest.skip(reason)


@lru_cache(maxsize=None)
def _node_problem() -> Optional[str]:
    node = shutil.which("node")
    if node is None:
        return "Node.js is not installed: the TypeScript kit's tests need Node 20 or newer (make test installs the kit)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < 20:
        return f"Node.js {version or '(unknown version)'} is too old: the TypeScript kit needs Node 20 or newer"
    if not (KIT / "node_modules" / "esbuild").is_dir():
        return f"the TypeScript kit's packages are not installed: run `npm ci` in {KIT} (make test does)"
    return None


def require_kit() -> None:
    """Skip (or under CI, fail) unless Node 20+ and the kit's packages are here."""
    problem = _node_problem()
    if problem:
        _unavailable(problem)


def _seed_file() -> Optional[Path]:
    named = os.environ.get("ENVREPLICA_SEED_SOURCE")
    return Path(named) if named else None


def seed_source() -> Path:
    """The seed's ``project-env-replica.ts`` (skips, or under CI fails, without it)."""
    path = _seed_file()
    if path is None or not path.exists():
        _unavailable("the seed's project-env-replica.ts is not here: set ENVREPLICA_SEED_SOURCE to it (or to a "
                     "checkout of @runuai/host)")
    assert path is not None
    return path


def kit_command(*args: str) -> str:
    """The kit's adapter command line with ``args`` (quoted for ``envreplica conformance --adapter``)."""
    import shlex

    return shlex.join(["node", str(BIN), *args])


def seed_adapter(*extra: str) -> str:
    """The adapter command of the seed's own code through the kit."""
    require_kit()
    return kit_command("--source", str(seed_source()), *extra)
