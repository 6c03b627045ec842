#!/usr/bin/env node
// Builds the kit: `tsc -p tsconfig.build.json` into dist/ (JavaScript, declarations, source maps), which the bin, the
// package's exports and the tarball use. `npm ci` and `npm pack` run it (the `prepare` script).
//   node scripts/build.mjs              build
//   node scripts/build.mjs --if-stale   build only when a file under src/ (or a tsconfig) is newer than dist/
// It builds into a fresh directory and then swaps it in, under a lock, so that adapters starting meanwhile, and
// builds started together (parallel test workers), see either the old dist/ or the new one, whole.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const kit = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(kit, "dist");
const stamp = join(dist, ".built");
const lock = join(kit, "dist.lock");

function newest(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((name) => newest(join(path, name))));
}

export function stale() {
  if (!existsSync(stamp)) return true;
  const sources = Math.max(newest(join(kit, "src")), ...["tsconfig.json", "tsconfig.build.json"].map((f) => newest(join(kit, f))));
  return sources > statSync(stamp).mtimeMs;
}

const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

function acquire() {
  for (;;) {
    try {
      mkdirSync(lock);
      return;
    } catch (error) {
      if (error.code !== "EEXIST") throw error;
      try {
        if (Date.now() - statSync(lock).mtimeMs > 300_000) rmSync(lock, { recursive: true, force: true }); // abandoned
      } catch {}
      sleep(200);
    }
  }
}

const ifStale = process.argv.includes("--if-stale");
if (ifStale && !stale()) process.exit(0);
acquire();
try {
  if (!ifStale || stale()) {
    const fresh = join(kit, `dist.new-${process.pid}`);
    rmSync(fresh, { recursive: true, force: true });
    const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
    try {
      execFileSync(process.execPath, [tsc, "-p", join(kit, "tsconfig.build.json"), "--outDir", fresh], { stdio: "inherit" });
    } catch {
      rmSync(fresh, { recursive: true, force: true });
      process.stderr.write("envreplica kit: the build failed (tsc above)\n");
      process.exit(1);
    }
    writeFileSync(join(fresh, ".built"), `${new Date().toISOString()}\n`);
    const old = join(kit, `dist.old-${process.pid}`);
    if (existsSync(dist)) renameSync(dist, old);
    renameSync(fresh, dist);
    rmSync(old, { recursive: true, force: true });
  }
} finally {
  rmSync(lock, { recursive: true, force: true });
}
