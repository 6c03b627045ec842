#!/usr/bin/env node
// Extracts the seed's own file from the reference seed's diff: `envreplica-extract-seed SEED_DIFF OUT_DIR`
// (or `node scripts/extract-seed.mjs SEED_DIFF OUT_DIR`).
//
// The reference seed (000_*.txt) is a diff of the npm package @runuai/host that adds one file whole,
// `package/lib/project-env-replica.ts`, as a single hunk `@@ -0,0 +1,N @@` of N `+` lines. This writes each file the
// diff adds whole to OUT_DIR/<its path under package/>, exactly: its `+` lines without the `+`, each ending in a
// newline (the last one too, unless the diff says "\ No newline at end of file"). So OUT_DIR then holds
// lib/project-env-replica.ts as a checkout of @runuai/host does, and `envreplica-ts-adapter --source OUT_DIR` (or
// `--source OUT_DIR/lib/project-env-replica.ts`) runs it. A change to a file the diff does not show whole is
// reported on stderr and not written. Exit 0 when lib/project-env-replica.ts was written, 1 otherwise, 2 on usage.
import fs from "node:fs";
import path from "node:path";

const [diffPath, outDir, ...rest] = process.argv.slice(2);
if (!diffPath || !outDir || rest.length > 0) {
  process.stderr.write("usage: envreplica-extract-seed SEED_DIFF OUT_DIR\n");
  process.exit(2);
}
let text;
try {
  text = fs.readFileSync(diffPath, "utf8");
} catch (error) {
  process.stderr.write(`envreplica-extract-seed: ${diffPath}: ${error.code === "ENOENT" ? "no such file" : error.message}\n`);
  process.exit(2);
}
const lines = text.split("\n");
const HUNK = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;
const PREFIX = "package/";
const SEED = "lib/project-env-replica.ts";
const files = []; // {name, hunks: [{whole, count, body, noNewline}]}
for (let i = 0; i < lines.length; i++) {
  const line = lines[i];
  const hunk = HUNK.exec(line);
  if (hunk) {
    const file = files.at(-1);
    if (!file) {
      process.stderr.write(`envreplica-extract-seed: ${diffPath}:${i + 1}: a hunk before any file name\n`);
      process.exit(1);
    }
    const [, oldStart, oldCount, , newCount] = hunk;
    const whole = oldStart === "0" && oldCount === "0";
    const count = Number(newCount ?? 1);
    const body = [];
    if (whole) {
      for (let k = 0; k < count; k++) {
        const added = lines[i + 1 + k];
        if (added === undefined || !added.startsWith("+")) {
          process.stderr.write(`envreplica-extract-seed: ${file.name}: the hunk at line ${i + 1} promises ${count} ` +
            `added lines; line ${i + 2 + k} is not one\n`);
          process.exit(1);
        }
        body.push(added.slice(1));
      }
      i += count;
    }
    const noNewline = whole && lines[i + 1]?.startsWith("\\ No newline");
    if (noNewline) i++;
    file.hunks.push({ whole, count, body, noNewline });
    continue;
  }
  if (line.startsWith(PREFIX)) files.push({ name: line.trim(), hunks: [] });
}
let seed = false;
for (const file of files) {
  const rel = file.name.slice(PREFIX.length);
  if (file.hunks.length === 1 && file.hunks[0].whole) {
    const out = path.join(outDir, rel);
    const body = file.hunks[0].body.join("\n");
    try {
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, file.hunks[0].noNewline || body === "" ? body : `${body}\n`);
    } catch (error) {
      process.stderr.write(`envreplica-extract-seed: ${out}: cannot write it (${error.code ?? error.message}); ` +
        `name an OUT_DIR you can write\n`);
      process.exit(2);
    }
    process.stdout.write(`${out} (${file.hunks[0].count} lines)\n`);
    if (rel === SEED) seed = true;
  } else {
    process.stderr.write(`envreplica-extract-seed: not written: ${file.name} is a partial change ` +
      `(${file.hunks.length} hunk(s) of a file the diff does not show whole)\n`);
  }
}
if (!seed) {
  process.stderr.write(`envreplica-extract-seed: ${diffPath}: no whole ${PREFIX}${SEED} in it\n`);
  process.exit(1);
}
