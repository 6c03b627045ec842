/**
 * The seed's eight tables, in drizzle-orm (the host's `schema.hostProjectEnvReplica*`), with the columns and types
 * the seed reads and writes. `db.ts` creates them from these declarations.
 */

import { integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";

const bool = (name: string) => integer(name, { mode: "boolean" });

/** The one authority row (id "replica"): the gate, the delivery cursor, the attempt, the organisation, the epochs. */
export const hostProjectEnvReplicaAuthority = sqliteTable("host_project_env_replica_authority", {
  id: text("id").primaryKey(),
  activated: bool("activated").notNull(),
  gateOpen: bool("gate_open").notNull(),
  streamId: text("stream_id"),
  appliedSequence: integer("applied_sequence").notNull(),
  attemptId: text("attempt_id"),
  orgId: text("org_id"),
  policyEpochsJson: text("policy_epochs_json").notNull(),
  updatedAt: integer("updated_at").notNull(),
});

/** The live projects and their record versions. */
export const hostProjectEnvReplicaProjects = sqliteTable("host_project_env_replica_projects", {
  projectId: text("project_id").primaryKey(),
  recordVersion: integer("record_version").notNull(),
});

const recordColumns = () => ({
  projectId: text("project_id").notNull(),
  key: text("key").notNull(),
  revision: integer("revision").notNull(),
  generation: integer("generation").notNull(),
  tombstone: bool("tombstone").notNull(),
  valueRefJson: text("value_ref_json"),
  bindingJson: text("binding_json"),
  policyEpoch: integer("policy_epoch"),
  listingGeneration: integer("listing_generation").notNull(),
  materialization: text("materialization").notNull(),
  materializationReason: text("materialization_reason"),
  updatedAt: integer("updated_at").notNull(),
});

/** The live records: each record's state and what the replica made of it. */
export const hostProjectEnvReplicaRecords = sqliteTable("host_project_env_replica_records", recordColumns(), (t) => [
  primaryKey({ columns: [t.projectId, t.key] }),
]);

const valueColumns = () => ({
  projectId: text("project_id").notNull(),
  key: text("key").notNull(),
  revision: integer("revision").notNull(),
  generation: integer("generation").notNull(),
  valueRefJson: text("value_ref_json").notNull(),
  valueEnc: text("value_enc").notNull(),
  updatedAt: integer("updated_at").notNull(),
});

/** The live values, sealed, each for the head it was fetched for. */
export const hostProjectEnvReplicaValues = sqliteTable("host_project_env_replica_values", valueColumns(), (t) => [
  primaryKey({ columns: [t.projectId, t.key] }),
]);

/** The projects of the open snapshot attempt, and how far each was paged. */
export const hostProjectEnvReplicaStageProjects = sqliteTable(
  "host_project_env_replica_stage_projects",
  {
    attemptId: text("attempt_id").notNull(),
    projectId: text("project_id").notNull(),
    recordVersion: integer("record_version"),
    lastKey: text("last_key"),
    complete: bool("complete").notNull(),
  },
  (t) => [primaryKey({ columns: [t.attemptId, t.projectId] })],
);

/** The staged records of the attempt (`present`: sent by a page of it, not only carried over). */
export const hostProjectEnvReplicaStageRecords = sqliteTable(
  "host_project_env_replica_stage_records",
  { attemptId: text("attempt_id").notNull(), ...recordColumns(), present: bool("present").notNull() },
  (t) => [primaryKey({ columns: [t.attemptId, t.projectId, t.key] })],
);

/** The staged values of the attempt. */
export const hostProjectEnvReplicaStageValues = sqliteTable(
  "host_project_env_replica_stage_values",
  { attemptId: text("attempt_id").notNull(), ...valueColumns() },
  (t) => [primaryKey({ columns: [t.attemptId, t.projectId, t.key] })],
);

/** One receipt per consumed delivery: the request's MAC and the outcome it was answered with. */
export const hostProjectEnvReplicaReceipts = sqliteTable(
  "host_project_env_replica_receipts",
  {
    streamId: text("stream_id").notNull(),
    sequence: integer("sequence").notNull(),
    requestMac: text("request_mac").notNull(),
    resultJson: text("result_json"),
    recordVersion: integer("record_version"),
    ok: bool("ok").notNull(),
    code: text("code"),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.streamId, t.sequence] })],
);
