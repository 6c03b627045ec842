// Stand-in for dd-flow's `services/managed-processes.js` (imported by the seed's paired-writer-migration.js and
// projection-lock.js; not shipped).
//
// What the seed needs of it:
// - `processStartedAt(pid)`: an identity of the process's start that a recycled pid does not share
//   (projection-lock.js compares it with the owner's recorded `started_at`). Here: the start time field of
//   /proc/PID/stat (clock ticks since boot), as a string; null when there is no such process (or it is a zombie:
//   it has ended, only its exit status is left).
// - `processTreeIsAlive(row)`: whether the process a `managed_processes` row registers is still running (the seed
//   refuses `physical_owner_alive` when one is). Reading: alive when a process with the row's `pid` runs and, if
//   the row records `started_at`, it started then (the same process, not a recycled pid). The kit's stores
//   register one process that is gone (pid 1, another start time), so the seed's check runs and finds it dead;
//   the physical owners the model means (a connected foreign writer) are observed by `assertStoreWriterDrain`
//   (storage/writer-migration.js).
import fs from "node:fs";

function stat(pid) {
    if (!Number.isSafeInteger(Number(pid)) || Number(pid) <= 0)
        return null;
    let text;
    try {
        text = fs.readFileSync(`/proc/${Number(pid)}/stat`, "utf8");
    }
    catch {
        return null;
    }
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" "); // fields 3.. (state is field 3)
    return { state: fields[0], startedAt: fields[19] };
}

export function processStartedAt(pid) {
    const s = stat(pid);
    return s && s.state !== "Z" && s.state !== "X" ? s.startedAt : null;
}

export function processTreeIsAlive(row) {
    const started = processStartedAt(row?.pid);
    if (started === null)
        return false;
    return row.started_at === undefined || row.started_at === null || String(row.started_at) === started;
}
