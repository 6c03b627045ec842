"""The command line as a demanding user tries it: a real key, a real file, a wrong path, a killed process.

Each case runs ``envreplica`` in a subprocess and checks that it ends in one
clear line on standard error and exit status 2, never a traceback, and that
nothing at the path was changed; and that a killed adapter loses nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envreplica.impl.sealing import ENV_KEY, ENV_KEY_FILE

PY = sys.executable
REAL_KEY = "5a" * 32
STATUS = json.dumps({"id": 1, "op": "status"}) + "\n"


def envreplica(*args: str, cwd: Path, env_extra: dict | None = None, stdin: str = STATUS,
               timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_KEY, ENV_KEY_FILE, "ENVREPLICA_TRACEBACK")}
    env.update(env_extra or {})
    return subprocess.run([PY, "-m", "envreplica.cli.main", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if "TEST key" not in line]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def snapshot_of(path: Path) -> dict:
    return {p.name: (p.stat().st_mode, p.read_bytes() if p.is_file() else None) for p in sorted(path.iterdir())}


# ---------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------


def test_version_and_help_speak_plainly(tmp_path):
    """``--version`` names the installed version; no help text shows reStructuredText markup."""
    from importlib.metadata import version

    proc = envreplica("--version", cwd=tmp_path, stdin="")
    assert proc.returncode == 0 and proc.stdout.strip() == f"envreplica {version('envreplica')}"
    commands = ["check", "conformance", "simulate", "diagram", "replay", "report", "verify", "schema", "adapter",
                "migrate", "recover"]
    for args in [(), *((c,) for c in commands)]:
        proc = envreplica(*args, "--help", cwd=tmp_path, stdin="")
        assert proc.returncode == 0, (args, proc.stderr)
        assert "``" not in proc.stdout, (args, proc.stdout)


def test_the_adapter_needs_a_key(tmp_path):
    one_line_error(envreplica("adapter", "--db", "r.db", cwd=tmp_path), "No master key configured", ENV_KEY)
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("bad", ["zz", "ab" * 31, "ab" * 33, ""])
def test_a_malformed_key_is_one_line_and_never_echoed(tmp_path, bad):
    line = one_line_error(envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: bad}), ENV_KEY)
    assert bad == "" or bad not in line


def test_a_key_file_readable_by_others_is_refused(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(REAL_KEY + "\n")
    key_file.chmod(0o644)
    one_line_error(envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY_FILE: str(key_file)}),
                   "chmod 600")
    key_file.chmod(0o600)
    proc = envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY_FILE: str(key_file)})
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr
    assert "TEST key" not in proc.stderr


def test_the_test_key_is_asked_for_by_name_and_announced(tmp_path):
    proc = envreplica("adapter", "--db", "r.db", "--test-key", cwd=tmp_path)
    assert proc.returncode == 0 and "public TEST key (--test-key)" in proc.stderr
    one_line_error(envreplica("adapter", "--db", "s.db", "--test-key", "--store", "ssm", cwd=tmp_path),
                   "--test-key is refused with --store ssm")
    assert not (tmp_path / "s.db").exists()


def test_a_replica_made_under_one_key_is_refused_under_another(tmp_path):
    assert envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: REAL_KEY}).returncode == 0
    before = snapshot_of(tmp_path)
    one_line_error(envreplica("adapter", "--db", "r.db", "--test-key", cwd=tmp_path), "another master key")
    one_line_error(envreplica("verify", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: "6b" * 32}),
                   "another master key")
    assert snapshot_of(tmp_path) == before


def _lines(*requests: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in requests)


def test_a_replica_sealed_under_a_resets_key_is_replaced_by_the_next_adapters_reset(tmp_path):
    """A ``reset`` with ``masterKeyHex`` seals the adapter's own replica under the harness's key; the next
    adapter process (under its configured key) answers ``replica unavailable`` until its ``reset``, which
    gives a fresh replica (docs/protocol.md section 5). A key of its own stays protected (the test above)."""
    env = {ENV_KEY: REAL_KEY}
    first = envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra=env, stdin=_lines(
        {"id": 1, "op": "reset", "config": {"masterKeyHex": "6b" * 32}}, {"id": 2, "op": "status"}))
    assert first.returncode == 0 and [json.loads(x)["ok"] for x in first.stdout.splitlines()] == [True, True]
    second = envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra=env, stdin=_lines(
        {"id": 1, "op": "status"}, {"id": 2, "op": "reset"}, {"id": 3, "op": "status"}))
    assert second.returncode == 0, second.stderr
    before, reset, after = [json.loads(x) for x in second.stdout.splitlines()]
    assert before["ok"] is False and before["error"]["type"] == "unsupported", before
    assert before["error"]["message"].startswith("replica unavailable:") and "another master key" in before[
        "error"]["message"] and "send reset" in before["error"]["message"], before
    assert reset == {"id": 2, "ok": True, "result": {}} and after["ok"] is True
    # the new replica is sealed under the configured key: a third process opens it at once
    third = envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra=env)
    assert third.returncode == 0 and json.loads(third.stdout)["ok"] is True, third.stderr
    # and a replica sealed under the configured key is still refused under another, untouched
    kept = snapshot_of(tmp_path)
    one_line_error(envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: "7c" * 32}),
                   "another master key")
    assert snapshot_of(tmp_path) == kept


# ---------------------------------------------------------------------------
# Paths: nothing destroys a user's data
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("make, arg, fragment", [
    (lambda d: (d / "notes.txt").write_text("keep me\n"), "notes.txt", "not a SQLite database"),
    (lambda d: (d / "dir").mkdir(), "dir", "is a directory"),
    (lambda d: None, "missing/r.db", "does not exist"),
    (lambda d: sqlite3.connect(d / "app.db").execute("CREATE TABLE t (x)").connection.close(), "app.db",
     "not an envreplica replica"),
])
def test_the_adapter_refuses_a_path_it_did_not_create(tmp_path, make, arg, fragment):
    make(tmp_path)
    before = snapshot_of(tmp_path)
    one_line_error(envreplica("adapter", "--db", arg, "--test-key", cwd=tmp_path), fragment)
    assert snapshot_of(tmp_path) == before


def test_the_adapter_refuses_a_replica_it_did_not_create(tmp_path):
    from envreplica.impl.replica import SqliteReplica
    from envreplica.impl.sealing import Sealer

    SqliteReplica(tmp_path / "host.db", sealer=Sealer(bytes(range(32))), reader=None).close()
    before = snapshot_of(tmp_path)
    one_line_error(envreplica("adapter", "--db", "host.db", "--test-key", cwd=tmp_path),
                   "did not create", "reset empties")
    assert snapshot_of(tmp_path) == before


def test_a_second_adapter_on_the_same_file_is_refused(tmp_path):
    first = subprocess.Popen([PY, "-m", "envreplica.cli.main", "adapter", "--db", "r.db", "--test-key"], cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first.stdin.write(STATUS)
        first.stdin.flush()
        assert json.loads(first.stdout.readline())["ok"]
        one_line_error(envreplica("adapter", "--db", "r.db", "--test-key", cwd=tmp_path),
                       f"in use by process {first.pid}")
        one_line_error(envreplica("migrate", "--db", "r.db", cwd=tmp_path), "in use")
    finally:
        first.stdin.close()
        assert first.wait(30) == 0


def test_migrate_errors_are_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me\n")
    assert envreplica("adapter", "--db", "r.db", "--test-key", cwd=tmp_path).returncode == 0
    before = snapshot_of(tmp_path)
    one_line_error(envreplica("migrate", "--db", "notes.txt", cwd=tmp_path), "not a SQLite database")
    one_line_error(envreplica("migrate", "--db", "r.db", "--backup-dir", "notes.txt", cwd=tmp_path),
                   "is not a directory")
    one_line_error(envreplica("migrate", "--db", "absent.db", cwd=tmp_path), "no such database file")
    assert snapshot_of(tmp_path) == before
    for _ in range(2):  # a deploy step that always runs it
        proc = envreplica("migrate", "--db", "r.db", cwd=tmp_path)
        assert proc.returncode == 0 and "already at schema version" in proc.stdout, proc.stderr


def test_verify_and_diagram_errors_are_one_line(tmp_path):
    one_line_error(envreplica("verify", "--db", "absent.db", "--test-key", cwd=tmp_path), "no replica there")
    one_line_error(envreplica("verify", "--db", "absent.db", cwd=tmp_path), "no replica there")  # path before key
    one_line_error(envreplica("diagram", "--output", str(tmp_path), cwd=tmp_path))


# ---------------------------------------------------------------------------
# A killed adapter loses nothing
# ---------------------------------------------------------------------------


def _adapter_after_a_delivery(tmp_path, value: str) -> subprocess.Popen:
    """An adapter on ``r.db`` under a real key that has booted and installed ``value`` by a live delivery
    (every answer checked ok), waiting for its next request."""
    from adapter_requests import BOOT, delivery, put, rec

    requests = [*BOOT[1:], put("A", value=value), delivery(rec("A"), sequence=1, version=1)]
    proc = subprocess.Popen([PY, "-m", "envreplica.cli.main", "adapter", "--db", "r.db"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, ENV_KEY: REAL_KEY})
    try:
        for i, request in enumerate(requests):
            proc.stdin.write(json.dumps({"id": i, **request}) + "\n")
            proc.stdin.flush()
            response = json.loads(proc.stdout.readline())
            assert response["ok"] and response["result"].get("ok", True), response
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    return proc


def test_a_killed_adapter_loses_nothing_and_reopens_its_replica(tmp_path):
    proc = _adapter_after_a_delivery(tmp_path, "kept-after-kill")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    time.sleep(0.1)
    lines = [{"id": 1, "op": "receipts"}, {"id": 2, "op": "status"}]
    again = envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: REAL_KEY},
                       stdin="".join(json.dumps(r) + "\n" for r in lines))
    assert again.returncode == 0, again.stderr
    receipts, status = (json.loads(line)["result"] for line in again.stdout.splitlines())
    assert [(r["sequence"], r["ok"]) for r in receipts] == [(1, True)]
    assert status["appliedThrough"] == {"streamId": "s1", "sequence": 1}
    assert status["gateOpen"] is False  # a restart closes the gate, as the host does; nothing is lost
    assert envreplica("verify", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: REAL_KEY}).returncode == 0


# ---------------------------------------------------------------------------
# Exit statuses for CI (docs/ci.md): 2 when nothing could be checked, 3 for a bug
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("adapter, fragment", [
    ("/nonexistent/adapter --flag", "could not start the adapter"),
    (f"{PY} -c 'import sys; sys.exit(3)'", "exited with status 3"),
])
def test_an_adapter_that_cannot_run_is_exit_2_not_a_divergence(tmp_path, adapter, fragment):
    proc = envreplica("conformance", "--adapter", adapter, "--max-examples", "5", cwd=tmp_path, stdin="")
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    assert "Traceback" not in proc.stderr and "DIVERGENCE" not in proc.stdout
    (line,) = proc.stderr.splitlines()
    assert "the adapter could not be run, so nothing was checked" in line and fragment in line


def test_unknown_bounds_are_exit_2_before_any_stage(tmp_path):
    # one_line_error asserts an empty standard output: no stage printed anything, so none ran
    one_line_error(envreplica("check", "--bounds", "nope", cwd=tmp_path, stdin=""), "unknown bounds 'nope'",
                   "choose one of")


def test_a_bug_is_exit_3_with_its_traceback_and_one_line(monkeypatch, capsys):
    from envreplica.cli.errors import INTERNAL_ERROR_EXIT, guarded

    def broken(_args):
        raise KeyError("oops")

    assert guarded("envreplica check", broken, None) == INTERNAL_ERROR_EXIT == 3
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.rstrip().splitlines()[-1].startswith("envreplica check: internal error: KeyError")


#: A ``sitecustomize`` that takes ``envreplica.conformance.migration`` away from every process it starts in, as
#: the wheel that left it out did (issue 40).
WITHOUT_MIGRATION = """
import sys


