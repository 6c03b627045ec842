/**
 * Type-checking an implementation before it runs (`tsc --noEmit` semantics, with the TypeScript compiler API):
 * esbuild, which compiles it, strips types without checking them, so without this a type error would run.
 *
 * - `--source`: the seed's file under `tsc --strict`, its host imports (`./db`, `../src/protocol`, ...) mapped onto
 *   the kit's host modules (their declarations), its packages resolved from the kit, as `load.ts` maps them for
 *   esbuild.
 * - `--impl`: your module (and what it imports) under its nearest `tsconfig.json`, or strict defaults without one.
 *
 * A check that passed is remembered in the kit's cache directory, by the content of the files it read (a
 * package's files by size and modification time), so an adapter started again on the same code does not pay for it
 * again (a type-check costs seconds; the harness starts an adapter per run, and again after one dies).
 */

import { createHash } from "node:crypto";
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve, sep } from "node:path";

import type ts from "typescript";

import { cacheDir, KIT_ROOT } from "./cache.js";

/** What a failed check says: the first diagnostics (`file:line:col - error TSnnnn: message`) and how many there were. */
export interface TypeErrors {
  shown: string[];
  count: number;
}

/** A program to check: its root files, its options, and how some imports resolve. */
export interface CheckRequest {
  roots: string[];
  /** Compiler options as a tsconfig.json's `compilerOptions` would write them. */
  options?: Record<string, unknown>;
  /** Already parsed options (a tsconfig.json's); used instead of `options`. */
  parsed?: (t: typeof ts) => { options: ts.CompilerOptions; errors: readonly ts.Diagnostic[] };
  /** A file an import resolves to, instead of TypeScript's resolution; undefined: TypeScript's. */
  redirect?: (specifier: string, containingFile: string) => string | undefined;
  /** Where an import from `containingFile` is resolved from, when not redirected (default: the file itself). */
  resolveFrom?: (containingFile: string) => string;
  /** What else the cached verdict depends on (the content of a root whose path does not matter, a config file). */
  key: unknown;
  /** Files whose path may change without changing the verdict (left out of the cache entry). */
  pathFree?: string[];
  /** Check even when a pass is remembered, and remember nothing (tests). */
  fresh?: boolean;
}

/** The first diagnostics shown of a failed check. */
export const SHOWN = 10;

const NODE_MODULES = `${sep}node_modules${sep}`;

function sha256(data: string | Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}

/** A file's fingerprint: its content's hash, or for a package's file its size and modification time. */
function fingerprint(file: string): string | null {
  try {
    if (file.includes(NODE_MODULES)) {
      const stat = statSync(file);
      return `s${stat.size}:${stat.mtimeMs}`;
    }
    return sha256(readFileSync(file));
  } catch {
    return null;
  }
}

/** The version of the TypeScript the kit checks with (part of every verdict's key). */
function typescriptVersion(): string {
  try {
    const main = createRequire(import.meta.url).resolve("typescript");
    return (JSON.parse(readFileSync(join(dirname(main), "..", "package.json"), "utf8")) as { version: string }).version;
  } catch {
    return "unknown";
  }
}

function entryPath(key: unknown): string {
  return join(cacheDir(), `typecheck-${sha256(JSON.stringify(key)).slice(0, 32)}.json`);
}

function cachedPass(key: unknown): boolean {
  const path = entryPath(key);
  if (!existsSync(path)) return false;
  try {
    const entry = JSON.parse(readFileSync(path, "utf8")) as { files: [string, string][] };
    return entry.files.every(([file, print]) => fingerprint(file) === print);
  } catch {
    return false;
  }
}

function rememberPass(key: unknown, files: string[]): void {
  const path = entryPath(key);
  const entry = { key, files: files.map((file) => [file, fingerprint(file)]) };
  const temporary = `${path}.${process.pid}.tmp`;
  try {
    writeFileSync(temporary, JSON.stringify(entry));
    renameSync(temporary, path);
  } catch {
    // a cache that cannot be written only costs the next start a check
  }
}

/** Every `node_modules/@types` from `dir` up, then the kit's (so `types: ["node"]` resolves anywhere). */
export function typeRoots(dir: string): string[] {
  const roots: string[] = [];
  const climb = (from: string) => {
    for (let here = resolve(from); ; here = dirname(here)) {
      const candidate = join(here, "node_modules", "@types");
      if (existsSync(candidate) && !roots.includes(candidate)) roots.push(candidate);
      if (dirname(here) === here) return;
    }
  };
  climb(dir);
  climb(KIT_ROOT);
  return roots;
}

let typescript: typeof ts | null = null;

async function load(): Promise<typeof ts> {
  if (typescript === null) typescript = (await import("typescript")).default;
  return typescript;
}

function where(file: string): string {
  const shown = relative(process.cwd(), file);
  return shown.startsWith("..") && shown.split(sep).filter((part) => part === "..").length > 2 ? file : shown;
}

