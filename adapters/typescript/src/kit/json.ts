/**
 * Request lines in, response lines out, with the contract's JSON rules (docs/protocol.md sections 5 and 7).
 *
 * `JSON.parse` alone cannot tell `1.0` or `1e2` from `1`, and rounds integers past 2^53. The contract can: a Count
 * is an integer literal, and an id beyond 2^53 is echoed exactly. So a line whose numbers are all safe integer
 * literals (almost every line) goes straight to `JSON.parse`; any other number is first replaced by a string
 * sentinel and revived as a `JsonFloat` (a literal with a fraction or exponent) or a `bigint` (an integer literal
 * past 2^53 - 1), which no validator takes for a Count. Everything else is `JSON.parse`'s own grammar: a blank
 * line, a byte-order mark, NaN, a raw control character or trailing data is not JSON, and a repeated key keeps
 * its last value.
 */

/** A JSON number written with a fraction or an exponent: never a Count, whatever its value. */
export class JsonFloat {
  constructor(readonly literal: string) {}
  toJSON(): number {
    return Number(this.literal);
  }
}

/** A decoded line: a JSON value, or why the line is not one. */
export type Decoded = { ok: true; value: unknown } | { ok: false; reason: string };

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;
const INTEGER = /^-?(?:0|[1-9][0-9]*)$/;
const SENTINEL = `\u0000envreplica-number-${process.pid}-${Date.now()}:`;

/** The text of one number token if it needs more than `JSON.parse`, else null. */
function special(token: string): boolean {
  if (!NUMBER.test(token)) return false; // not a JSON number: JSON.parse reports the line
  return !INTEGER.test(token) || !Number.isSafeInteger(Number(token));
}

/** The line with each special number replaced by a sentinel string, or null when it has none. */
function withSentinels(text: string): string | null {
  let out = "";
  let last = 0;
  let changed = false;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // a string: skip to its closing quote, over escapes
      i += 1;
      while (i < n && text.charCodeAt(i) !== 0x22) i += text.charCodeAt(i) === 0x5c ? 2 : 1;
      i += 1;
      continue;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      let j = i + 1;
      while (j < n && /[0-9eE.+-]/.test(text[j]!)) j += 1;
      const token = text.slice(i, j);
      if (special(token)) {
        out += text.slice(last, i) + JSON.stringify(SENTINEL + token);
        last = j;
        changed = true;
      }
      i = j;
      continue;
    }
    i += 1;
  }
  return changed ? out + text.slice(last) : null;
}

function revive(_key: string, value: unknown): unknown {
  if (typeof value === "string" && value.startsWith(SENTINEL)) {
    const token = value.slice(SENTINEL.length);
    return INTEGER.test(token) ? BigInt(token) : new JsonFloat(token);
  }
  return value;
}

/** One request line (its bytes, without the newline; one trailing `\r` is dropped) as a JSON value. */
export function decodeLine(bytes: Uint8Array): Decoded {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { ok: false, reason: "it is not UTF-8" };
  }
  if (text.endsWith("\r")) text = text.slice(0, -1);
  try {
    const rewritten = withSentinels(text);
    return { ok: true, value: rewritten === null ? JSON.parse(text) : JSON.parse(rewritten, revive) };
  } catch (error) {
    if (error instanceof RangeError) {
      return { ok: false, reason: "it nests arrays or objects deeper than this adapter's JSON reader goes" };
    }
    return { ok: false, reason: "it is not a JSON value" };
  }
}

/** Whether a decoded value is a JSON integer literal (a safe one, or one past 2^53 kept as a bigint). */
export function isIntegerLiteral(value: unknown): value is number | bigint {
  return (typeof value === "number" && Number.isInteger(value)) || typeof value === "bigint";
}

const BIGINT_OUT = new RegExp(`"${JSON.stringify(SENTINEL).slice(1, -1).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(-?[0-9]+)"`, "g");

/** A response as one line of JSON (a bigint, an id past 2^53, written exactly). */
export function encodeLine(response: unknown): string {
  let big = false;
  const text = JSON.stringify(response, (_key, value: unknown) => {
    if (typeof value !== "bigint") return value;
    big = true;
    return SENTINEL + value.toString();
  });
  return big ? text.replace(BIGINT_OUT, "$1") : text;
}

/** What an error message may say of a value that must not be echoed: its JSON type and size only. */
export function unshown(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return "a boolean";
  if (typeof value === "number" || typeof value === "bigint" || value instanceof JsonFloat) {
    return "a number (not shown)";
  }
  if (typeof value === "string") return `a string of ${value.length} characters (not shown)`;
  if (Array.isArray(value)) return `an array of ${value.length} items (not shown)`;
  if (typeof value === "object") return `an object of ${Object.keys(value).length} keys (not shown)`;
  return `a ${typeof value} (not shown)`;
}
