/**
 * A replica of its own, on SQLite (docs/protocol.md section 10, variant `fixed`). Every operation is one or more
 * transactions of `TestDatabase` (`write` reports its commit to the kit; `read` does not); a page or delivery that
 * fetches a value splits around the value-store read: a read-only before-transaction, the read through the reader
 * the operation was given, and an after-transaction that installs the answer only onto the very row it was read
 * for, still waiting for a value under the epochs kept now. A refusal is returned from inside its transaction, so
 * that transaction commits (and counts); an error rolls it back.
 */

import type {
  ApplyFrame,
  ApplyResult,
  BeginResult,
  BindingState,
  CommitResult,
  Cursor,
  Host,
  Materialization,
  PageFrame,
  CommitRefusalCode,
  PageRefusalCode,
  PageResult,
  Receipt,
  ReceiptRefusalCode,
  Result,
  Snapshot,
  SnapshotEntry,
  StateDocument,
  Status,
  TransientRefusalCode,
  ValueReader,
} from "@envreplica/adapter-kit";
import {
  canonicalJson,
  checkBegin,
  checkCommit,
  checkDelivery,
  checkPage,
  CorruptReplicaError,
  errorKind,
  mac,
  openDatabase,
  type TestDatabase,
} from "@envreplica/adapter-kit/host";
import { timingSafeEqual } from "node:crypto";

import { desired, isReachableAdvance, normalState, sameJson, stateOrder, wantsFetch } from "./rules.js";
import { type Authority, SCHEMA, seedRows, type StageRow, Tables } from "./tables.js";
import { fetchValue } from "./values.js";

/**
 * The one deliberate bug, for showing that the gate fails (README): `OWN_REPLICA_BUG=stale-read` drops the
 * after-transaction's check that the kept epochs still want the value, so a read begun before a policy change
 * installs after it (finding F1).
 */
const STALE_READ_BUG = process.env["OWN_REPLICA_BUG"] === "stale-read";

const RECEIPT_DOMAIN = "own-replica.receipt.v1\u0000";
const corrupt = (message: string) => new CorruptReplicaError(message);

/** Where a fetched value goes: a staged row of an attempt, or a live row. */
type Target = { attemptId: string | null; projectId: string; key: string };
/** What a delivery's first transaction decided, carried across its read. */
type Prepared = { kind: "prepared"; result: Result; fetch: boolean; version: number; attemptId: string | null };

function cursorOf(a: Authority): Cursor | null {
  if (!a.activated) return null;
  if (a.streamId === null || a.appliedSequence < 0) throw corrupt("stored replica delivery cursor is invalid");
  return { streamId: a.streamId, sequence: a.appliedSequence };
}

function requiredCursor(a: Authority): Cursor {
  const c = cursorOf(a);
  if (c === null) throw corrupt("project environment replica has not been activated");
  return c;
}

function orgOf(a: Authority): string {
  if (!a.activated || a.orgId === null) throw corrupt("stored replica organization is invalid");
  return a.orgId;
}

export class ReadyTimeout extends Error {
  constructor() {
    super("the replica did not become ready in time");
    this.name = "ReadyTimeout";
  }
}

export class OwnReplica {
  private readonly db: TestDatabase;
  private readonly listeners = new Set<() => void>();

  constructor(private readonly host: Host) {
    this.db = openDatabase(host, { schema: SCHEMA, seed: seedRows });
  }

  /** One write transaction (a commit the kit counts); the ready waiters look again after it. */
  private write<T>(fn: (t: Tables) => T): T {
    const out = this.db.write((c) => fn(new Tables(c, this.host)));
    for (const listener of [...this.listeners]) listener();
    return out;
  }

  private read<T>(fn: (t: Tables) => T): T {
    return this.db.read((c) => fn(new Tables(c, this.host)));
  }

  // -- begin ---------------------------------------------------------------------------------------------------------

  begin(frameIn: unknown, epochsIn: unknown, orgIn: unknown): BeginResult {
    const { frame, keptPolicyEpochs, orgId } = checkBegin(frameIn, epochsIn, orgIn);
    const { streamId, attemptId } = frame.attempt;
    return this.write((t) => {
      const a = t.authority();
      if (a.activated && a.orgId !== orgId) throw corrupt("replica organization cannot change after activation");
      const newStream = a.streamId !== streamId;
      if (newStream) t.dropReceipts(); // receipts only deduplicate one stream
      t.clearStaging();
      for (const projectId of frame.projectIds) {
        t.putStageProject(attemptId, projectId, { recordVersion: null, lastKey: null, complete: false });
        t.resetStagedProject(attemptId, projectId);
      }
      const sequence = newStream ? 0 : a.appliedSequence;
      t.setAuthority({ activated: true, gateOpen: false, attemptId, streamId, appliedSequence: sequence, orgId,
        policyEpochs: [...keptPolicyEpochs] });
      return { appliedThrough: { streamId, sequence }, policyEpochs: [...keptPolicyEpochs] };
    });
  }

