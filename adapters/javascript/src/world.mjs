// The world the adapter keeps (docs/protocol.md, 11.1): one example's directory, its two stores, the request path
// where the seed publishes, and the observation of all of it in the model's words (11.5).
//
//   <scratch>/ex-<n>/project, workspace         the request's project and workspace roots (empty directories)
//   <scratch>/ex-<n>/run/db.sqlite              the run store (the seed names it: <runHome>/db.sqlite)
//   <scratch>/ex-<n>/resource/runtime.sqlite    the resource store (<resourceHome>/runtime.sqlite)
//   <scratch>/ex-<n>/run/import-guard.json      a home's fence, while there (standins/storage/import-guard.js)
//   <scratch>/ex-<n>/requests/paired-writer-migration.json            the request, and beside it what the seed
//       derives from its path: .run.json, .resource.json (the children's inputs), .run.backup.sqlite,
//       .resource.backup.sqlite, .result.json, .recovery.json (+ .run.json, .resource.json, .result.json),
//       .lock (the installation lock)
//
// A store's data and a backup's content are named by src/store.mjs's words. What a publication names by digest
// (the request's sources: each child input's `source.data_sha256`; the result's storage-backup evidence: each
// backup's `backup_sha256`) is named by the words of the store or backup that had that digest when the adapter
// read it (`memo`): every state a step reads was observed after the move before it.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { KIT } from "./register.mjs";
import { buildStore, dataSha256, dataWords, fileSha256, writerVersion } from "./store.mjs";

export const STORE_KINDS = ["run", "resource"];
export const REQUEST_ID = "paired-writer-v2";
export const SELECTION_SHA256 = "5e1ec7ed".repeat(8);
const STORE_FILES = { run: "db.sqlite", resource: "runtime.sqlite" };
const DATA = new Set(["original", "migrated"]);

function moduleUrl(seedRoot, rel) {
    const seedFile = path.join(seedRoot, rel);
    return pathToFileURL(fs.existsSync(seedFile) ? seedFile : path.join(KIT, "standins", rel)).href;
}

/** The modules the world needs (after the loader is registered). */
export async function loadModules(seedRoot) {
    const { DatabaseSync } = await import("node:sqlite");
    return {
        DatabaseSync,
        contract: await import(moduleUrl(seedRoot, "storage/writer-contract.js")),
        guard: await import(moduleUrl(seedRoot, "storage/import-guard.js")),
        lock: await import(pathToFileURL(path.join(KIT, "standins", "services", "installation-lock.js")).href),
    };
}

export class World {
    constructor(scratch, modules) {
        this.scratch = scratch;
        this.m = modules;
        this.count = 0;
        this.dir = null;
        this.memo = new Map(); // data sha256 -> data words; "file:" + file sha256 -> "v<version>:<words>"
        this.templates = new Map();
        fs.mkdirSync(path.join(scratch, "templates"), { recursive: true });
    }

    template(version, data) {
        const key = `v${version}-${data}`;
        let file = this.templates.get(key);
        if (!file) {
            file = path.join(this.scratch, "templates", `${key}.sqlite`);
            buildStore(file, { version, data }, this.m.contract, this.m.DatabaseSync);
            this.templates.set(key, file);
        }
        return file;
    }

    /** Fresh stores (`stores`: two `{ version, data }`, default both `{ 1, "original" }`), nothing else. */
    reset(stores) {
        const wanted = stores ?? [{ version: 1, data: "original" }, { version: 1, data: "original" }];
        if (!Array.isArray(wanted) || wanted.length !== 2 || wanted.some(s => ![1, 2].includes(s?.version) || !DATA.has(s?.data)))
            throw Object.assign(new Error("stores: two { version: 1 | 2, data: \"original\" | \"migrated\" }"), { type: "invalid" });
        if (this.dir)
            fs.rmSync(this.dir, { recursive: true, force: true });
        this.count++;
        this.dir = path.join(this.scratch, `ex-${this.count}`);
        for (const sub of ["project", "workspace", "run", "resource", "requests"])
            fs.mkdirSync(path.join(this.dir, sub), { recursive: true });
        STORE_KINDS.forEach((kind, i) => {
            fs.copyFileSync(this.template(wanted[i].version, wanted[i].data), this.store(i));
        });
        this.memo.clear();
        this.observe(); // the words of the stores as reset
    }

