"""The paired migration under a hostile operator (issue 39, items 3 to 6): every case ends in one line, never a hang or
a traceback, and either changes nothing or says what stands and what completes it, and that command does.

- **Files of the wrong kind** (a FIFO, a socket, a device, a directory, a text file, a symlink) at every path the
  commands open: the request and the files beside it, the backups, ``--backup-dir``, the stores. Each is refused
  at once, naming the path; a backup path's is refused before anything is published or fenced.
- **Backups that are the stores**: a backup path that is a store (a symlink to it, a hard link of it), or another
  store's backup, is refused; a copy of each store's original always exists once the stores are changed.
- **File system faults**: a full file system at each write (injected at every write site, and a real small tmpfs
  at every size too small to finish), a request nested too deep to parse: refused with what stands.
- **Signals**: SIGINT and SIGTERM at every step boundary of ``migrate`` and ``recover`` (a real process paused
  there through ``ENVREPLICA_PAIRED_STEP_SOCKET``), and at spread times through the whole ``envreplica`` command,
  start-up and end included: one line, 130 or 143 (or 0 once the work was done), saying what stands.

Every hang guard is a safety net in seconds (``GUARD``), never the thing asserted.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from envreplica.conformance.migration.disk import KEY, build_v1
from envreplica.conformance.migration.invocations import Mode, Runners
from envreplica.impl import paired as P
from envreplica.impl import writer as W

from test_paired_errors import Pair, _crashed_after, _one_line, _run, _values_open, snapshot

#: Seconds before a command that should have answered at once is called hung (a safety net, never a verdict).
GUARD = 120
REPO = Path(__file__).resolve().parent.parent
ENTRY_SCRIPT = Path(sys.executable).with_name("envreplica")


@pytest.fixture
def pair(tmp_path) -> Pair:
    return Pair(tmp_path / "stores")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVREPLICA_")}
    env.update(ENVREPLICA_MASTER_KEY=KEY.hex(), **extra)
    return env


def _cli(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    """``envreplica ARGV`` as a process of its own (a FIFO read in this process would hang the test run)."""
    return subprocess.run([sys.executable, "-m", "envreplica.cli.main", *argv], env=_env(), capture_output=True,
                          text=True, timeout=GUARD, **kw)


def _refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line of a refusal (exit 2) that names each of ``words``."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err)
    _one_line(err)
    for w in words:
        assert w in err, (w, err)
    return err


def _migrated(pair: Pair) -> None:
    """Both stores at version 2, open, every value readable under the key: nothing was lost."""
    for p in (pair.run, pair.resource):
        facts = P.facts_of(p)
        assert (facts.version, facts.admission) == (2, None), (p, facts)
        assert _values_open(p, KEY) == 2


def _original(pair: Pair) -> None:
    """Both stores back at version 1, open, every value readable under the key."""
    for p in (pair.run, pair.resource):
        facts = P.facts_of(p)
        assert (facts.version, facts.admission) == (1, None), (p, facts)
        assert _values_open(p, KEY) == 2


def _backup(pair: Pair, i: int = 0) -> Path:
    store = (pair.run, pair.resource)[i]
    return store.with_name(f"{store.name}.v1.paired.bak")


def _socket_at(path: Path) -> socket.socket:
    """A Unix socket bound at ``path``, bound by its name from its directory: a socket's path is limited to about
    100 bytes, which a deep temporary directory (pytest's, under xdist) exceeds."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        s.bind(path.name)
    finally:
        os.chdir(here)
    return s


# ---------------------------------------------------------------------------
# Item 3: a FIFO (a socket, a device) at any path a command opens is refused at once, naming the path


FRESH_SPECIALS = ["fifo at the run backup", "fifo at the resource backup", "fifo as --backup-dir",
                  "fifo at the request", "socket at the request", "device at the request", "fifo at the lock",
                  "fifo at a store"]


@pytest.mark.parametrize("case", FRESH_SPECIALS)
def test_a_special_file_is_refused_at_once_before_anything_is_published(case, pair):
    argv, target = pair.migrate, None
    if case.endswith("run backup"):
        target = _backup(pair, 0)
    elif case.endswith("resource backup"):
        target = _backup(pair, 1)
    elif case.endswith("--backup-dir"):
        target = pair.root / "backups"
        argv = [*argv, "--backup-dir", str(target)]
    elif case.endswith("the request") or case.endswith("the lock"):
        target = pair.request if case.endswith("request") else pair.request.with_name(pair.request.name + ".lock")
    else:
        target = pair.root / "third.db"
        argv = [*argv, "--db", str(target)]
    held = None
    if case.startswith("fifo"):
        os.mkfifo(target)
    elif case.startswith("socket"):
        held = _socket_at(target)
    else:
        target.symlink_to("/dev/zero")
    try:
        before = pair.snapshot()
        err = _refused(_cli(argv), str(target))
        assert pair.snapshot() == before, err
    finally:
        if held is not None:
            held.close()
    assert not pair.request.exists() or case.endswith("request")


@pytest.mark.parametrize("command", ["migrate --request", "recover --request", "migrate --db"])
def test_a_fifo_at_the_request_is_refused_by_every_command(command, pair):
    os.mkfifo(pair.request)
    argv = {"migrate --request": ["migrate", "--request", str(pair.request)],
            "recover --request": ["recover", "--request", str(pair.request)], "migrate --db": pair.migrate}[command]
    before = pair.snapshot()
    _refused(_cli(argv), str(pair.request))
    assert pair.snapshot() == before


@pytest.mark.parametrize("beside", [".result.json", ".recovery.json", ".recovery.json.result.json", ".lock"])
@pytest.mark.parametrize("command", ["migrate", "recover"])
def test_a_fifo_beside_a_published_request_is_refused_saying_what_stands(beside, command, pair):
    _crashed_after(pair, "apply resource")  # published, both fenced, both applied
    fifo = pair.request.with_name(pair.request.name + beside)
    if fifo.exists():  # the lock file stays once created
        fifo.unlink()
    os.mkfifo(fifo)
    before = pair.snapshot()
    proc = _cli([command, "--request", str(pair.request)])
    err = proc.stderr.strip()
    assert proc.returncode in (1, 2) and "Traceback" not in _one_line(err), err
    if command == "migrate" or beside in (".recovery.json", ".lock"):
        assert str(fifo) in err, err  # the file it would have read or locked
    assert pair.snapshot() == before
    os.unlink(fifo)
    assert _cli(["migrate", "--request", str(pair.request)]).returncode == 0  # nothing lost: it completes
    _migrated(pair)


@pytest.mark.parametrize("command", ["migrate", "recover"])
def test_a_fifo_at_a_store_of_a_published_request_is_refused(command, pair):
    _crashed_after(pair, "apply run")
    aside = pair.root / "aside.db"
    os.rename(pair.resource, aside)
    os.mkfifo(pair.resource)
    _refused(_cli([command, "--request", str(pair.request)]), str(pair.resource), "store_unusable")
    os.unlink(pair.resource)
    os.rename(aside, pair.resource)
    assert _cli([command, "--request", str(pair.request)]).returncode == 0
    (_migrated if command == "migrate" else _original)(pair)


def _paused(runners: Runners, argv: list[str], at: str):
    """``envreplica ARGV`` as a real process (forked from the zygote), paused once step ``at`` is done."""
    inv = runners.start(Mode.FORK, argv, {"ENVREPLICA_MASTER_KEY": KEY.hex()})
    assert inv.early is None, inv.early
    while True:
        event = inv.go()
        assert not event.ended, (at, event)
        if event.step == at:
            return inv


@pytest.mark.parametrize("thing", ["fifo", "directory", "text file", "symlink to the store", "hard link of the store",
                                   "another database"])
def test_a_file_at_a_backup_path_after_the_fences_is_refused_saying_what_stands(thing, pair, tmp_path):
    """The operator puts something at the run store's backup path once both stores are fenced: the step refuses
    it at once (a FIFO never opened), says the stores are fenced by the request and what completes it; once it
    is moved away, that command completes the migration."""
    backup = _backup(pair, 0)
    with Runners(tmp_path / "runners") as runners:
        inv = _paused(runners, pair.migrate, "maintenance resource")
        make: dict[str, Callable[[], object]] = {
            "fifo": lambda: os.mkfifo(backup), "directory": backup.mkdir,
            "text file": lambda: backup.write_text("not a backup\n"),
            "symlink to the store": lambda: backup.symlink_to(pair.run),
            "hard link of the store": lambda: backup.hardlink_to(pair.run),
            "another database": lambda: build_v1(backup, other=True)}
        make[thing]()
        while not (end := inv.go()).ended:  # the drain or the backup refuses it
            assert end.step in ("drain", "backup run"), end
    assert end.status == 2, end
    err = _one_line(end.stderr.strip())
    assert str(backup) in err and "fenced for maintenance" in err, err
    assert f"envreplica migrate --request {pair.request}" in err, err
    assert [P.facts_of(p).admission for p in (pair.run, pair.resource)] == ["maintenance"] * 2
    if backup.is_dir() and not backup.is_symlink():
        backup.rmdir()
    else:
        backup.unlink()
    assert _cli(["migrate", "--request", str(pair.request)]).returncode == 0
    _migrated(pair)


# ---------------------------------------------------------------------------
# Item 4: what is already at a backup path, a request nested too deep, a full file system


@pytest.mark.parametrize("thing", ["text file", "directory", "another database", "empty file"])
def test_something_already_at_a_backup_path_is_refused_before_anything_changes(thing, pair, capsys, monkeypatch):
    backup = _backup(pair, 1)
    if thing == "text file":
        backup.write_text("notes\n")
    elif thing == "directory":
        backup.mkdir()
    elif thing == "empty file":
        backup.touch()
    else:
        build_v1(backup, other=True)
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch)
    assert status == 2 and str(backup) in _one_line(err) and "nothing was changed" in err, err
    assert pair.snapshot() == before


