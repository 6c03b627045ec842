/**
 * A replica's database for tests: one SQLite file (better-sqlite3) at `host.config().dbPath`, whose write
 * transactions report their commits to the kit (`host.afterWriteCommit()`, for `crashAfterCommit`), which a crash
 * (`reopen`) drops, and which a `reset` empties (`empty`).
 *
 * @module
 */

import Database from "better-sqlite3";

import type { Host } from "../kit/replica.js";

/** What a replica's database holds when it is new. */
export interface DatabaseOptions {
  /** SQL run at every open, e.g. CREATE TABLE IF NOT EXISTS ... (one or more statements). */
  schema: string;
  /**
   * Rows a fresh replica starts with: run in a transaction after `schema` at every open, and after `empty()`. Must
   * be idempotent (INSERT OR IGNORE).
   */
  seed?: (db: Database.Database) => void;
}

/** The replica's database, as `openDatabase` opens it. */
export interface TestDatabase {
  /** The open connection (WAL, busy_timeout) on host.config().dbPath; a new object after reopen(). */
  readonly connection: Database.Database;
  /**
   * A transaction that may write: BEGIN IMMEDIATE, fn, COMMIT; right after COMMIT it calls host.afterWriteCommit()
   * (counted whether or not a row changed, as docs/protocol.md section 6.3 counts). If fn throws, ROLLBACK, nothing
   * counted, rethrow. fn is synchronous.
   *
   * Under `crashAfterCommit: k`, the k-th counted commit's `afterWriteCommit()` throws the kit's crash signal: it
   * propagates out of `write` (the transaction is committed), and the operation must write nothing more, so let it
   * propagate. A function that returns a promise is refused (TypeError, rolled back): an `await` inside a
   * transaction would let other work run inside it.
   */
  write<T>(fn: (db: Database.Database) => T): T;
  /** A read-only transaction (BEGIN DEFERRED ... COMMIT); never counted. If fn throws, ROLLBACK and rethrow. */
  read<T>(fn: (db: Database.Database) => T): T;
  /** A crash: drop the connection without writing anything more, open the file again (schema + seed). */
  reopen(): void;
  /**
   * A fresh, empty replica in place: DELETE every row of every table the schema created, then `seed`. Not counted.
   */
  empty(): void;
  /** Close the connection (at end of input). `reopen()` opens it again. */
  close(): void;
}

function isPromiseLike(value: unknown): boolean {
  return value !== null && (typeof value === "object" || typeof value === "function")
    && typeof (value as { then?: unknown }).then === "function";
}

/** Run `fn` between `begin` and COMMIT on `db`; ROLLBACK and rethrow if it throws (or returns a promise). */
function transaction<T>(db: Database.Database, begin: string, fn: (db: Database.Database) => T): T {
  db.exec(begin);
  let result: T;
  try {
    result = fn(db);
    if (isPromiseLike(result)) {
      throw new TypeError("a transaction's function must be synchronous (it returned a promise): read values " +
        "before or after the transaction, not inside it");
    }
  } catch (error) {
    if (db.inTransaction) db.exec("ROLLBACK");
    throw error;
  }
  db.exec("COMMIT");
  return result;
}

/**
 * Open (or create) the replica's database at `host.config().dbPath`: WAL, `synchronous = NORMAL`,
 * `busy_timeout = 5000`, then `options.schema`, then `options.seed` in a transaction.
 */
export function openDatabase(host: Host, options: DatabaseOptions): TestDatabase {
  let current: Database.Database | null = null;

  const seed = (db: Database.Database) => {
    if (options.seed !== undefined) transaction(db, "BEGIN IMMEDIATE", options.seed);
  };
  const open = (): Database.Database => {
    const db = new Database(host.config().dbPath);
    try {
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = NORMAL");
      db.pragma("busy_timeout = 5000");
      db.exec(options.schema);
      seed(db);
    } catch (error) {
      db.close();
      throw error;
    }
    return db;
  };
  const connection = (): Database.Database => {
    if (current === null) current = open();
    return current;
  };
  const drop = () => {
    const db = current;
    current = null;
    // Closing rolls back a transaction left open; nothing more is written through this connection.
    db?.close();
  };
  current = open();

  return {
    get connection() {
      return connection();
    },
    write<T>(fn: (db: Database.Database) => T): T {
      const result = transaction(connection(), "BEGIN IMMEDIATE", fn);
      host.afterWriteCommit();
      return result;
    },
    read<T>(fn: (db: Database.Database) => T): T {
      return transaction(connection(), "BEGIN DEFERRED", fn);
    },
    reopen() {
      drop();
      current = open();
    },
    empty() {
      const db = connection();
      const tables = (db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' " +
        "ESCAPE '\\' ORDER BY name").all() as { name: string }[]).map((row) => row.name);
      transaction(db, "BEGIN IMMEDIATE", () => {
        for (const table of tables) db.exec(`DELETE FROM "${table.replace(/"/g, '""')}"`);
        options.seed?.(db);
      });
    },
    close() {
      drop();
    },
  };
}
