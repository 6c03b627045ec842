"""The safety properties of the replica: one named predicate per property.

Models: what must hold of every reachable replica state (``INVARIANTS``), of
every step ``(state, action, result, next state)`` (``STEP_PROPERTIES``), and
what must happen at least once in a run so that a pass is not vacuous
(``SOMETIMES``: in a state, in a step, or in a step after another step on the
same path). Each predicate's docstring states its property in words;
``describe`` turns it into the table the checker prints.

Crashes (``CrashAfter``, result ``Crashed``) are steps like any other: every
invariant holds in the state a crash leaves, and the step properties see the
crash step itself. ``crash_never_pairs_old_value_with_new_head`` states the
seed's own promise about crashes; ``live_head_moves_with_its_record_version``
the seed's grouping of a delivery's first transaction.

Leaves out on purpose: liveness (that a value is eventually installed, that
the gate eventually opens): the checker explores bounded safety; the
"sometimes" properties only show the interesting states are reached.

The predicates read a state by its field names (the shape of
``model.state.State``) and import nothing of the model. What a read serves
is the seed's read stated over the state (``spec.serving``); the model's own
read is a step (``ActionKind.READ``, a task reading at any moment), and the
step properties judge what it answers against the gate and against
``spec.serving``. So the spec judges the model, never the other way round.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Hashable, Mapping, Optional, Protocol, Sequence, TypeVar, Union, cast

from envreplica.spec.domain import (
    ActionKind,
    ApplyFrame,
    ApplyOk,
    ApplyRefused,
    Binding,
    BindingState,
    CommitFrame,
    CommitOk,
    CommitRefused,
    Crashed,
    DeliveryRequest,
    Head,
    Materialization,
    MatKind,
    PageFrame,
    PageRefused,
    RecordResult,
    RefusalCode,
    Snapshot,
    ValueRef,
    View,
)
from envreplica.spec.frozen import Frozen, replace
from envreplica.spec.gate import GATE_NEXT, Gate, Step, fired_trigger
from envreplica.spec.serving import served

# ---------------------------------------------------------------------------
# The state as the predicates read it: by field names, the shape of ``model.state.State``
# ---------------------------------------------------------------------------


class AuthorityView(Protocol):
    """The authority row (``model.state.Authority``)."""

    @property
    def gate(self) -> Gate: ...

    @property
    def stream_id(self) -> Optional[str]: ...

    @property
    def applied_sequence(self) -> int: ...

    @property
    def attempt_id(self) -> Optional[str]: ...

    @property
    def org_id(self) -> Optional[str]: ...

    @property
    def policy_epochs(self) -> tuple[int, ...]: ...


class RowView(Protocol):
    """A live or staged record row (``model.state.LiveRow``, ``StageRow``)."""

    @property
    def state(self) -> BindingState: ...

    @property
    def mat(self) -> Materialization: ...


class StageRowView(RowView, Protocol):
    """A staged record row (``model.state.StageRow``)."""

    @property
    def present(self) -> bool: ...


class ValueView(Protocol):
    """A value row (``model.state.StoredValue``)."""

    @property
    def revision(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def value_ref(self) -> ValueRef: ...

    @property
    def value(self) -> str: ...


class StageProjectView(Protocol):
    """A project of the open attempt (``model.state.StageProject``)."""

    @property
    def record_version(self) -> Optional[int]: ...


class ReceiptRow(Protocol):
    """A consumed delivery's receipt (``model.state.Receipt``)."""

    @property
    def request(self) -> DeliveryRequest: ...

    @property
    def ok(self) -> bool: ...

    @property
    def code(self) -> Optional[RefusalCode]: ...

    @property
    def result(self) -> Optional[RecordResult]: ...

    @property
    def record_version(self) -> Optional[int]: ...


class ReadView(Protocol):
    """A value-store read in flight (``model.state.AwaitRead``)."""

    @property
    def view(self) -> View: ...

    @property
    def attempt_id(self) -> Optional[str]: ...

    @property
    def project_id(self) -> str: ...

    @property
    def key(self) -> str: ...


