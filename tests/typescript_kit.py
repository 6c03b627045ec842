"""The TypeScript adapter kit under test: where its Node is, and where the seed's file is.

The kit (``adapters/typescript``) needs Node.js 20 or newer and its packages
(``npm ci``, which ``make test`` and ``.ci/run`` run, and which builds the
kit into ``dist/``). Its command runs the build, so ``require_kit`` builds it
again first when ``src/`` is newer (``scripts/build.mjs --if-stale``, once per
test process). The seed's own file, ``project-env-replica.ts`` of
``@runuai/host``, is not in this repository:

``ENVREPLICA_SEED_SOURCE`` names it (the file, or a checkout of
``@runuai/host``); CI's entry point extracts the file and sets it (the kit's
``envreplica-extract-seed SEED_DIFF DIR`` does the same).

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


def node_problem(kit: str, oldest: tuple[int, int], package: Path, why: str = "") -> Optional[str]:
    """What keeps ``kit``'s tests from running (the kit named in words): no Node.js, one older than ``oldest``
    (``why`` it needs that one), or the kit's packages not installed (``package``, one of them, the kit's
    ``node_modules/NAME``, is not there);
    None when nothing does. The TypeScript kit's and the JavaScript kit's."""
    want = ".".join(str(n) for n in oldest) if oldest[1] else str(oldest[0])
    node = shutil.which("node")
    if node is None:
        return f"Node.js is not installed: {kit} needs Node {want} or newer (make test installs it)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"v(\d+)\.(\d+)\.", version)
    if match is None or (int(match.group(1)), int(match.group(2))) < oldest:
        return f"Node.js {version or '(unknown version)'} is too old: {kit} needs Node {want} or newer{why}"
    if not package.is_dir():
        return f"{kit}'s packages are not installed: run `npm ci` in {package.parents[1]} (make test does)"
    return None


@lru_cache(maxsize=None)
def _node_problem() -> Optional[str]:
    return node_problem("the TypeScript kit", (20, 0), KIT / "node_modules" / "esbuild")


@lru_cache(maxsize=None)
def _build_problem() -> Optional[str]:
    """Build the kit (``dist/``) when its sources are newer; the build's output when it fails."""
    run = subprocess.run(["node", str(KIT / "scripts" / "build.mjs"), "--if-stale"], capture_output=True, text=True,
                         timeout=600)
    return None if run.returncode == 0 else (run.stdout + run.stderr)[-4000:]


def require_kit() -> None:
    """Skip (or under CI, fail) unless Node 20+ and the kit's packages are here; build the kit if it is stale."""
    problem = _node_problem()
    if problem:
        _unavailable(problem)
    failed = _build_problem()
    if failed:
        pytest.fail(f"the TypeScript kit does not build (node scripts/build.mjs in {KIT}):\n{failed}", pytrace=False)


def _seed_file() -> Optional[Path]:
    named = os.environ.get("ENVREPLICA_SEED_SOURCE")
    return Path(named).resolve() if named else None


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


@lru_cache(maxsize=None)
def _type_checked(source: str) -> None:
    """Start the kit once on ``source`` with no input, so that its type-check (seconds, the first time on this code)
    is done and remembered before a harness times the adapter's first answer."""
    run = subprocess.run(["node", str(BIN), "--source", source], input="", capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]


def seed_adapter(*extra: str) -> str:
    """The adapter command of the seed's own code through the kit (its type-check done beforehand)."""
    require_kit()
    _type_checked(str(seed_source()))
    return kit_command("--source", str(seed_source()), *extra)


def pack_kit(destination: Path) -> tuple[Path, set[str]]:
    """``npm pack`` the kit into ``destination`` (its ``dist/`` is already built): the tarball and its file list."""
    import json

    require_kit()
    packed = subprocess.run(["npm", "pack", "--ignore-scripts", "--json", "--pack-destination", str(destination)],
                            capture_output=True, text=True, cwd=KIT, timeout=300)
    assert packed.returncode == 0, packed.stderr[-3000:]
    (entry,) = json.loads(packed.stdout)
    return destination / entry["filename"], {f["path"] for f in entry["files"]}


def install_packed_kit(project: Path, tarball: Path) -> str:
    """``npm install`` the packed kit into ``project`` (a folder outside the repository, with its package.json).

    Install scripts are off, and better-sqlite3 is then built by reusing the kit's own compiled binary when the
    versions match (a copy instead of the minutes a compile from source takes on a small machine), else compiled
    (``npm rebuild``). esbuild needs no script. Returns "copied" or "compiled".
    """
    import json

    install = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "--ignore-scripts",
                              str(tarball)], capture_output=True, text=True, cwd=project, timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    ours, theirs = KIT / "node_modules" / "better-sqlite3", project / "node_modules" / "better-sqlite3"
    binary = Path("build") / "Release" / "better_sqlite3.node"

    def version(d: Path) -> str:
        return str(json.loads((d / "package.json").read_text())["version"])

    if (ours / binary).is_file() and version(ours) == version(theirs):
        (theirs / binary).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ours / binary, theirs / binary)
        return "copied"
    rebuild = subprocess.run(["npm", "rebuild", "better-sqlite3"], cwd=project, capture_output=True, text=True,
                             timeout=900)
    assert rebuild.returncode == 0, rebuild.stdout[-3000:] + rebuild.stderr[-3000:]
    return "compiled"
