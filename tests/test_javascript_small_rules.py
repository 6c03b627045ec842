"""The second seed's two small rules (issue 43, item 4), each a stated property checked by Hypothesis on real
SQLite tables and real directories, the code run in Node (``adapters/javascript/test/small-rules-host.mjs``).

``resolveWorkReference`` (``work-references.js``, whole in the diff, run as it ships over better-sqlite3): an exact
id within the scope wins; a short alias ``WRK-NNN`` resolves to the one work of the scope whose id is the alias and
a ``-`` suffix, or is refused ``ambiguous_work_alias`` (several) or ``not_found`` (none); the scope applies to
aliases as to exact ids; nothing in an id widens the query. It holds, with two readings the property checks as
the seed does them (each pinned below with its example):

* case: the exact id is compared case-sensitively (``=``), the alias case-insensitively (SQLite's ``LIKE``
  folds ASCII case): ``WRK-002`` resolves to a work ``wrk-002-b``, which ``WRK-002-b`` exactly does not name;
* an empty scope (``{}``, or ``projectId``/``runId`` empty strings, which read as absent) is no scope: the
  lookup spans every project and run, while its refusals still say "in the current RUN".

``canonicalPath`` of a path that does not exist yet (the rule the ``paths.js`` hunks add: the deepest existing
ancestor resolved, the missing parts appended; ``adapters/javascript/test/paths-canonical.mjs``, the lines the
diff does not show marked ASSUMED): the path it returns is where a write of that path lands once its parents are
created, and a path it judges inside a root stays inside it. It fails both where ``..`` follows a symlink (the
rule resolves ``..`` by the text, the kernel by the link's target: a path judged inside lands outside), and where
an ancestor is a dangling symlink (judged missing, its name kept: the write lands at the link's target). Each
failure is pinned with its example; Hypothesis checks the property on the paths with neither.

Budgets are counts of examples, never the clock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from javascript_kit import KIT, require_kit, seed_source  # noqa: E402

HOST = KIT / "test" / "small-rules-host.mjs"
EXAMPLES = 150
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


class Host:
    """The Node host, one process for the module: a request per line, an answer per line."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["node", str(HOST)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=KIT)

    def ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the small rules' host ended"
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def host():
    require_kit()
    h = Host()
    yield h
    h.close()


@pytest.fixture(scope="module")
def references() -> str:
    path = seed_source().parent / "work-references.js"
    assert path.is_file(), f"{path}: the kit's extractor writes it beside the migration"
    return str(path)


# ---------------------------------------------------------------------------
# resolveWorkReference


ALIAS = st.builds(lambda n, case: (f"{case}-{n:03d}"), st.integers(0, 3), st.sampled_from(["WRK", "wrk", "Wrk"]))
WORK_ID = st.one_of(st.builds(lambda a, s: f"{a}-{s}", ALIAS, st.sampled_from(["a", "b", "x-1"])), ALIAS,
                    st.sampled_from(["WRK-1", "WRK-0001-a", "other", "WRK-001%", "WRK-00_-a"]))
ROW = st.tuples(WORK_ID, st.sampled_from(["p1", "p2"]), st.sampled_from(["r1", "r2"]))
SCOPE = st.fixed_dictionaries({}, optional={"projectId": st.sampled_from(["p1", "p2", ""]),
                                            "runId": st.sampled_from(["r1", "r2", ""])})
QUERY_ID = st.one_of(ALIAS, WORK_ID, st.sampled_from(["WRK-%", "WRK-0__", "WRK-001' OR 1=1 --", "WRK-00", ""]))


def _table(rows) -> str:
    fd, path = tempfile.mkstemp(prefix="envreplica-works-", suffix=".db")
    os.close(fd)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE works (work_id TEXT PRIMARY KEY, project_id TEXT, run_id TEXT)")
        db.executemany("INSERT OR IGNORE INTO works VALUES (?, ?, ?)", rows)
    return path


def expected(rows, work_id: str, scope: dict) -> dict:
    """The rule as stated, with the seed's two readings (the module): exact ids case-sensitive, aliases not; an
    empty scope value is no scope."""
    def inside(row) -> bool:
        return (not scope.get("projectId") or row[1] == scope["projectId"]) and \
            (not scope.get("runId") or row[2] == scope["runId"])
    first: dict[str, tuple] = {}
    for r in rows:  # the table's primary key: the first row of each id (INSERT OR IGNORE)
        first.setdefault(r[0], r)
    scoped = sorted(first.values())
    for row in scoped:
        if inside(row) and row[0] == work_id:
            return {"work": row[0]}
    import re
    if not re.fullmatch(r"WRK-[0-9]{3,}", work_id):
        return {"error": "not_found"}
    matches = [r for r in scoped if inside(r) and r[0].lower().startswith(work_id.lower() + "-")]
    if len(matches) == 1:
        return {"work": matches[0][0]}
    return {"error": "ambiguous_work_alias" if matches else "not_found"}


@SETTINGS
@given(rows=st.lists(ROW, max_size=8), work_id=QUERY_ID, scope=SCOPE)
def test_resolve_work_reference_holds_its_rule(host, references, rows, work_id, scope):
    db = _table(rows)
    try:
        got = host.ask({"rule": "work", "source": references, "db": db, "id": work_id, "scope": scope})
    finally:
        os.unlink(db)
    got.pop("message", None)
    assert got == expected(rows, work_id, scope), (rows, work_id, scope)


