/**
 * Frame checks: the contract's definitions (its JSON Schema, compiled with Ajv) plus the rules beyond the schema
 * (docs/protocol.md section 8). Each `check*` returns its input typed when it holds, and otherwise throws an
 * `InvalidInputError` naming the path and the rule broken (never the value), which the kit answers `invalid`.
 *
 * Numbers written `1.0` or `1e2`, or past 2^53, reach a replica as non-numbers (the kit's JSON reader), so a Count
 * check rejects them, as the contract's `integer-literals` rule says.
 *
 * @module
 */

import { conforms, violation } from "../kit/contract.js";
import type { ApplyFrame, BeginFrame, CommitFrame, PageFrame } from "../kit/generated/contract.js";
import { InvalidInputError } from "./errors.js";

/** A broken rule: where, and what. */
export interface Problem {
  path: string;
  rule: string;
}

function ascending(values: readonly (string | number)[]): boolean {
  return values.every((value, i) => i === 0 || values[i - 1]! < value);
}

function schemaProblem(definition: string, value: unknown, at: string): Problem | null {
  const broken = violation(definition, value);
  return broken === null ? null : { path: at + broken.path, rule: broken.rule };
}

/** How `value` breaks `BeginFrame`, or null. */
export function beginFrameProblem(value: unknown): Problem | null {
  return schemaProblem("BeginFrame", value, "frame");
}

/** How `value` breaks `PolicyEpochs` (strictly ascending beyond the schema), or null. */
export function policyEpochsProblem(value: unknown, at = "keptPolicyEpochs"): Problem | null {
  const broken = schemaProblem("PolicyEpochs", value, at);
  if (broken !== null) return broken;
  return ascending(value as number[])
    ? null
    : { path: at, rule: "must be strictly ascending (docs/protocol.md section 8: policy-epochs-ascending)" };
}

/** How `value` breaks `Segment` (an `orgId`), or null. */
export function segmentProblem(value: unknown, at = "orgId"): Problem | null {
  return schemaProblem("Segment", value, at);
}

/** How `value` breaks `PageFrame` (keys strictly ascending, and after `after`, beyond the schema), or null. */
export function pageFrameProblem(value: unknown): Problem | null {
  const broken = schemaProblem("PageFrame", value, "frame");
  if (broken !== null) return broken;
  const frame = value as PageFrame;
  const keys = frame.records.map((record) => record.key);
  if (!ascending(keys)) {
    return { path: "frame.records", rule: "must have strictly ascending keys (section 8: page-keys-ascending)" };
  }
  if (frame.after !== null && keys.length > 0 && !(frame.after < keys[0]!)) {
    return { path: "frame.records[0].key", rule: "must be greater than frame.after (section 8: page-keys-after)" };
  }
  return null;
}

/** How `value` breaks `ApplyFrame`, or null. */
export function applyFrameProblem(value: unknown): Problem | null {
  return schemaProblem("ApplyFrame", value, "frame");
}

/** How `value` breaks `CommitFrame` (versions strictly ascending by projectId, beyond the schema), or null. */
export function commitFrameProblem(value: unknown): Problem | null {
  const broken = schemaProblem("CommitFrame", value, "frame");
  if (broken !== null) return broken;
  return ascending((value as CommitFrame).versions.map((version) => version.projectId))
    ? null
    : { path: "frame.versions", rule: "must be strictly ascending by projectId (section 8: commit-versions-ascending)" };
}

/** How `value` breaks a list of project ids (Segments; repeats allowed), or null. */
export function projectIdsProblem(value: unknown): Problem | null {
  if (!Array.isArray(value)) return { path: "projectIds", rule: "must be an array of Segments" };
  for (let i = 0; i < value.length; i++) {
    const broken = segmentProblem(value[i], `projectIds[${i}]`);
    if (broken !== null) return broken;
  }
  return null;
}

function refuse(what: string, problem: Problem | null): void {
  if (problem !== null) throw new InvalidInputError(`invalid ${what}: ${problem.path} ${problem.rule}`);
}

/**
 * `begin`'s frame and arguments checked: the frame a `BeginFrame` (project ids unique, at most 256),
 * `keptPolicyEpochs` a `PolicyEpochs` (Counts, strictly ascending, at most 64), `orgId` a `Segment`. Throws
 * `InvalidInputError` otherwise.
 */
export function checkBegin(
  frame: unknown,
  keptPolicyEpochs: unknown,
  orgId: unknown,
): { frame: BeginFrame; keptPolicyEpochs: number[]; orgId: string } {
  refuse("begin", beginFrameProblem(frame) ?? policyEpochsProblem(keptPolicyEpochs) ?? segmentProblem(orgId));
  return { frame: frame as BeginFrame, keptPolicyEpochs: keptPolicyEpochs as number[], orgId: orgId as string };
}

/**
 * A `page` frame checked: a `PageFrame` (at most 1000 records) whose keys are strictly ascending and, when `after`
 * is not null, all greater than `after`. Throws `InvalidInputError` otherwise.
 */
export function checkPage(frame: unknown): PageFrame {
  refuse("page", pageFrameProblem(frame));
  return frame as PageFrame;
}

/** A `delivery` frame checked: an `ApplyFrame`. Throws `InvalidInputError` otherwise. */
export function checkDelivery(frame: unknown): ApplyFrame {
  refuse("delivery", applyFrameProblem(frame));
  return frame as ApplyFrame;
}

/**
 * A `commit` frame checked: a `CommitFrame` whose versions are strictly ascending by projectId. Throws
 * `InvalidInputError` otherwise.
 */
export function checkCommit(frame: unknown): CommitFrame {
  refuse("commit", commitFrameProblem(frame));
  return frame as CommitFrame;
}

/**
 * The project ids of a `snapshot` or `diagnostics` read checked: an array of Segments (repeats allowed: the read
 * fails closed on them). The kit has already checked them on the adapter's side; this is for a replica that
 * checks its own arguments. Throws `InvalidInputError` otherwise.
 */
export function checkProjectIds(projectIds: unknown): string[] {
  refuse("project ids", projectIdsProblem(projectIds));
  return projectIds as string[];
}

/** Whether `value` is a valid instance of the contract's definition `name` (no rule beyond the schema). */
export { conforms };
