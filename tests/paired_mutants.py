"""Deliberately broken versions of ``impl.paired``, to test the migration lockstep (and the crash harness).

Each mutant is a realistic bug: an exact source edit of one function of ``impl.paired`` (``edits``: each
``old`` must occur once, so a mutant that no longer applies fails loudly instead of testing nothing),
installed for the duration of a test with ``install``. ``fault`` names the class of fault of the issue it
belongs to; ``moves`` is the most moves the lockstep may need to show it (its minimized trace).

The first group is one per fault class a user meets (a wrong key, a live owner, a locked store, a read-only
store, one store named twice, two invocations racing, an edited publication); the second, the order of the
protocol's steps (a backup after the applies, a result before the verification, maintenance ended before the
result, a recovery that restores an unchanged store).
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Callable

import pytest

from envreplica.impl import paired as P


@dataclass(frozen=True)
class PairedMutant:
    name: str
    fault: str  # the class of fault it belongs to
    summary: str  # the bug, in words
    function: Callable  # the function of impl.paired it edits
    edits: tuple[tuple[str, str], ...]
    moves: int  # the longest minimized trace that may show it


def mutated(fn: Callable, edits: tuple[tuple[str, str], ...]) -> Callable:
    """``fn`` rebuilt from its source with ``edits`` applied, in ``impl.paired``'s namespace."""
    src = textwrap.dedent(inspect.getsource(fn))
    for old, new in edits:
        assert src.count(old) == 1, f"the mutant's edit no longer matches {fn.__name__}: {old!r}"
        src = src.replace(old, new)
    namespace: dict = {}
    exec(compile(src, f"<mutant of {fn.__name__}>", "exec"), vars(P), namespace)  # noqa: S102
    return namespace[fn.__name__]


def install(mutant: PairedMutant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, mutant.function.__name__, mutated(mutant.function, mutant.edits))


M = PairedMutant
MUTANTS: tuple[PairedMutant, ...] = (
    M("key_unproven", "wrong master key", "the key is never proven on the stores (any key migrates them)",
      P._prove_key, (("        if why is not None:\n", "        if False:  # MUTANT\n"),), 4),
    M("owners_ignored", "live owner", "owner processes are not observed (the drain is taken on trust)",
      P._drained, (("    found = owners.owners(paths)\n", "    found = []  # MUTANT\n"),), 8),
    M("busy_unmapped", "locked store", "a store held in another process's write transaction is not refused as "
      "busy: the error escapes (exit 3)", P._writing,
      (("            if _busy(e):\n", "            if False:  # MUTANT\n"),), 12),
    M("read_only_unchecked", "read-only store", "a read-only store is not refused up front: the request is "
      "published, then the first write fails", P._writable,
      (("        problem = files.unwritable(p)\n", "        problem = None  # MUTANT\n"),), 8),
    M("hardlink_accepted", "same store twice", "stores are compared by resolved path: a hard link passes as "
      "another store", P._distinct,
      (("        ident = files.identity(path)\n", "        ident = None  # MUTANT: the path alone\n"),), 4),
    M("publish_overwrites", "racing invocations", "a publication replaces what another invocation published "
      "(written over, not refused)", P._publish,
      (("    if os.path.lexists(path):\n        if _read_publication(path) != body:\n"
        "            raise PairedRefused(conflict, f\"{path} holds another publication; it is never overwritten\")\n"
        "        return\n",
        "    if os.path.lexists(path):  # MUTANT: replaced\n        path.unlink()\n"),), 8),
    M("request_digest_unchecked", "edited publication", "a request edited since published is read as it is "
      "(its digest not checked)", P._read_request,
      (("or req.get(\"sha256\") != _digest(req) \\\n", "\\\n"),), 10),
    # the order of the steps
    M("backup_after_apply", "step order", "the stores are applied, then backed up (the backups hold migrated "
      "data)", P._migrate_locked,
      (("            backups = []\n"
        "            for i, p in enumerate(paths):  # each backup, all before any apply\n"
        "                _drained(paths, f\"stopped before backing up {p.name}\")\n"
        "                backups.append(_backup(p, Path(req[\"stores\"][i][\"backup\"]), req[\"stores\"][i][\"data_sha256\"]))\n"
        "                hook(f\"backup {_store_name(i, n)}\")\n"
        "            for i, p in enumerate(paths):  # each apply\n"
        "                _drained(paths, f\"stopped before migrating {p.name}\")\n"
        "                _apply(p, req, rid, token, steps, master_key, busy_timeout)\n"
        "                hook(f\"apply {_store_name(i, n)}\")\n",
        "            backups = []\n"
        "            for i, p in enumerate(paths):  # MUTANT: each apply first\n"
        "                _apply(p, req, rid, token, steps, master_key, busy_timeout)\n"
        "                hook(f\"apply {_store_name(i, n)}\")\n"
        "            for i, p in enumerate(paths):\n"
        "                backups.append(_backup(p, Path(req[\"stores\"][i][\"backup\"]), facts_of(p).data_sha256))\n"
        "                hook(f\"backup {_store_name(i, n)}\")\n"),), 12),
    M("result_before_verify", "step order", "the result is published before the applies and their verification",
      P._migrate_locked,
      (("            for i, p in enumerate(paths):  # each apply\n",
        "            _publish(result_path, {\"schema_id\": _RESULT_SCHEMA, \"request\": rid, \"target\": target,\n"
        "                                   \"backups\": [{\"path\": req[\"stores\"][i][\"backup\"], \"sha256\": b}\n"
        "                                               for i, b in enumerate(backups)]}, \"conflict\")  # MUTANT\n"
        "            for i, p in enumerate(paths):  # each apply\n"),), 14),
    M("maintenance_ended_early", "step order", "maintenance is completed before the result is published",
      P._migrate_locked,
      (("        _publish(result_path, evidence, \"paired_migration_result_conflict\")\n"
        "        hook(\"publish result\")\n"
        "        for i, p in enumerate(paths):  # maintenance completed\n"
        "            if facts_of(p).admission is not None:\n"
        "                with _writing(p, token, busy_timeout, \"reopening it\") as conn:\n"
        "                    W.end_admission(conn)\n"
        "            hook(f\"complete {_store_name(i, n)}\")\n",
        "        for i, p in enumerate(paths):  # MUTANT: maintenance completed before the result\n"
        "            if facts_of(p).admission is not None:\n"
        "                with _writing(p, token, busy_timeout, \"reopening it\") as conn:\n"
        "                    W.end_admission(conn)\n"
        "            hook(f\"complete {_store_name(i, n)}\")\n"
        "        _publish(result_path, evidence, \"paired_migration_result_conflict\")\n"
        "        hook(\"publish result\")\n"),), 16),
    M("recovery_restores_unchanged", "step order", "a recovery restores a store it judged unchanged when a backup "
      "of it is there", P._recover,
      (("                if _unchanged(req, i, facts_of(p)):\n                    restores.append(False)\n",
        "                if _unchanged(req, i, facts_of(p)) and not Path(req[\"stores\"][i][\"backup\"]).exists():\n"
        "                    restores.append(False)  # MUTANT\n"),), 18),
)
#: The mutants of the classes of fault a user meets (each shown in at most 12 moves).
FAULT_MUTANTS = tuple(m for m in MUTANTS if m.fault != "step order")