def test_a_backup_there_with_the_original_data_is_kept(pair, capsys, monkeypatch):
    """The model's reading: a backup that is there is kept when it holds the store's source."""
    conn = sqlite3.connect(pair.run)
    try:
        W.copy_store(conn, _backup(pair, 0), P.facts_of(pair.run).data_sha256, digest=P.data_sha256)
    finally:
        conn.close()
    status, err = _run(pair.migrate, capsys, monkeypatch)
    assert status == 0, err
    _migrated(pair)


NEST = 100_000


@pytest.mark.parametrize("doc", ["request", "result", "recovery"])
def test_a_publication_nested_too_deep_is_refused_as_damaged(doc, pair, capsys, monkeypatch):
    if doc == "recovery":
        _crashed_after(pair, "apply run")

        def stop(step: str) -> None:
            if step == "publish recovery":
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            P.recover_paired(pair.request, hook=stop)
    else:
        _crashed_after(pair, "maintenance resource" if doc == "request" else "publish result")
    path = {"request": pair.request, "result": P._files(pair.request)[0],
            "recovery": P._files(pair.request)[1]}[doc]
    saved = path.read_bytes()
    os.chmod(path, 0o600)
    path.write_text("[" * NEST + "]" * NEST)
    before = pair.snapshot()
    commands = [["migrate", "--request", str(pair.request)], ["recover", "--request", str(pair.request)]]
    if doc == "request":
        commands.append(pair.migrate)
    for argv in commands:
        status, err = _run(argv, capsys, monkeypatch)
        assert status in (1, 2) and "Traceback" not in _one_line(err), err
        if not (doc == "result" and argv[0] == "recover") and not (doc == "recovery" and argv[0] == "migrate"):
            assert str(path) in err and "Put back" in err, err
        assert pair.snapshot() == before, err
    path.write_bytes(saved)
    command = "recover" if doc == "recovery" else "migrate"
    status, err = _run([command, "--request", str(pair.request)], capsys, monkeypatch)
    assert status == 0, err
    (_original if doc == "recovery" else _migrated)(pair)