class InFlightView(Protocol):
    """An operation suspended in a read (``model.state.PageInFlight``, ``DeliveryInFlight``)."""

    @property
    def frame(self) -> Union[PageFrame, ApplyFrame]: ...

    @property
    def read(self) -> ReadView: ...


class ReplicaView(Hashable, Protocol):
    """A replica state (``model.state.State``): its tables and what is in flight."""

    @property
    def authority(self) -> AuthorityView: ...

    @property
    def projects(self) -> Mapping[str, int]: ...

    @property
    def records(self) -> Mapping[tuple[str, str], RowView]: ...

    @property
    def values(self) -> Mapping[tuple[str, str], ValueView]: ...

    @property
    def stage_projects(self) -> Mapping[tuple[str, str], StageProjectView]: ...

    @property
    def stage_records(self) -> Mapping[tuple[str, str, str], StageRowView]: ...

    @property
    def stage_values(self) -> Mapping[tuple[str, str, str], ValueView]: ...

    @property
    def receipts(self) -> Mapping[tuple[str, int], ReceiptRow]: ...

    @property
    def inflight(self) -> tuple[InFlightView, ...]: ...


class _ResumeAction(Protocol):
    """A step of kind ``ActionKind.RESUME`` (``model.actions.Resume``)."""

    @property
    def slot(self) -> int: ...


F = TypeVar("F", covariant=True)


class _FrameAction(Protocol[F]):
    """A page, delivery or commit step (``model.actions.Page``, ``Deliver``, ``Commit``): its frame."""

    @property
    def frame(self) -> F: ...


class _ReadAction(Protocol):
    """A step of kind ``ActionKind.READ`` (``model.actions.Read``)."""

    @property
    def project_ids(self) -> Sequence[str]: ...


K = TypeVar("K")


# ---------------------------------------------------------------------------
# State invariants
# ---------------------------------------------------------------------------


def gate_agrees_with_attempt(st: ReplicaView) -> bool:
    """An attempt is open exactly when the gate is closed.staging."""
    return (st.authority.attempt_id is not None) == (st.authority.gate is Gate.STAGING)


def staging_belongs_to_attempt(st: ReplicaView) -> bool:
    """Every staged row belongs to the open attempt; with no attempt nothing is staged."""
    attempt = st.authority.attempt_id
    return all(
        k[0] == attempt
        for table in (st.stage_projects, st.stage_records, st.stage_values)
        for k in table
    )


def _installed_match(records: Mapping[K, RowView], values: Mapping[K, ValueView]) -> bool:
    for k, row in records.items():
        if row.mat.kind is MatKind.INSTALLED:
            value = values.get(k)
            head = row.state.head
            if (
                value is None
                or head.tombstone
                or value.revision != head.revision
                or value.generation != head.generation
                or value.value_ref != head.value_ref
            ):
                return False
    return True


def installed_matches_head_live(st: ReplicaView) -> bool:
    """An installed live value matches its record's head (revision, generation, value reference)."""
    return _installed_match(st.records, st.values)


def installed_matches_head_staged(st: ReplicaView) -> bool:
    """An installed staged value matches its staged record's head (revision, generation, value reference)."""
    return _installed_match(st.stage_records, st.stage_values)


def unserved_records_carry_no_value(st: ReplicaView) -> bool:
    """Withheld, unavailable and tombstoned records carry no value, live or staged."""
    for records, values in ((st.records, st.values), (st.stage_records, st.stage_values)):
        for k, row in records.items():
            if (row.mat.kind is not MatKind.INSTALLED or row.state.head.tombstone) and k in values:
                return False
    return True


def no_value_without_record(st: ReplicaView) -> bool:
    """Every stored value, live or staged, has a record."""
    return all(k in st.records for k in st.values) and all(k in st.stage_records for k in st.stage_values)


def served_values_are_live_bound_kept(st: ReplicaView) -> bool:
    """A served value belongs to a live, non-tombstoned, bound record under a kept policy epoch."""
    kept = st.authority.policy_epochs
    for entry in served(st) or ():
        if entry.value is not None and (
            entry.state.head.tombstone or entry.state.binding is not None or entry.state.policy_epoch not in kept
        ):
            return False
    return True


