#!/usr/bin/env node
// `npm run gate`: hold this replica to envreplica's model (variant fixed, tables compared), through the kit's
// adapter command. Runs `${ENVREPLICA:-envreplica} conformance --variant fixed --profile dev --adapter "<node>
// <the kit's envreplica-ts-adapter> --impl src/plug.ts"`, then any arguments given (`npm run gate -- --profile ci`),
// and exits with its status: 0 agrees, 1 a divergence (its trace under out/conformance), 2 could not run.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const fail = (line) => {
  process.stderr.write(`gate: ${line}\n`);
  process.exit(2);
};

/** The kit's adapter command (its package's `bin`), found as Node finds the package: up from this folder. */
function kitBin() {
  for (let dir = root; ; dir = dirname(dir)) {
    const kit = join(dir, "node_modules", "@envreplica", "adapter-kit");
    if (existsSync(join(kit, "package.json"))) {
      const bin = JSON.parse(readFileSync(join(kit, "package.json"), "utf8")).bin?.["envreplica-ts-adapter"];
      if (typeof bin === "string" && existsSync(join(kit, bin))) return join(kit, bin);
      fail(`${kit} has no envreplica-ts-adapter command; install the kit again (npm install)`);
    }
    if (dirname(dir) === dir) fail("the kit @envreplica/adapter-kit is not installed: run `npm install` first");
  }
}

const quote = (word) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'"'"'`)}'`);
const adapter = [process.execPath, kitBin(), "--impl", join(root, "src", "plug.ts")].map(quote).join(" ");
const envreplica = process.env.ENVREPLICA || "envreplica";
const args = ["conformance", "--variant", "fixed", "--profile", "dev", "--adapter", adapter, ...process.argv.slice(2)];
process.stderr.write(`gate: ${[envreplica, ...args].map(quote).join(" ")}\n`);
const run = spawnSync(envreplica, args, { cwd: root, stdio: "inherit" });
if (run.error?.code === "ENOENT") {
  fail(`${envreplica} not found: \`pip install\` envreplica (it puts \`envreplica\` on PATH), or set ENVREPLICA to ` +
    "its command, e.g. ENVREPLICA=/path/to/.venv/bin/envreplica npm test");
}
if (run.error) fail(`${envreplica} could not run: ${run.error.message}`);
process.exit(run.status ?? (run.signal === "SIGINT" ? 130 : 1));
