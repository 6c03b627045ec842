// What the kit's own tests share (test/kit.test.mjs, test/lock.test.mjs): the seed's files, extracted once per test
// file from the reference seed's diff (ENVREPLICA_SEED_MIGRATION_DIFF; without it the tests that need them skip),
// and an adapter of the kit driven by hand over its JSON lines.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { after } from "node:test";
import { fileURLToPath } from "node:url";

export const KIT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/** The reference seed's diff (the 001_*.txt that adds paired-writer-migration.js and projection-lock.js), named by
 * ENVREPLICA_SEED_MIGRATION_DIFF (the project's tests set it); null without it. */
export const diff = process.env.ENVREPLICA_SEED_MIGRATION_DIFF || null;
/** The `skip` option of a test that needs the seed's files. */
export const skip = diff ? false : "no reference seed diff (set ENVREPLICA_SEED_MIGRATION_DIFF)";

let storage = null;
after(() => {
    if (storage)
        fs.rmSync(path.dirname(storage), { recursive: true, force: true });
});

/** The folder the kit's extractor writes the seed's whole files to (DIR/storage), once; removed after the tests. */
export function extractSeed() {
    if (storage)
        return storage;
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "envreplica-js-seed-"));
    const run = spawnSync(process.execPath, [path.join(KIT, "scripts", "extract-seed.mjs"), diff, out], { encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stderr, /paths\.js is a partial change/);
    storage = path.join(out, "storage");
    return storage;
}

/** One of the kit's adapters (`bin/NAME.js ...args`), a process of its own, asked one request at a time. */
export class Adapter {
    constructor(bin, args) {
        this.proc = spawn(process.execPath, [path.join(KIT, "bin", `${bin}.js`), ...args],
            { stdio: ["pipe", "pipe", "inherit"] });
        this.lines = readline.createInterface({ input: this.proc.stdout })[Symbol.asyncIterator]();
        this.id = 0;
    }
    /** The answer's `result`; an error answer throws, naming the op. */
    async ask(op, fields = {}) {
        const answer = await this.answer(op, fields);
        if (!answer.ok)
            throw new Error(`${op}: ${JSON.stringify(answer.error)}`);
        return answer.result;
    }
    /** The whole answer line, read as JSON (its id checked). */
    async answer(op, fields = {}) {
        const id = ++this.id;
        this.proc.stdin.write(JSON.stringify({ id, op, ...fields }) + "\n");
        const { value } = await this.lines.next();
        const answer = JSON.parse(value);
        assert.equal(answer.id, id);
        return answer;
    }
    /** Ends its input; its exit status. */
    async close() {
        const exited = this.proc.exitCode !== null ? Promise.resolve(this.proc.exitCode)
            : new Promise(resolve => this.proc.on("exit", resolve));
        this.proc.stdin.end();
        return exited;
    }
}
