"""spec.compiled: the model compiled by mypyc finds what the interpreted model finds, and is chosen as documented.

The suite itself runs the interpreted modules (``make test`` sets ``ENVREPLICA_PURE_PYTHON=1``: the model
mutants rewrite the model's functions); here ``tests/compiled_probe.py`` runs once each way in its own process.
Under CI the compiled build must be there (``.ci/run`` installs a C compiler and Python's headers); elsewhere
its absence skips the comparison, saying why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from envreplica.spec import compiled

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "compiled_probe.py"


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    if pure:
        env[compiled.PURE_ENV] = "1"
    return env


def _status_in_a_fresh_process(pure: bool) -> str:
    code = "from envreplica.spec import compiled; import envreplica.model.generate; print(compiled.STATUS)"
    return subprocess.run([sys.executable, "-c", code], env=_env(pure), capture_output=True, text=True,
                          check=True).stdout.strip()


def _require_build() -> None:
    status = _status_in_a_fresh_process(pure=False)
    if not status.startswith("compiled"):
        message = f"the compiled model is not here ({status})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: under CI, make compiled must build it", pytrace=False)
        pytest.skip(message)


def _probe(tmp: Path, pure: bool) -> dict:
    done = subprocess.run([sys.executable, str(PROBE), str(tmp)], env=_env(pure), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_compiled_and_interpreted_find_the_same_states_counterexamples_and_shrunk_trace(tmp_path):
    _require_build()
    interpreted = _probe(tmp_path / "interpreted", pure=True)
    native = _probe(tmp_path / "compiled", pure=False)
    assert interpreted["status"] == f"interpreted: {compiled.PURE_ENV}=1"
    assert not any(interpreted["compiled"].values())
    assert native["status"].startswith("compiled") and set(native["compiled"]) == set(compiled.MODULES)
    assert all(native["compiled"].values()), native["compiled"]
    found = interpreted["found"]
    # What makes the comparison worth anything: a finding on each side, a shrunk lockstep divergence.
    assert found["model"]["cloud/seed"]["violations"], "F1 (cloud, seed) must be found"
    assert found["lockstep"]["ok"] is False and found["lockstep"]["shrunk_steps"]
    for name, run in found["model"].items():
        assert run == native["found"]["model"][name], name
    assert found["lockstep"] == native["found"]["lockstep"]


def test_the_switch_forces_the_interpreted_modules():
    _require_build()
    assert _status_in_a_fresh_process(pure=True) == f"interpreted: {compiled.PURE_ENV}=1"
    assert _status_in_a_fresh_process(pure=False) == "compiled (mypyc): built from these sources"


def test_a_source_changed_since_the_build_is_never_run_stale(tmp_path, monkeypatch):
    """The record's digests decide: one byte of one module differs, and the whole group runs interpreted."""
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    for module in compiled.MODULES:
        target = compiled.source_of(module, tmp_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"# {module}\n", encoding="utf-8")
    (spec_dir / compiled.RECORD).write_text(json.dumps(compiled.record(tmp_path)), encoding="utf-8")
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    assert compiled._decide(spec_dir).compiled
    compiled.source_of("envreplica.model.replica", tmp_path).write_text("# edited\n", encoding="utf-8")
    stale = compiled._decide(spec_dir)
    assert not stale.compiled and stale.reason.startswith("model/replica.py changed since the build")
    compiled.source_of("envreplica.model.replica", tmp_path).unlink()
    assert "cannot be read" in compiled._decide(spec_dir).reason
    (spec_dir / compiled.RECORD).write_text("{", encoding="utf-8")
    assert "unreadable" in compiled._decide(spec_dir).reason
    (spec_dir / compiled.RECORD).unlink()
    assert compiled._decide(spec_dir).reason.startswith("no compiled build")
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert compiled._decide(spec_dir).reason == f"{compiled.PURE_ENV}=1"


def test_the_interpreted_finder_hands_out_sources_only_for_the_compiled_modules():
    finder = compiled._Interpreted()
    spec = finder.find_spec("envreplica.model.state", [str(ROOT / "model")])
    assert spec is not None and spec.origin == str(ROOT / "model" / "state.py")
    assert finder.find_spec("envreplica.model.presets", [str(ROOT / "model")]) is None
    assert finder.find_spec("envreplica.model.state", None) is None


def _check_command(tmp: Path, pure: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envreplica.cli.main", "check", "--model-only", "--bounds", "cloud",
                           "--variant", "seed", "--bounds", "lock-tiny", "--quiet", "--out", str(tmp)],
                          env=_env(pure), capture_output=True, text=True, timeout=900)