  // -- retaining a record --------------------------------------------------------------------------------------------

  /** `retainStageState`: put `incoming` into the staged view, or keep what is stored when it is older or conflicts. */
  private retainStage(t: Tables, attemptId: string, projectId: string, incoming: BindingState, epochs: number[]) {
    const key = incoming.key;
    const stored = t.stage(attemptId, projectId, key);
    const order = stored === undefined ? "newer" : stateOrder(incoming, stored.state);
    let row: StageRow;
    let fetch: boolean;
    if (stored !== undefined && (order === "older" || order === "conflict")) {
      let mat = stored.mat;
      const want = desired(stored.state, epochs);
      if (want.kind === "withheld") {
        mat = want; // FIX(F2): what the kept epochs withhold now loses its value
        t.dropStageValue(attemptId, projectId, key);
      }
      row = { state: stored.state, mat, present: true };
      fetch = wantsFetch(stored.state, mat, epochs);
    } else if (stored !== undefined && order === "same") {
      const want = desired(stored.state, epochs);
      const mat = want.kind === "withheld" ? want : stored.mat.kind === "installed" ? stored.mat : want;
      if (mat.kind !== "installed") t.dropStageValue(attemptId, projectId, key);
      row = { state: stored.state, mat, present: true };
      fetch = mat.kind === "unavailable";
    } else {
      const mat = desired(incoming, epochs);
      t.dropStageValue(attemptId, projectId, key);
      row = { state: incoming, mat, present: true };
      fetch = mat.kind === "unavailable";
    }
    t.putStage(attemptId, projectId, key, row);
    return { result: { state: row.state, materialization: row.mat }, fetch };
  }

  // -- materializing a value: two transactions around the read -------------------------------------------------------

  private async materialize(target: Target, reader: ValueReader | null): Promise<void> {
    const { attemptId, projectId, key } = target;
    const before = this.read((t) => {
      const a = t.authority();
      if (attemptId !== null && a.attemptId !== attemptId) return null;
      const row = attemptId === null ? t.live(projectId, key) : t.stage(attemptId, projectId, key);
      if (row === undefined || row.mat.kind !== "unavailable") return null;
      return { state: row.state, orgId: orgOf(a) };
    });
    if (before === null) return;
    const fetched = await fetchValue(reader, this.host.config().prefix, projectId, before.orgId, before.state);
    this.write((t) => {
      const a = t.authority();
      if (attemptId !== null && a.attemptId !== attemptId) return;
      const row = attemptId === null ? t.live(projectId, key) : t.stage(attemptId, projectId, key);
      if (row === undefined || !sameJson(row.state, before.state)) return;
      // FIX(F1): only onto a row still waiting for its value under the epochs kept now.
      if (!STALE_READ_BUG && (row.mat.kind !== "unavailable" || desired(row.state, a.policyEpochs).kind !== "unavailable")) {
        return;
      }
      const head = before.state.head;
      let mat: Materialization;
      if ("value" in fetched && !head.tombstone) { // a value is fetched only for a head that names one
        mat = { kind: "installed" };
        if (attemptId === null) t.putLiveValue(projectId, key, head, fetched.value);
        else t.putStageValue(attemptId, projectId, key, head, fetched.value);
      } else {
        mat = { kind: "unavailable", reason: "reason" in fetched ? fetched.reason : "tombstone" };
        if (attemptId === null) t.dropLiveValue(projectId, key);
        else t.dropStageValue(attemptId, projectId, key);
      }
      if (attemptId === null) t.putLive(projectId, key, { state: before.state, mat });
      else t.putStage(attemptId, projectId, key, { state: before.state, mat, present: (row as StageRow).present });
    });
  }

  // -- page ----------------------------------------------------------------------------------------------------------

