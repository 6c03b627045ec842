"""The replica protocol of the seed as pure functions ``(cfg, state, args) -> (state, result)``.

Models: ``beginProjectEnvReplica`` (``begin``), ``applyProjectEnvReplicaPage``
(``apply_page``), ``applyProjectEnvReplicaDelivery`` (``apply_delivery``),
``completeProjectEnvReplica`` (``complete``), ``closeProjectEnvReplicaGate``
(``close_gate``), a crash and restart (``restart``), and the reads
(``read_status``, ``read_snapshot``, ``list_receipts``, ``is_ready``).

Each seed transaction is one pure step over ``State``. A refusal is a normal
return from the seed's transaction callback, so whatever that transaction
wrote before refusing stays committed here too. An error
(``CorruptReplica``) rolls back only the transaction it arose in: the
exception carries ``committed``, the state that earlier transactions of the
same operation left.

The seed's ``async`` operations are split where they ``await`` the value
store: ``apply_page`` and ``apply_delivery`` run until their first real read
and leave a ``PageInFlight``/``DeliveryInFlight`` in ``state.inflight``
(result ``Pending``); ``resume`` feeds that read its answer and runs on to the
next read or to the end. Anything may run in between, exactly as in the seed.
A read that the seed answers without awaiting I/O (a tombstone, no value
store, an unusable legacy name) is not a window.

Write commits (``_commit``): each seed ``db.transaction(...)`` that may write
ends with a commit marker, at the seed's transaction boundary, counted as
docs/protocol.md section 6 (``crashAfterCommit``) counts them: a page's
prepare transaction, then one after-transaction of ``materializeStage`` per
key whose before-read found it awaiting a value; a delivery's prepare
transaction, the after-transaction of its materialization when that ran, and
its final transaction; a resumed read's after-transaction and what follows
it. A refusal returned from a transaction commits and counts; an error
(``CorruptReplica``) rolls its transaction back and does not. The marker is
a no-op unless a commit budget is active (``counting_commits``): then it
counts, records the state each commit leaves, and at the budgeted commit
raises ``CrashPoint`` carrying that state (the process dies there; the
caller restarts it: ``actions.run_until_crash``). Read-only transactions
(the before-reads, a page's final read) carry no marker.

Variant ``fixed`` differs from ``seed`` only where ``docs/findings.md`` says,
each difference marked ``# FIX(Fn)`` and taken when ``has_fix`` says the
variant has that fix (``ModelConfig.left_out`` leaves one out: naming a
divergence's finding, never the checker's).

Leaves out on purpose: notifications (``noteProjectEnv*``: they wake the ready
wait, which ``is_ready`` states as a predicate), timestamps, and frame
validation (``spec.wire`` parses JSON into the typed frames taken here).
"""

from __future__ import annotations

import re

from contextvars import ContextVar
from functools import lru_cache
from typing import Optional, Sequence, Union, cast

from envreplica.model import store as value_store
from envreplica.model.fmap import EMPTY, FMap
from envreplica.model.rules import (
    Order,
    desired_materialization,
    is_reachable_record_advance,
    state_order,
)
from envreplica.model.state import (
    AwaitRead,
    Authority,
    GateEngine,
    DeliveryInFlight,
    InFlight,
    LiveRow,
    ModelConfig,
    PageInFlight,
    PreparedDelivery,
    ReadRequest,
    Receipt,
    StageProject,
    StageRow,
    State,
    StoredValue,
    has_fix,
)
from envreplica.spec.domain import (
    INSTALLED,
    ApplyFrame,
    ApplyOk,
    ApplyRefused,
    ApplyResult,
    BeginFrame,
    BeginResult,
    BindingState,
    CommitFrame,
    CommitOk,
    CommitRefused,
    CommitResult,
    CorruptReplica,
    Cursor,
    Diagnosis,
    DiagnosisReason,
    Done,
    MatKind,
    PageFrame,
    PageOk,
    PageRefused,
    PageResult,
    Pending,
    ReceiptView,
    RecordResult,
    RefusalCode,
    ReplicaError,
    Snapshot,
    SnapshotEntry,
    SnapshotProject,
    Status,
    UnavailableReason,
    ValueRef,
    View,
    unavailable,
)
from envreplica.spec.frozen import replace
from envreplica.spec.gate import MachineGate, Trigger, fire
from envreplica.spec import wire
from envreplica.spec.variants import Finding

R = RefusalCode

# ---------------------------------------------------------------------------
# Authority row helpers (``authorityRow``, ``cursor``, ``requiredCursor``, ...)
# ---------------------------------------------------------------------------


def cursor(a: Authority) -> Optional[Cursor]:
    """``cursor``: the delivery cursor of an activated replica, else None."""
    if not a.gate.activated:
        return None
    if a.stream_id is None or a.applied_sequence < 0:
        raise CorruptReplica("stored replica delivery cursor is invalid")
    return Cursor(a.stream_id, a.applied_sequence)


def required_cursor(a: Authority) -> Cursor:
    """``requiredCursor``: the cursor, or corrupt when the replica was never activated."""
    c = cursor(a)
    if c is None:
        raise CorruptReplica("project environment replica has not been activated")
    return c


def authority_org_id(a: Authority) -> str:
    """``authorityOrgId``."""
    if not a.gate.activated or a.org_id is None:
        raise CorruptReplica("stored replica organization is invalid")
    return a.org_id


_MACHINE_GATE: Optional[MachineGate] = None


def _move_gate(cfg: ModelConfig, a: Authority, trigger: Trigger, **changes: object) -> Authority:
    """The only way the model changes the gate: fire a declared trigger (spec.gate).

    With ``GateEngine.MACHINE`` the ``transitions`` machine declared from
    ``spec.gate.TRANSITIONS`` moves it; otherwise the same table compiled to a
    dict does. A test runs both on the same walks and compares every state.
    """
    global _MACHINE_GATE
    if cfg.gate_engine is GateEngine.MACHINE:
        if _MACHINE_GATE is None:
            _MACHINE_GATE = MachineGate()
        gate = _MACHINE_GATE.fire(trigger, a.gate)
    else:
        gate = fire(trigger, a.gate)
    return replace(a, gate=gate, **changes)


