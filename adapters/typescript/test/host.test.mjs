// The test host of @envreplica/adapter-kit/host: the database's counted write commits, rollback, empty and reopen;
// sealing (a lone surrogate round trip; a wrong key or a changed seal refused); canonical JSON and the MAC; the frame
// checks; the errors the kit answers. Runs against the built kit (dist/), as a user's replica imports it.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import { CONSTANTS, JsonFloat } from "@envreplica/adapter-kit";
import {
  canonicalJson,
  checkBegin,
  checkCommit,
  checkDelivery,
  checkPage,
  checkProjectIds,
  CorruptReplicaError,
  errorKind,
  InvalidInputError,
  legacyParameterName,
  mac,
  masterKey,
  open,
  openDatabase,
  seal,
  SealedValueError,
  stagedParameterName,
  ValueStoreError,
} from "@envreplica/adapter-kit/host";
import { sealWith } from "../dist/host/sealing.js";

const TEST_KEY = Buffer.from(CONSTANTS.testMasterKeyHex, "hex");
const dirs = [];
after(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/** A host as the kit gives one, counting `afterWriteCommit()` calls. */
function fakeHost(key = TEST_KEY) {
  const dir = mkdtempSync(join(tmpdir(), "envreplica-kit-test-"));
  dirs.push(dir);
  const settings = { dbPath: join(dir, "replica.db"), masterKey: key, prefix: "/envreplica", ackPageBytes: 262144 };
  const host = {
    commits: 0,
    settings,
    config: () => host.settings,
    valueReader: () => null,
    afterWriteCommit: () => {
      host.commits += 1;
    },
    log: () => {},
  };
  return host;
}

const SCHEMA = "CREATE TABLE IF NOT EXISTS authority (id TEXT PRIMARY KEY, gate INTEGER NOT NULL);" +
  "CREATE TABLE IF NOT EXISTS records (k TEXT PRIMARY KEY, v TEXT NOT NULL);";
const seed = (db) => db.prepare("INSERT OR IGNORE INTO authority VALUES ('replica', 0)").run();
const count = (db, table) => db.prepare(`SELECT count(*) AS n FROM ${table}`).get().n;

describe("openDatabase", () => {
  test("a write counts one commit, whether or not a row changed; a read counts none", () => {
    const host = fakeHost();
    const db = openDatabase(host, { schema: SCHEMA, seed });
    assert.equal(host.commits, 0, "opening (schema and seed) is not counted");
    assert.equal(db.write((c) => c.prepare("INSERT INTO records VALUES ('A', '1')").run().changes), 1);
    assert.equal(host.commits, 1);
    db.write((c) => c.prepare("UPDATE records SET v = '2' WHERE k = 'nothing'").run());
    assert.equal(host.commits, 2, "a write that changed no row is counted");
    assert.equal(db.read((c) => count(c, "records")), 1);
    assert.equal(host.commits, 2);
    assert.equal(db.connection.pragma("journal_mode", { simple: true }), "wal");
    db.close();
  });

  test("a write that throws rolls back, is not counted, and rethrows", () => {
    const host = fakeHost();
    const db = openDatabase(host, { schema: SCHEMA, seed });
    const boom = new Error("boom");
    assert.throws(() => db.write((c) => {
      c.prepare("INSERT INTO records VALUES ('A', '1')").run();
      throw boom;
    }), (e) => e === boom);
    assert.equal(host.commits, 0);
    assert.equal(db.read((c) => count(c, "records")), 0, "rolled back");
    assert.equal(db.connection.inTransaction, false);
    assert.throws(() => db.write(async () => {}), TypeError, "an async function is refused");
    assert.equal(host.commits, 0);
    db.close();
  });

  test("the commit is made before afterWriteCommit throws (crashAfterCommit), and the throw propagates", () => {
    const host = fakeHost();
    const db = openDatabase(host, { schema: SCHEMA, seed });
    host.afterWriteCommit = () => {
      throw new Error("crash right after write commit 1");
    };
    assert.throws(() => db.write((c) => c.prepare("INSERT INTO records VALUES ('A', '1')").run()), /crash/);
    db.reopen();
    assert.equal(db.read((c) => count(c, "records")), 1, "committed");
    db.close();
  });

  test("empty deletes every row of every table, seeds again, and is not counted", () => {
    const host = fakeHost();
    const db = openDatabase(host, { schema: SCHEMA, seed });
    db.write((c) => {
      c.prepare("INSERT INTO records VALUES ('A', '1')").run();
      c.prepare("UPDATE authority SET gate = 1").run();
    });
    const before = host.commits;
    db.empty();
    assert.equal(host.commits, before);
    assert.equal(db.read((c) => count(c, "records")), 0);
    assert.deepEqual(db.read((c) => c.prepare("SELECT * FROM authority").all()), [{ id: "replica", gate: 0 }]);
    db.close();
  });

  test("reopen drops the connection and opens the file again: committed rows stay, schema and seed idempotent", () => {
    const host = fakeHost();
    const db = openDatabase(host, { schema: SCHEMA, seed });
    db.write((c) => c.prepare("INSERT INTO records VALUES ('A', '1')").run());
    const first = db.connection;
    db.reopen();
    assert.notEqual(db.connection, first, "a new connection");
    assert.equal(first.open, false, "the old one is closed");
    assert.equal(db.read((c) => count(c, "records")), 1);
    assert.equal(db.read((c) => count(c, "authority")), 1);
    db.close();
    assert.equal(db.read((c) => count(c, "records")), 1, "used after close, it opens again");
    db.close();
  });
});

describe("sealing", () => {
  test("seal and open round-trip a lone surrogate exactly (the seed's UTF-8 does not: F3)", () => {
    const host = fakeHost();
    const value = "a\ud800b\udc00\u00e9\u{1f600}";
    const sealed = seal(host, value);
    assert.notEqual(seal(host, value), sealed, "a fresh nonce each time");
    assert.equal(open(host, sealed), value);
    assert.equal(open(host, sealWith(TEST_KEY, value, "utf8")), "a\ufffdb\ufffd\u00e9\u{1f600}");
    assert.equal(masterKey(host).length, 32);
  });

  test("a wrong key or a changed seal throws SealedValueError, which the kit answers corrupt", () => {
    const host = fakeHost();
    const sealed = seal(host, "hunter2");
    const other = fakeHost(Buffer.alloc(32, 7));
    assert.throws(() => open(other, sealed), SealedValueError);
    const parts = sealed.split(".");
    parts[2] = Buffer.from("hunter3").toString("base64");
    assert.throws(() => open(host, parts.join(".")), SealedValueError);
    assert.throws(() => open(host, "not a sealed value"), SealedValueError);
    try {
      open(other, sealed);
    } catch (error) {
      assert.ok(error instanceof CorruptReplicaError);
      assert.equal(errorKind(error), "corrupt");
      assert.ok(!String(error.message).includes("hunter2"));
    }
  });
});

describe("canonicalJson and mac", () => {
  const frame = {
    state: { listingGeneration: 0, policyEpoch: 1, key: "A", binding: null,
      head: { valueRef: { stagingId: "0f8fad5b-d9cb-469f-a165-70867728950e", kind: "staged" }, tombstone: false,
        revision: 1, generation: 1 } },
    recordVersion: 1, projectId: "p1", kind: "env.replica.apply", delivery: { streamId: "s1", sequence: 1 },
  };

  test("canonical JSON is docs/protocol.md section 2.1's example", () => {
    assert.equal(canonicalJson(frame),
      '{"delivery":{"sequence":1,"streamId":"s1"},"kind":"env.replica.apply","projectId":"p1","recordVersion":1,' +
      '"state":{"binding":null,"head":{"generation":1,"revision":1,"tombstone":false,"valueRef":{"kind":"staged",' +
      '"stagingId":"0f8fad5b-d9cb-469f-a165-70867728950e"}},"key":"A","listingGeneration":0,"policyEpoch":1}}');
    assert.equal(canonicalJson({ b: [1, { d: undefined, c: "\u2028" }], a: null, 10: 1, 9: 2 }),
      '{"10":1,"9":2,"a":null,"b":[1,{"c":"\u2028"}]}');
  });

  test("the MAC is the seed's, stable, order-free, and depends on the key", () => {
    const domain = "uai.project_env.replica_receipt.v1\0";
    const host = fakeHost();
    const seeds = createHmac("sha256", TEST_KEY).update(Buffer.from(domain, "utf8")).update(canonicalJson(frame))
      .digest("hex");
    assert.equal(mac(host, domain, frame), seeds);
    assert.match(seeds, /^[0-9a-f]{64}$/);
    assert.equal(mac(host, domain, JSON.parse(JSON.stringify(frame))), seeds);
    assert.notEqual(mac(fakeHost(Buffer.alloc(32, 1)), domain, frame), seeds);
    assert.notEqual(mac(host, domain, { ...frame, recordVersion: 2 }), seeds);
    assert.notEqual(mac(host, "another domain", frame), seeds);
  });
});

describe("frame checks", () => {
  const record = (key) => ({ key, head: { revision: 1, generation: 1, tombstone: true, valueRef: null },
    binding: null, policyEpoch: 1, listingGeneration: 0 });
  const page = (keys, after = null) => ({ opId: "o1", attemptId: "a1", projectId: "p1", after, recordVersion: 1,
    records: keys.map(record), complete: true });

  test("checkPage passes a page and refuses a bad one with the path and rule, never the value", () => {
    assert.deepEqual(checkPage(page(["A", "B"])), page(["A", "B"]));
    const refused = (frame, ...words) => {
      assert.throws(() => checkPage(frame), (error) => {
        assert.ok(error instanceof InvalidInputError, String(error));
        assert.equal(errorKind(error), "invalid");
        assert.match(error.message, /^invalid page: /);
        for (const word of words) assert.ok(error.message.includes(word), `${error.message} lacks ${word}`);
        assert.ok(!error.message.includes("SECRET"), error.message);
        return true;
      });
    };
    refused(page(["B", "A"]), "frame.records", "page-keys-ascending");
    refused(page(["A", "A"]), "page-keys-ascending");
    refused(page(["B"], "C"), "frame.records[0].key", "page-keys-after");
    refused({ ...page(["A"]), extra: "SECRET" }, "frame.extra", "not allowed");
    refused({ ...page(["A"]), recordVersion: new JsonFloat("1.0") }, "frame.recordVersion");
    refused({ ...page(["A"]), recordVersion: 2n ** 60n }, "frame.recordVersion");
    refused({ ...page([]), projectId: "SECRET/x" }, "frame.projectId");
    const { complete: _dropped, ...partial } = page(["A"]);
    refused(partial, "frame.complete", "is required");
    refused(null, "frame");
  });

  test("checkBegin, checkDelivery, checkCommit and checkProjectIds", () => {
    const begin = { attempt: { streamId: "s1", attemptId: "a1" }, projectIds: ["p1", "p2"] };
    assert.deepEqual(checkBegin(begin, [1, 3], "o1"), { frame: begin, keptPolicyEpochs: [1, 3], orgId: "o1" });
    assert.throws(() => checkBegin(begin, [3, 1], "o1"), /keptPolicyEpochs must be strictly ascending/);
    assert.throws(() => checkBegin(begin, [1], "-o"), /orgId/);
    assert.throws(() => checkBegin({ ...begin, projectIds: ["p1", "p1"] }, [1], "o1"), InvalidInputError);
    const delivery = { kind: "env.replica.apply", opId: "o1", projectId: "p1", recordVersion: 1, state: record("A"),
      delivery: { streamId: "s1", sequence: 1 } };
    assert.equal(checkDelivery(delivery), delivery);
    assert.throws(() => checkDelivery({ ...delivery, reconciliationAttemptId: null }), /frame.reconciliationAttemptId/);
    const commit = { attemptId: "a1", highWater: { streamId: "s1", sequence: 0 },
      versions: [{ projectId: "p1", recordVersion: 1 }, { projectId: "p2", recordVersion: 0 }] };
    assert.equal(checkCommit(commit), commit);
    assert.throws(() => checkCommit({ ...commit, versions: [...commit.versions].reverse() }), /commit-versions-ascending/);
    assert.deepEqual(checkProjectIds(["p1", "p1"]), ["p1", "p1"]);
    assert.throws(() => checkProjectIds(["p1", ""]), /projectIds\[1\]/);
  });
});

describe("the rest", () => {
  test("errorKind knows the kit's errors only", () => {
    assert.equal(errorKind(new InvalidInputError("invalid x")), "invalid");
    assert.equal(errorKind(new CorruptReplicaError("corrupt x")), "corrupt");
    assert.equal(errorKind(new Error("invalid x")), undefined);
    assert.equal(errorKind(new ValueStoreError("read failed")), undefined);
    assert.equal(errorKind("invalid"), undefined);
    class Mine extends InvalidInputError {}
    assert.equal(errorKind(new Mine("invalid")), "invalid");
  });

  test("parameter names are docs/protocol.md section 4's", () => {
    assert.equal(stagedParameterName("/envreplica", "p1", "A", "0f8fad5b-d9cb-469f-a165-70867728950e"),
      "/envreplica/projects/p1/env-values/559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd/" +
      "0f8fad5b-d9cb-469f-a165-70867728950e");
    assert.equal(legacyParameterName("/envreplica", "p1", "A"), "/envreplica/projects/p1/env/A");
  });
});
