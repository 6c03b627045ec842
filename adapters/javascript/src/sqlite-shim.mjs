// `node:sqlite` for a Node that lacks it (Node < 22.5): `DatabaseSync` and `StatementSync` over better-sqlite3,
// as far as the seed and the kit use them, with node:sqlite's defaults and behaviour:
//
// - `new DatabaseSync(path, { readOnly, timeout, enableForeignKeyConstraints })`: opened at once; a read-only open
//   of a missing file fails; no busy timeout unless `timeout` is given (node:sqlite's default is 0, better-sqlite3's
//   5000 ms); foreign keys on by default.
// - `exec(sql)`, `prepare(sql)` -> `get(...params)` (undefined when no row), `all(...params)`, `run(...params)`
//   (`{ changes, lastInsertRowid }`), on any statement: node:sqlite lets `get`/`all` run a statement that returns
//   no rows and `run` one that does (better-sqlite3 refuses both; the shim runs them as node:sqlite does).
// - `function(name, [options], fn)`: a scalar function; an exception thrown by `fn` propagates out of the
//   statement that called it, as it does under node:sqlite.
// - `isTransaction`, `isOpen`, `close()`.
// - A SQLite error is thrown as an `Error` with node:sqlite's shape: the message is SQLite's (`errmsg`, e.g. the
//   text of a `RAISE(ABORT, ...)`), `code` is `ERR_SQLITE_ERROR`, `errstr` the extended result code's name
//   (better-sqlite3's `SQLITE_...` code). JavaScript errors (a user function's) pass through unchanged.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const Database = require("better-sqlite3");

function sqliteError(error) {
    if (error instanceof Database.SqliteError) {
        const wrapped = new Error(error.message);
        wrapped.code = "ERR_SQLITE_ERROR";
        wrapped.errstr = error.code;
        wrapped.errcode = error.code;
        return wrapped;
    }
    return error;
}

function guarded(fn) {
    try {
        return fn();
    }
    catch (error) {
        throw sqliteError(error);
    }
}

export class StatementSync {
    #stmt;
    constructor(stmt) {
        this.#stmt = stmt;
    }
    get(...params) {
        return guarded(() => {
            if (!this.#stmt.reader) {
                this.#stmt.run(...params);
                return undefined;
            }
            return this.#stmt.get(...params);
        });
    }
    all(...params) {
        return guarded(() => {
            if (!this.#stmt.reader) {
                this.#stmt.run(...params);
                return [];
            }
            return this.#stmt.all(...params);
        });
    }
    run(...params) {
        return guarded(() => {
            if (this.#stmt.reader) {
                // node:sqlite steps it to its end; the changes are the connection's last count
                this.#stmt.all(...params);
                return { changes: 0, lastInsertRowid: 0 };
            }
            const info = this.#stmt.run(...params);
            return { changes: info.changes, lastInsertRowid: info.lastInsertRowid };
        });
    }
    iterate(...params) {
        return guarded(() => this.#stmt.reader ? this.#stmt.iterate(...params) : (this.#stmt.run(...params), [][Symbol.iterator]()));
    }
    get sourceSQL() {
        return this.#stmt.source;
    }
}

export class DatabaseSync {
    #db = null;
    #path;
    #options;
    constructor(path, options = {}) {
        this.#path = path;
        this.#options = options;
        if (options.open !== false)
            this.open();
    }
    open() {
        if (this.#db)
            throw new Error("database is already open");
        const options = this.#options;
        this.#db = guarded(() => new Database(this.#path, {
            readonly: Boolean(options.readOnly),
            fileMustExist: Boolean(options.readOnly),
            timeout: options.timeout ?? 0,
        }));
        guarded(() => this.#db.pragma(`foreign_keys = ${options.enableForeignKeyConstraints === false ? "OFF" : "ON"}`));
    }
    #open() {
        if (!this.#db)
            throw new Error("database is not open");
        return this.#db;
    }
    get isOpen() {
        return this.#db !== null;
    }
    get isTransaction() {
        return this.#open().inTransaction;
    }
    exec(sql) {
        const db = this.#open();
        guarded(() => db.exec(sql));
    }
    prepare(sql) {
        const db = this.#open();
        return new StatementSync(guarded(() => db.prepare(sql)));
    }
    function(name, options, fn) {
        if (typeof options === "function") {
            fn = options;
            options = {};
        }
        const db = this.#open();
        guarded(() => db.function(name, {
            deterministic: Boolean(options.deterministic),
            directOnly: Boolean(options.directOnly),
            varargs: Boolean(options.varargs),
        }, fn));
    }
    location() {
        return this.#path;
    }
    close() {
        const db = this.#open();
        this.#db = null;
        guarded(() => db.close());
    }
}

export default { DatabaseSync, StatementSync };
