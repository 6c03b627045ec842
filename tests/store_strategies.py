"""Replica stores generated on disk as envreplica writes them, at schema versions 0, 1 and 2 (Hypothesis).

Shared by the tests of the proofs that guard real data before a migration writes anything
(``tests/test_key_proof_generated.py``, ``tests/test_fence_probe_generated.py``). A store is made in three
steps, each a value Hypothesis draws and shrinks:

1. ``scenarios()``: what the replica lived through, as adapter requests (``tests/adapter_requests.py``) that
   the real replica (``SqliteDriver``: ``SqliteReplica`` on a file, schema version 2) runs: nothing (a
   replica created and never begun: the empty store), a first snapshot stopped after some of its pages (the
   last one possibly incomplete: staged rows, no commit, nothing live), or a first snapshot committed, then
   deliveries (updates, tombstones, receipts) and possibly a second attempt stopped while staging. Records
   are kept or withheld (a policy epoch the replica does not keep), values any text.
2. ``Ending``: how the file is left: closed in WAL mode (no sidecar), switched to a rollback journal, or
   killed (the database, ``-wal`` and ``-shm`` as a ``kill -9`` leaves them: WAL frames not checkpointed).
3. For versions 0 and 1, the rows of the version-2 file without their integrity columns, written by a
   writer of version 1 as the release before wrote them (``writer.create_tables`` and
   ``_install_contract(1, 1)``; version 0: the tables alone, no ``store_meta``, no fence), and each sealed
   value given a ``Fate`` (``KeyPlan``): sealed under the right key, under another key, or tampered with.

Every table that holds sealed values is covered: ``VALUE_TABLES`` is read from the schema (every table with
a ``value_enc`` column) and ``tests/test_key_proof_generated.py`` holds the scenarios to producing each
one alone, and both.

Leaves out: stores the previous release's code wrote itself (its rows are this schema's without the
integrity columns, which is what is written here), stores edited to be no replica (``test_writer``'s), and
the replica's rejected requests (a request the replica refuses is kept in the scenario: it writes what
the replica writes when it refuses).
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import sqlite3
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from hypothesis import strategies as st

from envreplica.conformance.drivers import SqliteDriver
from envreplica.impl import schema
from envreplica.impl import writer as W
from envreplica.impl.sealing import SealError, Sealer

from adapter_requests import begin, commit, delivery, page, put, rec, staged

#: The key the generated replicas seal under, and two others.
KEY = bytes(range(7, 39))
WRONG_KEY = bytes(range(100, 132))
THIRD_KEY = bytes(range(200, 232))

#: Every table that holds sealed values: those with a ``value_enc`` column, read from the schema.
VALUE_TABLES = tuple(t.name for t in schema.TABLES if "value_enc" in t.c)
assert VALUE_TABLES == ("record_values", "stage_values"), VALUE_TABLES

PROJECTS = ("p1", "p2", "p3")
STREAM = "s1"


# ---------------------------------------------------------------------------
# What the replica lived through


@dataclass(frozen=True)
class Rec:
    """One record of a page or delivery: its key, whether it is a tombstone, its value, its policy epoch (1 is
    kept; 2 is not, so the record is withheld and no value is fetched)."""

    key: str
    tombstone: bool = False
    value: str = "v"
    epoch: int = 1


@dataclass(frozen=True)
class Scenario:
    """What a replica lived through (see the module). ``pages`` are the first snapshot's projects and
    records in page order; ``applied`` how many of them were applied (``None``: the replica was never
    begun); ``partial`` whether the last page applied was the first half of its records, incomplete;
    ``committed`` whether the snapshot then committed (only when every page was applied, whole);
    ``deliveries`` after the commit, ``(project index, record)``; ``second`` whether a second attempt then
    staged its first project's records and stopped."""

    pages: tuple[tuple[str, tuple[Rec, ...]], ...] = ()
    applied: Optional[int] = None
    partial: bool = False
    committed: bool = False
    deliveries: tuple[tuple[int, Rec], ...] = ()
    second: bool = False


