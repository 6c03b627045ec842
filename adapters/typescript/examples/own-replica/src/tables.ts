/**
 * The replica's SQLite tables, shaped like the `state` document (docs/protocol.md section 6.4), and the rows read
 * and written inside one transaction. Records keep their state and materialization as canonical JSON; values are
 * sealed (AES-GCM under the master key) together with the row they belong to, so a value moved to another row, or
 * a row whose head no longer names it, does not open. A row that does not read back is `CorruptReplicaError`.
 */

import type Database from "better-sqlite3";
import type { BindingState, Host, Materialization, ReceiptRefusalCode, Result, ValueRef } from "@envreplica/adapter-kit";
import { canonicalJson, CorruptReplicaError, open, seal } from "@envreplica/adapter-kit/host";

export const SCHEMA = `
CREATE TABLE IF NOT EXISTS authority (
  id INTEGER PRIMARY KEY CHECK (id = 1), activated INTEGER NOT NULL, gate_open INTEGER NOT NULL,
  attempt_id TEXT, stream_id TEXT, applied_sequence INTEGER NOT NULL, org_id TEXT, policy_epochs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projects (project_id TEXT PRIMARY KEY, record_version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS records (project_id TEXT, key TEXT, state TEXT NOT NULL, mat TEXT NOT NULL,
  PRIMARY KEY (project_id, key));
CREATE TABLE IF NOT EXISTS vals (project_id TEXT, key TEXT, revision INTEGER NOT NULL, generation INTEGER NOT NULL,
  value_ref TEXT NOT NULL, sealed TEXT NOT NULL, PRIMARY KEY (project_id, key));
CREATE TABLE IF NOT EXISTS stage_projects (attempt_id TEXT, project_id TEXT, record_version INTEGER, last_key TEXT,
  complete INTEGER NOT NULL, PRIMARY KEY (attempt_id, project_id));
CREATE TABLE IF NOT EXISTS stage_records (attempt_id TEXT, project_id TEXT, key TEXT, state TEXT NOT NULL,
  mat TEXT NOT NULL, present INTEGER NOT NULL, PRIMARY KEY (attempt_id, project_id, key));
CREATE TABLE IF NOT EXISTS stage_vals (attempt_id TEXT, project_id TEXT, key TEXT, revision INTEGER NOT NULL,
  generation INTEGER NOT NULL, value_ref TEXT NOT NULL, sealed TEXT NOT NULL, PRIMARY KEY (attempt_id, project_id, key));
CREATE TABLE IF NOT EXISTS receipts (stream_id TEXT, sequence INTEGER, request_mac TEXT NOT NULL, ok INTEGER NOT NULL,
  code TEXT, result TEXT, record_version INTEGER, PRIMARY KEY (stream_id, sequence));
`;

/** A fresh replica: the one authority row, inactive. */
export function seedRows(db: Database.Database): void {
  db.prepare(
    "INSERT OR IGNORE INTO authority VALUES (1, 0, 0, NULL, NULL, 0, NULL, '[]')",
  ).run();
}

export interface Authority {
  activated: boolean;
  gateOpen: boolean;
  attemptId: string | null;
  streamId: string | null;
  appliedSequence: number;
  orgId: string | null;
  policyEpochs: number[];
}
export interface Row {
  state: BindingState;
  mat: Materialization;
}
export interface StageRow extends Row {
  present: boolean;
}
export interface StageProject {
  recordVersion: number | null;
  lastKey: string | null;
  complete: boolean;
}
export interface ValueRow {
  revision: number;
  generation: number;
  valueRef: ValueRef;
  sealed: string;
}
export interface StoredReceipt {
  streamId: string;
  sequence: number;
  requestMac: string;
  ok: boolean;
  code: ReceiptRefusalCode | null;
  result: Result | null;
  recordVersion: number | null;
}

type Sql = Record<string, unknown>;

function parsed<T>(text: unknown, what: string): T {
  if (typeof text !== "string") throw new CorruptReplicaError(`stored ${what} is missing`);
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new CorruptReplicaError(`stored ${what} is not JSON`);
  }
}

const toRow = (r: Sql): Row => ({ state: parsed(r["state"], "record state"), mat: parsed(r["mat"], "materialization") });
const toValue = (r: Sql): ValueRow => ({
  revision: r["revision"] as number,
  generation: r["generation"] as number,
  valueRef: parsed(r["value_ref"], "value reference"),
  sealed: String(r["sealed"]),
});
const bit = (b: boolean): number => (b ? 1 : 0);

