"""The paired writer migration on SQLite stores, and its explicitly selected recovery.

Models: the protocol ``model.migration`` checks (docs/migration.md), with its
three fixes, on two or more replica stores that must move from one writer
contract version to the next together or be restored together: ``migrate``
(``envreplica migrate --db A --db B``) and ``recover`` (``envreplica recover
--request FILE``). Each durable step is a function named as the model's step
(``Pc``), and each calls ``hook(step)`` once it is durable: the crash harness
(``tests/test_paired_crash.py``) abandons the run there, in this process or
with ``kill -9`` of a child process (``ENVREPLICA_PAIRED_KILL_AFTER``).

The files, next to the request (``REQUEST``, default
``<first store>.paired-v<target>.request.json``), each published once and
never overwritten (the same bytes again are accepted, other bytes refused as
a conflict), owner-only (0600):

- ``REQUEST``: the stores (path, version, data digest, backup path) and a
  random permit id;
- ``REQUEST.result.json``: the migration's result, with the backups' digests;
- ``REQUEST.recovery.json``: the selected recovery: per store, restore from
  its backup or leave it unchanged;
- ``REQUEST.recovery.json.result.json``: the recovery's result;
- ``REQUEST.lock``: the installation lock (``flock``: a crashed holder's lock
  is free).

The fences are the writer contract's (``writer.begin_admission``): while a
store is under maintenance or recovery, no writer of any version writes it,
and ``check_writer`` refuses to open it. Readings of the modules the
reference code leaves unshown, as the model names them: a backup that exists
is kept (when it holds the store's original data; anything else is refused);
a store already applied by this request is skipped; a store counts as
applied when it records this request's receipt (``store_meta.migration_request``)
at the target version, whatever was written after it reopened.

Leaves out on purpose: the reference code's checks of owner processes (an
open connection of a foreign writer is refused by the fence row by row, and
SQLite's locks serialize transactions), child input files (derived from the
request, they add no fact), and the schema bootstrap.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import uuid
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
import argparse
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from envreplica.impl import schema
from envreplica.impl import writer as W

_REQUEST_SCHEMA = "envreplica/paired-migration@1"
_RESULT_SCHEMA = "envreplica/paired-migration-result@1"
_RECOVERY_SCHEMA = "envreplica/paired-recovery@1"
_RECOVERY_RESULT_SCHEMA = "envreplica/paired-recovery-result@1"
#: ``store_meta`` key of a store's migration receipt: the request that applied it.
RECEIPT = "migration_request"

Hook = Callable[[str], None]
#: The migration steps by source version (``writer.MIGRATIONS``).
Steps = Mapping[int, Callable[[sqlite3.Connection, W.MigrationContext], None]]
#: A published JSON document (request, result, recovery plan): its fields by name.
Doc = dict[str, Any]
#: Parsed JSON, before it is checked: any JSON value.
Json = Any


class PairedRefused(W.MigrationRefused):
    """A paired migration or recovery stopped at a check; what it published and fenced stays, as the model's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class Status(str, Enum):
    """A store's outcome against a request (the reference code's ``reconcile``)."""

    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StoreFacts:
    """What a store holds now, read without writing."""

    version: int  # schema_version
    admission: Optional[str]  # None (open), "maintenance" or "recovery"
    holder: Optional[str]  # the request holding the fence
    data_sha256: str  # the content, as if open (the fence's own store_meta keys normalized)
    receipt: Optional[str]  # the request that applied it


# ---------------------------------------------------------------------------
# Facts, digests, files


def data_sha256(conn: sqlite3.Connection) -> str:
    """``writer.content_sha256`` with the fence undone: a fenced store hashes as the same store open."""
    return W.content_sha256(conn, meta=W.unfenced)


def facts_of(path: Path) -> StoreFacts:
    conn = W._open_readonly(path)
    try:
        meta = W.read_meta(conn) or {}
        admission, holder = W.admission_of(meta)
        return StoreFacts(W.detect_version(conn), admission, holder, data_sha256(conn), meta.get(RECEIPT))
    finally:
        conn.close()


