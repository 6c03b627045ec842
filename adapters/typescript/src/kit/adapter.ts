/**
 * The adapter side of the protocol, once for every TypeScript implementation (docs/protocol.md sections 5-7).
 *
 * `Adapter.handle` answers one decoded request with one response; `serve` reads request lines and writes response
 * lines in order. The implementation (a `Replica`) does the replica's work; the kit does the rest:
 *
 * - request checks and the `invalid` / `unsupported` answers (`contract.ts`), ids echoed exactly;
 * - the embedded value store and `store.put` / `store.fail` / `store.off` (`store.ts`);
 * - `duringFetch`: an operation's reader runs the nested requests at its first value-store read, after looking up
 *   the answer and before handing it back; `nested` is `[]` when the operation made no read;
 * - `restart`: the replica drops its connection and reopens the file, then the gate closes. Nested in a read, it
 *   loses every operation then in flight: each is answered "operation lost" and its read never returns, so it
 *   writes nothing more;
 * - `crashAfterCommit: k`: the k-th `host.afterWriteCommit()` of the operation throws the crash signal; the replica
 *   is then reopened and its gate closed, and the answer is `{"crashedAfterCommit": k}`;
 * - `ready`, `diagnostics` (derived from `readSnapshot` and `readStatus` when the implementation has no `diagnose`),
 *   and `state`.
 */

import { CONSTANTS, checkRequest, InvalidRequest, requestId, UnknownOp } from "./contract.js";
import { decodeLine, encodeLine } from "./json.js";
import { errorKind as defaultErrorKind } from "../host/errors.js";
import type { ApplyFrame, BeginFrame, CommitFrame, PageFrame, PolicyEpochs } from "./generated/contract.js";
import type { CreateReplica, ErrorKind, Host, HostConfig, Replica, ValueReader } from "./replica.js";
import { EmbeddedStore, legacyText, stagedText, type Ref } from "./store.js";

export const OPERATION_LOST_RESTART = "operation lost: the replica restarted inside its value-store read";
export const OPERATION_LOST_RESET = "operation lost: the replica was reset inside its value-store read";
export const OPERATION_LOST_CRASH =
  "operation lost: the replica crashed (crashAfterCommit) inside its value-store read";

type Id = number | bigint | null;
type Json = unknown;
type Response = { id: Id; ok: boolean; result?: Json; error?: { type: string; message: string }; nested?: Response[] };

/** Thrown by `host.afterWriteCommit()` at the commit a `crashAfterCommit` names: the process dies there. */
export class CrashSignal extends Error {
  constructor(readonly afterCommit: number) {
    super(`crash right after write commit ${afterCommit} (crashAfterCommit)`);
    this.name = "CrashSignal";
  }
}

/** An operation taken by a crash or restart inside its value-store read. */
class OperationLost extends Error {}

/** An answer `unsupported`: an op or field the implementation does not offer. */
class Unsupported extends Error {}

/** One page or delivery in progress. */
interface Operation {
  readonly lives: number; // the replica's life when it started: a restart, reset or crash ends that life
  readonly duringFetch: unknown[] | null; // the requests to run at its first read
  readonly nested: Response[] | null; // their responses
  readonly depth: number; // how deep this operation is nested
  readBegun: boolean; // whether its first value-store read has begun
  lost: ((message: string) => void) | null; // answers the operation as lost (set while it runs)
}

/** Options of an adapter. */
export interface AdapterOptions {
  dbPath: string;
  masterKey?: Buffer;
  log?: (message: string) => void;
}

const TEST_MASTER_KEY = Buffer.from(CONSTANTS.testMasterKeyHex, "hex");

function error(id: Id, type: string, message: string): Response {
  return { id, ok: false, error: { type, message } };
}

export class Adapter {
  private replica!: Replica;
  private settings: HostConfig;
  private readonly configuredKey: Buffer;
  private readonly store = new EmbeddedStore();
  private storeOn = true;
  private lives = 0;
  private lastDrop = OPERATION_LOST_RESTART;
  private starting: Operation | null = null; // the operation whose reader `host.valueReader()` gives now
  private crash: { at: number; made: number } | null = null; // the armed crashAfterCommit
  private readonly log: (message: string) => void;
  readonly host: Host;

