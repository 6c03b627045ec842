// @envreplica/migration-kit: what a program imports from the kit (types/index.d.ts says each in full).
//
// - `runMigrationAdapter(argv)`: the migration adapter itself (what `envreplica-migration-adapter` runs);
// - `point(name, info)`, `STEPS`, `FINAL`: the step boundaries. A module of your own that replaces one of the
//   kit's stand-ins calls `point` where the stand-in does (src/stepper.mjs's RULES), or the steps it ends are
//   taken together with the next;
// - `registerSeed(source)`, `seedRootOf(source)`: the module loader that runs a migration as it is, what it
//   imports and its folder lacks supplied by the stand-ins;
// - `PROTOCOL`: the protocol's name, as `hello` gives it;
// - `runLockAdapter(argv)`, `LOCK_PROTOCOL`, `LOCK_STEPS`, `LOCK_MAX_TRIES`: the lock adapter (what
//   `envreplica-lock-adapter` runs; docs/protocol.md section 12), its protocol's name, the seed's steps a lock user
//   pauses at and its tries before busy, as its `hello` declares them.
export { PROTOCOL, main as runMigrationAdapter } from "./migration-adapter.mjs";
export { MAX_TRIES as LOCK_MAX_TRIES, PROTOCOL as LOCK_PROTOCOL, STEPS as LOCK_STEPS, main as runLockAdapter } from "./lock-adapter.mjs";
export { FINAL, STEPS, point } from "./stepper.mjs";
export { registerSeed, seedRootOf } from "./register.mjs";
