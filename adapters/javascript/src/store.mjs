// The kit's stores: what a run or resource store holds, how the kit reads it, and how it is built.
//
// A store is a dd-flow-like SQLite database: a data table `works` (a few fixed rows: the original data), a
// `managed_processes` table (one row naming a process that is long gone, so that the seed's drain observation
// has a registered process to look at and find dead), and the writer contract table `dd_flow_writer_contract`
// with its fence triggers (the seed's `storeWriterTriggerSql`) at version 1 or 2. The migration's child
// (standins/storage/writer-migration.js) migrates the data (every row's `state` becomes `v2:<state>`: migrating
// twice gives `v2:v2:...`, which is no longer "migrated"), installs contract version 2 with the seed's
// `installStoreWriterContract` and records its receipt in `dd_flow_migration_receipts`. A foreign writer's row is a
// `works` row whose id starts with MARKER_PREFIX.
//
// In the model's words (`spec.migration.Data`): the rows other than the markers equal to the original rows are
// `original`, equal to the original rows migrated once are `migrated`, anything else `other`; then `+Nw` for N
// marker rows. The contract version is read apart (`version`), so a store reset to version 2 with the original
// data is `original` at version 2, as the model has it.
import crypto from "node:crypto";
import fs from "node:fs";

export const DATA_TABLE = "works";
export const MARKER_PREFIX = "zz-foreign-";
export const ORIGINAL_ROWS = [
    { work_id: "WRK-001-plan", title: "Plan the cutover", state: "done" },
    { work_id: "WRK-002-copy", title: "Copy the runtime rows", state: "running" },
    { work_id: "WRK-003-check", title: "Check the receipts", state: "queued" },
];
export const MIGRATE_SQL = `UPDATE "${DATA_TABLE}" SET state = 'v2:' || state`;
export const MIGRATED_ROWS = ORIGINAL_ROWS.map(row => ({ ...row, state: `v2:${row.state}` }));
export const RECEIPTS_TABLE = "dd_flow_migration_receipts";
export const CONTRACT_TABLE = "dd_flow_writer_contract";

export const sha256 = (bytes) => crypto.createHash("sha256").update(bytes).digest("hex");

export function fileSha256(file) {
    return sha256(fs.readFileSync(file));
}

function rowsKey(rows) {
    return JSON.stringify(rows.map(r => [r.work_id, r.title, r.state]).sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}
const ORIGINAL_KEY = rowsKey(ORIGINAL_ROWS);
const MIGRATED_KEY = rowsKey(MIGRATED_ROWS);

function hasTable(db, name) {
    return Boolean(db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(name));
}

/** The writer contract version the store records (0 when it records none). */
export function writerVersion(db) {
    if (!hasTable(db, CONTRACT_TABLE))
        return 0;
    const row = db.prepare(`SELECT version FROM ${CONTRACT_TABLE} WHERE id = 1`).get();
    return row ? Number(row.version) : 0;
}

export function dataRows(db) {
    if (!hasTable(db, DATA_TABLE))
        return [];
    return db.prepare(`SELECT work_id, title, state FROM "${DATA_TABLE}" ORDER BY work_id`).all();
}

/** The digest of the store's data: every row of the data table, the foreign writers' included. */
export function dataSha256(db) {
    return sha256(rowsKey(dataRows(db)));
}

/** The store's data in the model's words ("original", "migrated+1w", "other"). */
export function dataWords(db) {
    const rows = dataRows(db);
    const kept = rows.filter(r => !String(r.work_id).startsWith(MARKER_PREFIX));
    const markers = rows.length - kept.length;
    const key = rowsKey(kept);
    const base = key === ORIGINAL_KEY ? "original" : key === MIGRATED_KEY ? "migrated" : "other";
    return base + (markers ? `+${markers}w` : "");
}

/** The receipt the migration's child recorded for `requestId`, or null. */
export function receiptOf(db, requestId) {
    if (!hasTable(db, RECEIPTS_TABLE))
        return null;
    return db.prepare(`SELECT request_id, source_writer_version, source_data_sha256, target_writer_version FROM ${RECEIPTS_TABLE} WHERE request_id = ?`)
        .get(requestId) ?? null;
}

/** The path of the database a connection has open (PRAGMA database_list: works on node:sqlite and the shim). */
export function databasePath(db) {
    const main = db.prepare("PRAGMA database_list").all().find(row => row.name === "main");
    return main?.file ?? null;
}

/**
 * Builds a store at `file`: the data (`data`: "original" or "migrated"), managed_processes, and writer contract
 * `version` (1: the contract table at version 1 and the seed's fence triggers on every table; 2: the seed's
 * `installStoreWriterContract`). `contract` is the seed's writer-contract.js module; `DatabaseSync` node:sqlite's.
 */
export function buildStore(file, { version, data }, contract, DatabaseSync) {
    fs.rmSync(file, { force: true });
    const db = new DatabaseSync(file);
    try {
        db.exec("BEGIN IMMEDIATE");
        db.exec(`CREATE TABLE "${DATA_TABLE}" (work_id TEXT PRIMARY KEY, title TEXT NOT NULL, state TEXT NOT NULL);
            CREATE TABLE managed_processes (process_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at TEXT, command TEXT NOT NULL);`);
        const insert = db.prepare(`INSERT INTO "${DATA_TABLE}" (work_id, title, state) VALUES (?, ?, ?)`);
        for (const row of data === "migrated" ? MIGRATED_ROWS : ORIGINAL_ROWS)
            insert.run(row.work_id, row.title, row.state);
        // a registered process that is gone: pid 1 is running, but not since this start time (a recycled pid)
        db.prepare("INSERT INTO managed_processes (process_id, pid, started_at, command) VALUES (?, ?, ?, ?)")
            .run("PRC-001-import", 1, "0-gone", "dd-flow import --resume");
        if (version === 1) {
            db.exec(`CREATE TABLE ${CONTRACT_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
                INSERT INTO ${CONTRACT_TABLE} (id, version) VALUES (1, 1);`);
            const tables = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all();
            for (const { name } of tables)
                for (const action of ["INSERT", "UPDATE", "DELETE"])
                    db.exec(contract.storeWriterTriggerSql(name, action).sql);
        }
        else if (version === 2) {
            contract.installStoreWriterContract(db);
        }
        else {
            throw new Error(`no writer contract version ${version}`);
        }
        db.exec("COMMIT");
    }
    finally {
        db.close();
    }
}
