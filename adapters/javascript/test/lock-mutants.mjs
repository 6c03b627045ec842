// Broken copies of the seed's projection-lock.js, for testing the tester: each a realistic edit, an exact `from` ->
// `to` string replacement (`from` occurs exactly once in the seed's file), one per class of the lock model's
// findings (docs/findings.md, F7 to F14: the fix that class is about is `fix`).
//
//   node test/lock-mutants.mjs                               list them (name: bug)
//   node test/lock-mutants.mjs NAME SEED_STORAGE_DIR OUT_DIR  write OUT_DIR/storage/projection-lock.js (mutated);
//                                                            prints the --source
//
// Each should be caught by `envreplica conformance --protocol lock --variant seed --adapter "node
// bin/envreplica-lock-adapter.js --source OUT_DIR/storage/projection-lock.js"`, in a few moves.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const MUTANTS = [
    {
        name: "inode_check_dropped", fix: "claimed-takeover", klass: "a check dropped",
        bug: "a stale lock is renamed away without checking it is still the one judged (its inode)",
        from: "if (observedInode !== undefined && fs.statSync(lockPath).ino === observedInode) {",
        to: "if (observedInode !== undefined) {",
    },
    {
        name: "owner_written_empty_first", fix: "atomic-publish", klass: "a window widened",
        bug: "owner.json is written empty first, then whole: the window where a reader finds it empty is wider",
        from: "fs.writeFileSync(`${lockPath}/owner.json`, JSON.stringify(owner));",
        to: "fs.writeFileSync(`${lockPath}/owner.json`, \"\"), fs.writeFileSync(`${lockPath}/owner.json`, JSON.stringify(owner));",
    },
    {
        name: "release_leaves_the_directory", fix: "claimed-release", klass: "release by path",
        bug: "the release removes owner.json by its path and leaves the lock directory (every later caller waits)",
        from: "fs.rmSync(lockPath, { recursive: true, force: true });",
        to: "fs.rmSync(`${lockPath}/owner.json`, { force: true });",
    },
    {
        name: "start_time_not_probed", fix: "fresh-probe", klass: "stale judged by a cached probe",
        bug: "a live pid is never checked against the recorded start time (a reused pid keeps a dead owner's lock)",
        from: "if (!observed.has(current.pid))\n                        observed.set(current.pid, processStartedAt(current.pid));\n                    stale = Boolean(current.started_at && observed.get(current.pid) !== current.started_at);",
        to: "stale = false;",
    },
    {
        name: "dead_owner_not_taken_over", fix: "zombie-dead", klass: "a crash step not handled",
        bug: "a dead owner (ESRCH) is not judged stale: a killed holder's lock is never taken over",
        from: "stale = probe.code === \"ESRCH\";",
        to: "stale = false;",
    },
    {
        name: "failure_passed_raw", fix: "true-answers", klass: "an error misreported",
        bug: "the operation's error is passed through as it was, not as the seed's publication_pending answer",
        from: "        throw new AppError(\"publication_pending\", \"Committed projection needs reconciliation\"",
        to: "        throw error;\n        throw new AppError(\"publication_pending\", \"Committed projection needs reconciliation\"",
    },
    {
        name: "busy_without_waiting", fix: "tickets", klass: "a waiter given up early",
        bug: "a caller that finds the lock held gives up busy at once, without its 80 tries",
        from: "if (tries >= 80)",
        to: "if (tries >= 0)",
    },
];

export function mutate(name, source) {
    const mutant = MUTANTS.find(m => m.name === name);
    if (!mutant)
        throw new Error(`no lock mutant ${name} (node test/lock-mutants.mjs lists them)`);
    const at = source.indexOf(mutant.from);
    if (at < 0 || source.indexOf(mutant.from, at + 1) >= 0)
        throw new Error(`lock mutant ${name}: its text occurs ${at < 0 ? "nowhere" : "more than once"} in the seed's file`);
    return source.slice(0, at) + mutant.to + source.slice(at + mutant.from.length);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
    const [name, storage, out] = process.argv.slice(2);
    if (!name) {
        for (const m of MUTANTS)
            process.stdout.write(`${m.name}: ${m.bug} (${m.klass}; the fix: ${m.fix})\n`);
    }
    else {
        const source = fs.readFileSync(path.join(storage, "projection-lock.js"), "utf8");
        fs.mkdirSync(path.join(out, "storage"), { recursive: true });
        const target = path.join(out, "storage", "projection-lock.js");
        fs.writeFileSync(target, mutate(name, source));
        process.stdout.write(target + "\n");
    }
}
