/**
 * What the kit needs from the seed's file (`project-env-replica.ts` of @runuai/host), which `--source` names and the
 * kit compiles against its own host modules (`host/`). A file that lacks one of these exports is refused.
 */
declare module "envreplica:seed" {
  import type {
    ApplyResult,
    BeginResult,
    CommitResult,
    PageResult,
    Result,
    Snapshot,
    Status,
  } from "../kit/generated/contract.js";

  export class ProjectEnvReplicaCorruptError extends Error {}
  export function beginProjectEnvReplica(frame: never, keptPolicyEpochs: never, orgId: never): BeginResult;
  export function applyProjectEnvReplicaPage(frame: never): Promise<PageResult>;
  export function applyProjectEnvReplicaDelivery(frame: never): Promise<ApplyResult>;
  export function completeProjectEnvReplica(frame: never): CommitResult;
  export function closeProjectEnvReplicaGate(): void;
  export function readProjectEnvReplicaStatus(): Status;
  export function readProjectEnvReplicaSnapshot(projectIds: readonly string[]): Snapshot;
  export function awaitProjectEnvReplicaReady(timeoutMs?: number): Promise<void>;
  export function listProjectEnvReplicaReceipts(): Array<{
    streamId: string;
    sequence: number;
    requestMac: string;
    ok: boolean;
    code: string | null;
    result: Result | null;
    recordVersion: number | null;
  }>;
}
