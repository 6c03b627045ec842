// Registers the lock adapter's loader (src/lock-hooks.mjs) for the lock source at $ENVREPLICA_LOCK_KIT_SOURCE
// (DIR/storage/projection-lock.js, or a copy of it: the seed's root is the directory above its folder). Used as
// `node --import .../lock-register.mjs` by each lock user (src/lock-user.mjs).
import path from "node:path";
import { register } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { KIT, seedRootOf } from "./register.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const source = process.env.ENVREPLICA_LOCK_KIT_SOURCE;
if (source) {
    register(pathToFileURL(path.join(here, "lock-hooks.mjs")).href, import.meta.url, {
        data: {
            seedRoot: seedRootOf(source), standins: path.join(KIT, "standins"),
            shim: pathToFileURL(path.join(here, "sqlite-shim.mjs")).href,
            source: pathToFileURL(path.resolve(source)).href,
            steppingFs: pathToFileURL(path.join(here, "stepping-fs.mjs")).href,
            lockStandin: pathToFileURL(path.join(KIT, "standins", "lock", "services", "managed-processes.js")).href,
        },
    });
}