    home(i) {
        return path.join(this.dir, STORE_KINDS[i]);
    }

    store(i) {
        return path.join(this.home(i), STORE_FILES[STORE_KINDS[i]]);
    }

    get requestFile() {
        return path.join(this.dir, "requests", "paired-writer-migration.json");
    }

    backup(i) {
        return `${this.requestFile}.${STORE_KINDS[i]}.backup.sqlite`;
    }

    /** What an invocation is given (src/invocation.mjs). */
    invocationArgs(role, n) {
        return { role, requestFile: this.requestFile, runHome: this.home(0), resourceHome: this.home(1),
            projectRoot: path.join(this.dir, "project"), workspaceRoot: path.join(this.dir, "workspace"),
            requestId: REQUEST_ID, selectionSha256: SELECTION_SHA256, recoveryId: `recover-${n}` };
    }

    /** (version, data words) of the database at `file`, read-only; its digests go into the memo. */
    image(file) {
        const db = new this.m.DatabaseSync(file, { readOnly: true });
        let version, words, digest;
        try {
            db.exec("BEGIN");
            version = writerVersion(db);
            words = dataWords(db);
            digest = dataSha256(db);
        }
        finally {
            db.close();
        }
        if (!this.memo.has(digest))
            this.memo.set(digest, words);
        return { version, words };
    }

    readJson(file) {
        try {
            return JSON.parse(fs.readFileSync(file, "utf8"));
        }
        catch {
            return null;
        }
    }

    observe() {
        const file = this.requestFile;
        const request = fs.existsSync(file) ? this.readJson(file) : null;
        const requestSha = request ? fileSha256(file) : null;
        const stores = STORE_KINDS.map((kind, i) => {
            const { version, words } = this.image(this.store(i));
            const guard = this.m.guard.readImportGuard
                ? this.m.guard.readImportGuard(this.home(i))
                : this.readJson(this.m.guard.importGuardPath(this.home(i)));
            let admission = "open";
            if (guard) {
                const ours = request && guard.import_id === request.permit_id
                    && (guard.kind !== "maintenance" || guard.source_manifest_sha256 === requestSha);
                admission = guard.kind + (ours ? "" : " by another");
            }
            let backup = null;
            if (fs.existsSync(this.backup(i))) {
                const image = this.image(this.backup(i));
                backup = `v${image.version}:${image.words}`;
                this.memo.set("file:" + fileSha256(this.backup(i)), backup);
            }
            return { version, data: words, admission, backup };
        });
        let sources = null;
        if (request) {
            sources = request.stores.map(store => {
                const input = JSON.parse(Buffer.from(store.input.base64, "base64").toString("utf8"));
                return `v${input.source.writer_version}:${this.memo.get(input.source.data_sha256) ?? "?"}`;
            });
        }
        const resultFile = file + ".result.json", recoveryFile = file + ".recovery.json";
        let result = null, evidence = null;
        if (fs.existsSync(resultFile)) {
            result = "published";
            const doc = this.readJson(resultFile);
            const entry = doc?.evidence?.find(e => e.kind === "storage-backup");
            if (entry) {
                const facts = JSON.parse(Buffer.from(entry.base64, "base64").toString("utf8"));
                evidence = facts.stores.map(s => s.backup_sha256 ? this.memo.get("file:" + s.backup_sha256) ?? "?" : null);
            }
        }
        let recovery = null, plan = null;
        if (fs.existsSync(recoveryFile)) {
            recovery = "published";
            plan = this.readJson(recoveryFile)?.stores?.map(s => s.input !== null) ?? null;
        }
        return {
            stores, request: request ? "published" : null, sources, result, evidence, recovery, plan,
            recoveryResult: fs.existsSync(recoveryFile + ".result.json"),
            lock: this.m.lock.installationLockHolder(file + ".lock") !== null,
        };
    }

    close() {
        if (this.dir)
            fs.rmSync(this.dir, { recursive: true, force: true });
        this.dir = null;
    }
}
