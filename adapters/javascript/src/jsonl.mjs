// What every adapter of the kit shares: JSON lines in and out (docs/protocol.md), its errors, and a guard against
// a hung child process. The migration adapter (src/migration-adapter.mjs) is built on it; the lock's adapter will
// be too.
import readline from "node:readline";

/** An error the adapter answers as `{ ok: false, error: { type, message } }` (`type`: invalid, unsupported,
 * internal). */
export class AdapterError extends Error {
    constructor(type, message) {
        super(message);
        this.type = type;
    }
}

/** How long a child process may take to answer before the adapter gives up on it: a guard against a hang, never
 * a verdict (the harness's own timeout is the user's). */
export const HANG_GUARD_MS = 120_000;

/** `promise`, or an `AdapterError("internal")` naming `what` after `HANG_GUARD_MS`. */
export function guard(promise, what) {
    let timer;
    return Promise.race([
        promise.finally(() => clearTimeout(timer)),
        new Promise((_, reject) => {
            timer = setTimeout(() => reject(new AdapterError("internal", `${what}: no answer in ${HANG_GUARD_MS / 1000} s`)), HANG_GUARD_MS);
        }),
    ]);
}

/** A line reader over a stream: `next()` resolves with the next line, or null at its end. */
export class Lines {
    constructor(stream) {
        this.queue = [];
        this.waiters = [];
        this.ended = false;
        let buffer = "";
        stream.setEncoding("utf8");
        stream.on("data", chunk => {
            buffer += chunk;
            let at;
            while ((at = buffer.indexOf("\n")) >= 0) {
                this.push(buffer.slice(0, at));
                buffer = buffer.slice(at + 1);
            }
        });
        const end = () => {
            if (this.ended)
                return;
            this.ended = true;
            for (const w of this.waiters.splice(0))
                w(null);
        };
        stream.on("end", end);
        stream.on("close", end);
        stream.on("error", end);
    }
    push(line) {
        const w = this.waiters.shift();
        if (w)
            w(line);
        else
            this.queue.push(line);
    }
    next() {
        if (this.queue.length)
            return Promise.resolve(this.queue.shift());
        if (this.ended)
            return Promise.resolve(null);
        return new Promise(resolve => this.waiters.push(resolve));
    }
}

/**
 * Serves `handle(request)` (resolving with a request's result, or throwing) over JSON lines: one request per line
 * on `input`, one response per line on `output`, in order, until the end of `input`. A line that is not JSON is
 * answered `invalid` with `id: null`, and so is one that is no JSON object; an `AdapterError` is answered with its type; anything else `internal`, with
 * its stack.
 */
export async function serve(handle, input = process.stdin, output = process.stdout) {
    const lines = readline.createInterface({ input });
    for await (const line of lines) {
        if (!line.trim())
            continue;
        let request, response;
        try {
            request = JSON.parse(line);
        }
        catch (error) {
            output.write(JSON.stringify({ id: null, ok: false, error: { type: "invalid", message: `not JSON: ${error.message}` } }) + "\n");
            continue;
        }
        if (request === null || typeof request !== "object" || Array.isArray(request)) {
            output.write(JSON.stringify({ id: null, ok: false, error: { type: "invalid", message: `not a JSON object: ${line.slice(0, 80)}` } }) + "\n");
            continue;
        }
        try {
            response = { id: request.id, ok: true, result: await handle(request) };
        }
        catch (error) {
            const type = error instanceof AdapterError ? error.type : error?.type === "invalid" ? "invalid" : "internal";
            response = { id: request.id, ok: false, error: { type, message: error instanceof AdapterError ? error.message : String(error?.stack ?? error) } };
        }
        output.write(JSON.stringify(response) + "\n");
    }
}
