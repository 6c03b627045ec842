/**
 * Loading an implementation: the seed's file compiled against the kit's host (`--source`), or a module of your own
 * that exports `createReplica` (`--impl`). Each is type-checked first (`typecheck.ts`; `--no-typecheck` skips it),
 * then compiled with esbuild when the adapter starts.
 *
 * esbuild bundles the implementation's own files; every package it imports stays external, resolved where Node
 * would resolve it from the importing file and written into the compiled module as that file's URL. So the compiled
 * module can live anywhere (the kit's cache directory), and a package is one instance however it is reached: your
 * module's `@envreplica/adapter-kit/host` is the kit's own, and the seed's `drizzle-orm` is the kit's host's.
 */

import { existsSync, readFileSync, statSync, unlinkSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import { isBuiltin } from "node:module";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build, type ImportKind, type Plugin, type PluginBuild } from "esbuild";

import { cacheDir } from "./cache.js";
import type { CreateReplica } from "./replica.js";
import {
  check,
  type CheckRequest,
  configOptions,
  nearestConfig,
  SKIP_HINT,
  strictOptions,
  type TypeErrors,
} from "./typecheck.js";

/** The source or module cannot be used: what to tell the person who named it (exit 2). */
export class LoadError extends Error {}

/** The source or module does not type-check: its first diagnostics, then how to skip the check (exit 2). */
export class TypeCheckError extends LoadError {
  constructor(what: string, errors: TypeErrors) {
    const count = `${errors.count} error${errors.count === 1 ? "" : "s"}`;
    const more = errors.count > errors.shown.length ? `\n  ... and ${errors.count - errors.shown.length} more` : "";
    super(`${what} does not type-check (${count}):\n${errors.shown.map((line) => `  ${line}`).join("\n")}${more}\n` +
      SKIP_HINT);
  }
}

const TYPESCRIPT = new Set([".ts", ".mts", ".cts", ".tsx"]);
/** Where a checkout of @runuai/host keeps the seed's file. */
const SEED_IN_CHECKOUT = ["lib/project-env-replica.ts", "package/lib/project-env-replica.ts"];
/** The host modules the kit supplies to the seed's file, as the file imports them. */
const SUPPLIED = ["../src/protocol", "./credential-store", "./db", "./host-env", "./secrets", "./user-credentials-store"];
/** The kit's compiled modules (`dist/`): this file is `dist/kit/load.js`. */
const DIST = join(dirname(fileURLToPath(import.meta.url)), "..");
/** The kit's host modules for the seed's file, compiled; the file's imports resolve as if it sat in `lib/`. */
const SEED_HOST_LIB = join(DIST, "seed", "host", "lib");

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

/** The kit's host module a relative import of the seed's file names (`dist/seed/host/...`, without extension). */
function suppliedModule(specifier: string): string {
  return resolve(SEED_HOST_LIB, specifier);
}

const SKIP = Symbol("envreplica: resolving a package");

/**
 * esbuild's resolution of the package `specifier` from `resolveDir`, as a file URL to import (Node's conditions:
 * `import`, `node`, `default`), or its errors.
 */
async function packageUrl(b: PluginBuild, specifier: string, resolveDir: string, kind: ImportKind) {
  const found = await b.resolve(specifier, { resolveDir, kind, pluginData: SKIP });
  if (found.errors.length > 0) return { errors: found.errors };
  if (found.external || found.path === "") return { path: specifier, external: true };
  return { path: pathToFileURL(found.path).href, external: true };
}

/** Packages (and Node's modules) external, each as the file Node would load: see the module comment. */
function externalPackages(resolveDirOf: (importer: string, resolveDir: string) => string): Plugin {
  return {
    name: "envreplica-packages",
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, async (args) => {
        if (args.pluginData === SKIP || args.kind === "entry-point") return undefined;
        if (isBuiltin(args.path)) return { path: args.path, external: true };
        if (/^[A-Za-z]:[\\/]/.test(args.path) || args.path.startsWith("file:")) return undefined; // a path, not a package
        return packageUrl(b, args.path, resolveDirOf(args.importer, args.resolveDir), args.kind);
      });
    },
  };
}

