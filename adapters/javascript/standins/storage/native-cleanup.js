// Stand-in for dd-flow's `storage/native-cleanup.js` (imported by the seed's paired-writer-migration.js and
// writer-contract.js; not shipped).
//
// What the seed needs of it:
// - `withStoreCleanup(operation, cleanup)`: runs `operation()` and returns what it returns; `cleanup()` runs
//   afterwards whatever happened (the seed passes `() => lease.release()`: an invocation that refuses gives
//   the installation lock back). An error of `operation` is the one thrown; an error of `cleanup` is thrown only
//   when `operation` succeeded.
// - `rollbackStoreTransaction(db, sql, error)`: rolls the connection's transaction back (`sql` is "ROLLBACK" or
//   the savepoint's rollback) and rethrows `error`. The seed's `executeStoreSchema` calls it as the last thing in
//   its catch block and nothing after, so it must rethrow or the failure would be swallowed; a failing rollback
//   (no transaction open any more) does not replace the original error.
//
// Reading: none to choose.
export function withStoreCleanup(operation, cleanup) {
    let failed = false;
    try {
        return operation();
    }
    catch (error) {
        failed = true;
        throw error;
    }
    finally {
        try {
            cleanup();
        }
        catch (error) {
            if (!failed)
                throw error;
        }
    }
}

export function rollbackStoreTransaction(db, sql, error) {
    try {
        if (db.isTransaction)
            db.exec(sql);
    }
    catch {
        // the original error says what went wrong; a connection that lost its transaction has nothing to undo
    }
    throw error;
}
