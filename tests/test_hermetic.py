"""Every conformance run is hermetic: nothing of the caller's environment reaches the processes under test.

A hostile caller exports ``ENVREPLICA_*`` variables (a master key that is not the harness's, a key file that
is not there, ``impl.paired``'s kill hook and step socket, ``ENVREPLICA_TRACEBACK``, an SSM endpoint) and runs
from a hostile working directory: one holding an ``envreplica/`` package that ``python -m`` would import in
place of envreplica's, and files named like those the harness writes. The same run (derandomized: a count of
examples) must give the same verdict, moves and coverage as from a clean environment and directory:

* the migration lockstep in this process (``impl.paired``'s invocations as threads, forks of the zygote and
  fresh interpreters; the foreign writer process);
* ``envreplica conformance --protocol migration`` through ``envreplica adapter --protocol migration --impl
  paired`` (an external adapter, its own invocations inside it);

and an exported master key does not reach an external adapter (``envreplica adapter --impl sqlite`` then has
none, and says so; given in its command, it has it), while what the adapter legitimately needs (``PATH``,
``HOME``, ``NODE_*``, ``ENVREPLICA_PURE_PYTHON``) passes, and its command is read in the caller's directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envreplica.conformance import hermetic
from envreplica.conformance.external import SubprocessDriver
from envreplica.conformance.migration import run as R
from envreplica.conformance.migration.invocations import Mode

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
#: The console script beside this Python: it does not put the working directory on the module path.
SCRIPT = Path(sys.executable).with_name("envreplica")
#: The invocations of the in-process run: each way of running one (a fresh interpreter rarely: it is slow).
MODES = ((Mode.THREAD, 50), (Mode.FORK, 40), (Mode.EXEC, 10))
EXAMPLES = 12


def hostile_env(tmp: Path) -> dict[str, str]:
    """What a hostile caller exports: every ``ENVREPLICA_*`` a process under test would read."""
    return {
        "ENVREPLICA_MASTER_KEY": "ab" * 32,
        "ENVREPLICA_MASTER_KEY_FILE": str(tmp / "no-such-key"),
        "ENVREPLICA_PAIRED_KILL_AFTER": "backup run",
        "ENVREPLICA_PAIRED_STEP_SOCKET": str(tmp / "no-such.sock"),
        "ENVREPLICA_TRACEBACK": "1",
        "ENVREPLICA_SSM_ENDPOINT": "http://127.0.0.1:9",
    }


def hostile_dir(tmp: Path) -> Path:
    """A working directory holding an ``envreplica`` package that fails on import, and files named like the
    harness's (stores, publications, a replica, traces, an invocation's socket and output)."""
    cwd = tmp / "hostile-cwd"
    (cwd / "envreplica").mkdir(parents=True)
    (cwd / "envreplica" / "__init__.py").write_text(
        "raise SystemExit('a hostile envreplica package was imported from the working directory')\n")
    for name in ("run.db", "resource.db", "run.db.paired-v2.request.json", "run.db.paired-v2.result.json",
                 "replica.db", "lockstep-fixed.jsonl", "migration-lockstep.jsonl", "i1.out", "i1.err", "template"):
        (cwd / name).write_text("not what the harness wrote\n")
    (cwd / "i1.sock").mkdir()
    return cwd


def _summary(report) -> tuple:
    return report.ok, report.failure, report.examples, report.moves, tuple(report.coverage.rows())


def test_the_in_process_migration_lockstep_is_the_same_from_a_hostile_caller(tmp_path, monkeypatch):
    clean = R.run_migration_lockstep("dev", max_examples=EXAMPLES, modes=MODES)
    assert clean.ok, clean.failure
    for key, value in hostile_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(hostile_dir(tmp_path))
    hostile = R.run_migration_lockstep("dev", max_examples=EXAMPLES, modes=MODES)
    assert _summary(hostile) == _summary(clean), hostile.failure
    # and the caller's variables are the caller's again afterwards
    assert os.environ["ENVREPLICA_TRACEBACK"] == "1" and os.environ["ENVREPLICA_MASTER_KEY"] == "ab" * 32


def _gate(cwd: Path, env: dict[str, str], tmp: Path, tag: str) -> subprocess.CompletedProcess:
    adapter = shlex.join([str(SCRIPT), "adapter", "--protocol", "migration", "--impl", "paired",
                          "--modes", "thread,fork"])
    return subprocess.run([str(SCRIPT), "conformance", "--protocol", "migration", "--adapter", adapter,
                           "--max-examples", "6", "--out", str(tmp / f"out-{tag}"), "--junit",
                           str(tmp / f"{tag}.xml")], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.skipif(not SCRIPT.exists(), reason="no envreplica console script beside this Python")
def test_the_migration_gate_through_an_adapter_is_the_same_from_a_hostile_caller(tmp_path):
    clean_env = hermetic.child_env()
    clean_dir = tmp_path / "clean-cwd"
    clean_dir.mkdir()
    clean = _gate(clean_dir, clean_env, tmp_path, "clean")
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    hostile = _gate(hostile_dir(tmp_path), {**clean_env, **hostile_env(tmp_path)}, tmp_path, "hostile")
    assert hostile.returncode == 0, hostile.stdout[-3000:] + hostile.stderr[-3000:]

    def counts(done: subprocess.CompletedProcess) -> tuple[str, str]:
        found = re.search(r"PASS: [^0-9]*([\d,]+) examples, ([\d,]+) moves", " ".join(done.stdout.split()))
        assert found, done.stdout
        return found.group(1), found.group(2)

    def coverage(tag: str) -> str:  # the coverage table, as the JUnit file keeps it
        return ET.parse(tmp_path / f"{tag}.xml").getroot().find("testsuite").find("system-out").text

    assert counts(hostile) == counts(clean)
    assert coverage("hostile") == coverage("clean")


#: An adapter that answers every request with what it was started with: its ``ENVREPLICA_*`` variables, a few
#: others an adapter may need, and its working directory.
ECHO_ENV = ("import json, os, sys\n"
            "for line in sys.stdin:\n"
            "    req = json.loads(line)\n"
            "    env = {k: v for k, v in os.environ.items() if k.startswith(('ENVREPLICA_', 'NODE_', 'HOME', 'PATH'))}\n"
            "    print(json.dumps({'id': req['id'], 'ok': True, 'result': {'env': env, 'cwd': os.getcwd()}}),"
            " flush=True)\n")


def test_an_external_adapter_gets_no_envreplica_variable_of_the_caller(tmp_path, monkeypatch):
    for key, value in hostile_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ENVREPLICA_PURE_PYTHON", "1")
    monkeypatch.setenv("NODE_OPTIONS", "--max-old-space-size=64")
    cwd = hostile_dir(tmp_path)
    monkeypatch.chdir(cwd)
    with SubprocessDriver([sys.executable, "-c", ECHO_ENV], check_answers=False) as driver:
        seen = driver.handle({"id": 1, "op": "reset"})["result"]
    assert sorted(k for k in seen["env"] if k.startswith("ENVREPLICA_")) == ["ENVREPLICA_PURE_PYTHON"], seen
    assert seen["env"]["NODE_OPTIONS"] == "--max-old-space-size=64" and seen["env"]["PATH"] == os.environ["PATH"]
    assert seen["env"].get("HOME") == os.environ.get("HOME")
    assert Path(seen["cwd"]) == cwd  # its command is the caller's: read where it was written


def test_an_exported_master_key_does_not_reach_the_adapter_its_command_does(tmp_path):
    """``envreplica adapter --impl sqlite`` seals under the configured key: exported by the caller, the gate's
    adapter does not get it (it cannot start, and says which key it lacks); in the adapter's command, it does."""
    key = bytes(range(7, 39)).hex()
    env = {**hermetic.child_env(), "ENVREPLICA_MASTER_KEY": key}
    adapter = [*ENVREPLICA, "adapter", "--impl", "sqlite", "--db", str(tmp_path / "k.db")]
    argv = [*ENVREPLICA, "conformance", "--max-examples", "2", "--out", str(tmp_path / "out"), "--adapter"]
    exported = subprocess.run([*argv, shlex.join(adapter)], env=env, capture_output=True, text=True, timeout=600)
    assert exported.returncode == 2, exported.stdout[-2000:] + exported.stderr
    (line,) = exported.stderr.strip().splitlines()
    assert "could not be run" in line and "ENVREPLICA_MASTER_KEY" in line, line
    given = subprocess.run([*argv, shlex.join(["env", f"ENVREPLICA_MASTER_KEY={key}", *adapter])],
                           env=hermetic.child_env(), capture_output=True, text=True, timeout=600)
    assert given.returncode == 0, given.stdout[-2000:] + given.stderr
    assert "NOT compared" in given.stdout  # no test key: held to its responses only


