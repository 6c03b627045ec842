/**
 * Where the kit keeps what it compiles and what it has type-checked: `ENVREPLICA_KIT_CACHE` when set; else
 * `node_modules/.cache/envreplica-kit` (the kit's own `node_modules` in a checkout; the `node_modules` the kit is
 * installed in otherwise); else, when that is not writable (a global install), a directory under the system's
 * temporary directory. Nothing in it is needed twice: removing it costs one type-check.
 */

import { accessSync, constants, mkdirSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** The kit's root directory (where its package.json is): two levels above this module (`dist/kit/`, `src/kit/`). */
export const KIT_ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

let chosen: string | null = null;

function writable(dir: string): boolean {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

function user(): string {
  try {
    return String(userInfo().uid >= 0 ? userInfo().uid : userInfo().username);
  } catch {
    return "user";
  }
}

/** The kit's cache directory (created). */
export function cacheDir(): string {
  if (chosen !== null) return chosen;
  const named = process.env["ENVREPLICA_KIT_CACHE"];
  const marker = `${sep}node_modules${sep}`;
  const at = KIT_ROOT.lastIndexOf(marker);
  const preferred = named !== undefined && named !== ""
    ? named
    : at >= 0
      ? join(KIT_ROOT.slice(0, at + marker.length), ".cache", "envreplica-kit")
      : join(KIT_ROOT, "node_modules", ".cache", "envreplica-kit");
  const fallback = join(tmpdir(), `envreplica-kit-cache-${user()}`);
  chosen = writable(preferred) ? preferred : fallback;
  mkdirSync(chosen, { recursive: true });
  return chosen;
}