class Ending(enum.Enum):
    """How the store's file is left."""

    WAL = "wal"  # closed in WAL mode: the database file alone
    DELETE = "delete"  # closed, then switched to a rollback journal
    KILLED = "killed"  # the database, -wal and -shm as a kill -9 leaves them (WAL frames not checkpointed)


class Fate(enum.Enum):
    """What a sealed value of a version 0 or 1 store is: sealed under the right key, another key, or tampered."""

    RIGHT = "right"  # sealed under KEY for its record, as the replica sealed it
    WRONG = "wrong"  # the same value sealed under WRONG_KEY for its record
    THIRD = "third"  # the same value sealed under THIRD_KEY
    FLIPPED = "flipped"  # one bit of the ciphertext flipped
    TRUNCATED = "truncated"  # cut to less than a nonce and a tag
    MOVED = "moved"  # a blob sealed under KEY for another record (the associated data differs)
    TEXT = "text"  # a text in the blob column (SQLite keeps its type)
    INTEGER = "integer"  # a huge integer in the blob column
    REF_EDITED = "ref_edited"  # value_ref_json edited (the blob is the right key's, for the old reference)
    REF_DEEP = "ref_deep"  # value_ref_json a deeply nested JSON array
    REF_NOT_JSON = "ref_not_json"  # value_ref_json not JSON at all


#: The fates of a value sealed under the right key, intact.
INTACT = frozenset({Fate.RIGHT})


@dataclass(frozen=True)
class KeyPlan:
    """The fate of each sealed value, in the order the file holds them (``VALUE_TABLES``' order, then rowid):
    value ``i`` gets ``fates[i]``, or the last fate when there are fewer."""

    fates: tuple[Fate, ...] = (Fate.RIGHT,)

    def fate(self, i: int) -> Fate:
        return self.fates[min(i, len(self.fates) - 1)]


# ---------------------------------------------------------------------------
# Strategies


_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_VALUES = st.text(max_size=12)


@st.composite
def _records(draw: st.DrawFn, min_size: int = 0) -> tuple[Rec, ...]:
    keys = draw(st.lists(_KEYS, min_size=min_size, max_size=4, unique=True))
    return tuple(Rec(k, draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else False, draw(_VALUES),
                     draw(st.sampled_from((1, 1, 1, 2)))) for k in sorted(keys))


@st.composite
def scenarios(draw: st.DrawFn, *, max_projects: int = 3) -> Scenario:
    """A replica's life (``Scenario``): the empty store, a first snapshot stopped, or one committed and then
    written to."""
    shape = draw(st.sampled_from(("committed", "stopped", "committed", "stopped", "empty")))
    if shape == "empty":
        return Scenario()
    names = draw(st.lists(st.sampled_from(PROJECTS[:max_projects]), min_size=1, max_size=max_projects,
                          unique=True))
    pages = tuple((p, draw(_records(min_size=1 if i == 0 else 0))) for i, p in enumerate(names))
    if shape == "stopped":
        applied = draw(st.one_of(st.integers(1, len(pages)), st.just(0)))
        return Scenario(pages, applied, partial=applied > 0 and draw(st.booleans()))
    deliveries = tuple(draw(st.lists(st.tuples(st.integers(0, len(pages) - 1),
                                               st.builds(Rec, _KEYS, st.booleans(), _VALUES, st.just(1))),
                                     max_size=3)))
    return Scenario(pages, len(pages), committed=True, deliveries=deliveries, second=draw(st.booleans()))


def _valueless(s: Scenario, withheld: bool) -> Scenario:
    """``s`` with every record a tombstone, or withheld (a policy epoch not kept): no value is ever fetched."""
    def strip(r: Rec) -> Rec:
        return replace(r, epoch=2) if withheld and not r.tombstone else replace(r, tombstone=True)

    return replace(s, pages=tuple((p, tuple(strip(r) for r in rs)) for p, rs in s.pages),
                   deliveries=tuple((i, strip(r)) for i, r in s.deliveries))


