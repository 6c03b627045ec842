// The `node:fs` the seed's projection-lock.js gets (the loader's rule, src/lock-hooks.mjs): Node's own `fs`, with
// each call the seed makes on its lock path paused before as a step (src/lock-stepper.mjs), named as the lock model
// names it. Every other call, and every call on another path, is Node's own, unpaused.
//
// The seed's calls and their steps:
//   mkdirSync(dirname(L), {recursive})          not modelled (the parent's creation): no pause
//   mkdirSync(L)                                "mkdir L"
//   writeFileSync(L/owner.json, data)           "create owner file" (open O_CREAT|O_TRUNC|O_WRONLY), then
//                                               "write owner file" (write, close): two steps, as writeFileSync is
//   rmdirSync(L)                                "rmdir L (write failed)"
//   statSync(L)                                 "stat L"; "stat L again" after the probes judged the owner stale
//   readFileSync(L/owner.json)                  "read owner file"
//   renameSync(L, L.stale-<uuid>)               "rename L to stale"
//   rmSync(L.stale-<uuid>, {recursive})         "unlink stale owner file" (rmdir attempt, readdir, unlink each
//                                               entry; an empty directory is removed here), then "rmdir stale"
//   rmSync(L, {recursive, force})               "unlink owner file (release)" (likewise; nothing there: done),
//                                               then "rmdir L (release)" (ENOENT: done, force; ENOTEMPTY thrown)
// rmSync takes the calls Node 20's own recursive removal makes (lib/internal/fs/rimraf.js: lstat, rmdir, on
// ENOTEMPTY readdir and each child removed, rmdir again), grouped as the model's two steps: the first rmdir fails
// on a directory that holds a file and changes nothing, so the grouping hides no state.
//
// An error thrown by a step of the release carries `releaseStep` (the caller's answer is then "release-failed").
import fs from "node:fs";
import path from "node:path";
import * as stepper from "./lock-stepper.mjs";

const { me } = stepper;
const PROBES = new Set(["read owner file", "kill probe", "start-time probe"]);

function isLock(p) {
    return path.resolve(String(p)) === path.resolve(me.lockPath);
}

function isOwner(p) {
    return path.resolve(String(p)) === path.resolve(me.ownerPath);
}

function isStale(p) {
    return path.basename(String(p)).startsWith(path.basename(me.lockPath) + ".stale-")
        && path.dirname(path.resolve(String(p))) === path.dirname(path.resolve(me.lockPath));
}

function mkdirSync(p, options) {
    if (isLock(p) && !(options && options.recursive))
        stepper.pause("mkdir L", "mkdir");
    return fs.mkdirSync(p, options);
}

function writeFileSync(p, data, options) {
    if (!isOwner(p))
        return fs.writeFileSync(p, data, options);
    stepper.pause("create owner file", "create");
    const fd = fs.openSync(p, "w");
    try {
        stepper.pause("write owner file", "write");
        fs.writeSync(fd, typeof data === "string" ? data : Buffer.from(data));
    }
    finally {
        fs.closeSync(fd);
    }
}

function rmdirSync(p, options) {
    if (isLock(p))
        stepper.pause("rmdir L (write failed)", "rmdir");
    return fs.rmdirSync(p, options);
}

function statSync(p, options) {
    if (isLock(p))
        stepper.pause(PROBES.has(stepper.lastStep()) ? "stat L again" : "stat L", "stat");
    return fs.statSync(p, options);
}

function readFileSync(p, options) {
    if (isOwner(p))
        stepper.pause("read owner file", "read");
    return fs.readFileSync(p, options);
}

function renameSync(from, to) {
    if (isLock(from))
        stepper.pause("rename L to stale", "rename");
    return fs.renameSync(from, to);
}

/** A directory's removal as Node 20's rimraf makes it, in the model's two steps (``first``, ``second``). */
function removeInTwo(p, force, first, second, release) {
    const tag = (error, step) => {
        if (release)
            error.releaseStep = step;
        return error;
    };
    stepper.pause(first, "unlink");
    try {
        fs.lstatSync(p);
    }
    catch (error) {
        if (error.code === "ENOENT" && force)
            return;
        throw tag(error, first);
    }
    try {
        fs.rmdirSync(p);
        stepper.made("rmdir");
        return; // it was empty: removed in the first step
    }
    catch (error) {
        if (error.code === "ENOENT")
            return;
        if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST")
            throw tag(error, first);
    }
    let entries;
    try {
        entries = fs.readdirSync(p);
    }
    catch (error) {
        if (error.code === "ENOENT")
            return;
        throw tag(error, first);
    }
    for (const entry of entries) {
        try {
            fs.rmSync(path.join(p, entry), { recursive: true, force: true });
        }
        catch (error) {
            throw tag(error, first);
        }
    }
    stepper.pause(second, "rmdir");
    try {
        fs.rmdirSync(p);
    }
    catch (error) {
        if (error.code === "ENOENT")
            return;
        throw tag(error, second);
    }
}

function rmSync(p, options = {}) {
    if (isLock(p) && options.recursive)
        return removeInTwo(p, Boolean(options.force), "unlink owner file (release)", "rmdir L (release)", true);
    if (isStale(p) && options.recursive)
        return removeInTwo(p, Boolean(options.force), "unlink stale owner file", "rmdir stale", false);
    return fs.rmSync(p, options);
}

const stepping = { ...fs, mkdirSync, writeFileSync, rmdirSync, statSync, readFileSync, renameSync, rmSync };
export default stepping;
export { mkdirSync, writeFileSync, rmdirSync, statSync, readFileSync, renameSync, rmSync };
