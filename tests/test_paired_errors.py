"""The migration's bad-input contract, case by case, as a new user meets it: exit status, one line, and every file
byte-compared before and after (docs/migration.md, "What it refuses").

Each refusal before anything is written exits 2 with one line saying what is wrong and what to do, and
changes no byte of any file: the stores are in WAL mode, as a replica's are, and the comparison takes in every
file of their directory (the ``-wal`` and ``-shm`` SQLite keeps beside a store in use included), each file's
mode, and the directory's listing. A refusal mid-protocol (a store locked or made read-only after the request
was published) exits 2 with one line saying what stands and what completes it, and that command does.
tests/test_paired_hostile.py holds the rest: FIFOs, full file systems, backups that are the stores, signals.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Optional

import pytest

from envreplica.cli.main import main
from envreplica.conformance.migration.disk import KEY, WRONG_KEY, build_v1
from envreplica.impl import paired as P
from envreplica.impl import writer as W
from envreplica.impl.sealing import Sealer
from envreplica.spec.migration import EXIT_STATUS

import previous_release


def to_wal(path: Path) -> Path:
    """The store at ``path`` in WAL mode, as a replica keeps it (its ``-wal`` and ``-shm`` gone once closed)."""
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    assert not any(Path(f"{path}{s}").exists() for s in ("-wal", "-shm"))
    return path


class Pair:
    """Two version-1 stores sealed under ``KEY`` in ``root`` (in WAL mode, as a replica's), and the command lines
    that migrate them."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.run, self.resource = root / "run.db", root / "resource.db"
        to_wal(build_v1(self.run))
        shutil.copyfile(self.run, self.resource)
        self.request = P.default_request([self.run, self.resource], W.SCHEMA_VERSION)

    @property
    def migrate(self) -> list[str]:
        return ["migrate", "--db", str(self.run), "--db", str(self.resource)]

    def snapshot(self) -> dict[str, tuple[str, int, bytes]]:
        """Every file under the root (the stores' ``-wal`` and ``-shm`` too), by relative path: its kind, its mode
        and its bytes (a symlink: its target; a FIFO or a directory: its kind and mode alone)."""
        return snapshot(self.root)


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """``Pair.snapshot`` of any directory: the listing, each entry's kind, mode and content."""
    import stat

    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        key = str(p.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[key] = ("symlink", 0, os.readlink(p).encode())
        elif stat.S_ISREG(st.st_mode):
            out[key] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
        else:
            out[key] = (stat.S_IFMT(st.st_mode) == stat.S_IFDIR and "directory" or "special",
                        stat.S_IMODE(st.st_mode), b"")
    return out


def _values_open(path: Path, key: bytes) -> int:
    """How many sealed values of the store open under ``key``."""
    conn = W._open_readonly(path)
    try:
        rows = conn.execute("SELECT project_id, key, revision, generation, value_ref_json, value_enc "
                            "FROM record_values").fetchall()
    finally:
        conn.close()
    sealer, opened = Sealer(key), 0
    for project, k, revision, generation, ref, blob in rows:
        try:
            sealer.open(bytes(blob), project_id=project, key=k, revision=revision, generation=generation,
                        value_ref=json.loads(ref))
            opened += 1
        except Exception:
            pass
    return opened


def _run(argv: list[str], capsys, monkeypatch, key: Optional[bytes] = KEY) -> tuple[int, str]:
    """``envreplica ARGV`` in this process with ``key`` (None: no key); (exit status, standard error)."""
    monkeypatch.delenv("ENVREPLICA_MASTER_KEY_FILE", raising=False)
    if key is None:
        monkeypatch.delenv("ENVREPLICA_MASTER_KEY", raising=False)
    else:
        monkeypatch.setenv("ENVREPLICA_MASTER_KEY", key.hex())
    capsys.readouterr()
    status = main(argv)
    return status, capsys.readouterr().err.strip()


def _one_line(err: str) -> str:
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _crashed_after(pair: Pair, at: str) -> None:
    """A migration of ``pair`` that dies right after step ``at`` (what it did stays; its lock goes)."""
    def crash(step: str) -> None:
        if step == at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        P.migrate_paired([pair.run, pair.resource], master_key=KEY, hook=crash)


@pytest.fixture
def pair(tmp_path) -> Pair:
    return Pair(tmp_path / "stores")


# ---------------------------------------------------------------------------
# A wrong master key: refused before anything changes (paired, single, and a rerun)


def test_a_wrong_key_is_refused_before_anything_changes_and_the_right_one_migrates(pair, capsys, monkeypatch):
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch, key=WRONG_KEY)
    assert status == 2 and "master_key_wrong" in _one_line(err) and "ENVREPLICA_MASTER_KEY" in err
    assert pair.snapshot() == before, "a refused migration changed a file"
    status, err = _run(pair.migrate, capsys, monkeypatch, key=KEY)
    assert status == 0, err
    assert _values_open(pair.run, KEY) == _values_open(pair.resource, KEY) == 2  # nothing lost


@pytest.mark.parametrize("version", [0, 1])
def test_a_wrong_key_is_refused_by_the_single_store_migration(version, tmp_path, capsys, monkeypatch):
    db = build_v1(tmp_path / "one.db")
    if version == 0:  # the tables of version 1, no store_meta, no fence
        conn = sqlite3.connect(db)
        conn.executescript("".join(f'DROP TRIGGER "{n}";' for (n,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")) + "DROP TABLE store_meta;")
        conn.close()
    before = db.read_bytes()
    status, err = _run(["migrate", "--db", str(db)], capsys, monkeypatch, key=WRONG_KEY)
    assert status == 2 and "not the key this store was sealed with" in _one_line(err)
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["one.db"]
    assert _run(["migrate", "--db", str(db)], capsys, monkeypatch)[0] == 0
    assert _values_open(db, KEY) == 2


def test_a_rerun_with_another_key_is_refused(pair, capsys, monkeypatch):
    _crashed_after(pair, "apply run")
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch, key=WRONG_KEY)
    assert status == 2 and "master_key_wrong" in _one_line(err)
    assert pair.snapshot() == before
    assert _run(pair.migrate, capsys, monkeypatch)[0] == 0


def test_no_key_is_refused_before_anything_changes(pair, capsys, monkeypatch):
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch, key=None)
    assert status == 2 and "master_key_missing" in _one_line(err)
    assert pair.snapshot() == before


# ---------------------------------------------------------------------------
# Refusals after the stores were read: the directory exactly as it was (no -wal or -shm left beside a store)


def _single_migrated(path: Path) -> None:
    W.migrate(path, backup_dir=path.parent / "single", evidence_path=path.parent / "single" / f"{path.name}.json",
              master_key=KEY)


@pytest.mark.parametrize("case", ["master_key_wrong", "store_versions_differ", "content_only_route_required",
                                  "a foreign SQLite file", "a version-2 store of another key"])
def test_a_refusal_after_reading_the_stores_leaves_their_directory_as_it_was(case, pair, capsys, monkeypatch):
    """Reading a WAL store read-only makes SQLite create its -wal and -shm, which a read-only connection never
    removes: each of these refusals left two files beside each store it had read."""
    key = KEY
    if case == "master_key_wrong":
        key = WRONG_KEY
    elif case == "store_versions_differ":
        _single_migrated(pair.resource)
    elif case == "content_only_route_required":
        _single_migrated(pair.run)
        _single_migrated(pair.resource)
    elif case == "a foreign SQLite file":
        pair.resource.unlink()
        conn = sqlite3.connect(pair.resource)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE other (x)")
        conn.commit()
        conn.close()
    else:
        _single_migrated(pair.run)
        _single_migrated(pair.resource)
        key = WRONG_KEY
    assert not list(pair.root.glob("*-wal")) and not list(pair.root.glob("*-shm"))
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch, key=key)
    assert status == 2 and "Traceback" not in _one_line(err)
    assert pair.snapshot() == before, f"a refused migration changed the stores' directory: {err}"


# ---------------------------------------------------------------------------
# A live owner, and a store held in a write transaction


_HOLDER = textwrap.dedent("""
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    if sys.argv[2] == "lock":
        conn.execute("BEGIN IMMEDIATE")
    print("ready", flush=True)
    sys.stdin.readline()
""")


class Holder:
    """Another process holding a store open for writing (``open``: as an old SqliteReplica does between writes,
    ``lock``: in a write transaction), until closed."""

    def __init__(self, path: Path, how: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), how], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.mark.parametrize("how", ["open", "lock"])
