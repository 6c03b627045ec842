"""The SQLite replica (``envreplica.impl.replica``) judged by the model.

Every scenario runs the same operations on the model (``model.actions.step``
over a ``State``) and on a ``SqliteReplica`` reading an ``EmbeddedStore``,
and after every operation asserts equal results and
``with_macs(model_state, mac_of(sealer)) == impl_model_state(replica)``
(``conformance.readback``: the replica's ``export_state`` document read into
the model's shape), plus equal reads (status, snapshot, diagnostics and
their reason class, receipts, readiness). A value-store
read in flight on the model side is a ``Pending`` result resumed with the
answer the same store gives; ``during_fetch`` on the implementation side runs
the nested operations where the model runs them, between ``Pending`` and
``Resume``.

Then what the model cannot say: no plaintext on disk, a moved sealed blob
fails closed, a reopened file holds exactly what was committed, a constraint
violation is ``CorruptReplica``, readiness wakes its waiter, the crash hook
``after_commit`` is called after exactly the write commits
docs/protocol.md section 6 counts, and two processes hammering one file
leave it intact.
"""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

from envreplica.conformance.drivers import model_diagnosis
from envreplica.conformance.readback import doc_to_state, impl_model_state, mac_of, with_macs
from envreplica.impl import writer
from envreplica.impl.config import ReplicaConfig
from envreplica.impl.replica import SqliteReplica, request_mac
from envreplica.impl.sealing import Sealer
from envreplica.impl.valuestores import EmbeddedStore, ValueStoreError, put_for_ref
from envreplica.model import generate as G
from envreplica.model import presets
from envreplica.model import replica as M
from envreplica.model.actions import (
    Begin,
    CloseGate,
    Commit,
    CrashAfter,
    Deliver,
    Page,
    Read,
    Restart,
    Resume,
    StoreOff,
    run_until_crash,
    step,
)
from envreplica.model.state import INITIAL, ModelConfig, State, Variant
from envreplica.model.store import Found, Missing, Raises, staged_envelope
from envreplica.spec import properties as P
from envreplica.spec.domain import (
    INSTALLED,
    ApplyFrame,
    ApplyOk,
    ApplyRefused,
    BeginFrame,
    BeginResult,
    BindingState,
    BindWithhold,
    CommitFrame,
    CommitOk,
    CorruptReplica,
    Crashed,
    Cursor,
    Done,
    Failed,
    Head,
    InvalidFrame,
    PageFrame,
    PageOk,
    PageRefused,
    Pending,
    ProjectVersion,
    Diagnosis,
    DiagnosisReason,
    RefusalCode,
    ReplicaError,
    StagedRef,
    UnavailableReason,
    WithheldReason,
    unavailable,
    withheld,
)

MASTER = bytes(range(32))
ORG = "org"
S1, S2 = "s1", "s2"
A1, A2 = "a1", "a2"
P1 = "p1"
KEY = "API_KEY"
KEY_B = "B_KEY"

UUID_1 = "0f8fad5b-d9cb-469f-a165-70867728950e"
UUID_2 = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
UUID_3 = "16fd2706-8baf-433b-82eb-8c7fada847da"
REF_1, REF_2, REF_3 = StagedRef(UUID_1), StagedRef(UUID_2), StagedRef(UUID_3)

#: A first save under kept epoch 1, its rotation, its deletion; another key.
REC = BindingState(KEY, Head(1, 1, False, REF_1), None, 1, 0)
REC_ROT = BindingState(KEY, Head(1, 2, False, REF_2), None, 1, 0)
REC_DEL = BindingState(KEY, Head(2, 3, True, None), None, 1, 0)
REC_B = BindingState(KEY_B, Head(1, 1, False, REF_3), None, 1, 0)

SECRET = "secret-value-8f3a91c2e7"
ROTATED = "rotated-value-5b0d44e19a"
SECRET_B = "other-secret-value-c1d9e2"


def begin_action(stream=S1, attempt=A1, projects=(P1,), epochs=(1, 2), org=ORG) -> Begin:
    return Begin(BeginFrame(stream, attempt, tuple(projects)), tuple(epochs), org)


def page_action(attempt=A1, version=1, records=(REC,), after=None, complete=True, project=P1) -> Page:
    return Page(PageFrame(f"op-page-{attempt}-{version}", attempt, project, after, version, tuple(records), complete))


def commit_action(attempt=A1, high=(S1, 0), versions=((P1, 1),)) -> Commit:
    return Commit(CommitFrame(attempt, Cursor(*high), tuple(ProjectVersion(p, v) for p, v in versions)))


def deliver_action(sequence, version, state, stream=S1, attempt=None, op="op-d", project=P1) -> Deliver:
    return Deliver(ApplyFrame(f"{op}{sequence}", project, version, state, Cursor(stream, sequence), attempt))


def impl_config(cfg: ModelConfig) -> ReplicaConfig:
    """The implementation's config for the model's (the same variant, bound and prefix)."""
    return ReplicaConfig(cfg.variant, cfg.ack_page_bytes, cfg.prefix)


def answer_of(store: EmbeddedStore, request):
    """What ``store`` answers the model's read ``request``, as the model's ``Answer``."""
    ref = request.ref
    try:
        if isinstance(ref, StagedRef):
            raw = store.read_staged(request.name)
            return Missing() if raw is None else Found(raw)
        got = store.read_legacy(request.name, ref.ssm_version)
        return Missing() if got is None else Found(got[0], got[1])
    except ValueStoreError:
        return Raises()


def readback(replica: SqliteReplica) -> State:
    """The replica's tables in the model's shape (``conformance.readback``), read both ways: typed rows
    straight into the model's (what the lockstep uses) and through the JSON ``state`` document."""
    direct = impl_model_state(replica)
    via_doc = doc_to_state(replica.export_state(), store_on=replica.reader is not None)
    if direct != via_doc:
        from envreplica.conformance.replica.compare import state_difference
        raise AssertionError(state_difference(via_doc, direct))
    return direct


# ---------------------------------------------------------------------------
# The twin: the model and the implementation side by side
# ---------------------------------------------------------------------------


