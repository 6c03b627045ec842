/**
 * What the seed's host modules share at run time: the kit's `Host` of this adapter process, and the operation's
 * count of transactions (for `crashAfterCommit`). `plug.ts` sets it; the modules beside it read it.
 */

import type { Host } from "../../kit/replica.js";

let current: Host | null = null;

/** The kit's host of this process (set once, by the plug, before any operation runs). */
export function host(): Host {
  if (current === null) throw new Error("the seed's host modules were used before the kit set them up (plug.ts)");
  return current;
}

export function setHost(value: Host): void {
  current = value;
}
