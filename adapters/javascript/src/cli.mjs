// The kit's command lines: options read by `node:util`'s `parseArgs`, as the TypeScript kit's are.
//
// Every command of the kit (the migration adapter, the seed extractor; the lock's adapter when it comes) ends the
// same ways: `--help` prints its help on standard output and exits 0; a bad option, a missing one or a value it
// cannot take is ONE line on standard error, `<command>: <what is wrong>; <usage>`, and exit status 2, never a
// stack trace.
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";

/** An option that cannot be taken as given (the command ends with one line and exit status 2). */
export class UsageError extends Error { }

/**
 * `argv` read against `options` (`parseArgs`'s option table; `help` is added). Returns `{ values, positionals }`;
 * prints `help` and exits 0 for `--help` or `-h`; a bad argument throws `UsageError` naming it, with `usage`.
 */
export function readCommandLine(argv, { options, usage, help, positionals = false }) {
    let parsed;
    try {
        parsed = parseArgs({ args: argv, options: { ...options, help: { type: "boolean", short: "h" } },
            allowPositionals: positionals, strict: true });
    }
    catch (error) {
        throw new UsageError(`${oneLine(error.message)}; ${usage}`);
    }
    if (parsed.values.help) {
        process.stdout.write(help.endsWith("\n") ? help : help + "\n");
        process.exit(0);
    }
    return parsed;
}

/**
 * `--source`'s `value`, resolved: the seed's module an adapter runs, `file` in words. A `UsageError` when it is
 * missing (with `usage`), an empty path, not there, or not a file.
 */
export function sourceFile(value, file, usage) {
    if (value === undefined)
        throw new UsageError(`--source is required: name ${file}; ${usage}`);
    if (value === "")
        throw new UsageError(`--source is an empty path; name ${file}`);
    const source = path.resolve(value);
    let stat;
    try {
        stat = fs.statSync(source);
    }
    catch (error) {
        throw new UsageError(`--source ${source}: ${error.code === "ENOENT" ? "no such file" : error.message}; `
            + `name ${file} (envreplica-extract-migration-seed writes the seed's)`);
    }
    if (!stat.isFile())
        throw new UsageError(`--source ${source} is not a file; name ${file}`);
    return source;
}

/** `run()` (a command's body), with a `UsageError` said in one line on standard error and exit status 2. */
export async function command(name, run) {
    try {
        return await run();
    }
    catch (error) {
        if (!(error instanceof UsageError))
            throw error;
        process.stderr.write(`${name}: ${oneLine(error.message)}\n`);
        process.exit(2);
    }
}

function oneLine(text) {
    return String(text).split(/\s*\n\s*/).join(" ").trim();
}
