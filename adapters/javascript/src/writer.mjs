// The foreign writer: a long-lived process of its own (so the seed's drain observation sees it as another process
// holding a store open), one connection at a time, told what to do one JSON line at a time on standard input:
//
//   {"op": "connect", "path": P}     open P read-write (node:sqlite, or the kit's shim), its schema read: the file
//                                    is held open for writing from now on
//   {"op": "write", "version": V, "home": H, "marker": M}
//                                    as a writer of contract version V, insert one `works` row with id M:
//                                    V = 2: the seed's `registerStoreWriter(db, admission)` (STORE_WRITER_VERSION
//                                    is 2); V = 1: the previous release's registration, the same function at
//                                    version 1 (`legacyRegisterStoreWriter`). `admission` refuses while the home's
//                                    import guard is there; the fence triggers call it row by row.
//   {"op": "disconnect"}             close the connection
//   {"op": "quit"}
//
// Each answer is one line: `{"ok": true}`, or for a write `{"ok": true, "outcome": "landed" | "fence" |
// "read-only", "error"?: TEXT}`, or `{"ok": false, "error": TEXT}` when something failed that is no outcome.
// `fence`: the admission refused (the store is under maintenance or recovery), a fence trigger raised
// `store_writer_incompatible`, or the registration refused the store's contract version.
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { pathToFileURL } from "node:url";
import { KIT, seedRootOf } from "./register.mjs";
import { DATA_TABLE } from "./store.mjs";

function moduleUrl(seedRoot, rel) {
    const seedFile = path.join(seedRoot, rel);
    return pathToFileURL(fs.existsSync(seedFile) ? seedFile : path.join(KIT, "standins", rel)).href;
}

const seedRoot = seedRootOf(process.env.ENVREPLICA_MIGRATION_KIT_SOURCE);
const { DatabaseSync } = await import("node:sqlite");
const contract = await import(moduleUrl(seedRoot, "storage/writer-contract.js"));
const guard = await import(moduleUrl(seedRoot, "storage/import-guard.js"));
const { AppError } = await import(moduleUrl(seedRoot, "shared/errors.js"));

/** The writer contract before the seed's release (version 1): the seed's registerStoreWriter at version 1. */
export function legacyRegisterStoreWriter(db, admission) {
    const current = contract.readStoreWriterContract(db);
    if (current !== null && current !== 1)
        throw new AppError("store_writer_incompatible", "This CLI cannot write the store's required contract", 1, { required: current, supported: 1 });
    if (admission)
        contract.bindStoreWriterAdmission(db, admission);
    db.function("dd_flow_writer_version", () => { admission?.(); return 1; });
}

function admissionOf(home) {
    return () => {
        if (fs.existsSync(guard.importGuardPath(home)))
            throw new AppError("admission_closed", `${home} is fenced: writers are refused`, 1, { reason: "admission_closed" });
    };
}

export function classify(error) {
    if (error instanceof AppError && ["admission_closed", "store_writer_incompatible"].includes(error.code))
        return "fence";
    const text = String(error?.message ?? error);
    if (text.includes("store_writer_incompatible") || text.includes("admission_closed"))
        return "fence";
    const low = text.toLowerCase();
    if (low.includes("readonly") || low.includes("read-only") || low.includes("disk i/o error"))
        return "read-only";
    return null;
}

let db = null;

function close() {
    if (db) {
        try {
            db.close();
        }
        catch { /* closed already */ }
        db = null;
    }
}

function handle(request) {
    switch (request.op) {
        case "connect":
            close();
            db = new DatabaseSync(request.path);
            db.prepare("SELECT count(*) AS n FROM sqlite_schema").get();
            return { ok: true };
        case "disconnect":
            close();
            return { ok: true };
        case "write": {
            if (!db)
                return { ok: false, error: "not connected" };
            try {
                const admission = admissionOf(request.home);
                if (request.version === contract.STORE_WRITER_VERSION)
                    contract.registerStoreWriter(db, admission);
                else if (request.version === 1)
                    legacyRegisterStoreWriter(db, admission);
                else
                    return { ok: false, error: `no writer of version ${request.version}` };
                db.prepare(`INSERT INTO "${DATA_TABLE}" (work_id, title, state) VALUES (?, ?, ?)`)
                    .run(request.marker, "a foreign writer's row", "queued");
                return { ok: true, outcome: "landed" };
            }
            catch (error) {
                try {
                    if (db.isTransaction)
                        db.exec("ROLLBACK");
                }
                catch { /* nothing to roll back */ }
                const outcome = classify(error);
                return outcome ? { ok: true, outcome, error: String(error?.message ?? error) }
                    : { ok: false, error: String(error?.stack ?? error) };
            }
        }
        default:
            return { ok: false, error: `unknown op ${request.op}` };
    }
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
    if (!line.trim())
        continue;
    const request = JSON.parse(line);
    if (request.op === "quit")
        break;
    let answer;
    try {
        answer = handle(request);
    }
    catch (error) {
        answer = { ok: false, error: String(error?.stack ?? error) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
}
close();
process.exit(0);
