"""The real side's files: the stores on disk, what their data is in the model's words, and the faults done to them.

Models: the two version-1 replica stores a paired migration moves (``run.db``, ``resource.db``, from one
``Template``), the publications ``impl.paired`` writes beside them, and the environment's faults of
``model.migration.Fault`` done for real: a store made read-only (its mode for an ordinary user; the
immutable flag for root, whom modes do not stop), a publication or a backup edited by hand (and put back).

A store's data in the model's words (``Template.data_of``): its rows, each table's columns of schema version 1
(the integrity columns of version 2 left out), the foreign writer's marker rows apart. The rest equal to the
template's is ``original`` at version 1, and ``migrated`` at version 2 when the store's key check is the
master key's (a migration under another key is not a migration of these values); anything else is
``other``; the marker rows are its writes. The same words for a backup file, and for the data digests a
request records (``Disk.digest_image``: every digest the lockstep has seen, with its words).

Leaves out on purpose: the integrity tags' values (the implementation's own verification checks them), the
order of rows, ``store_meta`` beyond the version, the fence, the receipt and the key check.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Optional

from envreplica.conformance.migration.observe import EDITED, PUBLISHED, Observation, StoreView
from envreplica.conformance.migration.writer import MARKER_PREFIX
from envreplica.impl import paired as P
from envreplica.impl import schema
from envreplica.impl import writer as W
from envreplica.impl.sealing import Sealer
from envreplica.spec.migration import Image

#: The public test key the lockstep's stores are sealed with (never a real key), and a wrong one.
KEY = bytes(range(32))
WRONG_KEY = bytes(range(1, 33))
STORE_NAMES = ("run.db", "resource.db")

_V1_COLUMNS = {t.name: [c.name for c in t.c] for t in schema.TABLES_V1}


def _seal(sealer: Sealer, value: str, project: str, key: str, ref: dict[str, Any]) -> bytes:
    return sealer.seal(value, project_id=project, key=key, revision=1, generation=1, value_ref=ref)


def build_v1(path: Path, *, other: bool = False) -> Path:
    """A store as envreplica wrote it at schema version 1, its values sealed under ``KEY`` (``other``: the same
    with one project's record version changed, for a backup edited by hand)."""
    sealer = Sealer(KEY)
    ref = {"kind": "staged", "stagingId": "00000000-0000-4000-8000-000000000001"}
    conn = sqlite3.connect(str(path), isolation_level=None)
    W.register_writer(conn, 1)
    W.create_tables(conn, 1)
    conn.execute("BEGIN")
    W._install_contract(conn, 1, 1)
    rows: dict[str, list[tuple[object, ...]]] = {
        "authority": [("replica", 1, 1, "stream-1", 3, None, "org-1", "[1]")],
        "projects": [("p1", 7 if other else 3), ("p2", 1)],
        "records": [("p1", "API_KEY", 1, 1, 0, json.dumps(ref), None, 1, 0, "installed", None),
                    ("p2", "DB_URL", 1, 1, 0, json.dumps(ref), None, 1, 0, "installed", None)],
        "record_values": [("p1", "API_KEY", 1, 1, json.dumps(ref), _seal(sealer, "s3cret", "p1", "API_KEY", ref)),
                          ("p2", "DB_URL", 1, 1, json.dumps(ref), _seal(sealer, "postgres://x", "p2", "DB_URL", ref))],
        "receipts": [("stream-1", 1, "a" * 64, "{}", 3, 1, None)],
    }
    for table in W.FENCED_TABLES:
        for row in rows.get(table, []):
            conn.execute(f'INSERT INTO "{table}" VALUES ({", ".join("?" for _ in row)})', row)
    conn.execute("COMMIT")
    conn.close()
    return path


class Template:
    """The stores' template (and the "other" data an edited backup holds), built once per run in ``root``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.store = build_v1(root / "template.db")
        self.other = build_v1(root / "other.db", other=True)
        self.key_check = Sealer(KEY).rows.key_check
        self.original = self._projection(self.store)[0]
        self._migrated: Optional[Path] = None

    @property
    def migrated(self) -> Path:
        """The template migrated to version 2 under ``KEY`` by the single-store migrate (built when first asked)."""
        if self._migrated is None:
            path = self.store.with_name("migrated.db")
            shutil.copyfile(self.store, path)
            W.migrate(path, backup_dir=path.parent, evidence_path=path.with_suffix(".evidence.json"),
                      master_key=KEY)
            self._migrated = path
        return self._migrated

    @staticmethod
    def _projection(path: Path) -> tuple[str, int, Optional[int], dict[str, str]]:
        """(digest of the rows without the marker rows, marker rows, schema version, store_meta)."""
        conn = W._open_readonly(path)
        try:
            meta = W.read_meta(conn) or {}
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            h = hashlib.sha256()
            markers = 0
            for table in W.FENCED_TABLES:
                if table not in tables:
                    h.update(f"no {table}\n".encode())
                    continue
                cols = ", ".join(f'"{c}"' for c in _V1_COLUMNS[table])
                rows = conn.execute(f'SELECT {cols} FROM "{table}"').fetchall()
                if table == "projects":
                    kept = [r for r in rows if not str(r[0]).startswith(MARKER_PREFIX)]
                    markers = len(rows) - len(kept)
                    rows = kept
                h.update(f"table {table}\n".encode())
                for row in sorted(rows, key=repr):
                    h.update(repr(row).encode() + b"\n")
            version = W._int_or_none(meta.get("schema_version"))
            return h.hexdigest(), markers, version, meta
        finally:
            conn.close()

    def data_of(self, path: Path) -> tuple[int, str]:
        """(schema version, data in the model's words: "original", "migrated+1w", "other", ...)."""
        digest, markers, version, meta = self._projection(path)
        if digest == self.original and version == 1:
            base = "original"
        elif digest == self.original and version == 2 and meta.get("key_check") == self.key_check:
            base = "migrated"
        else:
            base = "other"
        return version or 0, base + (f"+{markers}w" if markers else "")


def _file_key(path: Path) -> tuple[object, ...]:
    """What changes whenever a database file's content does: its identity, size and times, SQLite's header
    (whose file change counter every commit in rollback-journal mode moves: the times alone move only once a
    clock tick), and its journal's and write-ahead log's sizes and times."""
    out: list[object] = []
    for suffix in ("", "-journal", "-wal"):
        try:
            st = os.stat(f"{path}{suffix}")
        except FileNotFoundError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    with open(path, "rb") as f:
        out.append(f.read(100))
    return tuple(out)


def _flags(path: Path, immutable: bool) -> None:
    """Set or clear ``path``'s immutable flag (``chattr +i``; root only, on file systems that have it)."""
    subprocess.run(["chattr", "+i" if immutable else "-i", str(path)], check=True, capture_output=True)


def read_only_works(root: Path) -> Optional[str]:
    """Why a read-only store cannot be made in ``root`` (``None``: it can): as root, the immutable flag must work."""
    if os.geteuid() != 0:
        return None
    probe = root / ".immutable-probe"
    probe.write_bytes(b"x")
    try:
        _flags(probe, True)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"root ignores file modes, and the immutable flag (chattr +i) does not work here ({e})"
    try:
        fd = os.open(probe, os.O_RDWR)
        os.close(fd)
        return "the immutable flag does not stop writes here"
    except OSError:
        return None
    finally:
        _flags(probe, False)
        probe.unlink()


class Disk:
    """One example's directory: the stores, their request's files, and the faults done to them."""

    def __init__(self, root: Path, template: Template, memo: dict[str, str]) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.template = template
        self.stores = [root / name for name in STORE_NAMES]
        for p in self.stores:
            shutil.copyfile(template.store, p)
            os.chmod(p, 0o600)
        # another name of the run store, for an invocation that names it twice (made now: an immutable file
        # cannot be linked to later)
        self.symlink, self.hardlink = root / "symlink.db", root / "hardlink.db"
        self.symlink.symlink_to(self.stores[0])
        self.hardlink.hardlink_to(self.stores[0])
        self.request = P.default_request(self.stores, W.SCHEMA_VERSION)
        self.result, self.recovery, self.recovery_result = P._files(self.request)
        self.memo = memo  # data digest (or backup file sha256) -> the model's words
        self.saved: dict[Path, bytes] = {}  # the bytes of each edited file, to put back
        self.rid: Optional[str] = None  # the published request's id, once seen
        self.cache: dict[Path, tuple[tuple[object, ...], tuple[int, str, Optional[str], Optional[str]]]] = {}
        self.read_only: set[Path] = set()

    def set_store(self, i: int, image: Image) -> None:
        """Store ``i`` holds ``image`` instead (``original`` at version 1, ``migrated`` at version 2; anything else
        is ``ValueError``): for the adapter protocol's ``reset``. Only before anything ran."""
        words = (image.version, str(image.data))
        if words == (1, "original"):
            source = self.template.store
        elif words == (2, "migrated"):
            source = self.template.migrated
        else:
            raise ValueError(f"reset: this adapter builds stores at version 1 original or version 2 migrated, "
                             f"not {image}")
        shutil.copyfile(source, self.stores[i])
        os.chmod(self.stores[i], 0o600)
        self.cache.pop(self.stores[i], None)

    # -- what the files hold -------------------------------------------------

    def backup_path(self, i: int) -> Path:
        req = self._request_doc()
        if req is not None:
            try:
                return Path(req["stores"][i]["backup"])
            except (KeyError, IndexError, TypeError):
                pass
        return self.stores[i].with_name(f"{self.stores[i].name}.v1.paired.bak")

    def _request_doc(self) -> Optional[dict[str, Any]]:
        try:
            doc = json.loads(self.request.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def _read(self, path: Path) -> tuple[int, str, Optional[str], Optional[str]]:
        """(version, data, fence kind, fence holder) of the database at ``path``, read again only when the file
        changed since it was last read (``_file_key``); its digests go into the memo on the way."""
        key = _file_key(path)
        cached = self.cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        version, data = self.template.data_of(path)
        facts = P.facts_of(path)
        self.memo.setdefault(facts.data_sha256, f"v{version}:{data}")
        self.memo.setdefault("file:" + W._file_sha256(path), f"v{version}:{data}")
        value = (version, data, facts.admission, facts.holder)
        self.cache[path] = (key, value)
        return value

    def image(self, path: Path) -> str:
        version, data, _, _ = self._read(path)
        return f"v{version}:{data}"

    def observe(self, invocations: tuple[tuple[int, str], ...]) -> Observation:
        req = self._request_doc()
        if req is not None and req.get("sha256") == P._digest(req):
            self.rid = P._request_id(req)  # the request's id, as published (an edited one's is not its)
        rid = self.rid
        stores = []
        for i, p in enumerate(self.stores):
            version, data, kind, holder = self._read(p)
            admission = kind or "open"
            if kind is not None and holder != rid:
                admission = f"{kind} by another"
            backup = self.backup_path(i)
            image = self.image(backup) if backup.exists() else None
            stores.append(StoreView(version, data, admission, image))
        request = sources = None
        if self.request.exists():
            request = PUBLISHED if req is not None and req.get("sha256") == P._digest(req) else EDITED
            if request == PUBLISHED and req is not None:
                sources = tuple(self.memo.get(str(s.get("data_sha256")), "?") for s in req["stores"])
        result = evidence = None
        if self.result.exists():
            doc = json.loads(self.result.read_text())
            result = PUBLISHED if doc.get("request") == rid else EDITED
            if result == PUBLISHED:
                evidence = tuple(self.memo.get("file:" + str(b.get("sha256")), "?") for b in doc.get("backups", []))
        recovery = plan = None
        if self.recovery.exists():
            doc = json.loads(self.recovery.read_text())
            recovery = PUBLISHED if doc.get("sha256") == P._digest(doc) else EDITED
            if recovery == PUBLISHED:
                plan = tuple(doc.get("restores", ()))
        return Observation(tuple(stores), request, sources, result, evidence, recovery, plan,
                           self.recovery_result.exists(), self.lock_held(), invocations)

    def lock_held(self) -> bool:
        lock = self.request.with_name(self.request.name + ".lock")
        if not lock.exists():
            return False
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # releases it, if taken
        return False

    # -- the faults ---------------------------------------------------------

    def make_read_only(self, i: int, read_only: bool) -> None:
        p = self.stores[i]
        if os.geteuid() == 0:
            _flags(p, read_only)
        else:
            os.chmod(p, 0o400 if read_only else 0o600)
        (self.read_only.add if read_only else self.read_only.discard)(p)

    def edit(self, doc: str, i: Optional[int]) -> None:
        path = {"request": self.request, "result": self.result, "recovery": self.recovery}.get(doc) \
            if i is None else self.backup_path(i)
        assert path is not None
        self.saved[path] = path.read_bytes()
        if i is not None:
            shutil.copyfile(self.template.other, path)  # a backup of other data
            return
        data = json.loads(path.read_text())
        if doc == "request":
            data["permit_id"] = "0" * 32  # its digest no longer matches
        elif doc == "result":
            data["request"] = "0" * 16  # not this request's
        else:
            data["restores"] = [not r for r in data["restores"]]  # its digest no longer matches
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    def move_away(self, doc: str) -> None:
        """The published result moved out of the request's directory (an operator tidying up); never put back."""
        assert doc == "result"
        away = self.root / "moved-away"
        away.mkdir(exist_ok=True)
        os.replace(self.result, away / f"{self.result.name}.{len(list(away.iterdir()))}")
        self.saved.pop(self.result, None)  # an edited result moved away is no longer there to put back

    def copy_of_request(self) -> Path:
        """A copy of the request as published, kept outside the request's directory (``InputFault.COPY``): the
        bytes it was published with, even when the request was edited since."""
        kept = self.root / "kept"
        kept.mkdir(exist_ok=True)
        copy = kept / self.request.name
        copy.write_bytes(self.saved.get(self.request) or self.request.read_bytes())
        return copy

    def repair(self, doc: str, i: Optional[int]) -> None:
        path = {"request": self.request, "result": self.result, "recovery": self.recovery}.get(doc) \
            if i is None else self.backup_path(i)
        assert path is not None
        path.write_bytes(self.saved.pop(path))

    def close(self) -> None:
        """Remove the example's directory (a run makes hundreds: tmpfs is memory), its stores writable first."""
        for p in list(self.read_only):
            try:
                self.make_read_only(self.stores.index(p), False)
            except (OSError, subprocess.CalledProcessError):
                pass
        shutil.rmtree(self.root, ignore_errors=True)