class Full:
    """``OSError(ENOSPC)`` from the ``nth`` write the protocol's own code makes (creating a file, fsync, link,
    replace); SQLite's own writes are the tmpfs test's."""

    SITES = ("open", "fsync", "link", "replace")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
        self.nth, self.calls, self.fired = nth, 0, None
        for name in self.SITES:
            original = getattr(os, name)
            monkeypatch.setattr(os, name, self._faulty(name, original))

    def _faulty(self, name: str, original: Callable) -> Callable:
        def call(*args, **kwargs):
            if name == "open" and not (args[1] if len(args) > 1 else kwargs.get("flags", 0)) & os.O_CREAT:
                return original(*args, **kwargs)
            self.calls += 1
            if self.calls == self.nth:
                self.fired = (name, str(args[0]))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[0]))
            return original(*args, **kwargs)

        return call


def _sweep_full(template: Pair, tmp_path: Path, prepare: Callable[[Pair], None],
                action: Callable[[Pair], Callable[[], P.Outcome]], name: str, capsys,
                check: Callable[[Pair], None]) -> int:
    """Run ``action`` once per write site, the nth failing with ENOSPC (n = 1, 2, ... until none is left): each
    run ends in one line, done (0) or refused (2) saying what stands; then the command it names completes."""
    n = 0
    while True:
        n += 1
        pair = Pair(tmp_path / f"n{n}")
        for p in (pair.run, pair.resource):
            shutil.copyfile(template.run, p)
        prepare(pair)
        with pytest.MonkeyPatch.context() as mp:
            full = Full(mp, n)
            capsys.readouterr()
            status = P.run_command(action(pair), name)
        err = capsys.readouterr().err.strip()
        if full.fired is None:
            assert status == 0, err
            check(pair)
            return n
        assert status in (0, 2), (full.fired, err)
        if status == 2:
            _one_line(err)
            assert "No space left on device" in err and "storage_error" in err, (full.fired, err)
            if pair.request.exists():
                assert f"--request {pair.request}" in err, (full.fired, err)
            else:
                assert "nothing was changed" in err, (full.fired, err)
            assert P.run_command(action(pair), name) == 0, capsys.readouterr().err  # space freed: it completes
        check(pair)