  private constructor(options: AdapterOptions) {
    this.configuredKey = options.masterKey ?? TEST_MASTER_KEY;
    this.settings = {
      dbPath: options.dbPath,
      masterKey: this.configuredKey,
      prefix: CONSTANTS.defaultPrefix,
      ackPageBytes: CONSTANTS.defaultAckPageBytes,
    };
    this.log = options.log ?? ((message) => process.stderr.write(`${message}\n`));
    this.host = {
      config: () => this.settings,
      valueReader: () => (this.storeOn ? this.reader(this.starting) : null),
      afterWriteCommit: () => this.afterWriteCommit(),
      log: (message) => this.log(message),
    };
  }

  /**
   * An adapter over the replica `create` builds (its database at `options.dbPath`: a new one, or the file as an
   * earlier process left it). Its gate is then closed, as the host does on every (re)connection.
   */
  static async open(create: CreateReplica, options: AdapterOptions): Promise<Adapter> {
    const adapter = new Adapter(options);
    adapter.replica = await create(adapter.host);
    await adapter.replica.closeGate();
    return adapter;
  }

  async close(): Promise<void> {
    await this.replica.close();
  }

  // -- the value store and duringFetch -------------------------------------------------------------------------------

  private reader(op: Operation | null): ValueReader {
    return {
      readStaged: async (name) => stagedText(await this.read(op, name, null)),
      readLegacy: async (name, version) => legacyText(await this.read(op, name, version), version),
    };
  }

  private async read(op: Operation | null, name: string, version: number | null) {
    const answer = this.store.lookup(name, version); // the moment the read begins
    if (op !== null && !op.readBegun) {
      op.readBegun = true;
      if (op.duringFetch !== null) await this.runNested(op);
    }
    if (op !== null && op.lives !== this.lives) {
      op.lost?.(this.lastDrop);
      return new Promise<never>(() => {}); // the process that made this read is gone: it never returns
    }
    return answer;
  }

  private async runNested(op: Operation): Promise<void> {
    for (const request of op.duringFetch!) {
      op.nested!.push(
        op.depth + 1 > CONSTANTS.maxNesting
          ? error(requestId(request), "invalid",
            `invalid request: duringFetch nests deeper than ${CONSTANTS.maxNesting} requests (the contract's ` +
            `limit); nothing was done. Nest at most ${CONSTANTS.maxNesting} levels.`)
          : await this.handle(request, op.depth + 1),
      );
    }
  }

  private afterWriteCommit(): void {
    if (this.crash === null) return;
    this.crash.made += 1;
    if (this.crash.made >= this.crash.at) {
      const at = this.crash.at;
      this.crash = null;
      throw new CrashSignal(at);
    }
  }

  // -- lifecycle -----------------------------------------------------------------------------------------------------

  /** The process died and starts again: the replica reopens its file and the gate closes, as the host does. */
  private async restart(lost: string): Promise<void> {
    await this.replica.reopen();
    this.lives += 1;
    this.lastDrop = lost;
    await this.replica.closeGate();
  }

  private async reset(config: Record<string, unknown> | null | undefined): Promise<void> {
    const c = config ?? {};
    this.settings = {
      dbPath: this.settings.dbPath,
      masterKey: typeof c["masterKeyHex"] === "string" ? Buffer.from(c["masterKeyHex"], "hex") : this.configuredKey,
      prefix: typeof c["prefix"] === "string" ? c["prefix"] : CONSTANTS.defaultPrefix,
      ackPageBytes: typeof c["ackPageBytes"] === "number" ? c["ackPageBytes"] : CONSTANTS.defaultAckPageBytes,
    };
    this.store.clear();
    this.storeOn = true;
    await this.replica.empty();
    this.lives += 1;
    this.lastDrop = OPERATION_LOST_RESET;
  }

  // -- one request ---------------------------------------------------------------------------------------------------

  /** The response to one decoded request (nested requests pass their depth). Never throws. */
  async handle(request: unknown, depth = 0): Promise<Response> {
    const id = requestId(request);
    let op: string;
    let fields: Record<string, unknown>;
    try {
      ({ op, fields } = checkRequest(request));
    } catch (e) {
      if (e instanceof InvalidRequest) return error(id, "invalid", e.message);
      if (e instanceof UnknownOp) return error(id, "unsupported", e.message);
      return error(id, "unsupported", `internal error: ${describe(e)}`);
    }
    const nested: Response[] | null = Array.isArray(fields["duringFetch"]) ? [] : null;
    let response: Response;
    try {
      response = { id, ok: true, result: await this.run(op, fields, nested, depth) };
    } catch (e) {
      response = this.failure(id, e);
    }
    if (nested !== null) response.nested = nested;
    return response;
  }