/** The tables as one transaction sees them. */
export class Tables {
  constructor(private readonly db: Database.Database, private readonly host: Host) {}

  private all(sql: string, ...args: unknown[]): Sql[] {
    return this.db.prepare(sql).all(...args) as Sql[];
  }
  private get(sql: string, ...args: unknown[]): Sql | undefined {
    return this.db.prepare(sql).get(...args) as Sql | undefined;
  }
  private run(sql: string, ...args: unknown[]): void {
    this.db.prepare(sql).run(...args);
  }

  // -- authority ---------------------------------------------------------------------------------------------------

  authority(): Authority {
    const r = this.get("SELECT * FROM authority WHERE id = 1");
    if (r === undefined) throw new CorruptReplicaError("the authority row is missing");
    const a: Authority = {
      activated: r["activated"] === 1,
      gateOpen: r["gate_open"] === 1,
      attemptId: (r["attempt_id"] as string | null) ?? null,
      streamId: (r["stream_id"] as string | null) ?? null,
      appliedSequence: r["applied_sequence"] as number,
      orgId: (r["org_id"] as string | null) ?? null,
      policyEpochs: parsed(r["policy_epochs"], "policy epochs"),
    };
    if (!Array.isArray(a.policyEpochs)) throw new CorruptReplicaError("stored policy epochs are not a list");
    return a;
  }
  setAuthority(a: Authority): void {
    this.run(
      "UPDATE authority SET activated = ?, gate_open = ?, attempt_id = ?, stream_id = ?, applied_sequence = ?, " +
        "org_id = ?, policy_epochs = ? WHERE id = 1",
      bit(a.activated), bit(a.gateOpen), a.attemptId, a.streamId, a.appliedSequence, a.orgId,
      JSON.stringify(a.policyEpochs),
    );
  }

  // -- live --------------------------------------------------------------------------------------------------------

  projectVersion(projectId: string): number | undefined {
    return this.get("SELECT record_version FROM projects WHERE project_id = ?", projectId)?.["record_version"] as
      | number
      | undefined;
  }
  projects(): { projectId: string; recordVersion: number }[] {
    return this.all("SELECT * FROM projects ORDER BY project_id").map((r) => ({
      projectId: r["project_id"] as string,
      recordVersion: r["record_version"] as number,
    }));
  }
  setProjectVersion(projectId: string, version: number): void {
    this.run("INSERT OR REPLACE INTO projects VALUES (?, ?)", projectId, version);
  }
  live(projectId: string, key: string): Row | undefined {
    const r = this.get("SELECT * FROM records WHERE project_id = ? AND key = ?", projectId, key);
    return r === undefined ? undefined : toRow(r);
  }
  liveRows(projectId: string): (Row & { key: string })[] {
    return this.all("SELECT * FROM records WHERE project_id = ? ORDER BY key", projectId).map((r) => ({
      key: r["key"] as string,
      ...toRow(r),
    }));
  }
  putLive(projectId: string, key: string, row: Row): void {
    this.run("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", projectId, key, canonicalJson(row.state),
      canonicalJson(row.mat));
  }
  liveValues(projectId: string): Map<string, ValueRow> {
    const out = new Map<string, ValueRow>();
    for (const r of this.all("SELECT * FROM vals WHERE project_id = ?", projectId)) out.set(r["key"] as string, toValue(r));
    return out;
  }
  dropLiveValue(projectId: string, key: string): void {
    this.run("DELETE FROM vals WHERE project_id = ? AND key = ?", projectId, key);
  }
  putLiveValue(projectId: string, key: string, head: { revision: number; generation: number; valueRef: ValueRef },
    value: string): void {
    this.run("INSERT OR REPLACE INTO vals VALUES (?, ?, ?, ?, ?, ?)", projectId, key, head.revision, head.generation,
      canonicalJson(head.valueRef), this.seal(projectId, key, head, value));
  }

  // -- staging -----------------------------------------------------------------------------------------------------