def test_a_full_file_system_at_each_write_of_migrate_is_refused_saying_what_stands(pair, tmp_path, capsys):
    sites = _sweep_full(pair, tmp_path, lambda p: None,
                        lambda p: lambda: P.migrate_paired([p.run, p.resource], master_key=KEY), "migrate", capsys,
                        _migrated)
    assert sites > 8  # the request, the lock, two backups, the result: each created, synced and linked


def test_a_full_file_system_at_each_write_of_recover_is_refused_saying_what_stands(pair, tmp_path, capsys):
    sites = _sweep_full(pair, tmp_path, lambda p: _crashed_after(p, "apply run"),
                        lambda p: lambda: P.recover_paired(p.request), "recover", capsys, _original)
    assert sites > 3


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs of its own (root only), whose size the test sets: ``resize(bytes)``."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("mount -t tmpfs does not work here")

    def resize(size: int) -> bool:
        return subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)],
                              capture_output=True).returncode == 0

    try:
        yield mount, resize
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _used(mount: Path) -> int:
    st = os.statvfs(mount)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_every_size_of_a_file_system_too_small_to_finish_is_refused_saying_what_stands(small_tmpfs, pair, capsys,
                                                                                      monkeypatch):
    """The stores on a real tmpfs with room for the stores and ``extra`` bytes more, ``extra`` growing a few pages at
    a time until the migration fits: each run that does not fit ends in one line saying what stands (never a
    traceback); once space is freed, the command the line names completes it, every value readable."""
    mount, resize = small_tmpfs
    page, extra, refused, outcomes = 4096, 0, 0, set()
    while True:
        for name in list(os.listdir(mount)):
            (mount / name).unlink()
        assert resize(4 << 20)
        sub = Pair.__new__(Pair)
        sub.root, sub.run, sub.resource = mount, mount / "run.db", mount / "resource.db"
        sub.request = P.default_request([sub.run, sub.resource], W.SCHEMA_VERSION)
        for p in (sub.run, sub.resource):
            shutil.copyfile(pair.run, p)
        assert resize(_used(mount) + extra)
        before = snapshot(mount)
        status, err = _run(sub.migrate, capsys, monkeypatch)
        if status == 0:
            break
        refused += 1
        assert status == 2 and "Traceback" not in _one_line(err), (extra, err)
        outcomes.add(err.split(": ")[2] if "refused: " in err else err)
        if sub.request.exists():
            assert f"envreplica migrate --request {sub.request}" in err, (extra, err)
        else:
            assert "nothing was changed" in err and snapshot(mount) == before, (extra, err)
        assert resize(4 << 20)  # space freed
        argv = ["migrate", "--request", str(sub.request)] if sub.request.exists() else sub.migrate
        status, err = _run(argv, capsys, monkeypatch)
        assert status == 0, (extra, err)
        _migrated(sub)
        extra += 3 * page
        assert extra < 4 << 20, "the migration never fitted"
    _migrated(sub)
    assert refused > 10, (refused, outcomes)  # sizes from nothing left up to the backups, the log, the result


# ---------------------------------------------------------------------------
# Item 5: a backup path that is a store, or another store's backup


