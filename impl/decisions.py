"""The SQLite replica's own reading of the seed's decisions, kept apart from any storage.

What it holds, each read from ``project-env-replica.ts`` on its own (the
executable model in ``envreplica.model`` encodes the same seed separately, so
a slip in either shows as a divergence in the lockstep instead of hiding in
both):

* ``Decisions.order`` (the seed's ``stateOrder``): a table from the signs of
  the revision and generation deltas to what the counters alone say, then the
  facets a counter that stayed put protects, then the listing generation.
* ``Decisions.reachable`` (``isReachableRecordAdvance``): the head move of one
  record-version step, looked up by its (revision, generation) step in a table
  of requirements.
* ``Decisions.desired`` (``desiredMaterialization``): an ordered list of
  withholding rules, the first that applies decides; else pending a fetch.
* ``Decisions.retention`` (``retainStageState`` / ``retainLiveState`` /
  ``retainedExisting``): not code that writes, but a plan (``Retention``) the
  replica applies to its tables.
* ``Decisions.ack_fits`` (``pageFits``): the whole acknowledgement, built with
  the longest reasons, measured as ``Buffer.byteLength(JSON.stringify(ack))``.
* ``Decisions.plan_read`` / ``Decisions.judge_answer``
  (``readMaterializedValue``, split at its ``await``): whether there is a read
  at all and the parameter it names (``staged_parameter_name``,
  ``legacy_parameter_name``), then what the store's answer means: the
  envelope checks, the legacy version check (before the text is parsed, as in
  the seed) and the failure reasons. Envelope text is parsed as JavaScript's
  ``JSON.parse`` does: every number is a double, and ``NaN`` / ``Infinity``
  are not JSON (the seed's ``catch`` makes them ``value_unavailable``).

``DECISIONS`` is the instance ``SqliteReplica`` holds; a test swaps it for a
subclass to run a deliberately wrong decision (``tests/impl_mutants.py``).

Leaves out on purpose: the cursor and organisation helpers (methods of
``impl.rows.AuthorityRow``, on the row they read), the variant fixes
(``# FIX(Fn)`` in ``impl.replica``, where the seed's transactions are), and
anything that touches SQLite, the value store or the sealer.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from envreplica.impl.rows import LiveRecord, StagedRecord
from envreplica.spec import wire
from envreplica.spec.domain import (
    BindingState,
    BindOmit,
    BindWithhold,
    Cursor,
    LegacyRef,
    Materialization,
    MatKind,
    PageFrame,
    StagedRef,
    UnavailableReason,
    ValueRef,
    WithheldReason,
    unavailable,
    withheld,
)

__all__ = [
    "Order",
    "View",
    "Retention",
    "StoreRead",
    "Answered",
    "NotFound",
    "ReadFailed",
    "StoreAnswer",
    "Fetched",
    "Decisions",
    "DECISIONS",
    "staged_parameter_name",
    "legacy_parameter_name",
]


class Order(str, enum.Enum):
    """How an incoming record relates to the stored one (the seed's ``StateOrder``)."""

    SAME = "same"
    NEWER = "newer"
    OLDER = "older"
    CONFLICT = "conflict"


class View(str, enum.Enum):
    """Which table a record is retained in."""

    LIVE = "live"  # ``records``: a delivery while the gate is not staging
    STAGE = "stage"  # ``stage_records``: a page, or a delivery during an attempt


@dataclass(frozen=True, slots=True)
class Retention:
    """What retaining an incoming record does to its row: the replica applies it."""

    state: BindingState  # the record the row holds afterwards
    mat: Materialization  # and its materialization
    rewrite: bool  # the row is written (a staged row becomes ``present``)
    drop_value: bool  # the record's value row is deleted
    fetch: bool  # a value must be fetched for it afterwards


# ---------------------------------------------------------------------------
# Value-store reads: what is asked, and the store's answer
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreRead:
    """One read to make: the reference and the parameter name it is read under."""

    ref: ValueRef
    name: str


@dataclass(frozen=True, slots=True)
class Answered:
    """The store returned text (and, for a legacy read, the version it says it returned)."""

    raw: str
    version: Optional[int] = None


@dataclass(frozen=True, slots=True)
class NotFound:
    """No such parameter or version (the reader's ``null``)."""


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """The read threw (the seed's ``catch``)."""


StoreAnswer = Union[Answered, NotFound, ReadFailed]


@dataclass(frozen=True, slots=True)
class Fetched:
    """The outcome of a read: the value, or why there is none."""

    value: Optional[str]
    reason: Optional[UnavailableReason]


_UUID = wire.STAGING_ID.regex


def staged_parameter_name(prefix: str, project_id: str, key: str, staging_id: str) -> str:
    """``projectEnvReplicaStagedParameterName``: the key hashed, the staging id checked."""
    if not isinstance(staging_id, str) or _UUID.fullmatch(staging_id) is None:
        raise ValueError("invalid staged project environment identity")
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return "/".join((prefix, "projects", project_id, "env-values", digest, staging_id))


def legacy_parameter_name(prefix: str, project_id: str, key: str) -> Optional[str]:
    """``projectEnvParameterName``: None when ``key`` is not a parameter path segment."""
    if wire.SEGMENT.regex.fullmatch(key) is None:
        return None
    return "/".join((prefix, "projects", project_id, "env", key))


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _js_json(raw: str) -> Any:
    """``JSON.parse`` as JavaScript reads it: numbers are doubles, ``NaN`` and ``Infinity`` are errors."""
    return json.loads(raw, parse_int=float, parse_constant=_not_json)


def _is_number(value: Any, expected: float) -> bool:
    """JavaScript ``value === expected`` for a parsed JSON value and a number."""
    return type(value) is float and value == expected


#: The exact keys of each envelope (docs/protocol.md section 4).
_STAGED_ENVELOPE = frozenset(("v", "kind", "orgId", "projectId", "key", "stagingId", "value"))
_LEGACY_ENVELOPE = frozenset(("v", "kind", "projectId", "key", "value"))


class _Unparsable(Exception):
    """``parseStoredProjectEnv`` threw: the text is not an exact v1 envelope."""


def _stored_project_env(raw: str) -> dict[str, Any]:
    """``parseStoredProjectEnv``: an exact v1 envelope with string fields, or ``_Unparsable``."""
    envelope = _js_json(raw)
    if type(envelope) is not dict or envelope.keys() != _LEGACY_ENVELOPE:
        raise _Unparsable()
    if not _is_number(envelope["v"], 1) or envelope["kind"] != "project-env":
        raise _Unparsable()
    if not all(type(envelope[k]) is str for k in ("projectId", "key", "value")):
        raise _Unparsable()
    return envelope


# ---------------------------------------------------------------------------
# The decisions
# ---------------------------------------------------------------------------


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


class _Counters(enum.Enum):
    """Revision and generation did not settle the order: they stood still, or moved forward."""

    STILL = "still"  # the same head counters: the facets, then the listing generation decide
    ADVANCED = "advanced"  # a head move: the facets a still counter protects, then the listing decide


#: What the signs of the (revision, generation) deltas alone say: older or conflict at once, or
#: that the counters stood still or moved forward.
_BY_COUNTERS: dict[tuple[int, int], Union[Order, _Counters]] = {
    (-1, -1): Order.OLDER,
    (-1, 0): Order.OLDER,
    (0, -1): Order.OLDER,
    (-1, 1): Order.CONFLICT,
    (1, -1): Order.CONFLICT,
    (0, 0): _Counters.STILL,
    (0, 1): _Counters.ADVANCED,
    (1, 0): _Counters.ADVANCED,
    (1, 1): _Counters.ADVANCED,
}

#: The facets of a record each counter protects: a counter that stays put keeps them.
_FACETS: dict[str, Callable[[BindingState], Any]] = {
    "tombstone": lambda s: s.head.tombstone,
    "valueRef": lambda s: s.head.value_ref,
    "binding": lambda s: s.binding,
    "policyEpoch": lambda s: s.policy_epoch,
}
_KEPT_BY_REVISION = ("tombstone", "binding", "policyEpoch")
_KEPT_BY_GENERATION = ("tombstone", "valueRef")


def _differs(a: BindingState, b: BindingState, facets: Sequence[str]) -> bool:
    return any(_FACETS[f](a) != _FACETS[f](b) for f in facets)


class Decisions:
    """The seed's pure decisions as the SQLite replica makes them (one instance: ``DECISIONS``)."""

    # -- records --------------------------------------------------------------

    def order(self, incoming: BindingState, current: BindingState) -> Order:
        """``stateOrder``: same, newer, older or conflict."""
        d_rev = incoming.head.revision - current.head.revision
        d_gen = incoming.head.generation - current.head.generation
        verdict = _BY_COUNTERS[(_sign(d_rev), _sign(d_gen))]
        if isinstance(verdict, Order):
            return verdict
        kept: list[str] = []
        if d_rev == 0:
            kept += _KEPT_BY_REVISION
        if d_gen == 0:
            kept += _KEPT_BY_GENERATION
        if _differs(incoming, current, kept):
            return Order.CONFLICT
        d_listing = incoming.listing_generation - current.listing_generation
        if verdict is _Counters.ADVANCED:  # a head move may not take the listing back
            return Order.CONFLICT if d_listing < 0 else Order.NEWER
        if d_listing > 0:  # the same head, relisted
            return Order.NEWER
        if d_listing < 0:
            return Order.OLDER
        return Order.SAME if incoming == current else Order.CONFLICT

    def reachable(self, incoming: BindingState, current: Optional[BindingState]) -> bool:
        """``isReachableRecordAdvance``: one record-version step makes exactly one head move."""
        head = incoming.head
        if current is None:  # a first save, or a first delete on a fence
            return (head.revision, head.generation, head.tombstone) in ((1, 1, False), (1, 0, True))
        if incoming.listing_generation < current.listing_generation:
            return False
        step = (head.revision - current.head.revision, head.generation - current.head.generation)
        requirements = self._moves().get(step)
        return requirements is not None and all(ok(incoming, current) for ok in requirements)

    @staticmethod
    def _moves() -> dict[tuple[int, int], tuple[Callable[[BindingState, BindingState], bool], ...]]:
        """(revision step, generation step) -> what that move must keep (every requirement holds)."""
        def same(*facets: str) -> Callable[[BindingState, BindingState], bool]:
            return lambda i, c: not _differs(i, c, facets)

        def both_live(i: BindingState, c: BindingState) -> bool:
            return not i.head.tombstone and not c.head.tombstone

        def delete_or_save(i: BindingState, c: BindingState) -> bool:
            if c.head.generation == 0:  # a fence: only a first save may follow
                return c.head.tombstone and not i.head.tombstone
            return c.head.tombstone != i.head.tombstone and same("binding", "policyEpoch")(i, c)

        return {
            # a listing change: the head, binding and policy all kept, the listing moved on
            (0, 0): (same("tombstone", "valueRef", "binding", "policyEpoch"),
                     lambda i, c: i.listing_generation > c.listing_generation),
            (0, 1): (both_live, same("binding", "policyEpoch")),  # a live rotation
            (1, 0): (both_live, same("valueRef")),  # an approval or epoch upgrade
            (1, 1): (delete_or_save,),  # delete/removal, save after delete, first save on a fence
        }

    def _withholding(self) -> tuple[Callable[[BindingState, tuple[int, ...]], Optional[str]], ...]:
        """The withholding rules in the seed's order: each gives a reason, or None when it does not apply."""
        return (
            (lambda s, kept: WithheldReason.TOMBSTONE.value if s.head.tombstone else None),
            (lambda s, kept: WithheldReason.POLICY_EPOCH_UNKNOWN.value
             if s.policy_epoch is None or s.policy_epoch not in kept else None),
            (lambda s, kept: WithheldReason.BINDING_OMITS.value if isinstance(s.binding, BindOmit) else None),
            (lambda s, kept: s.binding.reason if isinstance(s.binding, BindWithhold) else None),
        )

    def desired(self, state: BindingState, epochs: tuple[int, ...]) -> Materialization:
        """``desiredMaterialization``: withheld by the first rule that applies, else pending a fetch."""
        for rule in self._withholding():
            reason = rule(state, epochs)
            if reason is not None:
                return withheld(reason)
        return unavailable(UnavailableReason.MATERIALIZATION_PENDING)

    def awaits_fetch(self, state: BindingState, mat: Materialization, epochs: tuple[int, ...]) -> bool:
        """``retainedExisting``'s fetch: a live head, not installed, and a value it may have."""
        return (not state.head.tombstone and mat.kind is not MatKind.INSTALLED
                and self.desired(state, epochs).kind is MatKind.UNAVAILABLE)

    def retention(self, view: View, stored: Union[LiveRecord, StagedRecord, None], incoming: BindingState,
                  epochs: tuple[int, ...], *, rejudge_retained: bool = False) -> Retention:
        """What retaining ``incoming`` over the row ``stored`` (or none) does.

        ``retainStageState`` (``View.STAGE``) and ``retainLiveState``
        (``View.LIVE``). An older or conflicting incoming record leaves the
        stored one in place: a staged row is re-marked present (and, given
        ``rejudge_retained``, re-judged under ``epochs``: the ``fixed``
        variant's FIX(F2)); a live row is not written. The same record keeps
        an installed value unless it must now be withheld. Anything else
        (a newer record, or none stored) replaces the row with ``incoming``
        as it is desired now.
        """
        order = None if stored is None else self.order(incoming, stored.state)
        if stored is not None and order in (Order.OLDER, Order.CONFLICT):  # (an order only when one is stored)
            mat, drop = stored.mat, False
            if rejudge_retained:
                judged = self.desired(stored.state, epochs)
                if judged.kind is MatKind.WITHHELD:
                    mat, drop = judged, True
            return Retention(stored.state, mat, view is View.STAGE, drop,
                             self.awaits_fetch(stored.state, mat, epochs))
        if stored is not None and order is Order.SAME:
            judged = self.desired(stored.state, epochs)
            keeps_value = stored.mat.kind is MatKind.INSTALLED and judged.kind is not MatKind.WITHHELD
            mat = stored.mat if keeps_value else judged
            return Retention(stored.state, mat, view is View.STAGE or not keeps_value, not keeps_value,
                             mat.kind is MatKind.UNAVAILABLE)
        judged = self.desired(incoming, epochs)
        return Retention(incoming, judged, True, True, judged.kind is MatKind.UNAVAILABLE)

    # -- the acknowledgement bound -----------------------------------------------

    #: The longest reason a result can carry (``MAX_REASON``).
    LONGEST_REASON = "x" * 64

    def ack_fits(self, limit: int, frame: PageFrame, states: Sequence[BindingState], epochs: tuple[int, ...],
                 applied: Cursor) -> bool:
        """``pageFits``: the page's acknowledgement, every result with the longest reason, fits ``limit``."""
        results = [
            {"state": wire.encode(state),
             "materialization": {"kind": "withheld" if state.head.tombstone else "unavailable",
                                 "reason": self.LONGEST_REASON}}
            for state in states
        ]
        ack = {
            "kind": "env.replica.ack", "opId": frame.op_id, "ok": True, "phase": "page",
            "attemptId": frame.attempt_id, "projectId": frame.project_id, "after": frame.after,
            "recordVersion": frame.record_version, "results": results, "complete": frame.complete,
            "policyEpochs": list(epochs),
            "appliedThrough": {"streamId": applied.stream_id, "sequence": applied.sequence},
        }
        return wire.json_bytes_len(ack) <= limit

    # -- value-store reads (``readMaterializedValue``) ----------------------------

    def plan_read(self, prefix: str, project_id: str, state: BindingState,
                  store_on: bool) -> Union[StoreRead, Fetched]:
        """Everything before the seed's ``await``: a read to make, or the answer without one."""
        ref = state.head.value_ref
        if state.head.tombstone or ref is None:
            return Fetched(None, UnavailableReason.TOMBSTONE)
        if not store_on:
            return Fetched(None, UnavailableReason.CREDENTIAL_STORE_UNAVAILABLE)
        if isinstance(ref, StagedRef):
            try:
                return StoreRead(ref, staged_parameter_name(prefix, project_id, state.key, ref.staging_id))
            except ValueError:  # thrown inside the seed's try
                return Fetched(None, UnavailableReason.VALUE_UNAVAILABLE)
        name = legacy_parameter_name(prefix, project_id, state.key)
        if name is None:
            return Fetched(None, UnavailableReason.VALUE_REFERENCE_INVALID)
        return StoreRead(ref, name)

    def judge_answer(self, org_id: str, project_id: str, state: BindingState, read: StoreRead,
                     answer: StoreAnswer) -> Fetched:
        """Everything after the seed's ``await``: what the store's answer means."""
        if isinstance(answer, ReadFailed):
            return Fetched(None, UnavailableReason.VALUE_UNAVAILABLE)
        if isinstance(answer, NotFound):
            return Fetched(None, UnavailableReason.VALUE_MISSING)
        try:
            if isinstance(read.ref, StagedRef):
                return self._staged_envelope(org_id, project_id, state, read.ref, answer.raw)
            return self._legacy_envelope(project_id, state, read.ref, answer)
        except (ValueError, RecursionError, _Unparsable):  # the seed's catch: any throw
            return Fetched(None, UnavailableReason.VALUE_UNAVAILABLE)

    def _staged_envelope(self, org_id: str, project_id: str, state: BindingState, ref: StagedRef,
                         raw: str) -> Fetched:
        envelope = _js_json(raw)
        expected = {"kind": "project-env", "orgId": org_id, "projectId": project_id, "key": state.key,
                    "stagingId": ref.staging_id}
        if (type(envelope) is not dict or envelope.keys() != _STAGED_ENVELOPE
                or not _is_number(envelope["v"], 2)
                or any(type(envelope[k]) is not str or envelope[k] != v for k, v in expected.items())
                or type(envelope["value"]) is not str):
            return Fetched(None, UnavailableReason.VALUE_ENVELOPE_MISMATCH)
        return Fetched(envelope["value"], None)

    def _legacy_envelope(self, project_id: str, state: BindingState, ref: LegacyRef,
                         answer: Answered) -> Fetched:
        reported = ref.ssm_version if answer.version is None else answer.version
        if reported != ref.ssm_version:  # checked before the text is parsed, as in the seed
            return Fetched(None, UnavailableReason.VALUE_VERSION_MISMATCH)
        envelope = _stored_project_env(answer.raw)
        if envelope["projectId"] != project_id or envelope["key"] != state.key:
            return Fetched(None, UnavailableReason.VALUE_ENVELOPE_MISMATCH)
        return Fetched(envelope["value"], None)


#: The decisions every ``SqliteReplica`` makes (a test may give a replica class another instance).
DECISIONS = Decisions()