class Twin:
    """Runs each action on the model and on a ``SqliteReplica``, comparing everything after each."""

    def __init__(self, path: Path, variant: Variant = Variant.FIXED, store_on: bool = True) -> None:
        self.cfg = ModelConfig(variant=variant)
        self.sealer = Sealer(MASTER)
        self.store = EmbeddedStore()
        self.path = path
        self.store_on = store_on
        self.impl = SqliteReplica(path, sealer=self.sealer, reader=self.store if store_on else None,
                                  config=impl_config(self.cfg))
        self.st: State = INITIAL if store_on else replace(INITIAL, store_on=False)
        self.projects: tuple[str, ...] = (P1,)
        self.check()

    def put(self, state: BindingState, value: str, project: str = P1, org: str = ORG) -> None:
        """The value store answers ``state``'s reference with a well-formed envelope of ``value``."""
        ref = state.head.value_ref
        put_for_ref(self.store, self.cfg.prefix, project, state.key, ref,
                    staged_envelope(org, project, state.key, ref.staging_id, value))

    # -- model side --------------------------------------------------------

    def _mstep(self, action):
        self.st, result = step(self.cfg, self.st, action)
        return result

    def _model(self, action, nested=()):
        result = self._mstep(action)
        nested_results = []
        fired = False
        while isinstance(result, Pending):
            slot = result.slot
            if not fired:
                fired = True
                nested_results = [self._model(n)[0] for n in nested]
            request = self.st.inflight[slot].read.request
            result = self._mstep(Resume(slot, answer_of(self.store, request)))
        return result, nested_results, fired

    # -- implementation side ----------------------------------------------

    def _impl(self, action, during=None):
        r = self.impl
        try:
            if isinstance(action, Begin):
                return r.begin(action.frame, action.kept_epochs, action.org_id)
            if isinstance(action, Page):
                return r.apply_page(action.frame, during)
            if isinstance(action, Deliver):
                return r.apply_delivery(action.frame, during)
            if isinstance(action, Commit):
                return r.complete(action.frame)
            if isinstance(action, CloseGate):
                assert r.close_gate() is None
                return Done()
        except ReplicaError as error:
            return Failed(error.wire_type, error.message)
        raise TypeError(action)

    # -- both ----------------------------------------------------------------

    def do(self, action, nested=(), *, expect_window: Optional[bool] = None):
        impl_nested = []
        calls = []

        def during():
            calls.append(1)
            impl_nested.extend(self._impl(n) for n in nested)

        impl_result = self._impl(action, during)
        model_result, model_nested, fired = self._model(action, nested)
        assert impl_result == model_result, (action, impl_result, model_result)
        assert impl_nested == model_nested
        assert len(calls) == (1 if fired else 0), "during_fetch runs exactly at the model's first Pending"
        if expect_window is not None:
            assert fired is expect_window
        self.check()
        return impl_result

    def check(self) -> None:
        assert self.st.inflight == ()
        assert with_macs(self.st, mac_of(self.sealer)) == readback(self.impl)
        ids = sorted(set(self.projects) | set(self.st.projects))
        for request in (list(self.projects), ids):
            assert self.impl.read_snapshot(request) == M.read_snapshot(self.st, request, self.cfg)
            assert self.impl.snapshot_diagnostics(request) == M.snapshot_diagnostics(self.st, request, self.cfg)
            diagnosis, expected = self.impl.diagnose(request), model_diagnosis(self.st, request, self.cfg)
            assert (diagnosis and diagnosis.reason) == (expected and expected.reason), (diagnosis, expected)
        if self.st.authority.gate.activated:
            assert self.impl.read_status() == M.read_status(self.st)
        assert self.impl.list_receipts() == M.list_receipts(self.st)
        assert self.impl.is_ready() == M.is_ready(self.st)

    def served(self) -> dict[str, Optional[str]]:
        snapshot = self.impl.read_snapshot([P1])
        assert snapshot is not None
        return {e.state.key: e.value for p in snapshot.projects for e in p.entries}

    def open_with(self, records=(REC,), values=(SECRET,)) -> None:
        """begin a1, page p1 v1 with ``records`` (values fetched), commit: open and serving."""
        for rec, value in zip(records, values):
            self.put(rec, value)
        assert isinstance(self.do(begin_action()), BeginResult)
        assert isinstance(self.do(page_action(records=records)), PageOk)
        assert isinstance(self.do(commit_action()), CommitOk)


@pytest.fixture
def twin(tmp_path):
    t = Twin(tmp_path / "replica.db")
    yield t
    t.impl.close()


def _twin(tmp_path, **kw) -> Twin:
    return Twin(tmp_path / f"replica-{len(list(tmp_path.iterdir()))}.db", **kw)


# ---------------------------------------------------------------------------
# Scenarios against the model
# ---------------------------------------------------------------------------


def test_begin_page_read_commit_serve(twin):
    twin.put(REC, SECRET)
    assert not twin.impl.is_ready()
    begun = twin.do(begin_action())
    assert begun == BeginResult(Cursor(S1, 0), (1, 2))
    page = twin.do(page_action(), expect_window=True)
    assert isinstance(page, PageOk) and page.results[0].materialization == INSTALLED
    assert twin.impl.read_snapshot([P1]) is None  # staged, not served
    assert isinstance(twin.do(commit_action()), CommitOk)
    assert twin.served() == {KEY: SECRET}
    assert twin.impl.is_ready()
    twin.impl.await_ready(0.01)


def test_live_delivery_replay_and_conflict(twin):
    twin.open_with()
    twin.put(REC_ROT, ROTATED)
    rotate = deliver_action(1, 2, REC_ROT)
    applied = twin.do(rotate, expect_window=True)
    assert isinstance(applied, ApplyOk) and not applied.replayed and applied.result.materialization == INSTALLED
    assert twin.served() == {KEY: ROTATED}

    replayed = twin.do(replace(rotate, frame=replace(rotate.frame, op_id="op-again", reconciliation_attempt_id=None)))
    assert isinstance(replayed, ApplyOk) and replayed.replayed and replayed.result == applied.result
    conflict = twin.do(deliver_action(1, 3, REC_DEL))
    assert isinstance(conflict, ApplyRefused) and conflict.code is RefusalCode.DELIVERY_CONFLICT

    # Transient refusals, then consumed ones (receipted, cursor moves), then a replay of a refusal.
    assert twin.do(deliver_action(3, 3, REC_DEL)).code is RefusalCode.DELIVERY_GAP
    assert twin.do(deliver_action(2, 3, REC_DEL, stream=S2)).code is RefusalCode.STREAM_MISMATCH
    assert twin.do(deliver_action(2, 3, REC_DEL, attempt=A1)).code is RefusalCode.RECONCILIATION_ATTEMPT_MISMATCH
    assert twin.do(deliver_action(2, 4, REC_DEL)).code is RefusalCode.RECORD_VERSION_GAP
    gone = twin.do(deliver_action(2, 1, REC_DEL, project="p9"))
    assert gone.code is RefusalCode.PROJECT_NOT_IN_REPLICA and gone.consumed
    assert twin.do(deliver_action(3, 2, REC_B)).code is RefusalCode.RECORD_VERSION_CONFLICT
    again = twin.do(deliver_action(2, 1, REC_DEL, project="p9"))
    assert again.replayed and again.code is RefusalCode.PROJECT_NOT_IN_REPLICA
    # An older state is answered with what is retained (and receipted).
    older = twin.do(deliver_action(4, 2, REC))
    assert isinstance(older, ApplyOk) and older.result.state == REC_ROT
    deleted = twin.do(deliver_action(5, 3, REC_DEL))
    assert deleted.result.materialization == withheld(WithheldReason.TOMBSTONE)
    assert twin.served() == {KEY: None}
    assert [r.sequence for r in twin.impl.list_receipts()] == [1, 2, 3, 4, 5]


