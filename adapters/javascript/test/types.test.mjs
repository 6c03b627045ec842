// The package's types (types/index.d.ts) against what it is: `npm test` (with `npm run typecheck`'s compiler).
//
// - every value src/index.mjs exports is declared there, and nothing else is;
// - a program imports them by the package's name (its `exports`), and `tsc --strict` accepts them;
// - a migration module of one's own that lacks what the kit calls (`apply`) is refused by the types, and so is a
//   lock module without `withProjectionLock`; the seed's own paired-writer-migration.js and projection-lock.js
//   (allowJs, their types inferred) are accepted as a `PairedWriterMigrationModule` and a `ProjectionLockModule`
//   (skipped without ENVREPLICA_SEED_MIGRATION_DIFF, as the kit's other tests).
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

const USE = `import { FINAL, LOCK_MAX_TRIES, LOCK_PROTOCOL, LOCK_STEPS, PROTOCOL, STEPS, point, registerSeed, runLockAdapter,
    runMigrationAdapter, seedRootOf } from "@envreplica/migration-kit";
import type { PairedWriterMigrationModule, ProjectionLockModule } from "@envreplica/migration-kit";
const protocol: "envreplica-migration/1" = PROTOCOL;
const lockProtocol: "envreplica-lock/1" = LOCK_PROTOCOL;
const tries: 80 = LOCK_MAX_TRIES;
const first: string | undefined = LOCK_STEPS[0];
const locking: Promise<void> = runLockAdapter(["--help"]);
const lock: ProjectionLockModule = { withProjectionLock: (lockPath, operation) => { void lockPath.length; return operation(); } };
const held: number = lock.withProjectionLock("/x/lock", () => 1);
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
export { protocol, last, root, running, mine, lockProtocol, tries, first, locking, held };
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

//: Modules of one's own that lack what the kit calls, each refused by the types: (name, program, what tsc says).
const REFUSED = [
    ["a migration module without apply", `import type { PairedWriterMigrationModule } from "@envreplica/migration-kit";
export const bad: PairedWriterMigrationModule = {
    PreparedPairedWriterMigration: { prepare: () => ({ retain() { } }), restore: () => ({ retain() { } }) },
    PreparedPairedWriterRecovery: { prepare: () => ({ apply() { } }), restore: () => ({ apply() { } }) },
};
`, /Property 'apply' is missing/],
    ["a lock module without withProjectionLock", `import type { ProjectionLockModule } from "@envreplica/migration-kit";
export const bad: ProjectionLockModule = { withLock: (_lockPath: string, operation: () => unknown) => operation() };
`, /'withLock' does not exist in type 'ProjectionLockModule'/],
    ["a lock module whose operation takes no function", `import type { ProjectionLockModule } from "@envreplica/migration-kit";
export const bad: ProjectionLockModule = { withProjectionLock: (lockPath: string, operation: string) => lockPath + operation };
`, /not assignable to type/],
];

for (const [name, program, says] of REFUSED)
    test(`${name} is refused by the types`, { skip: noCompiler }, () => {
        const { status, output } = typecheck(name.replace(/\W+/g, "-"), { "bad.ts": program });
        assert.notEqual(status, 0);
        assert.match(output, says);
    });

//: The seed's own modules, each the kit's type for what its adapter's `--source` names: (file, type).
const SEED_MODULES = [["paired-writer-migration.js", "PairedWriterMigrationModule"], ["projection-lock.js", "ProjectionLockModule"]];
const diff = process.env.ENVREPLICA_SEED_MIGRATION_DIFF || null;
for (const [file, type] of SEED_MODULES)
    test(`the seed's own ${file} is a ${type}`, { skip: noCompiler || (diff ? false : "no reference seed diff (set ENVREPLICA_SEED_MIGRATION_DIFF)") }, () => {
        const seed = fs.mkdtempSync(path.join(os.tmpdir(), "envreplica-js-types-"));
        try {
            const run = spawnSync(process.execPath, [path.join(KIT, "scripts", "extract-seed.mjs"), diff, seed], { encoding: "utf8" });
            assert.equal(run.status, 0, run.stderr);
            const dir = path.join(WORK, `seed-${type}`);
            const source = path.relative(dir, path.join(seed, "storage", file)).split(path.sep).join("/");
            const { status, output } = typecheck(`seed-${type}`, { "seed.ts": `import type { ${type} } from "@envreplica/migration-kit";
import * as seed from "${source}";
export const plugged: ${type} = seed;
` });
            assert.equal(status, 0, output);
        }
        finally {
            fs.rmSync(seed, { recursive: true, force: true });
        }
    });