@pytest.mark.parametrize("single", [False, True], ids=["paired", "single"])
def test_a_store_open_for_writing_in_another_process_is_refused(how, single, pair, capsys, monkeypatch):
    holder = Holder(pair.resource if not single else pair.run, how)
    try:
        before = pair.snapshot()
        argv = ["migrate", "--db", str(pair.run)] if single else pair.migrate
        status, err = _run(argv, capsys, monkeypatch)
        assert status == 2, err
        assert f"open for writing in process {holder.proc.pid}" in _one_line(err) and "nothing was changed" in err
        assert pair.snapshot() == before
    finally:
        holder.close()
    assert _run(argv, capsys, monkeypatch)[0] == 0  # once it is gone, the migration runs


def _hooked(pair: Pair, at: str, act: Callable[[], None], capsys) -> tuple[int, str]:
    """``migrate`` in this process, doing ``act`` once step ``at`` is done; (exit status, standard error)."""
    def hook(step: str) -> None:
        if step == at:
            act()

    capsys.readouterr()
    status = P.run_command(lambda: P.migrate_paired([pair.run, pair.resource], master_key=KEY, hook=hook,
                                                    busy_timeout=0.2), "migrate")
    return status, capsys.readouterr().err.strip()


def test_a_store_locked_mid_protocol_stops_it_and_the_message_says_what_resumes_it(pair, capsys, monkeypatch):
    holders: list[Holder] = []
    status, err = _hooked(pair, "maintenance run", lambda: holders.append(Holder(pair.resource, "lock")), capsys)
    try:
        assert status == 2 and "store_busy" in _one_line(err)
        assert "the request is published" in err and "run.db is fenced for maintenance" in err
        assert f"envreplica migrate --request {pair.request}" in err
        assert P.facts_of(pair.resource).admission is None and P.facts_of(pair.run).admission == "maintenance"
    finally:
        for h in holders:
            h.close()
    status, err = _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)  # what the message says
    assert status == 0, err
    assert [P.facts_of(p).version for p in (pair.run, pair.resource)] == [2, 2]


