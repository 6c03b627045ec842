"""A completed paired migration is never rolled back: its stores prove completion, and a request is read only
where it was published (issue 39, item 1; docs/migration.md, "What proves a migration complete").

Before this release, `envreplica recover --request COPY` (a copy of the published request, which the docs tell
operators to keep), or the published request after its `.result.json` was moved away, restored both stores from
their backups with exit 0: every write made since the migration was gone, while the result still said
"migrated", and no command got out afterwards. Each case below is that report's, run as an operator would, with
a write of the new version landed after the migration; each must now end in a refusal (exit 2, one line naming
the way out) that changes no byte, and the way out it names must work.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from envreplica.cli.main import main
from envreplica.conformance.migration.disk import KEY, build_v1
from envreplica.conformance.migration.writer import Writer
from envreplica.impl import paired as P
from envreplica.impl import writer as W


class Pair:
    """Two version-1 stores sealed under ``KEY`` in ``root``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True)
        self.root = root
        self.run, self.resource = root / "run.db", root / "resource.db"
        build_v1(self.run)
        shutil.copyfile(self.run, self.resource)
        self.request = P.default_request([self.run, self.resource], W.SCHEMA_VERSION)
        self.result = self.request.with_name(self.request.name + ".result.json")

    @property
    def migrate(self) -> list[str]:
        return ["migrate", "--db", str(self.run), "--db", str(self.resource)]


