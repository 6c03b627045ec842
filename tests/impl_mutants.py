"""Deliberately broken SQLite replicas: the mutants the conformance gate must catch.

Each ``ImplMutant`` is one realistic bug in ``envreplica.impl.replica.SqliteReplica``,
in the decisions it holds (``envreplica.impl.decisions.Decisions``), or, for
the restart mutant, in ``SqliteDriver``. Most are *source mutants*: the
method is recompiled from its own source with an exact text edit that must
match exactly once, so a refactor of the implementation makes the mutant
fail loudly (``MutationTargetMissing``) instead of silently turning back into
the original code. One (``replay_reapplies``) is a small hand-written
wrapper around the original method. The mutated methods are installed on a
subclass, never on ``SqliteReplica`` or ``Decisions`` themselves, so the
real implementation in the same process is untouched: a decisions mutant is
a ``Decisions`` subclass whose instance the mutant replica class holds as its
``decisions`` (the attribute every ``SqliteReplica`` decides through).

The section ``blind spot 1: decisions read independently`` holds mutants of
the implementation's own reading of the seed's pure decisions
(``impl.decisions``). Were the implementation to import the model's decision
functions, such a bug would be in both sides at once and the lockstep would
agree with itself; as it is, each is a bug of one side only, and the lockstep
must see it.

How a mutant is installed: ``SqliteDriver`` has no constructor parameter for
the replica class; its construction point is ``SqliteDriver._open``.
``MutantSqliteDriver`` overrides ``_open`` to build ``replica_class``, and
``ImplMutant.driver(variant, db_path)`` returns a ``MutantSqliteDriver``
subclass carrying the mutant's replica class (and, for driver-level bugs, its
overridden driver methods). ``ImplMutant.factory(directory)`` is the
``Callable[[], Driver]`` that ``run_lockstep`` takes: each call opens a fresh
database file under ``directory``.

Each mutant also carries ``scenario``: a short hand-written list of adapter
requests on which the mutant and the model part (``observe`` says whether the
difference shows in the responses or only in the state read back from
SQLite). ``tests/test_conformance_mutants.py`` checks that each scenario runs
clean on the real implementation and diverges on the mutant, so no mutant is
semantically identical to the original.

Left out, on purpose:

* **Associated data dropped from sealing** (seal and open both with a
  constant AD, ``EQUIVALENT_MUTANTS["seal_constant_ad"]``). Through the
  adapter it is equivalent to the original: the protocol never moves a sealed
  blob to another row, so a constant AD opens exactly where the real one
  does, in the responses and in the state read back alike. Only a test that
  edits the file can see it (``tests/test_impl_replica.py`` does: a moved blob
  fails closed). In its place, ``seal_ad_swaps_revision_generation`` (the AD is
  built with revision and generation swapped on seal) is observable: a value
  whose revision differs from its generation no longer opens and the snapshot
  fails closed.
* **A commit split into two transactions** (a restart between them leaving
  half a view). A commit has no value-store read, so nothing (not even a
  nested ``restart``) can run between its transactions through the adapter.
  In its place, ``delivery_version_bump_split`` moves a delivery's
  record-version bump into its last transaction: a read inside the delivery's
  value-store window sees the new record under the old record version.
"""

from __future__ import annotations

import __future__
import inspect
import itertools
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Union

from envreplica.conformance import drivers as drivers_module
from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
from envreplica.impl import decisions as decisions_module
from envreplica.impl import replica as replica_module
from envreplica.impl.decisions import Decisions, View
from envreplica.impl.replica import SqliteReplica
from envreplica.model.store import legacy_envelope, staged_envelope
from envreplica.spec.domain import ApplyOk
from envreplica.spec.variants import Variant

from adapter_requests import (
    BOOT,
    SID,
    SID2,
    begin,
    commit,
    delivery,
    legacy,
    op,
    page,
    put,
    rec,
    reset,
    snapshot,
    staged,
)