class _LeftOut:
    def find_spec(self, name, path=None, target=None):
        if name == "envreplica.conformance.migration" or name.startswith("envreplica.conformance.migration."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _LeftOut())
"""


def test_a_bug_in_the_gates_model_check_process_is_exit_3_not_a_finding(tmp_path):
    """``check`` runs its model checks (and the migration lockstep) in a second process: a crash there was
    reported as the gate's FAIL, exit 1, as though the check had found something (issue 40: the wheel without
    ``envreplica.conformance.migration``). It is exit 3: the traceback, then the one line saying so, last."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WITHOUT_MIGRATION)
    proc = envreplica("check", "--bounds", "tiny", "--lockstep-examples", "2", "--no-concurrent", "--migration-bounds",
                      "none", "--migration-lockstep", "dev", "--migration-lockstep-examples", "1", "--lock-bounds", "none",
                      "--out", "out",
                      cwd=tmp_path, stdin="", timeout=600, env_extra={"PYTHONPATH": str(site)})
    assert proc.returncode == 3, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert "Traceback" in proc.stderr
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("envreplica check: internal error: ModuleNotFoundError") and "a bug in envreplica" in last
    assert "FAIL" not in proc.stdout  # no verdict: nothing was found


def test_a_model_check_process_ended_from_outside_is_exit_3_with_one_line(tmp_path, capsys):
    """A model-check process killed by a signal (out of memory, a kill) left no verdict and no traceback of
    its own: one line says what ended it; exit 3, not the gate's FAIL."""
    import tempfile

    from envreplica.cli.main import _BackgroundModelCheck, _without_verdict

    child = _BackgroundModelCheck.__new__(_BackgroundModelCheck)
    child.started, child.output = time.perf_counter(), tempfile.TemporaryFile(mode="w+", encoding="utf-8")
    child.process = subprocess.Popen([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    rc, output, *_ = child.join()
    assert rc == -signal.SIGKILL
    assert _without_verdict(rc, output) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("envreplica check: internal error: the model check's process was ended by SIGKILL")


# ---------------------------------------------------------------------------
# Ctrl-C, FIFOs, files of the wrong kind, a refused file left as it was
# ---------------------------------------------------------------------------


def test_ctrl_c_ends_in_one_line_and_exit_130_and_loses_nothing(tmp_path):
    proc = _adapter_after_a_delivery(tmp_path, "kept-after-ctrl-c")
    proc.send_signal(signal.SIGINT)  # waiting for the next request
    assert proc.wait(600) == 130  # 600 s: a hang guard
    err = proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines() == [
        "envreplica adapter: interrupted (Ctrl-C) before it finished; its output above is incomplete"]
    again = envreplica("adapter", "--db", "r.db", cwd=tmp_path, env_extra={ENV_KEY: REAL_KEY},
                       stdin=json.dumps({"id": 1, "op": "receipts"}) + "\n")
    assert [(r["sequence"], r["ok"]) for r in json.loads(again.stdout)["result"]] == [(1, True)]


def test_a_ctrl_c_python_drops_still_ends_the_adapter(tmp_path):
    """A KeyboardInterrupt raised where Python drops it (a ``__del__``, a gc callback) is raised again."""
    script = tmp_path / "drops.py"
    script.write_text(
        "import sys, time\n"
        "from envreplica.conformance import adapter\n"
        "original = adapter.serve\n"
        "def serve(driver, stdin, stdout):\n"
        "    print('ready', file=sys.stderr, flush=True)\n"
        "    try:\n"
        "        time.sleep(600)  # the first KeyboardInterrupt lands here and is dropped\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
        "    return original(driver, stdin, stdout)  # waits for a request: only the repeat ends it\n"
        "adapter.serve = serve\n"
        "from envreplica.cli.main import main\n"
        "sys.exit(main(['adapter', '--impl', 'model']))\n")
    proc = subprocess.Popen([PY, str(script)], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(600) == 130  # 600 s: a hang guard; without the repeat it waits for stdin forever
    finally:
        proc.kill()
        proc.wait(600)
    assert proc.stderr.read().strip().splitlines() == [
        "envreplica adapter: interrupted (Ctrl-C) before it finished; its output above is incomplete"]


def test_an_interrupt_is_exit_130_with_one_line_in_every_command(capsys):
    from envreplica.cli.errors import INTERRUPTED_EXIT, guarded

    def interrupted(_args):
        raise KeyboardInterrupt

    assert guarded("envreplica check", interrupted, None) == INTERRUPTED_EXIT == 130
    assert capsys.readouterr().err == ("envreplica check: interrupted (Ctrl-C) before it finished; its output above "
                                       "is incomplete\n")


def test_a_fifo_is_refused_at_once_never_read(tmp_path):
    os.mkfifo(tmp_path / "key.fifo", 0o600)
    os.mkfifo(tmp_path / "trace.jsonl")
    os.mkfifo(tmp_path / "anchor")
    quick = dict(cwd=tmp_path, timeout=30)  # reading a FIFO would wait for a writer forever
    one_line_error(envreplica("adapter", "--db", "r.db", env_extra={ENV_KEY_FILE: "key.fifo"}, **quick),
                   "must be a regular file")
    for args in (["replay", "trace.jsonl"], ["diagram", "--trace", "trace.jsonl"], ["report", "trace.jsonl"]):
        one_line_error(envreplica(*args, **quick), "trace.jsonl is not a regular file")
    one_line_error(envreplica("adapter", "--db", "r.db", "--anchor", "anchor", "--test-key", **quick),
                   "anchor is not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anchor", "key.fifo", "trace.jsonl"]


def test_replay_of_a_file_of_the_wrong_kind_is_exit_2(tmp_path):
    (tmp_path / "t.itf.json").write_text("hi\n")
    (tmp_path / "s.itf.json").write_text('{"states": 3}')
    (tmp_path / "u.itf.json").write_bytes(b"\xff\xfe")
    (tmp_path / "bad.jsonl").write_text("nope\n")
    (tmp_path / "empty.jsonl").write_text("")
    one_line_error(envreplica("replay", "t.itf.json", cwd=tmp_path), "t.itf.json: not JSON")
    one_line_error(envreplica("replay", "s.itf.json", cwd=tmp_path), "not an ITF trace")
    one_line_error(envreplica("replay", "u.itf.json", cwd=tmp_path), "not UTF-8 text")
    one_line_error(envreplica("replay", "bad.jsonl", cwd=tmp_path), "bad.jsonl:1: not a JSON line")
    one_line_error(envreplica("replay", "empty.jsonl", cwd=tmp_path), "holds no requests")


def test_a_wrong_anchor_creates_no_replica(tmp_path):
    (tmp_path / "anchor").write_text("not an anchor\n")
    one_line_error(envreplica("adapter", "--db", "r.db", "--anchor", "anchor", "--test-key", cwd=tmp_path),
                   "is not an envreplica anchor file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anchor"]


def test_a_damaged_replica_is_refused_and_left_as_it_was(tmp_path):
    assert envreplica("adapter", "--db", "good.db", "--test-key", cwd=tmp_path).returncode == 0
    whole = (tmp_path / "good.db").read_bytes()
    for size in (300, 2000, len(whole) // 2):
        damaged = tmp_path / f"cut{size}.db"
        damaged.write_bytes(whole[:size])
        for args in (["verify", "--test-key"], ["adapter", "--test-key"], ["migrate"]):
            proc = envreplica(args[0], "--db", damaged.name, *args[1:], cwd=tmp_path)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
            assert not Path(f"{damaged}-wal").exists() and not Path(f"{damaged}-shm").exists(), (size, args)
            assert damaged.read_bytes() == whole[:size]


def test_checks_background_model_check_interrupted_is_an_interrupt_of_the_gate():
    """A Ctrl-C the parent missed (Python drops one raised inside a gc callback) still ends the gate at 130."""
    import tempfile

    from envreplica.cli.main import _BackgroundModelCheck

    child = _BackgroundModelCheck.__new__(_BackgroundModelCheck)
    child.started, child.output = time.perf_counter(), tempfile.TemporaryFile(mode="w+", encoding="utf-8")
    child.process = subprocess.Popen([PY, "-c", "import sys; sys.exit(130)"])
    with pytest.raises(KeyboardInterrupt):
        child.join()
    child.stop()  # idempotent once the child ended
    running = _BackgroundModelCheck.__new__(_BackgroundModelCheck)
    running.output = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
    running.process = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    running.stop()  # an interrupted gate does not leave its model check running on
    assert running.process.returncode is not None and running.output.closed


@pytest.mark.parametrize("command", ["verify", "migrate", "adapter"])
def test_an_empty_db_path_is_named_as_such(tmp_path, command):
    proc = envreplica(command, "--db", "", cwd=tmp_path, stdin="")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "argument --db: '' is an empty path" in proc.stderr.splitlines()[-1]  # not ". is a directory"
    assert list(tmp_path.iterdir()) == []