def test_delivery_during_staging_and_wrong_envelope(twin):
    twin.open_with()
    twin.do(begin_action(attempt=A2))
    twin.do(page_action(attempt=A2, version=1, records=(REC,)))
    # Staged delivery of a new key whose envelope names another organisation.
    twin.put(REC_B, SECRET_B, org="org2")
    early = twin.do(deliver_action(1, 2, REC_B, attempt=A2))
    assert isinstance(early, ApplyOk)
    assert early.result.materialization == unavailable(UnavailableReason.VALUE_ENVELOPE_MISMATCH)
    assert twin.do(commit_action(attempt=A2, high=(S1, 1), versions=((P1, 2),))).ok
    assert twin.served() == {KEY: SECRET, KEY_B: None}


def test_snapshot_version_conflict_keeps_its_staged_write(twin):
    twin.open_with()
    twin.do(begin_action(attempt=A2))
    relisted = replace(REC, listing_generation=1)  # same live version, not the same record
    refused = twin.do(page_action(attempt=A2, version=1, records=(relisted,)))
    assert isinstance(refused, PageRefused) and refused.code is RefusalCode.SNAPSHOT_VERSION_CONFLICT
    staged = readback(twin.impl).stage_records[(A2, P1, KEY)]
    assert staged.state == relisted and staged.present  # the refusal committed the staged write
    # Other refusals change nothing.
    for action, code in (
        (page_action(attempt=A2, version=0), RefusalCode.RECORD_VERSION_STALE),
        (page_action(attempt=A2, project="p9"), RefusalCode.PROJECT_NOT_IN_ATTEMPT),
        (page_action(attempt=A1), RefusalCode.RECONCILIATION_ATTEMPT_MISMATCH),
        (page_action(attempt=A2, after="A"), RefusalCode.SNAPSHOT_PAGE_MISMATCH),
    ):
        before = readback(twin.impl)
        assert twin.do(action).code is code
        assert readback(twin.impl) == before
    assert twin.do(commit_action(attempt=A2)).code is RefusalCode.RECORD_VERSION_CHANGED
    assert twin.do(commit_action(attempt=A2, high=(S1, 3))).code is RefusalCode.DELIVERY_INCOMPLETE


def test_store_off_gives_credential_store_unavailable(tmp_path):
    twin = _twin(tmp_path, store_on=False)
    twin.do(begin_action())
    page = twin.do(page_action(), expect_window=False)  # answered without I/O: no window
    assert page.results[0].materialization == unavailable(UnavailableReason.CREDENTIAL_STORE_UNAVAILABLE)
    twin.do(commit_action())
    assert twin.served() == {KEY: None}
    twin.impl.close()


def test_errors_match_the_model(twin):
    corrupt = twin.do(deliver_action(1, 1, REC))
    assert corrupt == Failed("corrupt", "replica delivery arrived before activation")
    assert twin.do(page_action()) == Failed("corrupt", "project environment replica has not been activated")
    twin.do(CloseGate())  # an inactive replica stays inactive
    twin.do(begin_action())
    assert twin.do(begin_action(attempt=A2, org="org2")) == Failed(
        "corrupt", "replica organization cannot change after activation")
    # Frames are checked at the boundary (the seed's "invalid ..."): nothing changes.
    before = readback(twin.impl)
    with pytest.raises(InvalidFrame):
        twin.impl.begin(BeginFrame(S1, A2, (P1,)), (2, 1), ORG)
    with pytest.raises(InvalidFrame):
        twin.impl.apply_page(PageFrame("op", A1, P1, None, 1, (REC_B, REC), True))  # keys not ascending
    assert readback(twin.impl) == before


def test_close_gate_and_begin_inside_the_read_window(twin):
    twin.put(REC, SECRET)
    twin.do(begin_action())
    page = twin.do(page_action(), nested=(CloseGate(), begin_action(attempt=A2)), expect_window=True)
    assert page.code is RefusalCode.RECONCILIATION_ATTEMPT_MISMATCH
    assert twin.impl.read_status().attempt_id == A2
    # A live delivery whose read window sees the gate close: the receipt is still written.
    twin.do(page_action(attempt=A2))
    twin.do(commit_action(attempt=A2))
    twin.put(REC_ROT, ROTATED)
    applied = twin.do(deliver_action(1, 2, REC_ROT), nested=(CloseGate(),), expect_window=True)
    assert isinstance(applied, ApplyOk) and applied.result.materialization == INSTALLED
    assert not twin.impl.is_ready()
    # A staged delivery whose read window sees a new begin: replica_state_changed.
    twin.do(begin_action(attempt="a3"))
    twin.do(page_action(attempt="a3", version=2, records=(REC_ROT,)))
    twin.put(REC_B, SECRET_B)
    changed = twin.do(deliver_action(2, 3, REC_B, attempt="a3"), nested=(begin_action(attempt="a4"),),
                      expect_window=True)
    assert changed.code is RefusalCode.REPLICA_STATE_CHANGED and not changed.consumed


def _f1_cloud(twin: Twin) -> ApplyRefused:
    """docs/findings.md, F1 on a consistent cloud (9 steps)."""
    twin.do(begin_action(epochs=(1, 2)))
    twin.do(page_action(version=0, records=()))
    twin.do(commit_action(versions=((P1, 0),)))
    twin.put(REC, SECRET)
    result = twin.do(
        deliver_action(1, 1, REC),
        nested=(
            begin_action(stream=S2, attempt=A2, epochs=(2,)),
            page_action(attempt=A2, version=1, records=(REC,)),
            commit_action(attempt=A2, high=(S2, 0), versions=((P1, 1),)),
        ),
        expect_window=True,
    )
    assert result.code is RefusalCode.REPLICA_STATE_CHANGED
    return result


def test_f1_seed_serves_under_an_unkept_epoch(tmp_path):
    twin = _twin(tmp_path, variant=Variant.SEED)
    _f1_cloud(twin)
    assert twin.served() == {KEY: SECRET}  # epoch 1 is no longer kept: the seed's bug
    state = readback(twin.impl)
    assert not P.served_values_are_live_bound_kept(state)
    twin.impl.close()


@pytest.mark.parametrize("variant", [Variant.FIX_F1, Variant.FIXED])
def test_f1_fixed_does_not_serve(tmp_path, variant):
    twin = _twin(tmp_path, variant=variant)
    _f1_cloud(twin)
    assert twin.served() == {KEY: None}
    assert readback(twin.impl).records[(P1, KEY)].mat == withheld(WithheldReason.POLICY_EPOCH_UNKNOWN)
    assert all(p.check(readback(twin.impl)) for p in P.INVARIANTS)
    twin.impl.close()


@pytest.mark.parametrize("variant, serves", [(Variant.FIX_F1, True), (Variant.FIXED, False)])
def test_f2_retained_conflict_under_narrowed_epochs(tmp_path, variant, serves):
    """docs/findings.md, F2 (7 steps): fix-f1 still serves, fixed withholds."""
    twin = _twin(tmp_path, variant=variant)
    twin.put(REC, SECRET)
    twin.do(begin_action(epochs=(1, 2)))
    twin.do(page_action(version=1, records=(REC,)))
    twin.do(commit_action())
    twin.do(begin_action(epochs=(2,)))
    twin.do(page_action(version=2, records=(replace(REC, binding=BindWithhold("other")),)))
    assert twin.do(commit_action(versions=((P1, 2),))).ok
    assert twin.served() == {KEY: SECRET if serves else None}
    twin.impl.close()