  /** `pageFits`: the page's acknowledgement, with the longest reasons, within `ackPageBytes`. */
  private fits(frame: PageFrame, states: BindingState[], epochs: number[], applied: Cursor): boolean {
    const reason = "x".repeat(64);
    const ack = {
      kind: "env.replica.ack", opId: frame.opId, ok: true, phase: "page", attemptId: frame.attemptId,
      projectId: frame.projectId, after: frame.after, recordVersion: frame.recordVersion,
      results: states.map((state) => ({ state, materialization: { kind: state.head.tombstone ? "withheld" : "unavailable", reason } })),
      complete: frame.complete, policyEpochs: epochs, appliedThrough: applied,
    };
    return Buffer.byteLength(JSON.stringify(ack), "utf8") <= this.host.config().ackPageBytes;
  }

  async applyPage(frameIn: unknown, reader: ValueReader | null): Promise<PageResult> {
    const frame = checkPage(frameIn);
    const records = frame.records.map(normalState);
    const { attemptId, projectId } = frame;
    const prepared = this.write((t): PageResult | string[] => {
      const a = t.authority();
      const applied = requiredCursor(a);
      const epochs = a.policyEpochs;
      const refuse = (code: PageRefusalCode): PageResult => ({ ok: false, attemptId, code, policyEpochs: epochs, appliedThrough: applied });
      if (a.attemptId !== attemptId || a.gateOpen) return refuse("reconciliation_attempt_mismatch");
      if (!this.fits(frame, records, epochs, applied)) return refuse("ack_page_too_large");
      const staged = t.stageProject(attemptId, projectId);
      if (staged === undefined) return refuse("project_not_in_attempt");
      const liveVersion = t.projectVersion(projectId) ?? 0;
      if (frame.recordVersion < liveVersion) return refuse("record_version_stale");
      if (frame.after === null) {
        t.resetStagedProject(attemptId, projectId);
        t.putStageProject(attemptId, projectId, { recordVersion: frame.recordVersion, lastKey: null, complete: false });
      } else if (staged.complete || staged.recordVersion !== frame.recordVersion || staged.lastKey !== frame.after) {
        return refuse("snapshot_page_mismatch");
      }
      const fetch: string[] = [];
      const retained: BindingState[] = [];
      let sameVersionConflict = false;
      for (const state of records) {
        if (frame.recordVersion === liveVersion) {
          const before = t.stage(attemptId, projectId, state.key);
          if (before === undefined || stateOrder(state, before.state) !== "same") sameVersionConflict = true;
        }
        const { result, fetch: wants } = this.retainStage(t, attemptId, projectId, state, epochs);
        retained.push(result.state);
        if (wants) fetch.push(state.key);
      }
      // from here on, a refusal keeps the staged writes above (they commit with it)
      if (!this.fits(frame, retained, epochs, applied)) return refuse("ack_page_too_large");
      if (sameVersionConflict) return refuse("snapshot_version_conflict");
      if (frame.complete && frame.recordVersion === liveVersion) {
        const live = t.liveRows(projectId);
        const present = t.stageRows(attemptId, projectId).filter((row) => row.present);
        if (live.length !== present.length || live.some((row, i) => !sameJson(row.state, present[i]?.state))) {
          return refuse("snapshot_version_conflict");
        }
      }
      t.putStageProject(attemptId, projectId, {
        recordVersion: frame.recordVersion, lastKey: records.at(-1)?.key ?? null, complete: frame.complete });
      return fetch;
    });
    if (!Array.isArray(prepared)) return prepared;
    for (const key of prepared) await this.materialize({ attemptId, projectId, key }, reader);
    return this.read((t): PageResult => {
      const a = t.authority();
      const applied = requiredCursor(a);
      if (a.attemptId !== attemptId || a.gateOpen) {
        return { ok: false, attemptId, code: "reconciliation_attempt_mismatch", policyEpochs: a.policyEpochs, appliedThrough: applied };
      }
      const results = records.map((state): Result => {
        const row = t.stage(attemptId, projectId, state.key);
        if (row === undefined) throw corrupt("staged replica page record disappeared");
        return { state: row.state, materialization: row.mat };
      });
      return { ok: true, attemptId, projectId, after: frame.after, recordVersion: frame.recordVersion, results,
        complete: frame.complete, policyEpochs: a.policyEpochs, appliedThrough: applied };
    });
  }

  // -- delivery ------------------------------------------------------------------------------------------------------

