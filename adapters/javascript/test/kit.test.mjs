// The kit's own smoke tests (`npm test`, i.e. `node --test test/`): the seed extracted, driven through the adapter
// by hand. The conformance verdicts are envreplica's (`envreplica conformance --protocol migration`); these only
// check that the kit runs: a migration to its end, a crash and a rerun, a recovery, the writer's fence, and that
// every mutant applies to the seed's file.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { Adapter, extractSeed, skip } from "./adapter-client.mjs";
import { MUTANTS, mutate } from "./mutants.mjs";

const extract = () => path.join(extractSeed(), "paired-writer-migration.js");

test("the extracted files are the diff's whole files", { skip }, () => {
    const src = extract();
    const names = fs.readdirSync(path.dirname(src)).sort();
    assert.deepEqual(names, ["paired-writer-migration.js", "projection-lock.js", "work-references.js", "writer-contract.js"]);
});

test("every mutant's edit applies exactly once", { skip }, () => {
    const text = fs.readFileSync(extract(), "utf8");
    for (const mutant of MUTANTS)
        assert.notEqual(mutate(text, mutant), text, mutant.name);
});

test("a migration runs to its end; a crash and a rerun; a recovery; the writer's fence", { skip, timeout: 120_000 }, async () => {
    const adapter = new Adapter("envreplica-migration-adapter", ["--source", extract()]);
    try {
        const hello = await adapter.ask("hello", { protocol: "envreplica-migration/1" });
        assert.equal(hello.steps.length, 31);
        assert.deepEqual(hello.readings, { backup: "keep", apply: "skip", reconcile: "receipt", lock: "refuse" });

        await adapter.ask("reset");
        await adapter.ask("invoke", { role: "migrate" });
        const steps = [];
        for (;;) {
            const event = await adapter.ask("step", { invocation: 0 });
            if (event.event === "exit") {
                assert.deepEqual([event.status, event.refusal, event.after], [0, null, "complete resource"]);
                break;
            }
            steps.push(event.step);
        }
        assert.deepEqual(steps, hello.steps.slice(0, 17).filter(s => s !== "read evidence"));
        let seen = await adapter.ask("observe");
        assert.deepEqual(seen.stores.map(s => [s.version, s.data, s.admission, s.backup]),
            [[2, "migrated", "open", "v1:original"], [2, "migrated", "open", "v1:original"]]);
        assert.deepEqual([seen.request, seen.result, seen.sources, seen.evidence, seen.lock],
            ["published", "published", ["v1:original", "v1:original"], ["v1:original", "v1:original"], false]);

        // crash between the two applies, with the lock held; a rerun finds it partial and finishes
        await adapter.ask("reset");
        await adapter.ask("invoke", { role: "migrate" });
        for (let i = 0; i < 12; i++)
            await adapter.ask("step", { invocation: 0 }); // ... apply run
        assert.equal((await adapter.ask("observe")).lock, true);
        await adapter.ask("crash", { invocation: 0 });
        seen = await adapter.ask("observe");
        assert.equal(seen.lock, false);
        assert.deepEqual(seen.stores.map(s => s.data), ["migrated", "original"]);
        // the writer is fenced under maintenance
        await adapter.ask("connect", { store: "resource" });
        assert.deepEqual(await adapter.ask("write", { version: 1 }), { write: "fence" });
        await adapter.ask("disconnect");
        // a recovery restores the applied store and keeps the other
        await adapter.ask("invoke", { role: "recover" });
        let end;
        while ((end = await adapter.ask("step", { invocation: 1 })).event === "step")
            ;
        assert.deepEqual([end.refusal, end.after], [null, "reopen resource"]);
        seen = await adapter.ask("observe");
        assert.deepEqual(seen.plan, [true, false]);
        assert.deepEqual(seen.stores.map(s => [s.version, s.data, s.admission]), [[1, "original", "open"], [1, "original", "open"]]);
        assert.equal(seen.recoveryResult, true);
        // open again: a writer of version 1 lands, one of version 2 is fenced
        await adapter.ask("connect", { store: "run" });
        assert.deepEqual(await adapter.ask("write", { version: 1 }), { write: "landed" });
        assert.deepEqual(await adapter.ask("write", { version: 2 }), { write: "fence" });
        assert.equal((await adapter.ask("observe")).stores[0].data, "original+1w");
        // a connected writer is a physical owner: the migration refuses (recovery selected comes first on a rerun)
        await adapter.ask("reset");
        await adapter.ask("connect", { store: "run" });
        await adapter.ask("invoke", { role: "migrate" });
        const refused = await adapter.ask("step", { invocation: 0 });
        assert.deepEqual([refused.event, refused.refusal], ["exit", "physical_owner_alive"]);
    }
    finally {
        await adapter.close();
    }
});
