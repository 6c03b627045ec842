/**
 * What an implementation gives the kit, and what the kit gives it.
 *
 * An implementation plugs in as a module that exports `createReplica(host: Host): Replica` (or a default export of
 * that function). The kit owns everything else of the adapter protocol (docs/protocol.md section 5): the JSON
 * lines, ids, request checks, `invalid` / `unsupported` answers, the value store and its `store.*` ops,
 * `duringFetch`, `restart`, `crashAfterCommit`, `ready`, `diagnostics`.
 */

import type {
  ApplyResult,
  BeginResult,
  CommitResult,
  PageResult,
  Receipt,
  Snapshot,
  StateDocument,
  Status,
} from "./generated/contract.js";

export type MaybePromise<T> = T | Promise<T>;

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
 * Frames reach it as decoded JSON, unchecked: validating them is the replica's job (an invalid frame must throw an
 * error that `errorKind` calls "invalid", before anything changes).
 */
export interface Replica {
  /** beginProjectEnvReplica. */
  begin(frame: unknown, keptPolicyEpochs: unknown, orgId: unknown): MaybePromise<BeginResult>;
  /** applyProjectEnvReplicaPage, reading values through `reader`. */
  applyPage(frame: unknown, reader: ValueReader | null): Promise<PageResult>;
  /** applyProjectEnvReplicaDelivery, reading values through `reader`. */
  applyDelivery(frame: unknown, reader: ValueReader | null): Promise<ApplyResult>;
  /** completeProjectEnvReplica. */
  complete(frame: unknown): MaybePromise<CommitResult>;
  /** closeProjectEnvReplicaGate: what the host does on every (re)connection. */
  closeGate(): MaybePromise<void>;
  /** readProjectEnvReplicaStatus. */
  readStatus(): MaybePromise<Status>;
  /** readProjectEnvReplicaSnapshot (null: fail closed). */
  readSnapshot(projectIds: string[]): MaybePromise<Snapshot>;
  /** listProjectEnvReplicaReceipts, in the wire's shape (no MAC). */
  listReceipts(): MaybePromise<Receipt[]>;
  /** A fresh, empty replica (`reset`): every row gone, as a new database would be. */
  empty(): MaybePromise<void>;
  /** Drop the database connection without writing anything more, and open the file again (a crash, `restart`). */
  reopen(): MaybePromise<void>;
  /** Release the database at end of input. */
  close(): MaybePromise<void>;
  /** Which errors are answers: "invalid" (a frame or argument), "corrupt" (the stored replica); others are bugs. */
  errorKind(error: unknown): ErrorKind | undefined;

  /** awaitProjectEnvReplicaReady: resolves when ready; rejects on the timeout (`isReadyTimeout`) or corruption. */
  awaitReady?(timeoutMs: number): Promise<void>;
  /** Whether an `awaitReady` rejection is its timeout (the answer `{"ready": false}`). */
  isReadyTimeout?(error: unknown): boolean;
  /** Why `readSnapshot(projectIds)` fails closed (null: it serves). Without it the kit derives the reason. */
  diagnose?(projectIds: string[]): MaybePromise<{ reason: string; message: string } | null>;
  /** Every table, values opened (the `state` op). Without it `state` is answered unsupported. */
  exportState?(): MaybePromise<StateDocument>;
  /** Whether it calls `host.afterWriteCommit()` after each write commit (else `crashAfterCommit` is unsupported). */
  readonly crashesAfterCommit?: boolean;
}

/** What a plug-in module exports. */
export type CreateReplica = (host: Host) => MaybePromise<Replica>;