  private requestMac(frame: ApplyFrame, state: BindingState): string {
    const { kind, projectId, recordVersion, delivery } = frame;
    return mac(this.host, RECEIPT_DOMAIN, { kind, projectId, recordVersion, state,
      delivery: { streamId: delivery.streamId, sequence: delivery.sequence } });
  }

  async applyDelivery(frameIn: unknown, reader: ValueReader | null): Promise<ApplyResult> {
    const frame = checkDelivery(frameIn);
    const state = normalState(frame.state);
    const { projectId } = frame;
    const { streamId, sequence } = frame.delivery;
    const requestMac = this.requestMac(frame, state);
    const transient = (a: Authority, code: TransientRefusalCode): ApplyResult => ({ ok: false, replayed: false, consumed: false,
      attemptId: a.attemptId, code, policyEpochs: a.policyEpochs, appliedThrough: requiredCursor(a) });

    const prepared = this.write((t): ApplyResult | Prepared => {
      const a = t.authority();
      if (!a.activated) throw corrupt("replica delivery arrived before activation");
      const current = requiredCursor(a);
      const epochs = a.policyEpochs;
      if (streamId !== current.streamId) return transient(a, "stream_mismatch");
      if (sequence <= current.sequence) {
        const receipt = t.receipt(streamId, sequence);
        if (receipt === undefined) return transient(a, "receipt_missing");
        const stored = Buffer.from(receipt.requestMac);
        const mine = Buffer.from(requestMac);
        if (stored.length !== mine.length || !timingSafeEqual(stored, mine)) {
          return { ok: false, replayed: true, consumed: true, attemptId: a.attemptId, code: "delivery_conflict",
            policyEpochs: epochs, appliedThrough: current };
        }
        if (!receipt.ok) {
          if (receipt.code === null) throw corrupt("replica refusal has no code");
          return { ok: false, replayed: true, consumed: true, attemptId: a.attemptId, code: receipt.code,
            policyEpochs: epochs, appliedThrough: current };
        }
        if (receipt.result === null || receipt.recordVersion === null) throw corrupt("stored delivery result is invalid");
        return { ok: true, replayed: true, attemptId: a.attemptId, projectId, recordVersion: receipt.recordVersion,
          result: receipt.result, policyEpochs: epochs, appliedThrough: current };
      }
      if (sequence !== current.sequence + 1) return transient(a, "delivery_gap");
      const reconciliation = frame.reconciliationAttemptId;
      if (a.gateOpen ? reconciliation !== undefined : a.attemptId === null || reconciliation !== a.attemptId) {
        return transient(a, "reconciliation_attempt_mismatch");
      }
      const consumed = (code: ReceiptRefusalCode): ApplyResult => {
        t.putReceipt({ streamId, sequence, requestMac, ok: false, code, result: null, recordVersion: null });
        t.setAuthority({ ...a, appliedSequence: sequence });
        return { ok: false, replayed: false, consumed: true, attemptId: a.attemptId, code, policyEpochs: epochs,
          appliedThrough: { streamId, sequence } };
      };
      const advances = (base: number, stored: BindingState | null) =>
        frame.recordVersion === base + 1 &&
        (stored === null || stateOrder(state, stored) === "newer") &&
        isReachableAdvance(state, stored);
      if (a.attemptId !== null) {
        const attemptId = a.attemptId;
        const staged = t.stageProject(attemptId, projectId);
        if (staged === undefined || !staged.complete || staged.recordVersion === null) {
          return transient(a, "snapshot_incomplete");
        }
        if (frame.recordVersion > staged.recordVersion + 1) return transient(a, "record_version_gap");
        const stored = t.stage(attemptId, projectId, state.key);
        if (advances(staged.recordVersion, stored?.state ?? null)) {
          const { result, fetch } = this.retainStage(t, attemptId, projectId, state, epochs);
          t.putStageProject(attemptId, projectId, { ...staged, recordVersion: frame.recordVersion });
          return { kind: "prepared", result, fetch, version: frame.recordVersion, attemptId };
        }
        if (stored === undefined) return consumed("record_version_conflict");
        return { kind: "prepared", result: { state: stored.state, materialization: stored.mat },
          fetch: wantsFetch(stored.state, stored.mat, epochs), version: staged.recordVersion, attemptId };
      }
      const liveVersion = t.projectVersion(projectId);
      if (liveVersion === undefined) return consumed("project_not_in_replica");
      if (frame.recordVersion > liveVersion + 1) return transient(a, "record_version_gap");
      const stored = t.live(projectId, state.key);
      if (advances(liveVersion, stored?.state ?? null)) {
        const mat = desired(state, epochs);
        t.dropLiveValue(projectId, state.key);
        t.putLive(projectId, state.key, { state, mat });
        t.setProjectVersion(projectId, frame.recordVersion);
        return { kind: "prepared", result: { state, materialization: mat }, fetch: mat.kind === "unavailable",
          version: frame.recordVersion, attemptId: null };
      }
      if (stored === undefined) return consumed("record_version_conflict");
      return { kind: "prepared", result: { state: stored.state, materialization: stored.mat },
        fetch: wantsFetch(stored.state, stored.mat, epochs), version: liveVersion, attemptId: null };
    });
    if (!("kind" in prepared)) return prepared;
    if (prepared.fetch) await this.materialize({ attemptId: prepared.attemptId, projectId, key: state.key }, reader);
    return this.write((t): ApplyResult => {
      const a = t.authority();
      const current = requiredCursor(a);
      if (streamId !== current.streamId || sequence !== current.sequence + 1 || a.attemptId !== prepared.attemptId) {
        return transient(a, "replica_state_changed");
      }
      const row = prepared.attemptId === null ? t.live(projectId, state.key) : t.stage(prepared.attemptId, projectId, state.key);
      if (row === undefined) return transient(a, "replica_state_missing");
      const result: Result = { state: row.state, materialization: row.mat };
      t.putReceipt({ streamId, sequence, requestMac, ok: true, code: null, result, recordVersion: prepared.version });
      t.setAuthority({ ...a, appliedSequence: sequence });
      return { ok: true, replayed: false, attemptId: a.attemptId, projectId, recordVersion: prepared.version, result,
        policyEpochs: a.policyEpochs, appliedThrough: { streamId, sequence } };
    });
  }