def valueless_scenarios() -> st.SearchStrategy[Scenario]:
    """Scenarios whose store holds no sealed value: empty, nothing applied, or records that are all tombstones
    or withheld."""
    return st.builds(_valueless, scenarios(), st.booleans())


#: The fates of a value that does not open under the right key.
NOT_RIGHT = tuple(f for f in Fate if f is not Fate.RIGHT)


@st.composite
def key_plans(draw: st.DrawFn, max_values: int = 12) -> KeyPlan:
    """A mix of fates with at least one value that does not open under the right key (mixed keys, tampered
    values), every value under one other fate (another key, or all tampered alike), or every value right."""
    kind = draw(st.sampled_from(("mixed", "other", "right")))
    if kind == "right":
        return KeyPlan((Fate.RIGHT,))
    if kind == "other":
        return KeyPlan((draw(st.sampled_from(NOT_RIGHT)),))
    fates = draw(st.lists(st.sampled_from(Fate), min_size=1, max_size=max_values))
    fates.insert(draw(st.integers(0, len(fates))), draw(st.sampled_from(NOT_RIGHT)))
    return KeyPlan(tuple(fates))


# ---------------------------------------------------------------------------
# Running a scenario on the real replica


def _ok(driver: SqliteDriver, request: dict[str, Any]) -> Any:
    """Run one request; the adapter must answer it (a refusal of the replica's is kept: it is what it wrote)."""
    response = driver.handle({"id": 1, **request})
    assert response["ok"] is True, response
    return response["result"]


class _Refs:
    """A fresh staged value reference for each value put (the value store holds them)."""

    def __init__(self) -> None:
        self.n = 0

    def new(self) -> dict[str, str]:
        self.n += 1
        return staged(str(uuid.UUID(int=self.n, version=4)))


def _put_and_rec(driver: SqliteDriver, refs: _Refs, project: str, r: Rec, rev: int = 1) -> dict[str, Any]:
    """The wire record of ``r`` (its value put in the value store first, unless a tombstone)."""
    if r.tombstone:
        return rec(r.key, rev=rev, tomb=True, epoch=r.epoch)
    ref = refs.new()
    _ok(driver, put(r.key, ref, project=project, value=r.value))
    return rec(r.key, rev=rev, ref=ref, epoch=r.epoch)


def _version(records: tuple[Rec, ...]) -> int:
    """The record version a first snapshot's page states for a project: 0 while it has no record (the live
    version of a project never seen), 1 once it has (a page at the live version must match the live view)."""
    return 1 if records else 0


