/**
 * What the kit needs from the seed's file (`project-env-replica.ts` of @runuai/host), which `--source` names and the
 * kit compiles against its own host modules (`host/`). A file that lacks one of these exports is refused; the
 * file's own types are checked by `tsc` before it runs (the kit's `--source` type-check, and the glue fixture of
 * the kit's tests, `test/fixtures/seed-glue.ts`, which wires the file's functions into a `Replica` with no cast).
 */

import type { Written, ValueReader } from "../kit/replica.js";
import type {
  ApplyFrame,
  ApplyResult,
  BeginFrame,
  BeginResult,
  CommitFrame,
  CommitResult,
  PageFrame,
  PageResult,
  Receipt,
  Snapshot,
  Status,
} from "../kit/generated/contract.js";

export interface SeedModule {
  ProjectEnvReplicaCorruptError: new (message: string) => Error;
  beginProjectEnvReplica(frame: BeginFrame, keptPolicyEpochs: readonly number[], orgId: string): Written<BeginResult>;
  applyProjectEnvReplicaPage(frame: PageFrame, reader?: ValueReader | null): Promise<Written<PageResult>>;
  applyProjectEnvReplicaDelivery(frame: ApplyFrame, reader?: ValueReader | null): Promise<Written<ApplyResult>>;
  completeProjectEnvReplica(frame: CommitFrame): Written<CommitResult>;
  closeProjectEnvReplicaGate(): void;
  readProjectEnvReplicaStatus(): Written<Status>;
  readProjectEnvReplicaSnapshot(projectIds: readonly string[]): Written<Snapshot>;
  awaitProjectEnvReplicaReady(timeoutMs?: number): Promise<void>;
  listProjectEnvReplicaReceipts(): (Written<Receipt> & { requestMac: string })[];
}

/** The exports the kit calls; a `--source` without one of them is refused. */
export const REQUIRED_EXPORTS = [
  "beginProjectEnvReplica",
  "applyProjectEnvReplicaPage",
  "applyProjectEnvReplicaDelivery",
  "completeProjectEnvReplica",
  "closeProjectEnvReplicaGate",
  "readProjectEnvReplicaStatus",
  "readProjectEnvReplicaSnapshot",
  "listProjectEnvReplicaReceipts",
  "awaitProjectEnvReplicaReady",
  "ProjectEnvReplicaCorruptError",
] as const satisfies readonly (keyof SeedModule)[];

/** The names `REQUIRED_EXPORTS` that the compiled source does not export as functions or classes. */
export function missingExports(module: Record<string, unknown>): string[] {
  return REQUIRED_EXPORTS.filter((name) => typeof module[name] !== "function");
}