  // -- commit, close -------------------------------------------------------------------------------------------------

  complete(frameIn: unknown): CommitResult {
    const frame = checkCommit(frameIn);
    const { attemptId } = frame;
    return this.write((t): CommitResult => {
      const a = t.authority();
      const applied = requiredCursor(a);
      const epochs = a.policyEpochs;
      const refuse = (code: CommitRefusalCode): CommitResult => ({ ok: false, attemptId, code, policyEpochs: epochs, appliedThrough: applied });
      if (a.attemptId !== attemptId || a.gateOpen) return refuse("reconciliation_attempt_mismatch");
      if (frame.highWater.streamId !== applied.streamId || frame.highWater.sequence !== applied.sequence) {
        return refuse("delivery_incomplete");
      }
      const staged = t.stageProjects(attemptId);
      if (staged.length !== frame.versions.length || staged.some((p, i) => {
        const v = frame.versions[i];
        return !p.complete || p.recordVersion === null || p.projectId !== v?.projectId || p.recordVersion !== v.recordVersion;
      })) {
        return refuse("record_version_changed");
      }
      for (const row of t.stageRows(attemptId)) {
        if (!row.present) continue;
        const value = t.stageValue(attemptId, row.projectId, row.key);
        if (row.mat.kind === "installed") {
          const head = row.state.head;
          if (value === undefined || value.revision !== head.revision || value.generation !== head.generation ||
            canonicalJson(value.valueRef) !== canonicalJson(head.valueRef)) {
            throw corrupt("staged installed value does not match its replica head");
          }
        } else if (value !== undefined) {
          throw corrupt("staged withheld replica record still has a value");
        }
      }
      t.promote(attemptId);
      t.setAuthority({ ...a, gateOpen: true, attemptId: null });
      return { ok: true, attemptId, policyEpochs: epochs, appliedThrough: applied };
    });
  }

  closeGate(): void {
    this.write((t) => {
      t.clearStaging();
      const a = t.authority();
      if (a.activated) t.setAuthority({ ...a, gateOpen: false, attemptId: null });
    });
  }

  // -- reads ---------------------------------------------------------------------------------------------------------

  readStatus(): Status {
    return this.read((t) => {
      const a = t.authority();
      return { activated: a.activated, gateOpen: a.gateOpen, attemptId: a.attemptId, orgId: a.orgId,
        appliedThrough: cursorOf(a), policyEpochs: a.policyEpochs, projectIds: t.projects().map((p) => p.projectId) };
    });
  }

  /** The served view of exactly these projects, or null (fail closed, on any corruption too). */
  readSnapshot(projectIds: string[]): Snapshot {
    try {
      return this.read((t) => this.snapshot(t, projectIds));
    } catch (e) {
      if (errorKind(e) === "corrupt") return null;
      throw e;
    }
  }