def _publish(path: Path, data: Doc, conflict: str) -> None:
    """Publish ``data`` at ``path`` once: the same bytes there are accepted, other bytes refused."""
    body = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    if path.exists():
        if path.read_bytes() != body:
            raise PairedRefused(conflict, f"{path} holds another publication; it is never overwritten")
        return
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and never over an existing file
        except FileExistsError:
            if path.read_bytes() != body:
                raise PairedRefused(conflict, f"{path} holds another publication; it is never overwritten") from None
    finally:
        tmp.unlink(missing_ok=True)
    W._fsync_dir(path.parent)


def _read_json(path: Path) -> Json:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PairedRefused("invalid_publication", f"{path}: unreadable ({e}); it was not written by envreplica "
                                                   f"or was damaged since") from None


@contextlib.contextmanager
def _installation_lock(request: Path) -> Iterator[None]:
    lock = request.with_name(request.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise W.StoreInUse(f"{lock}: another envreplica migrate or recover holds the installation lock of "
                               f"this request; wait for it to finish, then run again") from None
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def _writing(path: Path, token: str, busy_timeout: float) -> Iterator[sqlite3.Connection]:
    """A connection registered as ``token`` (the fence holder), in one exclusive transaction."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout)
    conn.create_function(W.WRITER_FUNCTION, 0, lambda: token, deterministic=True)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def _digest(data: Doc) -> str:
    """SHA-256 of ``data``'s canonical JSON, its own ``sha256`` field left out."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _request_id(request: Doc) -> str:
    """The request's id in fences and receipts: the first 16 hex digits of its digest."""
    return _digest(request)[:16]


def _read_request(path: Path) -> Doc:
    """The published request, checked: its schema and its digest (an edited request is refused)."""
    req = _read_json(path)
    if not isinstance(req, dict) or req.get("schema_id") != _REQUEST_SCHEMA or req.get("sha256") != _digest(req) \
            or not isinstance(req.get("stores"), list) or len(req["stores"]) < 2:
        raise PairedRefused("paired_migration_request_changed",
                            f"{path} was changed after it was published (its digest no longer matches); restore "
                            f"it from where you keep it, or reconcile the stores by hand")
    return req


def _usable(paths: Sequence[Path]) -> None:
    """Each path holds an envreplica store (a missing or foreign file is refused before anything is changed)."""
    from envreplica.impl import files

    for p in paths:
        found = files.probe(p)
        if found.kind is files.PathKind.MISSING:
            raise files.ReplicaPathError(f"{p}: no such database file; nothing was changed (check the --db paths)")
        if found.kind is not files.PathKind.SQLITE:
            files.refuse_unusable(found, what="a store to migrate")


def _status(request: Doc, i: int, facts: StoreFacts, rid: str) -> Status:
    source = request["stores"][i]
    if facts.version == request["target"] and facts.receipt == rid:
        return Status.APPLIED
    if facts.version == source["version"] and facts.data_sha256 == source["data_sha256"]:
        return Status.NOT_APPLIED
    return Status.UNKNOWN


def _pair(statuses: Sequence[Status]) -> str:
    if Status.UNKNOWN in statuses:
        return "unknown"
    applied = statuses.count(Status.APPLIED)
    return "applied" if applied == len(statuses) else "partial" if applied else "not_applied"


def default_request(dbs: Sequence[Path], target: int) -> Path:
    return dbs[0].with_name(f"{dbs[0].name}.paired-v{target}.request.json")


def _files(request: Path) -> tuple[Path, Path, Path]:
    recovery = request.with_name(request.name + ".recovery.json")
    return (request.with_name(request.name + ".result.json"), recovery,
            recovery.with_name(recovery.name + ".result.json"))


def _no_hook(step: str) -> None:
    pass


def kill_hook_from_env() -> Hook:
    """``ENVREPLICA_PAIRED_KILL_AFTER=STEP``: this process kills itself (SIGKILL) once STEP is durable."""
    target = os.environ.get("ENVREPLICA_PAIRED_KILL_AFTER")
    if not target:
        return _no_hook

    def hook(step: str) -> None:
        if step == target:
            os.kill(os.getpid(), 9)

    return hook


def _store_name(i: int, n: int) -> str:
    return ("run", "resource")[i] if n == 2 else f"store {i}"


# ---------------------------------------------------------------------------
# migrate


@dataclass
class Outcome:
    """What ``migrate_paired`` or ``recover_paired`` did."""

    status: str  # "migrated", "recovered"
    request: Path
    message: str


def migrate_paired(dbs: Sequence[Union[str, Path]], *, request: Union[str, Path, None] = None,
                   backup_dir: Union[str, Path, None] = None, master_key: Optional[bytes] = None,
                   target: int = schema.SCHEMA_VERSION, hook: Hook = _no_hook, busy_timeout: float = 5.0,
                   steps: Optional[Steps] = None) -> Outcome:
    """Migrate ``dbs`` together to schema version ``target``, or resume the published request."""
    steps = W.MIGRATIONS if steps is None else steps
    paths = [Path(d).resolve() for d in dbs]
    if len(paths) < 2 or len(set(paths)) != len(paths):
        raise ValueError("a paired migration takes two or more different stores (--db A --db B)")
    req_path = Path(request).resolve() if request is not None else default_request(paths, target)
    result_path, recovery_path, _ = _files(req_path)
    n = len(paths)
    _usable(paths)

    # prepare, or restore the published request
    if req_path.exists():
        req = _read_request(req_path)
        if [s["db"] for s in req["stores"]] != [str(p) for p in paths]:
            raise PairedRefused("paired_migration_request_conflict",
                                f"{req_path} is a request for other stores ({[s['db'] for s in req['stores']]})")
        _require_key(steps, req["stores"][0]["version"], target, master_key)
    else:
        facts = [facts_of(p) for p in paths]
        held = [str(p) for p, f in zip(paths, facts) if f.admission is not None]
        if held:
            raise PairedRefused("store_fenced", f"{', '.join(held)} fenced by another request; finish that first")
        versions = {f.version for f in facts}
        if versions == {target}:
            raise PairedRefused("content_only_route_required", f"every store is at version {target} already")
        if len(versions) != 1 or min(versions) < 1 or min(versions) > target:
            raise PairedRefused("store_versions_differ",
                                f"the stores are at versions {[f.version for f in facts]}: a paired migration "
                                f"moves stores of one version (1 or later, below {target}) together; migrate "
                                f"the others alone first (envreplica migrate --db PATH)")
        _require_key(steps, facts[0].version, target, master_key)  # before anything is published
        bdir = Path(backup_dir).resolve() if backup_dir is not None else None
        req = {"schema_id": _REQUEST_SCHEMA, "permit_id": uuid.uuid4().hex, "target": target,
               "stores": [{"db": str(p), "version": f.version, "data_sha256": f.data_sha256,
                           "backup": str((bdir or p.parent) / f"{p.name}.v{f.version}.paired.bak")}
                          for p, f in zip(paths, facts)]}
        req["sha256"] = _digest(req)
        _publish(req_path, req, "paired_migration_request_conflict")  # retain parent
        hook("retain parent")
    rid = _request_id(req)
    token = W.admission_token("maintenance", rid)

    with _installation_lock(req_path):
        # reconcile
        if recovery_path.exists():
            raise PairedRefused("recovery_selected", f"{recovery_path}: a recovery of this request is selected; "
                                                     f"run `envreplica recover --request {req_path}`")
        facts = [facts_of(p) for p in paths]
        before = _pair([_status(req, i, f, rid) for i, f in enumerate(facts)])
        if before == "unknown":
            raise PairedRefused("unknown_child_outcome", "a store is neither its source nor migrated by this "
                                                         "request: reconcile it by hand, or select recovery")
        if result_path.exists() and before != "applied":
            raise PairedRefused("completed_migration_changed", f"{result_path} exists but the stores are not "
                                                               f"all migrated by this request")
        # read evidence (before maintenance, not after as the reference code: a refusal then fences nothing)
        evidence = _read_evidence(result_path, rid) if result_path.exists() else None
        # maintenance begun
        for i, p in enumerate(paths):
            f = facts[i]
            if f.admission == "recovery":
                raise PairedRefused("store_under_recovery", f"{p} is fenced for recovery")
            if f.admission == "maintenance" and f.holder != rid:
                raise PairedRefused("store_fenced", f"{p} is under maintenance by another request ({f.holder})")
            if f.admission is None:  # fenced by this request already: nothing to write
                with _writing(p, token, busy_timeout) as conn:
                    W.begin_admission(conn, token)
            hook(f"maintenance {_store_name(i, n)}")
        if evidence is None:
            backups = []
            for i, p in enumerate(paths):  # each backup, all before any apply
                backups.append(_backup(p, Path(req["stores"][i]["backup"]), req["stores"][i]["data_sha256"]))
                hook(f"backup {_store_name(i, n)}")
            for i, p in enumerate(paths):  # each apply
                _apply(p, req, rid, token, steps, master_key, busy_timeout)
                hook(f"apply {_store_name(i, n)}")
            # verify
            after = [facts_of(p) for p in paths]
            if _pair([_status(req, i, f, rid) for i, f in enumerate(after)]) != "applied":
                raise PairedRefused("verification_incomplete", "after the applies a store is not migrated")
            for p in paths:
                _verify(p, target)
            evidence = {"schema_id": _RESULT_SCHEMA, "request": rid, "target": target,
                        "backups": [{"path": req["stores"][i]["backup"], "sha256": b} for i, b in enumerate(backups)]}
        elif _pair([_status(req, i, facts_of(p), rid) for i, p in enumerate(paths)]) != "applied":
            # the fence is up: the stores are still this request's migration, as the result says
            raise PairedRefused("verification_incomplete", "a store is not migrated")
        _publish(result_path, evidence, "paired_migration_result_conflict")
        hook("publish result")
        for i, p in enumerate(paths):  # maintenance completed
            with _writing(p, token, busy_timeout) as conn:
                W.end_admission(conn)
            hook(f"complete {_store_name(i, n)}")
    return Outcome("migrated", req_path, f"migrated {n} stores together to schema version {target}; result "
                                         f"{result_path}")


def _require_key(steps: Steps, version: int, target: int, master_key: Optional[bytes]) -> None:
    """Refuse, before anything is written, a migration whose steps authenticate rows when no key was given."""
    if master_key is None and any(getattr(steps[v], "needs_key", False) for v in range(version, target)):
        raise PairedRefused("master_key_missing", "the migration authenticates every row under the master key: "
                                                  "set ENVREPLICA_MASTER_KEY or ENVREPLICA_MASTER_KEY_FILE, then "
                                                  "run it again")


def _read_evidence(result_path: Path, rid: str) -> Doc:
    """The published result, checked: this request's, and its backups still the ones it recorded."""
    evidence = _read_json(result_path)
    if not isinstance(evidence, dict) or evidence.get("schema_id") != _RESULT_SCHEMA or evidence.get("request") != rid:
        raise PairedRefused("migration_evidence_custody_changed",
                            f"{result_path} is not this request's result (edited, or another request's); restore "
                            f"it, or reconcile the stores by hand")
    for entry in evidence.get("backups", []):
        if not Path(entry["path"]).is_file() or W._file_sha256(entry["path"]) != entry["sha256"]:
            raise PairedRefused("backup_evidence_changed", f"{entry['path']} is not the backup the result recorded "
                                                           f"(sha256 {entry['sha256']}); put that backup back")
    return evidence


def _backup(path: Path, backup: Path, source_sha256: str) -> str:
    """The store's backup: written once (kept when there with the original data; anything else refused)."""
    if backup.exists():
        conn = W._open_readonly(backup)
        try:
            if data_sha256(conn) != source_sha256:
                raise PairedRefused("backup_conflict", f"{backup} exists and does not hold {path}'s original data")
        finally:
            conn.close()
        return W._file_sha256(backup)
    src = sqlite3.connect(str(path), isolation_level=None)
    try:
        if data_sha256(src) != source_sha256:
            raise PairedRefused("unknown_child_outcome", f"{path} changed since the request was prepared")
        return W.copy_store(src, backup, source_sha256, digest=data_sha256, overwrite=False)
    finally:
        src.close()


def _apply(path: Path, req: Doc, rid: str, token: str, steps: Steps, master_key: Optional[bytes],
           busy_timeout: float) -> None:
    """One store's steps to the target in one transaction, its receipt recorded, the fence kept."""
    with _writing(path, token, busy_timeout) as conn:
        version = W.detect_version(conn)
        if version == req["target"] and (W.read_meta(conn) or {}).get(RECEIPT) == rid:
            return  # applied already (a rerun after a crash between the applies)
        for v in range(version, req["target"]):
            steps[v](conn, W.MigrationContext(master_key))
        W.begin_admission(conn, token)  # the steps record the new contract version: fence it again
        W._put_meta(conn, RECEIPT, rid)


def _verify(path: Path, target: int) -> None:
    conn = W._open_readonly(path)
    try:
        problems = []
        if W._integrity(conn) != ["ok"]:
            problems.append("integrity_check")
        if W._fk_violations(conn):
            problems.append("foreign_key_check")
        if W.detect_version(conn) != target:
            problems.append(f"schema version is not {target}")
    finally:
        conn.close()
    if problems:
        raise PairedRefused("verification_incomplete", f"{path}: {', '.join(problems)}")


# ---------------------------------------------------------------------------
# recover


def recover_paired(request: Union[str, Path], *, hook: Hook = _no_hook, busy_timeout: float = 5.0) -> Outcome:
    """Select the recovery of ``request`` (or resume the selected one): each store the migration changed is
    restored from its backup, an unchanged one is left untouched, and both reopen at their old version."""
    req_path = Path(request).resolve()
    result_path, recovery_path, recovery_result_path = _files(req_path)
    if not req_path.exists():
        raise PairedRefused("no_migration_request", f"{req_path}: no paired migration request there")
    req = _read_request(req_path)
    rid = _request_id(req)
    paths = [Path(s["db"]) for s in req["stores"]]
    n = len(paths)
    with _installation_lock(req_path):
        if recovery_path.exists():  # restore the selected recovery
            plan = _read_json(recovery_path)
            restores = plan.get("restores") if isinstance(plan, dict) else None
            if plan.get("schema_id") != _RECOVERY_SCHEMA or plan.get("request") != rid or \
                    plan.get("sha256") != _digest(plan) or \
                    not isinstance(restores, list) or len(restores) != n or \
                    not all(isinstance(r, bool) for r in restores):
                raise PairedRefused("invalid_recovery_intent",
                                    f"{recovery_path} is not this request's recovery (edited, or another's); "
                                    f"restore it, or reconcile the stores by hand")
        else:  # plan
            if recovery_result_path.exists():
                raise PairedRefused("restore_original_recovery", f"{recovery_result_path} exists")
            if result_path.exists():
                raise PairedRefused("migration_completed", f"{result_path}: the migration completed; a rerun of "
                                                           f"`envreplica migrate` reopens its stores")
            restores = []
            for i, p in enumerate(paths):
                if _unchanged(req, i, facts_of(p)):
                    restores.append(False)
                elif not Path(req["stores"][i]["backup"]).exists():
                    raise PairedRefused("changed_store_has_no_backup", f"{p} changed and has no backup")
                else:
                    restores.append(True)
            plan = {"schema_id": _RECOVERY_SCHEMA, "request": rid, "restores": restores}
            plan["sha256"] = _digest(plan)
        token = W.admission_token("recovery", rid)
        if recovery_result_path.exists():  # the result is the proof: only admission is left
            _reopen(paths, token, hook, busy_timeout)
            return Outcome("recovered", req_path, "the recovery had completed; its stores are reopened")
        # revalidate
        if result_path.exists():
            raise PairedRefused("migration_completed", f"{result_path}: the migration completed")
        for i, p in enumerate(paths):
            if plan["restores"][i] and not Path(req["stores"][i]["backup"]).exists():
                raise PairedRefused("changed_store_has_no_backup", f"{p} has no backup")
            if not plan["restores"][i] and not _unchanged(req, i, facts_of(p)):
                raise PairedRefused("store_not_original", f"{p} changed since the recovery was planned")
        _publish(recovery_path, plan, "paired_recovery_request_conflict")
        hook("publish recovery")
        for i, p in enumerate(paths):  # fence
            with _writing(p, token, busy_timeout) as conn:
                W.begin_admission(conn, token)
            hook(f"fence {_store_name(i, n)}")
        for i, p in enumerate(paths):  # restore, or check untouched
            if plan["restores"][i]:
                _restore(p, Path(req["stores"][i]["backup"]), token, busy_timeout)
            elif not _unchanged(req, i, facts_of(p)):
                raise PairedRefused("store_not_original", f"{p} changed under the recovery's fence")
            hook(f"restore {_store_name(i, n)}")
        _publish(recovery_result_path, {"schema_id": _RECOVERY_RESULT_SCHEMA, "request": rid,
                                        "restored": plan["restores"]}, "paired_recovery_result_conflict")
        hook("publish recovery result")
        _reopen(paths, token, hook, busy_timeout)
    return Outcome("recovered", req_path, f"recovered {n} stores: {sum(plan['restores'])} restored from their "
                                          f"backups, the others unchanged")


def _unchanged(req: Doc, i: int, facts: StoreFacts) -> bool:
    """The store is as before the migration: still its prepared source, or never applied (old version, no
    backup: every apply comes after both backups), whatever writers of the old version wrote while open."""
    source = req["stores"][i]
    if facts.version == source["version"] and facts.data_sha256 == source["data_sha256"]:
        return True
    return facts.version == source["version"] and facts.receipt is None and not Path(source["backup"]).exists()


def _restore(path: Path, backup: Path, token: str, busy_timeout: float) -> None:
    """The store's content replaced by its backup's (SQLite backup API), fenced for recovery, read back."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout)
    try:
        src = W._open_readonly(backup)
        try:
            expected = data_sha256(src)
            src.backup(conn)
        finally:
            src.close()
        conn.execute("BEGIN IMMEDIATE")
        W.end_admission(conn)  # the backup's own fence (it was taken under maintenance) ...
        W.begin_admission(conn, token)  # ... replaced by the recovery's
        conn.execute("COMMIT")
        if data_sha256(conn) != expected:
            raise PairedRefused("recovery_readback_failed", f"{path} does not read back as {backup}")
    finally:
        conn.close()


def _reopen(paths: Sequence[Path], token: str, hook: Hook, busy_timeout: float) -> None:
    for i, p in enumerate(paths):
        with _writing(p, token, busy_timeout) as conn:
            W.end_admission(conn)  # a no-op on a store reopened already
        hook(f"reopen {_store_name(i, len(paths))}")


# ---------------------------------------------------------------------------
# CLI


def run_command(action: Callable[[], Outcome], name: str) -> int:
    """0 done; 2 in use, or a refusal of what was asked (``INPUT_REFUSALS``); 1 any other refusal. Each
    refusal is one line: its code, the file, and what to do."""
    import sys

    try:
        outcome = action()
    except W.StoreInUse as e:
        print(f"envreplica {name}: refused: {e}", file=sys.stderr)
        return 2
    except PairedRefused as e:
        print(f"envreplica {name}: refused: {e}", file=sys.stderr)
        return 2 if e.code in INPUT_REFUSALS else 1
    except W.MigrationError as e:
        print(f"envreplica {name}: refused: {e}", file=sys.stderr)
        return 2 if isinstance(e, W.MigrationRefused) else 1
    print(outcome.message)
    return 0


#: Refusals of what was asked (exit 2; nothing was changed): a store of another version or already at the
#: target, a request or result edited, a backup that no longer matches, a recovery after a completed
#: migration. The others stop a protocol on what the stores hold (exit 1), as a finding does.
INPUT_REFUSALS = frozenset({
    "content_only_route_required", "store_versions_differ", "store_fenced", "master_key_missing",
    "paired_migration_request_conflict", "paired_migration_request_changed", "invalid_publication",
    "migration_evidence_custody_changed", "backup_conflict", "backup_evidence_changed", "migration_completed",
    "no_migration_request", "restore_original_recovery", "invalid_recovery_intent"})


def cmd_recover(args: argparse.Namespace) -> int:
    """``envreplica recover --request FILE``."""
    return run_command(lambda: recover_paired(args.request, hook=kill_hook_from_env()), "recover")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``recover --request FILE``."""
    p = subparsers.add_parser(
        "recover", help="select the recovery of a paired migration: restore its stores together",
        description=("Select the recovery of the paired migration whose request is FILE, or resume the selected "
                     "one: each store the migration changed is restored from its backup, an unchanged store is "
                     "left untouched, and all reopen at their old version. Refused once the migration's result "
                     "is published (rerun `envreplica migrate` instead). Exit 0 recovered, 1 refused, 2 in use."))
    p.add_argument("--request", required=True, metavar="FILE", help="the paired migration's request file")
    p.set_defaults(func=cmd_recover)