def run_scenario(driver: SqliteDriver, s: Scenario) -> None:
    """Take the replica through ``s`` (see ``Scenario``)."""
    if s.applied is None:
        return
    refs = _Refs()
    sent: dict[tuple[str, str], dict[str, Any]] = {}  # the last wire record of each (project, key)
    _ok(driver, begin(projects=[p for p, _ in s.pages]))
    for i, (project, records) in enumerate(s.pages[:s.applied]):
        last = i == s.applied - 1
        incomplete = last and s.partial and bool(records)
        shown = records[:max(1, len(records) // 2)] if incomplete else records
        wire_records = [_put_and_rec(driver, refs, project, r) for r in shown]
        for r, w in zip(shown, wire_records):
            sent[project, r.key] = w
        _ok(driver, page(wire_records, project=project, version=_version(records), complete=not incomplete))
    if not s.committed:
        return
    versions = {p: _version(records) for p, records in s.pages}
    _ok(driver, commit(versions=tuple(sorted(versions.items()))))
    for sequence, (index, r) in enumerate(s.deliveries, start=1):
        project = s.pages[index][0]
        previous = sent.get((project, r.key))
        rev = (previous["head"]["revision"] + 1) if previous else 1
        w = _put_and_rec(driver, refs, project, r, rev=rev)
        versions[project] += 1
        _ok(driver, delivery(w, sequence=sequence, version=versions[project], project=project))
        sent[project, r.key] = w
    if s.second:
        project = s.pages[0][0]
        again = [w for (p, _k), w in sorted(sent.items()) if p == project]
        _ok(driver, begin("a2", projects=[p for p, _ in s.pages]))
        _ok(driver, page(again, attempt="a2", project=project, version=versions[project], complete=not again))


# ---------------------------------------------------------------------------
# Files


def files_of(db: Path) -> list[Path]:
    """The database file and its SQLite sidecars that exist."""
    return [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal")) if p.exists()]


def _raw_copy(src: Path, dst: Path) -> None:
    """The database and its sidecars, byte for byte, as a kill -9 would leave them (the writer is idle)."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path: its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class Store:
    """A generated store: its file, schema version, how it was left, and its sealed values as written."""

    path: Path
    version: int
    ending: Ending
    values: tuple["Sealed", ...] = field(default=())


@dataclass(frozen=True)
class Sealed:
    """One sealed value as the file holds it: its table, record, reference text and blob, and its fate."""

    table: str
    project: str
    key: str
    revision: int
    generation: int
    ref_json: Any
    blob: Any
    fate: Fate


def build(root: Path, scenario: Scenario, version: int, ending: Ending, plan: KeyPlan = KeyPlan(),
          name: str = "store.db") -> Store:
    """The store of ``scenario`` at ``root / name``, at schema ``version``, left as ``ending``, its sealed
    values given their fates by ``plan`` (versions 0 and 1; a version-2 store is the replica's own file,
    whose values are all sealed under ``KEY``)."""
    root.mkdir(parents=True, exist_ok=True)
    work = root / ".work"
    work.mkdir(exist_ok=True)
    source = work / "replica.db"
    target = root / name
    driver = SqliteDriver("fixed", source, master_key=KEY)
    try:
        run_scenario(driver, scenario)
        if version == 2 and ending is Ending.KILLED:
            _raw_copy(source, target)
    finally:
        driver.close()
    if version == 2:
        if ending is not Ending.KILLED:
            shutil.copyfile(source, target)
            if ending is Ending.DELETE:
                _journal(target, "DELETE")
        values = tuple(Sealed(*row, fate=Fate.RIGHT) for row in sealed_rows(source))
        shutil.rmtree(work)
        return Store(target, 2, ending, values)
    rows = _older_rows(source)
    values = _apply_plan(rows, plan)
    staging = work / "older.db"
    _write_older(staging, rows, version, ending)
    if ending is Ending.KILLED:
        pass  # _write_older left the copy at staging's name with its sidecars
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{staging}{suffix}").exists():
            os.replace(f"{staging}{suffix}", f"{target}{suffix}")
    shutil.rmtree(work)
    return Store(target, version, ending, values)


def _journal(path: Path, mode: str) -> None:
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute(f"PRAGMA journal_mode={mode}")
    finally:
        conn.close()


def sealed_rows(path: Path) -> list[tuple[Any, ...]]:
    """``(table, project, key, revision, generation, value_ref_json, value_enc)`` of every sealed value, in
    ``VALUE_TABLES``' order, then the file's."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [(t, *r) for t in VALUE_TABLES for r in conn.execute(
            f'SELECT project_id, key, revision, generation, value_ref_json, value_enc FROM "{t}" ORDER BY rowid')]
    finally:
        conn.close()


_V1_COLUMNS = {t.name: [c.name for c in t.c] for t in schema.TABLES_V1}


def _older_rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The rows of every replica table without the integrity columns (schema version 1's), in rowid order."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return {t: [{c: r[c] for c in _V1_COLUMNS[t]} for r in conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid')]
                for t in W.FENCED_TABLES}
    finally:
        conn.close()


