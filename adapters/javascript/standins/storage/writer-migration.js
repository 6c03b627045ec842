// Stand-in for dd-flow's `storage/writer-migration.js` (imported by the seed; not shipped): the one-store writer
// migration the paired migration runs twice (its "children"), and the logical drain check.
//
// What the seed needs of it (every call the seed makes):
// - `PreparedStoreWriterMigration.prepare({ requestId, requestFile, database, backup })`: reads the store and
//   prepares its request (the child input): `{ request_id, database, backup, source: { writer_version,
//   data_sha256 } }`. `inputArtifact()` is `{ path, sha256, base64 }` of those bytes (the seed embeds it in the
//   paired request and checks `database`, `backup`, `request_id` and `source.writer_version` in it).
// - `restoreInput(path, text, sha256)`: the child again from those bytes (their sha256 checked).
// - `retain()`: publishes the child input at its path, immutably (the same bytes again are fine).
// - `reconcile()`: the store's physical outcome: `not_applied` (still exactly its source: version and data),
//   `applied` (with its `receipt`), or `unknown`. Reading `receipt` (the model's `ReconcileReading.RECEIPT`): a
//   store is applied when it records this child's receipt (written by `apply()` in the same transaction as the
//   migrated data) at version 2: writes of the new version that landed after it reopened do not matter. The
//   receipt is what the store recorded, so its digest (the seed hashes it into the result) is the same on every
//   rerun.
// - `backup()`: copies the store to its backup file (VACUUM INTO a temporary file, fsynced, renamed into place).
//   Reading `keep` (`BackupReading.KEEP`): a backup is written once; when the file is there already (a rerun) it
//   is kept as it is.
// - `backupFacts()`: `{ database, backup, source_request_sha256, source_data_sha256, backup_sha256 }`: the
//   seed records them as the storage-backup evidence and compares them again on a rerun (`readEvidence`), and
//   reads `database`, `source_request_sha256` and `source_data_sha256` out of them.
// - `apply()`: migrates the store: its data (MIGRATE_SQL), contract version 2 (the seed's
//   `installStoreWriterContract`, after dropping the version 1 fence), the receipt, in one transaction. Reading
//   `skip` (`ApplyReading.SKIP`): a store already at version 2 is left as it is (the child is applied).
// - `verifyAppliedData()`: `{ database, source_request_sha256, writer_version, source_data_sha256, integrity,
//   foreign_key_violations }`, in that order: the seed compares it, as JSON, with what it derives from the backup
//   facts on a rerun. Whether the store is applied is `reconcile()`'s to say (the seed asks it next).
// - `recoveryReference()`: `{ path, sha256 }` of the child input.
// - `assertOriginal(db)`: through the seed's read-only connection (inside its transaction): the store is still
//   exactly its source, or `AppError("store_migration_outcome_unknown", ..., { reason: "source_changed" })`, the
//   error the seed's recovery catches to plan a restore (the glue names it `store_not_original` when it ends an
//   invocation: the model's word).
// - `sha256`: the child input's digest.
// - `assertStoreWriterDrain(db)`: the seed opens each store read-only and calls it before looking at
//   managed_processes. Reading: the stores are drained when no other process holds a store's file (its
//   database, -journal or -wal) open for writing: found in /proc/*/fd (by the file's device and inode) with a
//   write mode in /proc/*/fdinfo, this process and the adapter's ($ENVREPLICA_ADAPTER_PID) excepted. One is
//   refused `physical_owner_alive`, the model's refusal when a foreign writer is connected (the model's only
//   owner). A paused invocation holds no store open (the seed and the stand-ins close every connection before a
//   step boundary), so only the foreign writer is seen.
import fs from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { AppError } from "seed-root:shared/errors.js";
import { publishImmutableInput } from "./immutable-input.js";
import { installStoreWriterContract, STORE_WRITER_VERSION } from "./writer-contract.js";
import { fsyncPath } from "../../src/durable.mjs";
import { point } from "../../src/stepper.mjs";
import { CONTRACT_TABLE, MIGRATE_SQL, RECEIPTS_TABLE, databasePath, dataSha256, fileSha256, receiptOf, sha256, writerVersion }
    from "../../src/store.mjs";

