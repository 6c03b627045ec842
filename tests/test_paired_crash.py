"""The paired migration on SQLite (``impl.paired``) held to its model (``model.migration``), crash by crash.

The harness abandons ``migrate`` after each of its durable steps (a hook that stops the run right there,
the process's memory and lock gone, what it wrote and published kept; or ``kill -9`` of a child process),
then reruns ``migrate``, or selects ``recover`` and abandons that after each of its steps too, and after
every invocation compares the files with the model's successor: each store's version, admission, backup
and content (original, migrated, other), the published request, result, recovery plan and recovery result,
and the invocation's outcome (its refusal code included). Two invocations racing, and a writer process
writing throughout, are here too; so are four mutants of the implementation, each caught.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pytest

from envreplica.impl import paired as P
from envreplica.impl import writer as W
from envreplica.model import migration as mm
from envreplica.spec.migration import Crashed, Done, Refused

from paired_mutants import MUTANTS, install
from test_writer import KEY, make_v1

#: Every invocation the scenarios need is allowed; crashes are placed by the harness, never chosen.
CFG = mm.MigrationBounds("harness", migrations=9, recoveries=9, crashes=9, writes=0)
MIGRATE_STEPS = ("retain parent", "maintenance run", "maintenance resource", "backup run", "backup resource",
                 "apply run", "apply resource", "publish result", "complete run", "complete resource")
RECOVER_STEPS = ("publish recovery", "fence run", "fence resource", "restore run", "restore resource",
                 "publish recovery result", "reopen run", "reopen resource")
CRASHED = "crashed"


class Abandon(Exception):
    """The run stops here: what it committed and published stays, its memory and lock go."""


# ---------------------------------------------------------------------------
# The two sides


def model_run(st: mm.MigrationState, role: mm.Role, crash_after: Optional[str]) -> tuple[mm.MigrationState, str]:
    """One invocation on the model, alone, to its end, or crashed right after the step named ``crash_after``."""
    st, _ = mm.next_state(CFG, st, mm.Invoke(role))
    pid, result = st.procs[-1].pid, None
    while True:
        proc = next((p for p in st.procs if p.pid == pid), None)
        if proc is None:
            return st, outcome_of(result)
        step = proc.pc.value
        st, result = mm.next_state(CFG, st, mm.Step(pid))
        if isinstance(result, Refused):
            return st, result.code.value
        if step == crash_after:
            if any(p.pid == pid for p in st.procs):
                st, _ = mm.next_state(CFG, st, mm.Crash(pid))
            return st, CRASHED


def outcome_of(result) -> str:
    if isinstance(result, Done):
        return result.note
    if isinstance(result, Refused):
        return result.code.value
    assert isinstance(result, Crashed)
    return CRASHED


def observe_model(st: mm.MigrationState) -> tuple:
    stores = tuple((s.version, s.admission.value, s.backup.data.base.value if s.backup else None, s.data.base.value)
                   for s in st.stores)
    f = st.files
    return stores, (f.intent is not None, f.result is not None, f.recovery.restores if f.recovery else None,
                    f.recovery_result)


class Stores:
    """Two version-1 stores (run, resource) in a directory, and the impl's side of the harness."""

    def __init__(self, directory: Path, template: Path) -> None:
        directory.mkdir()
        self.paths = [directory / "run.db", directory / "resource.db"]
        for p in self.paths:
            shutil.copy(template, p)
        self.request = P.default_request(self.paths, W.SCHEMA_VERSION)
        self.original = [P.facts_of(p).data_sha256 for p in self.paths]

    def run(self, action: Callable[[Callable[[str], None]], P.Outcome], crash_after: Optional[str]) -> str:
        def hook(step: str) -> None:
            if step == crash_after:
                raise Abandon(step)

        try:
            return action(hook).status
        except Abandon:
            return CRASHED
        except P.PairedRefused as e:
            return e.code

    def migrate(self, crash_after: Optional[str] = None) -> str:
        return self.run(lambda hook: P.migrate_paired(self.paths, master_key=KEY, hook=hook), crash_after)

    def recover(self, crash_after: Optional[str] = None) -> str:
        return self.run(lambda hook: P.recover_paired(self.request, hook=hook), crash_after)

    def _backup(self, path: Path, i: int) -> Optional[str]:
        """What a backup holds: None (no backup), the store's original data, or anything else."""
        if not path.exists():
            return None
        conn = W._open_readonly(path)
        try:
            return "original" if P.data_sha256(conn) == self.original[i] else "other"
        finally:
            conn.close()

    def observe(self) -> tuple:
        req = json.loads(self.request.read_text()) if self.request.exists() else None
        rid = P._request_id(req) if req else None
        stores = []
        for i, p in enumerate(self.paths):
            f = P.facts_of(p)
            if req is not None and f.version == req["target"] and f.receipt == rid:
                base = "migrated"
            elif f.version == 1 and f.data_sha256 == self.original[i]:
                base = "original"
            else:
                base = "other"
            backup = self._backup(Path(req["stores"][i]["backup"]), i) if req is not None else None
            stores.append((f.version, f.admission or "open", backup, base))
        result, recovery, recovery_result = P._files(self.request)
        plan = tuple(json.loads(recovery.read_text())["restores"]) if recovery.exists() else None
        return tuple(stores), (self.request.exists(), result.exists(), plan, recovery_result.exists())


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return make_v1(tmp_path_factory.mktemp("template") / "store.db")


