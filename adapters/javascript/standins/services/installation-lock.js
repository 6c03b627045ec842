// Stand-in for dd-flow's `services/installation-lock.js` (imported by the seed; not shipped).
//
// What the seed needs of it: `acquireInstallationLock(lockPath, sha256)` returns a lease `{ assertOwnership,
// release }`; the seed takes it before `applyLocked` (migrate) and around recovery's `prepare` and `apply`,
// passes `assertOwnership` around unbound and calls it before each store is touched, and releases it in
// `withStoreCleanup`'s cleanup whatever happened.
//
// Reading (the model's `LockReading.REFUSE`, declared in `hello` as `"lock": "refuse"`): while another live
// invocation holds the lock, a second one is refused at once, `installation_lock_held` (the reading envreplica's
// own implementation takes; `wait` would block an invocation inside a step, which a lockstep cannot drive). A
// crashed holder's lock is free: the lock is a directory holding owner.json (pid, start time, the request's
// sha256), made atomically (written under a temporary name, then renamed into place); a lock whose owner is not
// running (no such pid, a zombie, or a pid of another start time) is stale and is taken over, as the seed's own
// projection-lock.js takes over a stale projection lock. `assertOwnership()` checks the lock is still this
// process's (`installation_lock_lost` otherwise); `release()` removes it if it is.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { AppError } from "seed-root:shared/errors.js";
import { processStartedAt } from "./managed-processes.js";
import { point } from "../../src/stepper.mjs";

function readOwner(lockPath) {
    try {
        return JSON.parse(fs.readFileSync(path.join(lockPath, "owner.json"), "utf8"));
    }
    catch {
        return null;
    }
}

/** The live holder of the lock at `lockPath` (its owner record), or null. */
export function installationLockHolder(lockPath) {
    const owner = readOwner(lockPath);
    if (!owner)
        return null;
    const started = processStartedAt(owner.pid);
    return started !== null && started === owner.started_at ? owner : null;
}

export function acquireInstallationLock(lockPath, sha256) {
    const owner = { pid: process.pid, started_at: processStartedAt(process.pid), sha256, token: crypto.randomUUID() };
    for (;;) {
        const staging = `${lockPath}.${owner.token}.tmp`;
        fs.mkdirSync(staging);
        fs.writeFileSync(path.join(staging, "owner.json"), JSON.stringify(owner));
        try {
            fs.renameSync(staging, lockPath);
            break;
        }
        catch (error) {
            fs.rmSync(staging, { recursive: true, force: true });
            if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST")
                throw error;
        }
        const holder = installationLockHolder(lockPath);
        if (holder)
            throw new AppError("installation_lock_held", `Another invocation (pid ${holder.pid}) holds the installation lock`, 2,
                { reason: "installation_lock_held", lock_path: lockPath, pid: holder.pid });
        // stale: its owner is gone; move it aside and try again
        try {
            const moved = `${lockPath}.stale-${crypto.randomUUID()}`;
            fs.renameSync(lockPath, moved);
            fs.rmSync(moved, { recursive: true, force: true });
        }
        catch { /* another invocation took it over first: the next round sees it */ }
    }
    const ours = () => readOwner(lockPath)?.token === owner.token;
    const lease = {
        assertOwnership() {
            point("lease:asserted");
            if (!ours())
                throw new AppError("installation_lock_lost", "The installation lock is no longer this invocation's", 2,
                    { reason: "installation_lock_lost", lock_path: lockPath });
        },
        release() {
            if (ours())
                fs.rmSync(lockPath, { recursive: true, force: true });
        },
    };
    point("lock:taken");
    return lease;
}
