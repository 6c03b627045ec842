#!/usr/bin/env node
// envreplica's migration adapter protocol (docs/protocol.md, section 11) for a JavaScript paired writer migration:
// the seed's own paired-writer-migration.js, unchanged, with the kit's stand-ins for the modules it imports and
// does not ship (src/migration-adapter.mjs).
//
//   envreplica-migration-adapter --source DIR/storage/paired-writer-migration.js [--scratch DIR]
//   envreplica-migration-adapter --help
import { main } from "../src/migration-adapter.mjs";

await main(process.argv.slice(2));
