// The lock adapter's own smoke tests (`npm test`): `envreplica-lock-adapter` driven by hand over its JSON lines, on
// the seed's projection-lock.js as it ships and on a lock module of one's own. The conformance verdicts are
// envreplica's (`envreplica conformance --protocol lock`, tests/test_javascript_lock_kit.py); these only check that
// the kit runs: `hello` declares what the package exports, a call goes to its end, a second caller waits on a live
// owner and takes a dead owner's lock over, a kill leaves the lock, a bad command line is one line and exit 2, and
// every lock mutant applies to the seed's file.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { LOCK_MAX_TRIES, LOCK_PROTOCOL, LOCK_STEPS } from "../src/index.mjs";
import { Adapter, KIT, extractSeed, skip } from "./adapter-client.mjs";
import { MUTANTS, mutate } from "./lock-mutants.mjs";

const seedLock = () => path.join(extractSeed(), "projection-lock.js");
const TWO = [{ pid: 101, start: 5, ns: 0 }, { pid: 102, start: 7, ns: 0 }];
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "envreplica-js-lock-"));
after(() => fs.rmSync(scratch, { recursive: true, force: true }));

/** The lock adapter on `source` (lock directories under this file's scratch folder). */
const lockAdapter = (source) => new Adapter("envreplica-lock-adapter", ["--source", source, "--scratch", scratch]);
/** `process`'s steps, one `step` each, until it is inside or its call ended: the steps taken, in order. */
async function stepUntilSettled(adapter, process) {
    const taken = [];
    for (;;) {
        const event = await adapter.ask("step", { process });
        taken.push(...event.taken.map(t => t.step));
        if (event.at === "inside" || event.at === null)
            return { taken, event };
    }
}

test("every lock mutant's edit applies exactly once", { skip }, () => {
    const text = fs.readFileSync(seedLock(), "utf8");
    for (const mutant of MUTANTS)
        assert.notEqual(mutate(mutant.name, text), text, mutant.name);
});

test("hello declares the seed's design, its steps and its tries, as the package exports them", { skip, timeout: 120_000 }, async () => {
    const adapter = lockAdapter(seedLock());
    try {
        const hello = await adapter.ask("hello", { protocol: LOCK_PROTOCOL });
        assert.equal(hello.protocol, "envreplica-lock/1");
        assert.deepEqual([hello.design, hello.steps, hello.maxTries, hello.busyNames], ["seed", LOCK_STEPS, LOCK_MAX_TRIES, false]);
        assert.deepEqual(hello.world, ["zombie", "namespace", "reuse", "stale"]);
        const refused = await adapter.answer("hello", { protocol: "envreplica-migration/1" });
        assert.equal(refused.ok, false);
        assert.match(refused.error.message, /'protocol' must be "envreplica-lock\/1"/);
    }
    finally {
        assert.equal(await adapter.close(), 0);
    }
});