def _run(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.delenv("ENVREPLICA_MASTER_KEY_FILE", raising=False)
    monkeypatch.setenv("ENVREPLICA_MASTER_KEY", KEY.hex())
    capsys.readouterr()
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out.strip(), out.err.strip()


def _write_v2(store: Path, marker: str) -> str:
    """A writer of the new contract version writes one row to ``store`` (open to it): its outcome."""
    writer = Writer()
    try:
        writer.handle({"op": "connect", "path": str(store)})
        return writer.handle({"op": "write", "version": 2, "marker": marker})["outcome"]
    finally:
        writer.close()


def _markers(store: Path) -> int:
    conn = W._open_readonly(store)
    try:
        return conn.execute("SELECT count(*) FROM projects WHERE project_id LIKE 'zz-%'").fetchone()[0]
    finally:
        conn.close()


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but SQLite's sidecars, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm", ".lock"))}


def _one_line(err: str) -> str:
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def completed(tmp_path, capsys, monkeypatch) -> Pair:
    """A pair migrated to completion, and a write of the new version landed on each store since."""
    pair = Pair(tmp_path / "stores")
    status, out, err = _run(pair.migrate, capsys, monkeypatch)
    assert status == 0, err
    assert [_write_v2(pair.run, "zz-after-1"), _write_v2(pair.resource, "zz-after-2")] == ["landed", "landed"]
    return pair


def test_a_new_request_records_where_it_was_published(completed):
    request = json.loads(completed.request.read_text())
    assert request["home"] == str(completed.request.resolve())


@pytest.mark.parametrize("command", ["recover", "migrate"])
def test_a_copy_of_a_completed_request_is_refused_and_names_the_published_one(command, completed, tmp_path, capsys,
                                                                              monkeypatch):
    """The report's case: the operator kept a copy (as the docs tell them to) and names it."""
    kept = tmp_path / "kept"
    kept.mkdir()
    copy = kept / completed.request.name
    shutil.copyfile(completed.request, copy)
    before = _files(completed.root)
    status, _, err = _run([command, "--request", str(copy)], capsys, monkeypatch)
    assert status == 2
    line = _one_line(err)
    assert "refused: request_not_at_home:" in line and str(completed.request) in line and "nothing was changed" in line
    assert _files(completed.root) == before
    assert [_markers(completed.run), _markers(completed.resource)] == [1, 1]  # no write lost


def test_a_recovery_after_the_result_was_moved_away_is_refused_and_migrate_publishes_it_again(completed, tmp_path,
                                                                                           capsys, monkeypatch):
    """The stores record this request's receipt and are open again: that proves completion."""
    published = completed.result.read_bytes()
    moved = tmp_path / "moved.json"
    shutil.move(str(completed.result), moved)
    before = _files(completed.root)
    status, _, err = _run(["recover", "--request", str(completed.request)], capsys, monkeypatch)
    assert status == 2
    line = _one_line(err)
    assert "refused: migration_completed:" in line and "is open to writers again" in line
    assert f"envreplica migrate --request {completed.request}" in line
    assert _files(completed.root) == before
    assert [_markers(completed.run), _markers(completed.resource)] == [1, 1]
    # the way out the message names: the result published again, the same bytes, every write kept
    status, out, err = _run(["migrate", "--request", str(completed.request)], capsys, monkeypatch)
    assert status == 0, err
    assert completed.result.read_bytes() == published
    assert [_markers(completed.run), _markers(completed.resource)] == [1, 1]
    assert [P.facts_of(p).admission for p in (completed.run, completed.resource)] == [None, None]
    status, _, err = _run(["recover", "--request", str(completed.request)], capsys, monkeypatch)
    assert status == 2 and "refused: migration_completed:" in _one_line(err)


def test_another_pairs_request_in_its_place_is_refused(completed, tmp_path, capsys, monkeypatch):
    """Pair A's request replaced by pair B's: recovering "A" must not recover B and publish it under A's name."""
    other = Pair(tmp_path / "other")
    status, _, err = _run(other.migrate, capsys, monkeypatch)
    assert status == 0, err
    shutil.copyfile(other.request, completed.request)
    before_a, before_b = _files(completed.root), _files(other.root)
    status, _, err = _run(["recover", "--request", str(completed.request)], capsys, monkeypatch)
    assert status == 2
    line = _one_line(err)
    assert "refused: request_not_at_home:" in line and str(other.request) in line
    assert (_files(completed.root), _files(other.root)) == (before_a, before_b)


def test_a_request_of_the_release_before_home_is_judged_by_its_fences(tmp_path, capsys, monkeypatch):
    """A request published by the release before ``home`` (none recorded), its stores fenced by it: a copy of it
    is refused, because the fences name the file the request was published at."""
    pair = Pair(tmp_path / "stores")
    monkeypatch.setattr(P, "new_request", _without_home(P.new_request))

    def crash(step: str) -> None:
        if step == "maintenance resource":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        P.migrate_paired([pair.run, pair.resource], master_key=KEY, hook=crash)
    assert "home" not in json.loads(pair.request.read_text())
    copy = tmp_path / "copy.json"
    shutil.copyfile(pair.request, copy)
    status, _, err = _run(["recover", "--request", str(copy)], capsys, monkeypatch)
    assert status == 2 and "refused: request_not_at_home:" in _one_line(err) and str(pair.request) in err
    # the request itself still resumes where it was published
    status, _, err = _run(["migrate", "--request", str(pair.request)], capsys, monkeypatch)
    assert status == 0, err


def _without_home(new_request):
    def old(*args, **kwargs):
        req = new_request(*args, **kwargs)
        del req["home"]
        req["sha256"] = P._digest(req)
        return req

    return old


def test_a_recovery_before_completion_still_restores(tmp_path, capsys, monkeypatch):
    """The guard refuses only what completed: a migration that crashed after both applies, before its result,
    is recovered as before (the stores are fenced, so no write landed since)."""
    pair = Pair(tmp_path / "stores")

    def crash(step: str) -> None:
        if step == "apply resource":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        P.migrate_paired([pair.run, pair.resource], master_key=KEY, hook=crash)
    status, out, err = _run(["recover", "--request", str(pair.request)], capsys, monkeypatch)
    assert status == 0, err
    assert [P.facts_of(p).version for p in (pair.run, pair.resource)] == [1, 1]
    assert os.path.exists(str(pair.request) + ".recovery.json.result.json")
