// Durability for the stand-ins: a file's or a directory's contents flushed to disk before a step is reported
// done (a crash right after a step must find what the step wrote).
import fs from "node:fs";

/** fsync `file` (a file or a directory: a directory's fsync makes a rename or link in it durable). */
export function fsyncPath(file) {
    const fd = fs.openSync(file, "r");
    try {
        fs.fsyncSync(fd);
    }
    finally {
        fs.closeSync(fd);
    }
}