# ---------------------------------------------------------------------------
# Random walks of the model's own generators, replayed on the implementation
# ---------------------------------------------------------------------------


class ScriptedReader:
    """A value store that gives, in order, the answers the model's walk chose (and checks the names)."""

    def __init__(self) -> None:
        self.script: list = []

    def _next(self, name: str, version=None):
        assert self.script, f"the implementation read {name} but the model did not"
        request, answer = self.script.pop(0)
        assert request.name == name
        assert version is None or version == request.ref.ssm_version
        if isinstance(answer, Raises):
            raise ValueStoreError("scripted failure")
        if isinstance(answer, Missing):
            return None
        assert isinstance(answer, Found)
        return answer.raw if version is None else (answer.raw, answer.version)

    def read_staged(self, name: str):
        return self._next(name)

    def read_legacy(self, name: str, version: int):
        return self._next(name, version)


def _impl_step(impl: SqliteReplica, action, path: Path, cfg: ModelConfig, reader) -> tuple:
    """Run ``action`` on the implementation; Restart reopens the file and closes the gate."""
    try:
        if isinstance(action, Restart):
            store_on = impl.reader is not None
            impl.close()
            impl = SqliteReplica(path, sealer=Sealer(MASTER), reader=reader if store_on else None,
                                 config=impl_config(cfg))
            impl.close_gate()
            return impl, Done()
        if isinstance(action, StoreOff):
            impl.reader = None
            return impl, Done()
        if isinstance(action, Begin):
            return impl, impl.begin(action.frame, action.kept_epochs, action.org_id)
        if isinstance(action, Page):
            return impl, impl.apply_page(action.frame)
        if isinstance(action, Deliver):
            return impl, impl.apply_delivery(action.frame)
        if isinstance(action, Commit):
            return impl, impl.complete(action.frame)
        if isinstance(action, CloseGate):
            impl.close_gate()
            return impl, Done()
        if isinstance(action, Read):  # the served view, or why not (compared by reason: ``_compared``)
            snapshot = impl.read_snapshot(action.project_ids)
            return impl, snapshot if snapshot is not None else impl.diagnose(action.project_ids)
    except ReplicaError as error:
        return impl, Failed(error.wire_type, error.message)
    raise TypeError(action)


WALK_BOUNDS = {
    "cloud": presets.CLOUD,
    "cloud-legacy": presets.CLOUD_LEGACY,
    "adversary": presets.ADVERSARY,
    "adversary-wide": presets.ADVERSARY_WIDE,
}


#: Walks per test and steps per walk (the bounds are small: short walks, many of them).
WALKS, WALK_STEPS = 12, 16

#: How often a walk picks each kind of action: mostly pages and deliveries, so
#: reads (and their windows) happen; closes and restarts rarely, so state builds up.
WALK_WEIGHTS = {"Page": 4, "Deliver": 4, "Commit": 2, "CloudChange": 2, "Begin": 1,
                "CloseGate": 0.3, "Restart": 0.3, "StoreOff": 0.1, "Read": 0.3}


def _compared(result):
    """A result as the walk compares it: a diagnosis by its reason (its message is for people)."""
    return Diagnosis(result.reason, "") if isinstance(result, Diagnosis) else result


def _walkable(action, *, nested: bool = False) -> bool:
    """An action a walk picks: not a read's answer (the walk feeds those itself), no crash of one;
    inside a read window also no restart and no crash (they would take the suspended operation)."""
    if isinstance(action, Resume) or (isinstance(action, CrashAfter) and isinstance(action.action, Resume)):
        return False
    return not (nested and isinstance(action, (Restart, CrashAfter)))


class _Crash(Exception):
    """The test's crash: raised by ``after_commit`` at the commit a ``CrashAfter`` names."""


def _crash_at(commit: int):
    made = [0]

    def after_commit() -> None:
        made[0] += 1
        if made[0] >= commit:
            raise _Crash(commit)

    return after_commit


def _pick(rng: random.Random, actions: list, cfg: ModelConfig, st: State):
    """A weighted kind, then an action of it; for pages and deliveries, preferably one the
    model accepts (a pure look-ahead), so that walks reach reads instead of refusals."""
    groups: dict[str, list] = {}
    for a in actions:
        groups.setdefault(type(a).__name__, []).append(a)
    kinds = sorted(groups)
    kind = rng.choices(kinds, weights=[WALK_WEIGHTS.get(k, 1) for k in kinds])[0]
    if kind in ("Page", "Deliver"):
        for candidate in rng.sample(groups[kind], min(30, len(groups[kind]))):
            _, result = step(cfg, st, candidate)
            if isinstance(result, (Pending, PageOk, ApplyOk)):
                return candidate
    return rng.choice(groups[kind])


def _resolve(bounds, world, result, rng, reader: ScriptedReader, cfg):
    """Answer the model's reads of the operation suspended in ``result`` until it ends."""
    while isinstance(result, Pending):
        resume = rng.choice([a for a in G.enabled(bounds, world) if isinstance(a, Resume) and a.slot == result.slot])
        reader.script.append((world.replica.inflight[resume.slot].read.request, resume.answer))
        world, result = G.next_state(bounds, world, resume, cfg)
    return world, result


