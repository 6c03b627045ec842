/**
 * The seed's `./host-env`: the task-environment change notifier, the legacy parameter name, and how a value is
 * sealed at rest.
 *
 * Sealing is AES-256-GCM under a subkey of the master key (HKDF-SHA256), a random 96-bit nonce per value, stored as
 * text. By default the text is encoded as the seed's host encodes it, Node's UTF-8 (`cipher.update(value, "utf8")`),
 * which writes each lone surrogate as U+FFFD: finding F3 (docs/findings.md). `setTextEncoding("exact")` (the kit's
 * `--sealing exact`) seals the string's UTF-16 code units instead, so that opening gives back exactly the string
 * sealed: the host with F3 fixed, for holding the seed's file alone to variant `fixed`.
 */

import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";

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

let sealing: { master: Buffer; key: Buffer } | null = null;

function sealingKey(): Buffer {
  const master = host().config().masterKey;
  if (sealing === null || !sealing.master.equals(master)) {
    sealing = { master, key: Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), "envreplica kit: values at rest v1", 32)) };
  }
  return sealing.key;
}

/** How a value's text becomes the bytes sealed: Node's UTF-8 (as the seed's host), or its code units exactly. */
export type TextEncoding = "utf8" | "exact";
/** The stored format of each encoding (the first field of a sealed value). */
const FORMATS: Record<TextEncoding, { tag: string; encoding: BufferEncoding }> = {
  utf8: { tag: "v1", encoding: "utf8" },
  exact: { tag: "v1-utf16le", encoding: "utf16le" },
};
let sealWith: TextEncoding = "utf8";

export function setTextEncoding(encoding: TextEncoding): void {
  sealWith = encoding;
}

export function sealProjectEnvValueForStorage(value: string): string {
  const { tag, encoding } = FORMATS[sealWith];
  const nonce = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", sealingKey(), nonce);
  const sealed = Buffer.concat([cipher.update(value, encoding), cipher.final()]);
  return [tag, nonce.toString("base64"), sealed.toString("base64"), cipher.getAuthTag().toString("base64")].join(".");
}

export function openProjectEnvValueFromStorage(stored: string): string {
  const parts = stored.split(".");
  const format = Object.values(FORMATS).find((f) => f.tag === parts[0]);
  if (parts.length !== 4 || format === undefined) throw new Error("a stored value is not a sealed value of this host");
  const [, nonce, sealed, tag] = parts as [string, string, string, string];
  const decipher = createDecipheriv("aes-256-gcm", sealingKey(), Buffer.from(nonce, "base64"));
  decipher.setAuthTag(Buffer.from(tag, "base64"));
  return Buffer.concat([decipher.update(Buffer.from(sealed, "base64")), decipher.final()]).toString(format.encoding);
}
