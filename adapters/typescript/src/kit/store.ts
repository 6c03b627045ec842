/**
 * The adapter's embedded value store (docs/protocol.md section 4 and the `store.*` ops of section 5).
 *
 * It answers a read by parameter name (and, for a legacy parameter, the version asked): the text a `store.put`
 * gave (a legacy read reports `reportedVersion`, by default the version asked), nothing (`store.fail` "missing", or
 * never put), or an exception (`store.fail` "error"). Names are the contract's, so a replica that computes another
 * name finds nothing.
 */

import { createHash } from "node:crypto";

/** A staged or legacy value reference, as the wire writes it. */
export type Ref = { kind: "staged"; stagingId: string } | { kind: "legacy"; ssmVersion: number };

/** What a read of one name (and version) answers. */
export type Answer =
  | { kind: "found"; raw: string; reportedVersion: number | null }
  | { kind: "missing" }
  | { kind: "error" };

/** `{prefix}/projects/{projectId}/env-values/{sha256_hex(key)}/{stagingId}`. */
export function stagedParameterName(prefix: string, projectId: string, key: string, stagingId: string): string {
  const digest = createHash("sha256").update(key, "utf8").digest("hex");
  return `${prefix}/projects/${projectId}/env-values/${digest}/${stagingId}`;
}

/** `{prefix}/projects/{projectId}/env/{key}` (the contract admits a legacy ref only for a key that is a Segment). */
export function legacyParameterName(prefix: string, projectId: string, key: string): string {
  return `${prefix}/projects/${projectId}/env/${key}`;
}

/** The read failure `store.fail` "error" stands for (a network failure, throttling, a decryption error). */
export class ValueStoreError extends Error {}

export class EmbeddedStore {
  private readonly answers = new Map<string, Answer>();

  private static slot(name: string, version: number | null): string {
    return version === null ? `s\u0000${name}` : `l\u0000${name}\u0000${version}`;
  }

  /** The name and version of what `ref` reads for (projectId, key). */
  static target(prefix: string, projectId: string, key: string, ref: Ref): { name: string; version: number | null } {
    return ref.kind === "staged"
      ? { name: stagedParameterName(prefix, projectId, key, ref.stagingId), version: null }
      : { name: legacyParameterName(prefix, projectId, key), version: ref.ssmVersion };
  }

  set(name: string, version: number | null, answer: Answer): void {
    this.answers.set(EmbeddedStore.slot(name, version), answer);
  }

  /** What a read of `name` (at `version` for a legacy read) answers: looked up when the read begins. */
  lookup(name: string, version: number | null): Answer {
    return this.answers.get(EmbeddedStore.slot(name, version)) ?? { kind: "missing" };
  }

  clear(): void {
    this.answers.clear();
  }
}

/** An answer as the seed's `ProjectEnvReplicaValueReader` gives it (a staged read). */
export function stagedText(answer: Answer): string | null {
  if (answer.kind === "error") throw new ValueStoreError("the value store failed this read (store.fail error)");
  return answer.kind === "found" ? answer.raw : null;
}

/** An answer as the seed's `ProjectEnvReplicaValueReader` gives it (a legacy read at `version`). */
export function legacyText(answer: Answer, version: number): { value: string; version: number } | null {
  if (answer.kind === "error") throw new ValueStoreError("the value store failed this read (store.fail error)");
  return answer.kind === "found" ? { value: answer.raw, version: answer.reportedVersion ?? version } : null;
}