def test_child_env_drops_envreplica_variables_but_the_kept_ones():
    environ = {"PATH": "/bin", "HOME": "/h", "NODE_OPTIONS": "x", "ENVREPLICA_MASTER_KEY": "k",
               "ENVREPLICA_TRACEBACK": "1", "ENVREPLICA_PURE_PYTHON": "1", "MY_ENVREPLICA_THING": "y"}
    assert hermetic.child_env({"ENVREPLICA_PAIRED_STEP_SOCKET": "/s"}, environ) == {
        "PATH": "/bin", "HOME": "/h", "NODE_OPTIONS": "x", "ENVREPLICA_PURE_PYTHON": "1", "MY_ENVREPLICA_THING": "y",
        "ENVREPLICA_PAIRED_STEP_SOCKET": "/s"}
    assert hermetic.caller_keys(environ) == ["ENVREPLICA_MASTER_KEY", "ENVREPLICA_TRACEBACK"]


def test_scrubbed_environ_sets_aside_and_puts_back(monkeypatch):
    monkeypatch.setenv("ENVREPLICA_TRACEBACK", "1")
    monkeypatch.setenv("ENVREPLICA_PURE_PYTHON", "1")
    with hermetic.scrubbed_environ():
        assert "ENVREPLICA_TRACEBACK" not in os.environ and os.environ["ENVREPLICA_PURE_PYTHON"] == "1"
    assert os.environ["ENVREPLICA_TRACEBACK"] == "1"
    assert json.dumps(hermetic.caller_keys({"ENVREPLICA_X": ""})) == '["ENVREPLICA_X"]'
