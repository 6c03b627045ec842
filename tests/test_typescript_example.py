"""The kit's example of a team's own replica (``adapters/typescript/examples/own-replica``), used as a team would.

* Copied out of the repository, with the kit packed (``npm pack``) and installed from its tarball, ``npm test``
  type-checks the replica under strict TypeScript and passes the gate (``envreplica conformance --variant fixed
  --profile dev``, tables compared): the kit works as a package, and the example is correct.
* The example's gate can fail: with its one deliberate bug switched on (``OWN_REPLICA_BUG=stale-read``, finding
  F1 reintroduced), the same gate (at the derandomized ``ci`` profile, which stops at the divergence) exits 1.

The tests that pack and install the kit are marked slow (``make test-slow``; ``make test`` runs the one that
needs no install). Without Node 20+, npm or the kit's packages these tests skip with one line saying what to do
(``typescript_kit.require_kit``), except under ``CI``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from typescript_kit import KIT, install_packed_kit, pack_kit, require_kit

EXAMPLE = KIT / "examples" / "own-replica"
ENVREPLICA = Path(sys.executable).with_name("envreplica")
COPIED = ("src", "scripts", "package.json", "tsconfig.json", "README.md")


def _npm() -> str:
    require_kit()
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI"):
            pytest.fail("npm is not installed (CI must provide it: see .ci/run)", pytrace=False)
        pytest.skip("npm is not installed: the example's test packs and installs the kit with it")
    return npm


def _run(argv: list[str], cwd: Path, timeout: float, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "ENVREPLICA": str(ENVREPLICA), **env})


def _said(run: subprocess.CompletedProcess) -> str:
    return f"exit {run.returncode}\n--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example copied to a directory outside the repository, with the kit installed from its packed tarball."""
    _npm()
    where = tmp_path_factory.mktemp("own-replica")
    packed = where / "packed"
    packed.mkdir()
    project = where / "my-replica"
    project.mkdir()
    for name in COPIED:
        source = EXAMPLE / name
        if source.is_dir():
            shutil.copytree(source, project / name)
        else:
            shutil.copy2(source, project / name)
    started = time.monotonic()
    tarball, _ = pack_kit(packed)
    assert tarball.name == "envreplica-adapter-kit-0.1.0.tgz", tarball
    install_packed_kit(project, tarball)
    print(f"packed and installed the kit in {time.monotonic() - started:.1f} s")
    return project


@pytest.mark.slow
def test_copied_out_with_the_packed_kit_it_passes_its_own_npm_test(installed):
    """``npm test``: typecheck (tsc --strict), then the gate, whose command line it prints; exit 0, PASS."""
    npm = _npm()
    run = _run([npm, "test"], installed, 900)
    assert run.returncode == 0, _said(run)
    assert "PASS: the implementation agrees with the model (variant fixed)" in run.stdout, _said(run)
    assert "tables: compared table by table" in run.stdout, _said(run)
    assert "extensions:" not in run.stdout, _said(run)  # ready, diagnostics, state and crashes all offered
    assert f"gate: {ENVREPLICA} conformance --variant fixed --profile dev --adapter" in run.stderr, _said(run)
    assert "--impl" in run.stderr and "plug.ts" in run.stderr, _said(run)


@pytest.mark.slow
def test_the_example_gate_fails_its_deliberately_broken_replica(installed):
    """``OWN_REPLICA_BUG=stale-read``: a value read before a policy change installs after it (F1); exit 1.

    The ``ci`` profile, derandomized, stops at its first divergence (the 29th example, about 20 s); the ``dev``
    profile draws at random and, with 60 examples, now and then misses it."""
    npm = _npm()
    run = _run([npm, "run", "gate", "--", "--profile", "ci"], installed, 900, OWN_REPLICA_BUG="stale-read")
    assert run.returncode == 1, _said(run)
    assert "FAIL: the implementation parts from the model" in run.stdout, _said(run)
    assert "DIVERGENCE under variant fixed" in run.stdout, _said(run)


@pytest.mark.slow
def test_the_gate_says_what_to_do_without_envreplica(installed):
    """No ``envreplica`` where ENVREPLICA points: one line naming the fix, exit 2 (nothing else runs)."""
    node = shutil.which("node")
    assert node is not None
    run = _run([node, "scripts/gate.mjs"], installed, 120, ENVREPLICA=str(installed / "no-such-envreplica"))
    assert run.returncode == 2, _said(run)
    assert "pip install" in run.stderr and "ENVREPLICA" in run.stderr, _said(run)


def test_copied_out_without_the_kit_the_gate_says_to_install_it(tmp_path):
    """The example copied out with no ``npm install``: its gate finds no ``@envreplica/adapter-kit`` up from its
    folder and says to install it, in one line, exit 2 (no ``envreplica`` starts)."""
    require_kit()
    node = shutil.which("node")
    assert node is not None
    project = tmp_path / "my-replica"
    shutil.copytree(EXAMPLE / "scripts", project / "scripts")
    run = _run([node, "scripts/gate.mjs"], project, 120, ENVREPLICA=str(project / "no-such-envreplica"))
    assert run.returncode == 2, _said(run)
    assert run.stderr.strip().splitlines() == [
        "gate: the kit @envreplica/adapter-kit is not installed: run `npm install` first"], _said(run)