  private snapshot(t: Tables, projectIds: string[]): Snapshot {
    const a = t.authority();
    if (!a.activated || !a.gateOpen || a.attemptId !== null) return null;
    const asked = [...new Set(projectIds)].sort();
    const live = t.projects();
    if (asked.length !== projectIds.length || asked.join("\u0000") !== live.map((p) => p.projectId).join("\u0000")) {
      return null;
    }
    const versions = new Map(live.map((p) => [p.projectId, p.recordVersion]));
    const projects = projectIds.map((projectId) => {
      const recordVersion = versions.get(projectId);
      if (recordVersion === undefined) throw corrupt("replica project is missing");
      const values = t.liveValues(projectId);
      const entries = t.liveRows(projectId).map((row): SnapshotEntry => {
        const head = row.state.head;
        const stored = values.get(row.key);
        values.delete(row.key);
        if (row.mat.kind === "installed") {
          if (head.tombstone || stored === undefined || stored.revision !== head.revision ||
            stored.generation !== head.generation || canonicalJson(stored.valueRef) !== canonicalJson(head.valueRef)) {
            throw corrupt("installed replica value does not match its head");
          }
          if (desired(row.state, a.policyEpochs).kind === "withheld") {
            throw corrupt("an installed record is withheld under the kept epochs"); // defence in depth (fixed)
          }
          return { state: row.state, materialization: row.mat, value: t.opened(projectId, row.key, stored) };
        }
        if (stored !== undefined) throw corrupt("withheld replica record still has a value");
        return { state: row.state, materialization: row.mat, value: null };
      });
      if (values.size > 0) throw corrupt("replica value has no record");
      return { projectId, recordVersion, entries };
    });
    return { projects };
  }

  listReceipts(): Receipt[] {
    return this.read((t) => t.receipts().map(({ streamId, sequence, ok, code, result, recordVersion }) =>
      ({ streamId, sequence, ok, code, result, recordVersion })));
  }

  /** awaitProjectEnvReplicaReady: activated, gate open, no attempt; waits for a commit that makes it so. */
  async awaitReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ready = this.read((t) => {
        const a = t.authority();
        return a.activated && a.gateOpen && a.attemptId === null;
      });
      if (ready) return;
      const left = deadline - Date.now();
      if (left <= 0) throw new ReadyTimeout();
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.listeners.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.listeners.add(done);
      });
    }
  }

  /** Every table, each row read back (values opened), as the `state` document. */
  exportState(): StateDocument {
    return this.read((t): StateDocument => {
      const a = t.authority();
      const values = (rows: Record<string, unknown>[]) => rows.map((r) => {
        const v = t.valueRow(r);
        const projectId = r["project_id"] as string;
        const key = r["key"] as string;
        return { ...(r["attempt_id"] === undefined ? {} : { attemptId: r["attempt_id"] as string }), projectId, key,
          revision: v.revision, generation: v.generation, valueRef: v.valueRef, value: t.opened(projectId, key, v) };
      });
      return {
        authority: { activated: a.activated, gateOpen: a.gateOpen, attemptId: a.attemptId, streamId: a.streamId,
          appliedSequence: a.appliedSequence, orgId: a.orgId, policyEpochs: a.policyEpochs },
        projects: t.projects(),
        records: t.allLive().map(({ projectId, key, state, mat }) => ({ projectId, key, state, materialization: mat })),
        values: values(t.rawTable("vals", "project_id, key")),
        stageProjects: t.rawTable("stage_projects", "attempt_id, project_id").map((r) => ({
          attemptId: r["attempt_id"] as string, projectId: r["project_id"] as string,
          recordVersion: (r["record_version"] as number | null) ?? null, lastKey: (r["last_key"] as string | null) ?? null,
          complete: r["complete"] === 1 })),
        stageRecords: t.allStage().map(({ attemptId, projectId, key, state, mat, present }) =>
          ({ attemptId, projectId, key, state, materialization: mat, present })),
        stageValues: values(t.rawTable("stage_vals", "attempt_id, project_id, key")) as StateDocument["stageValues"],
        receipts: t.receipts(),
      };
    });
  }

  // -- the database's life -------------------------------------------------------------------------------------------

  empty(): void {
    this.db.empty();
  }

  reopen(): void {
    this.db.reopen();
  }

  close(): void {
    this.db.close();
  }
}

