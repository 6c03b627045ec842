// Broken copies of the seed's paired-writer-migration.js, for testing the tester: each a realistic one-line edit,
// an exact `from` -> `to` string replacement (`from` occurs exactly once in the seed's file).
//
//   node test/mutants.mjs                               list them
//   node test/mutants.mjs NAME SEED_STORAGE_DIR OUT_DIR  write OUT_DIR/storage/paired-writer-migration.js (mutated)
//                                                       and the seed's other files beside it; prints the --source
//
// Each should be caught by `envreplica conformance --protocol migration --variant seed --adapter "node
// bin/envreplica-migration-adapter.js --source OUT_DIR/storage/paired-writer-migration.js"`.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const MUTANTS = [
    {
        name: "backup_undrained",
        bug: "the drain is not observed again before each backup (a writer that connected after the drain observation is not seen)",
        from: "                drained(this.#intent.stores);\n                child.backup();",
        to: "                child.backup();",
    },
    {
        name: "apply_before_backup",
        bug: "each store is applied before it is backed up (the backup holds the migrated store)",
        from: "                child.backup();",
        to: "                child.apply(), child.backup();",
    },
    {
        name: "second_home_left_fenced",
        bug: "maintenance is completed for the first home only: the resource store stays fenced after the result",
        from: "            completeStorageMaintenance({ home, ...scope });",
        to: "            if (home === homes[0]) completeStorageMaintenance({ home, ...scope });",
    },
    {
        name: "unknown_outcome_accepted",
        bug: "a store that is neither its source nor migrated (written since the request) is not refused: it is migrated as it is",
        from: "            refuse(\"unknown_child_outcome\");",
        to: "            void \"unknown_child_outcome\";",
    },
    {
        name: "recovery_selection_ignored",
        bug: "a rerun of the migration does not refuse when a recovery was selected (it looks for the wrong file)",
        from: "        assertOwnership();\n        if (fs.existsSync(this.#file + \".recovery.json\"))",
        to: "        assertOwnership();\n        if (fs.existsSync(this.#file + \".recovery\"))",
    },
    {
        name: "prepare_undrained",
        bug: "a request is prepared without observing the drain (a connected writer is not refused)",
        from: "        drained(stores);\n        return new PreparedPairedWriterMigration(",
        to: "        return new PreparedPairedWriterMigration(",
    },
    {
        name: "recovery_unfenced_second",
        bug: "the recovery fences only the first home before restoring",
        from: "        for (const home of new Set(material.intent.stores.map(store => store.home)))\n            beginStorageRecovery({ home,",
        to: "        for (const home of [material.intent.stores[0].home])\n            beginStorageRecovery({ home,",
    },    {
        name: "children_before_parent",
        bug: "retain() publishes the child inputs before the parent request (the seed's \"parent first\": a crash between them leaves children no request names)",
        from: "        publishImmutableInput(this.#file, Buffer.from(JSON.stringify(this.#intent)), \"paired_migration_request_conflict\");\n        for (const child of this.#children)\n            child.retain();",
        to: "        for (const child of this.#children)\n            child.retain();\n        publishImmutableInput(this.#file, Buffer.from(JSON.stringify(this.#intent)), \"paired_migration_request_conflict\");",
    },
    {
        name: "resource_home_unfenced",
        bug: "the migration's homes are taken from the run store only: the resource store is never put under maintenance (nor completed)",
        from: "        const homes = [...new Set(this.#intent.stores.map(store => store.home))];",
        to: "        const homes = [this.#intent.stores[0].home];",
    },
];

/** The seed's file with `mutant` applied; throws unless `from` occurs exactly once. */
export function mutate(text, mutant) {
    const at = text.indexOf(mutant.from);
    if (at < 0 || text.indexOf(mutant.from, at + 1) >= 0)
        throw new Error(`${mutant.name}: its 'from' occurs ${at < 0 ? "nowhere" : "more than once"} in the seed's file`);
    return text.slice(0, at) + mutant.to + text.slice(at + mutant.from.length);
}

/** Writes the mutated seed under `outDir` (storage/paired-writer-migration.js and the seed's other storage
 * files, unchanged); returns the --source path. */
export function writeMutant(name, seedStorage, outDir) {
    const mutant = MUTANTS.find(m => m.name === name);
    if (!mutant)
        throw new Error(`no mutant ${name}: ${MUTANTS.map(m => m.name).join(", ")}`);
    const storage = path.join(outDir, "storage");
    fs.mkdirSync(storage, { recursive: true });
    for (const file of fs.readdirSync(seedStorage).filter(f => f.endsWith(".js")))
        fs.copyFileSync(path.join(seedStorage, file), path.join(storage, file));
    const source = path.join(storage, "paired-writer-migration.js");
    fs.writeFileSync(source, mutate(fs.readFileSync(path.join(seedStorage, "paired-writer-migration.js"), "utf8"), mutant));
    return source;
}

if (process.argv[1] && fs.realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
    const [name, seedStorage, outDir] = process.argv.slice(2);
    if (!name) {
        for (const m of MUTANTS)
            process.stdout.write(`${m.name}: ${m.bug}\n`);
    }
    else if (!seedStorage || !outDir) {
        process.stderr.write("usage: mutants.mjs [NAME SEED_STORAGE_DIR OUT_DIR]\n");
        process.exit(2);
    }
    else {
        process.stdout.write(writeMutant(name, seedStorage, outDir) + "\n");
    }
}
