// @envreplica/migration-kit: what a program imports from the kit (types/index.d.ts says each in full).
//
// - `runMigrationAdapter(argv)`: the migration adapter itself (what `envreplica-migration-adapter` runs);
// - `point(name, info)`, `STEPS`, `FINAL`: the step boundaries. A module of your own that replaces one of the
//   kit's stand-ins calls `point` where the stand-in does (src/stepper.mjs's RULES), or the steps it ends are
//   taken together with the next;
// - `registerSeed(source)`, `seedRootOf(source)`: the module loader that runs a migration as it is, what it
//   imports and its folder lacks supplied by the stand-ins;
// - `PROTOCOL`: the protocol's name, as `hello` gives it.
// The lock's adapter (issue 43) will be exported beside the migration's.
export { PROTOCOL, main as runMigrationAdapter } from "./migration-adapter.mjs";
export { FINAL, STEPS, point } from "./stepper.mjs";
export { registerSeed, seedRootOf } from "./register.mjs";
