// The package's types (types/index.d.ts) against what it is: `npm test` (with `npm run typecheck`'s compiler).
//
// - every value src/index.mjs exports is declared there, and nothing else is;
// - a program imports them by the package's name (its `exports`), and `tsc --strict` accepts them;
// - a migration module of one's own that lacks what the kit calls (`apply`) is refused by the types, and the
//   seed's own paired-writer-migration.js (allowJs, its types inferred) is accepted as a
//   `PairedWriterMigrationModule` (skipped without ENVREPLICA_SEED_MIGRATION_DIFF, as the kit's other tests).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const KIT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const TSC = path.join(KIT, "node_modules", "typescript", "bin", "tsc");
// Inside the package, so that its own name resolves through its `exports` (a package's self-reference).
const WORK = fs.mkdtempSync(path.join(KIT, "test", ".types-"));
after(() => fs.rmSync(WORK, { recursive: true, force: true }));
const noCompiler = fs.existsSync(TSC) ? false : "typescript is not installed (npm ci installs the kit's devDependencies)";

/** `tsc --noEmit` over `files` ({ name: text }) in a folder of WORK; its status and output. */
function typecheck(name, files) {
    const dir = path.join(WORK, name);
    fs.mkdirSync(dir);
    for (const [file, text] of Object.entries(files))
        fs.writeFileSync(path.join(dir, file), text);
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({
        compilerOptions: { strict: true, noEmit: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022",
            allowJs: true, checkJs: false, skipLibCheck: false, types: [] },
        files: Object.keys(files),
    }));
    const run = spawnSync(process.execPath, [TSC, "-p", dir], { encoding: "utf8" });
    return { status: run.status, output: run.stdout + run.stderr };
}

const USE = `import { FINAL, PROTOCOL, STEPS, point, registerSeed, runMigrationAdapter, seedRootOf } from "@envreplica/migration-kit";
import type { PairedWriterMigrationModule } from "@envreplica/migration-kit";
const protocol: "envreplica-migration/1" = PROTOCOL;
const last: boolean = FINAL.has(STEPS[STEPS.length - 1]);
point("lock:taken", { held: true });
const root: string = seedRootOf(registerSeed("/x/storage/paired-writer-migration.js"));
const running: Promise<never> = runMigrationAdapter(["--help"]);
const mine: PairedWriterMigrationModule = {
    PreparedPairedWriterMigration: {
        prepare: (input) => ({ retain() { void input.runHome; }, apply() { } }),
        restore: (_file, _sha256) => ({ retain() { }, apply() { } }),
    },
    PreparedPairedWriterRecovery: {
        prepare: (migration, _id) => ({ apply() { migration.apply(); } }),
        restore: () => ({ apply() { } }),
    },
};
export { protocol, last, root, running, mine };
`;

test("every value the package exports is declared, and only those", async () => {
    const declared = [...fs.readFileSync(path.join(KIT, "types", "index.d.ts"), "utf8")
        .matchAll(/^export declare (?:const|function) (\w+)/gm)].map(m => m[1]).sort();
    const exported = Object.keys(await import("../src/index.mjs")).sort();
    assert.deepEqual(declared, exported);
});

test("a program imports the package by its name and type-checks under --strict", { skip: noCompiler }, () => {
    const { status, output } = typecheck("use", { "use.ts": USE });
    assert.equal(status, 0, output);
});

test("a migration module without what the kit calls is refused by the types", { skip: noCompiler }, () => {
    const { status, output } = typecheck("bad", { "bad.ts": `import type { PairedWriterMigrationModule } from "@envreplica/migration-kit";
export const bad: PairedWriterMigrationModule = {
    PreparedPairedWriterMigration: { prepare: () => ({ retain() { } }), restore: () => ({ retain() { } }) },
    PreparedPairedWriterRecovery: { prepare: () => ({ apply() { } }), restore: () => ({ apply() { } }) },
};
` });
    assert.notEqual(status, 0);
    assert.match(output, /Property 'apply' is missing/);
});

const diff = process.env.ENVREPLICA_SEED_MIGRATION_DIFF || null;
test("the seed's own migration is a PairedWriterMigrationModule", { skip: noCompiler || (diff ? false : "no reference seed diff (set ENVREPLICA_SEED_MIGRATION_DIFF)") }, () => {
    const seed = fs.mkdtempSync(path.join(os.tmpdir(), "envreplica-js-types-"));
    try {
        const run = spawnSync(process.execPath, [path.join(KIT, "scripts", "extract-seed.mjs"), diff, seed], { encoding: "utf8" });
        assert.equal(run.status, 0, run.stderr);
        const dir = path.join(WORK, "seed");
        const source = path.relative(dir, path.join(seed, "storage", "paired-writer-migration.js")).split(path.sep).join("/");
        const { status, output } = typecheck("seed", { "seed.ts": `import type { PairedWriterMigrationModule } from "@envreplica/migration-kit";
import * as seed from "${source}";
export const plugged: PairedWriterMigrationModule = seed;
` });
        assert.equal(status, 0, output);
    }
    finally {
        fs.rmSync(seed, { recursive: true, force: true });
    }
});