def _lockstep(stores: Stores, st: mm.MigrationState, role: mm.Role, crash_after: Optional[str],
              trail: list) -> mm.MigrationState:
    """One invocation on both sides; the outcomes and the files must agree."""
    st, model_outcome = model_run(st, role, crash_after)
    impl_outcome = stores.migrate(crash_after) if role is mm.Role.MIGRATE else stores.recover(crash_after)
    trail.append(f"{role.value} (crash after {crash_after})")
    where = " -> ".join(trail)
    assert impl_outcome == model_outcome, f"{where}: the implementation {impl_outcome}, the model {model_outcome}"
    assert stores.observe() == observe_model(st), f"{where}: files differ\n impl  {stores.observe()}\n model " \
                                                  f"{observe_model(st)}"
    return st


def _scenarios():
    for m in (*MIGRATE_STEPS, None):
        yield pytest.param(m, id=f"migrate-crash-after-{m or 'none'}")


@pytest.mark.parametrize("crash_after", list(_scenarios()))
def test_every_crash_of_migrate_then_rerun_or_recover_agrees_with_the_model(crash_after, template, tmp_path):
    checked = 0
    # a rerun of migrate resumes
    stores, trail = Stores(tmp_path / "rerun", template), []
    st = _lockstep(stores, mm.init(CFG), mm.Role.MIGRATE, crash_after, trail)
    st = _lockstep(stores, st, mm.Role.MIGRATE, None, trail)
    assert stores.observe()[1][1], "the rerun publishes the result"
    checked += 1
    # or recovery is selected, and crashes after each of its steps, then runs again
    for r in (*RECOVER_STEPS, None):
        stores, trail = Stores(tmp_path / f"recover-{r or 'none'}".replace(" ", "-"), template), []
        st = _lockstep(stores, mm.init(CFG), mm.Role.MIGRATE, crash_after, trail)
        st = _lockstep(stores, st, mm.Role.RECOVER, r, trail)
        st = _lockstep(stores, st, mm.Role.RECOVER, None, trail)
        st = _lockstep(stores, st, mm.Role.MIGRATE, None, trail)  # a migrate after: refused or done, as modelled
        checked += 1
    assert checked == 1 + len(RECOVER_STEPS) + 1


def test_a_recovery_ends_with_both_stores_as_before(template, tmp_path):
    stores = Stores(tmp_path / "s", template)
    assert stores.migrate("apply resource") == CRASHED
    assert stores.recover() == "recovered"
    assert [P.facts_of(p).data_sha256 for p in stores.paths] == stores.original
    assert all(P.facts_of(p).admission is None for p in stores.paths)
    for p in stores.paths:  # a writer of the old contract writes again
        conn = sqlite3.connect(str(p), isolation_level=None)
        W.register_writer(conn, 1)
        conn.execute("INSERT INTO projects VALUES ('p9', 0)")
        conn.close()


# ---------------------------------------------------------------------------
# kill -9 of a child process


KILL_POINTS = (("migrate", "backup resource"), ("migrate", "apply run"), ("migrate", "publish result"),
               ("recover", "fence resource"), ("recover", "restore run"))


