/**
 * The seed's `./db`: its database on better-sqlite3 and drizzle-orm, with the seed's eight tables (`db-schema.ts`).
 *
 * One file (the adapter's `--db`, or one in a temporary directory), WAL, created with the tables and the authority
 * row of a replica that was never activated. `getDb()` is the open connection; `reopen()` drops it, without writing
 * anything more, and opens the file again (a crash, a restart); `emptyDb()` gives a fresh replica in place.
 *
 * Each `getDb().transaction(...)` that commits tells the kit (`host.afterWriteCommit()`, for `crashAfterCommit`)
 * when it is one the seed may write in: the first transaction of a page or delivery (its prepare transaction, which
 * commits even when it answers a refusal without writing), or any transaction that ran a write statement.
 */

import Database from "better-sqlite3";
import { drizzle, type BetterSQLite3Database } from "drizzle-orm/better-sqlite3";
import { getTableConfig, type SQLiteTable } from "drizzle-orm/sqlite-core";

import { host } from "../runtime.js";
import * as schema from "./db-schema.js";

export { schema };
export type Db = BetterSQLite3Database<typeof schema>;

const TABLES: SQLiteTable[] = Object.values(schema);

let sqlite: Database.Database | null = null;
let db: Db | null = null;
let writes = 0; // write statements run on this connection
let firstOfOperation = false; // the next transaction is an operation's first

/** The `CREATE TABLE` of one drizzle table, from its declaration. */
function createTable(table: SQLiteTable): string {
  const config = getTableConfig(table);
  const columns = config.columns.map(
    (column) =>
      `"${column.name}" ${column.getSQLType()}${column.notNull ? " NOT NULL" : ""}${column.primary ? " PRIMARY KEY" : ""}`,
  );
  for (const key of config.primaryKeys) {
    columns.push(`PRIMARY KEY (${key.columns.map((column) => `"${column.name}"`).join(", ")})`);
  }
  return `CREATE TABLE IF NOT EXISTS "${config.name}" (${columns.join(", ")})`;
}

const AUTHORITY_ROW =
  `INSERT OR IGNORE INTO "host_project_env_replica_authority" ` +
  `(id, activated, gate_open, stream_id, applied_sequence, attempt_id, org_id, policy_epochs_json, updated_at) ` +
  `VALUES ('replica', 0, 0, NULL, 0, NULL, NULL, '[]', ?)`;

function open(): void {
  const connection = new Database(host().config().dbPath);
  connection.pragma("journal_mode = WAL");
  connection.pragma("synchronous = NORMAL");
  connection.pragma("busy_timeout = 5000");
  connection.transaction(() => {
    for (const table of TABLES) connection.exec(createTable(table));
    connection.prepare(AUTHORITY_ROW).run(Date.now());
  })();
  // Count write statements: drizzle prepares each statement on this connection and writes through `run`.
  const prepare = connection.prepare.bind(connection);
  connection.prepare = ((source: string) => {
    const statement = prepare(source);
    if (!statement.reader) {
      const run = statement.run.bind(statement);
      statement.run = ((...parameters: unknown[]) => {
        writes += 1;
        return run(...parameters);
      }) as typeof statement.run;
    }
    return statement;
  }) as typeof connection.prepare;
  const database = drizzle(connection, { schema });
  const transaction = database.transaction.bind(database);
  database.transaction = ((run, config) => {
    const first = firstOfOperation;
    firstOfOperation = false;
    const before = writes;
    const result = transaction(run, config);
    if (first || writes > before) host().afterWriteCommit();
    return result;
  }) as typeof database.transaction;
  sqlite = connection;
  db = database;
}

export function getDb(): Db {
  if (db === null) open();
  return db!;
}

/** The raw connection (for the kit's `state` export). */
export function sqliteConnection(): Database.Database {
  getDb();
  return sqlite!;
}

/** The next transaction is the first of a page or delivery (its prepare transaction). */
export function startOperation(): void {
  firstOfOperation = true;
}

/** Drop the connection (nothing more is written through it) and open the file again. */
export function reopen(): void {
  closeDb();
  open();
}

export function closeDb(): void {
  const connection = sqlite;
  sqlite = null;
  db = null;
  connection?.close();
}

/** A fresh, empty replica in place: every row of every table gone, and a new authority row. */
export function emptyDb(): void {
  const connection = sqliteConnection();
  connection.transaction(() => {
    for (const table of TABLES) connection.exec(`DELETE FROM "${getTableConfig(table).name}"`);
    connection.prepare(AUTHORITY_ROW).run(Date.now());
  })();
}
