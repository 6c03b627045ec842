// The lock adapter: envreplica's lock adapter protocol (docs/protocol.md, section 12) for a JavaScript projection
// lock, the seed's own projection-lock.js unchanged. `bin/envreplica-lock-adapter.js` runs `main`.
//
// One JSON request per line on standard input, one JSON response per line on standard output, in order. Each lock
// user is a Node process of its own (src/lock-user.mjs) running the seed's `withProjectionLock` on a real directory,
// paused before each filesystem or system call it makes (src/stepping-fs.mjs, src/lock-stepper.mjs); `kill` is a
// real SIGKILL. The world of pids is the adapter's (`World`): which pid of which PID namespace is taken, by a
// process of which start time, a zombie or not; the lock users' probes (`kill(pid, 0)`, the start time) answer
// from it, so pid reuse, another PID namespace and an unreaped process are the harness's to stage.
//
// What the seed does not show, and how the kit reads it (hello's declaration): the record's namespace (the seed
// writes `{pid, started_at}`: the observation names the namespace of the lock user, or of reset's owner, whose pid
// and start time it holds; 0 when none does); `processStartedAt` (the stand-in: the world's start time, a zombie's
// too); the tries before busy (the seed's own 80: `maxTries`); whom a busy answer waited for (the seed does not
// say: `busyNames` false).
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { UsageError, command, readCommandLine, sourceFile } from "./cli.mjs";
import { AdapterError, Lines, guard, serve } from "./jsonl.mjs";
import { KIT } from "./register.mjs";

export const PROTOCOL = "envreplica-lock/1";
const NAME = "envreplica-lock-adapter";
const USAGE = `usage: ${NAME} --source DIR/storage/projection-lock.js [--scratch DIR]`;
const HELP = `${USAGE}

Serves envreplica's lock adapter protocol (docs/protocol.md, section 12: JSON lines on standard input and output)
for a JavaScript projection lock, run as it is:
  --source FILE   the lock: DIR/storage/projection-lock.js (the seed's, as envreplica-extract-migration-seed
                  writes it, or a module exporting withProjectionLock(lockPath, operation)); what it imports from
                  DIR that DIR does not hold comes from the kit's stand-ins
  --scratch DIR   where the lock directories go (default: /dev/shm when there is one, else the temporary
                  directory); removed at exit
  -h, --help      this help

  envreplica conformance --protocol lock --variant seed --adapter "${NAME} --source FILE"
`;
//: The seed's steps where a lock user pauses (model.lock.Pc values; the wait is silent).
export const STEPS = ["mkdir L", "create owner file", "write owner file", "rmdir L (write failed)", "stat L",
    "read owner file", "kill probe", "start-time probe", "stat L again", "rename L to stale",
    "unlink stale owner file", "rmdir stale", "enter", "unlink owner file (release)", "rmdir L (release)"];
//: The seed's tries before busy (`if (tries >= 80)`).
export const MAX_TRIES = 80;
//: Spare lock users kept started (their modules loaded) for the next examples.
const SPARES = 3;

export function readOptions(argv) {
    const { values } = readCommandLine(argv, {
        options: { source: { type: "string" }, scratch: { type: "string" } }, usage: USAGE, help: HELP,
    });
    const source = sourceFile(values.source, "the lock's storage/projection-lock.js", USAGE);
    if (values.scratch === "")
        throw new UsageError("--scratch is an empty path; name a directory, or leave --scratch out");
    const shm = "/dev/shm";
    let scratch = values.scratch;
    if (scratch === undefined) {
        try {
            fs.accessSync(shm, fs.constants.W_OK);
            scratch = shm;
        }
        catch {
            scratch = os.tmpdir();
        }
    }
    return { source, scratch };
}

/** How the filesystem under `dir` numbers a new directory: "fresh" on tmpfs (a counter), else "reuse" (ext4 hands
 * a freed number out again). Read from /proc/self/mounts: the longest mount point above `dir`. */
export function inodesOf(dir) {
    let best = "", type = "";
    try {
        for (const line of fs.readFileSync("/proc/self/mounts", "utf8").split("\n")) {
            const [, point, fstype] = line.split(" ");
            if (point && (dir === point || dir.startsWith(point.endsWith("/") ? point : point + "/")) && point.length >= best.length)
                [best, type] = [point, fstype];
        }
    }
    catch { /* no /proc: say nothing */ }
    return type === "tmpfs" ? "fresh" : type ? "reuse" : null;
}

