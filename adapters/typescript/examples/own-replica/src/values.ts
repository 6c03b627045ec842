/**
 * Reading a record's value from the value store (docs/protocol.md section 4.1), through the reader the operation
 * was given. Rules 1 to 3 answer at once, without a read; rule 4 is the one real read (the `await` window where
 * anything may happen: `duringFetch` runs there); rules 5 to 9 judge the answer.
 */

import type { BindingState, ValueReader } from "@envreplica/adapter-kit";
import { legacyParameterName, stagedParameterName } from "@envreplica/adapter-kit/host";

/** What a read brought: the value, or why the record stays unavailable. */
export type Fetched = { value: string } | { reason: string };

const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

function exactObject(value: unknown, keys: readonly string[]): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const own = Object.keys(value);
  return own.length === keys.length && keys.every((k) => Object.prototype.hasOwnProperty.call(value, k));
}

const STAGED_KEYS = ["v", "kind", "orgId", "projectId", "key", "stagingId", "value"] as const;
const LEGACY_KEYS = ["v", "kind", "projectId", "key", "value"] as const;

/** Read the value of `state` (a record of `projectId`) for organisation `orgId`. */
export async function fetchValue(
  reader: ValueReader | null,
  prefix: string,
  projectId: string,
  orgId: string,
  state: BindingState,
): Promise<Fetched> {
  const head = state.head;
  if (head.tombstone) return { reason: "tombstone" };
  if (reader === null) return { reason: "credential_store_unavailable" };
  const ref = head.valueRef;
  if (ref.kind === "staged") {
    let raw: string | null;
    try {
      raw = await reader.readStaged(stagedParameterName(prefix, projectId, state.key, ref.stagingId));
    } catch {
      return { reason: "value_unavailable" };
    }
    if (raw === null) return { reason: "value_missing" };
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      return { reason: "value_unavailable" };
    }
    if (
      !exactObject(parsed, STAGED_KEYS) ||
      parsed["v"] !== 2 ||
      parsed["kind"] !== "project-env" ||
      parsed["orgId"] !== orgId ||
      parsed["projectId"] !== projectId ||
      parsed["key"] !== state.key ||
      parsed["stagingId"] !== ref.stagingId ||
      typeof parsed["value"] !== "string"
    ) {
      return { reason: "value_envelope_mismatch" };
    }
    return { value: parsed["value"] };
  }
  if (!SEGMENT.test(state.key)) return { reason: "value_reference_invalid" };
  let found: { value: string; version: number } | null;
  try {
    found = await reader.readLegacy(legacyParameterName(prefix, projectId, state.key), ref.ssmVersion);
  } catch {
    return { reason: "value_unavailable" };
  }
  if (found === null) return { reason: "value_missing" };
  if (found.version !== ref.ssmVersion) return { reason: "value_version_mismatch" };
  let parsed: unknown;
  try {
    parsed = JSON.parse(found.value);
  } catch {
    return { reason: "value_unavailable" };
  }
  if (
    !exactObject(parsed, LEGACY_KEYS) ||
    parsed["v"] !== 1 ||
    parsed["kind"] !== "project-env" ||
    typeof parsed["projectId"] !== "string" ||
    typeof parsed["key"] !== "string" ||
    typeof parsed["value"] !== "string"
  ) {
    return { reason: "value_unavailable" };
  }
  if (parsed["projectId"] !== projectId || parsed["key"] !== state.key) return { reason: "value_envelope_mismatch" };
  return { value: parsed["value"] };
}