  stageProject(attemptId: string, projectId: string): StageProject | undefined {
    const r = this.get("SELECT * FROM stage_projects WHERE attempt_id = ? AND project_id = ?", attemptId, projectId);
    return r === undefined
      ? undefined
      : { recordVersion: (r["record_version"] as number | null) ?? null, lastKey: (r["last_key"] as string | null) ?? null,
          complete: r["complete"] === 1 };
  }
  stageProjects(attemptId: string): (StageProject & { projectId: string })[] {
    return this.all("SELECT project_id FROM stage_projects WHERE attempt_id = ? ORDER BY project_id", attemptId).map(
      (r) => ({ projectId: r["project_id"] as string, ...this.stageProject(attemptId, r["project_id"] as string)! }),
    );
  }
  putStageProject(attemptId: string, projectId: string, p: StageProject): void {
    this.run("INSERT OR REPLACE INTO stage_projects VALUES (?, ?, ?, ?, ?)", attemptId, projectId, p.recordVersion,
      p.lastKey, bit(p.complete));
  }
  stage(attemptId: string, projectId: string, key: string): StageRow | undefined {
    const r = this.get("SELECT * FROM stage_records WHERE attempt_id = ? AND project_id = ? AND key = ?", attemptId,
      projectId, key);
    return r === undefined ? undefined : { ...toRow(r), present: r["present"] === 1 };
  }
  stageRows(attemptId: string, projectId?: string): (StageRow & { projectId: string; key: string })[] {
    const rows = projectId === undefined
      ? this.all("SELECT * FROM stage_records WHERE attempt_id = ? ORDER BY project_id, key", attemptId)
      : this.all("SELECT * FROM stage_records WHERE attempt_id = ? AND project_id = ? ORDER BY key", attemptId, projectId);
    return rows.map((r) => ({
      projectId: r["project_id"] as string,
      key: r["key"] as string,
      ...toRow(r),
      present: r["present"] === 1,
    }));
  }
  putStage(attemptId: string, projectId: string, key: string, row: StageRow): void {
    this.run("INSERT OR REPLACE INTO stage_records VALUES (?, ?, ?, ?, ?, ?)", attemptId, projectId, key,
      canonicalJson(row.state), canonicalJson(row.mat), bit(row.present));
  }
  stageValue(attemptId: string, projectId: string, key: string): ValueRow | undefined {
    const r = this.get("SELECT * FROM stage_vals WHERE attempt_id = ? AND project_id = ? AND key = ?", attemptId,
      projectId, key);
    return r === undefined ? undefined : toValue(r);
  }
  dropStageValue(attemptId: string, projectId: string, key: string): void {
    this.run("DELETE FROM stage_vals WHERE attempt_id = ? AND project_id = ? AND key = ?", attemptId, projectId, key);
  }
  putStageValue(attemptId: string, projectId: string, key: string,
    head: { revision: number; generation: number; valueRef: ValueRef }, value: string): void {
    this.run("INSERT OR REPLACE INTO stage_vals VALUES (?, ?, ?, ?, ?, ?, ?)", attemptId, projectId, key, head.revision,
      head.generation, canonicalJson(head.valueRef), this.seal(projectId, key, head, value));
  }
  /** The project's staged view becomes a copy of its live view, no row of it `present` (`resetStagedProject`). */
  resetStagedProject(attemptId: string, projectId: string): void {
    this.run("DELETE FROM stage_records WHERE attempt_id = ? AND project_id = ?", attemptId, projectId);
    this.run("DELETE FROM stage_vals WHERE attempt_id = ? AND project_id = ?", attemptId, projectId);
    this.run("INSERT INTO stage_records SELECT ?, project_id, key, state, mat, 0 FROM records WHERE project_id = ?",
      attemptId, projectId);
    this.run("INSERT INTO stage_vals SELECT ?, project_id, key, revision, generation, value_ref, sealed FROM vals " +
      "WHERE project_id = ?", attemptId, projectId);
  }
  clearStaging(): void {
    this.run("DELETE FROM stage_projects");
    this.run("DELETE FROM stage_records");
    this.run("DELETE FROM stage_vals");
  }
  /** The live view becomes the attempt's staged projects and `present` records, with their values. */
  promote(attemptId: string): void {
    this.run("DELETE FROM projects");
    this.run("DELETE FROM records");
    this.run("DELETE FROM vals");
    this.run("INSERT INTO projects SELECT project_id, record_version FROM stage_projects WHERE attempt_id = ?", attemptId);
    this.run("INSERT INTO records SELECT project_id, key, state, mat FROM stage_records WHERE attempt_id = ? AND present = 1",
      attemptId);
    this.run(
      "INSERT INTO vals SELECT v.project_id, v.key, v.revision, v.generation, v.value_ref, v.sealed FROM stage_vals v " +
        "JOIN stage_records r ON r.attempt_id = v.attempt_id AND r.project_id = v.project_id AND r.key = v.key " +
        "WHERE v.attempt_id = ? AND r.present = 1",
      attemptId,
    );
    this.clearStaging();
  }