def _committed(error: ReplicaError, state: State) -> ReplicaError:
    """Mark ``state`` as what the failing operation had committed before ``error``."""
    if error.committed is None:
        error.committed = state
    return error


# ---------------------------------------------------------------------------
# Write commits: where a crash can cut an operation
# ---------------------------------------------------------------------------


class CrashPoint(Exception):
    """The process dies right after write commit ``commit`` of the running operation: ``state`` is durable.

    Not a ``ReplicaError``: nothing in the model catches it; ``actions.run_until_crash`` does.
    """

    def __init__(self, state: State, commit: int) -> None:
        super().__init__(f"crash after write commit {commit}")
        self.state = state
        self.commit = commit


class CommitBudget:
    """The write commits of one operation run: how many, the state each left, and where to crash.

    A per-call counter (never part of ``State``): ``limit`` None only counts.
    """

    __slots__ = ("limit", "made", "prefixes")

    def __init__(self, limit: Optional[int] = None, record: bool = False) -> None:
        self.limit = limit  # crash at this commit (1 = the operation's first); None: never
        self.made = 0  # write commits so far
        self.prefixes: Optional[list[State]] = [] if record else None  # the state after each commit

    def mark(self, st: State) -> None:
        self.made += 1
        if self.prefixes is not None:
            self.prefixes.append(st)
        if self.limit is not None and self.made >= self.limit:
            raise CrashPoint(st, self.made)


_BUDGET: ContextVar[Optional[CommitBudget]] = ContextVar("envreplica_commit_budget", default=None)


class counting_commits:
    """``with counting_commits(limit, record) as budget``: the operation run inside counts its write commits.

    It crashes at commit ``limit`` (``CrashPoint``) and, with ``record``,
    keeps the state after each commit (``budget.prefixes``).
    """

    __slots__ = ("budget", "token")

    def __init__(self, limit: Optional[int] = None, record: bool = False) -> None:
        self.budget = CommitBudget(limit, record)

    def __enter__(self) -> CommitBudget:
        self.token = _BUDGET.set(self.budget)
        return self.budget

    def __exit__(self, *exc: object) -> None:
        _BUDGET.reset(self.token)


def _commit(st: State) -> None:
    """A seed write transaction has just committed, leaving ``st``. A no-op unless a budget is active."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.mark(st)


# ---------------------------------------------------------------------------
# Table helpers (``resetStagedProject``, ``retain*State``, ...)
# ---------------------------------------------------------------------------


def _clear_stage(st: State) -> State:
    return replace(st, stage_projects=EMPTY, stage_records=EMPTY, stage_values=EMPTY)


def _reset_staged_project(st: State, attempt: str, project: str) -> State:
    """``resetStagedProject``: the project's staged view becomes a copy of its live view."""
    sr = {k: v for k, v in st.stage_records.items() if not (k[0] == attempt and k[1] == project)}
    sv = {k: v for k, v in st.stage_values.items() if not (k[0] == attempt and k[1] == project)}
    for (p, key), row in st.records.items():
        if p == project:
            sr[(attempt, project, key)] = StageRow(row.state, row.mat, False)
    for (p, key), value in st.values.items():
        if p == project:
            sv[(attempt, project, key)] = value
    return replace(st, stage_records=FMap(sr), stage_values=FMap(sv))


def _retained_existing(row: Union[LiveRow, StageRow], epochs: tuple[int, ...]) -> tuple[RecordResult, bool]:
    """``retainedExisting``: answer with what is stored; fetch if it is pending and fetchable."""
    state = row.state
    fetch = (
        not state.head.tombstone
        and row.mat.kind is not MatKind.INSTALLED
        and desired_materialization(state, epochs).kind is MatKind.UNAVAILABLE
    )
    return row.result(), fetch


def _retain_stage_state(
    cfg: ModelConfig, st: State, attempt: str, project: str, incoming: BindingState, epochs: tuple[int, ...]
) -> tuple[State, RecordResult, bool]:
    """``retainStageState``: put ``incoming`` (or keep what is newer) into the staged view."""
    k = (attempt, project, incoming.key)
    stored = st.stage_records.get(k)
    if stored is not None:
        current = stored.state
        order = state_order(incoming, current)
        if order is Order.OLDER or order is Order.CONFLICT:
            mat = stored.mat
            if has_fix(cfg, Finding.F2):  # FIX(F2)
                #: a retained record is re-judged under the kept epochs:
                # if it must now be withheld, its value goes.
                desired = desired_materialization(current, epochs)
                if desired.kind is MatKind.WITHHELD:
                    mat = desired
                    st = replace(st, stage_values=st.stage_values.delete(k))
            row = StageRow(current, mat, True)
            st = replace(st, stage_records=st.stage_records.set(k, row))
            fetch = (
                not current.head.tombstone
                and row.mat.kind is not MatKind.INSTALLED
                and desired_materialization(current, epochs).kind is MatKind.UNAVAILABLE
            )
            return st, row.result(), fetch
        if order is Order.SAME:
            desired = desired_materialization(current, epochs)
            if stored.mat.kind is MatKind.INSTALLED or desired.kind is MatKind.WITHHELD:
                keep = desired if desired.kind is MatKind.WITHHELD else stored.mat
            else:
                keep = desired
            if keep.kind is not MatKind.INSTALLED:
                st = replace(st, stage_values=st.stage_values.delete(k))
            row = StageRow(current, keep, True)
            st = replace(st, stage_records=st.stage_records.set(k, row))
            return st, row.result(), keep.kind is MatKind.UNAVAILABLE
    desired = desired_materialization(incoming, epochs)
    row = StageRow(incoming, desired, True)
    st = replace(st, stage_values=st.stage_values.delete(k), stage_records=st.stage_records.set(k, row))
    return st, row.result(), desired.kind is MatKind.UNAVAILABLE