test("the seed's lock: a call to its end; a waiter on a live owner; a dead owner's lock taken over", { skip, timeout: 120_000 }, async () => {
    const adapter = lockAdapter(seedLock());
    try {
        await adapter.ask("reset", { processes: TWO, maxTries: 80, lock: { state: "absent" } });
        assert.deepEqual(await adapter.ask("spawn", { process: 0 }), { taken: [], at: "mkdir L" });
        let run = await stepUntilSettled(adapter, 0);
        assert.deepEqual(run.taken, ["mkdir L", "create owner file", "write owner file", "enter"]);
        let seen = await adapter.ask("observe");
        assert.deepEqual([seen.inside, seen.lock, seen.moved], [[0], { owner: { pid: 101, start: 5, ns: 0 } }, []]);
        // the second caller finds L taken by a live owner of the same start time: it waits, and tries again
        await adapter.ask("spawn", { process: 1 });
        const waiting = [];
        for (let i = 0; i < 5; i++)
            waiting.push(...(await adapter.ask("step", { process: 1 })).taken.map(t => t.step));
        assert.deepEqual(waiting, ["mkdir L", "stat L", "read owner file", "kill probe", "start-time probe", "wait"]);
        // the owner leaves: its release, and the call's answer
        assert.deepEqual((await adapter.ask("leave", { process: 0, effect: "ok" })).at, "unlink owner file (release)");
        run = await stepUntilSettled(adapter, 0);
        assert.deepEqual(run.taken, ["unlink owner file (release)", "rmdir L (release)"]);
        assert.deepEqual(run.event.answer, { answer: "ok", busy: null, error: "" });
        assert.equal((await adapter.ask("observe")).lock, null);
        run = await stepUntilSettled(adapter, 1);
        assert.deepEqual(run.taken, ["mkdir L", "create owner file", "write owner file", "enter"]);
        // killed inside: its lock stays, naming it
        assert.deepEqual(await adapter.ask("kill", { process: 1, zombie: false }), {});
        seen = await adapter.ask("observe");
        assert.deepEqual([seen.inside, seen.lock], [[], { owner: { pid: 102, start: 7, ns: 0 } }]);
        // a lock whose owner is dead (the reset stages it): judged stale, moved aside, removed, taken
        await adapter.ask("reset", { processes: TWO.slice(0, 1), maxTries: 80, lock: { state: "owner", pid: 300, start: 2, ns: 0, alive: false } });
        await adapter.ask("spawn", { process: 0 });
        run = await stepUntilSettled(adapter, 0);
        assert.deepEqual(run.taken, ["mkdir L", "stat L", "read owner file", "kill probe", "stat L again", "rename L to stale",
            "unlink stale owner file", "rmdir stale", "mkdir L", "create owner file", "write owner file", "enter"]);
        seen = await adapter.ask("observe");
        assert.deepEqual([seen.inside, seen.lock, seen.moved], [[0], { owner: { pid: 101, start: 5, ns: 0 } }, []]);
        // a move out of order is an error answer naming it, not a crash
        const refused = await adapter.answer("step", { process: 0 });
        assert.deepEqual([refused.ok, refused.error.type, refused.error.message], [false, "invalid", "step: out of order: process 0 is inside"]);
    }
    finally {
        assert.equal(await adapter.close(), 0);
    }
});

test("a lock module of one's own runs behind the adapter, each fs call on the lock a step", { timeout: 120_000 }, async () => {
    const storage = fs.mkdtempSync(path.join(scratch, "own-")) + "/storage";
    fs.mkdirSync(storage);
    const source = path.join(storage, "projection-lock.js");
    fs.writeFileSync(source, `import fs from "node:fs";
export function withProjectionLock(lockPath, operation) {
    fs.mkdirSync(lockPath);
    fs.writeFileSync(\`\${lockPath}/owner.json\`, JSON.stringify({ pid: process.pid, started_at: 1 }));
    try {
        return operation();
    }
    finally {
        fs.rmSync(lockPath, { recursive: true, force: true });
    }
}
`);
    const adapter = lockAdapter(source);
    try {
        assert.equal((await adapter.ask("hello", { protocol: LOCK_PROTOCOL })).implementation.split(" ")[0], "projection-lock.js");
        await adapter.ask("reset", { processes: TWO.slice(0, 1), maxTries: 80, lock: { state: "absent" } });
        await adapter.ask("spawn", { process: 0 });
        let run = await stepUntilSettled(adapter, 0);
        assert.deepEqual(run.taken, ["mkdir L", "create owner file", "write owner file", "enter"]);
        assert.deepEqual((await adapter.ask("observe")).lock, { owner: { pid: 101, start: 1, ns: 0 } });
        await adapter.ask("leave", { process: 0, effect: "failed-unchanged" });
        run = await stepUntilSettled(adapter, 0);
        assert.equal(run.event.answer.answer, "failed-unchanged");
        assert.equal((await adapter.ask("observe")).lock, null);
    }
    finally {
        assert.equal(await adapter.close(), 0);
    }
});

test("a bad command line is one line on standard error and exit status 2", () => {
    const bin = path.join(KIT, "bin", "envreplica-lock-adapter.js");
    for (const [args, says] of [[[], /--source is required/], [["--source", path.join(scratch, "none.js")], /no such file/],
        [["--no-such-option"], /Unknown option '--no-such-option'/]]) {
        const run = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8", input: "" });
        assert.equal(run.status, 2, run.stderr);
        assert.equal(run.stdout, "");
        assert.equal(run.stderr.split("\n").length, 2, run.stderr);
        assert.match(run.stderr, /^envreplica-lock-adapter: /);
        assert.match(run.stderr, says);
    }
    const help = spawnSync(process.execPath, [bin, "--help"], { encoding: "utf8" });
    assert.equal(help.status, 0);
    assert.match(help.stdout, /^usage: envreplica-lock-adapter --source/);
});