  // -- receipts ----------------------------------------------------------------------------------------------------

  receipt(streamId: string, sequence: number): StoredReceipt | undefined {
    const r = this.get("SELECT * FROM receipts WHERE stream_id = ? AND sequence = ?", streamId, sequence);
    return r === undefined ? undefined : this.toReceipt(r);
  }
  receipts(): StoredReceipt[] {
    return this.all("SELECT * FROM receipts ORDER BY stream_id, sequence").map((r) => this.toReceipt(r));
  }
  private toReceipt(r: Sql): StoredReceipt {
    return {
      streamId: r["stream_id"] as string,
      sequence: r["sequence"] as number,
      requestMac: r["request_mac"] as string,
      ok: r["ok"] === 1,
      code: (r["code"] as ReceiptRefusalCode | null) ?? null,
      result: r["result"] === null ? null : parsed<Result>(r["result"], "receipt result"),
      recordVersion: (r["record_version"] as number | null) ?? null,
    };
  }
  putReceipt(r: StoredReceipt): void {
    if (this.get("SELECT 1 FROM receipts WHERE stream_id = ? AND sequence = ?", r.streamId, r.sequence) !== undefined) {
      throw new CorruptReplicaError(`replica receipt (${r.streamId}, ${r.sequence}) already exists`);
    }
    this.run("INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?)", r.streamId, r.sequence, r.requestMac, bit(r.ok), r.code,
      r.result === null ? null : canonicalJson(r.result), r.recordVersion);
  }
  dropReceipts(): void {
    this.run("DELETE FROM receipts");
  }

  // -- the state document's raw rows -------------------------------------------------------------------------------

  rawTable(table: "stage_projects" | "stage_vals" | "vals", order: string): Sql[] {
    return this.all(`SELECT * FROM ${table} ORDER BY ${order}`);
  }
  allLive(): (Row & { projectId: string; key: string })[] {
    return this.all("SELECT * FROM records ORDER BY project_id, key").map((r) => ({
      projectId: r["project_id"] as string, key: r["key"] as string, ...toRow(r),
    }));
  }
  allStage(): (StageRow & { attemptId: string; projectId: string; key: string })[] {
    return this.all("SELECT * FROM stage_records ORDER BY attempt_id, project_id, key").map((r) => ({
      attemptId: r["attempt_id"] as string, projectId: r["project_id"] as string, key: r["key"] as string,
      ...toRow(r), present: r["present"] === 1,
    }));
  }
  valueRow(r: Sql): ValueRow {
    return toValue(r);
  }

  // -- sealing -----------------------------------------------------------------------------------------------------

  /** The value sealed together with the row it belongs to (project, key, and the head it was fetched for). */
  private seal(projectId: string, key: string, head: { revision: number; generation: number; valueRef: ValueRef },
    value: string): string {
    return seal(this.host, canonicalJson({ projectId, key, revision: head.revision, generation: head.generation,
      valueRef: head.valueRef, value }));
  }

  /** A value row's plaintext; corrupt when it does not open under the key or names another row or head. */
  opened(projectId: string, key: string, v: ValueRow): string {
    let inner: Record<string, unknown>;
    try {
      inner = JSON.parse(open(this.host, v.sealed)) as Record<string, unknown>;
    } catch {
      throw new CorruptReplicaError(`the value of ${projectId}/${key} does not open under the master key`);
    }
    const bound = { projectId, key, revision: v.revision, generation: v.generation, valueRef: v.valueRef };
    const { value, ...rest } = inner;
    if (typeof value !== "string" || canonicalJson(rest) !== canonicalJson(bound)) {
      throw new CorruptReplicaError(`the value of ${projectId}/${key} was sealed for another row`);
    }
    return value;
  }
}