def _retain_live_state(
    st: State, project: str, incoming: BindingState, epochs: tuple[int, ...]
) -> tuple[State, RecordResult, bool, bool]:
    """``retainLiveState``: put ``incoming`` (or keep what is newer) into the live view."""
    k = (project, incoming.key)
    stored = st.records.get(k)
    if stored is not None:
        current = stored.state
        order = state_order(incoming, current)
        if order is Order.OLDER or order is Order.CONFLICT:
            result, fetch = _retained_existing(stored, epochs)
            return st, result, fetch, False
        if order is Order.SAME:
            desired = desired_materialization(current, epochs)
            if stored.mat.kind is MatKind.INSTALLED and desired.kind is not MatKind.WITHHELD:
                return st, stored.result(), False, False
            row = LiveRow(current, desired)
            st = replace(st, values=st.values.delete(k), records=st.records.set(k, row))
            return st, row.result(), desired.kind is MatKind.UNAVAILABLE, True
    desired = desired_materialization(incoming, epochs)
    row = LiveRow(incoming, desired)
    st = replace(st, values=st.values.delete(k), records=st.records.set(k, row))
    return st, row.result(), desired.kind is MatKind.UNAVAILABLE, True


# ---------------------------------------------------------------------------
# Materialization (``materializeStage`` / ``materializeLive``), split at the read
# ---------------------------------------------------------------------------


def _stage_before(st: State, attempt: str, project: str, key: str) -> Optional[tuple[BindingState, str]]:
    """The before-transaction of ``materializeStage``."""
    a = st.authority
    if a.attempt_id != attempt:
        return None
    row = st.stage_records.get((attempt, project, key))
    if row is None:
        return None
    return (row.state, authority_org_id(a)) if row.mat.kind is MatKind.UNAVAILABLE else None


def _still_awaits_value(cfg: ModelConfig, st: State, row: Union[LiveRow, StageRow]) -> bool:
    """FIX(F1): a fetched value lands only on a row still awaiting one under today's kept epochs.

    The seed checks only that the record state is unchanged; a begin with
    other kept epochs (and a re-page or commit) inside the read window can
    make the same record withheld, and the seed then installs onto it.
    """
    if not has_fix(cfg, Finding.F1):
        return True
    return (
        row.mat.kind is MatKind.UNAVAILABLE
        and desired_materialization(row.state, st.authority.policy_epochs).kind is MatKind.UNAVAILABLE
    )


_SURROGATE = re.compile("[" + chr(0xD800) + "-" + chr(0xDFFF) + "]")  # mypyc takes no surrogate in a literal


def stored_text(cfg: ModelConfig, value: str) -> str:
    """What the replica keeps, and later serves, of a fetched value's text.

    The seed seals with Node (``sealProjectEnvValueForStorage``:
    ``cipher.update(value, "utf8")``), and Node's UTF-8 encoding writes each
    lone surrogate, a legal JSON string (``"\\ud800"``), as U+FFFD: the value
    served is not the value fetched (finding F3). A high surrogate followed by
    a low one is a pair, one character, as in JavaScript. FIX(F3): ``fixed``
    keeps the text exactly.
    """
    if has_fix(cfg, Finding.F3) or _SURROGATE.search(value) is None:  # FIX(F3)
        return value
    out, i, n = [], 0, len(value)
    while i < n:
        code = ord(value[i])
        if 0xD800 <= code <= 0xDBFF and i + 1 < n and 0xDC00 <= ord(value[i + 1]) <= 0xDFFF:
            out.append(chr(0x10000 + ((code - 0xD800) << 10) + (ord(value[i + 1]) - 0xDC00)))
            i += 2
            continue
        out.append("\ufffd" if 0xD800 <= code <= 0xDFFF else value[i])
        i += 1
    return "".join(out)


def _fetched_ref(before: BindingState) -> ValueRef:
    """The reference a value was fetched from: a value is fetched only for a head that has one."""
    return cast(ValueRef, before.head.value_ref)  # value_store.plan reads nothing for a tombstone


def _failure(fetched: value_store.Fetched) -> UnavailableReason:
    """Why a read brought no value (``Fetched`` has a reason exactly when it has no value)."""
    return cast(UnavailableReason, fetched.reason)


def _stage_after(cfg: ModelConfig, st: State, attempt: str, project: str, key: str, before: BindingState, fetched: value_store.Fetched) -> State:
    """The after-transaction of ``materializeStage``: install only onto the very state read for."""
    if st.authority.attempt_id != attempt:
        return st
    k = (attempt, project, key)
    current = st.stage_records.get(k)
    if current is None or current.state != before:
        return st
    if not _still_awaits_value(cfg, st, current):  # FIX(F1)
        return st
    if fetched.value is not None:
        value = StoredValue(before.head.revision, before.head.generation, _fetched_ref(before),
                            stored_text(cfg, fetched.value))
        return replace(
            st,
            stage_values=st.stage_values.set(k, value),
            stage_records=st.stage_records.set(k, StageRow(before, INSTALLED, current.present)),
        )
    return replace(
        st,
        stage_values=st.stage_values.delete(k),
        stage_records=st.stage_records.set(k, StageRow(before, unavailable(_failure(fetched)), current.present)),
    )


def _live_before(st: State, project: str, key: str) -> Optional[tuple[BindingState, str]]:
    """The before-transaction of ``materializeLive`` (no gate check: as the seed)."""
    a = st.authority
    row = st.records.get((project, key))
    if row is None or row.mat.kind is not MatKind.UNAVAILABLE:
        return None
    return row.state, authority_org_id(a)


