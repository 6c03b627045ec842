/**
 * `envreplica-ts-adapter`: a TypeScript implementation of the replica behind envreplica's adapter protocol.
 *
 *   envreplica-ts-adapter --source PATH [--db FILE] [--sealing utf8|exact] [--no-typecheck]
 *       the seed's file (or a checkout of @runuai/host), with the kit's host: database, credential store, sealing,
 *       notifier, key. `--sealing` says how the host seals a value's text: `utf8` (the default) as the seed's host
 *       does, Node's UTF-8, which turns a lone surrogate into U+FFFD (finding F3); `exact`, the text exactly (F3
 *       fixed), to hold the seed's file alone to variant `fixed`.
 *   envreplica-ts-adapter --impl MODULE [--db FILE] [--no-typecheck]
 *       your own module exporting createReplica(host) (TypeScript, or JavaScript run as it is).
 *
 * TypeScript is type-checked before it runs (`tsc --noEmit`: the seed's file under `--strict` with the kit's host
 * modules; your module under its nearest tsconfig.json, or `--strict` defaults), then compiled with esbuild. A check
 * that passed is remembered for the same code. `--no-typecheck` skips the check.
 *
 * It reads one JSON request per line on standard input and writes one JSON response per line on standard output
 * (docs/protocol.md), until end of input. It is a test adapter: values are sealed under the public test key unless a
 * `reset` sends another, and `state` shows them in plaintext. A problem with the options or the source is one line
 * on standard error and exit status 2; a type error is exit status 2 with the first diagnostics.
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { Adapter, serve } from "./kit/adapter.js";
import { LoadError, loadImplementation, loadSeed } from "./kit/load.js";

const USAGE =
  "usage: envreplica-ts-adapter (--source PATH [--sealing utf8|exact] | --impl MODULE) [--db FILE] [--no-typecheck]";

const HELP = `${USAGE}

Serves envreplica's adapter protocol (JSON lines on standard input and output) for a TypeScript replica:
  --source PATH      the seed's project-env-replica.ts (or a checkout of @runuai/host holding lib/...), with the
                     kit's host modules
  --sealing utf8     how the kit's host seals values for --source: utf8 as the seed's host (F3), or exact
  --impl MODULE      your module exporting createReplica(host: Host): Replica (see @envreplica/adapter-kit/host)
  --db FILE          the replica's SQLite file (default: one in a temporary directory, removed at exit)
  --no-typecheck     run TypeScript without type-checking it first (tsc --noEmit; a passed check is cached)
`;

class UsageError extends Error {}

export async function main(kitRoot: string, argv: string[]): Promise<number> {
  // One line each; a type-check's diagnostics follow its first line, indented.
  const say = (text: string) =>
    process.stderr.write(text.split("\n").map((line) => (line.startsWith(" ") ? line : `envreplica-ts-adapter: ${line}`))
      .join("\n") + "\n");
  let temporary: string | null = null;
  try {
    let values: { source?: string; impl?: string; db?: string; sealing?: string; help?: boolean;
      "no-typecheck"?: boolean };
    try {
      ({ values } = parseArgs({
        args: argv,
        options: {
          source: { type: "string" },
          impl: { type: "string" },
          db: { type: "string" },
          sealing: { type: "string" },
          help: { type: "boolean" },
          "no-typecheck": { type: "boolean" },
        },
        strict: true,
      }));
    } catch (error) {
      throw new UsageError(`${(error as Error).message}; ${USAGE}`);
    }
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    if ((values.source === undefined) === (values.impl === undefined)) {
      throw new UsageError(`name the implementation with exactly one of --source and --impl; ${USAGE}`);
    }
    if (values.sealing !== undefined && values.source === undefined) {
      throw new UsageError("--sealing is the kit's host's, so it goes with --source only");
    }
    const sealing = values.sealing ?? "utf8";
    if (sealing !== "utf8" && sealing !== "exact") {
      throw new UsageError(`--sealing must be utf8 or exact; got ${JSON.stringify(sealing)}`);
    }
    if (values.db === "") throw new UsageError("--db is an empty path; name a file, or leave --db out");
    const typecheck = values["no-typecheck"] !== true;
    const create = values.source !== undefined
      ? await loadSeed(kitRoot, values.source, sealing, { typecheck })
      : await loadImplementation(kitRoot, values.impl!, { typecheck });
    if (values.db === undefined) temporary = mkdtempSync(join(tmpdir(), "envreplica-ts-adapter-"));
    const dbPath = values.db ?? join(temporary!, "replica.db");
    say("sealing under the public TEST key (unless a reset sends another): test data only");
    // Only responses go to standard output: a stray console.log goes to standard error.
    console.log = console.error;
    console.info = console.error;
    const adapter = await Adapter.open(create, { dbPath });
    try {
      await serve(adapter, process.stdin, (line) => process.stdout.write(line));
    } finally {
      await adapter.close();
    }
    return 0;
  } catch (error) {
    if (error instanceof UsageError || error instanceof LoadError) {
      say(error.message);
      return 2;
    }
    throw error;
  } finally {
    if (temporary !== null) rmSync(temporary, { recursive: true, force: true });
  }
}
