// Types of @envreplica/migration-kit (src/index.mjs): what the kit exports, and what a migration or a projection lock
// of your own exports for the kit to run it (`--source`). Hand-written beside the JavaScript; `npm test` type-checks
// a migration and a lock against them (test/types.test.mjs).

/** The migration adapter protocol's name, as `hello` answers it: "envreplica-migration/1". */
export declare const PROTOCOL: "envreplica-migration/1";

/**
 * The migration adapter: reads the command line `argv` (`--source FILE [--scratch DIR]`, or `--help`), then serves
 * the protocol on standard input and output until the end of input, and exits the process (0). A bad command
 * line is one line on standard error and exit status 2. What `envreplica-migration-adapter` runs.
 */
export declare function runMigrationAdapter(argv?: readonly string[]): Promise<never>;

/** The model's steps, in the order a run takes them (migrate's 18, then recover's 13). */
export declare const STEPS: readonly string[];
/** The last step of each role (`complete resource`, `reopen resource`): the invocation ends right after it. */
export declare const FINAL: ReadonlySet<string>;

/**
 * A point of an invocation's run, as the kit's stand-ins report them (`"lock:taken"`, `"publish:end"`,
 * `"maintenance:done"`, `"child:backedUp"`, ...; src/stepper.mjs's RULES lists which point ends which step, and
 * what `info` it reads). Where a point ends the step being taken, the invocation pauses there until the adapter
 * says go on; elsewhere, and outside an invocation, it does nothing. A module that replaces a stand-in calls it
 * where the stand-in does.
 */
export declare function point(name: string, info?: Record<string, unknown>): void;

/**
 * Registers the kit's module loader for the migration at `source` (DIR/storage/paired-writer-migration.js): its
 * files load from DIR as they are, and what they import that DIR does not hold comes from the kit's stand-ins
 * (same relative path under `standins/`). Returns DIR. Once per process; a second call for another DIR throws.
 */
export declare function registerSeed(source: string): string;
/** DIR of `DIR/storage/paired-writer-migration.js`: the folder above the migration's own. */
export declare function seedRootOf(source: string): string;

// ---------------------------------------------------------------------------------------------------------------
// The projection lock's adapter (docs/protocol.md, section 12).

/** The lock adapter protocol's name, as its `hello` answers it: "envreplica-lock/1". */
export declare const LOCK_PROTOCOL: "envreplica-lock/1";

/**
 * The lock adapter: reads the command line `argv` (`--source FILE [--scratch DIR]`, or `--help`), then serves the
 * lock adapter protocol on standard input and output until the end of input, ends its lock users (each a Node
 * process of its own) and removes its lock directories; the promise settles then. A bad command line is one line
 * on standard error and exit status 2; `--help` prints the options and exits 0. What `envreplica-lock-adapter`
 * runs.
 */
export declare function runLockAdapter(argv: readonly string[]): Promise<void>;

/** The seed's steps a lock user pauses before (the lock model's step names; the wait between tries is silent), as
 * `hello` declares them: "mkdir L", "create owner file", ..., "rmdir L (release)". */
export declare const LOCK_STEPS: readonly string[];
/** The seed's tries before it answers busy (`if (tries >= 80)`), as `hello` declares them (`maxTries`). */
export declare const LOCK_MAX_TRIES: 80;

/**
 * What the module `envreplica-lock-adapter --source` names exports: the seed's `withProjectionLock`. It takes the
 * lock at `lockPath` (a directory), runs `operation` holding it, releases it, and returns what `operation`
 * returned; a busy lock and a failed operation are thrown (the seed's `AppError` with code `publication_pending`).
 * The kit gives that module its stepping `node:fs` (src/stepping-fs.mjs): each call it makes on the lock path is
 * paused before, named as the seed's call of that kind is, so a lock of your own is held to the seed's steps
 * (`hello` declares the seed design).
 */
export interface ProjectionLockModule {
    withProjectionLock<T>(lockPath: string, operation: () => T): T;
}

// ---------------------------------------------------------------------------------------------------------------
// A migration of your own: the module `--source` names exports these two classes, with the seed's signatures.

/** What `PreparedPairedWriterMigration.prepare` is given: the request, and where the stores and their homes are. */
export interface PairedWriterMigrationInput {
    /** The request's id (the kit's: "paired-writer-v2"). */
    requestId: string;
    /** The SHA-256 (hex) of the selection the request migrates. */
    selectionSha256: string;
    /** Where the request is published (once; a rerun restores it from there). */
    requestFile: string;
    projectRoot: string;
    workspaceRoot: string;
    /** The run store's home (its SQLite file and its fence). */
    runHome: string;
    /** The resource store's home. */
    resourceHome: string;
}

/** A prepared or restored migration request. */
export interface PairedWriterMigration {
    /** Publishes the request: the parent, then each child's input. */
    retain(): void;
    /** Lock, reconcile, fence, drain, back up, apply, verify, publish the result, reopen. Throws the seed's
     * `AppError` to refuse. */
    apply(): void;
}

/** A prepared or restored recovery of a migration. */
export interface PairedWriterRecovery {
    /** Lock, revalidate, publish, fence, restore, publish the result, reopen. */
    apply(): void;
}

/** `PreparedPairedWriterMigration`: the class's static side, as the kit calls it. */
export interface PairedWriterMigrationClass {
    prepare(input: PairedWriterMigrationInput): PairedWriterMigration;
    /** The request published at `file`, whose bytes hash (SHA-256, hex) to `sha256`. */
    restore(file: string, sha256: string): PairedWriterMigration;
}

/** `PreparedPairedWriterRecovery`: the class's static side, as the kit calls it. */
export interface PairedWriterRecoveryClass {
    /** Plans the recovery of `migration` under the lock: each store unchanged, or restored from its backup. */
    prepare(migration: PairedWriterMigration, recoveryId: string): PairedWriterRecovery;
    restore(file: string, sha256: string): PairedWriterRecovery;
}

/** What the module `--source` names exports. */
export interface PairedWriterMigrationModule {
    PreparedPairedWriterMigration: PairedWriterMigrationClass;
    PreparedPairedWriterRecovery: PairedWriterRecoveryClass;
}
