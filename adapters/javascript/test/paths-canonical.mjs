// The rule the seed's paths.js hunks add to `canonicalPath` (package/dist/storage/paths.js, three hunks of a file
// the diff does not show whole), reconstructed for testing (tests/test_javascript_small_rules.py).
//
// The lines the diff shows are copied as they are; the lines it does not show and the function needs are marked
// ASSUMED: the head of the function (`absolute` from `path.resolve(value)`, an existing path's identity by
// `realpathSync`: the hunk's context shows that `return` and the `mustExist` refusal after it) and
// `assertPathWithin`'s test (the diff shows its first line only: a candidate is within when its canonical path is
// the root's or under it, by `path.relative`).
import fs from "node:fs";
import path from "node:path";

export function canonicalPath(value, mustExist = true) {
    const absolute = path.resolve(value); // ASSUMED (line 25 is not shown)
    if (fs.existsSync(absolute)) // ASSUMED (line 26 is not shown; the hunk's context shows the return below)
        return fs.realpathSync(absolute);
    if (mustExist)
        throw Object.assign(new Error(`Path does not exist: ${absolute}`), { code: "not_found" });
    const missing = [];
    let parent = absolute;
    while (!fs.existsSync(parent)) {
        missing.unshift(path.basename(parent));
        const next = path.dirname(parent);
        if (next === parent)
            return absolute;
        parent = next;
    }
    return path.join(fs.realpathSync(parent), ...missing);
}

export function assertPathWithin(root, candidate, label = "path") {
    const canonicalRoot = canonicalPath(root);
    const canonicalCandidate = canonicalPath(candidate, false); // ASSUMED (not shown)
    const relative = path.relative(canonicalRoot, canonicalCandidate); // ASSUMED (not shown)
    if (relative.startsWith("..") || path.isAbsolute(relative)) // ASSUMED (not shown)
        throw Object.assign(new Error(`${label} is outside ${canonicalRoot}`), { code: "validation" });
    return canonicalCandidate;
}

/** The rule before the hunks (the lines the diff removes), for testing the tester: only the immediate parent is
 * resolved; a path two levels missing comes back as it was given. */
export function canonicalPathBefore(value, mustExist = true) {
    const absolute = path.resolve(value); // ASSUMED, as above
    if (fs.existsSync(absolute)) // ASSUMED, as above
        return fs.realpathSync(absolute);
    if (mustExist)
        throw Object.assign(new Error(`Path does not exist: ${absolute}`), { code: "not_found" });
    const parent = path.dirname(absolute);
    if (!fs.existsSync(parent))
        return absolute;
    return path.join(fs.realpathSync(parent), path.basename(absolute));
}
