/**
 * The contract as the kit reads it: envreplica's JSON Schema (generated from its Python definitions, copied here by
 * `npm run gen-types`), compiled once with Ajv, and the request checks of docs/protocol.md sections 5 and 7 built on
 * it. The kit checks the adapter's own fields (ids, ops, `config`, `store.*`, `projectIds`, `timeoutMs`,
 * `duringFetch`, `crashAfterCommit`); frames, `keptPolicyEpochs` and `orgId` reach the implementation unchecked,
 * because validating them is the replica's job and the gate holds it to that.
 */

import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";

import schema from "./generated/contract.schema.json" with { type: "json" };
import { isIntegerLiteral, JsonFloat, unshown } from "./json.js";

interface SchemaDocument {
  $id: string;
  "x-envreplica": {
    maxNesting: number;
    maxCount: number;
    defaultAckPageBytes: number;
    defaultPrefix: string;
    maxReadyTimeoutMs: number;
    testMasterKeyHex: string;
  };
  $defs: Record<string, Record<string, unknown>>;
}

/** The contract's JSON Schema document (draft 2020-12). */
export const SCHEMA = schema as unknown as SchemaDocument;
/** The contract's constants (nesting limit, defaults, the public test key). */
export const CONSTANTS = SCHEMA["x-envreplica"];
/** The base of every definition's `$id`. */
export const BASE = SCHEMA.$id.replace(/[^/]*$/, "");

/** The ops of the adapter protocol, in the contract's order (its `Ops` table). */
export const OPS: readonly string[] = Object.keys(SCHEMA.$defs["Ops"]!["properties"] as object);

/** Fields whose content is the replica's to check (a frame and begin's arguments): any JSON passes here. */
const REPLICA_CHECKS = new Set(["frame", "keptPolicyEpochs", "orgId"]);

const ajv = new Ajv2020({ strict: false, allErrors: false, unicodeRegExp: true });
ajv.addSchema(SCHEMA as object);

/** A copy of `schema` whose `frame` / `keptPolicyEpochs` / `orgId` properties accept anything. */
function envelope(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(envelope);
  if (schema === null || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === "properties" && value !== null && typeof value === "object") {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, sub]) => [name, REPLICA_CHECKS.has(name) ? true : envelope(sub)]),
      );
    } else if (key !== "$id") {
      out[key] = envelope(value);
    }
  }
  return out;
}

/** The op table: each op's request definition, as the schema's `Ops` names it. */
const OP_TABLE = (SCHEMA.$defs["Ops"] as { properties: Record<string, { properties: { request: { $ref: string } } }> })
  .properties;

const requestCheckers = new Map<string, ValidateFunction>(
  OPS.map((op) => {
    const name = OP_TABLE[op]!.properties.request.$ref;
    return [op, ajv.compile({ $id: `${BASE}kit-${name}`, ...(envelope(SCHEMA.$defs[name]) as object) })];
  }),
);

const definitionCheckers = new Map<string, ValidateFunction>();

function definition(name: string): ValidateFunction {
  let check = definitionCheckers.get(name);
  if (check === undefined) {
    check = ajv.getSchema(BASE + name);
    if (check === undefined) throw new Error(`the contract has no definition named ${name}`);
    definitionCheckers.set(name, check);
  }
  return check;
}

/** Whether `value` is a valid instance of the contract's definition `name` (e.g. "PageFrame"). */
export function conforms(name: string, value: unknown): boolean {
  return definition(name)(value) === true;
}

/**
 * How `value` breaks the contract's definition `name`, or null when it conforms: where (a path such as
 * `.records[0].key`, empty for the value itself) and the rule, in words that never show the value.
 */
export function violation(name: string, value: unknown): { path: string; rule: string } | null {
  const check = definition(name);
  if (check(value) === true) return null;
  const errors = check.errors ?? [];
  // Ajv reports a union's branches before the union itself: the union's own error is the one that holds.
  const error = errors[errors.length - 1];
  if (error === undefined) return { path: "", rule: `must be a ${name}` };
  const parts = error.instancePath.split("/").slice(1).map((part) => part.replace(/~1/g, "/").replace(/~0/g, "~"));
  let path = parts.map((part) => (/^[0-9]+$/.test(part) ? `[${part}]` : `.${shownKey(part)}`)).join("");
  let rule: string;
  if (error.keyword === "additionalProperties") {
    path += `.${shownKey(String((error.params as { additionalProperty: string }).additionalProperty))}`;
    rule = "is not allowed here (objects are exact)";
  } else if (error.keyword === "required") {
    path += `.${shownKey(String((error.params as { missingProperty: string }).missingProperty))}`;
    rule = "is required";
  } else {
    rule = error.message ?? "breaks the contract";
  }
  return { path, rule };
}

