/**
 * The seed's `../src/protocol`: the frame and record types, their validators, and the acknowledgement bound.
 *
 * Types are the contract's (generated from envreplica's JSON Schema); each validator is the kit's host's frame check
 * (`check*` of `@envreplica/adapter-kit/host`: the schema's definition compiled with Ajv, plus the rules the schema
 * cannot state, docs/protocol.md section 8: policy epochs and page keys strictly ascending, a page's first key after
 * `after`, commit versions strictly ascending by projectId), answering true or false. Numbers written as `1.0` or
 * `1e2`, or past 2^53, reach here as non-numbers (the kit's JSON reader), so a Count check rejects them as the
 * contract says.
 */

import {
  applyFrameProblem,
  beginFrameProblem,
  commitFrameProblem,
  conforms,
  pageFrameProblem,
  policyEpochsProblem,
} from "../../../host/frames.js";
import type {
  ApplyFrame,
  BeginFrame,
  Binding,
  BindingState,
  CommitFrame,
  Cursor,
  Head,
  Materialization,
  PageFrame,
  Result,
  ValueRef,
} from "../../../kit/generated/contract.js";

export type ProjectEnvBinding = Binding;
export type ProjectEnvDeliveryCursor = Cursor;
export type ProjectEnvReplicaApplyFrame = ApplyFrame;
export type ProjectEnvReplicaBeginFrame = BeginFrame;
export type ProjectEnvReplicaBindingState = BindingState;
export type ProjectEnvReplicaCommitFrame = CommitFrame;
export type ProjectEnvReplicaMaterialization = Materialization;
export type ProjectEnvReplicaPageFrame = PageFrame;
export type ProjectEnvReplicaResult = Result;
export type ProjectEnvValueRef = ValueRef;
/** A refusal code or withhold reason (the seed builds refusals from plain strings). */
export type ProjectEnvWithholdReason = string;

/** The acknowledgement page-size bound in bytes (a `reset`'s `config.ackPageBytes`; default 262144). */
// eslint-disable-next-line prefer-const -- a live binding: `setAckPageBytes` moves it for every importer
export let MAX_PROJECT_ENV_ACK_PAGE_BYTES = 262144;

export function setAckPageBytes(bytes: number): void {
  MAX_PROJECT_ENV_ACK_PAGE_BYTES = bytes;
}

const ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

export function isHostOpId(value: unknown): value is string {
  return typeof value === "string" && ID.test(value);
}

export function isProjectEnvPolicyEpochs(value: unknown): value is number[] {
  return policyEpochsProblem(value) === null;
}

export function isProjectEnvReplicaBeginFrame(value: unknown): value is BeginFrame {
  return beginFrameProblem(value) === null;
}

export function isProjectEnvReplicaPageFrame(value: unknown): value is PageFrame {
  return pageFrameProblem(value) === null;
}

export function isProjectEnvReplicaApplyFrame(value: unknown): value is ApplyFrame {
  return applyFrameProblem(value) === null;
}

export function isProjectEnvReplicaCommitFrame(value: unknown): value is CommitFrame {
  return commitFrameProblem(value) === null;
}

export function isProjectEnvReplicaBindingState(value: unknown): value is BindingState {
  return conforms("BindingState", value);
}

export function isProjectEnvReplicaResult(value: unknown): value is Result {
  return conforms("Result", value);
}

function sameRef(left: ValueRef | null, right: ValueRef | null): boolean {
  if (left === null || right === null) return left === right;
  return left.kind === "staged"
    ? right.kind === "staged" && left.stagingId === right.stagingId
    : right.kind === "legacy" && left.ssmVersion === right.ssmVersion;
}

/** Whether two heads are identical. */
export function sameProjectEnvHead(left: Head, right: Head): boolean {
  return (
    left.revision === right.revision &&
    left.generation === right.generation &&
    left.tombstone === right.tombstone &&
    sameRef(left.valueRef, right.valueRef)
  );
}