@pytest.mark.parametrize("variant", [Variant.SEED, Variant.FIXED], ids=lambda v: v.value)
@pytest.mark.parametrize("name", sorted(WALK_BOUNDS))
def test_random_walks_agree_with_the_model(tmp_path, name, variant):
    """Seeded walks of the checker's generators: same results, same tables, same served view.

    When the model suspends an operation at its first read, one to three other
    operations (never a restart) run before its answer is used; the
    implementation runs the same ones from ``during_fetch``. Every read is
    answered with an answer class the checker chooses (``model.store.answers``),
    scripted into the implementation's value store in the order it reads.
    """
    bounds = replace(WALK_BOUNDS[name], variant=variant, inflight=1, max_depth=None)
    cfg = bounds.model_config()
    sealer = Sealer(MASTER)
    windows = 0
    for walk in range(WALKS):
        rng = random.Random(f"{name}-{variant.value}-{walk}")
        path = tmp_path / f"walk-{walk}.db"
        reader = ScriptedReader()
        impl = SqliteReplica(path, sealer=sealer, reader=reader, config=impl_config(cfg))
        world = G.init(bounds)
        for _ in range(WALK_STEPS):
            action = _pick(rng, [a for a in G.enabled(bounds, world) if _walkable(a)], cfg, world.replica)
            world, result = G.next_state(bounds, world, action, cfg)
            if isinstance(action, G.CloudChange):
                continue
            nested: list = []
            if isinstance(result, Pending):
                windows += 1
                slot = result.slot
                resume = rng.choice([a for a in G.enabled(bounds, world) if isinstance(a, Resume) and a.slot == slot])
                reader.script.append((world.replica.inflight[slot].read.request, resume.answer))
                for _ in range(rng.randint(1, 3)):
                    inner = _pick(rng, [a for a in G.enabled(bounds, world) if _walkable(a, nested=True)],
                                  cfg, world.replica)
                    world, inner_result = G.next_state(bounds, world, inner, cfg)
                    if not isinstance(inner, G.CloudChange):
                        world, inner_result = _resolve(bounds, world, inner_result, rng, reader, cfg)
                        nested.append((inner, inner_result))
                world, result = G.next_state(bounds, world, resume, cfg)
            world, result = _resolve(bounds, world, result, rng, reader, cfg)

            got: list = []

            def during():
                for inner, _ in nested:
                    got.append(_impl_step(impl, inner, path, cfg, reader)[1])

            crash = action.commit if isinstance(action, CrashAfter) else None
            operation = action.action if isinstance(action, CrashAfter) else action
            if isinstance(operation, (Page, Deliver)):
                def disarm_then_during():
                    impl.after_commit = None  # a run that reaches its read before the crash is a plain run
                    during()

                if crash is not None:
                    impl.after_commit = _crash_at(crash)
                try:
                    call = impl.apply_page if isinstance(operation, Page) else impl.apply_delivery
                    impl_result = call(operation.frame, disarm_then_during)
                except ReplicaError as error:
                    impl_result = Failed(error.wire_type, error.message)
                except _Crash:
                    impl, impl_result = _impl_step(impl, Restart(), path, cfg, reader)[0], Crashed(crash)
                finally:
                    impl.after_commit = None
            else:
                impl, impl_result = _impl_step(impl, action, path, cfg, reader)
            assert reader.script == [], "the model read a value the implementation did not"
            assert got == [r for _, r in nested], (action, nested, got)
            assert _compared(impl_result) == _compared(result), (action, impl_result, result)
            assert with_macs(world.replica, mac_of(sealer)) == readback(impl), action
            ids = sorted(world.replica.projects)
            assert impl.read_snapshot(ids) == M.read_snapshot(world.replica, ids, cfg)
        impl.close()
    if name.startswith("cloud"):
        assert windows > 0, "no read window was ever interleaved"


# ---------------------------------------------------------------------------
# What the model cannot say
# ---------------------------------------------------------------------------


def _files(path: Path) -> list[Path]:
    return [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]


def test_no_plaintext_on_disk(twin):
    twin.open_with(records=(REC, REC_B), values=(SECRET, SECRET_B))
    twin.put(REC_ROT, ROTATED)
    twin.do(deliver_action(1, 2, REC_ROT))
    twin.do(begin_action(attempt=A2))  # copies sealed values into staging too
    assert readback(twin.impl).stage_values[(A2, P1, KEY)].value == ROTATED
    files = _files(twin.path)
    assert Path(f"{twin.path}-wal") in files
    for f in files:
        data = f.read_bytes()
        for value in (SECRET, SECRET_B, ROTATED):
            assert value.encode() not in data, f"plaintext in {f.name}"
    twin.impl.close()
    for f in _files(twin.path):
        assert all(v.encode() not in f.read_bytes() for v in (SECRET, SECRET_B, ROTATED))


def test_moved_blob_fails_closed(twin):
    twin.open_with(records=(REC, REC_B), values=(SECRET, SECRET_B))
    assert twin.served() == {KEY: SECRET, KEY_B: SECRET_B}
    raw = sqlite3.connect(twin.path)
    writer.register_writer(raw)  # tampering as a writer of this version: corruption, not a fenced write
    with raw:
        raw.execute(
            "UPDATE record_values SET value_enc = (SELECT value_enc FROM record_values WHERE key = ?) WHERE key = ?",
            (KEY_B, KEY),
        )
    raw.close()
    assert twin.impl.read_snapshot([P1]) is None
    why = twin.impl.snapshot_diagnostics([P1])
    # The row's integrity tag catches the moved blob before its seal is tried.
    assert why is not None and "does not verify" in why and f"record_values row {P1}/{KEY}" in why
    assert SECRET not in why and SECRET_B not in why
    with pytest.raises(CorruptReplica) as error:
        twin.impl.export_state()
    assert SECRET_B not in str(error.value)
    diagnosis = twin.impl.diagnose([P1])
    assert diagnosis.reason is DiagnosisReason.CORRUPT and diagnosis.message == why


def test_malformed_row_is_corrupt_naming_table_and_key(twin):
    twin.open_with()
    raw = sqlite3.connect(twin.path)
    writer.register_writer(raw)  # tampering as a writer of this version: corruption, not a fenced write
    with raw:
        raw.execute("UPDATE records SET binding_json = '{\"kind\": \"nope\"}' WHERE key = ?", (KEY,))
    raw.close()
    assert twin.impl.read_snapshot([P1]) is None
    # Without the key, an edit is a tamper: the row's tag names it.
    assert twin.impl.snapshot_diagnostics([P1]).startswith(f"records row {P1}/{KEY}: its integrity tag does not verify")


def test_malformed_row_with_a_valid_tag_is_corrupt_naming_table_and_key(twin):
    """A row that verifies but does not parse (a writer's bug, not a tamper) is still corrupt, never served."""
    from envreplica.impl import schema

    twin.open_with()
    raw = sqlite3.connect(twin.path)
    writer.register_writer(raw)
    raw.row_factory = sqlite3.Row
    row = dict(raw.execute("SELECT * FROM records WHERE key = ?", (KEY,)).fetchone())
    row["binding_json"] = '{"kind": "nope"}'
    tag, _ = Sealer(MASTER).rows.seal_row("records", tuple(row[c] for c in schema.TAGGED["records"]))
    with raw:
        raw.execute("UPDATE records SET binding_json = ?, tag = ? WHERE key = ?", (row["binding_json"], tag, KEY))
    raw.close()
    assert twin.impl.read_snapshot([P1]) is None
    assert twin.impl.snapshot_diagnostics([P1]) == f"stored replica record is invalid (records {P1}/{KEY})"


def test_reopened_replica_finds_exactly_what_was_committed(tmp_path):
    twin = _twin(tmp_path)
    twin.open_with()
    twin.put(REC_ROT, ROTATED)

    class Crash(Exception):
        pass

    def crash():
        raise Crash()

    # The delivery's first transaction commits; the process dies inside the read window.
    frame = deliver_action(1, 2, REC_ROT).frame
    with pytest.raises(Crash):
        twin.impl.apply_delivery(frame, during_fetch=crash)
    pending_state, result = step(twin.cfg, twin.st, Deliver(frame))
    assert isinstance(result, Pending)
    twin.impl.close()

    reopened = SqliteReplica(twin.path, sealer=Sealer(MASTER), reader=twin.store, config=impl_config(twin.cfg))
    assert readback(reopened) == with_macs(pending_state.durable(), mac_of(twin.sealer))
    # The host closes the gate on every (re)connection: the model's restart.
    reopened.close_gate()
    restarted, _ = M.restart(twin.cfg, pending_state)
    assert readback(reopened) == with_macs(restarted, mac_of(twin.sealer))
    reopened.close()


