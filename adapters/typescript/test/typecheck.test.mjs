// Types: the seed's glue type-checks under tsc --strict with no cast, and the command type-checks what it runs
// (`--source`, `--impl`): a type error is exit status 2 with its diagnostics, and `--no-typecheck` runs it anyway.
// The seed's file is ENVREPLICA_SEED_SOURCE (the file, or a checkout of @runuai/host); without it, the tests that
// need it skip (`envreplica-extract-seed SEED_DIFF DIR` writes it from the reference seed's diff).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

import { seedFile, seedMapping } from "../dist/kit/load.js";
import { check } from "../dist/kit/typecheck.js";

const kit = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = join(kit, "bin", "envreplica-ts-adapter.js");
const named = process.env.ENVREPLICA_SEED_SOURCE;
const seed = named && existsSync(named) ? seedFile(named) : null;
const noSeed = seed === null && "ENVREPLICA_SEED_SOURCE does not name the seed's file (envreplica-extract-seed writes it)";
const work = mkdtempSync(join(tmpdir(), "envreplica-kit-typecheck-"));
after(() => rmSync(work, { recursive: true, force: true }));

const REQUESTS = '{"id":1,"op":"reset"}\n{"id":2,"op":"status"}\n';

function adapter(...args) {
  return spawnSync(process.execPath, [bin, ...args], { input: REQUESTS, encoding: "utf8", timeout: 120_000 });
}

test("the seed's glue (test/fixtures/seed-glue.ts) type-checks under tsc --strict with no cast", { skip: noSeed }, async () => {
  const glue = join(kit, "test", "fixtures", "seed-glue.ts");
  const code = readFileSync(glue, "utf8").replace(/\/\/.*$/gm, "").replace(/^import .*$/gm, "");
  assert.ok(!/\bas\s+(?!const\b)[\w{[(]/.test(code), "no cast in the glue");
  const mapping = seedMapping(seed);
  const errors = await check({
    roots: [glue],
    ...mapping,
    redirect: (specifier, containing) => (specifier === "envreplica:seed" ? seed : mapping.redirect(specifier, containing)),
    key: { test: "seed-glue" },
    fresh: true,
  });
  assert.equal(errors, null, errors && errors.shown.join("\n"));
});

test("--source: a type error is exit 2 with its diagnostics; --no-typecheck runs the file", { skip: noSeed }, () => {
  const broken = join(work, "project-env-replica.ts");
  const text = readFileSync(seed, "utf8");
  const line = text.split("\n").findIndex((l) => l.startsWith("const MAX_REASON = "));
  assert.ok(line >= 0, "the seed's MAX_REASON line");
  writeFileSync(broken, text.replace("const MAX_REASON = ", "const MAX_REASON: number = "));
  const run = adapter("--source", broken);
  assert.equal(run.status, 2, run.stderr);
  assert.equal(run.stdout, "");
  const lines = run.stderr.trim().split("\n");
  assert.match(lines[0], /^envreplica-ts-adapter: --source .* does not type-check \(1 error\):$/);
  assert.match(lines[1], new RegExp(`project-env-replica\\.ts:${line + 1}:7 - error TS2322: Type 'string' is not ` +
    "assignable to type 'number'\\."));
  assert.match(lines.at(-1), /^envreplica-ts-adapter: --no-typecheck skips this check/);
  const unchecked = adapter("--source", broken, "--no-typecheck");
  assert.equal(unchecked.status, 0, unchecked.stderr);
  assert.deepEqual(unchecked.stdout.trim().split("\n").map((l) => JSON.parse(l).ok), [true, true]);
});

test("--impl: a type error is exit 2; a module that type-checks runs, and its pass is remembered", () => {
  const body = (status) => `
import type { Host, Replica } from "@envreplica/adapter-kit";
import { checkBegin, checkCommit, checkDelivery, checkPage } from "@envreplica/adapter-kit/host";
export function createReplica(_host: Host): Replica {
  const status = ${status};
  return {
    begin: (f, e, o) => { checkBegin(f, e, o); throw new Error("not here"); },
    applyPage: async (f) => { checkPage(f); throw new Error("not here"); },
    applyDelivery: async (f) => { checkDelivery(f); throw new Error("not here"); },
    complete: (f) => { checkCommit(f); throw new Error("not here"); },
    closeGate: () => {}, readStatus: () => status, readSnapshot: () => null, listReceipts: () => [],
    empty: () => {}, reopen: () => {}, close: () => {},
  };
}
`;
  // The module sits inside the kit's folder, so "@envreplica/adapter-kit" is the package's reference to itself.
  const inKit = mkdtempSync(join(kit, "test", ".impl-"));
  try {
    const wrong = join(inKit, "replica.ts");
    writeFileSync(wrong, body(`{ activated: "no", gateOpen: false, attemptId: null, orgId: null, appliedThrough: null,
    policyEpochs: [], projectIds: [] }`));
    const run = adapter("--impl", wrong);
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /^envreplica-ts-adapter: --impl .* does not type-check \(1 error\):\n {2}.*replica\.ts:\d+:\d+ - error TS2322/);
    assert.match(run.stderr, /--no-typecheck skips this check/);
    const unchecked = adapter("--impl", wrong, "--no-typecheck");
    assert.equal(unchecked.status, 0, unchecked.stderr);

    writeFileSync(wrong, body(`{ activated: false, gateOpen: false, attemptId: null, orgId: null,
    appliedThrough: null, policyEpochs: [], projectIds: [] }`));
    const first = adapter("--impl", wrong);
    assert.equal(first.status, 0, first.stderr);
    const answers = first.stdout.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(answers.map((a) => a.ok), [true, true]);
    assert.equal(answers[1].result.activated, false);
    const started = Date.now();
    const again = adapter("--impl", wrong);
    assert.equal(again.status, 0, again.stderr);
    assert.ok(Date.now() - started < 5000, "the remembered pass is not checked again");
  } finally {
    rmSync(inKit, { recursive: true, force: true });
  }
});
