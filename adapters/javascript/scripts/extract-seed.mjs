#!/usr/bin/env node
// Extracts the second reference seed's own JavaScript from its diff:
//   envreplica-extract-migration-seed SEED_DIFF OUT_DIR     (in a checkout: node scripts/extract-seed.mjs ...)
//
// The seed is a diff of an npm package (`package/dist/...`). A file the diff adds whole (one hunk
// `@@ -0,0 +1,N @@`) is written to OUT_DIR/<its path under package/dist>, e.g. OUT_DIR/storage/writer-contract.js,
// exactly: its N `+` lines without the `+`, each ending in a newline (the last one too, unless the diff says
// "\ No newline at end of file"). A change to a file the diff does not show
// whole (any other hunk, e.g. paths.js) is reported on stderr and not written: the kit cannot rebuild it.
// Exit 0 when at least storage/paired-writer-migration.js was written, 1 otherwise; 2 (one line on stderr) when
// it cannot run as asked (a missing argument, a diff it cannot read, an OUT_DIR it cannot write).
import fs from "node:fs";
import path from "node:path";
import { UsageError, command, readCommandLine } from "../src/cli.mjs";

const NAME = "envreplica-extract-migration-seed";
const USAGE = `usage: ${NAME} SEED_DIFF OUT_DIR`;
const HELP = `${USAGE}

Writes each file the reference seed's diff (its 001_*.txt) adds whole to OUT_DIR, at its path under the
package's dist/ (OUT_DIR/storage/paired-writer-migration.js and the others beside it), byte for byte. A file
the diff changes only in part is named on standard error and not written. Then:

  envreplica-migration-adapter --source OUT_DIR/storage/paired-writer-migration.js
`;

const [diffPath, outDir, text] = await command(NAME, () => {
    const { positionals } = readCommandLine(process.argv.slice(2), { options: {}, usage: USAGE, help: HELP, positionals: true });
    if (positionals.length !== 2)
        throw new UsageError(`${positionals.length < 2 ? "missing" : "too many"} arguments: give the seed's diff and the folder to write into; ${USAGE}`);
    const [diff, out] = positionals;
    try {
        return [diff, out, fs.readFileSync(diff, "utf8")];
    }
    catch (error) {
        throw new UsageError(`${diff}: cannot read it (${error.code ?? error.message}); name the reference seed's 001_*.txt`);
    }
});
const lines = text.split("\n");
const HUNK = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;
const PREFIX = "package/dist/";
const files = []; // {name, hunks: [{header, whole, count, body: []}]}
for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const hunk = HUNK.exec(line);
    if (hunk) {
        const file = files.at(-1);
        if (!file)
            throw new Error(`line ${i + 1}: a hunk before any file name`);
        const [, oldStart, oldCount, , newCount] = hunk;
        const whole = oldStart === "0" && oldCount === "0";
        const count = Number(newCount ?? 1);
        const body = [];
        if (whole) {
            // exactly `count` added lines follow
            for (let k = 0; k < count; k++) {
                const added = lines[i + 1 + k];
                if (added === undefined || !added.startsWith("+"))
                    throw new Error(`${file.name}: hunk at line ${i + 1} promises ${count} added lines, line ${i + 2 + k} is not one`);
                body.push(added.slice(1));
            }
            i += count;
        }
        // "\ No newline at end of file" after the last added line: the file ends without one
        const noNewline = whole && lines[i + 1]?.startsWith("\\ No newline");
        if (noNewline)
            i++;
        file.hunks.push({ header: line, whole, count, body, noNewline });
        continue;
    }
    if (line.startsWith(PREFIX) && !line.startsWith("+") && !line.startsWith("-") && !line.startsWith(" ")) {
        files.push({ name: line.trim(), hunks: [] });
    }
}
let wrote = 0, migration = false;
for (const file of files) {
    const rel = file.name.slice(PREFIX.length);
    if (file.hunks.length === 1 && file.hunks[0].whole) {
        const out = path.join(outDir, rel);
        const text = file.hunks[0].body.join("\n");
        try {
            fs.mkdirSync(path.dirname(out), { recursive: true });
            fs.writeFileSync(out, file.hunks[0].noNewline || text === "" ? text : text + "\n");
        } catch (error) {
            process.stderr.write(`${out}: cannot write it (${error.code ?? error.message}); name an OUT_DIR you can write\n`);
            process.exit(2);
        }
        process.stdout.write(`${out} (${file.hunks[0].count} lines)\n`);
        wrote++;
        if (rel === "storage/paired-writer-migration.js")
            migration = true;
    }
    else {
        process.stderr.write(`not written: ${file.name} is a partial change (${file.hunks.length} hunk(s) of a file the diff does not show whole); ` +
            "the migration does not import it\n");
    }
}
if (!migration) {
    process.stderr.write(`${diffPath}: no whole storage/paired-writer-migration.js in it\n`);
    process.exit(1);
}
process.stderr.write(`${wrote} whole file(s) written under ${outDir}\n`);