__all__ = [
    "ImplMutant",
    "MutantSqliteDriver",
    "MutationTargetMissing",
    "MUTANTS",
    "EQUIVALENT_MUTANTS",
]


# ---------------------------------------------------------------------------
# Mutation machinery
# ---------------------------------------------------------------------------


class MutationTargetMissing(AssertionError):
    """A mutant's edit no longer matches the implementation's source exactly once."""


def source_mutant(cls: type, name: str, module: ModuleType, *edits: tuple[str, str]) -> Any:
    """``cls.name`` recompiled from its own source with ``edits`` (old, new) applied.

    Each ``old`` must occur exactly once in the method's source. The method is
    compiled in ``module``'s namespace, so it sees the same helpers as the
    original. A ``@staticmethod`` stays one (the decorator is in the source).
    """
    raw = inspect.getattr_static(cls, name)
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    src = textwrap.dedent(inspect.getsource(func))
    for old, new in edits:
        n = src.count(old)
        if n != 1:
            raise MutationTargetMissing(
                f"mutation target in {cls.__name__}.{name} found {n} times (expected 1): {old!r}; "
                "the implementation changed, update this mutant")
        src = src.replace(old, new)
    code = compile(src, f"<mutant of {cls.__name__}.{name}>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    namespace: dict = {}
    exec(code, vars(module), namespace)
    return namespace[name]


#: Where an edit's method goes: a subclass of ``SqliteReplica``, of ``SqliteDriver``, or of ``Decisions``.
ON_REPLICA, ON_DRIVER, ON_DECISIONS = "replica", "driver", "decisions"


def replica_edit(name: str, *edits: tuple[str, str]) -> Callable[[], tuple[str, str, Any]]:
    """A deferred source mutant of ``SqliteReplica.name``: (where, method name, mutated method)."""
    return lambda: (ON_REPLICA, name, source_mutant(SqliteReplica, name, replica_module, *edits))


def driver_edit(name: str, *edits: tuple[str, str]) -> Callable[[], tuple[str, str, Any]]:
    """A deferred source mutant of ``SqliteDriver.name``."""
    return lambda: (ON_DRIVER, name, source_mutant(SqliteDriver, name, drivers_module, *edits))


def decisions_edit(name: str, *edits: tuple[str, str]) -> Callable[[], tuple[str, str, Any]]:
    """A deferred source mutant of ``Decisions.name`` (``impl.decisions``), compiled in that module."""
    return lambda: (ON_DECISIONS, name, source_mutant(Decisions, name, decisions_module, *edits))


class MutantSqliteDriver(SqliteDriver):
    """``SqliteDriver`` whose construction point builds ``replica_class`` instead of ``SqliteReplica``."""

    replica_class: type = SqliteReplica

    def _open(self):
        return self.replica_class(self.db_path, **self._replica_options())


# ---------------------------------------------------------------------------
# Hand-written mutants (a wrapper each)
# ---------------------------------------------------------------------------


def _replay_reapplies() -> tuple[str, str, Any]:
    """A replayed delivery writes its record to the live table again, then answers from its receipt."""
    original = SqliteReplica._delivery_prepare
    slot = replica_module._Slot

    def _delivery_prepare(self, tx, frame, mac):
        out = original(self, tx, frame, mac)
        if isinstance(out, ApplyOk) and out.replayed:
            a = tx.authority()
            if a.attempt_id is None:  # MUTANT: re-apply the delta before answering the replay
                self._retain(tx, slot(View.LIVE, None, frame.project_id, frame.state.key), frame.state,
                             a.policy_epochs)
        return out

    return ON_REPLICA, "_delivery_prepare", _delivery_prepare


# ---------------------------------------------------------------------------
# Scenario records (the request builders are tests/adapter_requests.py)
# ---------------------------------------------------------------------------

A = rec("A")
#: A with a higher listing generation: the same delivery slot, another request.
A_LISTED = rec("A", listing=1)
#: A rotated (generation 2, a new value reference): revision 1 != generation 2.
A_ROT = rec("A", rev=1, gen=2, ref=staged(SID2))
#: A deleted after its first save.
A_DEL = rec("A", rev=2, gen=2, tomb=True)
#: A with the same head and another binding: a conflicting record.
A_OMIT = rec("A", binding={"kind": "omit"})


# ---------------------------------------------------------------------------
# The mutants
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ImplMutant:
    name: str
    bug: str  # the bug, in one line
    edits: tuple[Callable[[], tuple[str, str, Any]], ...]  # each builds (where, method name, mutated method)
    scenario: tuple[dict, ...]  # adapter requests on which mutant and model part
    observe: str = "responses"  # "responses": some response differs; "state": only the state read back
    variant: Variant = Variant.FIXED
    note: str = ""

    def driver_class(self) -> type:
        return _driver_class(self)

    def driver(self, variant: Union[str, Variant, None], db_path: Union[str, os.PathLike]) -> SqliteDriver:
        """A ``SqliteDriver`` on ``db_path`` running this mutant."""
        return self.driver_class()(self.variant if variant is None else variant, db_path, master_key=TEST_MASTER_KEY)

    def factory(self, directory: Union[str, os.PathLike],
                variant: Union[str, Variant, None] = None) -> Callable[[], SqliteDriver]:
        """``impl_factory`` for ``run_lockstep``: each call opens a fresh file under ``directory``."""
        counter = itertools.count()
        directory = Path(directory)

        def make() -> SqliteDriver:
            return self.driver(variant, directory / f"{self.name}-{next(counter)}.db")

        return make


_CLASSES: dict[str, type] = {}


def _driver_class(mutant: ImplMutant) -> type:
    """The mutant's driver class, built once per mutant name (a stale edit raises here)."""
    if mutant.name not in _CLASSES:
        _CLASSES[mutant.name] = _build_driver_class(mutant)
    return _CLASSES[mutant.name]


def _build_driver_class(mutant: ImplMutant) -> type:
    """The driver class of ``mutant``: each edit's method on a subclass of the class it mutates.

    Decisions edits make a ``Decisions`` subclass whose instance the replica
    subclass holds as ``decisions``; the real ``DECISIONS`` is never touched.
    """
    methods: dict[str, dict[str, Any]] = {ON_REPLICA: {}, ON_DRIVER: {}, ON_DECISIONS: {}}
    for build in mutant.edits:
        where, name, method = build()
        methods[where][name] = method
    replica_methods = dict(methods[ON_REPLICA])
    if methods[ON_DECISIONS]:
        decisions_class = type(f"Decisions_{mutant.name}", (Decisions,), methods[ON_DECISIONS])
        replica_methods["decisions"] = decisions_class()
    driver_methods = dict(methods[ON_DRIVER])
    if replica_methods:
        driver_methods["replica_class"] = type(f"SqliteReplica_{mutant.name}", (SqliteReplica,), replica_methods)
    return type(f"Mutant_{mutant.name}", (MutantSqliteDriver,), driver_methods)


M = ImplMutant
MUTANTS: tuple[ImplMutant, ...] = (
    M(
        "replay_skips_mac",
        "a replay is answered from its receipt without comparing the request MAC",
        (replica_edit("_delivery_prepare", (
            "if not Sealer.same_mac(row.request_mac, mac):", "if False:  # MUTANT: MAC not compared")),),
        tuple(BOOT + [delivery(A), delivery(A_LISTED)]),
    ),
    M(
        "delivery_gap_accepted",
        "the delivery cursor accepts any later sequence (`>` where `== applied + 1` is meant)",
        (replica_edit("_delivery_prepare", (
            "if delivery.sequence != current.sequence + 1:",
            "if delivery.sequence <= current.sequence:  # MUTANT")),
         replica_edit("_delivery_final", (
             "or frame.delivery.sequence != current.sequence + 1",
             "or frame.delivery.sequence <= current.sequence  # MUTANT"))),
        tuple(BOOT + [delivery(A, sequence=3), op("status")]),
    ),
    M(
        "close_gate_keeps_staging",
        "close_gate closes the gate but does not purge the staging tables",
        (replica_edit("close_gate", ("tx.clear_stage()\n", "pass  # MUTANT: staging not purged\n")),),
        tuple([reset(), put(), begin(), page([A], version=1), op("close"), op("status")]),
        observe="state",
        note="state only: nothing reads staging rows of a purged attempt (begin clears them first)",
    ),
    M(
        "snapshot_while_closed",
        "the snapshot checks only activation, so it serves while the gate is closed for an attempt",
        (replica_edit("_snapshot", (
            "if not a.serving:",
            "if not a.activated:  # MUTANT")),),
        tuple(BOOT + [begin("a2"), snapshot()]),
    ),
    M(
        "seal_ad_swaps_revision_generation",
        "the sealing AD is built with revision and generation swapped (open uses the right ones)",
        (replica_edit("_seal", (
            "revision=head.revision, generation=head.generation",
            "revision=head.generation, generation=head.revision")),),
        tuple([reset(), put(ref=staged(SID2)), begin(), page([A_ROT], version=1), commit(versions=[("p1", 1)]),
               snapshot()]),
        note="stands in for 'AD dropped' (seal_constant_ad), which the adapter cannot observe",
    ),
    M(
        "stale_check_off_by_one",
        "a page at the live record version is refused as stale (`<=` for `<`)",
        (replica_edit("_page_prepare", (
            "if frame.record_version < live_version:", "if frame.record_version <= live_version:  # MUTANT")),),
        tuple(BOOT + [begin("a2"), page(attempt="a2", version=0)]),
    ),
    M(
        "withheld_keeps_value",
        "a live record that becomes withheld keeps its old value row (cleared only when re-fetching)",
        (replica_edit("_retain", (
            "if plan.drop_value:",
            "if plan.drop_value and (slot.view is View.STAGE or plan.mat.kind is MatKind.UNAVAILABLE):  # MUTANT")),),
        tuple(BOOT + [put(), delivery(A), delivery(A_DEL, sequence=2, version=2), snapshot()]),
    ),
    M(
        "replay_reapplies",
        "a replayed delivery re-applies its record to the live view before answering from its receipt",
        (_replay_reapplies,),
        tuple(BOOT + [put(), delivery(A), begin("a2"), page(attempt="a2", version=2),
                      commit("a2", sequence=1, versions=[("p1", 2)]), delivery(A), snapshot()]),
    ),
    M(
        "commit_ignores_high_water",
        "complete skips the high-water check (frame.high_water != applied)",
        (replica_edit("_complete", ("if frame.high_water != applied:", "if False:  # MUTANT")),),
        tuple([reset(), begin(), page(), commit(sequence=5)]),
    ),
    M(
        "delivery_version_bump_split",
        "a live delivery bumps the record version in its last transaction, not with the record "
        "(a read in the value-store window sees a half-committed view)",
        (replica_edit("_delivery_prepare", (
            "tx.set_project_version(project, frame.record_version)", "pass  # MUTANT: bumped in _delivery_final")),
         replica_edit("_delivery_final", (
             "    result = row.result()\n",
             "    result = row.result()\n"
             "    if prepared.attempt is None:  # MUTANT\n"
             "        tx.set_project_version(frame.project_id, prepared.version)\n"))),
        tuple(BOOT + [put(), delivery(A, during=[snapshot()])]),
        note="stands in for 'commit split in two transactions', which the adapter cannot interrupt",
    ),
    M(
        "f1_fix_dropped",
        "FIX(F1) is skipped under every variant: a stale read installs onto a record no longer awaiting it",
        (replica_edit("_still_awaits_value", (
            "if self.config.variant is Variant.SEED:", "if True:  # MUTANT: FIX(F1) dropped")),),
        tuple([reset(), put(), begin(epochs=(1, 2)),
               page([A], version=1, during=[begin(epochs=(2,)), page([A], version=1)]),
               commit(versions=[("p1", 1)]), snapshot()]),
    ),
    M(
        "f2_fix_dropped",
        "FIX(F2) is skipped: a retained conflicting record keeps its installed value across a policy change",
        (replica_edit("_retain", (
            "rejudge = slot.view is View.STAGE and self.config.variant is Variant.FIXED  # FIX(F2)",
            "rejudge = False  # MUTANT: FIX(F2) dropped")),),
        tuple([reset(), put(), begin(epochs=(1, 2)), page([A], version=1), commit(versions=[("p1", 1)]),
               begin(epochs=(2,)), page([A_OMIT], version=2), commit(versions=[("p1", 2)]), snapshot()]),
    ),
    M(
        "receipts_kept_on_stream_change",
        "a begin on a new stream keeps the old stream's receipts",
        (replica_edit("begin", ("tx.clear_receipts()", "pass  # MUTANT: receipts kept")),),
        tuple(BOOT + [delivery(A), begin("a2", stream="s2"), op("receipts")]),
    ),
    M(
        "org_change_accepted",
        "a begin naming another organisation is accepted after activation",
        (replica_edit("begin", ("if a.activated and a.org_id != org_id:", "if False:  # MUTANT")),),
        tuple(BOOT + [begin("a2", org="o2")]),
    ),
    M(
        "restart_keeps_gate_open",
        "the driver's restart (and crash) reopens the file but does not close the gate (driver level)",
        (driver_edit("_restart", ("self._replica.close_gate()\n", "pass  # MUTANT: gate left open\n")),),
        tuple(BOOT + [op("restart"), op("status")]),
    ),
    M(
        "materialize_onto_changed_record",
        "the live after-transaction installs the fetched value even when the record changed during the read",
        (replica_edit("_materialize", (
            "if current is None or current.state != before:",
            "if current is None or (staged and current.state != before):  # MUTANT: live not re-checked")),),
        tuple(BOOT + [put(), delivery(A, during=[delivery(A_ROT, version=2)]), snapshot()]),
    ),
    # -- blind spot 1: decisions read independently --
    # Each is a bug in the implementation's own reading of one pure decision of the seed
    # (impl.decisions). None breaks a safety property (nothing is served that should not be);
    # each answers differently from the seed, and only the independent model can tell.
    M(
        "desired_binding_before_policy",
        "desiredMaterialization checks the binding before the policy epoch: a record with an unknown epoch and "
        "an omitting binding is withheld as binding_omits, not policy_epoch_unknown",
        (decisions_edit("_withholding", (  # (the method's source is dedented: its rules sit 8 columns in)
            "        (lambda s, kept: WithheldReason.POLICY_EPOCH_UNKNOWN.value\n"
            "         if s.policy_epoch is None or s.policy_epoch not in kept else None),\n"
            "        (lambda s, kept: WithheldReason.BINDING_OMITS.value if isinstance(s.binding, BindOmit) else None),\n",
            "        (lambda s, kept: WithheldReason.BINDING_OMITS.value if isinstance(s.binding, BindOmit) else None),\n"
            "        (lambda s, kept: WithheldReason.POLICY_EPOCH_UNKNOWN.value  # MUTANT: after the binding\n"
            "         if s.policy_epoch is None or s.policy_epoch not in kept else None),\n")),),
        tuple(BOOT + [delivery(rec("A", binding={"kind": "omit"}, epoch=2))]),
    ),
    M(
        "relisting_by_one_is_a_conflict",
        "stateOrder off by one on listingGeneration: the same head relisted one step later is a conflict, not "
        "newer (a relisting delivery is answered with the retained record instead of applied)",
        (decisions_edit("order", ("if d_listing > 0:  # the same head, relisted",
                                  "if d_listing > 1:  # MUTANT: off by one")),),
        tuple(BOOT + [delivery(A), delivery(A_LISTED, sequence=2, version=2)]),
    ),
    M(
        "staged_envelope_org_unchecked",
        "readMaterializedValue's staged envelope check drops orgId: a value another organisation's envelope "
        "carries is installed instead of value_envelope_mismatch",
        (decisions_edit("_staged_envelope", (
            'expected = {"kind": "project-env", "orgId": org_id, "projectId": project_id,',
            'expected = {"kind": "project-env", "projectId": project_id,  # MUTANT: orgId not compared')),),
        tuple(BOOT + [put(raw=staged_envelope("o2", "p1", "A", SID, "secret-of-o2")), delivery(A), snapshot()]),
    ),
    M(
        "staged_envelope_staging_id_unchecked",
        "readMaterializedValue's staged envelope check drops stagingId: the value staged for another "
        "generation (a stale one) is installed under the new head instead of value_envelope_mismatch",
        (decisions_edit("_staged_envelope", (
            '"stagingId": ref.staging_id}', '}  # MUTANT: stagingId not compared')),),
        tuple(BOOT + [put(raw=staged_envelope("o1", "p1", "A", SID2, "stale")), delivery(A), snapshot()]),
    ),
    M(
        "legacy_envelope_project_unchecked",
        "readMaterializedValue's legacy envelope check drops projectId: another project's legacy value "
        "under the same key is installed instead of value_envelope_mismatch",
        (decisions_edit("_legacy_envelope", (
            'if envelope["projectId"] != project_id or envelope["key"] != state.key:',
            'if envelope["key"] != state.key:  # MUTANT: projectId not compared')),),
        tuple(BOOT + [put(ref=legacy(1), raw=legacy_envelope("p2", "A", "secret-of-p2")),
                      delivery(rec("A", ref=legacy(1))), snapshot()]),
    ),
    # -- the record domain: a snapshot at the live version, combined moves, typed legacy envelopes --
    # A snapshot that re-sends the live version with another set of records (the lockstep's
    # "live-version page" items), a record move that changes several fields at once ("record move"),
    # a legacy envelope whose field has another JSON type ("legacy envelope").
    M(
        "live_page_compared_one_way",
        "a complete page at the live record version is compared one way: every staged record has an equal "
        "live one, but not every live record a staged one, so a page that leaves a live record out is "
        "accepted and the commit drops the record without a version bump",
        (replica_edit("_page_prepare", (
            "if frame.complete and at_live_version and not tx.live_matches_staged(attempt, project):",
            "if frame.complete and at_live_version and tx.db.execute(  # MUTANT: staged EXCEPT live only\n"
            "        'SELECT COUNT(*) FROM (SELECT key, revision, generation, tombstone, value_ref_json, binding_json,'\n"
            "        ' policy_epoch, listing_generation FROM stage_records WHERE attempt_id = ?1 AND project_id = ?2'\n"
            "        ' AND present EXCEPT SELECT key, revision, generation, tombstone, value_ref_json, binding_json,'\n"
            "        ' policy_epoch, listing_generation FROM records WHERE project_id = ?2)',\n"
            "        (attempt, project)).fetchone()[0]:")),),
        tuple(BOOT + [put(), delivery(A), begin("a2"),
                      page(attempt="a2", version=1), commit("a2", sequence=1, versions=[("p1", 1)]), snapshot()]),
    ),
    M(
        "live_page_set_checked_on_later_pages_only",
        "the whole-set comparison of a complete page at the live record version runs only for a snapshot's "
        "later pages (a single page's records were each compared with their live twins), so a one-page "
        "snapshot that leaves a live record out is accepted",
        (replica_edit("_page_prepare", (
            "if frame.complete and at_live_version and not tx.live_matches_staged(attempt, project):",
            "if frame.complete and at_live_version and frame.after is not None"
            " and not tx.live_matches_staged(attempt, project):  # MUTANT")),),
        tuple(BOOT + [put(), delivery(A), begin("a2"), page(attempt="a2", version=1),
                      commit("a2", sequence=1, versions=[("p1", 1)]), snapshot()]),
    ),
    M(
        "upgrade_moves_value_ref",
        "a revision bump at the same generation may carry a new value reference (read into both stateOrder "
        "and isReachableRecordAdvance: a generation that stays put keeps the reference): applied, not refused",
        (decisions_edit("order", (
            "kept += _KEPT_BY_GENERATION", 'kept += ("tombstone",)  # MUTANT: the value reference may move')),
         decisions_edit("_moves", (
             '(1, 0): (both_live, same("valueRef")),', '(1, 0): (both_live,),  # MUTANT: valueRef may move'))),
        tuple(BOOT + [put(), put(ref=staged(SID2)), delivery(A),
                      delivery(rec("A", rev=2, gen=1, ref=staged(SID2)), sequence=2, version=2), snapshot()]),
    ),
    M(
        "delete_rebinds",
        "isReachableRecordAdvance lets a delete (or a save after a delete) change the binding too: the "
        "move is applied instead of refused",
        (decisions_edit("_moves", (
            'return c.head.tombstone != i.head.tombstone and same("binding", "policyEpoch")(i, c)',
            'return c.head.tombstone != i.head.tombstone and same("policyEpoch")(i, c)  # MUTANT')),),
        tuple(BOOT + [put(), delivery(A),
                      delivery(rec("A", rev=2, gen=2, tomb=True, binding={"kind": "omit"}), sequence=2, version=2),
                      snapshot()]),
    ),
    M(
        "legacy_fields_untyped",
        "parseStoredProjectEnv read as key and kind checks only: a legacy envelope whose value is a number "
        "is taken as the value, and sealing it raises after the delivery's first transaction committed "
        "(the seed answers value_unavailable)",
        (decisions_edit("_legacy_envelope", (
            "envelope = _stored_project_env(answer.raw)",
            "envelope = _js_json(answer.raw)  # MUTANT: no field is type-checked\n"
            "    if type(envelope) is not dict or envelope.keys() != _LEGACY_ENVELOPE"
            " or envelope[\"kind\"] != \"project-env\":\n"
            "        raise _Unparsable()")),),
        tuple(BOOT + [put(ref=legacy(1), raw='{"v":1,"kind":"project-env","projectId":"p1","key":"A","value":5}'),
                      delivery(rec("A", ref=legacy(1))), snapshot()]),
    ),
    M(
        "legacy_value_stringified",
        "a legacy envelope's value of another JSON type is made text (a number 5 served as \"5\") instead "
        "of value_unavailable",
        (decisions_edit("_legacy_envelope", (
            "envelope = _stored_project_env(answer.raw)",
            "envelope = _js_json(answer.raw)  # MUTANT: no field is type-checked\n"
            "    if type(envelope) is not dict or envelope.keys() != _LEGACY_ENVELOPE:\n"
            "        raise _Unparsable()"), (
            'return Fetched(envelope["value"], None)', 'return Fetched(str(envelope["value"]), None)  # MUTANT')),),
        tuple(BOOT + [put(ref=legacy(1), raw='{"v":1,"kind":"project-env","projectId":"p1","key":"A","value":5}'),
                      delivery(rec("A", ref=legacy(1))), snapshot()]),
    ),
)

#: Mutants that no adapter request sequence can tell from the original (see the module docstring).
EQUIVALENT_MUTANTS: dict[str, ImplMutant] = {
    "seal_constant_ad": M(
        "seal_constant_ad",
        "values are sealed and opened with a constant AD (not bound to project, key, head)",
        (replica_edit("_seal", (
            "project_id=project, key=key, revision=head.revision, generation=head.generation,\n"
            "        value_ref=wire.encode(head.value_ref),",
            "project_id='', key='', revision=0, generation=0, value_ref={},  # MUTANT")),
         replica_edit("_open_value", (
             "project_id=project, key=key, revision=vrow.revision,\n"
             "            generation=vrow.generation, value_ref=encoded,",
             "project_id='', key='', revision=0, generation=0, value_ref={},  # MUTANT"))),
        (),
        observe="none",
    ),
}