/** A request that breaks a rule: answered `invalid` (with its id when it had an integer one). */
export class InvalidRequest extends Error {
  readonly kind = "invalid";
}

/** A request whose op this adapter does not know: answered `unsupported`. */
export class UnknownOp extends Error {
  readonly kind = "unsupported";
}

const SHOWN_KEY = /^[A-Za-z][A-Za-z0-9_]{0,31}$/;

/** A key fit for a message: itself when it looks like a field name, else only its length. */
export function shownKey(key: string): string {
  return SHOWN_KEY.test(key) ? key : `<a key of ${key.length} characters>`;
}

function invalid(path: string, rule: string, got: string, fix: string): InvalidRequest {
  return new InvalidRequest(`invalid request: ${path} ${rule}; got ${got}. ${fix}`);
}

function ajvMessage(error: ErrorObject, request: Record<string, unknown>): InvalidRequest {
  const path = "request" + error.instancePath.replace(/\//g, ".");
  if (error.keyword === "additionalProperties") {
    const key = String((error.params as { additionalProperty: string }).additionalProperty);
    const value = pointer(request, error.instancePath);
    const got = value !== null && typeof value === "object" ? unshown((value as Record<string, unknown>)[key]) : "";
    return invalid(`${path}.${shownKey(key)}`, "is not allowed here", got, "Remove the key.");
  }
  if (error.keyword === "required") {
    const key = String((error.params as { missingProperty: string }).missingProperty);
    return invalid(`${path}.${shownKey(key)}`, "is required", "nothing (the key is absent)", `Add the key ${key}.`);
  }
  return invalid(path, `${error.message ?? "breaks the contract"}`, unshown(pointer(request, error.instancePath)),
    "See docs/protocol.md section 5.");
}

function pointer(value: unknown, path: string): unknown {
  let here = value;
  for (const part of path.split("/").slice(1)) {
    if (here === null || typeof here !== "object") return undefined;
    here = (here as Record<string, unknown>)[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  }
  return here;
}

/** The request's id when it is a JSON integer (echoed in the response), else null. */
export function requestId(request: unknown): number | bigint | null {
  if (request === null || typeof request !== "object" || Array.isArray(request)) return null;
  const id = (request as Record<string, unknown>)["id"];
  return isIntegerLiteral(id) ? id : null;
}

/**
 * The op and fields of a well-formed request, checked in the contract's order: an object; an integer `id`; a string
 * `op`; an op this adapter knows (else `UnknownOp`); then the op's own fields. Throws `InvalidRequest` otherwise.
 */
export function checkRequest(request: unknown): { op: string; fields: Record<string, unknown> } {
  if (request === null || typeof request !== "object" || Array.isArray(request) || request instanceof JsonFloat) {
    throw invalid("request", "must be a JSON object with keys 'id' and 'op'", unshown(request), "Send an object.");
  }
  const fields = request as Record<string, unknown>;
  if (!("id" in fields)) {
    throw invalid("request.id", "is required", "nothing (the key is absent)", "Add an integer 'id'.");
  }
  if (!isIntegerLiteral(fields["id"])) {
    throw invalid("request.id", "must be a JSON integer", unshown(fields["id"]), "Send an integer id.");
  }
  if (!("op" in fields)) {
    throw invalid("request.op", "is required", "nothing (the key is absent)", "Add the key 'op'.");
  }
  const op = fields["op"];
  if (typeof op !== "string") {
    throw invalid("request.op", `must be a string naming an op (${OPS.join(", ")})`, unshown(op), "Send a known op.");
  }
  const check = requestCheckers.get(op);
  if (check === undefined) {
    const shown = /^[A-Za-z0-9_.:-]{1,64}$/.test(op) ? op : `<an op of ${op.length} characters>`;
    throw new UnknownOp(`unsupported: this adapter does not know op '${shown}' (it knows ${OPS.join(", ")}); nothing was done`);
  }
  if (!check({ ...fields, id: 0 })) {
    const ref = fields["ref"] as { kind?: unknown } | null | undefined;
    if ((op === "store.put" || op === "store.fail") && ref?.kind === "legacy" && conforms("LegacyRef", ref)
        && conforms("Key", fields["key"]) && !conforms("Segment", fields["key"])) {
      // The schema states this rule as a choice between a staged and a legacy request; say it plainly.
      throw invalid("request.key", "must be a Segment for a legacy ref (it has no legacy parameter name)",
        unshown(fields["key"]), "A replica reads such a record as value_reference_invalid; store nothing.");
    }
    throw ajvMessage(check.errors![0]!, fields);
  }
  return { op, fields };
}
