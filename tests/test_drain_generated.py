"""The drain on generated holders (``impl.owners``): every live process holding a store open for writing, by any
path, and no other.

Each example starts real child processes, each holding some of a store's files open: the database, its
``-wal``, its ``-journal`` or its ``-shm``; for reading, writing, both, appending, or as a bare ``O_PATH``
descriptor; by its path, a symlink to the file, a hard link, a path through a symlinked directory, a path
relative to the child's working directory, or ``/proc/self/fd/N`` of a descriptor it inherited (and then
closed); or as a real SQLite connection to the (WAL) store, read-write or read-only. Then ``owners`` is
asked about the store, named by its path, a symlink to it, a path through a symlinked directory, or a
relative path, with some children excluded.

The rule it must follow (``impl.owners``; docs/migration.md, "Owners are observed"): a process is an owner
exactly when it holds the database or its ``-journal`` open for writing (``O_WRONLY`` or ``O_RDWR``), or its
``-wal`` open for writing without holding the database read-only, whatever path it opened them by. A
read-only or ``O_PATH`` descriptor is no writer, nor is the ``-shm``; and a read-only SQLite connection to a
WAL store, which opens the ``-wal`` (and ``-shm``) read-write but the database read-only, is a reader. The
``-wal`` and ``-journal`` are the ones SQLite uses: beside the file a symlink leads to (SQLite resolves
symlinks), and beside the path as named.

Leaves out (as ``impl.owners`` does): processes of other users, a shared writable memory mapping kept after
its descriptor was closed, threads with descriptor tables of their own.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from envreplica.conformance.replica.context import _scratch_dir
from envreplica.impl import owners as O

FILES = ("db", "wal", "journal", "shm")
SUFFIX = {"db": "", "wal": "-wal", "journal": "-journal", "shm": "-shm"}
MODES = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR, "append": os.O_WRONLY | os.O_APPEND,
         "path": os.O_PATH}
WRITING = {"w", "rw", "append"}
VIAS = ("path", "symlink", "hardlink", "dir_symlink", "relative", "proc_fd")
NAMINGS = ("path", "symlink", "dir_symlink", "relative")


@dataclass(frozen=True)
class Open:
    """One descriptor a holder opens: which of the store's files, by which path, in which mode."""

    file: str
    via: str
    mode: str


@dataclass(frozen=True)
class Holder:
    """A child process: the descriptors it holds (``opens``), or a SQLite connection (``sqlite``: "rw", "ro")."""

    opens: tuple[Open, ...] = ()
    sqlite: Optional[str] = None

    @property
    def writes(self) -> bool:
        """Whether the rule makes it an owner: a read-write SQLite connection, or the database or ``-journal``
        open for writing, or the ``-wal`` open for writing while the database is not open read-only."""
        if self.sqlite == "rw" or any(o.mode in WRITING and o.file in ("db", "journal") for o in self.opens):
            return True
        return any(o.mode in WRITING and o.file == "wal" for o in self.opens) and \
            not any(o.mode == "r" and o.file == "db" for o in self.opens)


holders = st.one_of(
    st.builds(Holder, st.lists(st.builds(Open, st.sampled_from(FILES), st.sampled_from(VIAS),
                                         st.sampled_from(tuple(MODES))), min_size=1, max_size=3).map(tuple)),
    st.builds(Holder, st.just(()), st.sampled_from(("rw", "ro"))),
)


# ---------------------------------------------------------------------------
# The store and its paths