def _live_after(cfg: ModelConfig, st: State, project: str, key: str, before: BindingState, fetched: value_store.Fetched) -> State:
    """The after-transaction of ``materializeLive``."""
    k = (project, key)
    current = st.records.get(k)
    if current is None or current.state != before:
        return st
    if not _still_awaits_value(cfg, st, current):  # FIX(F1)
        return st
    if fetched.value is not None:
        value = StoredValue(before.head.revision, before.head.generation, _fetched_ref(before),
                            stored_text(cfg, fetched.value))
        return replace(st, values=st.values.set(k, value), records=st.records.set(k, LiveRow(before, INSTALLED)))
    return replace(
        st, values=st.values.delete(k), records=st.records.set(k, LiveRow(before, unavailable(_failure(fetched))))
    )


def _start_read(
    cfg: ModelConfig, st: State, view: View, attempt: Optional[str], project: str, key: str, reader_on: bool
) -> tuple[State, Optional[AwaitRead]]:
    """Run a materialization's before-transaction and the synchronous start of its read.

    Returns the state and the read now in flight, or ``None`` when there is no
    read to wait for (nothing to fetch, or an answer without I/O, in which case
    the after-transaction has already run).
    """
    # a staged read always names its attempt (the page's, or the delivery's open one)
    if view is View.STAGE:
        before = _stage_before(st, cast(str, attempt), project, key)
    else:
        before = _live_before(st, project, key)
    if before is None:
        return st, None
    state, org = before
    planned = value_store.plan(cfg.prefix, project, state, reader_on)
    if isinstance(planned, ReadRequest):
        return st, AwaitRead(view, attempt, project, key, state, org, planned)
    if view is View.STAGE:
        st = _stage_after(cfg, st, cast(str, attempt), project, key, state, planned)
    else:
        st = _live_after(cfg, st, project, key, state, planned)
    _commit(st)  # the after-transaction (whether or not it changed a row)
    return st, None


def _finish_read(cfg: ModelConfig, st: State, read: AwaitRead, answer: value_store.Answer) -> State:
    """The read's answer arrives: interpret it and run the after-transaction."""
    fetched = value_store.interpret(read.org_id, read.project_id, read.before, read.request, answer)
    if read.view is View.STAGE:
        st = _stage_after(cfg, st, cast(str, read.attempt_id), read.project_id, read.key, read.before, fetched)
    else:
        st = _live_after(cfg, st, read.project_id, read.key, read.before, fetched)
    _commit(st)  # the after-transaction (whether or not it changed a row)
    return st


def _suspend(st: State, op: InFlight) -> tuple[State, Pending]:
    return replace(st, inflight=st.inflight + (op,)), Pending(len(st.inflight))


# ---------------------------------------------------------------------------
# begin
# ---------------------------------------------------------------------------


def begin(cfg: ModelConfig, st: State, frame: BeginFrame, kept_epochs: tuple[int, ...], org_id: str) -> tuple[State, BeginResult]:
    """``beginProjectEnvReplica``: close the gate and create an exact whole-task staging view."""
    a = st.authority
    if a.gate.activated and a.org_id != org_id:
        raise CorruptReplica("replica organization cannot change after activation")
    changed_stream = a.stream_id != frame.stream_id
    attempt = frame.attempt_id
    # Receipts only deduplicate one stream: a new stream drops them.
    receipts = EMPTY if changed_stream else st.receipts
    st = replace(_clear_stage(st), receipts=receipts)
    stage_projects = {}
    for project in frame.project_ids:
        stage_projects[(attempt, project)] = StageProject(None, None, False)
    st = replace(st, stage_projects=FMap(stage_projects))
    for project in frame.project_ids:
        st = _reset_staged_project(st, attempt, project)
    sequence = 0 if changed_stream else a.applied_sequence
    authority = _move_gate(
        cfg, a, Trigger.BEGIN,
        stream_id=frame.stream_id, applied_sequence=sequence, attempt_id=attempt,
        org_id=org_id, policy_epochs=tuple(kept_epochs),
    )
    st = replace(st, authority=authority)
    return st, BeginResult(Cursor(frame.stream_id, sequence), tuple(kept_epochs))


# ---------------------------------------------------------------------------
# apply_page
# ---------------------------------------------------------------------------


_MAX_REASON = "x" * 64


@lru_cache(maxsize=65536)
def _ack_entry_bytes(state: BindingState) -> int:
    """Bytes of one page-ack result for ``state`` with the longest reason (as ``pageFits``)."""
    kind = "withheld" if state.head.tombstone else "unavailable"
    return wire.json_bytes_len({"state": wire.encode(state), "materialization": {"kind": kind, "reason": _MAX_REASON}})


def page_fits(
    cfg: ModelConfig, frame: PageFrame, states: Sequence[BindingState], epochs: tuple[int, ...], applied: Cursor
) -> bool:
    """``pageFits``: the acknowledgement of this page, with the longest reasons, fits the bound.

    The byte count equals ``Buffer.byteLength(JSON.stringify(ack))`` of the
    seed: the ack with an empty ``results`` list, plus each result's bytes,
    plus the commas between them (each result's bytes are cached per record).
    """
    header = _ack_header_bytes(frame.op_id, frame.attempt_id, frame.project_id, frame.after, frame.record_version,
                               frame.complete, epochs, applied)
    total = header + sum(_ack_entry_bytes(s) for s in states) + max(len(states) - 1, 0)
    return total <= cfg.ack_page_bytes


@lru_cache(maxsize=65536)
def _ack_header_bytes(op_id: str, attempt_id: str, project_id: str, after: Optional[str], record_version: int, complete: bool,
                      epochs: tuple[int, ...], applied: Cursor) -> int:
    """Bytes of a page acknowledgement with an empty ``results`` list (``page_fits``), per header."""
    return wire.json_bytes_len({
        "kind": "env.replica.ack",
        "opId": op_id,
        "ok": True,
        "phase": "page",
        "attemptId": attempt_id,
        "projectId": project_id,
        "after": after,
        "recordVersion": record_version,
        "results": [],
        "complete": complete,
        "policyEpochs": list(epochs),
        "appliedThrough": {"streamId": applied.stream_id, "sequence": applied.sequence},
    })


