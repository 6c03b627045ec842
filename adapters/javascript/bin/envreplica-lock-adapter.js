#!/usr/bin/env node
// envreplica's lock adapter protocol (docs/protocol.md, section 12) for a JavaScript projection lock: the seed's own
// projection-lock.js, unchanged, each of its lock users a process paused before every filesystem or system call
// (src/lock-adapter.mjs).
//
//   envreplica-lock-adapter --source DIR/storage/projection-lock.js [--scratch DIR]
//   envreplica-lock-adapter --help
import { main } from "../src/lock-adapter.mjs";

await main(process.argv.slice(2));
