/**
 * `@envreplica/adapter-kit`: what an implementation exports (`createReplica(host: Host): Replica`), what the kit
 * gives it (`Host`), and the contract's types (generated from envreplica's JSON Schema). The test host to build a
 * replica on is `@envreplica/adapter-kit/host`.
 *
 * It also exports the adapter itself (`Adapter`, `serve`), for a process of your own that serves the protocol.
 *
 * @module
 */

export type {
  CreateReplica,
  ErrorKind,
  Host,
  HostConfig,
  MaybePromise,
  Replica,
  ValueReader,
  Written,
} from "./replica.js";
export type * from "./generated/contract.js";
export { Adapter, CrashSignal, serve, type AdapterOptions } from "./adapter.js";
export { CONSTANTS, SCHEMA } from "./contract.js";
export { JsonFloat } from "./json.js";
export { ValueStoreError } from "./store.js";
