// Stand-in for dd-flow's `storage/immutable-input.js` (imported by the seed; not shipped).
//
// What the seed needs of it: `publishImmutableInput(file, bytes, conflictCode)` publishes `bytes` at `file` once:
// the same bytes there already are accepted (a rerun publishes again), other bytes are refused with
// `conflictCode` (the seed passes the refusal's name: `paired_migration_request_conflict`,
// `paired_migration_result_conflict`, `paired_recovery_request_conflict`, `paired_recovery_result_conflict`; the
// model's words for the first three). The publication is atomic and durable: written and fsynced under a
// temporary name, then hard-linked into place (a link never replaces a file: of two racing publishers one wins,
// the other compares), the temporary name removed (the published file has one link, as the seed's `restore`
// requires), the directory fsynced.
//
// Reading: none to choose. The refusal is an AppError whose code and `details.reason` are `conflictCode`.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { AppError } from "seed-root:shared/errors.js";
import { fsyncPath } from "../../src/durable.mjs";
import { point } from "../../src/stepper.mjs";

function conflict(file, conflictCode) {
    return new AppError(conflictCode, `Another publication is at ${file}`, 1, { reason: conflictCode, path: file });
}

export function publishImmutableInput(file, bytes, conflictCode) {
    point("publish:begin", { conflict: conflictCode });
    const data = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes);
    if (fs.existsSync(file)) {
        if (!fs.readFileSync(file).equals(data))
            throw conflict(file, conflictCode);
    }
    else {
        const tmp = `${file}.${crypto.randomUUID()}.tmp`;
        const fd = fs.openSync(tmp, "wx", 0o600);
        try {
            fs.writeSync(fd, data);
            fs.fsyncSync(fd);
        }
        finally {
            fs.closeSync(fd);
        }
        try {
            fs.linkSync(tmp, file);
        }
        catch (error) {
            if (error.code !== "EEXIST")
                throw error;
            if (!fs.readFileSync(file).equals(data))
                throw conflict(file, conflictCode);
        }
        finally {
            fs.rmSync(tmp, { force: true });
        }
        fsyncPath(path.dirname(file));
    }
    point("publish:end", { conflict: conflictCode });
}
