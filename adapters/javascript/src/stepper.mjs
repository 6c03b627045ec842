// Where an invocation is in the model's steps (`model.migration.Pc`), and the pause at each step boundary.
//
// The seed's code runs unchanged; what it calls outside itself (the stand-ins, the glue) reports *points*
// (`point(name, info)`): a publication begun or done, a child's backup done, the installation lock taken, an
// ownership check, a fence begun or done, and so on. The stepper knows the step the invocation is taking (`pc`)
// and which point ends it (`RULES`); at that point it reports the step to the adapter and blocks, synchronously,
// until told to go on (the seed's code is synchronous: nothing else runs meanwhile). Every other point is
// inside a step and passes: the seed's second `retain()` inside `applyLocked` publishes the request again within
// the model's `reconcile`, and is no step of its own.
//
// Outside an invocation (the adapter's process, the foreign writer) nothing is installed and every point passes.
import fs from "node:fs";

/** The model's steps, in the order a run takes them (migrate, then recover). */
export const STEPS = [
    "prepare", "retain parent", "retain run", "retain resource", "lock", "reconcile", "maintenance run",
    "maintenance resource", "drain", "backup run", "backup resource", "apply run", "apply resource", "verify",
    "read evidence", "publish result", "complete run", "complete resource",
    "recover", "lock prepare", "plan", "lock apply", "revalidate", "publish recovery", "fence run", "fence resource",
    "restore run", "restore resource", "publish recovery result", "reopen run", "reopen resource",
];
/** The last step of each role: the invocation ends right after it. */
export const FINAL = new Set(["complete resource", "reopen resource"]);

const REQUEST = "paired_migration_request_conflict";
const RESULT = "paired_migration_result_conflict";
const RECOVERY = "paired_recovery_request_conflict";
const RECOVERY_RESULT = "paired_recovery_result_conflict";

/**
 * Each step: the point that ends it (`at`), which occurrence of that point within the step (`nth`, counted from
 * the step's start; default 1), a condition on the point's info (`when`), and the step after it (`next`: a name,
 * or a function of the point's info). The glue's own points: `prepared` / `restored` (migrate's first step),
 * `recover` / `recover-restored` (recover's first step), `planned` (PreparedPairedWriterRecovery.prepare returned).
 */
const RULES = {
    // migrate
    "prepare": { at: ["prepared", "restored"], next: (name) => name === "prepared" ? "retain parent" : "lock" },
    "retain parent": { at: ["publish:end"], when: (i) => i.conflict === REQUEST, next: "retain run" },
    "retain run": { at: ["child:retained"], next: "retain resource" },
    "retain resource": { at: ["child:retained"], next: "lock" },
    "lock": { at: ["lock:taken"], next: "reconcile" },
    // applyLocked's head (recovery selected? retain again, reconcile, a result's check) ends where the first
    // fence begins
    "reconcile": { at: ["maintenance:begin"], next: "maintenance run" },
    "maintenance run": { at: ["maintenance:done"], next: "maintenance resource" },
    // the seed reads `fs.existsSync(resultFile)` right after, under the lock: the same answer
    "maintenance resource": { at: ["maintenance:done"], next: () => fs.existsSync(context.resultFile) ? "read evidence" : "drain" },
    // `const drain = drained(...)`, then the backup loop opens with `assertOwnership()`
    "drain": { at: ["lease:asserted"], next: "backup run" },
    "backup run": { at: ["child:backedUp"], next: "backup resource" },
    "backup resource": { at: ["child:backedUp"], next: "apply run" },
    "apply run": { at: ["child:applied"], next: "apply resource" },
    "apply resource": { at: ["child:applied"], next: "verify" },
    // verifyAppliedData x2, `applied = this.reconcile()` (two children), then `after = this.reconcile()` begins
    "verify": { at: ["child:reconcile"], nth: 3, next: "publish result" },
    // readEvidence: `observed = this.reconcile()` (two), the backups' facts; then `after = this.reconcile()`
    "read evidence": { at: ["child:reconcile"], nth: 3, next: "publish result" },
    "publish result": { at: ["publish:end"], when: (i) => i.conflict === RESULT, next: "complete run" },
    "complete run": { at: ["maintenance:completed"], next: "complete resource" },
    "complete resource": { at: ["maintenance:completed"], next: null },
    // recover
    "recover": { at: ["recover", "recover-restored"], next: (name) => name === "recover" ? "lock prepare" : "lock apply" },
    "lock prepare": { at: ["lock:taken"], next: "plan" },
    "plan": { at: ["planned"], next: "lock apply" },
    "lock apply": { at: ["lock:taken"], next: "revalidate" },
    // retainLocked: retain, drained, each store revalidated; then the recovery request's publication begins
    "revalidate": { at: ["publish:begin"], when: (i) => i.conflict === RECOVERY, next: "publish recovery" },
    "publish recovery": { at: ["publish:end"], when: (i) => i.conflict === RECOVERY, next: "fence run" },
    "fence run": { at: ["recovery:done"], next: "fence resource" },
    "fence resource": { at: ["recovery:done"], next: "restore run" },
    // the restore loop: each store opens with `lease.assertOwnership()`; the second one's is the boundary
    "restore run": { at: ["lease:asserted"], nth: 2, next: "restore resource" },
    "restore resource": { at: ["publish:begin"], when: (i) => i.conflict === RECOVERY_RESULT, next: "publish recovery result" },
    "publish recovery result": { at: ["publish:end"], when: (i) => i.conflict === RECOVERY_RESULT, next: "reopen run" },
    "reopen run": { at: ["maintenance:completed"], next: "reopen resource" },
    "reopen resource": { at: ["maintenance:completed"], next: null },
};

