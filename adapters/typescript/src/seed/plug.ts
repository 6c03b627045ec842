/**
 * The seed's own code as an implementation for the kit: `createSeedReplica` wires the operations of
 * `project-env-replica.ts` (the `--source` file, compiled by `kit/load.ts` with its imports mapped onto the host
 * modules of `host/`) into the kit, with no cast: the kit's `Replica` takes the contract's frames and the results
 * as the seed writes them.
 *
 * The seed reads values through its default reader (`configuredCredentialStore()`, which `host/lib/credential-store`
 * answers with the kit's reader of the operation starting), throws `Error("invalid ...")` for an invalid frame and
 * `ProjectEnvReplicaCorruptError` for a corrupt replica, and reports its write commits through `host/lib/db`.
 * `exportState` reads the seed's eight tables into the contract's `state` document, values opened under the key.
 */

import type { ErrorKind, Host, Replica, Written } from "../kit/replica.js";
import type { StateDocument } from "../kit/generated/contract.js";
import { closeDb, emptyDb, reopen, sqliteConnection, startOperation } from "./host/lib/db.js";
import { openProjectEnvValueFromStorage } from "./host/lib/host-env.js";
export { setTextEncoding, type TextEncoding } from "./host/lib/host-env.js";
import { setAckPageBytes } from "./host/src/protocol.js";
import { setHost } from "./host/runtime.js";
import type { SeedModule } from "./seed-module.js";
export { missingExports, REQUIRED_EXPORTS, type SeedModule } from "./seed-module.js";

const READY_TIMEOUT = "task environment replica did not become ready before the admission deadline";

export function createSeedReplica(seed: SeedModule, host: Host): Replica {
  setHost(host);
  const config = () => {
    setAckPageBytes(host.config().ackPageBytes);
  };
  config();
  return {
    begin: (frame, epochs, orgId) => {
      config();
      return seed.beginProjectEnvReplica(frame, epochs, orgId);
    },
    applyPage: (frame) => {
      config();
      startOperation();
      return seed.applyProjectEnvReplicaPage(frame);
    },
    applyDelivery: (frame) => {
      config();
      startOperation();
      return seed.applyProjectEnvReplicaDelivery(frame);
    },
    complete: (frame) => seed.completeProjectEnvReplica(frame),
    closeGate: () => seed.closeProjectEnvReplicaGate(),
    readStatus: () => seed.readProjectEnvReplicaStatus(),
    readSnapshot: (projectIds) => seed.readProjectEnvReplicaSnapshot(projectIds),
    listReceipts: () => seed.listProjectEnvReplicaReceipts(),
    awaitReady: (timeoutMs) => seed.awaitProjectEnvReplicaReady(timeoutMs),
    isReadyTimeout: (error) => error instanceof Error && error.message === READY_TIMEOUT,
    empty: () => {
      emptyDb();
      config();
    },
    reopen: () => reopen(),
    close: () => closeDb(),
    errorKind: (error): ErrorKind | undefined => {
      if (error instanceof seed.ProjectEnvReplicaCorruptError || error instanceof StoredRowInvalid) return "corrupt";
      if (error instanceof Error && error.constructor === Error && error.message.startsWith("invalid ")) {
        return "invalid";
      }
      return undefined;
    },
    exportState: () => exportState(),
    crashesAfterCommit: true,
  };
}

// -- the state document ----------------------------------------------------------------------------------------------

type Row = Record<string, unknown>;

/** A stored row that does not read back: the `state` op answers corrupt. */
class StoredRowInvalid extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProjectEnvReplicaCorruptError";
  }
}

function json(text: unknown, what: string): unknown {
  if (text === null) return null;
  try {
    return JSON.parse(String(text)) as unknown;
  } catch {
    throw new StoredRowInvalid(`stored ${what} is malformed`);
  }
}

function rows(table: string, order: string): Row[] {
  return sqliteConnection().prepare(`SELECT * FROM "${table}" ORDER BY ${order}`).all() as Row[];
}

function state(row: Row) {
  return {
    key: row["key"],
    head: {
      revision: row["revision"],
      generation: row["generation"],
      tombstone: row["tombstone"] === 1,
      valueRef: row["tombstone"] === 1 ? null : json(row["value_ref_json"], "value reference"),
    },
    binding: json(row["binding_json"], "binding"),
    policyEpoch: row["policy_epoch"],
    listingGeneration: row["listing_generation"],
  };
}

function materialization(row: Row) {
  return row["materialization"] === "installed"
    ? { kind: "installed" }
    : { kind: row["materialization"], reason: row["materialization_reason"] };
}

function storedValue(row: Row) {
  return {
    projectId: row["project_id"],
    key: row["key"],
    revision: row["revision"],
    generation: row["generation"],
    valueRef: json(row["value_ref_json"], "value reference"),
    value: openProjectEnvValueFromStorage(String(row["value_enc"])),
  };
}

function exportState(): Written<StateDocument> {
  const [authority] = rows("host_project_env_replica_authority", "id");
  if (authority === undefined) throw new StoredRowInvalid("project environment replica authority row is missing");
  const doc = {
    authority: {
      activated: authority["activated"] === 1,
      gateOpen: authority["gate_open"] === 1,
      attemptId: authority["attempt_id"],
      streamId: authority["stream_id"],
      appliedSequence: authority["applied_sequence"],
      orgId: authority["org_id"],
      policyEpochs: json(authority["policy_epochs_json"], "policy epochs"),
    },
    projects: rows("host_project_env_replica_projects", "project_id").map((row) => ({
      projectId: row["project_id"],
      recordVersion: row["record_version"],
    })),
    records: rows("host_project_env_replica_records", "project_id, key").map((row) => ({
      projectId: row["project_id"],
      key: row["key"],
      state: state(row),
      materialization: materialization(row),
    })),
    values: rows("host_project_env_replica_values", "project_id, key").map(storedValue),
    stageProjects: rows("host_project_env_replica_stage_projects", "attempt_id, project_id").map((row) => ({
      attemptId: row["attempt_id"],
      projectId: row["project_id"],
      recordVersion: row["record_version"],
      lastKey: row["last_key"],
      complete: row["complete"] === 1,
    })),
    stageRecords: rows("host_project_env_replica_stage_records", "attempt_id, project_id, key").map((row) => ({
      attemptId: row["attempt_id"],
      projectId: row["project_id"],
      key: row["key"],
      state: state(row),
      materialization: materialization(row),
      present: row["present"] === 1,
    })),
    stageValues: rows("host_project_env_replica_stage_values", "attempt_id, project_id, key").map((row) => ({
      attemptId: row["attempt_id"],
      ...storedValue(row),
    })),
    receipts: rows("host_project_env_replica_receipts", "stream_id, sequence").map((row) => ({
      streamId: row["stream_id"],
      sequence: row["sequence"],
      requestMac: row["request_mac"],
      ok: row["ok"] === 1,
      code: row["code"],
      result: json(row["result_json"], "delivery result"),
      recordVersion: row["record_version"],
    })),
  };
  return doc as Written<StateDocument>; // read from the tables as they are: the harness checks them
}