/** The kernel's processes as the adapter stages them: "ns:pid" -> { start, zombie }. */
export class World {
    constructor() {
        this.occupants = new Map();
        this.starts = new Map();
    }
    born(ns, pid, start) {
        this.occupants.set(`${ns}:${pid}`, { start, zombie: false });
        this.starts.set(`${ns}:${pid}`, Math.max(start, this.starts.get(`${ns}:${pid}`) ?? 0));
    }
    list() {
        return [...this.occupants].map(([key, o]) => [...key.split(":").map(Number), o.start, o.zombie]);
    }
}

/** One lock user: a child process and its channel. */
class User {
    constructor(source) {
        this.child = spawn(process.execPath, ["--import", path.join(KIT, "src", "lock-register.mjs"),
            path.join(KIT, "src", "lock-user.mjs")], {
            stdio: ["ignore", 2, 2, "pipe"],
            env: { ...process.env, ENVREPLICA_LOCK_KIT_SOURCE: source, ENVREPLICA_MIGRATION_KIT_SOURCE: "" },
        });
        this.lines = new Lines(this.child.stdio[3]);
        this.exited = new Promise(resolve => this.child.once("exit", (code, signal) => resolve({ code, signal })));
        this.ready = this.next("start");
        this.ready.catch(() => { }); // a spare killed unused: nobody waits for it
        this.state = "spare"; // spare, idle, running, inside, dead
    }
    async next(what) {
        const line = await guard(this.lines.next(), `a lock user (${what})`);
        if (line === null) {
            const { code, signal } = await this.exited;
            throw new AdapterError("internal", `a lock user ended (${signal ?? `exit ${code}`}) ${what}: its standard error says why`);
        }
        return JSON.parse(line);
    }
    send(message) {
        this.child.stdio[3].write(JSON.stringify(message) + "\n");
    }
    async kill() {
        if (this.child.exitCode === null && this.child.signalCode === null)
            this.child.kill("SIGKILL");
        await this.exited;
        this.state = "dead";
    }
}

function need(request, key, check, what) {
    const value = request[key];
    if (!check(value))
        throw new AdapterError("invalid", `${request.op}: '${key}' must be ${what}, not ${JSON.stringify(value)?.slice(0, 40)}`);
    return value;
}
const isCount = (v) => Number.isInteger(v) && v >= 0;

export class LockAdapter {
    constructor({ source, scratch }) {
        this.source = source;
        this.scratch = scratch;
        this.spares = [];
        this.idle = new Map(); // "pid:start:ns" -> idle lock users of a past example, for the next ones
        this.users = [];
        this.dir = null;
        this.procs = [];
        this.owners = []; // identities a record may name: [pid, start, ns]
        this.world = new World();
        this.inodes = inodesOf(scratch);
        this.topUp();
    }

    topUp() {
        while (this.spares.length < SPARES)
            this.spares.push(new User(this.source));
    }

    hello(request) {
        if (request.protocol !== PROTOCOL)
            throw new AdapterError("invalid", `hello: 'protocol' must be ${JSON.stringify(PROTOCOL)}, not ${JSON.stringify(request.protocol)}`);
        const seed = path.basename(this.source);
        return {
            protocol: PROTOCOL, implementation: `${seed} as it ships (node ${process.version}, the envreplica JavaScript kit)`,
            design: "seed", steps: STEPS, maxTries: MAX_TRIES, world: ["zombie", "namespace", "reuse", "stale"],
            busyNames: false, inodes: this.inodes,
        };
    }

    async reset(request) {
        const procs = need(request, "processes", (v) => Array.isArray(v) && v.length > 0, "a non-empty list of {pid, start, ns}");
        for (const p of procs)
            if (!p || !isCount(p.pid) || !isCount(p.start) || !isCount(p.ns))
                throw new AdapterError("invalid", `reset: each process is {pid, start, ns}, not ${JSON.stringify(p)}`);
        const lock = request.lock ?? { state: "absent" };
        await this.closeExample();
        this.dir = fs.mkdtempSync(path.join(this.scratch, "envreplica-lock-js-"));
        this.lockPath = path.join(this.dir, "lock");
        this.procs = procs.map(p => [p.pid, p.start, p.ns]);
        this.owners = [...this.procs];
        this.world = new World();
        for (const [pid, start, ns] of this.procs)
            this.world.born(ns, pid, start);
        this.users = this.procs.map(() => null);
        this.plant(lock);
        return {};
    }