def receipts_cover_consumed(st: ReplicaView) -> bool:
    """Receipts exist for exactly the sequences 1..applied of the current stream."""
    a = st.authority
    if not a.gate.activated:
        return len(st.receipts) == 0
    expected = {(a.stream_id, n) for n in range(1, a.applied_sequence + 1)}
    return set(st.receipts) == expected


def gate_open_has_no_staging(st: ReplicaView) -> bool:
    """An open or idle gate has no staged projects: only an attempt stages."""
    if st.authority.gate in (Gate.OPEN, Gate.IDLE, Gate.INACTIVE):
        return not st.stage_projects and not st.stage_records and not st.stage_values
    return True


# ---------------------------------------------------------------------------
# Step properties: (pre, action, result, post)
# ---------------------------------------------------------------------------


def _delivery_frame(action: object) -> Optional[ApplyFrame]:
    frame = getattr(action, "frame", None)
    return frame if isinstance(frame, ApplyFrame) else None


def cursor_never_goes_back(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """Within one stream the delivery cursor never goes back."""
    a, b = pre.authority, post.authority
    if a.gate.activated and b.gate.activated and a.stream_id == b.stream_id:
        return b.applied_sequence >= a.applied_sequence
    return True


def replay_returns_same_answer(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A replayed delivery returns the answer recorded when its sequence was consumed, and changes nothing."""
    if not getattr(result, "replayed", False) or getattr(result, "code", None) is RefusalCode.DELIVERY_CONFLICT:
        return True
    frame = _delivery_frame(action)
    if frame is None:
        return False  # only a delivery can be answered as a replay
    receipt = pre.receipts.get((frame.delivery.stream_id, frame.delivery.sequence))
    if receipt is None or receipt.request != frame.request() or post != pre:
        return False
    if isinstance(result, ApplyOk):
        return receipt.ok and receipt.result == result.result and receipt.record_version == result.record_version
    refused = cast(ApplyRefused, result)  # replayed, and not ApplyOk: only a delivery's refusal is replayed
    return (not receipt.ok) and receipt.code == refused.code


def conflicting_replay_changes_nothing(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A different frame at a consumed sequence gets delivery_conflict and changes nothing."""
    frame = _delivery_frame(action)
    if frame is None or not hasattr(action, "frame"):
        return True
    a = pre.authority
    if not a.gate.activated or frame.delivery.stream_id != a.stream_id or frame.delivery.sequence > a.applied_sequence:
        return True
    receipt = pre.receipts.get((frame.delivery.stream_id, frame.delivery.sequence))
    if receipt is None or receipt.request == frame.request():
        return True
    return isinstance(result, ApplyRefused) and result.code is RefusalCode.DELIVERY_CONFLICT and post == pre


def consumed_answer_is_receipted(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """When a delivery consumes its sequence, the receipt stored is the answer it gives."""
    if not isinstance(result, (ApplyOk, ApplyRefused)) or result.replayed:
        return True
    if isinstance(result, ApplyRefused) and not result.consumed:
        return True
    receipt = post.receipts.get((result.applied_through.stream_id, result.applied_through.sequence))
    if receipt is None or receipt == pre.receipts.get((result.applied_through.stream_id, result.applied_through.sequence)):
        return False
    if isinstance(result, ApplyOk):
        return receipt.ok and receipt.result == result.result and receipt.record_version == result.record_version
    return (not receipt.ok) and receipt.code == result.code


def receipts_are_never_rewritten(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A receipt, once written, is never changed: receipts are only added, or all dropped with their stream."""
    if pre.receipts is post.receipts or pre.authority.stream_id != post.authority.stream_id:
        return True
    return all(post.receipts.get(k, r) == r for k, r in pre.receipts.items()) and (
        len(post.receipts) == 0 or set(pre.receipts) <= set(post.receipts)
    )


def _moved_keys(before: Mapping[K, object], after: Mapping[K, object]) -> set[K]:
    """The keys whose rows differ between two versions of one table (none when it is the same object)."""
    if before is after:  # an operation leaves the tables it does not write as they were
        return set()
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def resume_changes_only_its_operation(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A read that answers changes only its own operation's rows (and, for a delivery, its receipt and cursor)."""
    if getattr(action, "kind", None) is not ActionKind.RESUME:
        return True
    slot = cast(_ResumeAction, action).slot  # a step of kind RESUME is a Resume
    op = pre.inflight[slot]
    rest = pre.inflight[: slot] + pre.inflight[slot + 1:]
    if post.inflight[: len(rest)] != rest or len(post.inflight) > len(rest) + 1:
        return False
    if _moved_keys(pre.projects, post.projects):
        return False
    if _moved_keys(pre.stage_projects, post.stage_projects):
        return False
    stage_records = _moved_keys(pre.stage_records, post.stage_records)
    stage_values = _moved_keys(pre.stage_values, post.stage_values)
    receipts = _moved_keys(pre.receipts, post.receipts)
    a, b = pre.authority, post.authority
    if isinstance(op.frame, ApplyFrame):
        read = op.read
        scope_live = {(read.project_id, read.key)} if read.view is View.LIVE else set()
        scope_stage = {(read.attempt_id, read.project_id, read.key)} if read.view is View.STAGE else set()
        consumed = isinstance(result, ApplyOk) and not result.replayed
        cursor = op.frame.delivery
        if receipts != ({(cursor.stream_id, cursor.sequence)} if consumed else set()):
            return False
        expected_seq = cursor.sequence if consumed else a.applied_sequence
        if b != replace(a, applied_sequence=expected_seq):
            return False
    else:
        scope_live = set()
        scope = (op.frame.attempt_id, op.frame.project_id)
        scope_stage = {k for k in stage_records | stage_values if k[:2] == scope}
        if receipts or b != a:
            return False
    return (
        _moved_keys(pre.records, post.records) <= scope_live and _moved_keys(pre.values, post.values) <= scope_live
        and stage_records <= scope_stage and stage_values <= scope_stage
    )


def reads_change_only_materialization(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A value-store read that answers changes materializations and values only, never a record's state."""
    if getattr(action, "kind", None) is not ActionKind.RESUME:
        return True
    return _states_kept(pre.records, post.records) and _states_kept(pre.stage_records, post.stage_records)


def _states_kept(before: Mapping[K, RowView], after: Mapping[K, RowView]) -> bool:
    """The same keys, each with the same record state (true at once when the table is the same object)."""
    if before is after:
        return True
    if before.keys() != after.keys():
        return False
    return not any(after[k].state != row.state for k, row in before.items())


def commit_only_at_high_water(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A commit succeeds only at the replica's delivery cursor and with the staged record versions."""
    if not isinstance(result, CommitOk):
        return True
    a = pre.authority
    frame = cast(_FrameAction[CommitFrame], action).frame  # only a commit answers CommitOk
    staged = {p: sp.record_version for (att, p), sp in pre.stage_projects.items() if att == frame.attempt_id}
    return (
        (frame.high_water.stream_id, frame.high_water.sequence) == (a.stream_id, a.applied_sequence)
        and staged == {v.project_id: v.record_version for v in frame.versions}
    )


def organisation_fixed_after_activation(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """The organisation never changes after activation."""
    return not pre.authority.gate.activated or post.authority.org_id == pre.authority.org_id


def live_record_version_never_decreases(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A live project's record version never decreases."""
    return pre.projects is post.projects or all(post.projects[p] >= v for p, v in pre.projects.items() if p in post.projects)


def commit_promotes_exactly_staged(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A successful commit makes the live view exactly the attempt's staged view, and opens the gate."""
    if not isinstance(result, CommitOk):
        return True
    attempt = result.attempt_id
    present = {(p, k): row for (att, p, k), row in pre.stage_records.items() if att == attempt and row.present}
    if {k: (r.state, r.mat) for k, r in present.items()} != {k: (r.state, r.mat) for k, r in post.records.items()}:
        return False
    values = {(p, k): v for (att, p, k), v in pre.stage_values.items() if att == attempt and (p, k) in present}
    if values != dict(post.values.items()):
        return False
    versions = {p: sp.record_version for (att, p), sp in pre.stage_projects.items() if att == attempt}
    return versions == dict(post.projects.items()) and post.authority.gate is Gate.OPEN


#: Page refusals the seed returns from its first transaction before any write.
PAGE_REFUSALS_BEFORE_WRITES = frozenset({
    RefusalCode.PROJECT_NOT_IN_ATTEMPT,
    RefusalCode.RECORD_VERSION_STALE,
    RefusalCode.SNAPSHOT_PAGE_MISMATCH,
})


def refusals_change_only_what_seed_writes(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """Refusals change only what the seed's refusing transaction wrote before refusing.

    Commit refusals change nothing. Page refusals never touch the authority,
    the live view or receipts; project_not_in_attempt, record_version_stale
    and snapshot_page_mismatch change nothing; snapshot_version_conflict and
    ack_page_too_large may leave the page's staged writes for its own
    (attempt, project). A not-consumed delivery refusal answered by the
    delivery's first transaction changes nothing; a consumed refusal adds
    exactly its receipt and moves the cursor to it.
    """
    kind = getattr(action, "kind", None)
    if isinstance(result, CommitRefused):
        return post == pre
    if isinstance(result, PageRefused) and kind is ActionKind.PAGE:
        if (pre.authority, pre.projects, pre.records, pre.values, pre.receipts) != (
            post.authority, post.projects, post.records, post.values, post.receipts
        ):
            return False
        if result.code in PAGE_REFUSALS_BEFORE_WRITES:
            return post == pre
        page = cast(_FrameAction[PageFrame], action).frame  # a step of kind PAGE is a Page
        scope = (page.attempt_id, page.project_id)
        for table in ("stage_projects", "stage_records", "stage_values"):
            before, after = getattr(pre, table), getattr(post, table)
            for k in set(before) | set(after):
                if before.get(k) != after.get(k) and tuple(k[:2]) != scope:
                    return False
        return True
    if isinstance(result, ApplyRefused) and kind is ActionKind.DELIVERY:
        if not result.consumed or result.replayed:
            return post == pre
        frame = cast(_FrameAction[ApplyFrame], action).frame  # a step of kind DELIVERY is a Deliver
        added = set(post.receipts) - set(pre.receipts)
        expected = replace(
            pre,
            authority=replace(pre.authority, applied_sequence=frame.delivery.sequence),
            receipts=post.receipts,
        )
        return added == {(frame.delivery.stream_id, frame.delivery.sequence)} and post == expected
    return True


def restart_closes_gate(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A restart loses everything in flight, keeps the committed tables, and leaves the gate closed."""
    if getattr(action, "kind", None) is not ActionKind.RESTART:
        return True
    a, b = pre.authority, post.authority
    return (
        post.inflight == ()
        and b.gate in (Gate.INACTIVE, Gate.IDLE)
        and b.attempt_id is None
        and (post.projects, post.records, post.values, post.receipts) == (pre.projects, pre.records, pre.values, pre.receipts)
        and (b.stream_id, b.applied_sequence, b.org_id, b.policy_epochs) == (a.stream_id, a.applied_sequence, a.org_id, a.policy_epochs)
    )


def _delivered_frame(action: object) -> Optional[ApplyFrame]:
    """The frame of a delivery, run whole or cut by a crash (``CrashAfter`` of a ``Deliver``)."""
    return _delivery_frame(getattr(action, "action", action))


def _head_key(state: BindingState) -> tuple[Head, Binding, Optional[int]]:
    """What a stored value is bound to: the head, and the binding and policy the head was approved under."""
    return state.head, state.binding, state.policy_epoch


def crash_never_pairs_old_value_with_new_head(
    pre: ReplicaView, action: Step, result: object, post: ReplicaView
) -> bool:
    """A crash can withhold a value but never pair one with another head or policy than it was fetched for.

    After a crash (the committed prefix of a page, delivery or resumed read,
    then ``restart``): nothing is in flight or staged and the gate is closed;
    every live value belongs to an installed, non-tombstoned record whose
    head is exactly the one the value was fetched for (revision, generation,
    value reference); and a value the crash kept from before still belongs
    to the record state (head, binding, policy epoch) it had before.

    Why a step property and not only the invariants: ``installed_matches_head_live``
    and ``unserved_records_carry_no_value`` hold in every state, a crash's
    included, but cannot see that a value outlived a change of its record's
    binding or policy at the same head; this compares the two sides of the
    crash. The kept-epoch half ("and its policy epoch is kept") is the
    invariant ``served_values_are_live_bound_kept``: checked in every state a
    crash leads to, in particular every later open state in which a value a
    crash left would be served. ``fixed`` keeps it; ``seed`` breaks it by F1,
    with or without a crash.
    """
    if not isinstance(result, Crashed):
        return True
    a = post.authority
    if (post.inflight or a.gate in (Gate.OPEN, Gate.STAGING) or a.attempt_id is not None
            or post.stage_projects or post.stage_records or post.stage_values):
        return False
    for k, value in post.values.items():
        row = post.records.get(k)
        if row is None or row.mat.kind is not MatKind.INSTALLED:
            return False
        head = row.state.head
        if (head.tombstone or value.revision != head.revision or value.generation != head.generation
                or value.value_ref != head.value_ref):
            return False
        before = pre.records.get(k)
        if pre.values.get(k) == value and (before is None or _head_key(before.state) != _head_key(row.state)):
            return False
    return True


def live_head_moves_with_its_record_version(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A live record's state changes only with its project's record version: by a commit, or a delivery setting it.

    The seed writes a delivery's record and its project's record version in
    one transaction; a crash between the two would leave a head that no
    record version describes.
    """
    if isinstance(result, CommitOk) or pre.records is post.records:
        return True
    moved = {
        k for k in set(pre.records) | set(post.records)
        if getattr(pre.records.get(k), "state", None) != getattr(post.records.get(k), "state", None)
    }
    if not moved:
        return True
    frame = _delivered_frame(action)
    return (
        frame is not None
        and moved == {(frame.project_id, frame.state.key)}
        and post.projects.get(frame.project_id) == frame.record_version
    )


def nothing_served_unless_open(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A read serves only while the gate is open with no attempt."""
    if getattr(action, "kind", None) is not ActionKind.READ or not isinstance(result, Snapshot):
        return True
    a = pre.authority
    return a.gate is Gate.OPEN and a.attempt_id is None


def reads_serve_what_the_seed_serves(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """A read of every project serves exactly the seed's read of the state (``spec.serving``), or nothing."""
    if getattr(action, "kind", None) is not ActionKind.READ or not isinstance(result, Snapshot):
        return True
    if tuple(cast(_ReadAction, action).project_ids) != tuple(sorted(pre.projects)):  # a READ step is a Read
        return True  # the step reads every project once, in id order
    expected = served(pre)
    got = tuple((p.project_id, e.state, e.value) for p in result.projects for e in p.entries)
    return expected is not None and got == tuple((s.project_id, s.state, s.value) for s in expected)


def gate_moves_only_by_declared_transitions(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """The gate moves only along a declared transition of spec.gate fired by a successful operation."""
    trigger = fired_trigger(action, result)
    if trigger is None:
        return pre.authority.gate is post.authority.gate
    return GATE_NEXT.get((trigger, pre.authority.gate)) is post.authority.gate


# ---------------------------------------------------------------------------
# Sometimes: each must hold in at least one reachable state or step
# ---------------------------------------------------------------------------


def sometimes_gate_open(st: ReplicaView) -> bool:
    """Sometimes the gate is open."""
    return st.authority.gate is Gate.OPEN


def sometimes_value_served(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """Sometimes a read serves a value."""
    return isinstance(result, Snapshot) and any(e.value is not None for p in result.projects for e in p.entries)


def sometimes_staged_value(st: ReplicaView) -> bool:
    """Sometimes a staged record holds an installed value."""
    return len(st.stage_values) > 0 and any(r.mat.kind is MatKind.INSTALLED for r in st.stage_records.values())


def sometimes_in_flight(st: ReplicaView) -> bool:
    """Sometimes an operation is suspended in a value-store read."""
    return len(st.inflight) > 0


def sometimes_replay(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """Sometimes a delivery is replayed from its receipt."""
    return isinstance(result, (ApplyOk, ApplyRefused)) and result.replayed


def sometimes_commit_after_interleaving(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """Sometimes a commit succeeds while another operation is suspended in a read."""
    return isinstance(result, CommitOk) and len(pre.inflight) > 0


def _crashed_delivery(pre: ReplicaView, action: object) -> Optional[ApplyFrame]:
    """The delivery a crash step cut: a ``CrashAfter`` of its ``Deliver``, or of the ``Resume`` of its read."""
    inner = getattr(action, "action", None)
    frame = _delivery_frame(inner)
    if frame is None and inner is not None and hasattr(inner, "slot") and inner.slot < len(pre.inflight):
        op = pre.inflight[inner.slot]
        frame = op.frame if isinstance(op.frame, ApplyFrame) else None
    return frame


def sometimes_crash_half_applies_delivery(pre: ReplicaView, action: Step, result: object, post: ReplicaView) -> bool:
    """Sometimes a crash between a delivery's commits half-applies it: record and version written, no receipt or cursor."""
    if not isinstance(result, Crashed):
        return False
    frame = _crashed_delivery(pre, action)
    if frame is None:
        return False
    c = frame.delivery
    row = post.records.get((frame.project_id, frame.state.key))
    return (
        row is not None
        and row.state == frame.state
        and post.projects.get(frame.project_id) == frame.record_version
        and (c.stream_id, c.sequence) not in post.receipts
        and post.authority.stream_id == c.stream_id
        and post.authority.applied_sequence == c.sequence - 1
    )


def sometimes_resent_delivery_completes(crash: tuple[ReplicaView, Step, object, ReplicaView], pre: ReplicaView,
                                        action: Step, result: object, post: ReplicaView) -> bool:
    """Sometimes the cloud re-sends a delivery a crash left half-applied and it completes, answered with that record.

    ``crash`` is the earlier crash step on the same path (the checker passes
    it: this is a ``sometimes-after`` property, after
    ``sometimes_crash_half_applies_delivery``).
    """
    frame = _crashed_delivery(crash[0], crash[1])
    again = _delivery_frame(action)
    if frame is None or again is None or again.request() != frame.request():
        return False
    c = frame.delivery
    return (
        isinstance(result, ApplyOk)
        and not result.replayed
        and result.result.state == frame.state
        and (c.stream_id, c.sequence) in post.receipts
        and post.authority.applied_sequence == c.sequence
    )


@dataclass(frozen=True)
class Property(Frozen):
    """A named predicate and the sentence it checks."""

    name: str
    check: Callable[..., bool]
    kind: str  # "invariant" | "step" | "sometimes-state" | "sometimes-step" | "sometimes-after"
    doc: str = ""  # the statement, when ``check`` is a wrapper without the docstring
    after: Optional["Property"] = None  # sometimes-after: the step that must come first on the path
    #: Step kinds only: the action kinds (``ActionKind`` values) and result types of the steps on which
    #: ``check`` can return False (a step property) or True (a sometimes-step); None: any. The checker
    #: evaluates the property only there (``checker.bfs``); ``tests/test_checker_fast.py`` shows it
    #: answers the same everywhere else.
    actions: Optional[frozenset[str]] = None
    results: Optional[tuple[type, ...]] = None

    @property
    def statement(self) -> str:
        text = (self.doc or self.check.__doc__ or _docstring_in_source(self.check) or "").strip()
        return text.splitlines()[0] if text else self.name


def _docstring_in_source(fn: Callable[..., object]) -> Optional[str]:
    """``fn``'s docstring as its module's source file has it: a function mypyc compiled keeps none at run time
    (``spec.compiled``), and its source is installed beside the extension module."""
    package_name, _, name = (getattr(fn, "__module__", "") or "").rpartition(".")
    package = sys.modules.get(package_name)
    # the package's folders (a compiled module's own __file__ and __spec__ may name a folder that is not there)
    for folder in getattr(package, "__path__", ()):
        found = _docstrings(str(Path(folder) / f"{name}.py")).get(getattr(fn, "__name__", ""))
        if found:
            return found
    return None


@lru_cache(maxsize=None)
def _docstrings(source: str) -> dict[str, str]:
    """Each top-level function's docstring in the Python file ``source`` (empty when it is not there)."""
    try:
        tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    return {node.name: doc for node in tree.body if isinstance(node, ast.FunctionDef)
            for doc in [ast.get_docstring(node)] if doc}


def _props(kind: str, *fns: Callable[..., bool]) -> tuple[Property, ...]:
    return tuple(Property(f.__name__, f, kind) for f in fns)


INVARIANTS = _props(
    "invariant",
    gate_agrees_with_attempt,
    staging_belongs_to_attempt,
    gate_open_has_no_staging,
    installed_matches_head_live,
    installed_matches_head_staged,
    unserved_records_carry_no_value,
    no_value_without_record,
    served_values_are_live_bound_kept,
    receipts_cover_consumed,
)

def _step(kind: str, fn: Callable[..., bool], actions: Optional[tuple[str, ...]] = None,
          results: Optional[tuple[type, ...]] = None) -> Property:
    """A step property evaluated only on steps of ``actions`` (action kind values) and ``results`` (types)."""
    return Property(fn.__name__, fn, kind, actions=None if actions is None else frozenset(actions), results=results)


#: The result types that can say a delivery was replayed or consumed.
_DELIVERY_RESULTS = (ApplyOk, ApplyRefused)

STEP_PROPERTIES = (
    _step("step", cursor_never_goes_back),
    _step("step", replay_returns_same_answer, results=_DELIVERY_RESULTS),
    _step("step", conflicting_replay_changes_nothing, actions=("apply_delivery",)),
    _step("step", consumed_answer_is_receipted, results=_DELIVERY_RESULTS),
    _step("step", receipts_are_never_rewritten),
    _step("step", resume_changes_only_its_operation, actions=("resume",)),
    _step("step", reads_change_only_materialization, actions=("resume",)),
    _step("step", organisation_fixed_after_activation),
    _step("step", live_record_version_never_decreases),
    _step("step", live_head_moves_with_its_record_version),
    _step("step", commit_promotes_exactly_staged, results=(CommitOk,)),
    _step("step", commit_only_at_high_water, results=(CommitOk,)),
    _step("step", refusals_change_only_what_seed_writes, results=(CommitRefused, PageRefused, ApplyRefused)),
    _step("step", restart_closes_gate, actions=("restart",)),
    _step("step", crash_never_pairs_old_value_with_new_head, results=(Crashed,)),
    _step("step", gate_moves_only_by_declared_transitions),
    _step("step", nothing_served_unless_open, actions=("read_snapshot",), results=(Snapshot,)),
    _step("step", reads_serve_what_the_seed_serves, actions=("read_snapshot",), results=(Snapshot,)),
)

_HALF_APPLIED = _step("sometimes-step", sometimes_crash_half_applies_delivery, results=(Crashed,))

SOMETIMES = _props(
    "sometimes-state",
    sometimes_gate_open,
    sometimes_staged_value,
    sometimes_in_flight,
) + (
    _step("sometimes-step", sometimes_value_served, actions=("read_snapshot",), results=(Snapshot,)),
    _step("sometimes-step", sometimes_replay, results=_DELIVERY_RESULTS),
    _step("sometimes-step", sometimes_commit_after_interleaving, results=(CommitOk,)),
    _HALF_APPLIED,
    Property(sometimes_resent_delivery_completes.__name__, sometimes_resent_delivery_completes, "sometimes-after",
             after=_HALF_APPLIED),
)

ALL = INVARIANTS + STEP_PROPERTIES + SOMETIMES


def by_name(name: str) -> Property:
    for p in ALL:
        if p.name == name:
            return p
    raise KeyError(name)