function extension(t: typeof ts, file: string): ts.Extension {
  const known: [string, ts.Extension][] = [[".d.ts", t.Extension.Dts], [".d.mts", t.Extension.Dmts],
    [".d.cts", t.Extension.Dcts], [".mts", t.Extension.Mts], [".cts", t.Extension.Cts], [".tsx", t.Extension.Tsx],
    [".ts", t.Extension.Ts], [".mjs", t.Extension.Mjs], [".cjs", t.Extension.Cjs], [".jsx", t.Extension.Jsx]];
  return known.find(([suffix]) => file.endsWith(suffix))?.[1] ?? t.Extension.Js;
}

/** Check the program; null when it type-checks (remembered), else its errors. */
export async function check(request: CheckRequest): Promise<TypeErrors | null> {
  const withoutPaths = new Set((request.pathFree ?? []).map((file) => resolve(file)));
  const roots = request.roots.map((file) => resolve(file)).filter((file) => !withoutPaths.has(file));
  const cacheKey = { request: request.key, options: request.options ?? null, roots, typescript: typescriptVersion() };
  if (request.fresh !== true && cachedPass(cacheKey)) return null;
  const t = await load();
  let options: ts.CompilerOptions;
  let configErrors: readonly ts.Diagnostic[];
  if (request.parsed !== undefined) {
    ({ options, errors: configErrors } = request.parsed(t));
  } else {
    const converted = t.convertCompilerOptionsFromJson(request.options ?? {}, dirname(request.roots[0]!));
    options = converted.options;
    configErrors = converted.errors;
  }
  options = { ...options, noEmit: true };
  const host = t.createCompilerHost(options, true);
  const cache = t.createModuleResolutionCache(host.getCurrentDirectory(), (name) => host.getCanonicalFileName(name),
    options);
  host.resolveModuleNameLiterals = (literals, containingFile, redirected, compilerOptions, containingSourceFile) =>
    literals.map((literal) => {
      const target = request.redirect?.(literal.text, containingFile);
      if (target !== undefined) {
        return {
          resolvedModule: { resolvedFileName: target, extension: extension(t, target), isExternalLibraryImport: false },
        };
      }
      const from = request.resolveFrom?.(containingFile) ?? containingFile;
      const mode = t.getModeForUsageLocation(containingSourceFile, literal, compilerOptions);
      return t.resolveModuleName(literal.text, from, compilerOptions, host, cache, redirected, mode);
    });
  const program = t.createProgram({ rootNames: request.roots, options, host });
  const diagnostics = [...configErrors, ...t.getPreEmitDiagnostics(program)]
    .filter((d) => d.category === t.DiagnosticCategory.Error);
  if (diagnostics.length === 0) {
    const files = program.getSourceFiles().map((file) => resolve(file.fileName)).filter((f) => !withoutPaths.has(f));
    if (request.fresh !== true) rememberPass(cacheKey, files);
    return null;
  }
  const shown = diagnostics.slice(0, SHOWN).map((d) => {
    const message = t.flattenDiagnosticMessageText(d.messageText, " ");
    if (d.file === undefined || d.start === undefined) return `error TS${d.code}: ${message}`;
    const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
    return `${where(d.file.fileName)}:${line + 1}:${character + 1} - error TS${d.code}: ${message}`;
  });
  return { shown, count: diagnostics.length };
}

/** Strict defaults for a module without a tsconfig.json, and for the seed's file (what esbuild compiles). */
export function strictOptions(dir: string): Record<string, unknown> {
  return {
    strict: true,
    target: "ES2022",
    module: "ESNext",
    moduleResolution: "Bundler",
    lib: ["ES2023"],
    types: ["node"],
    typeRoots: typeRoots(dir),
    esModuleInterop: true,
    resolveJsonModule: true,
    allowImportingTsExtensions: true,
    skipLibCheck: true,
  };
}

/** The nearest tsconfig.json from `dir` up, or null. */
export function nearestConfig(dir: string): string | null {
  for (let here = resolve(dir); ; here = dirname(here)) {
    const candidate = join(here, "tsconfig.json");
    if (existsSync(candidate)) return candidate;
    if (dirname(here) === here) return null;
  }
}

/** The options of the tsconfig.json at `path` (its `extends` followed), for checking one module with them. */
export function configOptions(path: string): (t: typeof ts) => { options: ts.CompilerOptions; errors: ts.Diagnostic[] } {
  return (t) => {
    const errors: ts.Diagnostic[] = [];
    const parsed = t.getParsedCommandLineOfConfigFile(path, { noEmit: true }, {
      ...t.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => errors.push(d),
    });
    if (parsed === undefined) return { options: { noEmit: true }, errors };
    // Only this module and what it imports are checked: the config's own file list does not matter here.
    errors.push(...parsed.errors.filter((d) => d.code !== 18003));
    const { tsBuildInfoFile: _ignored, ...own } = parsed.options;
    const options: ts.CompilerOptions = {
      ...own,
      noEmit: true,
      composite: false,
      incremental: false,
      declaration: false,
      declarationMap: false,
      emitDeclarationOnly: false,
      sourceMap: false,
    };
    if (options.types !== undefined && options.typeRoots === undefined) options.typeRoots = typeRoots(dirname(path));
    return { options, errors };
  };
}

/** What the last line of a failed check says. */
export const SKIP_HINT = "--no-typecheck skips this check (esbuild then compiles and runs the code unchecked)";