def _page_prepare(cfg: ModelConfig, st: State, frame: PageFrame) -> tuple[State, Union[PageRefused, tuple[str, ...]]]:
    """The first transaction of ``applyProjectEnvReplicaPage``."""
    a = st.authority
    applied = required_cursor(a)
    epochs = a.policy_epochs

    def refuse(code: RefusalCode) -> tuple[State, PageRefused]:
        return st, PageRefused(frame.attempt_id, code, epochs, applied)

    if a.attempt_id != frame.attempt_id or a.gate.is_open:
        return refuse(R.RECONCILIATION_ATTEMPT_MISMATCH)
    if not page_fits(cfg, frame, frame.records, epochs, applied):
        return refuse(R.ACK_PAGE_TOO_LARGE)
    sp_key = (frame.attempt_id, frame.project_id)
    staged = st.stage_projects.get(sp_key)
    if staged is None:
        return refuse(R.PROJECT_NOT_IN_ATTEMPT)
    live_version = st.projects.get(frame.project_id, 0)
    if frame.record_version < live_version:
        return refuse(R.RECORD_VERSION_STALE)
    if frame.after is None:
        st = _reset_staged_project(st, frame.attempt_id, frame.project_id)
        st = replace(st, stage_projects=st.stage_projects.set(sp_key, StageProject(frame.record_version, None, False)))
    elif staged.complete or staged.record_version != frame.record_version or staged.last_key != frame.after:
        return refuse(R.SNAPSHOT_PAGE_MISMATCH)
    fetch_keys: list[str] = []
    retained_states: list[BindingState] = []
    same_version_conflict = False
    for state in frame.records:
        if frame.record_version == live_version:
            before = st.stage_records.get((frame.attempt_id, frame.project_id, state.key))
            if before is None or state_order(state, before.state) is not Order.SAME:
                same_version_conflict = True
        st, result, fetch = _retain_stage_state(cfg, st, frame.attempt_id, frame.project_id, state, epochs)
        retained_states.append(result.state)
        if fetch:
            fetch_keys.append(result.state.key)
    # Refusals from here on leave the staged writes above committed (as the seed).
    if not page_fits(cfg, frame, retained_states, epochs, applied):
        return refuse(R.ACK_PAGE_TOO_LARGE)
    if same_version_conflict:
        return refuse(R.SNAPSHOT_VERSION_CONFLICT)
    if frame.complete and frame.record_version == live_version:
        live_rows = [row for (p, _), row in sorted(st.records.items(), key=lambda kv: kv[0]) if p == frame.project_id]
        staged_rows = [
            row for (att, p, _), row in sorted(st.stage_records.items(), key=lambda kv: kv[0])
            if att == frame.attempt_id and p == frame.project_id and row.present
        ]
        if len(live_rows) != len(staged_rows) or any(l.state != s.state for l, s in zip(live_rows, staged_rows)):
            return refuse(R.SNAPSHOT_VERSION_CONFLICT)
    last_key = frame.records[-1].key if frame.records else None
    st = replace(
        st, stage_projects=st.stage_projects.set(sp_key, StageProject(frame.record_version, last_key, frame.complete))
    )
    return st, tuple(fetch_keys)


def apply_page(
    cfg: ModelConfig, st: State, frame: PageFrame, reader_on: Optional[bool] = None
) -> tuple[State, Union[PageResult, Pending]]:
    """``applyProjectEnvReplicaPage``: install one canonical page into the closed staging view.

    Returns ``Pending`` when the page is now waiting on a value-store read.
    """
    reader_on = st.store_on if reader_on is None else reader_on
    st, prepared = _page_prepare(cfg, st, frame)
    _commit(st)  # the prepare transaction (a refusal commits what it wrote)
    if isinstance(prepared, PageRefused):
        return st, prepared
    return _page_continue(cfg, st, frame, prepared, reader_on)


def _page_continue(
    cfg: ModelConfig, st: State, frame: PageFrame, keys: tuple[str, ...], reader_on: bool
) -> tuple[State, Union[PageResult, Pending]]:
    try:
        for i, key in enumerate(keys):
            st, read = _start_read(cfg, st, View.STAGE, frame.attempt_id, frame.project_id, key, reader_on)
            if read is not None:
                return _suspend(st, PageInFlight(frame, keys[i + 1:], read, reader_on))
        return _page_final(st, frame)
    except ReplicaError as error:
        raise _committed(error, st)


def _page_final(st: State, frame: PageFrame) -> tuple[State, PageResult]:
    """The last transaction of ``applyProjectEnvReplicaPage``."""
    a = st.authority
    applied = required_cursor(a)
    epochs = a.policy_epochs
    if a.attempt_id != frame.attempt_id or a.gate.is_open:
        return st, PageRefused(frame.attempt_id, R.RECONCILIATION_ATTEMPT_MISMATCH, epochs, applied)
    results = []
    for state in frame.records:
        row = st.stage_records.get((frame.attempt_id, frame.project_id, state.key))
        if row is None:
            raise CorruptReplica("staged replica page record disappeared")
        results.append(row.result())
    return st, PageOk(
        frame.attempt_id, frame.project_id, frame.after, frame.record_version, tuple(results),
        frame.complete, epochs, applied,
    )


# ---------------------------------------------------------------------------
# apply_delivery
# ---------------------------------------------------------------------------


def _transient(a: Authority, code: RefusalCode) -> ApplyRefused:
    """``transientApply``: refused, not consumed; the cloud may send it again."""
    return ApplyRefused(False, False, a.attempt_id, code, a.policy_epochs, required_cursor(a))


