// Stand-in for dd-flow's `storage/writer-restore.js` (imported by the seed; not shipped): the one-store restore
// of a child migration from its backup, which the paired recovery runs for each store it judged changed.
//
// What the seed needs of it (every call the seed makes):
// - `PreparedStoreWriterRestore.prepare(child, { recoveryId, requestFile })`: under the installation lock, for a
//   store whose backup exists (the seed checked): the restore's input, `{ recovery_id, database, backup,
//   backup_sha256, migration: child.recoveryReference() }` (the seed checks `recovery_id` in it).
//   `inputArtifact()` is `{ path, sha256, base64 }` of those bytes.
// - `restoreInput(child, path, text, sha256)`: the restore again from those bytes (their sha256 checked).
// - `revalidatePrepared()`: the backup is still there (`changed_store_has_no_backup`: the model's
//   `_backup_problem`) and still what was prepared (`recovery_backup_changed`).
// - `retain()`: publishes the restore's input at its path, immutably.
// - `apply()`: restores the store from its backup, checked again first: the backup copied beside the store,
//   fsynced, renamed over it (atomic: the store is either what it was or the backup; the seed drained the store
//   first, so no writer holds the old file open). Returns its receipt, `{ database, backup_sha256 }`: the same on
//   every rerun (the seed hashes it into the recovery result, published once).
// - `reconcile()`: `restored` when the store holds exactly what its backup holds (contract version and data),
//   else `not_restored`.
//
// Reading: none beyond the model's: a restore puts back the backup as it is (`v<version>:<data>` of the backup).
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { AppError } from "seed-root:shared/errors.js";
import { publishImmutableInput } from "./immutable-input.js";
import { fsyncPath } from "../../src/durable.mjs";
import { dataSha256, fileSha256, sha256, writerVersion } from "../../src/store.mjs";

const SCHEMA = "dd-flow/store-writer-restore@1";

function imageOf(file) {
    const db = new DatabaseSync(file, { readOnly: true });
    try {
        db.exec("BEGIN");
        return { writer_version: writerVersion(db), data_sha256: dataSha256(db) };
    }
    finally {
        db.close();
    }
}

export class PreparedStoreWriterRestore {
    sha256;
    #child;
    #path;
    #text;
    #input;
    constructor(child, file, text, input) {
        this.#child = child;
        this.#path = file;
        this.#text = text;
        this.#input = input;
        this.sha256 = sha256(text);
        Object.freeze(this);
    }
    static prepare(child, { recoveryId, requestFile }) {
        const facts = child.backupFacts();
        if (!facts.backup_sha256)
            throw new AppError("changed_store_has_no_backup", `${facts.database} changed and has no backup`, 1,
                { reason: "changed_store_has_no_backup", database: facts.database });
        const input = { schema_id: SCHEMA, recovery_id: recoveryId, database: facts.database, backup: facts.backup,
            backup_sha256: facts.backup_sha256, migration: child.recoveryReference() };
        return new PreparedStoreWriterRestore(child, requestFile, JSON.stringify(input), input);
    }
    static restoreInput(child, file, text, expectedSha256) {
        if (sha256(text) !== expectedSha256)
            throw new AppError("store_restore_input_changed", `The restore input ${file} is not what was prepared`, 2,
                { reason: "store_restore_input_changed", path: file });
        const input = JSON.parse(text);
        if (input.schema_id !== SCHEMA || JSON.stringify(input.migration) !== JSON.stringify(child.recoveryReference()))
            throw new AppError("store_restore_input_invalid", `The restore input ${file} is not this migration's`, 2, { path: file });
        return new PreparedStoreWriterRestore(child, file, text, input);
    }
    inputArtifact() {
        return { path: this.#path, sha256: this.sha256, base64: Buffer.from(this.#text).toString("base64") };
    }
    revalidatePrepared() {
        const { database, backup, backup_sha256: expected } = this.#input;
        if (!fs.existsSync(backup))
            throw new AppError("changed_store_has_no_backup", `${database} changed and its backup ${backup} is gone`, 1,
                { reason: "changed_store_has_no_backup", database });
        if (fileSha256(backup) !== expected)
            throw new AppError("recovery_backup_changed", `The backup ${backup} is not what the recovery prepared`, 2,
                { reason: "recovery_backup_changed", backup });
    }
    retain() {
        publishImmutableInput(this.#path, Buffer.from(this.#text), "paired_recovery_child_conflict");
    }
    apply() {
        this.revalidatePrepared();
        const { database, backup, backup_sha256: backupSha256 } = this.#input;
        const tmp = path.join(path.dirname(database), `.${path.basename(database)}.restore-${crypto.randomUUID()}`);
        fs.copyFileSync(backup, tmp);
        if (fileSha256(tmp) !== backupSha256) {
            fs.rmSync(tmp, { force: true });
            throw new AppError("recovery_backup_changed", `The backup ${backup} changed while it was copied`, 2,
                { reason: "recovery_backup_changed", backup });
        }
        fsyncPath(tmp);
        fs.renameSync(tmp, database);
        for (const suffix of ["-journal", "-wal", "-shm"])
            fs.rmSync(database + suffix, { force: true }); // none after a drained, closed store; never the backup's
        fsyncPath(path.dirname(database));
        return { database, backup_sha256: backupSha256 };
    }
    reconcile() {
        const now = imageOf(this.#input.database), then = imageOf(this.#input.backup);
        return now.writer_version === then.writer_version && now.data_sha256 === then.data_sha256
            ? { status: "restored" } : { status: "not_restored" };
    }
}
