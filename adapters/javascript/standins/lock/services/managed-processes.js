// Stand-in for dd-flow's `services/managed-processes.js` as the seed's projection-lock.js imports it (not shipped),
// for the lock adapter (src/lock-adapter.mjs): its probe is the harness's.
//
// What the seed needs of it: `processStartedAt(pid)`, an identity of the process's start that a recycled pid does
// not share (projection-lock.js compares it with the owner's recorded `started_at`, and caches it per pid for the
// whole call). Here: the start time the adapter's world gives the process that has `pid` in the caller's PID
// namespace (a zombie's too, as field 22 of /proc/PID/stat still shows it: the reading the lock model takes of the
// seed), or null when no process has it. Asked of another pid, it is a step of its own ("start-time probe", paused
// before: src/lock-stepper.mjs); asked of the caller's own pid before the call's first step (the seed's `selfStartedAt()`),
// it is the caller's start time, no step (the model leaves it out); a probe of an owner whose pid is the caller's
// own (another PID namespace's owner) is a step like any other.
//
// The migration kit's stand-in (standins/services/managed-processes.js) reads /proc instead: it is not this one.
import * as stepper from "../../../src/lock-stepper.mjs";

export function processStartedAt(pid) {
    if (Number(pid) === stepper.me.pid && stepper.lastStep() === null) // the seed's selfStartedAt(), first thing
        return stepper.me.start;
    stepper.pause("start-time probe", "proc");
    return stepper.startOf(Number(pid));
}

export function processTreeIsAlive(row) {
    const started = processStartedAt(row?.pid);
    return started !== null && (row.started_at === undefined || row.started_at === null || row.started_at === started);
}