def _save_receipt(st: State, frame: ApplyFrame, receipt: Receipt) -> State:
    """``saveReceipt``: record the answer and consume the sequence."""
    k = (frame.delivery.stream_id, frame.delivery.sequence)
    if k in st.receipts:  # the table's primary key would reject it
        raise CorruptReplica(f"replica receipt {k} already exists")
    a = replace(st.authority, applied_sequence=frame.delivery.sequence)
    return replace(st, receipts=st.receipts.set(k, receipt), authority=a)


def _receipt_result(receipt: Receipt, a: Authority, project_id: str) -> ApplyResult:
    """``receiptResult``: the stored answer, with today's epochs and cursor."""
    applied = required_cursor(a)
    if not receipt.ok:
        if receipt.code is None:
            raise CorruptReplica("replica refusal has no code")
        return ApplyRefused(True, True, a.attempt_id, receipt.code, a.policy_epochs, applied)
    if receipt.result is None or receipt.record_version is None:
        raise CorruptReplica("stored replica delivery result is invalid")
    return ApplyOk(True, a.attempt_id, project_id, receipt.record_version, receipt.result, a.policy_epochs, applied)


def _delivery_prepare(
    cfg: ModelConfig, st: State, frame: ApplyFrame
) -> tuple[State, Union[ApplyResult, PreparedDelivery]]:
    """The first transaction of ``applyProjectEnvReplicaDelivery``."""
    a = st.authority
    if not a.gate.activated:
        raise CorruptReplica("replica delivery arrived before activation")
    current = required_cursor(a)
    if frame.delivery.stream_id != current.stream_id:
        return st, _transient(a, R.STREAM_MISMATCH)
    if frame.delivery.sequence <= current.sequence:
        receipt = st.receipts.get((frame.delivery.stream_id, frame.delivery.sequence))
        if receipt is None:
            return st, _transient(a, R.RECEIPT_MISSING)
        if receipt.request != frame.request():
            return st, ApplyRefused(True, True, a.attempt_id, R.DELIVERY_CONFLICT, a.policy_epochs, current)
        return st, _receipt_result(receipt, a, frame.project_id)
    if frame.delivery.sequence != current.sequence + 1:
        return st, _transient(a, R.DELIVERY_GAP)
    if (
        frame.reconciliation_attempt_id is not None
        if a.gate.is_open
        else (a.attempt_id is None or frame.reconciliation_attempt_id != a.attempt_id)
    ):
        return st, _transient(a, R.RECONCILIATION_ATTEMPT_MISMATCH)
    epochs = a.policy_epochs

    def consumed(code: RefusalCode) -> tuple[State, ApplyRefused]:
        after_st = _save_receipt(st, frame, Receipt(frame.request(), False, code, None, None))
        after = after_st.authority
        return after_st, ApplyRefused(False, True, after.attempt_id, code, epochs, required_cursor(after))

    key = frame.state.key
    if a.attempt_id is not None:
        sp_key = (a.attempt_id, frame.project_id)
        staged = st.stage_projects.get(sp_key)
        if staged is None or not staged.complete or staged.record_version is None:
            return st, _transient(a, R.SNAPSHOT_INCOMPLETE)
        if frame.record_version > staged.record_version + 1:
            return st, _transient(a, R.RECORD_VERSION_GAP)
        stored: Union[LiveRow, StageRow, None] = st.stage_records.get((a.attempt_id, frame.project_id, key))
        order = Order.NEWER if stored is None else state_order(frame.state, stored.state)
        advances = (
            frame.record_version == staged.record_version + 1
            and order is Order.NEWER
            and is_reachable_record_advance(frame.state, None if stored is None else stored.state)
        )
        if advances:
            st, result, fetch = _retain_stage_state(cfg, st, a.attempt_id, frame.project_id, frame.state, epochs)
            actual = frame.record_version
            st = replace(st, stage_projects=st.stage_projects.set(sp_key, replace(staged, record_version=actual)))
            return st, PreparedDelivery(result, fetch, False, actual, a.attempt_id)
        if stored is not None:
            # A lower/equal version, an older state, or an invalid transition is
            # answered with what this replica actually retained.
            result, fetch = _retained_existing(stored, epochs)
            return st, PreparedDelivery(result, fetch, False, staged.record_version, a.attempt_id)
        return consumed(R.RECORD_VERSION_CONFLICT)
    project_version = st.projects.get(frame.project_id)
    if project_version is None:
        return consumed(R.PROJECT_NOT_IN_REPLICA)
    if frame.record_version > project_version + 1:
        return st, _transient(a, R.RECORD_VERSION_GAP)
    stored = st.records.get((frame.project_id, key))
    order = Order.NEWER if stored is None else state_order(frame.state, stored.state)
    advances = (
        frame.record_version == project_version + 1
        and order is Order.NEWER
        and is_reachable_record_advance(frame.state, None if stored is None else stored.state)
    )
    if advances:
        st, result, fetch, changed = _retain_live_state(st, frame.project_id, frame.state, epochs)
        actual = frame.record_version
        st = replace(st, projects=st.projects.set(frame.project_id, actual))
        return st, PreparedDelivery(result, fetch, changed, actual, None)
    if stored is not None:
        result, fetch = _retained_existing(stored, epochs)
        return st, PreparedDelivery(result, fetch, False, project_version, None)
    return consumed(R.RECORD_VERSION_CONFLICT)


def apply_delivery(
    cfg: ModelConfig, st: State, frame: ApplyFrame, reader_on: Optional[bool] = None
) -> tuple[State, Union[ApplyResult, Pending]]:
    """``applyProjectEnvReplicaDelivery``: apply or replay exactly one ordered delta.

    Returns ``Pending`` when the delivery is now waiting on a value-store read.
    """
    reader_on = st.store_on if reader_on is None else reader_on
    st, prepared = _delivery_prepare(cfg, st, frame)
    _commit(st)  # the prepare transaction (a refusal commits what it wrote)
    if not isinstance(prepared, PreparedDelivery):
        return st, prepared
    try:
        if prepared.fetch:
            view = View.LIVE if prepared.attempt_id is None else View.STAGE
            st, read = _start_read(cfg, st, view, prepared.attempt_id, frame.project_id, frame.state.key, reader_on)
            if read is not None:
                return _suspend(st, DeliveryInFlight(frame, prepared, read))
        return _delivery_last(st, frame, prepared)
    except ReplicaError as error:
        raise _committed(error, st)


