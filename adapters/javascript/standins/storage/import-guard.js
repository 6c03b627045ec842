// Stand-in for dd-flow's `storage/import-guard.js` (imported by the seed; not shipped): the stores' admission
// fence.
//
// What the seed needs of it:
// - `importGuardPath(home)`: the guard's file in a store's home (the seed keeps it, and `<it>.lock`, apart from
//   every path it publishes).
// - `beginStorageMaintenance({ home, projectRoot, workspaceRoot, sourceManifestSha256, importId })`: the
//   migration fences the home's stores: from now on no foreign writer may write them. Again by the same request
//   (a rerun): nothing to do.
// - `beginStorageRecovery({ home, ..., importId, originalSha256, recoverySha256 })`: the recovery fences them for
//   itself (over the migration's maintenance of the same import).
// - `completeStorageMaintenance({ home, ..., sourceManifestSha256 })`: the holder (the migration, or the recovery
//   with its own sha256) opens the home again.
//
// The guard is a file in the home naming who holds it: `{ kind: "maintenance" | "recovery", import_id,
// source_manifest_sha256 | recovery_sha256, ... }`, written atomically (a temporary file renamed into place,
// fsynced). Foreign writers read it through their admission callback (`storeAdmission(home)`, bound with the
// seed's `registerStoreWriter(db, admission)`: the fence triggers call `dd_flow_writer_version()`, which calls it
// row by row) and are refused while it is there.
//
// Readings and refusals, in the model's words: maintenance asked of a home a recovery holds is refused
// `store_under_recovery` (the model's `begin_maintenance`); a guard of another import (another request's
// permit) is refused `store_fenced` (unreachable in the model: one request per path); a recovery fence replaces
// the same import's maintenance; completing removes the guard of the same import whatever its kind (the model
// opens the store unconditionally; only the holder of the lock reaches it).
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { AppError } from "seed-root:shared/errors.js";
import { fsyncPath } from "../../src/durable.mjs";
import { point } from "../../src/stepper.mjs";

export function importGuardPath(home) {
    return path.join(home, "import-guard.json");
}

export function readImportGuard(home) {
    try {
        return JSON.parse(fs.readFileSync(importGuardPath(home), "utf8"));
    }
    catch (error) {
        if (error.code === "ENOENT")
            return null;
        throw new AppError("import_guard_invalid", `The import guard of ${home} cannot be read: ${error.message}`, 1, { home });
    }
}

function writeGuard(home, guard) {
    const file = importGuardPath(home), tmp = `${file}.${crypto.randomUUID()}.tmp`;
    const fd = fs.openSync(tmp, "wx", 0o600);
    try {
        fs.writeSync(fd, JSON.stringify(guard));
        fs.fsyncSync(fd);
    }
    finally {
        fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
    fsyncPath(home);
}

function fenced(home, guard) {
    return new AppError("store_fenced", `${home} is fenced by another import (${guard.import_id})`, 2,
        { reason: "store_fenced", home, import_id: guard.import_id });
}

export function beginStorageMaintenance({ home, projectRoot, workspaceRoot, sourceManifestSha256, importId }) {
    point("maintenance:begin", { home });
    const guard = readImportGuard(home);
    if (guard?.kind === "recovery")
        throw new AppError("store_under_recovery", `${home} is under recovery`, 1, { reason: "store_under_recovery", home });
    if (guard && (guard.import_id !== importId || guard.source_manifest_sha256 !== sourceManifestSha256))
        throw fenced(home, guard);
    if (!guard)
        writeGuard(home, { kind: "maintenance", import_id: importId, source_manifest_sha256: sourceManifestSha256,
            project_root: projectRoot, workspace_root: workspaceRoot });
    point("maintenance:done", { home });
}

export function beginStorageRecovery({ home, projectRoot, workspaceRoot, importId, originalSha256, recoverySha256 }) {
    point("recovery:begin", { home });
    const guard = readImportGuard(home);
    if (guard && guard.import_id !== importId)
        throw fenced(home, guard);
    if (!(guard?.kind === "recovery" && guard.recovery_sha256 === recoverySha256))
        writeGuard(home, { kind: "recovery", import_id: importId, original_sha256: originalSha256, recovery_sha256: recoverySha256,
            project_root: projectRoot, workspace_root: workspaceRoot });
    point("recovery:done", { home });
}

export function completeStorageMaintenance({ home, importId }) {
    point("maintenance:complete", { home });
    const guard = readImportGuard(home);
    if (guard && guard.import_id !== importId)
        throw fenced(home, guard);
    if (guard) {
        fs.rmSync(importGuardPath(home));
        fsyncPath(home);
    }
    point("maintenance:completed", { home });
}

/** A foreign writer's admission callback for a store in `home`: refuses while a guard is there. */
export function storeAdmission(home) {
    return () => {
        const guard = readImportGuard(home);
        if (guard)
            throw new AppError("admission_closed", `${home} is under ${guard.kind}: writers are refused`, 1,
                { reason: "admission_closed", kind: guard.kind });
    };
}
