// The module loader's resolve hook (registered by register.mjs through `module.register`, Node 20.6+).
//
// It loads the seed's files from the seed's own directory as they are (no edit, no copy) and supplies what they
// import and the seed does not ship:
// - `node:sqlite`, only where the running Node has none: the kit's `DatabaseSync` over better-sqlite3
//   (src/sqlite-shim.mjs);
// - a relative import from a file under the seed's root (the directory above `storage/`) or under the kit's
//   `standins/` resolves to the same relative path under the seed's root when that file exists there, else to
//   the kit's stand-in at that relative path under `standins/` (e.g. the seed's import of its errors module from
//   `storage/` is `standins/shared/errors.js`; a stand-in's `./writer-contract.js` is the seed's own). One URL
//   per module either way, so the seed and the stand-ins share one instance of each (one `AppError` class, one
//   writer admission table);
// - `seed-root:PATH` (what a stand-in writes for a module outside its own folder) is PATH under the seed's root
//   by the same rule.
// Files under the seed's root load as ES modules whatever package.json they lack (the seed's package is "type":
// "module"; the extracted files have none). Anything else resolves as Node would.
import fs from "node:fs";
import path from "node:path";
import { isBuiltin } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

let seedRoot = null;
let standins = null;
let shim = null;
const nativeSqlite = isBuiltin("node:sqlite");

export async function initialize(data) {
    seedRoot = data.seedRoot;
    standins = data.standins;
    shim = data.shim;
}

function under(root, file) {
    const rel = path.relative(root, file);
    return rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel) ? rel : null;
}

/** The module at `rel` under the seed's root when the seed has it, else the kit's stand-in at `rel`. */
function seedOrStandin(rel, specifier, parent) {
    const seedFile = path.join(seedRoot, rel);
    if (fs.existsSync(seedFile)) return { url: pathToFileURL(seedFile).href, format: "module", shortCircuit: true };
    const standin = path.join(standins, rel);
    if (fs.existsSync(standin)) return { url: pathToFileURL(standin).href, format: "module", shortCircuit: true };
    throw new Error(`${specifier} (from ${parent}): neither the seed (${seedFile}) nor the kit (${standin}) has it`);
}

export async function resolve(specifier, context, nextResolve) {
    if (specifier === "node:sqlite" && !nativeSqlite)
        return { url: shim, format: "module", shortCircuit: true };
    if ((specifier.startsWith("./") || specifier.startsWith("../")) && context.parentURL?.startsWith("file:") && seedRoot) {
        const parent = fileURLToPath(context.parentURL);
        const root = under(seedRoot, parent) !== null ? seedRoot : under(standins, parent) !== null ? standins : null;
        if (root) {
            const rel = under(root, path.resolve(path.dirname(parent), specifier));
            if (rel !== null) return seedOrStandin(rel, specifier, parent);
        }
    }
    if (specifier.startsWith("seed-root:") && seedRoot)
        return seedOrStandin(path.normalize(specifier.slice("seed-root:".length)), specifier, context.parentURL);
    const resolved = await nextResolve(specifier, context);
    if (seedRoot && resolved.url.startsWith("file:") && under(seedRoot, fileURLToPath(resolved.url)) !== null)
        return { ...resolved, format: "module" };
    return resolved;
}
