// Registers the kit's loader (hooks.mjs) for the seed whose migration is at $ENVREPLICA_MIGRATION_KIT_SOURCE
// (DIR/storage/paired-writer-migration.js: the seed's root is DIR). Used as `node --import .../register.mjs`,
// or called as `registerSeed(source)` before the seed is imported.
import path from "node:path";
import { register } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const KIT = path.dirname(here);
let registered = null;

export function seedRootOf(source) {
    return path.dirname(path.dirname(path.resolve(source)));
}

export function registerSeed(source) {
    const seedRoot = seedRootOf(source);
    if (registered !== null) {
        if (registered !== seedRoot)
            throw new Error(`the loader is registered for ${registered}, not ${seedRoot}`);
        return seedRoot;
    }
    register(pathToFileURL(path.join(here, "hooks.mjs")).href, import.meta.url, {
        data: { seedRoot, standins: path.join(KIT, "standins"), shim: pathToFileURL(path.join(here, "sqlite-shim.mjs")).href },
    });
    registered = seedRoot;
    return seedRoot;
}

if (process.env.ENVREPLICA_MIGRATION_KIT_SOURCE)
    registerSeed(process.env.ENVREPLICA_MIGRATION_KIT_SOURCE);
