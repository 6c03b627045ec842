/**
 * What an implementation gives the kit, and what the kit gives it.
 *
 * An implementation plugs in as a module that exports `createReplica(host: Host): Replica` (or a default export of
 * that function). `@envreplica/adapter-kit/host` has the test host to build it on (database, sealing, MACs, frame
 * checks, errors). The kit owns everything else of the adapter protocol (docs/protocol.md section 5): the JSON
 * lines, ids, request checks, `invalid` / `unsupported` answers, the value store and its `store.*` ops,
 * `duringFetch`, `restart`, `crashAfterCommit`, `ready`, `diagnostics`.
 */

import type {
  ApplyFrame,
  ApplyResult,
  BeginFrame,
  BeginResult,
  CommitFrame,
  CommitResult,
  PageFrame,
  PageResult,
  PolicyEpochs,
  Receipt,
  Snapshot,
  StateDocument,
  Status,
} from "./generated/contract.js";

export type MaybePromise<T> = T | Promise<T>;

/**
 * The contract's type `T` as a replica may write it: its shape, not its literal values. String and boolean literal
 * types are widened to `string` and `boolean`, and each union of object types is merged into one object type (a key
 * of every member required, a key of only some optional, each key's value the union of the members'), at any depth.
 *
 * The contract's types pin which literals go together: which refusal `code` goes with `consumed: true`, that an
 * installed snapshot entry has a string `value` and a withheld one `null`. The seed, like most implementations,
 * types its results by their fields (`code: string`, `replayed: boolean`, `value: string | null`), and a type
 * checker cannot prove those combinations from such types. They are a run-time matter and are checked at run time:
 * the harness compares every answer, as JSON, with the model's, which follows the contract. So the kit's types ask
 * for the shape, and glue over the seed's functions compiles under `tsc --strict` without casts.
 */
export type Written<T> =
  | WidenLiteral<Extract<T, Primitive>>
  | WrittenArray<Extract<T, readonly unknown[]>>
  | WrittenObject<Exclude<T, Primitive | readonly unknown[]>>;

type Primitive = string | number | boolean | bigint | symbol | null | undefined;
type WidenLiteral<T> = T extends string ? string : T extends boolean ? boolean : T;
type WrittenArray<T> = T extends readonly (infer U)[] ? Written<U>[] : never;
type KeysOfAny<U> = U extends unknown ? keyof U : never;
type ValueAt<U, K extends PropertyKey> = U extends unknown ? (K extends keyof U ? U[K] : never) : never;
type Merged<U> = { [K in keyof U]: Written<ValueAt<U, K>> } & {
  [K in Exclude<KeysOfAny<U>, keyof U>]?: Written<ValueAt<U, K>>;
};
type WrittenObject<U> = [U] extends [never] ? never : { [K in keyof Merged<U>]: Merged<U>[K] };

/**
 * The seed's `ProjectEnvReplicaValueReader`: how a replica reads values from the credential store. The kit's reader
 * answers from the adapter's embedded value store (`store.put`, `store.fail`) and runs a request's `duringFetch` at
 * the first read of that operation, while the read is in flight.
 */
export interface ValueReader {
  readStaged(name: string): Promise<string | null>;
  readLegacy(name: string, version: number): Promise<{ value: string; version: number } | null>;
}

/** The settings of the replica under test; a `reset` may change them (its `config`). */
export interface HostConfig {
  /** Where the replica keeps its database: one file, kept across `restart`. */
  readonly dbPath: string;
  /** The 32-byte master key values are sealed and receipts MACed under. */
  readonly masterKey: Buffer;
  /** The value store's parameter-name prefix (default `/envreplica`). */
  readonly prefix: string;
  /** The acknowledgement page-size bound in bytes (default 262144). */
  readonly ackPageBytes: number;
}

/** What the kit gives an implementation. */
export interface Host {
  /** The current settings (read them when you need them: a `reset` replaces them). */
  config(): HostConfig;
  /**
   * The value reader of an operation that starts now: call it once, when the operation starts (as the seed takes its
   * reader as a call argument). Null when the value store is off (`store.off`): `credential_store_unavailable`.
   */
  valueReader(): ValueReader | null;
  /**
   * Call right after each write transaction commits (every transaction that may write, whether or not it changed a
   * row; docs/protocol.md section 6). Under `crashAfterCommit: k` the k-th call throws the kit's crash signal: let
   * it propagate, write nothing more. Without it, or before the k-th, it does nothing.
   */
  afterWriteCommit(): void;
  /** Notes for people, on standard error (standard output is the protocol's). */
  log(message: string): void;
}

/** How the kit should answer an error an operation threw. */
export type ErrorKind = "invalid" | "corrupt";