def test_envreplica_check_prints_the_same_run_either_way(tmp_path):
    """The whole command (summary, counterexample, trace file, property and coverage tables, and the migration's
    model check, whose interpreted values derive from compiled bases), not only the search: a compiled module
    checks its variables' types at run time, so every path it runs must run here once."""
    _require_build()
    runs = {pure: _check_command(tmp_path / ("interpreted" if pure else "compiled"), pure) for pure in (True, False)}
    for pure, done in runs.items():
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # F1, as a finding
        assert "served_values_are_live_bound_kept violated after 9 steps" in done.stdout
    assert "the model ran compiled (mypyc)" in runs[False].stdout
    assert f"the model ran interpreted: {compiled.PURE_ENV}=1" in runs[True].stdout

    def table_rows(out: str) -> list[str]:  # every table row, without states/s and seconds (the clock's)
        return [re.sub(r"\b\d+\.\d+\b", "<seconds>", " ".join(cell.strip() for cell in line.split("│")[1:6]))
                for line in out.splitlines() if line.startswith("│")]

    assert table_rows(runs[True].stdout) == table_rows(runs[False].stdout)
    traces = {pure: sorted(p.read_text() for p in (tmp_path / ("interpreted" if pure else "compiled")).glob("*.json"))
              for pure in runs}
    assert traces[True] and traces[True] == traces[False]


def test_the_whole_gate_passes_compiled(tmp_path):
    """``envreplica check`` as ``make check`` runs it (every stage, the lockstep's model and the migration's model
    compiled), at small budgets: it passes, and says it ran compiled."""
    _require_build()
    done = subprocess.run([sys.executable, "-m", "envreplica.cli.main", "check", "--bounds", "tiny", "--serial",
                           "--bounds", "lock-tiny", "--lockstep-examples", "40", "--lockstep-examples", "migration=5",
                           "--quiet", "--out", str(tmp_path)], env=_env(pure=False), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the model ran compiled (mypyc)" in done.stdout and "\nPASS: every property holds" in done.stdout


#: Columns the clock fills (left out of the comparison): a run's time and rates.
CLOCK_COLUMNS = frozenset({"seconds", "states/s", "steps/s"})


def _table_rows(out: str) -> list[tuple[str, ...]]:
    """Every row of every table ``out`` prints, each cell stripped, without the clock's columns (by header name)."""
    rows: list[tuple[str, ...]] = []
    header: list[str] = []
    for line in out.splitlines():
        if line.startswith("┃"):
            header = [cell.strip() for cell in line.split("┃")[1:-1]]
        elif line.startswith("│"):
            cells = [cell.strip() for cell in line.split("│")[1:-1]]
            rows.append(tuple(cell for name, cell in zip(header, cells) if name not in CLOCK_COLUMNS))
    return rows


#: The replica's search alone: the migration's and the lock's checks of the gate left out (each has its own case).
_REPLICA_ALONE = ["--protocol", "replica"]

#: The command line as a user runs it, across the search's options, at each protocol's quick bounds: the replica's
#: ``cloud-legacy`` (the run issue 41 found crashing compiled with --workers 2) and ``tiny`` (cloud and adversary
#: modes), the paired writer migration's ``migration`` alone, the projection lock's ``lock`` alone. Ray has its own
#: case below.
COMMAND_LINES = {
    "cloud-legacy, 2 workers": ["--bounds", "cloud-legacy", "--workers", "2", *_REPLICA_ALONE],
    "cloud-legacy, 2 workers, symmetry": ["--bounds", "cloud-legacy", "--workers", "2", "--symmetry", *_REPLICA_ALONE],
    "tiny seed, 2 workers": ["--bounds", "tiny", "--variant", "seed", "--workers", "2", *_REPLICA_ALONE],
    "tiny, symmetry": ["--bounds", "tiny", "--symmetry", *_REPLICA_ALONE],
    "migration alone, 2 workers": ["--bounds", "migration", "--workers", "2"],
    "lock alone": ["--protocol", "lock"],
}


def _run_check(options: list[str], tmp: Path, pure: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envreplica.cli.main", "check", "--model-only", "--quiet",
                           "--out", str(tmp), *options], env=_env(pure), capture_output=True, text=True, timeout=900)


