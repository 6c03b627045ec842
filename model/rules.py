"""The seed's pure record rules: state ordering, reachable advances, desired materialization.

Models: ``stateOrder``, ``isReachableRecordAdvance`` and
``desiredMaterialization`` of ``project-env-replica.ts``, line for line, over
typed values (``exactJson`` equality is dataclass equality here: every field
is typed, so no two distinct JSON values compare equal).

Leaves out on purpose: nothing of these functions; they touch no storage.
"""

from __future__ import annotations

import enum
from typing import Optional

from envreplica.spec.domain import (
    BindingState,
    BindOmit,
    BindWithhold,
    Head,
    Materialization,
    UnavailableReason,
    WithheldReason,
    unavailable,
    withheld,
)


class Order(str, enum.Enum):
    """``StateOrder``: how an incoming record relates to the stored one."""

    SAME = "same"
    NEWER = "newer"
    OLDER = "older"
    CONFLICT = "conflict"


def same_head(a: Head, b: Head) -> bool:
    """``sameProjectEnvHead``: the heads are identical."""
    return a == b


def state_order(incoming: BindingState, current: BindingState) -> Order:
    """``stateOrder`` of the seed."""
    ih, ch = incoming.head, current.head
    rd = ih.revision - ch.revision
    gd = ih.generation - ch.generation
    if rd < 0 and gd <= 0:
        return Order.OLDER
    if gd < 0 and rd <= 0:
        return Order.OLDER
    if rd < 0 or gd < 0:
        return Order.CONFLICT
    if rd == 0 and gd == 0:
        if not same_head(ih, ch):
            return Order.CONFLICT
        if incoming.binding != current.binding or incoming.policy_epoch != current.policy_epoch:
            return Order.CONFLICT
        if incoming.listing_generation < current.listing_generation:
            return Order.OLDER
        if incoming.listing_generation == current.listing_generation:
            return Order.SAME if incoming == current else Order.CONFLICT
        return Order.NEWER
    if incoming.listing_generation < current.listing_generation:
        return Order.CONFLICT
    # One counter staying put constrains the fields that counter protects.
    if rd == 0 and (
        ih.tombstone != ch.tombstone
        or incoming.binding != current.binding
        or incoming.policy_epoch != current.policy_epoch
    ):
        return Order.CONFLICT
    if gd == 0 and (ih.tombstone != ch.tombstone or ih.value_ref != ch.value_ref):
        return Order.CONFLICT
    return Order.NEWER


def is_reachable_record_advance(incoming: BindingState, current: Optional[BindingState]) -> bool:
    """``isReachableRecordAdvance``: one record-version step performs exactly one head move."""
    ih = incoming.head
    if current is None:
        return (ih.revision == 1 and ih.generation == 1 and not ih.tombstone) or (
            ih.revision == 1 and ih.generation == 0 and ih.tombstone
        )
    ch = current.head
    revision = ih.revision - ch.revision
    generation = ih.generation - ch.generation
    if incoming.listing_generation < current.listing_generation:
        return False
    if revision == 0 and generation == 0:
        return (
            same_head(ih, ch)
            and incoming.binding == current.binding
            and incoming.policy_epoch == current.policy_epoch
            and incoming.listing_generation > current.listing_generation
        )
    # A live rotation moves only generation. Policy and binding are retained.
    if revision == 0 and generation == 1:
        return (
            not ch.tombstone
            and not ih.tombstone
            and incoming.binding == current.binding
            and incoming.policy_epoch == current.policy_epoch
        )
    # Approve / epoch upgrade moves only revision and retains the value ref.
    if revision == 1 and generation == 0:
        return not ch.tombstone and not ih.tombstone and ih.value_ref == ch.value_ref
    # Delete/removal, save-after-delete and first-save-on-fence move both.
    if revision == 1 and generation == 1:
        if ch.generation == 0:
            return ch.tombstone and not ih.tombstone
        return (
            ch.tombstone != ih.tombstone
            and incoming.binding == current.binding
            and incoming.policy_epoch == current.policy_epoch
        )
    return False


PENDING = unavailable(UnavailableReason.MATERIALIZATION_PENDING)


def desired_materialization(state: BindingState, epochs: tuple[int, ...]) -> Materialization:
    """``desiredMaterialization``: withheld for a reason, or pending a fetch."""
    if state.head.tombstone:
        return withheld(WithheldReason.TOMBSTONE)
    if state.policy_epoch is None or state.policy_epoch not in epochs:
        return withheld(WithheldReason.POLICY_EPOCH_UNKNOWN)
    if isinstance(state.binding, BindOmit):
        return withheld(WithheldReason.BINDING_OMITS)
    if isinstance(state.binding, BindWithhold):
        return withheld(state.binding.reason)
    return PENDING
