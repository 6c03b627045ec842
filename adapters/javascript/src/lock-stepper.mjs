// A lock user's side of the lock adapter (src/lock-adapter.mjs): the channel to the adapter, and the pause before
// each filesystem or system call the seed's projection-lock.js makes.
//
// The seed runs unchanged; what it calls goes through the kit: `node:fs` is src/stepping-fs.mjs (for the seed's
// file only: the loader's rule, src/lock-hooks.mjs), `process.kill` and `Atomics.wait` are replaced in the lock
// user's process, and `processStartedAt` is the kit's stand-in (standins/lock/services/managed-processes.js). Each
// of those calls is a step named as the lock model names it (`model.lock.Pc`: "mkdir L", "stat L again", ...):
// before it, the lock user reports where it is (`{t: "paused", taken, at}`) and blocks until the adapter says go
// (`{c: "go", world}`), which carries the world the adapter stages (which pids of which PID namespace are taken, by
// a process of which start time, a zombie or not): the probes answer from it as the kernel would at that moment.
// A silent step (the wait between two tries: the model takes it with the step before it) is taken without a pause
// and reported with the steps taken since.
//
// The channel is fd 3 (a socket the adapter opened): JSON lines both ways, read here synchronously (the seed's
// code is synchronous: nothing else runs meanwhile).
import fs from "node:fs";

const realWait = Atomics.wait.bind(Atomics);
let fd = null;
let pending = "";
let taken = [];
let last = null; // the last step taken (its name)
let world = new Map(); // "ns:pid" -> { start, zombie }
export const me = { slot: -1, pid: 0, start: 0, ns: 0, lockPath: "", ownerPath: "" };

export function open(channel) {
    fd = channel;
}

export function send(message) {
    fs.writeSync(fd, JSON.stringify(message) + "\n");
}

/** The next JSON line from the adapter, blocking; the adapter gone: this process ends, as if killed. */
export function recv() {
    const buffer = Buffer.alloc(65536);
    for (;;) {
        const at = pending.indexOf("\n");
        if (at >= 0) {
            const line = pending.slice(0, at);
            pending = pending.slice(at + 1);
            return JSON.parse(line);
        }
        let n;
        try {
            n = fs.readSync(fd, buffer, 0, buffer.length, null);
        }
        catch (error) {
            if (error.code === "EAGAIN") {
                realWait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // a non-blocking socket's poll
                continue;
            }
            throw error;
        }
        if (n === 0)
            process.exit(137);
        pending += buffer.toString("utf8", 0, n);
    }
}

/** This lock user's identity (the harness's: its pid, start time and PID namespace) and the lock path. */
export function identify(id) {
    Object.assign(me, id, { ownerPath: `${id.lockPath}/owner.json` });
    world = worldOf(id.world);
}

function worldOf(list) {
    return new Map((list ?? []).map(([ns, pid, start, zombie]) => [`${ns}:${pid}`, { start, zombie }]));
}

/** Before a step the model takes as a move of its own: report where this process is, and wait to be let go. */
export function pause(step, call) {
    send({ t: "paused", taken, at: step });
    taken = [];
    const order = recv();
    if (order.c !== "go")
        throw new Error(`lock user ${me.slot} paused before ${step} was told ${JSON.stringify(order)}`);
    world = worldOf(order.world);
    taken.push({ step, call });
    last = step;
}

/** A step the model takes with the step before it: taken at once, reported with the next report. */
export function silent(step, call) {
    taken.push({ step, call });
    last = step;
}

/** The call the step being taken turned out to make (a removal that found an empty directory rmdirs it). */
export function made(call) {
    if (taken.length)
        taken[taken.length - 1].call = call;
}

export function lastStep() {
    return last;
}

/** The steps taken since the last report (and none after). */
export function flush() {
    const out = taken;
    taken = [];
    return out;
}

/** `kill(pid, 0)` in this process's PID namespace: a process (running or a zombie) has that pid. */
export function alive(pid) {
    return world.has(`${me.ns}:${pid}`);
}

/** `/proc/PID/stat`'s start time in this process's PID namespace (a zombie's too: /proc shows it), or null. */
export function startOf(pid) {
    const seen = world.get(`${me.ns}:${pid}`);
    return seen === undefined ? null : seen.start;
}

/** The wait between two tries: a silent step (others move meanwhile: the adapter moves them). */
export function wait(typedArray, index, value, timeout) {
    silent("wait", "wait");
    return "timed-out";
}

export function beginCall() {
    taken = [];
    last = null;
}
