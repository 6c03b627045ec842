/**
 * Canonical JSON and the receipt MAC (docs/protocol.md section 2.1).
 *
 * @module
 */

import { createHmac } from "node:crypto";

import type { Host } from "../kit/replica.js";
import { masterKey } from "./sealing.js";

function canonical(value: unknown, key: string): string | undefined {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON(key: string): unknown }).toJSON(key);
  }
  if (value === null || typeof value !== "object") return JSON.stringify(value) as string | undefined;
  if (Array.isArray(value)) return `[${value.map((item, i) => canonical(item, String(i)) ?? "null").join(",")}]`;
  const object = value as Record<string, unknown>;
  const members: string[] = [];
  for (const name of Object.keys(object).sort()) {
    const text = canonical(object[name], name);
    if (text !== undefined) members.push(`${JSON.stringify(name)}:${text}`);
  }
  return `{${members.join(",")}}`;
}

/**
 * Canonical JSON as docs/protocol.md section 2.1 writes it: object keys sorted at every level (JavaScript's
 * `Array.prototype.sort` order, byte order for ASCII keys), no whitespace, scalars as `JSON.stringify` writes them
 * (a key whose value is `undefined` is left out, as `JSON.stringify` does). The seed's `exactJson` writes the same
 * text for every frame. Throws a `TypeError` for `undefined` itself, and for a `bigint` anywhere.
 */
export function canonicalJson(value: unknown): string {
  const text = canonical(value, "");
  if (text === undefined) throw new TypeError("canonicalJson: the value has no JSON text (undefined, a function)");
  return text;
}

/**
 * HMAC-SHA256, lowercase hex, keyed by the master key, over `domain` then `canonicalJson(value)` (both UTF-8): a
 * receipt's `requestMac` (docs/protocol.md section 2.1). The seed's domain is
 * `"uai.project_env.replica_receipt.v1\0"` and its value the delivery's five covered keys (`kind`, `projectId`,
 * `recordVersion`, `state`, `delivery`). The same under one key for equal values; another under another key.
 */
export function mac(host: Host, domain: string, value: unknown): string {
  return createHmac("sha256", masterKey(host)).update(domain, "utf8").update(canonicalJson(value), "utf8").digest("hex");
}
