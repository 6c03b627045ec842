// envreplica-extract-seed (scripts/extract-seed.mjs): the file a seed diff adds whole, written exactly where a
// checkout of @runuai/host keeps it, so that `--source DIR` finds it.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

const script = join(dirname(fileURLToPath(import.meta.url)), "..", "scripts", "extract-seed.mjs");
const work = mkdtempSync(join(tmpdir(), "envreplica-kit-extract-"));
after(() => rmSync(work, { recursive: true, force: true }));
const extract = (...args) => spawnSync(process.execPath, [script, ...args], { encoding: "utf8" });

test("writes the file the diff adds, its + lines after the @@, as lib/project-env-replica.ts", () => {
  const diff = join(work, "000_seed.txt");
  writeFileSync(diff, [
    "@runuai/host 0.9.148 → 0.9.149", "", "package/lib/project-env-replica.ts", "",
    "@@ -0,0 +1,3 @@", "+export const A = 1;", "+", "+// +3 @@ lines are text here", "",
  ].join("\n"));
  const run = extract(diff, join(work, "out"));
  assert.equal(run.status, 0, run.stderr);
  assert.equal(readFileSync(join(work, "out", "lib", "project-env-replica.ts"), "utf8"),
    "export const A = 1;\n\n// +3 @@ lines are text here\n");
  assert.match(run.stdout, /lib\/project-env-replica\.ts \(3 lines\)/);
});

test("a diff without the seed's file is exit 1; a usage error exit 2", () => {
  const diff = join(work, "001_other.txt");
  writeFileSync(diff, "package/dist/x.js\n\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n");
  const run = extract(diff, join(work, "other"));
  assert.equal(run.status, 1);
  assert.match(run.stderr, /not written: package\/dist\/x\.js is a partial change/);
  assert.match(run.stderr, /no whole package\/lib\/project-env-replica\.ts/);
  assert.equal(extract().status, 2);
  assert.equal(extract(join(work, "missing.txt"), work).status, 2);
});
