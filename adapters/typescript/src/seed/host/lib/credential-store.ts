/**
 * The seed's `./credential-store`: the host's credential store (AWS SSM in production) and its parameter names.
 * Here the store is the adapter's embedded value store (`store.put`, `store.fail`; none after `store.off`), read
 * through the kit's reader of the operation that starts, so that a request's `duringFetch` runs inside the read.
 */

import { host } from "../runtime.js";

/** A parameter path segment: the contract's Segment. */
const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export interface CredentialStore {
  get(name: string): Promise<string | null>;
  getVersion?(name: string, version: number): Promise<{ value: string; version: number } | null>;
}

/** The store an operation starting now reads through, or null when there is none (`store.off`). */
export function configuredCredentialStore(): CredentialStore | null {
  const reader = host().valueReader();
  if (reader === null) return null;
  return {
    get: (name) => reader.readStaged(name),
    getVersion: (name, version) => reader.readLegacy(name, version),
  };
}

/** The prefix of every parameter name (`config.prefix` of the last `reset`; default `/envreplica`). */
export function credentialStorePrefix(): string {
  return host().config().prefix;
}

export function isParameterPathSegment(value: unknown): value is string {
  return typeof value === "string" && SEGMENT.test(value);
}

/** A parameter name: the prefix, then each segment, joined by "/". */
export function parameterName(prefix: string, ...segments: string[]): string {
  return [prefix, ...segments].join("/");
}
