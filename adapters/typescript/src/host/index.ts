/**
 * `@envreplica/adapter-kit/host`: the test host a replica under the kit is built on, so that a team writes only its
 * replica. Everything here is what the kit's own stand-ins for the seed's host use (`--source`):
 *
 * - `openDatabase`: the replica's SQLite file, write transactions counted for `crashAfterCommit`, `reopen` (a
 *   crash) and `empty` (a `reset`);
 * - `masterKey`, `seal`, `open`, `SealedValueError`: values at rest (AES-256-GCM, exact text: F3 fixed);
 * - `canonicalJson`, `mac`: a receipt's `requestMac` (docs/protocol.md section 2.1);
 * - `stagedParameterName`, `legacyParameterName`, `ValueStoreError`: the value store (section 4);
 * - `InvalidInputError`, `CorruptReplicaError`, `errorKind`: the errors the kit answers `invalid` and `corrupt`;
 * - `checkBegin`, `checkPage`, `checkDelivery`, `checkCommit`, `checkProjectIds`: frame checks (the schema plus
 *   section 8), throwing `InvalidInputError`.
 *
 * ```ts
 * import type { Host, Replica } from "@envreplica/adapter-kit";
 * import { checkPage, openDatabase, seal } from "@envreplica/adapter-kit/host";
 * ```
 *
 * @module
 */

export { openDatabase, type DatabaseOptions, type TestDatabase } from "./database.js";
export { masterKey, open, seal, SealedValueError } from "./sealing.js";
export { canonicalJson, mac } from "./canonical.js";
export { CorruptReplicaError, errorKind, InvalidInputError } from "./errors.js";
export { checkBegin, checkCommit, checkDelivery, checkPage, checkProjectIds, conforms } from "./frames.js";
export type { ErrorKind } from "../kit/replica.js";
/** The reader's failure: a read that threw (store.fail "error"). Re-export of the kit's ValueStoreError. */
export { legacyParameterName, stagedParameterName, ValueStoreError } from "../kit/store.js";
