// One invocation of the migration or its recovery: the kit's glue, the command line the seed does not show.
//
//   node --import src/register.mjs src/invocation.mjs  (environment: ENVREPLICA_MIGRATION_KIT_SOURCE, ENVREPLICA_INVOCATION
//   = JSON { role, requestFile, runHome, resourceHome, projectRoot, workspaceRoot, requestId, selectionSha256,
//   recoveryId }; fd 3: the step channel to the adapter, absent to run without pausing. Without
//   ENVREPLICA_INVOCATION the process is the adapter's spare: its modules loaded, it says `{ t: "spare" }` on the
//   channel and reads that JSON from it, one line, when it is needed)
//
// migrate: prepare a request with `PreparedPairedWriterMigration.prepare({...})`, or, when one is published at
// the request path, restore it (`PreparedPairedWriterMigration.restore(file, sha256 of its bytes)`), as an
// operator reruns the command; a prepared request is retained (`retain()`: the parent, then each child's input);
// then `apply()`.
// recover: restore the published migration request (none: refused `no_migration_request`); restore the published
// recovery request, or prepare one (`PreparedPairedWriterRecovery.prepare(migration, recoveryId)`); then
// `apply()`.
//
// Each model step's boundary is reported to the adapter (src/stepper.mjs), and the invocation waits there until
// told to go on. It ends with one message on the channel, `{ t: "exit", status, refusal, message }`, then exits
// with that status: 0 when it completed; a refusal's AppError exit code (the seed's `refuse` is 1); 3 for
// anything that is no refusal (`refusal: "internal error"`, the message is the stack).
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { KIT, seedRootOf } from "./register.mjs";
import * as stepper from "./stepper.mjs";

/** The seed's word -> the model's, where they differ (every other refusal is the seed's or a stand-in's word,
 * which is the model's). */
export const SEED_TO_MODEL = {
    // the recovery's assertOriginal on a store it judged unchanged (the seed's recovery catches exactly this
    // error to plan a restore; uncaught, in revalidate or restore, it ends the recovery)
    "store_migration_outcome_unknown/source_changed": "store_not_original",
};

/** The module at `rel` under the seed's root, or the kit's stand-in for it (the loader's rule). */
function moduleUrl(seedRoot, rel) {
    const seedFile = path.join(seedRoot, rel);
    return pathToFileURL(fs.existsSync(seedFile) ? seedFile : path.join(KIT, "standins", rel)).href;
}

export function refusalOf(error, AppError) {
    if (!(error instanceof AppError))
        return null;
    const reason = error.details?.reason;
    if (error.code === "paired_storage_migration_invalid" && typeof reason === "string")
        return reason;
    return SEED_TO_MODEL[`${error.code}/${reason}`] ?? error.code;
}

const sha256 = (bytes) => crypto.createHash("sha256").update(bytes).digest("hex");

async function main() {
    const source = path.resolve(process.env.ENVREPLICA_MIGRATION_KIT_SOURCE);
    const seedRoot = seedRootOf(source);
    const { AppError } = await import(moduleUrl(seedRoot, "shared/errors.js"));
    const seed = await import(pathToFileURL(source).href);
    const { PreparedPairedWriterMigration, PreparedPairedWriterRecovery } = seed;
    let fd = null;
    try {
        fs.fstatSync(3);
        fd = 3;
    }
    catch { /* no adapter: run through */ }
    // started ahead as a spare (the adapter's): what to run comes on the channel once it is needed
    const args = process.env.ENVREPLICA_INVOCATION ? JSON.parse(process.env.ENVREPLICA_INVOCATION) : stepper.awaitArgs(fd);
    const file = args.requestFile;
    stepper.install(args.role === "recover" ? "recover" : "prepare", fd, { resultFile: file + ".result.json" });
    let status = 0, refusal = null, message = "";
    try {
        if (args.role === "migrate") {
            if (fs.existsSync(file)) {
                const migration = PreparedPairedWriterMigration.restore(file, sha256(fs.readFileSync(file)));
                stepper.point("restored");
                migration.apply();
            }
            else {
                const migration = PreparedPairedWriterMigration.prepare({
                    requestId: args.requestId, selectionSha256: args.selectionSha256, requestFile: file,
                    projectRoot: args.projectRoot, workspaceRoot: args.workspaceRoot, runHome: args.runHome, resourceHome: args.resourceHome,
                });
                stepper.point("prepared");
                migration.retain();
                migration.apply();
            }
        }
        else if (args.role === "recover") {
            if (!fs.existsSync(file))
                throw new AppError("no_migration_request", `No migration request at ${file}`, 2, { reason: "no_migration_request" });
            const migration = PreparedPairedWriterMigration.restore(file, sha256(fs.readFileSync(file)));
            const recoveryFile = file + ".recovery.json";
            let recovery;
            if (fs.existsSync(recoveryFile)) {
                recovery = PreparedPairedWriterRecovery.restore(recoveryFile, sha256(fs.readFileSync(recoveryFile)));
                stepper.point("recover-restored");
            }
            else {
                stepper.point("recover");
                recovery = PreparedPairedWriterRecovery.prepare(migration, args.recoveryId);
                stepper.point("planned");
            }
            recovery.apply();
        }
        else {
            throw new Error(`no role ${args.role}`);
        }
    }
    catch (error) {
        refusal = refusalOf(error, AppError);
        if (refusal !== null) {
            status = Number.isInteger(error.exitCode) && error.exitCode > 0 ? error.exitCode : 1;
            message = `${error.code}: ${error.message}` + (error.details ? ` ${JSON.stringify(error.details)}` : "");
        }
        else {
            status = 3;
            refusal = "internal error";
            message = error?.stack ?? String(error);
        }
        process.stderr.write(`envreplica-js ${args.role}: ${refusal === "internal error" ? "failed" : `refused: ${refusal}`}: ${message}\n`);
    }
    if (fd === null)
        process.stderr.write(`steps: ${JSON.stringify(stepper.taken())}\n`);
    stepper.finish(status, refusal, message);
    process.exit(status);
}

await main();
