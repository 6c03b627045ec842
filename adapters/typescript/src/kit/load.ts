/**
 * Loading an implementation: the seed's file compiled against the kit's host (`--source`), or a module of your own
 * that exports `createReplica` (`--impl`). TypeScript is compiled with esbuild when the adapter starts; packages stay
 * external and resolve from the `node_modules` the compiled file is written beside (`node_modules/.cache`).
 */

import { existsSync, mkdirSync, readFileSync, statSync, unlinkSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, extname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { build, type Plugin } from "esbuild";

import type { CreateReplica } from "./replica.js";

/** The source or module cannot be used: one line for the person who named it (exit 2). */
export class LoadError extends Error {}

const TYPESCRIPT = new Set([".ts", ".mts", ".cts", ".tsx"]);
/** Where a checkout of @runuai/host keeps the seed's file. */
const SEED_IN_CHECKOUT = ["lib/project-env-replica.ts", "package/lib/project-env-replica.ts"];
/** The host modules the kit supplies to the seed's file, as the file imports them. */
const SUPPLIED = ["../src/protocol", "./credential-store", "./db", "./host-env", "./secrets", "./user-credentials-store"];

/** The seed's file that `--source` names: the file itself, or the one in a checkout of @runuai/host. */
export function seedFile(source: string): string {
  const path = resolve(source);
  if (!existsSync(path)) throw new LoadError(`--source ${source}: no such file or directory`);
  if (statSync(path).isDirectory()) {
    const found = SEED_IN_CHECKOUT.map((part) => join(path, part)).find((file) => existsSync(file));
    if (found === undefined) {
      throw new LoadError(`--source ${source}: a directory without ${SEED_IN_CHECKOUT.join(" or ")}; name the ` +
        `replica's TypeScript file, or the checkout of @runuai/host that holds it`);
    }
    return found;
  }
  if (!statSync(path).isFile()) throw new LoadError(`--source ${source}: not a regular file`);
  if (!TYPESCRIPT.has(extname(path))) {
    throw new LoadError(`--source ${source}: not TypeScript (the name must end in .ts); name the replica's .ts file`);
  }
  return path;
}

/** Compile `entry` with `plugins` into a file beside `nodeModules`, import it, and remove the file. */
async function compileAndImport(entry: string, nodeModules: string, plugins: Plugin[], what: string): Promise<unknown> {
  const cache = join(nodeModules, ".cache", "envreplica-kit");
  mkdirSync(cache, { recursive: true });
  const out = join(cache, `${process.pid}-${randomBytes(6).toString("hex")}.mjs`);
  try {
    await build({
      entryPoints: [entry],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      packages: "external",
      sourcemap: "inline",
      outfile: out,
      logLevel: "silent",
      plugins,
    });
  } catch (error) {
    const first = (error as { errors?: { text: string; location?: { file: string; line: number; column: number } }[] })
      .errors?.[0];
    const where = first?.location ? ` (${first.location.file}:${first.location.line}:${first.location.column})` : "";
    throw new LoadError(`${what} does not compile: ${first?.text ?? String(error)}${where}`);
  }
  try {
    return await import(pathToFileURL(out).href);
  } finally {
    unlinkSync(out);
  }
}

/** How the kit's host seals a value's text: Node's UTF-8 as the seed's host (finding F3), or exactly (F3 fixed). */
export type Sealing = "utf8" | "exact";

/** The seed's file compiled with the kit's host modules: its `createReplica`. */
export async function loadSeed(kitRoot: string, source: string, sealing: Sealing = "utf8"): Promise<CreateReplica> {
  const file = seedFile(source);
  const hostLib = join(kitRoot, "src", "seed", "host", "lib");
  const plugin: Plugin = {
    name: "envreplica-seed-host",
    setup(b) {
      b.onResolve({ filter: /^envreplica:seed$/ }, () => ({ path: file }));
      b.onLoad({ filter: /.*/ }, (args) =>
        args.path === file ? { contents: readFileSync(file, "utf8"), loader: "ts" } : undefined,
      );
      b.onResolve({ filter: /^\.\.?\// }, (args) => {
        if (args.importer !== file) return undefined;
        const target = resolve(hostLib, args.path) + ".ts";
        if (!existsSync(target)) {
          return { errors: [{ text: `it imports ${args.path}, which the kit does not supply (it supplies ` +
            `${SUPPLIED.join(", ")})` }] };
        }
        return { path: target };
      });
    },
  };
  const module = (await compileAndImport(join(kitRoot, "src", "seed", "plug.ts"), join(kitRoot, "node_modules"),
    [plugin], `--source ${source}`)) as {
    createReplica: CreateReplica;
    missingExports: () => string[];
    setTextEncoding: (encoding: Sealing) => void;
  };
  const missing = module.missingExports();
  if (missing.length > 0) {
    throw new LoadError(`--source ${source}: lacks the export${missing.length > 1 ? "s" : ""} ${missing.join(", ")} ` +
      `that the kit calls (the operations of project-env-replica.ts)`);
  }
  module.setTextEncoding(sealing);
  return module.createReplica;
}

function nearestNodeModules(from: string, fallback: string): string {
  for (let dir = dirname(from); ; dir = dirname(dir)) {
    if (existsSync(join(dir, "node_modules"))) return join(dir, "node_modules");
    if (dirname(dir) === dir) return fallback;
  }
}

/** Your own implementation: a module exporting `createReplica(host)` (named, or as its default export). */
export async function loadImplementation(kitRoot: string, modulePath: string): Promise<CreateReplica> {
  const path = resolve(modulePath);
  if (!existsSync(path) || !statSync(path).isFile()) throw new LoadError(`--impl ${modulePath}: no such file`);
  const module = (TYPESCRIPT.has(extname(path))
    ? await compileAndImport(path, nearestNodeModules(path, join(kitRoot, "node_modules")), [], `--impl ${modulePath}`)
    : await import(pathToFileURL(path).href)) as { createReplica?: unknown; default?: unknown };
  const create = module.createReplica ?? module.default;
  if (typeof create !== "function") {
    throw new LoadError(`--impl ${modulePath}: exports no createReplica function (export function ` +
      `createReplica(host: Host): Replica, or make it the default export)`);
  }
  return create as CreateReplica;
}
