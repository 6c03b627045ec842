/**
 * The errors the kit answers for you: throw `InvalidInputError` for a frame or argument that breaks the contract,
 * `CorruptReplicaError` for a stored replica that does not hold, and the kit's default `errorKind` (used when your
 * `Replica` has none) answers them `invalid` and `corrupt`.
 *
 * @module
 */

import type { ErrorKind } from "../kit/replica.js";

/**
 * The brand `errorKind` reads. A symbol from the global registry, so an error made by a second copy of this module
 * (an implementation that bundles the kit's sources) is still recognised.
 */
const KIND = Symbol.for("@envreplica/adapter-kit.errorKind");

function brand(error: Error, kind: ErrorKind): void {
  Object.defineProperty(error, KIND, { value: kind, enumerable: false });
}

/**
 * A frame or argument that breaks the contract (docs/protocol.md sections 1, 2 and 8): the kit answers it
 * `{"type": "invalid"}` with this message. Throw it before anything changes. The `check*` functions throw it with
 * the path and the rule broken (never the value).
 */
export class InvalidInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidInputError";
    brand(this, "invalid");
  }
}

/**
 * A stored replica that does not hold (a row, a set or a seal that does not verify): the kit answers it
 * `{"type": "corrupt"}` with this message. Roll back the transaction it happened in (`TestDatabase.write` and
 * `read` do).
 */
export class CorruptReplicaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CorruptReplicaError";
    brand(this, "corrupt");
  }
}

/**
 * The kit's default `Replica.errorKind`: `"invalid"` for an `InvalidInputError`, `"corrupt"` for a
 * `CorruptReplicaError` (or a subclass of either), `undefined` for anything else (a bug: the kit answers it
 * `unsupported` with "internal error" and the gate reports it).
 */
export function errorKind(error: unknown): ErrorKind | undefined {
  if (error === null || typeof error !== "object") return undefined;
  const kind = (error as Record<symbol, unknown>)[KIND];
  return kind === "invalid" || kind === "corrupt" ? kind : undefined;
}
