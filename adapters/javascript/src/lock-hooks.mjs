// The lock adapter's loader hooks (registered by src/lock-register.mjs): the migration kit's (src/hooks.mjs: the
// seed's files loaded from where they are, its missing imports from the kit's stand-ins), and for the lock's
// source file alone (the seed's projection-lock.js, or a copy of it):
// - `node:fs` (and `fs`) is the kit's stepping fs (src/stepping-fs.mjs);
// - `../services/managed-processes.js` is the lock's stand-in (standins/lock/services/managed-processes.js), whose
//   start-time probe the adapter's world answers.
import * as base from "./hooks.mjs";

let source = null;
let steppingFs = null;
let lockStandin = null;

export async function initialize(data) {
    await base.initialize(data);
    source = data.source;
    steppingFs = data.steppingFs;
    lockStandin = data.lockStandin;
}

export async function resolve(specifier, context, nextResolve) {
    if (source !== null && context.parentURL === source) {
        if (specifier === "node:fs" || specifier === "fs")
            return { url: steppingFs, format: "module", shortCircuit: true };
        if (specifier === "../services/managed-processes.js")
            return { url: lockStandin, format: "module", shortCircuit: true };
    }
    return base.resolve(specifier, context, nextResolve);
}