def _apply_plan(rows: dict[str, list[dict[str, Any]]], plan: KeyPlan) -> tuple[Sealed, ...]:
    """Give each sealed value its fate (in place); the values as they will be written."""
    right, others = Sealer(KEY), {Fate.WRONG: Sealer(WRONG_KEY), Fate.THIRD: Sealer(THIRD_KEY)}
    out = []
    i = 0
    all_values = [(t, r) for t in VALUE_TABLES for r in rows[t]]
    for t, r in all_values:
        fate = plan.fate(i)
        i += 1
        ref = json.loads(r["value_ref_json"])
        fields = dict(project_id=r["project_id"], key=r["key"], revision=r["revision"],
                      generation=r["generation"], value_ref=ref)
        plain = right.open(r["value_enc"], **fields)
        if fate in others:
            r["value_enc"] = others[fate].seal(plain, **fields)
        elif fate is Fate.FLIPPED:
            blob = bytearray(r["value_enc"])
            blob[-1] ^= 0x01
            r["value_enc"] = bytes(blob)
        elif fate is Fate.TRUNCATED:
            r["value_enc"] = bytes(r["value_enc"][:20])
        elif fate is Fate.MOVED:
            r["value_enc"] = right.seal(plain, **dict(fields, key=r["key"] + "_moved"))
        elif fate is Fate.TEXT:
            r["value_enc"] = "not a blob"
        elif fate is Fate.INTEGER:
            r["value_enc"] = 2 ** 62
        elif fate is Fate.REF_EDITED:
            r["value_ref_json"] = json.dumps(dict(ref, edited=True))
        elif fate is Fate.REF_DEEP:
            r["value_ref_json"] = "[" * 100_000 + "]" * 100_000
        elif fate is Fate.REF_NOT_JSON:
            r["value_ref_json"] = "{not json"
        out.append(Sealed(t, r["project_id"], r["key"], r["revision"], r["generation"], r["value_ref_json"],
                          r["value_enc"], fate))
    return tuple(out)


def _write_older(path: Path, rows: dict[str, list[dict[str, Any]]], version: int, ending: Ending) -> None:
    """``rows`` in a store of schema ``version`` (0 or 1) at ``path``, written by a writer of version 1, left
    as ``ending`` (killed: ``path`` and its sidecars are a copy taken while the writer is open and idle)."""
    building = path.with_name(path.name + ".building")
    conn = sqlite3.connect(str(building), isolation_level=None)
    try:
        if ending is not Ending.DELETE:
            conn.execute("PRAGMA journal_mode=WAL")
        W.register_writer(conn, 1)
        conn.execute("BEGIN")
        W.create_tables(conn, version)
        if version == 1:
            W._install_contract(conn, 1, 1)
        conn.execute("COMMIT")
        conn.execute("BEGIN")
        for t in W.FENCED_TABLES:  # parents first
            cols = _V1_COLUMNS[t]
            conn.executemany(f'INSERT INTO "{t}" ({", ".join(cols)}) VALUES ({", ".join("?" for _ in cols)})',
                             [tuple(r[c] for c in cols) for r in rows[t]])
        conn.execute("COMMIT")
        if ending is Ending.KILLED:
            _raw_copy(building, path)
    finally:
        conn.close()
    if ending is not Ending.KILLED:
        os.replace(building, path)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)


# ---------------------------------------------------------------------------
# The oracle of the key proof


def opens(sealed: Sealed, key: bytes) -> bool:
    """Whether the sealed value opens under ``key`` for its record, as a replica reading it would."""
    try:
        ref = json.loads(sealed.ref_json)
    except (ValueError, TypeError, RecursionError):
        return False
    try:
        Sealer(key).open(sealed.blob, project_id=sealed.project, key=sealed.key, revision=sealed.revision,
                         generation=sealed.generation, value_ref=ref)
    except (SealError, ValueError, TypeError):
        return False
    return True
