// The seed's lock under the stress of reliability/lock_stress.py: node --import <adapters/javascript>/src/register.mjs
// lock_seed_worker.mjs SOURCE LOCK LOG HOLD_MS, with ENVREPLICA_MIGRATION_KIT_SOURCE=SOURCE (the extracted
// storage/projection-lock.js, unchanged; the kit's loader gives it the stand-ins of its two imports:
// services/managed-processes.js' processStartedAt, field 22 of /proc/PID/stat, and shared/errors.js).
//
// Loops for ever, as the Python workers do: withProjectionLock(LOCK, operation) where the operation appends
// "enter PID T" to LOG (O_APPEND), holds HOLD_MS, appends "leave PID T"; a give-up ("Projection publisher is busy")
// appends "busy PID T"; any other error "error PID message". The parent kills it with SIGKILL.
import fs from "node:fs";
import { pathToFileURL } from "node:url";

const [source, lockPath, logPath, holdText] = process.argv.slice(2);
const { withProjectionLock } = await import(pathToFileURL(source).href);
const fd = fs.openSync(logPath, "a");
const hold = Number(holdText);
const sleeper = new Int32Array(new SharedArrayBuffer(4));
const now = () => process.hrtime.bigint().toString();
const line = (text) => fs.writeSync(fd, `${text}\n`);
// which lock instance the entering process is in (for reading a log by hand): L's inode and owner.json's pid
const instance = () => {
    try {
        return `ino=${fs.statSync(lockPath).ino} owner=${JSON.parse(fs.readFileSync(`${lockPath}/owner.json`, "utf8")).pid}`;
    } catch (error) {
        return `ino=? owner=? (${error.code ?? error.message})`;
    }
};

for (;;) {
    try {
        withProjectionLock(lockPath, () => {
            line(`enter ${process.pid} ${now()} ${instance()}`);
            Atomics.wait(sleeper, 0, 0, hold);
            line(`leave ${process.pid} ${now()}`);
        });
    } catch (error) {
        if (error?.code === "publication_pending" && error?.message === "Projection publisher is busy")
            line(`busy ${process.pid} ${now()}`);
        else
            line(`error ${process.pid} ${String(error?.code ?? "")} ${String(error?.message ?? error).replace(/\s+/g, " ")}`);
    }
    Atomics.wait(sleeper, 0, 0, Math.random() * hold);
}