/**
 * A replica under test: the seed's operations, plus what a harness needs to reset and restart it.
 *
 * **Frames arrive unchecked.** `begin`, `applyPage`, `applyDelivery` and `complete` are typed with the contract's
 * frame types (`BeginFrame`, `PageFrame`, `ApplyFrame`, `CommitFrame`; `keptPolicyEpochs: number[]`,
 * `orgId: string`) because that is how the seed, and any implementation of it, declares its operations: so glue
 * such as `begin: (f, e, o) => seed.beginProjectEnvReplica(f, e, o)` compiles under `tsc --strict` without a cast.
 * At run time they are the request's decoded JSON, unchecked: the kit leaves checking them to the replica,
 * because the gate holds the replica to it. So a replica must check each one before trusting it (the seed does, with
 * `isProjectEnvReplica*Frame`; `checkBegin`, `checkPage`, `checkDelivery` and `checkCommit` of
 * `@envreplica/adapter-kit/host` do it for you) and throw an error that `errorKind` calls `"invalid"` before
 * anything changes. Numbers written `1.0` or `1e2`, or past 2^53, arrive as non-numbers (`JsonFloat`, `bigint`),
 * so a Count check rejects them, as the contract says.
 *
 * **Results** are typed by the contract's shapes, not its literal values (`Written`: a refusal `code` a plain
 * `string`, `replayed` and `consumed` plain booleans, a snapshot entry's `value` a `string | null`): the kit answers
 * what the replica returns as it is (a receipt's extra keys, such as the seed's `requestMac`, dropped), and the
 * harness compares every answer with the model's, which follows the contract.
 */
export interface Replica {
  /** beginProjectEnvReplica. `frame`, `keptPolicyEpochs` and `orgId` arrive unchecked (see above). */
  begin(frame: BeginFrame, keptPolicyEpochs: PolicyEpochs, orgId: string): MaybePromise<Written<BeginResult>>;
  /** applyProjectEnvReplicaPage, reading values through `reader`. `frame` arrives unchecked. */
  applyPage(frame: PageFrame, reader: ValueReader | null): Promise<Written<PageResult>>;
  /** applyProjectEnvReplicaDelivery, reading values through `reader`. `frame` arrives unchecked. */
  applyDelivery(frame: ApplyFrame, reader: ValueReader | null): Promise<Written<ApplyResult>>;
  /** completeProjectEnvReplica. `frame` arrives unchecked. */
  complete(frame: CommitFrame): MaybePromise<Written<CommitResult>>;
  /** closeProjectEnvReplicaGate: what the host does on every (re)connection. */
  closeGate(): MaybePromise<void>;
  /** readProjectEnvReplicaStatus. */
  readStatus(): MaybePromise<Written<Status>>;
  /** readProjectEnvReplicaSnapshot (null: fail closed). `projectIds` are checked Segments (repeats allowed). */
  readSnapshot(projectIds: string[]): MaybePromise<Written<Snapshot>>;
  /**
   * listProjectEnvReplicaReceipts. The kit answers each receipt in the wire's shape (`streamId`, `sequence`, `ok`,
   * `code`, `result`, `recordVersion`): other keys, such as the seed's `requestMac`, are dropped.
   */
  listReceipts(): MaybePromise<Written<Receipt>[]>;
  /** A fresh, empty replica (`reset`): every row gone, as a new database would be. */
  empty(): MaybePromise<void>;
  /** Drop the database connection without writing anything more, and open the file again (a crash, `restart`). */
  reopen(): MaybePromise<void>;
  /** Release the database at end of input. */
  close(): MaybePromise<void>;
  /**
   * Which errors are answers: "invalid" (a frame or argument), "corrupt" (the stored replica); others are bugs.
   * Without it the kit uses `errorKind` of `@envreplica/adapter-kit/host`: `InvalidInputError` is "invalid",
   * `CorruptReplicaError` (and `SealedValueError`) "corrupt".
   */
  errorKind?(error: unknown): ErrorKind | undefined;

  /** awaitProjectEnvReplicaReady: resolves when ready; rejects on the timeout (`isReadyTimeout`) or corruption. */
  awaitReady?(timeoutMs: number): Promise<void>;
  /** Whether an `awaitReady` rejection is its timeout (the answer `{"ready": false}`). */
  isReadyTimeout?(error: unknown): boolean;
  /** Why `readSnapshot(projectIds)` fails closed (null: it serves). Without it the kit derives the reason. */
  diagnose?(projectIds: string[]): MaybePromise<{ reason: string; message: string } | null>;
  /** Every table, values opened (the `state` op). Without it `state` is answered unsupported. */
  exportState?(): MaybePromise<Written<StateDocument>>;
  /** Whether it calls `host.afterWriteCommit()` after each write commit (else `crashAfterCommit` is unsupported). */
  readonly crashesAfterCommit?: boolean;
}

/** What a plug-in module exports. */
export type CreateReplica = (host: Host) => MaybePromise<Replica>;