def test_constraint_violation_is_corrupt_and_rolls_back_its_transaction(twin):
    twin.open_with()
    raw = sqlite3.connect(twin.path)
    writer.register_writer(raw)  # tampering as a writer of this version: corruption, not a fenced write
    with raw:
        raw.execute("CREATE TRIGGER no_receipts BEFORE INSERT ON receipts BEGIN SELECT RAISE(ABORT, 'refused'); END")
    raw.close()
    before = readback(twin.impl)
    with pytest.raises(CorruptReplica, match="constraint"):
        twin.impl.apply_delivery(deliver_action(1, 1, REC_B, op="x").frame)  # consumed: record_version_conflict
    assert readback(twin.impl) == before


# ---------------------------------------------------------------------------
# The crash hook: after_commit, counted as docs/protocol.md section 6 says
# ---------------------------------------------------------------------------

REC_C = BindingState("C_KEY", Head(1, 1, False, StagedRef("9b2e4f1a-3c5d-4e6f-8a7b-0c1d2e3f4a5b")), None, 1, 0)
REC_TOMB = BindingState("D_KEY", Head(1, 0, True, None), None, 1, 0)  # a first delete on a fence: no fetch


def _count_commits(replica: SqliteReplica) -> list:
    """Install an ``after_commit`` that records each call; the list it appends to."""
    calls: list = []
    replica.after_commit = lambda: calls.append(1)
    return calls


def test_after_commit_counts_a_page_prepare_and_each_materialization(twin):
    twin.put(REC, SECRET)
    twin.put(REC_B, SECRET_B)  # REC_C has no value stored: its read answers value_missing, still a commit
    twin.do(begin_action())
    calls = _count_commits(twin.impl)
    records = tuple(sorted((REC, REC_B, REC_C, REC_TOMB), key=lambda r: r.key))
    page = twin.impl.apply_page(page_action(records=records).frame)
    assert isinstance(page, PageOk)
    # prepare, then one after-transaction per key awaiting a value (three; the tombstone is withheld);
    # the final read is read-only.
    assert len(calls) == 1 + 3
    calls.clear()
    twin.impl.read_snapshot([P1]), twin.impl.read_status(), twin.impl.diagnose([P1])
    assert calls == [], "reads are not write transactions"


def test_after_commit_counts_delivery_transactions(twin):
    twin.open_with()
    calls = _count_commits(twin.impl)
    twin.put(REC_ROT, ROTATED)
    applied = twin.impl.apply_delivery(deliver_action(1, 2, REC_ROT).frame)  # live, with a fetch
    assert isinstance(applied, ApplyOk) and applied.result.materialization == INSTALLED
    assert len(calls) == 3  # prepare, materializeLive's after-transaction, final
    calls.clear()
    replay = twin.impl.apply_delivery(deliver_action(1, 2, REC_ROT).frame)
    assert isinstance(replay, ApplyOk) and replay.replayed
    assert len(calls) == 1  # the prepare transaction answers it (and writes nothing)
    calls.clear()
    gap = twin.impl.apply_delivery(deliver_action(5, 3, REC_DEL).frame)
    assert gap.code is RefusalCode.DELIVERY_GAP and not gap.consumed
    assert len(calls) == 1  # a transient refusal: prepare only, nothing written
    calls.clear()
    consumed = twin.impl.apply_delivery(deliver_action(2, 1, REC_DEL, project="p9").frame)
    assert consumed.code is RefusalCode.PROJECT_NOT_IN_REPLICA and consumed.consumed
    assert len(calls) == 1  # consumed in the prepare transaction
    calls.clear()
    deleted = twin.impl.apply_delivery(deliver_action(3, 3, REC_DEL).frame)  # no fetch: prepare, final
    assert isinstance(deleted, ApplyOk) and len(calls) == 2


@pytest.mark.parametrize("crash_at", [1, 2, 3, 4])
def test_a_crash_after_a_page_commit_keeps_exactly_what_the_model_keeps(tmp_path, crash_at):
    twin = _twin(tmp_path)
    for rec, value in ((REC, SECRET), (REC_B, SECRET_B), (REC_C, "third-value-77")):
        twin.put(rec, value)
    twin.do(begin_action())
    action = page_action(records=tuple(sorted((REC, REC_B, REC_C), key=lambda r: r.key)))

    class Crash(Exception):
        pass

    made = []

    def crash() -> None:
        made.append(1)
        if len(made) == crash_at:
            raise Crash()

    twin.impl.after_commit = crash
    with pytest.raises(Crash):
        twin.impl.apply_page(action.frame)
    assert len(made) == crash_at  # nothing more ran: no later transaction committed
    twin.impl.close()
    reopened = SqliteReplica(twin.path, sealer=Sealer(MASTER), reader=twin.store, config=impl_config(twin.cfg))
    reopened.close_gate()
    # The model, its crash budget carried across each read as the adapter's crashAfterCommit is.
    left = crash_at
    model_state, result, made = run_until_crash(twin.cfg, twin.st, action, left)
    while isinstance(result, Pending):
        left -= made
        answer = answer_of(twin.store, model_state.inflight[result.slot].read.request)
        model_state, result, made = run_until_crash(twin.cfg, model_state, Resume(result.slot, answer), left)
    assert isinstance(result, Crashed)
    assert readback(reopened) == with_macs(model_state, mac_of(twin.sealer))
    reopened.close()


def test_a_raising_after_commit_ends_a_delivery_between_its_transactions(twin):
    twin.open_with()
    twin.put(REC_ROT, ROTATED)
    frame = deliver_action(1, 2, REC_ROT).frame

    def stop() -> None:
        raise LookupError("stop here")  # any exception: it propagates, the operation writes nothing more

    twin.impl.after_commit = stop
    with pytest.raises(LookupError, match="stop here"):
        twin.impl.apply_delivery(frame)
    twin.impl.after_commit = None
    state = readback(twin.impl)
    assert state.records[(P1, KEY)].state == REC_ROT  # the prepare transaction committed ...
    assert state.records[(P1, KEY)].mat == unavailable(UnavailableReason.MATERIALIZATION_PENDING)
    assert len(state.receipts) == 0 and state.authority.applied_sequence == 0  # ... and nothing after it


# ---------------------------------------------------------------------------
# diagnose, export_state, configuration
# ---------------------------------------------------------------------------


def test_diagnose_reasons_in_order(twin):
    assert twin.impl.diagnose([P1]).reason is DiagnosisReason.NOT_ACTIVATED
    twin.put(REC, SECRET)
    twin.do(begin_action())
    assert twin.impl.diagnose([P1]).reason is DiagnosisReason.GATE_CLOSED
    twin.do(page_action())
    twin.do(commit_action())
    assert twin.impl.diagnose([P1]) is None and twin.impl.snapshot_diagnostics([P1]) is None
    for wrong in ([], ["p9"], [P1, P1], [P1, "p9"]):
        diagnosis = twin.impl.diagnose(wrong)
        assert diagnosis.reason is DiagnosisReason.PROJECTS_MISMATCH
        assert twin.impl.snapshot_diagnostics(wrong) == diagnosis.message
    raw = sqlite3.connect(twin.path)
    writer.register_writer(raw)
    with raw:
        raw.execute("UPDATE records SET listing_generation = 7")
    raw.close()
    diagnosis = twin.impl.diagnose([P1])
    assert diagnosis.reason is DiagnosisReason.CORRUPT and "records row" in diagnosis.message
    assert SECRET not in diagnosis.message


