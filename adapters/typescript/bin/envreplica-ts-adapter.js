#!/usr/bin/env node
// Compiles the kit's TypeScript (src/cli.ts and what it imports) with esbuild when it starts, then runs it: the kit
// needs no build step beyond `npm ci`. The compiled file is written beside node_modules and removed once loaded.
import { mkdirSync, unlinkSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
let build;
try {
  ({ build } = await import("esbuild"));
} catch {
  process.stderr.write(`envreplica-ts-adapter: its packages are not installed; run \`npm ci\` in ${root}\n`);
  process.exit(2);
}
process.setSourceMapsEnabled(true);
const cache = join(root, "node_modules", ".cache", "envreplica-kit");
mkdirSync(cache, { recursive: true });
const out = join(cache, `cli-${process.pid}-${randomBytes(6).toString("hex")}.mjs`);
await build({
  entryPoints: [join(root, "src", "cli.ts")],
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  sourcemap: "inline",
  outfile: out,
  logLevel: "error",
});
let cli;
try {
  cli = await import(pathToFileURL(out).href);
} finally {
  unlinkSync(out);
}
process.exitCode = await cli.main(root, process.argv.slice(2));
