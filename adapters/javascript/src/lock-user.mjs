// One lock user of the lock adapter (src/lock-adapter.mjs): a process that calls the seed's
// `withProjectionLock(lockPath, operation)`, as it ships, when told to, paused before each of its calls.
//
//   node --import src/lock-register.mjs src/lock-user.mjs   (environment: ENVREPLICA_LOCK_KIT_SOURCE = the lock's
//   source file; fd 3: the channel to the adapter, JSON lines both ways)
//
// Started ahead as a spare (its modules loaded, the seed imported), it says `{t: "spare"}` and waits for its
// identity (`{c: "identity", slot, pid, start, ns, lockPath, world}`): the harness's pid, start time and PID
// namespace, which `process.pid`, the start-time stand-in and the probes use from then on. Then, for each
// `{c: "call"}`, one call of the lock, whose operation reports `{t: "inside"}` and waits to be told how it ends
// (`{c: "leave", effect}`: "ok" returns, "failed-unchanged" and "failed-committed" throw); the call ends with
// `{t: "ended", taken, answer, error}`. Idle between calls, it may be given the same identity again with another
// lock path (the adapter's next example). A SIGKILL from the adapter ends it anywhere (nothing of it runs after).
//
// The answer is read from what the call returned or threw: returned, "ok"; the seed's busy AppError ("Projection
// publisher is busy"), "busy"; its "Committed projection needs reconciliation", "failed-committed"; the
// operation's own error passed through unchanged, its effect's answer; an error of the release (the stepping fs
// tags it), "release-failed"; any other error before the operation ran, "error".
import path from "node:path";
import { pathToFileURL } from "node:url";
import * as stepper from "./lock-stepper.mjs";

class OperationFailed extends Error {
    constructor(effect) {
        super(`the operation failed (${effect})`);
        this.effect = effect;
    }
}

function answerOf(error, entered) {
    if (error === null)
        return { answer: "ok", error: "" };
    const said = `${error?.code ?? error?.name ?? "Error"}: ${error?.message ?? String(error)}`;
    if (error instanceof OperationFailed)
        return { answer: error.effect, error: said };
    if (error?.releaseStep)
        return { answer: "release-failed", error: said };
    if (error?.code === "publication_pending") {
        if (/busy/i.test(error.message))
            return { answer: "busy", error: said };
        if (/reconcil/i.test(error.message))
            return { answer: entered ? "failed-committed" : "error", error: said };
    }
    return { answer: entered ? "failed-committed" : "error", error: said };
}

async function main() {
    const source = path.resolve(process.env.ENVREPLICA_LOCK_KIT_SOURCE);
    stepper.open(3);
    process.kill = (pid, signal) => {
        if (signal !== 0)
            throw new Error(`the lock kit's process.kill sends signal 0 only (the probe), not ${signal}`);
        if (pid != (pid | 0)) { // Node's own check, before any system call: no step
            const error = new TypeError(`The "pid" argument must be of type number. Received ${typeof pid}`);
            error.code = "ERR_INVALID_ARG_TYPE";
            throw error;
        }
        stepper.pause("kill probe", "kill");
        if (stepper.alive(Number(pid)))
            return true;
        const error = new Error(`kill ESRCH`);
        Object.assign(error, { code: "ESRCH", errno: -3, syscall: "kill" });
        throw error;
    };
    Atomics.wait = stepper.wait;
    const { withProjectionLock } = await import(pathToFileURL(source).href);
    if (typeof withProjectionLock !== "function")
        throw new Error(`${source} exports no withProjectionLock`);
    stepper.send({ t: "spare", pid: process.pid });
    const id = stepper.recv();
    if (id.c !== "identity")
        throw new Error(`a spare lock user was told ${JSON.stringify(id)}`);
    stepper.identify(id);
    Object.defineProperty(process, "pid", { value: id.pid, configurable: true, enumerable: true, writable: false });
    stepper.send({ t: "idle" });
    for (;;) {
        const order = stepper.recv();
        if (order.c === "identity") { // the next example's: the same pid, start time and namespace, another lock path
            if (order.pid !== id.pid || order.start !== id.start || order.ns !== id.ns)
                throw new Error(`lock user ${id.slot} (pid ${id.pid}) was given another identity: ${JSON.stringify(order)}`);
            stepper.identify(order);
            stepper.send({ t: "idle" });
            continue;
        }
        if (order.c !== "call")
            throw new Error(`lock user ${id.slot}, idle, was told ${JSON.stringify(order)}`);
        stepper.beginCall();
        let entered = false;
        const operation = () => {
            stepper.pause("enter", "enter");
            entered = true;
            stepper.send({ t: "inside", taken: stepper.flush() });
            const leave = stepper.recv();
            if (leave.c !== "leave")
                throw new Error(`lock user ${id.slot}, inside, was told ${JSON.stringify(leave)}`);
            stepper.silent("leave", "leave");
            if (leave.effect !== "ok")
                throw new OperationFailed(leave.effect);
            return "done";
        };
        let error = null;
        try {
            withProjectionLock(stepper.me.lockPath, operation);
        }
        catch (thrown) {
            error = thrown;
        }
        const { answer, error: said } = answerOf(error, entered);
        stepper.send({ t: "ended", taken: stepper.flush(), answer, error: said });
    }
}

await main();