def _delivery_last(st: State, frame: ApplyFrame, prepared: PreparedDelivery) -> tuple[State, ApplyResult]:
    """Run the final transaction, and mark its commit (a transient refusal commits too)."""
    st, result = _delivery_final(st, frame, prepared)
    _commit(st)
    return st, result


def _delivery_final(st: State, frame: ApplyFrame, prepared: PreparedDelivery) -> tuple[State, ApplyResult]:
    """The last transaction of ``applyProjectEnvReplicaDelivery``."""
    a = st.authority
    current = required_cursor(a)
    if (
        frame.delivery.stream_id != current.stream_id
        or frame.delivery.sequence != current.sequence + 1
        or a.attempt_id != prepared.attempt_id
    ):
        return st, _transient(a, R.REPLICA_STATE_CHANGED)
    row: Union[LiveRow, StageRow, None]
    if prepared.attempt_id is None:
        row = st.records.get((frame.project_id, frame.state.key))
    else:
        row = st.stage_records.get((prepared.attempt_id, frame.project_id, frame.state.key))
    if row is None:
        return st, _transient(a, R.REPLICA_STATE_MISSING)
    result = row.result()
    st = _save_receipt(st, frame, Receipt(frame.request(), True, None, result, prepared.actual_version))
    after = st.authority
    return st, ApplyOk(
        False, after.attempt_id, frame.project_id, prepared.actual_version, result,
        after.policy_epochs, required_cursor(after),
    )


# ---------------------------------------------------------------------------
# resume: a value-store read in flight gets its answer
# ---------------------------------------------------------------------------


def resume(
    cfg: ModelConfig, st: State, slot: int, answer: value_store.Answer
) -> tuple[State, Union[PageResult, ApplyResult, Pending]]:
    """The read of in-flight operation ``slot`` answers ``answer``; the operation runs on."""
    op = st.inflight[slot]
    st = replace(st, inflight=st.inflight[:slot] + st.inflight[slot + 1:])
    try:
        st = _finish_read(cfg, st, op.read, answer)
    except ReplicaError as error:
        raise _committed(error, st)
    if isinstance(op, PageInFlight):
        return _page_continue(cfg, st, op.frame, op.keys_left, op.reader_on)
    try:
        return _delivery_last(st, op.frame, op.prepared)
    except ReplicaError as error:
        raise _committed(error, st)


# ---------------------------------------------------------------------------
# complete, close_gate, restart
# ---------------------------------------------------------------------------


def complete(cfg: ModelConfig, st: State, frame: CommitFrame) -> tuple[State, CommitResult]:
    """``completeProjectEnvReplica``: promote the exact staged view and open the gate atomically."""
    a = st.authority
    applied = required_cursor(a)
    epochs = a.policy_epochs

    def refuse(code: RefusalCode) -> tuple[State, CommitRefused]:
        return st, CommitRefused(frame.attempt_id, code, epochs, applied)

    if a.attempt_id != frame.attempt_id or a.gate.is_open:
        return refuse(R.RECONCILIATION_ATTEMPT_MISMATCH)
    if frame.high_water != applied:
        return refuse(R.DELIVERY_INCOMPLETE)
    staged_projects = sorted(
        ((p, sp) for (att, p), sp in st.stage_projects.items() if att == frame.attempt_id), key=lambda kv: kv[0]
    )
    if len(staged_projects) != len(frame.versions) or any(
        not sp.complete
        or sp.record_version is None
        or p != frame.versions[i].project_id
        or sp.record_version != frame.versions[i].record_version
        for i, (p, sp) in enumerate(staged_projects)
    ):
        return refuse(R.RECORD_VERSION_CHANGED)
    records = sorted(
        ((p, key), row) for (att, p, key), row in st.stage_records.items() if att == frame.attempt_id and row.present
    )
    values = {(p, key): v for (att, p, key), v in st.stage_values.items() if att == frame.attempt_id}
    for k, row in records:
        value = values.get(k)
        if row.mat.kind is MatKind.INSTALLED:
            if (
                value is None
                or value.revision != row.state.head.revision
                or value.generation != row.state.head.generation
                or value.value_ref != row.state.head.value_ref
            ):
                raise CorruptReplica("staged installed value does not match its replica head")
        elif value is not None:
            raise CorruptReplica("staged withheld replica record still has a value")
    live_keys = {k for k, _ in records}
    st = replace(
        _clear_stage(st),
        projects=FMap({p: sp.record_version for p, sp in staged_projects}),
        records=FMap({k: LiveRow(row.state, row.mat) for k, row in records}),
        values=FMap({k: v for k, v in values.items() if k in live_keys}),
        authority=_move_gate(cfg, a, Trigger.COMPLETE, attempt_id=None),
    )
    return st, CommitOk(frame.attempt_id, epochs, applied)


def close_gate(cfg: ModelConfig, st: State) -> tuple[State, Done]:
    """``closeProjectEnvReplicaGate``: purge the attempt and close the gate."""
    st = _clear_stage(st)
    return replace(st, authority=_move_gate(cfg, st.authority, Trigger.CLOSE_GATE, attempt_id=None)), Done()


def restart(cfg: ModelConfig, st: State) -> tuple[State, Done]:
    """A crash and restart: in-flight work is lost, then startup closes the gate.

    What survives is what the seed committed (``State.durable``); the host
    closes the replica on every (re)connection before any task read.
    """
    st = _clear_stage(st.durable())
    return replace(st, authority=_move_gate(cfg, st.authority, Trigger.RESTART, attempt_id=None)), Done()


