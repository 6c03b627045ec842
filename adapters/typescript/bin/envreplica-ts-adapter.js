#!/usr/bin/env node
// The kit's command: runs dist/cli.js, the kit compiled by `npm run build` (which `npm ci` runs in a checkout, and
// which the package's tarball ships), so nothing of the kit is compiled when it starts. esbuild compiles only the
// TypeScript it is given (--source, --impl). In a checkout, a dist/ older than src/ is refused: build it again.
import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const say = (line) => process.stderr.write(`envreplica-ts-adapter: ${line}\n`);
const cli = join(root, "dist", "cli.js");

function newest(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((name) => newest(join(path, name))));
}

if (!existsSync(cli)) {
  say(`the kit is not built (no dist/cli.js): run \`npm ci\` (or \`npm run build\`) in ${root}`);
  process.exit(2);
}
const stamp = join(root, "dist", ".built");
if (!root.includes(`${sep}node_modules${sep}`) && existsSync(join(root, "src")) && existsSync(stamp)
    && newest(join(root, "src")) > statSync(stamp).mtimeMs) {
  say(`the kit's build (dist/) is older than its sources (src/): run \`npm run build\` in ${root}`);
  process.exit(2);
}
process.setSourceMapsEnabled(true);
let main;
try {
  ({ main } = await import(pathToFileURL(cli).href));
} catch (error) {
  if (error?.code === "ERR_MODULE_NOT_FOUND") {
    say(`its packages are not installed (${error.message.split("\n")[0]}); run \`npm ci\` in ${root}`);
    process.exit(2);
  }
  throw error;
}
process.exitCode = await main(root, process.argv.slice(2));
