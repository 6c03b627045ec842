/**
 * Values at rest: the master key, and sealing under it.
 *
 * A sealed value is AES-256-GCM under a subkey of the master key (HKDF-SHA256, info
 * `envreplica kit: values at rest v1`), with a random 96-bit nonce, written as text:
 * `TAG.NONCE.CIPHERTEXT.AUTHTAG` (base64 fields). `seal` encrypts the string's UTF-16 code units exactly (tag
 * `v1-utf16le`), so opening gives back exactly the string sealed, a lone surrogate included. The seed's host
 * encrypts Node's UTF-8 instead (tag `v1`), which writes a lone surrogate as U+FFFD: finding F3. The kit keeps that
 * encoding for the seed's own file only (`--source`, `--sealing utf8`); `open` reads both.
 *
 * @module
 */

import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

import type { Host } from "../kit/replica.js";
import { CorruptReplicaError } from "./errors.js";

/**
 * A sealed value that does not open: not in the sealed format, sealed under another key, or changed since. It is a
 * `CorruptReplicaError`, so the kit's default `errorKind` answers it `corrupt`.
 */
export class SealedValueError extends CorruptReplicaError {
  constructor(message: string) {
    super(message);
    this.name = "SealedValueError";
  }
}

/**
 * The 32-byte master key values are sealed and receipts MACed under: the public test key unless a `reset` sent
 * `masterKeyHex`. Read at each call (a `reset` may change it).
 */
export function masterKey(host: Host): Buffer {
  return host.config().masterKey;
}

/** How a value's text becomes the bytes sealed: Node's UTF-8 (as the seed's host, F3), or its code units exactly. */
export type TextEncoding = "utf8" | "exact";

/** The stored format of each encoding (the first field of a sealed value). */
const FORMATS: Record<TextEncoding, { tag: string; encoding: BufferEncoding }> = {
  utf8: { tag: "v1", encoding: "utf8" },
  exact: { tag: "v1-utf16le", encoding: "utf16le" },
};

const INFO = "envreplica kit: values at rest v1";
let derived: { master: Buffer; key: Buffer } | null = null;

function subkey(master: Buffer): Buffer {
  if (derived === null || !derived.master.equals(master)) {
    derived = { master: Buffer.from(master), key: Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), INFO, 32)) };
  }
  return derived.key;
}

/**
 * `value` sealed under `master` with the text encoding `encoding` (the core of `seal`; the seed's host seals with
 * `"utf8"`).
 */
export function sealWith(master: Buffer, value: string, encoding: TextEncoding): string {
  const { tag, encoding: bytes } = FORMATS[encoding];
  const nonce = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", subkey(master), nonce);
  const sealed = Buffer.concat([cipher.update(value, bytes), cipher.final()]);
  return [tag, nonce.toString("base64"), sealed.toString("base64"), cipher.getAuthTag().toString("base64")].join(".");
}

/** The text `sealed` holds, opened under `master` (either encoding); throws `SealedValueError` if it does not open. */
export function openWith(master: Buffer, sealed: string): string {
  const parts = typeof sealed === "string" ? sealed.split(".") : [];
  const format = Object.values(FORMATS).find((f) => f.tag === parts[0]);
  if (parts.length !== 4 || format === undefined) throw new SealedValueError("a stored value is not a sealed value");
  const [, nonce, body, tag] = parts as [string, string, string, string];
  try {
    const decipher = createDecipheriv("aes-256-gcm", subkey(master), Buffer.from(nonce, "base64"));
    decipher.setAuthTag(Buffer.from(tag, "base64"));
    return Buffer.concat([decipher.update(Buffer.from(body, "base64")), decipher.final()]).toString(format.encoding);
  } catch {
    throw new SealedValueError("a stored value does not open under the master key (another key, or changed)");
  }
}

/**
 * `value` sealed for storage under the master key: AES-256-GCM under an HKDF-SHA256 subkey, a random 96-bit nonce,
 * as text. The string's UTF-16 code units are sealed exactly, so a lone surrogate survives (the seed's UTF-8 does
 * not: finding F3). Sealing the same value twice gives two different texts.
 */
export function seal(host: Host, value: string): string {
  return sealWith(masterKey(host), value, "exact");
}

/**
 * The value `sealed` holds, opened under the current master key. Throws `SealedValueError` (a
 * `CorruptReplicaError`) on a wrong key, tampering, or text that is not a sealed value.
 */
export function open(host: Host, sealed: string): string {
  return openWith(masterKey(host), sealed);
}