    plant(lock) {
        const L = this.lockPath;
        switch (lock.state) {
            case "absent":
                return;
            case "owner": {
                if (!isCount(lock.pid) || !isCount(lock.start) || !isCount(lock.ns ?? 0))
                    throw new AdapterError("invalid", `reset: an owner's lock is {state, pid, start, ns}, not ${JSON.stringify(lock)}`);
                fs.mkdirSync(L);
                fs.writeFileSync(`${L}/owner.json`, JSON.stringify({ pid: lock.pid, started_at: lock.start }));
                this.owners.push([lock.pid, lock.start, lock.ns ?? 0]);
                const key = `${lock.ns ?? 0}:${lock.pid}`;
                this.world.starts.set(key, Math.max(lock.start, this.world.starts.get(key) ?? 0));
                if (lock.alive)
                    this.world.born(lock.ns ?? 0, lock.pid, lock.start);
                return;
            }
            case "empty-dir":
                fs.mkdirSync(L);
                return;
            case "empty-owner":
                fs.mkdirSync(L);
                fs.writeFileSync(`${L}/owner.json`, "");
                return;
            case "garbage-owner":
                fs.mkdirSync(L);
                fs.writeFileSync(`${L}/owner.json`, "{ not json");
                return;
            case "left-over":
                fs.mkdirSync(`${L}.stale-00000000-0000-4000-8000-000000000000`);
                fs.writeFileSync(`${L}.stale-00000000-0000-4000-8000-000000000000/owner.json`, "{}");
                return;
            default:
                throw new AdapterError("invalid", `reset: 'lock.state' must be absent, owner, empty-dir, empty-owner, garbage-owner or left-over, not ${JSON.stringify(lock.state)}`);
        }
    }

    slotOf(request) {
        const slot = need(request, "process", isCount, "a process number");
        if (slot >= this.procs.length)
            throw new AdapterError("invalid", `${request.op}: 'process' ${slot} names no process (reset made ${this.procs.length})`);
        return slot;
    }

    async user(slot) {
        let user = this.users[slot];
        if (user !== null)
            return user;
        const [pid, start, ns] = this.procs[slot];
        const kept = this.idle.get(`${pid}:${start}:${ns}`);
        if (kept !== undefined && kept.length) {
            user = kept.pop(); // a lock user of a past example, idle: the seed's module state is that identity's
        }
        else {
            this.topUp();
            user = this.spares.shift();
            this.topUp();
            const spare = await user.ready;
            if (spare.t !== "spare")
                throw new AdapterError("internal", `a lock user started with ${JSON.stringify(spare)}`);
        }
        user.send({ c: "identity", slot, pid, start, ns, lockPath: this.lockPath, world: this.world.list() });
        const idle = await user.next("taking its identity");
        if (idle.t !== "idle")
            throw new AdapterError("internal", `lock user ${slot} answered its identity with ${JSON.stringify(idle)}`);
        user.state = "idle";
        this.users[slot] = user;
        return user;
    }

    outOfOrder(op, slot, now) {
        return new AdapterError("invalid", `${op}: out of order: process ${slot} is ${now}`);
    }

    async event(user, slot) {
        const m = await user.next(`after a move of process ${slot}`);
        if (m.t === "paused") {
            user.state = "running";
            return { taken: m.taken, at: m.at };
        }
        if (m.t === "inside") {
            user.state = "inside";
            return { taken: m.taken, at: "inside" };
        }
        if (m.t === "ended") {
            user.state = "idle";
            return { taken: m.taken, at: null, answer: { answer: m.answer, busy: null, error: m.error } };
        }
        throw new AdapterError("internal", `lock user ${slot} said ${JSON.stringify(m)}`);
    }