# ---------------------------------------------------------------------------
# A read-only store


def _read_only(path: Path) -> None:
    if os.geteuid() == 0:  # root ignores modes: the immutable flag
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("root, and the immutable flag does not work here (a read-only store cannot be made)")
    else:
        os.chmod(path, 0o400)


def _writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        os.chmod(path, 0o600)


def test_a_read_only_store_is_refused_before_anything_changes(pair, capsys, monkeypatch):
    _read_only(pair.resource)
    try:
        before = pair.snapshot()
        status, err = _run(pair.migrate, capsys, monkeypatch)
        assert status == 2 and "store_read_only" in _one_line(err) and "nothing was changed" in err
        assert pair.snapshot() == before
    finally:
        _writable(pair.resource)
    assert _run(pair.migrate, capsys, monkeypatch)[0] == 0


_AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="runs the command as nobody (root only)")
def test_a_read_only_store_is_refused_for_an_ordinary_user():
    """The whole command, as an ordinary user whose stores' mode is 0444: exit 2, one line, nothing changed."""
    import tempfile

    probe = subprocess.run([*_AS_NOBODY, sys.executable, "-c", "import envreplica.cli.main"], capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot import this checkout's envreplica: {probe.stderr.strip()[-200:]}")
    base = Path(tempfile.mkdtemp(prefix="envreplica-nobody-"))
    try:
        os.chmod(base, 0o755)
        pair = Pair(base / "stores")
        os.chmod(pair.root, 0o777)
        for p in (pair.run, pair.resource):
            os.chmod(p, 0o444)
        before = pair.snapshot()
        env = dict(os.environ, ENVREPLICA_MASTER_KEY=KEY.hex(), HOME=str(base))
        proc = subprocess.run([*_AS_NOBODY, sys.executable, "-m", "envreplica.cli.main", *pair.migrate], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "store_read_only" in _one_line(proc.stderr.strip()), proc.stderr
        assert pair.snapshot() == before
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_store_made_read_only_mid_protocol_stops_it_and_the_rerun_completes(pair, capsys, monkeypatch):
    status, err = _hooked(pair, "apply run", lambda: _read_only(pair.resource), capsys)
    try:
        assert status == 2 and "store_read_only" in _one_line(err) and "the request is published" in err
    finally:
        _writable(pair.resource)
    status, err = _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)
    assert status == 0, err


# ---------------------------------------------------------------------------
# The same store given twice


@pytest.mark.parametrize("alias", ["same path", "another spelling", "a symlink", "a hard link"])
def test_one_store_named_twice_is_refused(alias, pair, capsys, monkeypatch):
    other = {"same path": lambda: pair.run,
             "another spelling": lambda: pair.root / "." / ".." / pair.root.name / "run.db",
             "a symlink": lambda: (pair.root / "link.db").symlink_to(pair.run) or pair.root / "link.db",
             "a hard link": lambda: (pair.root / "hard.db").hardlink_to(pair.run) or pair.root / "hard.db"}[alias]()
    before = pair.snapshot()
    status, err = _run(["migrate", "--db", str(pair.run), "--db", str(other)], capsys, monkeypatch)
    assert status == 2 and "same_store_twice" in _one_line(err)
    assert pair.snapshot() == before


# ---------------------------------------------------------------------------
# After a completed recovery: a way out, not a loop


def test_after_a_completed_recovery_each_command_shows_the_way_out_and_it_works(pair, capsys, monkeypatch):
    _crashed_after(pair, "apply run")
    assert _run(["recover", "--request", str(pair.request)], capsys, monkeypatch)[0] == 0
    before = pair.snapshot()
    status, err = _run(pair.migrate, capsys, monkeypatch)
    assert status == 1 and "this request was recovered" in _one_line(err) and "--request <a new file>" in err
    assert pair.snapshot() == before
    status, err = _run(["recover", "--request", str(pair.request)], capsys, monkeypatch)
    assert status == 0
    assert "To migrate them again, start a new request" in capsys.readouterr().out + err or \
        "To migrate them again" in P.recover_paired(pair.request).message
    new = pair.root / "second.request.json"
    status, err = _run([*pair.migrate, "--request", str(new)], capsys, monkeypatch)
    assert status == 0, err
    assert [P.facts_of(p).version for p in (pair.run, pair.resource)] == [2, 2]


# ---------------------------------------------------------------------------
# A fenced store says it is fenced, by which request, and what to run: to this release and the previous one


def _fenced_pair(pair: Pair) -> None:
    _crashed_after(pair, "maintenance resource")


def _refusal(pair: Pair, check_writer) -> W.WriterVersionError:
    """What ``check_writer`` (this release's, or the previous release's) raises on the pair's run store."""
    conn = sqlite3.connect(pair.run)
    try:
        with pytest.raises(W.WriterVersionError) as err:
            check_writer(conn)
    finally:
        conn.close()
    return err.value


def test_a_fenced_store_says_so_to_this_release(pair):
    _fenced_pair(pair)
    error = _refusal(pair, W.check_writer)
    text = str(error)
    assert error.reason == "fenced" and "fenced for maintenance" in text
    assert f"envreplica migrate --request {pair.request}" in text and "Do not restore a backup" in text


def test_a_fenced_store_says_so_to_the_previous_release(pair):
    """The previous release knows no fence: it calls the contract damaged and prints store_meta, whose token
    says what holds the store and what to run (its own closing words cannot be changed now)."""
    _fenced_pair(pair)
    rid = P._request_id(json.loads(pair.request.read_text()))
    text = str(_refusal(pair, previous_release.check_writer))
    assert f"maintenance:{rid}" in text and "fenced by an envreplica paired migration" in text
    assert f"envreplica migrate --request {pair.request}" in text and "do not restore a backup" in text


def test_the_implementations_exit_statuses_are_the_contracts():
    """impl.paired states its exit statuses itself (it imports nothing of the model's side): they are
    spec.migration's for every refusal the model names."""
    assert {code.value: status for code, status in EXIT_STATUS.items()} == \
        {code: status for code, status in P.EXIT_STATUS.items() if code in {c.value for c in EXIT_STATUS}}