def test_an_alias_matches_work_ids_of_any_case_an_exact_id_does_not(host, references):
    db = _table([("wrk-002-b", "p1", "r1")])
    try:
        alias = host.ask({"rule": "work", "source": references, "db": db, "id": "WRK-002", "scope": {"runId": "r1"}})
        exact = host.ask({"rule": "work", "source": references, "db": db, "id": "WRK-002-b", "scope": {"runId": "r1"}})
    finally:
        os.unlink(db)
    assert alias == {"work": "wrk-002-b"}
    assert exact["error"] == "not_found"


def test_an_empty_scope_spans_every_run_while_its_refusal_says_the_current_run(host, references):
    db = _table([("WRK-001-a", "p1", "r1"), ("WRK-001-b", "p2", "r2")])
    try:
        widened = host.ask({"rule": "work", "source": references, "db": db, "id": "WRK-001-a",
                            "scope": {"runId": ""}})
        ambiguous = host.ask({"rule": "work", "source": references, "db": db, "id": "WRK-001", "scope": {}})
    finally:
        os.unlink(db)
    assert widened == {"work": "WRK-001-a"}
    assert ambiguous["error"] == "ambiguous_work_alias" and "current RUN" in ambiguous["message"]


# ---------------------------------------------------------------------------
# canonicalPath


def _lands(path: Path) -> str:
    """Where a write of ``path`` lands once its parents are created (``os.makedirs``, the kernel's resolution)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("x")
    return os.path.realpath(path)


NAMES = st.sampled_from(["a", "b", "new", "deep"])
SEGMENT = st.one_of(NAMES, st.sampled_from(["la", "lb", "lnew", "."]))  # "l<name>": a symlink the tree may hold


@SETTINGS
@given(dirs=st.lists(st.lists(NAMES, min_size=1, max_size=2), min_size=1, max_size=3),
       links=st.lists(st.tuples(NAMES, st.lists(NAMES, min_size=1, max_size=2)), min_size=1, max_size=2),
       parts=st.lists(SEGMENT, min_size=1, max_size=4).map(lambda ps: ["la", *ps[1:]] if len(ps) > 2 else ps))
def test_canonical_path_of_a_missing_path_is_where_its_write_lands(host, dirs, links, parts):
    """Without ``..`` and dangling symlinks (the two failures, pinned below): the path returned is where the write
    lands, and a path judged inside the root stays inside."""
    with tempfile.TemporaryDirectory(prefix="envreplica-paths-") as tmp:
        root = Path(tmp, "root")
        root.mkdir()
        for d in dirs:
            root.joinpath(*d).mkdir(parents=True, exist_ok=True)
        (root / "a").mkdir(exist_ok=True)
        (root / "la").symlink_to(root / "a")  # at least one link the paths go through
        for name, target in links:
            link, to = root / f"l{name}", root.joinpath(*target)
            if not link.exists() and not link.is_symlink() and to.is_dir():  # no dangling link: pinned below
                link.symlink_to(to)
        path = root.joinpath(*parts)
        assume(not path.exists() and not any(p.is_symlink() and not p.exists() for p in path.parents))
        answer = host.ask({"rule": "canonical", "value": str(path)})
        within = host.ask({"rule": "within", "root": str(root), "candidate": str(path)})
        try:
            landed = _lands(path)
        except OSError:  # a file where a parent must go: no write lands, nothing to compare
            assume(False)
        assert answer.get("path") == landed, (str(path), answer, landed)
        if "path" in within:
            assert Path(landed).is_relative_to(os.path.realpath(root)), (str(path), within, landed)


def test_dotdot_after_a_symlink_is_judged_inside_and_lands_outside(host, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside" / "dir"
    root.mkdir()
    outside.mkdir(parents=True)
    (root / "link").symlink_to(outside)
    path = f"{root}/link/../new"
    answer = host.ask({"rule": "canonical", "value": path})
    within = host.ask({"rule": "within", "root": str(root), "candidate": path})
    landed = _lands(Path(path))
    assert answer == {"path": str(root / "new")} and within == {"path": str(root / "new")}
    assert landed == str(tmp_path / "outside" / "new")  # not where it said, and outside the root


def test_a_dangling_symlink_ancestor_is_kept_by_name_and_the_write_lands_at_its_target(host, tmp_path):
    root, target = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    (root / "dl").symlink_to(target)  # dangling
    path = root / "dl" / "new"
    answer = host.ask({"rule": "canonical", "value": str(path)})
    within = host.ask({"rule": "within", "root": str(root), "candidate": str(path)})
    assert answer == {"path": str(path)} and within == {"path": str(path)}  # judged inside, under the link's name
    with pytest.raises(FileExistsError):
        _lands(path)  # its parents cannot be created through the dangling link...
    target.mkdir()
    assert _lands(path) == str(target / "new")  # ...and once its target is, the write lands there: outside


def test_the_property_catches_the_rule_the_hunks_replace(host, tmp_path):
    """Testing the tester: the rule before the hunks (only the immediate parent resolved) answers a path two levels
    missing under a symlink as given, not where its write lands; the hunks' rule answers where it lands."""
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "la").symlink_to(root / "a")
    path = root / "la" / "new" / "deep"
    before = host.ask({"rule": "canonical", "value": str(path), "before": True})
    after = host.ask({"rule": "canonical", "value": str(path)})
    landed = _lands(path)
    assert before["path"] != landed and after["path"] == landed == str(root / "a" / "new" / "deep")
