"""The second seed's own JavaScript held to the migration model through ``adapters/javascript``.

* the extractor writes each whole file the seed's diff adds, byte for byte, and says which it does not;
* the kit runs the seed's files as they are (their bytes unchanged by a run) and speaks the protocol;
* ``envreplica conformance --protocol migration --variant seed`` exits 0 on the seed's files; ``--variant
  fixed`` exits 1 with a shrunk counterexample named as F4, F5 or F6;
* each broken copy of the seed's file (``adapters/javascript/test/mutants.mjs``) is caught under ``--variant
  seed``: ``CAUGHT_WITHIN`` (at least four, each caught in at most 12 moves) in every run, the rest (found only
  after tens of examples, or in longer traces) in the nightly profile;
* the kit is a package a team installs: packed (``npm pack``), installed into an empty project as its README
  says, its commands answer ``--help`` (exit 0) and a bad option (one line, exit 2), and the seed's file
  extracted and gated there through the installed command passes.

Budgets are counts (examples, shrink calls, replays), never seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from budget import examples
from javascript_kit import EXTRACT, KIT, kit_command, mutant_names, require_kit, seed_diff, seed_source, write_mutant
from typescript_kit import _unavailable

from envreplica.conformance.migration import run as R
from envreplica.conformance.migration.adapter_side import AdapterShared
from envreplica.model.migration import MigrationVariant

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
#: Examples of the seed's clean run (its cost grows with them; it catches nothing, so the dev budget's 5 trade
#: only examples: tests/budget.py), and the most a run may take to find a mutant's divergence (a cap: a run
#: stops at its divergence).
CLEAN_EXAMPLES = examples(ci=20, dev=5)
FIND_EXAMPLES = 150
#: Replays minimization may take in the tests of every run (the nightly ones, and the command line, take
#: ``run.MINIMIZE_REPLAYS``).
REPLAYS = 40
#: The broken copies caught in at most 12 moves each (the bar), each found within a few examples; and the bound.
CAUGHT_WITHIN = ("apply_before_backup", "recovery_unfenced_second", "children_before_parent",
                 "resource_home_unfenced")
MOST_MOVES = 12
#: The others, each caught by the nightly profile: found after tens of examples (a writer connecting in one
#: window), or shrunk to more than 12 moves (a whole migration, then the step that parts): (name, most moves).
NIGHTLY = (("backup_undrained", 12), ("prepare_undrained", 12), ("unknown_outcome_accepted", 12),
           ("second_home_left_fenced", 20), ("recovery_selection_ignored", 20))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_extractor_writes_each_whole_file_as_the_diff_adds_it(tmp_path):
    require_kit()
    diff = seed_diff()
    if diff is None:
        _unavailable("the reference seed's 001_*.txt is not named: set ENVREPLICA_SEED_MIGRATION_DIFF to it")
    done = subprocess.run(["node", str(EXTRACT), str(diff), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (tmp_path / "storage").iterdir())
    assert written == ["paired-writer-migration.js", "projection-lock.js", "work-references.js", "writer-contract.js"]
    assert "paths.js" in done.stderr  # a change to a file the seed does not show: said, not written
    text = diff.read_text(encoding="utf-8")
    for name in written:  # the diff's + lines of that file, exactly
        part = text.split(f"package/dist/storage/{name}\n", 1)[1]
        hunk = part.split("\n@@ ", 1)[1].split("\n", 1)[1]
        lines = []
        for line in hunk.split("\n"):
            if not line.startswith("+"):
                break
            lines.append(line[1:])
        assert (tmp_path / "storage" / name).read_text(encoding="utf-8") == "\n".join(lines) + "\n"


def _conformance(source: Path, variant: str, examples: int, tmp_path: Path):
    return subprocess.run([*ENVREPLICA, "conformance", "--protocol", "migration", "--variant", variant,
                           "--adapter", kit_command(source), "--max-examples", str(examples),
                           "--out", str(tmp_path / "out"), "--junit", str(tmp_path / "junit.xml")],
                          capture_output=True, text=True, timeout=3600)


def test_the_seeds_own_code_passes_the_seed_gate_unchanged(tmp_path):
    source = seed_source()
    before = {p.name: _sha(p) for p in source.parent.iterdir()}
    done = _conformance(source, "seed", CLEAN_EXAMPLES, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = " ".join(done.stdout.split())  # the console wraps long lines at spaces
    assert "PASS" in said and f"paired-writer-migration.js from {source.parent}" in said
    assert {p.name: _sha(p) for p in source.parent.iterdir()} == before  # loaded as it is, never written


def test_the_seeds_own_code_fails_the_fixed_gate_as_a_finding(tmp_path):
    """The run ``envreplica conformance --variant fixed`` makes (the command line itself is
    ``test_migration_adapter``'s), with a smaller minimization budget."""
    shared = AdapterShared(kit_command(seed_source()), MigrationVariant.FIXED)
    try:
        report = R.run_migration_lockstep("ci", max_examples=FIND_EXAMPLES, shared=shared, out_dir=tmp_path,
                                          minimize_replays=REPLAYS)
    finally:
        shared.close()
    assert not report.ok and report.key != "harness", report.divergence
    assert report.finding is not None and report.finding[:3] in ("F4:", "F5:", "F6:"), report.failure
    assert report.failure is not None and report.failure.startswith(report.finding)


def test_every_listed_mutant_is_a_real_edit_of_the_seed(tmp_path):
    source = seed_source()
    names = mutant_names()
    assert len(names) >= 4 and set(CAUGHT_WITHIN) <= set(names)
    for name in names:
        mutated = write_mutant(name, tmp_path / name)
        assert mutated.read_text() != source.read_text(), name


def _caught(name: str, tmp_path: Path, most: int, replays: Optional[int] = REPLAYS) -> None:
    source = write_mutant(name, tmp_path / "mutant")
    shared = AdapterShared(kit_command(source), MigrationVariant.SEED)
    try:
        report = R.run_migration_lockstep("ci", max_examples=FIND_EXAMPLES, shared=shared, out_dir=tmp_path / "out",
                                          minimize_replays=replays)
    finally:
        shared.close()
    assert not report.ok and report.key != "harness", report.divergence
    assert report.shrunk_moves is not None and report.shrunk_moves <= most, report.failure
    trace = [json.loads(line) for line in (tmp_path / "out" / "migration-lockstep.jsonl").read_text().splitlines()]
    assert trace, "the divergence's trace is written"


@pytest.mark.parametrize("name", CAUGHT_WITHIN)
def test_a_broken_copy_of_the_seed_is_caught_in_a_few_moves(name, tmp_path):
    _caught(name, tmp_path, MOST_MOVES)


@pytest.mark.nightly
@pytest.mark.parametrize("name, most", NIGHTLY)
def test_every_other_broken_copy_is_caught(name, most, tmp_path):
    _caught(name, tmp_path, most, replays=None)  # the command line's minimization budget (run.MINIMIZE_REPLAYS)


def test_every_listed_mutant_is_tested():
    seed_source()
    assert sorted(mutant_names()) == sorted([*CAUGHT_WITHIN, *(name for name, _ in NIGHTLY)])


def test_the_kits_own_node_tests_pass():
    """``npm test`` in the kit (``node --test`` on its test files, as package.json lists them: test/ also holds
    the hosts the Python tests start, which wait on their input): its smoke tests on the seed's diff."""
    require_kit()
    diff = seed_diff()
    if diff is None:
        _unavailable("the reference seed's 001_*.txt is not named (ENVREPLICA_SEED_MIGRATION_DIFF): the kit's node tests need it")
    done = subprocess.run(["npm", "test"], cwd=KIT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ENVREPLICA_SEED_MIGRATION_DIFF": str(diff)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout, done.stdout[-2000:]


def test_a_migration_of_ones_own_plugs_in_by_its_exports(tmp_path):
    """A user's module under another name and folder, exporting the seed's two classes (here: a thin module of
    one's own that re-exports the seed's, beside its writer-contract.js): the kit runs it as it runs the seed."""
    source = seed_source()
    own = tmp_path / "mine" / "storage"
    own.mkdir(parents=True)
    (own / "writer-contract.js").write_bytes((source.parent / "writer-contract.js").read_bytes())
    (own / "seed-migration.js").write_bytes(source.read_bytes())
    (own / "my-migration.js").write_text('export { PreparedPairedWriterMigration, PreparedPairedWriterRecovery } '
                                         'from "./seed-migration.js";\n')
    shared = AdapterShared(kit_command(own / "my-migration.js"), MigrationVariant.SEED)
    try:
        assert "my-migration.js" in shared.decl.implementation
        report = R.run_migration_lockstep("dev", max_examples=5, shared=shared)
    finally:
        shared.close()
    assert report.ok, report.failure
    assert report.coverage.counts["step"]["complete resource"] + report.coverage.counts["step"]["reopen resource"]


def _npm(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(["npm", *args, "--no-audit", "--no-fund"], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_the_kit_packs_installs_into_an_empty_project_and_gates_the_seed_there(tmp_path):
    """As the kit's README has a team do it, outside the repository: ``npm pack``, then in an empty project allow
    better-sqlite3's install script (the one npm asks about: any other it names fails this test), install the
    tarball, extract the seed's files with the installed extractor, and gate them with the installed adapter."""
    require_kit()
    diff = seed_diff()
    if diff is None:
        _unavailable("the reference seed's 001_*.txt is not named: set ENVREPLICA_SEED_MIGRATION_DIFF to it")
    packed = _npm("pack", "--pack-destination", str(tmp_path), cwd=KIT).stdout.strip().splitlines()[-1]
    tarball = tmp_path / packed
    assert tarball.is_file(), packed
    project = tmp_path / "gate"
    project.mkdir()
    _npm("init", "-y", cwd=project)
    _npm("pkg", "set", "allowScripts.better-sqlite3=true", "--json", cwd=project)
    installed = _npm("install", str(tarball), cwd=project)
    said = installed.stdout + installed.stderr
    assert "install-scripts" not in said, f"npm names an install script the README does not:\n{said[-3000:]}"
    package = json.loads((project / "node_modules" / "@envreplica" / "migration-kit" / "package.json").read_text())
    assert "private" not in package and package["exports"]["."]["types"] == "./types/index.d.ts"
    assert not (project / "node_modules" / "@envreplica" / "migration-kit" / "test").exists()  # not shipped

    bin_dir = project / "node_modules" / ".bin"
    help_ = subprocess.run([str(bin_dir / "envreplica-migration-adapter"), "--help"], cwd=project,
                           capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: envreplica-migration-adapter --source"), help_
    for command in ("envreplica-migration-adapter", "envreplica-extract-migration-seed"):
        bad = subprocess.run([str(bin_dir / command), "--no-such-option"], cwd=project, capture_output=True, text=True,
                             timeout=120)
        assert bad.returncode == 2 and bad.stdout == "", (command, bad)
        assert bad.stderr.count("\n") == 1 and bad.stderr.startswith(f"{command}: "), (command, bad.stderr)
    # the package's exports, from the project
    names = subprocess.run(["node", "--input-type=module", "-e",
                            "const m = await import('@envreplica/migration-kit'); console.log(Object.keys(m).sort().join(' '))"],
                           cwd=project, capture_output=True, text=True, timeout=120)
    assert names.returncode == 0 and "runMigrationAdapter" in names.stdout.split(), names

    extracted = subprocess.run([str(bin_dir / "envreplica-extract-migration-seed"), str(diff), "seed"], cwd=project,
                               capture_output=True, text=True, timeout=120)
    assert extracted.returncode == 0, extracted.stderr
    source = project / "seed" / "storage" / "paired-writer-migration.js"
    assert source.is_file()
    adapter = shlex.join(["node_modules/.bin/envreplica-migration-adapter", "--source",
                          "seed/storage/paired-writer-migration.js"])
    gate = subprocess.run([*ENVREPLICA, "conformance", "--protocol", "migration", "--variant", "seed",
                           "--max-examples", "3", "--adapter", adapter], cwd=project, capture_output=True, text=True,
                          timeout=1800)
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-3000:]
    said = " ".join(gate.stdout.split())
    assert "PASS: the implementation agrees" in said and ": 3 examples," in said and f"paired-writer-migration.js from {source.parent}" in said, said[:3000]