def store_off(cfg: ModelConfig, st: State) -> tuple[State, Done]:
    """The process loses its value store: later reads answer ``credential_store_unavailable``."""
    return replace(st, store_on=False), Done()


# ---------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------


def read_status(st: State) -> Status:
    """``readProjectEnvReplicaStatus``."""
    a = st.authority
    return Status(
        a.gate.activated, a.gate.is_open, a.attempt_id, a.org_id, cursor(a), a.policy_epochs,
        tuple(sorted(st.projects)),
    )


def is_ready(st: State) -> bool:
    """The ready condition of ``awaitProjectEnvReplicaReady``: activated, open, no attempt."""
    a = st.authority
    return a.gate.activated and a.gate.is_open and a.attempt_id is None


def _snapshot(st: State, project_ids: Sequence[str], cfg: Optional[ModelConfig] = None) -> Optional[Snapshot]:
    a = st.authority
    # the defence in depth of the fixes of F1 and F2 (both in ``fixed``, not in ``fix-f1``)
    rejudge = cfg is not None and has_fix(cfg, Finding.F1) and has_fix(cfg, Finding.F2)
    if not a.gate.activated or not a.gate.is_open or a.attempt_id is not None:
        return None
    requested = list(project_ids)
    expected = sorted(set(requested))
    if len(expected) != len(requested) or expected != sorted(st.projects):
        return None
    projects = []
    for project in requested:  # task order: the lead project wins duplicate keys
        version = st.projects.get(project)
        if version is None:
            raise CorruptReplica("replica project is missing")
        rows = sorted(((k, row) for (p, k), row in st.records.items() if p == project), key=lambda kv: kv[0])
        values = {k: v for (p, k), v in st.values.items() if p == project}
        entries = []
        for key, row in rows:
            head = row.state.head
            value_row = values.pop(key, None)
            value = None
            if row.mat.kind is MatKind.INSTALLED:
                if (
                    head.tombstone
                    or value_row is None
                    or value_row.revision != head.revision
                    or value_row.generation != head.generation
                    or value_row.value_ref != head.value_ref
                ):
                    raise CorruptReplica("installed replica value does not match its head")
                if rejudge and desired_materialization(row.state, a.policy_epochs).kind is MatKind.WITHHELD:
                    # Defence in depth (fixed): never serve what the kept epochs or the binding withhold.
                    # Unreachable while served_values_are_live_bound_kept holds; a tampered file can reach it.
                    raise CorruptReplica(f"records row {project}/{key} is installed, but its binding or policy "
                                         f"epoch withholds it under the kept epochs; nothing is served")
                value = value_row.value
            elif value_row is not None:
                raise CorruptReplica("withheld replica record still has a value")
            entries.append(SnapshotEntry(row.state, row.mat, value))
        if values:
            raise CorruptReplica("replica value has no authority record")
        projects.append(SnapshotProject(project, version, tuple(entries)))
    return Snapshot(tuple(projects))


def read_snapshot(st: State, project_ids: Sequence[str], cfg: Optional[ModelConfig] = None) -> Optional[Snapshot]:
    """``readProjectEnvReplicaSnapshot``: the served view of exactly these projects, or None.

    Given ``cfg`` of variant ``fixed``, each served record is re-judged
    against the kept epochs and its binding (defence in depth).
    """
    try:
        return _snapshot(st, project_ids, cfg)
    except ReplicaError:
        return None


def diagnose(st: State, project_ids: Sequence[str], cfg: Optional[ModelConfig] = None) -> Optional[Diagnosis]:
    """Why ``read_snapshot`` of ``project_ids`` fails closed, as a ``Diagnosis`` (None: it serves).

    The classes of ``spec.domain.DiagnosisReason``, checked in their order; the message is
    ``snapshot_diagnostics``'s (no value)."""
    message = snapshot_diagnostics(st, project_ids, cfg)
    if message is None:
        return None
    a = st.authority
    if not a.gate.activated:
        reason = DiagnosisReason.NOT_ACTIVATED
    elif not a.gate.is_open or a.attempt_id is not None:
        reason = DiagnosisReason.GATE_CLOSED
    else:
        try:
            served = _snapshot(st, project_ids, cfg)
        except ReplicaError:
            reason = DiagnosisReason.CORRUPT
        else:
            reason = DiagnosisReason.PROJECTS_MISMATCH if served is None else DiagnosisReason.CORRUPT
    return Diagnosis(reason, message)


def read(cfg: ModelConfig, st: State, project_ids: Sequence[str]) -> tuple[State, Union[Snapshot, Diagnosis]]:
    """``readProjectEnvReplicaSnapshot`` as a step: the state as it was, and the served view of exactly
    ``project_ids`` (given ``cfg`` of variant ``fixed``, re-judged), or why the read fails closed."""
    snapshot = read_snapshot(st, project_ids, cfg)
    if snapshot is not None:
        return st, snapshot
    diagnosis = diagnose(st, project_ids, cfg)
    assert diagnosis is not None  # read_snapshot is None exactly when snapshot_diagnostics names why
    return st, diagnosis


def snapshot_diagnostics(st: State, project_ids: Sequence[str], cfg: Optional[ModelConfig] = None) -> Optional[str]:
    """Why ``read_snapshot`` fails closed (None when it serves); never includes a value."""
    a = st.authority
    if not a.gate.activated:
        return "replica is not activated"
    if not a.gate.is_open or a.attempt_id is not None:
        return "serving gate is closed"
    try:
        if _snapshot(st, project_ids, cfg) is None:
            return "requested projects are not exactly the replica's projects"
    except ReplicaError as error:
        return error.message
    return None


def list_receipts(st: State) -> tuple[ReceiptView, ...]:
    """``listProjectEnvReplicaReceipts`` without MACs, ordered by stream and sequence."""
    return tuple(
        ReceiptView(s, n, r.ok, r.code, r.result, r.record_version)
        for (s, n), r in st.receipts.sorted_items()
    )