@pytest.mark.parametrize("how", ["a symlink to the store", "a symlink to the other store", "a hard link of the store",
                                 "a symlink to another file", "a dangling symlink", "another store's backup",
                                 "the request"])
def test_a_backup_path_that_is_not_a_file_of_its_own_is_refused_before_anything_changes(how, pair, capsys,
                                                                                       monkeypatch):
    backup = _backup(pair, 0)
    argv = pair.migrate
    if how == "a symlink to the store":
        backup.symlink_to(pair.run)
    elif how == "a symlink to the other store":
        backup.symlink_to(pair.resource)
    elif how == "a hard link of the store":
        backup.hardlink_to(pair.run)
    elif how == "a symlink to another file":
        (pair.root / "notes.txt").write_text("x\n")
        backup.symlink_to(pair.root / "notes.txt")
    elif how == "a dangling symlink":
        backup.symlink_to(pair.root / "nowhere" / "run.bak")
    elif how == "another store's backup":  # two stores of one name in two directories, one --backup-dir
        other = pair.root / "b"
        other.mkdir()
        shutil.copyfile(pair.resource, other / "run.db")
        backup = pair.root / "backups" / "run.db.v1.paired.bak"
        argv = ["migrate", "--db", str(pair.run), "--db", str(other / "run.db"), "--backup-dir",
                str(pair.root / "backups")]
    else:  # the request file named as the backup's path
        argv = [*argv, "--request", str(backup)]
    before = pair.snapshot()
    status, err = _run(argv, capsys, monkeypatch)
    assert status == 2 and str(backup) in _one_line(err) and "nothing was changed" in err, err
    assert ".tmp" not in err, err  # the path the operator gave, not a temporary file of envreplica's
    assert pair.snapshot() == before


def test_a_published_request_whose_backup_path_became_the_store_is_refused_saying_what_stands(pair, capsys,
                                                                                             monkeypatch):
    _crashed_after(pair, "maintenance resource")
    backup = _backup(pair, 1)
    backup.hardlink_to(pair.resource)
    before = pair.snapshot()
    status, err = _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)
    assert status == 2 and "backup_path_unusable" in _one_line(err) and "fenced for maintenance" in err, err
    assert pair.snapshot() == before
    backup.unlink()
    assert _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)[0] == 0
    _migrated(pair)
    result = json.loads(P._files(pair.request)[0].read_text())
    for entry, store in zip(result["backups"], (pair.run, pair.resource)):  # each a copy of its own
        assert os.stat(entry["path"]).st_ino != os.stat(store).st_ino and not Path(entry["path"]).is_symlink()


def test_a_bad_backup_dir_is_refused_naming_it(pair, capsys, monkeypatch):
    bdir = pair.root / "backups"
    bdir.write_text("a file, not a directory\n")
    before = pair.snapshot()
    status, err = _run([*pair.migrate, "--backup-dir", str(bdir)], capsys, monkeypatch)
    assert status == 2 and f"{bdir} is a regular file, not a directory" in _one_line(err), err
    assert ".tmp" not in err and pair.snapshot() == before
    missing = pair.root / "new" / "backups"  # a directory that is not there yet is created
    assert _run([*pair.migrate, "--backup-dir", str(missing)], capsys, monkeypatch)[0] == 0
    assert (missing / "run.db.v1.paired.bak").is_file()


# ---------------------------------------------------------------------------
# Item 6: messages mid-protocol say what stands and what completes it


def _hooked(pair: Pair, at: str, act: Callable[[], None], capsys) -> tuple[int, str]:
    def hook(step: str) -> None:
        if step == at:
            act()

    capsys.readouterr()
    status = P.run_command(lambda: P.migrate_paired([pair.run, pair.resource], master_key=KEY, hook=hook),
                           "migrate")
    return status, capsys.readouterr().err.strip()


def test_a_backup_conflict_mid_protocol_says_the_stores_are_fenced_and_what_completes_it(pair, capsys, monkeypatch):
    backup = _backup(pair, 0)
    status, err = _hooked(pair, "drain", lambda: build_v1(backup, other=True), capsys)
    assert status == 2 and "backup_conflict" in _one_line(err), err
    assert "the request is published" in err and "run.db is fenced for maintenance" in err, err
    assert "resource.db is fenced for maintenance" in err and f"envreplica migrate --request {pair.request}" in err
    backup.rename(pair.root / "moved-aside.db")
    assert _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)[0] == 0
    _migrated(pair)


