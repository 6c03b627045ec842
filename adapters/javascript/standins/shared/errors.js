// Stand-in for dd-flow's `shared/errors.js` (the seed imports it; the seed does not ship it).
//
// What the seed needs of it: `new AppError(code, message, exitCode, details)`, an Error whose `code`, `exitCode`
// and `details` the seed reads (`error.code`, `error.details.reason`; the paired migration's `refuse(reason)` is
// `AppError("paired_storage_migration_invalid", ..., 1, { reason, ... })`), and `instanceof AppError` holding for
// every module's errors: the loader gives the seed and the kit one instance of this module. `errorRecord(error)`
// turns any thrown value into a plain record (projection-lock.js nests one as a cause).
//
// Reading: none to choose; the shape is the seed's calls. `details` defaults to `{}` so that `details.reason`
// reads as undefined, never a TypeError, on an error that carries none.
export class AppError extends Error {
    constructor(code, message, exitCode = 1, details = {}) {
        super(message);
        this.name = "AppError";
        this.code = code;
        this.exitCode = exitCode;
        this.details = details ?? {};
    }
}

export function errorRecord(error) {
    if (error instanceof AppError)
        return { code: error.code, message: error.message, exit_code: error.exitCode, details: error.details };
    if (error instanceof Error)
        return { code: typeof error.code === "string" ? error.code : "internal", message: error.message };
    return { code: "internal", message: String(error) };
}