  /** The replica's `errorKind`, or the kit's default (`InvalidInputError`, `CorruptReplicaError`). */
  private errorKind(e: unknown): ErrorKind | undefined {
    return this.replica.errorKind !== undefined ? this.replica.errorKind(e) : defaultErrorKind(e);
  }

  private failure(id: Id, e: unknown): Response {
    if (e instanceof OperationLost || e instanceof Unsupported) return error(id, "unsupported", e.message);
    const kind = this.errorKind(e);
    if (kind !== undefined) return error(id, kind, e instanceof Error ? e.message : String(e));
    return error(id, "unsupported", `internal error: ${describe(e)}`);
  }

  private async run(op: string, f: Record<string, unknown>, nested: Response[] | null, depth: number): Promise<Json> {
    const r = this.replica;
    switch (op) {
      case "reset":
        await this.reset(f["config"] as Record<string, unknown> | null | undefined);
        return {};
      case "store.put": {
        const { name, version } = EmbeddedStore.target(this.settings.prefix, f["projectId"] as string,
          f["key"] as string, f["ref"] as Ref);
        const reported = typeof f["reportedVersion"] === "number" ? f["reportedVersion"] : null;
        this.store.set(name, version, { kind: "found", raw: f["raw"] as string, reportedVersion: reported });
        return {};
      }
      case "store.fail": {
        const { name, version } = EmbeddedStore.target(this.settings.prefix, f["projectId"] as string,
          f["key"] as string, f["ref"] as Ref);
        this.store.set(name, version, f["mode"] === "missing" ? { kind: "missing" } : { kind: "error" });
        return {};
      }
      case "store.off":
        this.storeOn = false; // for operations that start from now on (each fixes its reader when it starts)
        return {};
      case "begin":
        // Frames and begin's arguments are passed unchecked, typed as the replica declares them: checking them is the
        // replica's job, and the gate holds it to that (Replica's TSDoc).
        return await r.begin(f["frame"] as BeginFrame, f["keptPolicyEpochs"] as PolicyEpochs, f["orgId"] as string);
      case "page":
      case "delivery":
        return await this.operation(op, f, nested, depth);
      case "commit":
        return await r.complete(f["frame"] as CommitFrame);
      case "close":
        await r.closeGate();
        return {};
      case "status":
        return await r.readStatus();
      case "snapshot":
        return await r.readSnapshot(f["projectIds"] as string[]);
      case "receipts":
        return (await r.listReceipts()).map((receipt) => ({ // the wire's keys only (no MAC)
          streamId: receipt.streamId,
          sequence: receipt.sequence,
          ok: receipt.ok,
          code: receipt.code,
          result: receipt.result,
          recordVersion: receipt.recordVersion,
        }));
      case "restart":
        await this.restart(OPERATION_LOST_RESTART);
        return {};
      case "ready":
        return await this.ready(f["timeoutMs"] as number);
      case "diagnostics":
        return await this.diagnostics(f["projectIds"] as string[]);
      case "state":
        if (r.exportState === undefined) {
          throw new Unsupported("unsupported: this implementation offers no state export (exportState); nothing was done");
        }
        return await r.exportState();
      default:
        throw new Unsupported(`unsupported: op '${op}' is not implemented by this kit; nothing was done`);
    }
  }

