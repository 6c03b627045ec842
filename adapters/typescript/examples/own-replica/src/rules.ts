/**
 * The record rules of docs/protocol.md section 10.2, as pure functions over the contract's types: how an incoming
 * record relates to the stored one (`stateOrder`), whether one record-version step can make that move
 * (`isReachableAdvance`), and what the replica should make of a record under the kept policy epochs (`desired`).
 * Equality is field by field, through canonical JSON.
 */

import type { BindingState, Head, Materialization } from "@envreplica/adapter-kit";
import { canonicalJson } from "@envreplica/adapter-kit/host";

export type Order = "same" | "newer" | "older" | "conflict";

/** A record with exactly the contract's fields (a frame's object, or one read back from a row). */
export function normalState(s: BindingState): BindingState {
  const head: Head = s.head.tombstone
    ? { revision: s.head.revision, generation: s.head.generation, tombstone: true, valueRef: null }
    : { revision: s.head.revision, generation: s.head.generation, tombstone: false, valueRef: s.head.valueRef };
  return { key: s.key, head, binding: s.binding, policyEpoch: s.policyEpoch, listingGeneration: s.listingGeneration };
}

const same = (a: unknown, b: unknown): boolean => canonicalJson(a) === canonicalJson(b);

/** The seed's `stateOrder(incoming, current)`. */
export function stateOrder(incoming: BindingState, current: BindingState): Order {
  const ih = incoming.head;
  const ch = current.head;
  const rd = ih.revision - ch.revision;
  const gd = ih.generation - ch.generation;
  if ((rd < 0 && gd <= 0) || (gd < 0 && rd <= 0)) return "older";
  if (rd < 0 || gd < 0) return "conflict";
  const sameBinding = same(incoming.binding, current.binding) && incoming.policyEpoch === current.policyEpoch;
  if (rd === 0 && gd === 0) {
    if (!same(ih, ch) || !sameBinding) return "conflict";
    if (incoming.listingGeneration < current.listingGeneration) return "older";
    if (incoming.listingGeneration === current.listingGeneration) return same(incoming, current) ? "same" : "conflict";
    return "newer";
  }
  if (incoming.listingGeneration < current.listingGeneration) return "conflict";
  if (rd === 0 && (ih.tombstone !== ch.tombstone || !sameBinding)) return "conflict";
  if (gd === 0 && (ih.tombstone !== ch.tombstone || !same(ih.valueRef, ch.valueRef))) return "conflict";
  return "newer";
}

/** The seed's `isReachableRecordAdvance(incoming, current)`: one version step is exactly one head move. */
export function isReachableAdvance(incoming: BindingState, current: BindingState | null): boolean {
  const ih = incoming.head;
  if (current === null) {
    return ih.revision === 1 && (ih.generation === 1 ? !ih.tombstone : ih.generation === 0 && ih.tombstone);
  }
  const ch = current.head;
  const rd = ih.revision - ch.revision;
  const gd = ih.generation - ch.generation;
  if (incoming.listingGeneration < current.listingGeneration) return false;
  const sameBinding = same(incoming.binding, current.binding) && incoming.policyEpoch === current.policyEpoch;
  if (rd === 0 && gd === 0) return same(ih, ch) && sameBinding && incoming.listingGeneration > current.listingGeneration;
  if (rd === 0 && gd === 1) return !ch.tombstone && !ih.tombstone && sameBinding; // a rotation
  if (rd === 1 && gd === 0) return !ch.tombstone && !ih.tombstone && same(ih.valueRef, ch.valueRef); // an approve
  if (rd === 1 && gd === 1) {
    // a delete, a save after a delete, a first save on a fence
    if (ch.generation === 0) return ch.tombstone && !ih.tombstone;
    return ch.tombstone !== ih.tombstone && sameBinding;
  }
  return false;
}

export const PENDING: Materialization = { kind: "unavailable", reason: "materialization_pending" };

/** The seed's `desiredMaterialization(state, keptEpochs)`: withheld for a reason, or pending a fetch. */
export function desired(state: BindingState, epochs: readonly number[]): Materialization {
  if (state.head.tombstone) return { kind: "withheld", reason: "tombstone" };
  if (state.policyEpoch === null || !epochs.includes(state.policyEpoch)) {
    return { kind: "withheld", reason: "policy_epoch_unknown" };
  }
  if (state.binding !== null) {
    return { kind: "withheld", reason: state.binding.kind === "omit" ? "binding_omits" : state.binding.reason };
  }
  return PENDING;
}

/** Whether a stored row still waits for a value: not a tombstone, not installed, and desired pending. */
export function wantsFetch(state: BindingState, mat: Materialization, epochs: readonly number[]): boolean {
  return !state.head.tombstone && mat.kind !== "installed" && desired(state, epochs).kind === "unavailable";
}

export { same as sameJson };
