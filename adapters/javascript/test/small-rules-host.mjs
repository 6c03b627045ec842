// A host for the second seed's two small rules, for tests/test_javascript_small_rules.py: JSON lines in, one answer
// per line out.
//   {"rule": "work", "source": ".../storage/work-references.js", "db": FILE, "id": ..., "scope": {...}}
//       -> {"work": work_id} or {"error": code, "message"}: resolveWorkReference as it ships, its `context.db`
//          (`get`, `all`) over better-sqlite3 reading FILE
//   {"rule": "canonical", "value": PATH, "mustExist": false, "before": false} -> {"path": ...} or {"error": code}
//       (before: the rule the hunks replace)
//   {"rule": "within", "root": PATH, "candidate": PATH} -> {"path": ...} or {"error": code}
import readline from "node:readline";
import { pathToFileURL } from "node:url";
import Database from "better-sqlite3";
import { registerSeed } from "../src/register.mjs";
import { assertPathWithin, canonicalPath, canonicalPathBefore } from "./paths-canonical.mjs";

const modules = new Map();
async function resolver(source) {
    if (!modules.has(source)) {
        registerSeed(source);
        modules.set(source, (await import(pathToFileURL(source).href)).resolveWorkReference);
    }
    return modules.get(source);
}

function answer(fn) {
    try {
        return fn();
    }
    catch (error) {
        return { error: String(error?.code ?? error?.name), message: String(error?.message) };
    }
}

for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim())
        continue;
    const r = JSON.parse(line);
    let out;
    if (r.rule === "work") {
        const resolve = await resolver(r.source);
        const db = new Database(r.db, { readonly: true });
        const context = { db: { get: (sql, params) => db.prepare(sql).get(...params), all: (sql, params) => db.prepare(sql).all(...params) } };
        out = answer(() => ({ work: resolve(context, r.id, r.scope ?? {}).work_id }));
        db.close();
    }
    else if (r.rule === "canonical")
        out = answer(() => ({ path: (r.before ? canonicalPathBefore : canonicalPath)(r.value, r.mustExist ?? false) }));
    else
        out = answer(() => ({ path: assertPathWithin(r.root, r.candidate) }));
    process.stdout.write(JSON.stringify(out) + "\n");
}