@pytest.mark.parametrize("command, step", KILL_POINTS, ids=lambda x: x.replace(" ", "-"))
def test_kill_9_after_a_step_leaves_what_the_hook_leaves(command, step, template, tmp_path):
    """The in-process abandon is faithful: a real SIGKILL after the same step leaves the same files."""
    killed, abandoned = Stores(tmp_path / "killed", template), Stores(tmp_path / "abandoned", template)
    for stores in (killed, abandoned):
        if command == "recover":
            assert stores.migrate("apply run") == CRASHED
    env = dict(os.environ, ENVREPLICA_MASTER_KEY=KEY.hex(), ENVREPLICA_PAIRED_KILL_AFTER=step)
    argv = ["migrate", "--db", str(killed.paths[0]), "--db", str(killed.paths[1])] if command == "migrate" \
        else ["recover", "--request", str(killed.request)]
    proc = subprocess.run([sys.executable, "-m", "envreplica.cli.main", *argv], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
    outcome = abandoned.migrate(step) if command == "migrate" else abandoned.recover(step)
    assert outcome == CRASHED
    assert killed.observe() == abandoned.observe()
    # and the rerun after the kill finishes as after the abandon
    rerun = killed.migrate if command == "migrate" else killed.recover
    assert rerun() == (abandoned.migrate if command == "migrate" else abandoned.recover)()
    assert killed.observe() == abandoned.observe()


# ---------------------------------------------------------------------------
# Two invocations racing; a writer throughout


#: What the one that loses a race may say (exit 2, one line): the other's installation lock, its request
#: published first, its fence, or its write connection (an owner) seen while it prepared.
RACE_LOSSES = ("installation_lock_held", "paired_migration_request_conflict", "store_fenced", "physical_owner_alive")


def test_two_migrations_racing_leave_one_migration(template, tmp_path):
    """Two ``migrate`` processes on the same stores and request, started together: whatever the order in which
    they prepare, publish and lock, exactly one migration happens; the other exits 0 (it found the migration
    done, or finished it) or 2 with one line naming what the first holds, having changed nothing of its own;
    a rerun then finds the migration done."""
    stores = Stores(tmp_path / "s", template)
    env = dict(os.environ, ENVREPLICA_MASTER_KEY=KEY.hex())
    argv = [sys.executable, "-m", "envreplica.cli.main", "migrate", "--db", str(stores.paths[0]),
            "--db", str(stores.paths[1]), "--request", str(stores.request)]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    errors = [err.strip() for _, err in outputs]
    assert 0 in codes and set(codes) <= {0, 2}, (codes, errors)
    for code, err in zip(codes, errors):
        if code == 2:
            assert len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert any(f"refused: {loss}:" in err for loss in RACE_LOSSES), err
    assert stores.migrate() == "migrated"  # a rerun finds it done (and completes nothing new)
    assert stores.observe() == (((2, "open", "original", "migrated"),) * 2, (True, True, None, False))


def test_a_writer_throughout_loses_nothing_and_lands_nothing_under_the_fence(template, tmp_path):
    """A writer of the old contract inserts rows as fast as it can while the pair migrates: each insert it
    was told landed is in the migrated store (it landed before the fence and was backed up and migrated),
    and every insert after the fence was refused, by the fence or, once reopened, by the new version."""
    stores = Stores(tmp_path / "s", template)
    landed, refused, stop = [], [], threading.Event()

    def write() -> None:
        conn = sqlite3.connect(str(stores.paths[0]), isolation_level=None, timeout=10)
        W.register_writer(conn, 1)
        n = 0
        while not stop.is_set():
            n += 1
            try:
                conn.execute("INSERT INTO projects VALUES (?, 0)", (f"w{n}",))
                landed.append(f"w{n}")
            except sqlite3.DatabaseError as e:
                refused.append(str(e))
            time.sleep(0.001)  # a writer, not a lock-starving loop
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    while not landed and writer.is_alive():
        pass
    try:
        outcome = stores.migrate()
    finally:
        stop.set()
        writer.join()
    assert landed, refused[:3]
    if outcome != "migrated":  # a write landed between the request and the fence: recovery is selected
        assert outcome == "unknown_child_outcome"
        assert stores.recover() == "recovered"
    conn = W._open_readonly(stores.paths[0])
    try:
        there = {r[0] for r in conn.execute("SELECT project_id FROM projects")}
    finally:
        conn.close()
    assert set(landed) <= there, "a write the writer was told landed is gone"
    assert all(W.FENCE_MESSAGE in e or "locked" in e or "columns" in e for e in refused), set(refused)


# ---------------------------------------------------------------------------
# The mutants of impl.paired (tests/paired_mutants.py), caught by this harness too


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.fault == "step order"], ids=lambda m: m.name)
def test_step_order_mutant_is_caught(mutant, template, tmp_path, monkeypatch):
    install(mutant, monkeypatch)
    caught = []
    for m in (*MIGRATE_STEPS, None):
        for then in ("migrate", "recover"):
            stores, trail = Stores(tmp_path / f"{m}-{then}".replace(" ", "-"), template), []
            try:
                st = _lockstep(stores, mm.init(CFG), mm.Role.MIGRATE, m, trail)
                _lockstep(stores, st, mm.Role.MIGRATE if then == "migrate" else mm.Role.RECOVER, None, trail)
            except AssertionError as e:
                caught.append(str(e).splitlines()[0])
    assert caught, f"{mutant.name} agreed with the model after every crash"


