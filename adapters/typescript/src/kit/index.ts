/**
 * The kit's public types: what an implementation exports (`createReplica(host: Host): Replica`), what the kit
 * gives it, and the contract's types (generated from envreplica's JSON Schema).
 */

export type { CreateReplica, ErrorKind, Host, HostConfig, MaybePromise, Replica, ValueReader } from "./replica.js";
export type * from "./generated/contract.js";