/** Compile `entry` with `plugins` into one ES module in the kit's cache directory; returns its path. */
async function compile(entry: string, plugins: Plugin[], what: string): Promise<string> {
  const out = join(cacheDir(), `${process.pid}-${randomBytes(6).toString("hex")}.mjs`);
  try {
    await build({
      entryPoints: [entry],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      conditions: [],
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
  return out;
}

async function importOnce(file: string): Promise<unknown> {
  try {
    return await import(pathToFileURL(file).href);
  } finally {
    unlinkSync(file);
  }
}

/** How the kit's host seals a value's text: Node's UTF-8 as the seed's host (finding F3), or exactly (F3 fixed). */
export type Sealing = "utf8" | "exact";

/** Options of a load. */
export interface LoadOptions {
  /** Type-check before running (default true; `--no-typecheck` turns it off). */
  typecheck?: boolean;
}

/**
 * How `tsc` sees the seed's file `file`, as esbuild does here: its host imports (`./db`, `../src/protocol`, ...)
 * resolve to the kit's declarations of its host modules (`dist/seed/host/.../*.d.ts`), its packages from the kit's
 * host directory; strict options.
 */
export function seedMapping(file: string): Pick<CheckRequest, "options" | "redirect" | "resolveFrom"> {
  const seed = resolve(file);
  return {
    options: strictOptions(SEED_HOST_LIB),
    redirect: (specifier, containing) => {
      if (resolve(containing) !== seed || !/^\.\.?\//.test(specifier)) return undefined;
      const declaration = `${suppliedModule(specifier)}.d.ts`;
      return existsSync(declaration) ? declaration : undefined;
    },
    resolveFrom: (containing) => (resolve(containing) === seed ? join(SEED_HOST_LIB, "project-env-replica.ts") : containing),
  };
}

async function seedTypecheck(file: string, source: string): Promise<void> {
  const errors = await check({
    roots: [file],
    ...seedMapping(file),
    key: { kind: "source", content: createHash("sha256").update(readFileSync(file)).digest("hex") },
    pathFree: [file],
  });
  if (errors !== null) throw new TypeCheckError(`--source ${source}`, errors);
}

/** The seed module as the kit's plug sees it (`src/seed/plug.ts`). */
interface Plug {
  createSeedReplica: (seed: never, host: Parameters<CreateReplica>[0]) => ReturnType<CreateReplica>;
  missingExports: (seed: Record<string, unknown>) => string[];
  setTextEncoding: (encoding: Sealing) => void;
}

/** The seed's file compiled with the kit's host modules: its `createReplica`. */
export async function loadSeed(_kitRoot: string, source: string, sealing: Sealing = "utf8",
  options: LoadOptions = {}): Promise<CreateReplica> {
  const file = seedFile(source);
  const hostModules: Plugin = {
    name: "envreplica-seed-host",
    setup(b) {
      b.onResolve({ filter: /^\.\.?\// }, (args) => {
        if (resolve(args.importer) !== file) return undefined;
        const target = `${suppliedModule(args.path)}.js`;
        if (!existsSync(target)) {
          return { errors: [{ text: `it imports ${args.path}, which the kit does not supply (it supplies ` +
            `${SUPPLIED.join(", ")})` }] };
        }
        return { path: pathToFileURL(target).href, external: true };
      });
    },
  };
  const compiled = await compile(file, [hostModules, externalPackages(() => SEED_HOST_LIB)], `--source ${source}`);
  try {
    if (options.typecheck !== false) await seedTypecheck(file, source);
  } catch (error) {
    unlinkSync(compiled);
    throw error;
  }
  const seed = (await importOnce(compiled)) as Record<string, unknown>;
  const plug = (await import(pathToFileURL(join(DIST, "seed", "plug.js")).href)) as Plug;
  const missing = plug.missingExports(seed);
  if (missing.length > 0) {
    throw new LoadError(`--source ${source}: lacks the export${missing.length > 1 ? "s" : ""} ${missing.join(", ")} ` +
      `that the kit calls (the operations of project-env-replica.ts)`);
  }
  plug.setTextEncoding(sealing);
  return (host) => plug.createSeedReplica(seed as never, host);
}

/** Type-check `path` under its nearest tsconfig.json, or strict defaults. */
async function implTypecheck(path: string, modulePath: string): Promise<void> {
  const config = nearestConfig(dirname(path));
  const errors = await check(config === null
    ? { roots: [path], options: strictOptions(dirname(path)), key: { kind: "impl", config: null } }
    : {
      roots: [path],
      parsed: configOptions(config),
      key: { kind: "impl", config, content: createHash("sha256").update(readFileSync(config)).digest("hex") },
    });
  if (errors !== null) throw new TypeCheckError(`--impl ${modulePath}`, errors);
}

/** Your own implementation: a module exporting `createReplica(host)` (named, or as its default export). */
export async function loadImplementation(_kitRoot: string, modulePath: string,
  options: LoadOptions = {}): Promise<CreateReplica> {
  const path = resolve(modulePath);
  if (!existsSync(path) || !statSync(path).isFile()) throw new LoadError(`--impl ${modulePath}: no such file`);
  let module: { createReplica?: unknown; default?: unknown };
  if (TYPESCRIPT.has(extname(path))) {
    const compiled = await compile(path, [externalPackages((_importer, resolveDir) => resolveDir)],
      `--impl ${modulePath}`);
    try {
      if (options.typecheck !== false) await implTypecheck(path, modulePath);
    } catch (error) {
      unlinkSync(compiled);
      throw error;
    }
    module = (await importOnce(compiled)) as typeof module;
  } else {
    module = (await import(pathToFileURL(path).href)) as typeof module;
  }
  const create = module.createReplica ?? module.default;
  if (typeof create !== "function") {
    throw new LoadError(`--impl ${modulePath}: exports no createReplica function (export function ` +
      `createReplica(host: Host): Replica, or make it the default export)`);
  }
  return create as CreateReplica;
}