def test_command_line(template, tmp_path, capsys, monkeypatch):
    from envreplica.cli.main import main

    monkeypatch.setenv("ENVREPLICA_MASTER_KEY", KEY.hex())
    stores = Stores(tmp_path / "s", template)
    a, b = (str(p) for p in stores.paths)
    assert main(["migrate", "--db", a, "--db", b, "--evidence", str(tmp_path / "e.json")]) == 2
    assert "--request" in capsys.readouterr().err
    assert main(["migrate", "--db", a, "--request", str(stores.request)]) == 2
    assert main(["recover", "--request", str(stores.request)]) == 2
    assert "no_migration_request" in capsys.readouterr().err
    assert main(["migrate", "--db", a, "--db", b]) == 0
    assert "migrated 2 stores together" in capsys.readouterr().out
    assert main(["recover", "--request", str(stores.request)]) == 2
    assert "migration_completed" in capsys.readouterr().err
    assert stat_mode(stores.request) == stat_mode(P._files(stores.request)[0]) == 0o600


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _snapshot(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if not p.name.endswith(".lock")}


@pytest.mark.parametrize("case", ["missing store", "foreign file", "already at the target", "no master key",
                                  "edited request", "edited result", "replaced backup", "recovery after a result",
                                  "edited recovery"])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case, template, tmp_path, monkeypatch, capsys):
    from envreplica.cli.main import main

    monkeypatch.setenv("ENVREPLICA_MASTER_KEY", KEY.hex())
    stores = Stores(tmp_path / "s", template)
    a, b = (str(p) for p in stores.paths)
    argv = ["migrate", "--db", a, "--db", b]
    if case == "missing store":
        argv[2] = str(tmp_path / "s" / "nope.db")
    elif case == "foreign file":
        stores.paths[0].unlink()
        conn = sqlite3.connect(a)
        conn.execute("CREATE TABLE other (x)")
        conn.commit()
        conn.close()
    elif case == "already at the target":
        assert main(argv) == 0
        for p in (*P._files(stores.request), stores.request):
            p.unlink(missing_ok=True)
    elif case == "no master key":
        monkeypatch.delenv("ENVREPLICA_MASTER_KEY")
    elif case == "edited request":
        assert stores.migrate("maintenance run") == CRASHED
        req = json.loads(stores.request.read_text())
        req["stores"][1]["backup"] = str(tmp_path / "elsewhere.bak")
        os.chmod(stores.request, 0o600)
        stores.request.write_text(json.dumps(req))
    elif case == "edited result":
        assert stores.migrate("publish result") == CRASHED
        result = P._files(stores.request)[0]
        data = json.loads(result.read_text())
        data["request"] = "0" * 16
        result.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    elif case == "replaced backup":
        assert stores.migrate("publish result") == CRASHED
        backup = Path(json.loads(stores.request.read_text())["stores"][0]["backup"])
        shutil.copy(stores.paths[1], backup)  # a backup of the other, migrated, store
    elif case == "edited recovery":
        assert stores.migrate("apply run") == CRASHED
        assert stores.recover("publish recovery") == CRASHED
        recovery = P._files(stores.request)[1]
        plan = json.loads(recovery.read_text())
        plan["restores"] = [False, False]  # the changed store would be left as it is
        recovery.write_text(json.dumps(plan))
        argv = ["recover", "--request", str(stores.request)]
    elif case == "recovery after a result":
        assert stores.migrate("publish result") == CRASHED
        argv = ["recover", "--request", str(stores.request)]
    capsys.readouterr()
    before = _snapshot(tmp_path / "s")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert _snapshot(tmp_path / "s") == before, "a refused invocation changed a file"