const SCHEMA = "dd-flow/store-writer-migration@1";

function withDb(file, readOnly, fn) {
    const db = new DatabaseSync(file, { readOnly });
    try {
        return fn(db);
    }
    finally {
        db.close();
    }
}

function imageOf(db) {
    return { writer_version: writerVersion(db), data_sha256: dataSha256(db) };
}

export class PreparedStoreWriterMigration {
    sha256;
    #path;
    #text;
    #input;
    constructor(file, text, input) {
        this.#path = file;
        this.#text = text;
        this.#input = input;
        this.sha256 = sha256(text);
        Object.freeze(this);
    }
    static prepare({ requestId, requestFile, database, backup }) {
        if (!fs.existsSync(database))
            throw new AppError("store_not_found", `No store at ${database}`, 2, { reason: "store_not_found", database });
        const source = withDb(database, true, db => { db.exec("BEGIN"); return imageOf(db); });
        const input = { schema_id: SCHEMA, request_id: requestId, database, backup, source, target: { writer_version: STORE_WRITER_VERSION } };
        return new PreparedStoreWriterMigration(requestFile, JSON.stringify(input), input);
    }
    static restoreInput(file, text, expectedSha256) {
        if (sha256(text) !== expectedSha256)
            throw new AppError("store_migration_input_changed", `The child input ${file} is not what was prepared`, 2,
                { reason: "store_migration_input_changed", path: file });
        const input = JSON.parse(text);
        if (input.schema_id !== SCHEMA)
            throw new AppError("store_migration_input_invalid", `The child input ${file} is not a ${SCHEMA}`, 2, { path: file });
        return new PreparedStoreWriterMigration(file, text, input);
    }
    inputArtifact() {
        return { path: this.#path, sha256: this.sha256, base64: Buffer.from(this.#text).toString("base64") };
    }
    retain() {
        publishImmutableInput(this.#path, Buffer.from(this.#text), "store_migration_request_conflict");
        point("child:retained", { database: this.#input.database });
    }
    #outcome(db) {
        const now = imageOf(db), source = this.#input.source;
        if (now.writer_version === source.writer_version && now.data_sha256 === source.data_sha256)
            return { status: "not_applied" };
        const receipt = receiptOf(db, this.#input.request_id);
        if (receipt && receipt.source_data_sha256 === source.data_sha256 && now.writer_version === STORE_WRITER_VERSION)
            return { status: "applied", receipt: { ...receipt } };
        return { status: "unknown", reason: receipt ? "receipt_of_another_source" : "source_changed" };
    }
    reconcile() {
        point("child:reconcile", { database: this.#input.database });
        return withDb(this.#input.database, true, db => { db.exec("BEGIN"); return this.#outcome(db); });
    }
    backup() {
        const { database, backup } = this.#input;
        if (!fs.existsSync(backup)) {
            const tmp = `${backup}.tmp`;
            fs.rmSync(tmp, { force: true });
            withDb(database, true, db => db.prepare("VACUUM INTO ?").run(tmp));
            fsyncPath(tmp);
            fs.renameSync(tmp, backup);
            fsyncPath(path.dirname(backup));
        }
        point("child:backedUp", { database });
    }
    backupFacts() {
        const { database, backup, source } = this.#input;
        return { database, backup, source_request_sha256: this.sha256, source_data_sha256: source.data_sha256,
            backup_sha256: fs.existsSync(backup) ? fileSha256(backup) : null };
    }
    apply() {
        const { database, request_id: requestId, source } = this.#input;
        withDb(database, false, db => {
            if (writerVersion(db) === STORE_WRITER_VERSION)
                return; // reading skip: already at the new version
            db.exec("BEGIN IMMEDIATE");
            try {
                // the old fence goes with the old version (its triggers check the writer version row by row)
                for (const { name } of db.prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'dd_flow_writer_%'").all())
                    db.exec(`DROP TRIGGER "${name.replaceAll('"', '""')}"`);
                db.exec(MIGRATE_SQL);
                db.exec(`CREATE TABLE IF NOT EXISTS ${RECEIPTS_TABLE} (request_id TEXT PRIMARY KEY, source_writer_version INTEGER NOT NULL,
                    source_data_sha256 TEXT NOT NULL, target_writer_version INTEGER NOT NULL)`);
                db.prepare(`INSERT OR REPLACE INTO ${RECEIPTS_TABLE} (request_id, source_writer_version, source_data_sha256, target_writer_version)
                    VALUES (?, ?, ?, ?)`).run(requestId, source.writer_version, source.data_sha256, STORE_WRITER_VERSION);
                db.exec(`UPDATE ${CONTRACT_TABLE} SET version = ${STORE_WRITER_VERSION} WHERE id = 1`);
                installStoreWriterContract(db); // the seed's: version 2 and its fence on every table, in this transaction
                db.exec("COMMIT");
            }
            catch (error) {
                if (db.isTransaction)
                    db.exec("ROLLBACK");
                throw error;
            }
        });
        point("child:applied", { database });
    }
    verifyAppliedData() {
        const { database, source } = this.#input;
        return withDb(database, true, db => {
            db.exec("BEGIN");
            const integrity = db.prepare("PRAGMA integrity_check").all().map(row => Object.values(row)[0]).join("; ");
            const violations = db.prepare("PRAGMA foreign_key_check").all().length;
            return { database, source_request_sha256: this.sha256, writer_version: writerVersion(db), source_data_sha256: source.data_sha256,
                integrity, foreign_key_violations: violations };
        });
    }
    recoveryReference() {
        return { path: this.#path, sha256: this.sha256 };
    }
    assertOriginal(db) {
        const now = imageOf(db), source = this.#input.source;
        if (now.writer_version !== source.writer_version || now.data_sha256 !== source.data_sha256)
            throw new AppError("store_migration_outcome_unknown", `${this.#input.database} is no longer its prepared source`, 1,
                { reason: "source_changed", database: this.#input.database });
    }
    /** The source facts the child input records (the kit's observation reads them too). */
    sourceFacts() {
        return { ...this.#input.source };
    }
}

function fileIdentities(database) {
    const ids = new Set();
    for (const suffix of ["", "-journal", "-wal"]) {
        try {
            const st = fs.statSync(database + suffix);
            ids.add(`${st.dev}:${st.ino}`);
        }
        catch { /* not there */ }
    }
    return ids;
}

/** The pids of the processes other than this one and the adapter that hold `database` open for writing. */
export function physicalOwners(database) {
    const ids = fileIdentities(database);
    const exempt = new Set([String(process.pid), String(process.env.ENVREPLICA_ADAPTER_PID ?? "")]);
    const owners = [];
    let pids = [];
    try {
        pids = fs.readdirSync("/proc").filter(name => /^\d+$/.test(name) && !exempt.has(name));
    }
    catch {
        throw new AppError("owners_unobservable", "No /proc: physical owners cannot be observed", 2, { reason: "owners_unobservable" });
    }
    for (const pid of pids) {
        let fds;
        try {
            fds = fs.readdirSync(`/proc/${pid}/fd`);
        }
        catch {
            continue; // gone, or not ours to see
        }
        for (const fd of fds) {
            try {
                const st = fs.statSync(`/proc/${pid}/fd/${fd}`);
                if (!ids.has(`${st.dev}:${st.ino}`))
                    continue;
                const flags = /flags:\s*(\d+)/.exec(fs.readFileSync(`/proc/${pid}/fdinfo/${fd}`, "utf8"));
                if (flags && (parseInt(flags[1], 8) & 3) !== 0) { // O_WRONLY or O_RDWR
                    owners.push(Number(pid));
                    break;
                }
            }
            catch { /* closed meanwhile */ }
        }
    }
    return owners;
}

export function assertStoreWriterDrain(db) {
    const database = databasePath(db);
    if (!database)
        return;
    const owners = physicalOwners(database);
    if (owners.length)
        throw new AppError("physical_owner_alive", `${database} is held open for writing by pid ${owners.join(", ")}`, 2,
            { reason: "physical_owner_alive", database, pids: owners });
}