class Layout:
    """A WAL store at ``root/data/store.db`` with an empty ``-wal``, ``-journal`` and ``-shm``, and every other way
    to reach each file: a symlink of its own (``root/links/db-link``, ``wal-link``, ...: a symlink to a
    database has no sidecars beside it), a hard link (``root/hard``), a symlinked directory (``root/alias`` ->
    ``data``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "data").mkdir()
        (root / "links").mkdir()
        (root / "hard").mkdir()
        self.db = root / "data" / "store.db"
        conn = sqlite3.connect(str(self.db))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.close()
        for file in FILES[1:]:
            Path(f"{self.db}{SUFFIX[file]}").touch()
        os.symlink("data", root / "alias")
        for file in FILES:
            os.symlink(f"{self.db}{SUFFIX[file]}", root / "links" / f"{file}-link")  # one symlink per file
            os.link(f"{self.db}{SUFFIX[file]}", root / "hard" / f"hard{SUFFIX[file]}")

    def path(self, file: str, via: str) -> str:
        """The path of ``file`` spelled ``via`` (``relative``: from ``root``; ``proc_fd``: the plain path)."""
        s = SUFFIX[file]
        return {"path": f"{self.db}{s}", "proc_fd": f"{self.db}{s}",
                "symlink": str(self.root / "links" / f"{file}-link"), "hardlink": str(self.root / "hard" / f"hard{s}"),
                "dir_symlink": str(self.root / "alias" / f"store.db{s}"), "relative": f"data/store.db{s}"}[via]

    def named(self, naming: str) -> str:
        """The store as the caller names it (``relative``: from ``root``, the caller's working directory)."""
        return {"path": str(self.db), "symlink": str(self.root / "links" / "db-link"),
                "dir_symlink": str(self.root / "alias" / "store.db"), "relative": "data/store.db"}[naming]


CHILD = textwrap.dedent("""
    import json, os, sys
    spec = json.loads(sys.argv[1])
    held = []
    if spec["sqlite"]:
        import sqlite3
        uri = "file:" + spec["db"] + ("?mode=ro" if spec["sqlite"] == "ro" else "")
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        conn.execute("SELECT count(*) FROM t").fetchone()
        held.append(conn)
    for path, flags, inherited in spec["opens"]:
        if inherited is not None:
            fd = os.open("/proc/self/fd/%d" % inherited, flags)
            os.close(inherited)
        else:
            fd = os.open(path, flags)
        held.append(fd)
    print("ready", flush=True)
    sys.stdin.readline()
""")


class Child:
    """A real child process holding what ``holder`` says until closed."""

    def __init__(self, layout: Layout, holder: Holder) -> None:
        inherited = []
        opens = []
        for o in holder.opens:
            if o.via == "proc_fd":
                fd = os.open(layout.path(o.file, "path"), os.O_PATH)
                inherited.append(fd)
                opens.append((None, MODES[o.mode], fd))
            else:
                opens.append((layout.path(o.file, o.via), MODES[o.mode], None))
        spec = {"sqlite": holder.sqlite, "db": str(layout.db), "opens": opens}
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", CHILD, json.dumps(spec)],
                                         cwd=layout.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         pass_fds=inherited, text=True)
        finally:
            for fd in inherited:
                os.close(fd)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "ready", f"the child did not start: {line!r}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@contextmanager
def _children(layout: Layout, specs: list[Holder]) -> Iterator[list[Child]]:
    started: list[Child] = []
    try:
        for h in specs:
            started.append(Child(layout, h))
        yield started
    finally:
        for c in started:
            c.close()


@contextmanager
def _layout() -> Iterator[Layout]:
    root = Path(_scratch_dir())
    try:
        yield Layout(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------
# The property


def _drain(specs: list[Holder], naming: str, excluded: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    with _layout() as layout, _children(layout, specs) as children:
        ours = {c.pid for c in children}
        skip = [c.pid for c, x in zip(children, excluded) if x]
        with monkeypatch.context() as m:
            m.chdir(layout.root)
            found = O.owners([layout.named(naming)], exclude=skip)
        mine = [o for o in found if o.pid in ours]
        expected = {c.pid for c, h in zip(children, specs) if h.writes and c.pid not in skip}
        assert {o.pid for o in mine} == expected, (specs, naming, [(o.pid, o.command) for o in mine])
        assert all(o.path == layout.named(naming) for o in mine)
        assert all(CHILD.strip().splitlines()[0] in o.command for o in mine)


#: Found by the property (shrunk): a read-only SQLite connection to a WAL store, taken for a writer (SQLite
#: opens the ``-wal`` read-write for every connection).
SQLITE_READER = ([Holder(sqlite="ro")], "path", [])

#: Found by the property (shrunk): a process holding only the store's ``-wal`` open for writing, the store
#: named by a symlink to it: the drain looked for ``link-wal`` beside the symlink, where SQLite never puts it.
WAL_BEHIND_A_SYMLINK = ([Holder((Open("wal", "path", "w"),))], "symlink", [False])


@settings(max_examples=20)
@given(st.lists(holders, min_size=1, max_size=3), st.sampled_from(NAMINGS), st.lists(st.booleans(), max_size=3))
@example(*SQLITE_READER)
@example(*WAL_BEHIND_A_SYMLINK)
def test_the_drain_finds_every_writer_by_any_path_and_no_reader(specs, naming, excluded):
    """``owners`` names exactly the children the rule makes owners (not the excluded ones), whatever path
    they opened the store's files by and whatever path the caller names the store by, each owner with the
    store as the caller named it and its command line."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _drain(specs, naming, excluded + [False] * (len(specs) - len(excluded)), monkeypatch)


@pytest.mark.nightly
@settings(max_examples=300)
@given(st.lists(holders, min_size=1, max_size=4), st.sampled_from(NAMINGS), st.lists(st.booleans(), max_size=4))
def test_the_drain_finds_every_writer_by_any_path_and_no_reader_nightly(specs, naming, excluded):
    """The same, at the nightly budget."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _drain(specs, naming, excluded + [False] * (len(specs) - len(excluded)), monkeypatch)


def test_a_sqlite_reader_and_writer_are_told_apart():
    """The two real cases side by side: a read-only SQLite connection to a WAL store (database and ``-wal``
    read-only, ``-shm`` read-write) is no owner; a read-write one is."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _drain([Holder(sqlite="ro"), Holder(sqlite="rw")], "path", [False, False], monkeypatch)