  /** A page or delivery: its reader, its duringFetch, a crash it asks for, and its loss in a nested restart. */
  private async operation(op: string, f: Record<string, unknown>, nested: Response[] | null, depth: number) {
    const crashAt = typeof f["crashAfterCommit"] === "number" ? f["crashAfterCommit"] : null;
    if (crashAt !== null && this.replica.crashesAfterCommit !== true) {
      throw new Unsupported("unsupported: this implementation does not report its write commits "
        + "(crashesAfterCommit), so it cannot crash after one; nothing was done");
    }
    const operation: Operation = {
      lives: this.lives,
      duringFetch: nested === null ? null : (f["duringFetch"] as unknown[]),
      nested,
      depth,
      readBegun: false,
      lost: null,
    };
    const lost = new Promise<never>((_resolve, reject) => {
      operation.lost = (message) => reject(new OperationLost(message));
    });
    const reader = this.storeOn ? this.reader(operation) : null;
    if (crashAt !== null) this.crash = { at: crashAt, made: 0 };
    this.starting = operation;
    let running: Promise<Json>;
    try {
      running = op === "page"
        ? this.replica.applyPage(f["frame"] as PageFrame, reader)
        : this.replica.applyDelivery(f["frame"] as ApplyFrame, reader);
    } catch (e) {
      running = Promise.reject(e);
    } finally {
      this.starting = null;
    }
    // A lost operation's promise never settles, and a settled race leaves the other side unobserved: neither may
    // end the process as an unhandled rejection.
    running.catch(() => {});
    lost.catch(() => {});
    try {
      return await Promise.race([running, lost]);
    } catch (e) {
      if (e instanceof CrashSignal) {
        await this.restart(OPERATION_LOST_CRASH);
        return { crashedAfterCommit: e.afterCommit };
      }
      if (!(e instanceof OperationLost) && operation.lives !== this.lives) {
        throw new OperationLost(this.lastDrop); // its replica was closed under it: how it unwound is moot
      }
      throw e;
    } finally {
      if (crashAt !== null) this.crash = null;
      operation.lost = null;
    }
  }

  private async ready(timeoutMs: number): Promise<Json> {
    const r = this.replica;
    if (r.awaitReady === undefined) {
      throw new Unsupported("unsupported: this implementation offers no readiness wait (awaitReady); nothing was done");
    }
    try {
      await r.awaitReady(timeoutMs);
      return { ready: true };
    } catch (e) {
      if (r.isReadyTimeout?.(e) === true) return { ready: false };
      throw e;
    }
  }

  /** Why a snapshot of `projectIds` fails closed, in the contract's order of reasons (null: it serves). */
  private async diagnostics(projectIds: string[]): Promise<Json> {
    const r = this.replica;
    if (r.diagnose !== undefined) return await r.diagnose(projectIds);
    if ((await r.readSnapshot(projectIds)) !== null) return null;
    let status;
    try {
      status = await r.readStatus();
    } catch (e) {
      if (this.errorKind(e) === "corrupt") return { reason: "corrupt", message: "the replica's authority row does not hold" };
      throw e;
    }
    if (!status.activated) return { reason: "not_activated", message: "no snapshot attempt was ever begun" };
    if (!status.gateOpen || status.attemptId !== null) {
      return { reason: "gate_closed", message: "the serving gate is closed (idle, or a snapshot attempt is open)" };
    }
    const asked = [...new Set(projectIds)].sort();
    if (asked.length !== projectIds.length || asked.join("\u0000") !== status.projectIds.join("\u0000")) {
      return { reason: "projects_mismatch", message: "the ids asked for are not exactly the replica's projects, once each" };
    }
    return { reason: "corrupt", message: "a stored row, set or seal does not hold, so nothing is served" };
  }
}

function describe(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/**
 * Answer every line of `input` on `output`, in order, until end of input; returns the number of lines answered.
 * Each line is one request (its trailing `\r` dropped); one that is not JSON is answered `invalid` with id null.
 */
export async function serve(
  adapter: Adapter,
  input: AsyncIterable<Uint8Array>,
  write: (line: string) => void,
): Promise<number> {
  let count = 0;
  let pending: Buffer[] = [];
  const answer = async (line: Buffer): Promise<void> => {
    const decoded = decodeLine(line);
    const response = decoded.ok
      ? await adapter.handle(decoded.value)
      : error(null, "invalid", `invalid request: the line could not be read: ${decoded.reason}. Send one JSON object per line.`);
    write(encodeLine(response) + "\n");
    count += 1;
  };
  for await (const chunk of input) {
    let start = 0;
    const bytes = Buffer.from(chunk);
    for (let i = bytes.indexOf(0x0a); i !== -1; i = bytes.indexOf(0x0a, start)) {
      pending.push(bytes.subarray(start, i));
      const line = Buffer.concat(pending);
      pending = [];
      start = i + 1;
      await answer(line);
    }
    if (start < bytes.length) pending.push(bytes.subarray(start));
  }
  if (pending.length > 0) await answer(Buffer.concat(pending));
  return count;
}