def test_export_state_is_the_documented_json_shape(twin):
    import json

    twin.open_with()
    twin.do(deliver_action(1, 1, REC_B, project="p9"))  # a consumed refusal: a receipt without a result
    twin.do(begin_action(attempt=A2))
    doc = twin.impl.export_state()
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
    assert list(doc) == ["authority", "projects", "records", "values", "stageProjects", "stageRecords",
                         "stageValues", "receipts"]
    assert doc["authority"] == {"activated": True, "gateOpen": False, "attemptId": A2, "streamId": S1,
                                "appliedSequence": 1, "orgId": ORG, "policyEpochs": [1, 2]}
    assert doc["values"] == [{"projectId": P1, "key": KEY, "revision": 1, "generation": 1,
                              "valueRef": {"kind": "staged", "stagingId": UUID_1}, "value": SECRET}]
    assert doc["stageRecords"][0]["present"] is False and doc["stageProjects"][0]["recordVersion"] is None
    receipt = doc["receipts"][0]
    assert receipt["requestMac"] == request_mac(twin.sealer, deliver_action(1, 1, REC_B, project="p9").frame)
    assert (receipt["ok"], receipt["code"], receipt["result"]) == (False, "project_not_in_replica", None)


def test_config_is_checked_and_required(tmp_path):
    with pytest.raises(ValueError, match="ack_page_bytes must be a Count"):
        ReplicaConfig(ack_page_bytes=-1)
    with pytest.raises(ValueError, match="variant must be one of"):
        ReplicaConfig(variant="nope")
    assert ReplicaConfig(variant="seed").variant is Variant.SEED
    with pytest.raises(TypeError, match="ReplicaConfig"):
        SqliteReplica(tmp_path / "c.db", sealer=Sealer(MASTER), reader=None, config=ModelConfig())
    assert not (tmp_path / "c.db").exists()


# ---------------------------------------------------------------------------
# conformance.readback: the state document, to and from the model's State
# ---------------------------------------------------------------------------


def _named(request) -> str:
    """A stand-in MAC: the request's canonical JSON (equal exactly when the requests are)."""
    from envreplica.spec import wire

    return "mac:" + wire.canonical_json(request)


def _model_states(walks: int = 6, steps: int = 40):
    """Model states of seeded random walks of the checker's generators (in-flight ones included)."""
    for name, variant in (("cloud", Variant.FIXED), ("cloud-legacy", Variant.SEED), ("adversary", Variant.FIXED),
                          ("adversary-wide", Variant.FIX_F1)):
        bounds = replace(WALK_BOUNDS[name], variant=variant, inflight=1, max_depth=None)
        cfg = bounds.model_config()
        for walk in range(walks):
            rng = random.Random(f"readback-{name}-{walk}")
            world = G.init(bounds)
            for _ in range(steps):
                actions = list(G.enabled(bounds, world))
                if not actions:
                    break
                world, _ = G.next_state(bounds, world, rng.choice(actions), cfg)
                yield world.replica


def test_state_documents_round_trip_on_model_states():
    import json

    from envreplica.conformance.readback import doc_to_state, state_to_doc

    seen = 0
    for st in _model_states():
        doc = state_to_doc(st, _named)
        assert json.loads(json.dumps(doc)) == doc
        back = doc_to_state(doc, store_on=st.store_on)
        assert back == with_macs(replace(st, inflight=()), _named)  # the tables, receipts as MAC names
        assert state_to_doc(back, lambda mac: mac) == doc  # and the document again, exactly
        seen += 1
    assert seen > 500


def _good_doc(twin: Twin) -> dict:
    """A state document with a row in every table that matters: live, staged, values and receipts."""
    twin.open_with()
    twin.do(deliver_action(1, 1, REC_B, project="p9"))  # a consumed refusal: a receipt
    twin.do(begin_action(attempt=A2))  # staged copies of the live rows and values
    return twin.impl.export_state()


@pytest.mark.parametrize("spoil, fragment", [
    (lambda d: d.pop("receipts"), "lacks receipts"),
    (lambda d: d.update(extra=[]), "has keys it must not have"),
    (lambda d: d["authority"].update(gateOpen=True, attemptId="a1", activated=True), "an open gate has no attempt"),
    (lambda d: d["authority"].update(activated=False, gateOpen=True, attemptId=None), "never activated"),
    (lambda d: d["authority"].update(appliedSequence=-1), "authority.appliedSequence must be a Count"),
    (lambda d: d["authority"].update(policyEpochs=[2, 1]), "policyEpochs"),
    (lambda d: d["records"].append(dict(d["records"][0])), "must be sorted"),
    (lambda d: d["records"].reverse() if len(d["records"]) > 1 else d["records"].append(d["records"][0]),
     "must be sorted"),
    (lambda d: d["records"][0].update(key="OTHER"), "is not the row's key"),
    (lambda d: d["records"][0]["state"]["head"].update(revision=True), "revision must be a Count"),
    (lambda d: d["records"][0].update(materialization={"kind": "installed", "reason": "x"}), "materialization"),
    (lambda d: d["values"][0].update(value=None), "value must be a string"),
    (lambda d: d["stageRecords"][0].update(present=1), "present must be a boolean"),
    (lambda d: d["receipts"][0].update(ok=not d["receipts"][0]["ok"]), "receipt"),
    (lambda d: d["receipts"][0].update(requestMac=""), "requestMac"),
    (lambda d: d["receipts"][0].update(code="nope"), "refusal code"),
], ids=["missing-table", "extra-table", "open-with-attempt", "inactive-open", "negative-sequence", "epochs-order",
        "duplicate-row", "unsorted-rows", "key-mismatch", "bool-count", "installed-with-reason", "value-null",
        "present-int", "receipt-ok-flipped", "empty-mac", "unknown-code"])
def test_malformed_state_documents_are_refused_clearly(twin, spoil, fragment):
    import copy

    from envreplica.conformance.readback import StateDocError, doc_to_state

    doc = _good_doc(twin)
    assert doc["records"] and doc["values"] and doc["stageRecords"] and doc["receipts"], "walks too short"
    doc_to_state(doc, store_on=True)
    bad = copy.deepcopy(doc)
    spoil(bad)
    with pytest.raises(StateDocError) as error:
        doc_to_state(bad, store_on=True)
    assert fragment in str(error.value) and "docs/protocol.md section 6" in str(error.value), str(error.value)


def test_receipt_mac_covers_the_semantic_request():
    sealer = Sealer(MASTER)
    frame = deliver_action(1, 2, REC_ROT).frame
    assert '"kind":"env.replica.apply"' in __import__("envreplica.spec.wire", fromlist=["x"]).canonical_json(
        frame.request())
    assert request_mac(sealer, frame) == request_mac(sealer, replace(frame, op_id="other", reconciliation_attempt_id="a9"))
    assert request_mac(sealer, frame) != request_mac(sealer, replace(frame, record_version=3))