@pytest.mark.parametrize("damage", ["truncated", "emptied", "not UTF-8"])
def test_a_damaged_request_says_to_put_it_back(damage, pair, capsys, monkeypatch):
    _crashed_after(pair, "maintenance resource")
    saved = pair.request.read_bytes()
    os.chmod(pair.request, 0o600)
    pair.request.write_bytes({"truncated": saved[: len(saved) // 2], "emptied": b"",
                              "not UTF-8": b"\xff\xfe" + saved}[damage])
    before = pair.snapshot()
    for argv in (["migrate", "--request", str(pair.request)], ["recover", "--request", str(pair.request)],
                 pair.migrate):
        status, err = _run(argv, capsys, monkeypatch)
        assert status == 2 and "Put back" in _one_line(err) and str(pair.request) in err, err
        assert pair.snapshot() == before
    pair.request.write_bytes(saved)
    assert _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)[0] == 0
    _migrated(pair)


def test_a_deleted_request_is_named_as_missing_with_the_way_back(pair, capsys, monkeypatch):
    _crashed_after(pair, "maintenance resource")
    kept = pair.root.parent / "kept-copy.json"
    pair.request.rename(kept)
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch)
    assert status == 2 and "store_fenced" in _one_line(err) and "missing" in err and "Put back" in err, err
    assert f"envreplica migrate --request {pair.request}" in err, err
    for command in ("recover", "migrate"):
        status, err = _run([command, "--request", str(pair.request)], capsys, monkeypatch)
        assert status == 2 and "no_migration_request" in _one_line(err) and "put back the copy" in err, err
    assert pair.snapshot() == before
    kept.rename(pair.request)
    assert _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)[0] == 0
    _migrated(pair)


# -- signals at every step boundary: a real process paused there, then signalled


def _steps_of(runners: Runners, argv: list[str], prepare: Callable[[], Pair], tmp_path: Path) -> list[str]:
    """The steps ``argv`` takes, from a run let go to its end."""
    pair = prepare()
    inv = runners.start(Mode.FORK, [a.replace("{root}", str(pair.root)) for a in argv],
                        {"ENVREPLICA_MASTER_KEY": KEY.hex()})
    steps = []
    while not (event := inv.go()).ended:
        steps.append(event.step)
    assert event.status == 0, event
    return steps


def _signalled_at(pair: Pair, runners: Runners, argv: list[str], index: int, sig: int):
    inv = runners.start(Mode.FORK, argv, {"ENVREPLICA_MASTER_KEY": KEY.hex()})
    step = None
    for _ in range(index + 1):
        event = inv.go()
        assert not event.ended, event
        step = event.step
    assert inv.pid is not None
    os.kill(inv.pid, sig)
    end = inv.go()  # it stops where it waits: the signal's exception leaves the step socket's read
    assert end.ended, (step, end)
    return step, end


def _judge_signalled(pair: Pair, step: str, end, sig: int, command: str) -> None:
    """One line, 128 + the signal, saying what stands; then the command it names completes."""
    assert end.status == 128 + sig, (step, end)
    err = _one_line(end.stderr.strip())
    assert err.startswith(f"envreplica {command}: interrupted ("), (step, err)
    fenced = [p.name for p in (pair.run, pair.resource) if P.facts_of(p).admission is not None]
    for name in fenced:
        assert f"{name} is fenced for" in err, (step, err)
    if fenced or (pair.request.exists() and "nothing is left to do" not in err):
        assert f"--request {pair.request}" in err, (step, err)


MIGRATE_ARGV = ["migrate", "--db", "{root}/run.db", "--db", "{root}/resource.db"]


def test_sigint_or_sigterm_at_each_step_of_migrate_ends_in_one_line_saying_what_stands(tmp_path, capsys,
                                                                                       monkeypatch):
    counter = iter(range(1000))

    def fresh() -> Pair:
        return Pair(tmp_path / f"p{next(counter)}")

    with Runners(tmp_path / "runners") as runners:
        steps = _steps_of(runners, MIGRATE_ARGV, fresh, tmp_path)
        assert steps[0] == "prepare" and steps[-1] == "complete resource", steps
        for index, step in enumerate(steps):
            for sig in ((signal.SIGINT, signal.SIGTERM) if index % 4 == 0 or step == steps[-1] else
                        ((signal.SIGINT, signal.SIGTERM)[index % 2],)):
                pair = fresh()
                argv = [a.replace("{root}", str(pair.root)) for a in MIGRATE_ARGV]
                at, end = _signalled_at(pair, runners, argv, index, sig)
                assert at == step
                _judge_signalled(pair, step, end, sig, "migrate")
                if step == steps[-1]:
                    assert "the migration completed" in end.stderr, end.stderr
                rerun = ["migrate", "--request", str(pair.request)] if pair.request.exists() else pair.migrate
                status, err = _run(rerun, capsys, monkeypatch)
                assert status == 0, (step, sig, end.stderr, err)
                _migrated(pair)