let channel = null; // { fd } while an invocation runs under the adapter
let context = {}; // what the glue tells: { resultFile }
let pc = null; // the step being taken
let counts = new Map(); // point name -> occurrences since the step began
let trace = null; // steps taken, for a run without an adapter

function send(message) {
    fs.writeSync(channel.fd, JSON.stringify(message) + "\n");
}

/** One byte from `fd`, blocking; the adapter gone (end of file): the invocation stops there, as if killed. */
function readByte(fd) {
    const byte = Buffer.alloc(1);
    for (;;) {
        let n;
        try {
            n = fs.readSync(fd, byte, 0, 1, null);
        }
        catch (error) {
            if (error.code === "EAGAIN") {
                Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5); // a non-blocking pipe's poll
                continue;
            }
            throw error;
        }
        if (n === 0)
            process.exit(137);
        return byte[0];
    }
}

/** Blocks until the adapter says go on (one byte). */
function waitGo() {
    readByte(channel.fd);
}

/** A spare invocation (started before it is needed, its modules loaded) waits here for what it is to run: one
 * JSON line on `fd`. */
export function awaitArgs(fd) {
    fs.writeSync(fd, JSON.stringify({ t: "spare", pid: process.pid }) + "\n");
    const bytes = [];
    for (let b; (b = readByte(fd)) !== 0x0a;)
        bytes.push(b);
    return JSON.parse(Buffer.from(bytes).toString("utf8"));
}

/** Starts the invocation's stepping at its first step (`first`: "prepare" or "recover"), talking on `fd`
 * (null: no adapter; the steps are only recorded). Blocks until the first go. */
export function install(first, fd, ctx = {}) {
    pc = first;
    context = ctx;
    counts = new Map();
    if (fd === null) {
        trace = [];
        return;
    }
    channel = { fd };
    send({ t: "ready", pid: process.pid });
    waitGo();
}

export function current() {
    return pc;
}

export function taken() {
    return trace;
}

/** The invocation ends: the adapter is told how (before the process exits with `status`). */
export function finish(status, refusal, message) {
    if (channel)
        send({ t: "exit", status, refusal, message });
}

/** A point of the run: ends the current step where RULES says so. */
export function point(name, info = {}) {
    if (pc === null)
        return;
    const rule = RULES[pc];
    if (!rule || !rule.at.includes(name) || (rule.when && !rule.when(info)))
        return;
    const seen = (counts.get(name) ?? 0) + 1;
    counts.set(name, seen);
    if (seen < (rule.nth ?? 1))
        return;
    const step = pc;
    counts = new Map();
    if (trace)
        trace.push(step);
    if (channel) {
        send({ t: "step", step });
        waitGo();
    }
    // the next step is read after the go, where the seed reads what decides it
    pc = typeof rule.next === "function" ? rule.next(name, info) : rule.next;
}