def test_await_ready_wakes_on_commit_and_times_out(twin):
    with pytest.raises(TimeoutError):
        twin.impl.await_ready(0.06)
    twin.put(REC, SECRET)
    twin.do(begin_action())
    twin.do(page_action())
    woke = []

    def waiter():
        # 600 s: only a guard against a hang; the verdict is that the wait returns (ready), never how fast.
        twin.impl.await_ready(600.0)
        woke.append("ready")

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.1)
    assert not woke  # not ready before the commit
    twin.do(commit_action())
    thread.join(600.0)
    assert woke == ["ready"]


def test_await_ready_sees_another_connection(tmp_path):
    twin = _twin(tmp_path)
    twin.put(REC, SECRET)
    twin.do(begin_action())
    twin.do(page_action())
    other = SqliteReplica(twin.path, sealer=Sealer(MASTER), reader=None)

    def commit_later():
        time.sleep(0.1)
        twin.impl.complete(commit_action().frame)

    thread = threading.Thread(target=commit_later)
    thread.start()
    other.await_ready(600.0)  # no in-process notification reaches ``other``: the 50 ms re-check does (600 s: a hang guard)
    thread.join()
    assert other.is_ready()
    other.close()
    twin.impl.close()


# ---------------------------------------------------------------------------
# Two processes on one file
# ---------------------------------------------------------------------------

STRESS_UUIDS = [f"{i:08x}-0000-4000-8000-000000000000" for i in range(200)]


def _stress_worker(path: str, kind: str, cycles: int) -> int:
    """A process driving the replica: ``gate`` cycles close/begin/page/commit, ``deliver`` delivers."""
    store = EmbeddedStore()
    prefix = ModelConfig().prefix
    for i, uuid in enumerate(STRESS_UUIDS):
        key = f"K{i}"
        put_for_ref(store, prefix, P1, key, StagedRef(uuid), staged_envelope(ORG, P1, key, uuid, f"v{i}"))
    replica = SqliteReplica(path, sealer=Sealer(MASTER), reader=store, synchronous="NORMAL")
    done = 0
    for i in range(cycles):
        if kind == "gate":
            replica.close_gate()
            attempt = f"g{i}"
            replica.begin(BeginFrame(S1, attempt, (P1,)), (1, 2), ORG)
            st = impl_model_state(replica)  # one read: the other process writes between two
            version = st.projects.get(P1, 0)
            records = tuple(row.state for (p, _), row in sorted(st.records.items()) if p == P1)
            page = replica.apply_page(PageFrame(f"op{i}", attempt, P1, None, version, records, True))
            if page.ok:
                status = replica.read_status()
                result = replica.complete(CommitFrame(attempt, status.applied_through, (ProjectVersion(P1, version),)))
                done += bool(result.ok)
        else:
            st = impl_model_state(replica)  # one read: the other process writes between two
            a = st.authority
            version = (st.stage_projects.get((a.attempt_id, P1)) if a.attempt_id else None)
            version = version.record_version if version is not None else st.projects.get(P1, 0)
            state = BindingState(f"K{i}", Head(1, 1, False, StagedRef(STRESS_UUIDS[i])), None, 1, 0)
            frame = ApplyFrame(f"op{i}", P1, (version or 0) + 1, state, Cursor(a.stream_id, a.applied_sequence + 1),
                               a.attempt_id)
            result = replica.apply_delivery(frame)
            done += bool(result.ok)
    replica.close()
    return done


def test_two_processes_do_not_corrupt_the_file(tmp_path):
    path = tmp_path / "shared.db"
    twin = Twin(path)
    twin.do(begin_action())
    twin.do(page_action(version=0, records=()))
    twin.do(commit_action(versions=((P1, 0),)))
    twin.impl.close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        jobs = [pool.apply_async(_stress_worker, (str(path), kind, 100)) for kind in ("gate", "deliver")]
        done = [job.get(timeout=120) for job in jobs]
    assert done[1] > 0, "no delivery ever applied: the stress did not interleave"
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    raw.close()
    replica = SqliteReplica(path, sealer=Sealer(MASTER), reader=None)
    state = readback(replica)
    broken = [p.name for p in P.INVARIANTS if not p.check(state)]
    assert broken == []
    assert [r.sequence for r in replica.list_receipts()] == list(range(1, state.authority.applied_sequence + 1))
    replica.close()


# ---------------------------------------------------------------------------
# The writer contract, as the replica opens a file
# ---------------------------------------------------------------------------


def test_replica_file_is_stamped_and_fenced(tmp_path):
    import sqlite3

    from envreplica.impl import writer

    path = tmp_path / "fenced.db"
    SqliteReplica(path, sealer=Sealer(bytes(range(32))), reader=None).close()
    raw = sqlite3.connect(path)
    meta = dict(raw.execute("SELECT key, value FROM store_meta"))
    assert meta["schema_version"] == str(writer.SCHEMA_VERSION) and meta["writer_version"] == str(writer.WRITER_VERSION)
    assert meta["key_check"] == Sealer(bytes(range(32))).rows.key_check and len(meta["replica_id"]) == 32
    assert "created_by" not in meta  # only the adapter marks the replicas it may empty
    with pytest.raises(sqlite3.OperationalError, match="envreplica_writer_version"):
        raw.execute("UPDATE authority SET gate_open = 1, activated = 1, stream_id = 's', org_id = 'o'")
    writer.register_writer(raw, version=writer.WRITER_VERSION + 1)
    with pytest.raises(sqlite3.IntegrityError, match="envreplica writer fence"):
        raw.execute("DELETE FROM authority")
    raw.close()


@pytest.mark.parametrize("recorded, expected", [("3", "newer"), ("1", "older")])
def test_replica_refuses_a_file_of_another_schema_version(tmp_path, recorded, expected):
    import sqlite3

    from envreplica.impl import writer

    path = tmp_path / "other.db"
    SqliteReplica(path, sealer=Sealer(bytes(range(32))), reader=None).close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE store_meta SET value = ? WHERE key = 'schema_version'", (recorded,))
    raw.commit()
    raw.close()
    with pytest.raises(writer.WriterVersionError) as caught:
        SqliteReplica(path, sealer=Sealer(bytes(range(32))), reader=None)
    assert caught.value.reason == expected
    assert ("migrate" in str(caught.value)) == (expected == "older")


def test_master_key_comes_from_configuration(tmp_path):
    from envreplica.impl.sealing import KeyConfigError

    with pytest.raises(KeyConfigError, match="ENVREPLICA_MASTER_KEY"):
        SqliteReplica.from_environment(tmp_path / "k.db", reader=None, env={})
    key_file = tmp_path / "master.key"
    key_file.write_text(bytes(range(32)).hex() + "\n")
    key_file.chmod(0o600)
    replica = SqliteReplica.from_environment(tmp_path / "k.db", reader=None,
                                             env={"ENVREPLICA_MASTER_KEY_FILE": str(key_file)})
    assert replica.read_status().activated is False
    replica.close()