def test_sigint_or_sigterm_at_each_step_of_recover_ends_in_one_line_saying_what_stands(tmp_path, capsys,
                                                                                       monkeypatch):
    counter = iter(range(1000))

    def crashed() -> Pair:
        pair = Pair(tmp_path / f"p{next(counter)}")
        _crashed_after(pair, "apply run")
        return pair

    argv = ["recover", "--request", "{root}/run.db.paired-v2.request.json"]
    with Runners(tmp_path / "runners") as runners:
        steps = _steps_of(runners, argv, crashed, tmp_path)
        assert steps[-1] == "reopen resource", steps
        for index, step in enumerate(steps):
            sig = (signal.SIGINT, signal.SIGTERM)[index % 2]
            pair = crashed()
            at, end = _signalled_at(pair, runners, [a.replace("{root}", str(pair.root)) for a in argv], index, sig)
            _judge_signalled(pair, at, end, sig, "recover")
            status, err = _run(["recover", "--request", str(pair.request)], capsys, monkeypatch)
            assert status == 0, (step, sig, end.stderr, err)
            _original(pair)


# -- a signal right after each write of the protocol's own code: nothing half-written is ever left


class SignalAfter(Full):
    """SIGINT or SIGTERM sent to this process right after the ``nth`` write the protocol's own code makes (a file
    created, synced, linked or replaced): the guard's exception then leaves from the middle of that step."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, nth: int, sig: int) -> None:
        self.sig = sig
        super().__init__(monkeypatch, nth)

    def _faulty(self, name: str, original: Callable) -> Callable:
        def call(*args, **kwargs):
            result = original(*args, **kwargs)
            if name != "open" or (args[1] if len(args) > 1 else kwargs.get("flags", 0)) & os.O_CREAT:
                self.calls += 1
                if self.calls == self.nth:
                    self.fired = (name, str(args[0]))
                    os.kill(os.getpid(), self.sig)
            return result

        return call


def test_a_signal_in_the_middle_of_any_write_leaves_nothing_half_written(pair, tmp_path, capsys, monkeypatch):
    n = 0
    while True:
        n += 1
        sig = (signal.SIGINT, signal.SIGTERM)[n % 2]
        sub = Pair(tmp_path / f"n{n}")
        with pytest.MonkeyPatch.context() as mp:
            sent = SignalAfter(mp, n, sig)
            capsys.readouterr()
            status = P.run_command(lambda: P.migrate_paired([sub.run, sub.resource], master_key=KEY), "migrate")
        err = capsys.readouterr().err.strip()
        if sent.fired is None:
            assert status == 0, err
            break
        assert status in (0, 128 + sig), (sent.fired, err)
        if status:
            assert "interrupted (" in _one_line(err), (sent.fired, err)
        assert not [f for f in os.listdir(sub.root) if f.endswith(".tmp")], (sent.fired, os.listdir(sub.root))
        for doc in (sub.request, *P._files(sub.request)):
            if doc.exists():
                json.loads(doc.read_text())  # whole, or not there at all
        rerun = ["migrate", "--request", str(sub.request)] if sub.request.exists() else sub.migrate
        assert _run(rerun, capsys, monkeypatch)[0] == 0, (sent.fired, err)
        _migrated(sub)
    assert n > 8


# -- signals at spread times through the whole `envreplica` command, its start-up and its end included


def _before_the_command(proc_status: int, err: str, pair: Pair) -> bool:
    """The signal came before the command ran, where the defaults stand and nothing was written: a SIGINT before
    the entry point's first line (the interpreter's own start-up: a traceback with no frame of envreplica's), a
    SIGTERM before ``migrate`` started (while the command line is imported: the process ends at once, silent)."""
    if pair.request.exists() or any(P.facts_of(p).admission for p in (pair.run, pair.resource)):
        return False
    if proc_status == -signal.SIGTERM:
        return err == ""
    frames = [line for line in err.splitlines() if line.strip().startswith('File "')]
    ours = [f for f in frames if str(REPO) in f and "/.venv/" not in f and
            not ("cli/__init__.py" in f and "<module>" in f)]
    return proc_status in (1, -signal.SIGINT) and "KeyboardInterrupt" in err and not ours


@pytest.mark.skipif(not ENTRY_SCRIPT.exists(), reason="the envreplica console script is not installed here")
def test_a_signal_at_any_time_of_the_envreplica_command_ends_in_one_line_or_done(tmp_path, capsys, monkeypatch):
    """SIGINT and SIGTERM at times spread over a whole ``envreplica migrate`` (the console script: interpreter
    start-up, imports, the protocol, the end): each run ends done (0, the migration complete), or in one line and
    130 / 143 saying what stands, whose command then completes it. Only a signal before the command ran may end
    otherwise (``_before_the_command``: nothing was written). Measured once: of 16 runs, 7 done, 6 interrupted,
    3 before the command (the SIGTERMs while the command line was imported); the split is printed, not asserted."""
    timing = Pair(tmp_path / "timing")
    started = time.monotonic()
    done = subprocess.run([str(ENTRY_SCRIPT), *timing.migrate], env=_env(), capture_output=True, text=True,
                          timeout=GUARD)
    whole = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    kinds: dict[str, int] = {}
    for k in range(16):
        sig = (signal.SIGINT, signal.SIGTERM)[k % 2]
        pair = Pair(tmp_path / f"r{k}")
        proc = subprocess.Popen([str(ENTRY_SCRIPT), *pair.migrate], env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=_interactive_signals)
        time.sleep(whole * (k + 1) / 16)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=GUARD)
        err = err.strip()
        if proc.returncode == 0:
            kinds["done"] = kinds.get("done", 0) + 1
            assert "migrated 2 stores" in out and "Traceback" not in err, (k, err)
        elif _before_the_command(proc.returncode, err, pair):
            kinds["before the command"] = kinds.get("before the command", 0) + 1
        else:
            kinds["interrupted"] = kinds.get("interrupted", 0) + 1
            assert proc.returncode == 128 + sig, (k, proc.returncode, err)
            assert "interrupted (" in _one_line(err), (k, err)
        rerun = ["migrate", "--request", str(pair.request)] if pair.request.exists() else pair.migrate
        status, rerr = _run(rerun, capsys, monkeypatch)
        assert status == 0, (k, err, rerr)
        _migrated(pair)
    # Where each signal lands depends on the machine's speed, so how many runs end each way is a figure, not a
    # verdict: every run above was held to its ending; the step boundaries are reached deterministically by the
    # paused-process tests above.
    print(f"signals spread over the command: {kinds}")


def _interactive_signals() -> None:
    """In the child before it runs: SIGINT and SIGTERM as an interactive shell hands them to a command (default,
    not blocked), whatever this test process had. An ignored SIGINT is inherited across exec, and Python then
    installs no handler: a worker of the suite left so (once, in a CI run, after some other test in the same
    process) made the interrupted start below wait out its guard instead of ending in one line."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _entry(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_interactive_signals)


def test_ctrl_c_while_the_entry_point_starts_the_command_line_is_one_line_and_130():
    """The entry point's start (the command line imported, its arguments parsed), held open by a stand-in."""
    proc = _entry("import sys, time\n"
                  "from envreplica.cli import entry\n"
                  "def starting():\n"
                  "    print('ready', flush=True)\n"
                  "    time.sleep(600)\n"
                  "sys.exit(entry(starting))\n")
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=GUARD)
    assert proc.returncode == 130, err
    assert "while starting" in _one_line(err.strip()) and "nothing was done" in err


def test_once_the_command_returned_a_signal_cannot_change_its_status():
    proc = _entry("import os, signal, sys\n"
                  "from envreplica.cli import entry\n"
                  "status = entry(lambda: 0)\n"
                  "os.kill(os.getpid(), signal.SIGINT)\n"
                  "os.kill(os.getpid(), signal.SIGTERM)\n"
                  "print('still here', flush=True)\n"
                  "sys.exit(status)\n")
    out, err = proc.communicate(timeout=GUARD)
    assert (proc.returncode, out.strip(), err) == (0, "still here", "")