def _agree(options: list[str], tmp: Path, interpreted_options: Optional[list[str]] = None
           ) -> dict[bool, subprocess.CompletedProcess]:
    """Runs ``envreplica check`` interpreted and compiled; both pass and print the same tables (states, transitions,
    depth, verdicts; not the clock's columns); a replica check says which way its model ran (the migration's alone
    prints no such line: its model is not among ``compiled.MODULES``, its values derive from compiled bases).
    ``interpreted_options``, if given, are the interpreted run's instead (the same search another way)."""
    runs = {True: _run_check(interpreted_options or options, tmp / "interpreted", True),
            False: _run_check(options, tmp / "compiled", False)}
    for pure, done in runs.items():
        assert done.returncode == 0, f"pure={pure}: " + done.stdout[-2000:] + done.stderr[-2000:]
        assert "\nPASS: " in done.stdout, done.stdout[-2000:]
    if "migration" not in options:
        assert "the model ran compiled (mypyc)" in runs[False].stdout
        assert f"the model ran interpreted: {compiled.PURE_ENV}=1" in runs[True].stdout
    interpreted, native = _table_rows(runs[True].stdout), _table_rows(runs[False].stdout)
    assert any("distinct states" not in row and len(row) >= 4 for row in interpreted), runs[True].stdout[-2000:]
    assert native == interpreted
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("options", list(COMMAND_LINES.values()), ids=list(COMMAND_LINES))
def test_the_command_line_compiled_agrees_with_the_interpreted_one(options, tmp_path):
    """Issue 41: ``check --model-only --bounds cloud-legacy --workers 2`` crashed compiled only (``Model[S]``
    subscripted at import time in ``checker.parallel``: a class mypyc compiled is no generic at run time), while
    the suite ran interpreted only. Each command line here runs both ways and must print the same tables."""
    _require_build()
    _agree(options, tmp_path)


def test_the_issue_41_run_counts_its_pinned_states_compiled(tmp_path):
    """The reported run itself: 6,935 distinct states at cloud-legacy (the pin of the interpreted run), compiled."""
    _require_build()
    done = _run_check(["--bounds", "cloud-legacy", "--workers", "2", "--protocol", "replica,lock"], tmp_path, False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert any(row[:3] == ("cloud-legacy", "cloud", "6,935") for row in _table_rows(done.stdout)), done.stdout[-2000:]


@pytest.mark.slow
def test_a_ray_search_compiled_agrees_with_the_interpreted_one(tmp_path):
    """``--ray local``: the model factory is pickled to Ray's actors, compiled classes among what it carries. The
    interpreted side runs ``--workers 2`` without Ray (``test_parallel_search.test_ray_matches_bfs`` holds Ray to
    ``bfs`` interpreted; one local cluster fewer). Without the ray extra it skips (``.ci/run`` installs it)."""
    _require_build()
    if subprocess.run([sys.executable, "-c", "import ray"], capture_output=True).returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed: under CI, .ci/run installs the ray extra", pytrace=False)
        pytest.skip("ray is not installed (pip install 'envreplica[ray]')")
    tiny = ["--bounds", "tiny", "--workers", "2", "--protocol", "replica,lock"]
    _agree([*tiny, "--ray", "local"], tmp_path, interpreted_options=tiny)


def test_every_module_of_the_package_imports_with_the_model_compiled():
    """The class of issue 41's crash, everywhere at once: a module that uses a compiled class as a generic at import
    (``Model[S]`` in a type alias) fails to import compiled only. Each module of every subpackage is imported in
    one compiled process (Ray's module too: it imports ``ray`` only when a search asks)."""
    _require_build()
    code = ("import importlib, pkgutil, sys\n"
            "from envreplica.spec import compiled\n"
            "import envreplica.model.generate\n"
            "assert compiled.STATUS.compiled, compiled.STATUS\n"
            "failed = []\n"
            "for package in sys.argv[1:]:\n"
            "    root = importlib.import_module('envreplica.' + package)\n"
            "    for found in pkgutil.walk_packages(root.__path__, root.__name__ + '.'):\n"
            "        try:\n"
            "            importlib.import_module(found.name)\n"
            "        except Exception as error:\n"
            "            failed.append(f'{found.name}: {type(error).__name__}: {error}')\n"
            "print('\\n'.join(failed))\n")
    packages = ["spec", "model", "checker", "impl", "conformance", "cli", "report", "reliability"]
    done = subprocess.run([sys.executable, "-c", code, *packages], env=_env(pure=False), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "", f"modules that fail to import compiled:\n{done.stdout}"