    async handle(request) {
        const op = request.op;
        if (typeof op !== "string")
            throw new AdapterError("invalid", `'op' must be a string naming an op, not ${JSON.stringify(op)}`);
        if (op === "hello")
            return this.hello(request);
        if (op === "reset")
            return this.reset(request);
        if (!["spawn", "step", "leave", "kill", "reuse-pid", "reap", "observe"].includes(op))
            throw new AdapterError("unsupported", `unknown op ${JSON.stringify(op).slice(0, 40)} (the ops: hello, reset, spawn, step, leave, kill, reuse-pid, reap, observe)`);
        if (this.dir === null)
            throw new AdapterError("invalid", `${op}: send reset first`);
        if (op === "observe")
            return this.observe();
        if (op === "reuse-pid") {
            const ns = need(request, "ns", isCount, "a namespace number");
            const pid = need(request, "pid", (v) => Number.isInteger(v) && v > 0, "a pid");
            const key = `${ns}:${pid}`;
            if (this.world.occupants.has(key))
                throw new AdapterError("invalid", `reuse-pid: out of order: pid ${pid} of namespace ${ns} is not free`);
            this.world.born(ns, pid, (this.world.starts.get(key) ?? 0) + 1);
            return {};
        }
        const slot = this.slotOf(request);
        const [pid, , ns] = this.procs[slot];
        const current = this.users[slot];
        const now = current === null ? "idle" : current.state;
        if (op === "spawn") {
            if (now !== "idle")
                throw this.outOfOrder(op, slot, now);
            const user = await this.user(slot);
            user.send({ c: "call" });
            return this.event(user, slot);
        }
        if (op === "step") {
            if (now !== "running")
                throw this.outOfOrder(op, slot, now);
            current.send({ c: "go", world: this.world.list() });
            return this.event(current, slot);
        }
        if (op === "leave") {
            if (now !== "inside")
                throw this.outOfOrder(op, slot, now);
            const effect = need(request, "effect", (v) => ["ok", "failed-unchanged", "failed-committed"].includes(v), "ok, failed-unchanged or failed-committed");
            current.send({ c: "leave", effect });
            return this.event(current, slot);
        }
        if (op === "kill") {
            const zombie = request.zombie ?? false;
            if (typeof zombie !== "boolean")
                throw new AdapterError("invalid", `kill: 'zombie' must be a boolean, not ${JSON.stringify(zombie)}`);
            if (now !== "running" && now !== "inside")
                throw this.outOfOrder(op, slot, now);
            await current.kill();
            const key = `${ns}:${pid}`;
            const was = this.world.occupants.get(key);
            this.world.occupants.delete(key);
            if (zombie && was)
                this.world.occupants.set(key, { start: was.start, zombie: true });
            return {};
        }
        // reap
        const key = `${ns}:${pid}`;
        if (now !== "dead" || !this.world.occupants.get(key)?.zombie)
            throw new AdapterError("invalid", `reap: out of order: process ${slot} is not a zombie`);
        this.world.occupants.delete(key);
        return {};
    }

    /** The record's owner as the model names it: pid, start time, and the namespace of whoever holds them. */
    ownerOf(text) {
        if (text.length === 0)
            return "empty";
        let record;
        try {
            record = JSON.parse(text);
        }
        catch {
            return "empty"; // unreadable: to the seed as an empty file is (the model's empty owner file)
        }
        const pid = record?.pid, start = record?.started_at;
        if (!Number.isInteger(pid) || !Number.isInteger(start))
            return "empty"; // no {pid, started_at}: the seed finds no owner in it, as in an empty file
        const who = this.owners.find(([p, s]) => p === pid && s === start);
        return { pid, start, ns: who ? who[2] : 0 };
    }

    lockOf(dir) {
        let entries;
        try {
            entries = fs.readdirSync(dir);
        }
        catch {
            return { seen: null, others: [] };
        }
        const others = entries.filter(e => e !== "owner.json").map(e => `${path.basename(dir)}/${e}`);
        if (!entries.includes("owner.json"))
            return { seen: { owner: "none" }, others };
        return { seen: { owner: this.ownerOf(fs.readFileSync(path.join(dir, "owner.json"), "utf8")) }, others };
    }

    observe() {
        const inside = this.users.flatMap((u, slot) => u !== null && u.state === "inside" ? [slot] : []);
        const base = path.basename(this.lockPath);
        let lock = null;
        const moved = [];
        let others = [];
        for (const name of fs.readdirSync(this.dir).sort()) {
            const full = path.join(this.dir, name);
            if (name === base) {
                const { seen, others: odd } = this.lockOf(full);
                lock = seen;
                others = others.concat(odd);
            }
            else if (name.startsWith(`${base}.stale-`)) {
                const { seen, others: odd } = this.lockOf(full);
                moved.push(seen);
                others = others.concat(odd);
            }
            else
                others.push(name);
        }
        return { inside, lock, moved, tickets: [], temps: [], others };
    }

    async closeExample() {
        const ending = [];
        this.users.forEach((u, slot) => {
            if (u === null)
                return;
            if (u.state === "idle") { // between calls: kept for the next example of the same identity
                const key = this.procs[slot].join(":");
                this.idle.set(key, [...(this.idle.get(key) ?? []), u]);
            }
            else
                ending.push(u.kill());
        });
        await Promise.all(ending);
        this.users = [];
        if (this.dir !== null)
            fs.rmSync(this.dir, { recursive: true, force: true });
        this.dir = null;
    }

    async close() {
        await this.closeExample();
        await Promise.all([...this.spares, ...[...this.idle.values()].flat()].map(u => u.kill()));
        this.spares = [];
        this.idle.clear();
    }
}

export async function main(argv) {
    await command(NAME, async () => {
        const adapter = new LockAdapter(readOptions(argv));
        try {
            await serve((request) => adapter.handle(request));
        }
        finally {
            await adapter.close();
        }
    });
}
