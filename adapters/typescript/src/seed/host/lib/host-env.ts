/**
 * The seed's `./host-env`: the task-environment change notifier, the legacy parameter name, and how a value is
 * sealed at rest.
 *
 * Sealing is the kit's host's (`seal` of `@envreplica/adapter-kit/host`): AES-256-GCM under a subkey of the master
 * key (HKDF-SHA256), a random 96-bit nonce per value, stored as text. By default the text is encoded as the seed's
 * host encodes it, Node's UTF-8 (`cipher.update(value, "utf8")`), which writes each lone surrogate as U+FFFD:
 * finding F3 (docs/findings.md). `setTextEncoding("exact")` (the kit's
 * `--sealing exact`) seals the string's UTF-16 code units instead, so that opening gives back exactly the string
 * sealed: the host with F3 fixed, for holding the seed's file alone to variant `fixed`.
 */

import { EventEmitter } from "node:events";

import { openWith, sealWith, type TextEncoding } from "../../../host/sealing.js";
import { host } from "../runtime.js";
import { credentialStorePrefix, isParameterPathSegment, parameterName } from "./credential-store.js";

const changes = new EventEmitter();
changes.setMaxListeners(0);
const CHANGE = "project-env-change";

/** A project's environment values changed (its snapshot may read differently). */
export function noteProjectEnvValueMutation(projectId: string): void {
  changes.emit(CHANGE, projectId);
}

/** The replica's authority (its gate) changed with no project to name. */
export function noteProjectEnvAuthorityChange(): void {
  changes.emit(CHANGE, null);
}

/** Call `listener` on every change; returns the unsubscribe function. */
export function onProjectEnvChange(listener: () => void): () => void {
  changes.on(CHANGE, listener);
  return () => {
    changes.off(CHANGE, listener);
  };
}

/** `{prefix}/projects/{projectId}/env/{key}`, or null when the key is not a parameter path segment. */
export function projectEnvParameterName(projectId: string, key: string): string | null {
  if (!isParameterPathSegment(projectId) || !isParameterPathSegment(key)) return null;
  return parameterName(credentialStorePrefix(), "projects", projectId, "env", key);
}

/** How a value's text becomes the bytes sealed: Node's UTF-8 (as the seed's host), or its code units exactly. */
export type { TextEncoding };
let sealWithEncoding: TextEncoding = "utf8";

export function setTextEncoding(encoding: TextEncoding): void {
  sealWithEncoding = encoding;
}

export function sealProjectEnvValueForStorage(value: string): string {
  return sealWith(host().config().masterKey, value, sealWithEncoding);
}

export function openProjectEnvValueFromStorage(stored: string): string {
  return openWith(host().config().masterKey, stored);
}
