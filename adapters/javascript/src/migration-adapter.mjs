// The migration adapter: envreplica's migration adapter protocol (docs/protocol.md, section 11) for a JavaScript
// paired writer migration, the seed's own paired-writer-migration.js unchanged, with the kit's stand-ins for the
// modules it imports and does not ship. `bin/envreplica-migration-adapter.js` runs `main`.
//
// One JSON request per line on standard input, one JSON response per line on standard output, in order. Each
// invocation is a process of its own (src/invocation.mjs) paused at every model step boundary; `crash` kills it
// there with SIGKILL. The foreign writer is a long-lived process of its own (src/writer.mjs).
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { UsageError, command, readCommandLine, sourceFile } from "./cli.mjs";
import { AdapterError, Lines, guard, serve } from "./jsonl.mjs";
import { KIT, registerSeed } from "./register.mjs";
import { FINAL, STEPS } from "./stepper.mjs";
import { World, loadModules } from "./world.mjs";

export const PROTOCOL = "envreplica-migration/1";
const NAME = "envreplica-migration-adapter";
const REGISTER = pathToFileURL(path.join(KIT, "src", "register.mjs")).href;
const USAGE = `usage: ${NAME} --source DIR/storage/paired-writer-migration.js [--scratch DIR]`;
const HELP = `${USAGE}

Serves envreplica's migration adapter protocol (docs/protocol.md, section 11: JSON lines on standard input and
output) for a JavaScript paired writer migration, run as it is:
  --source FILE   the migration: DIR/storage/paired-writer-migration.js (the seed's, as
                  envreplica-extract-migration-seed writes it, or your own module exporting
                  PreparedPairedWriterMigration and PreparedPairedWriterRecovery); what it imports from DIR that
                  DIR does not hold comes from the kit's stand-ins
  --scratch DIR   where the adapter's stores go (default: the system's temporary directory); removed at exit
  -h, --help      this help

  envreplica conformance --protocol migration --variant seed --adapter "${NAME} --source FILE"
`;

/** The command line: `{ source, scratch }`, the source resolved; a `UsageError` for anything else. */
export function readOptions(argv) {
    const { values } = readCommandLine(argv, {
        options: { source: { type: "string" }, scratch: { type: "string" } },
        usage: USAGE, help: HELP,
    });
    const source = sourceFile(values.source, "the migration's storage/paired-writer-migration.js", USAGE);
    if (values.scratch === "")
        throw new UsageError("--scratch is an empty path; name a directory, or leave --scratch out");
    return { source, scratch: values.scratch };
}

/** One invocation: a child process paused at a step boundary. It is started ahead as a spare (its modules
 * loaded, nothing read or written) and told what to run when an `invoke` needs it (`start`). */
class Invocation {
    constructor(source) {
        this.n = null;
        this.stderr = "";
        this.proc = spawn(process.execPath, ["--import", REGISTER, path.join(KIT, "src", "invocation.mjs")], {
            stdio: ["ignore", "ignore", "pipe", "pipe"],
            env: { ...process.env, ENVREPLICA_MIGRATION_KIT_SOURCE: source, ENVREPLICA_ADAPTER_PID: String(process.pid) },
        });
        this.proc.stderr.setEncoding("utf8");
        this.proc.stderr.on("data", chunk => { this.stderr += chunk; });
        this.channel = this.proc.stdio[3];
        this.channel.on("error", () => { });
        this.lines = new Lines(this.channel);
        this.exitInfo = null;
        this.exited = new Promise(resolve => this.proc.on("exit", (code, signal) => {
            this.exitInfo = { code, signal };
            resolve(this.exitInfo);
        }));
    }
    /** Runs invocation `n` with `args` (src/invocation.mjs); resolves once it waits before its first step. */
    async start(n, args) {
        this.n = n;
        const spare = await this.message();
        if (!spare || spare.t !== "spare")
            return false;
        this.channel.write(JSON.stringify(args) + "\n");
        const ready = await this.message();
        return Boolean(ready && ready.t === "ready");
    }
    async message() {
        const line = await guard(this.lines.next(), `invocation ${this.n}`);
        return line === null ? null : JSON.parse(line);
    }
    go() {
        this.channel.write("g");
    }
    async status() {
        const { code, signal } = await guard(this.exited, `invocation ${this.n}'s exit`);
        return code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : -1);
    }
    async kill() {
        if (!this.exitInfo)
            this.proc.kill("SIGKILL");
        await guard(this.exited, `invocation ${this.n}'s kill`);
    }
}

/** The foreign writer process, started at its first use. */
class Writer {
    constructor(source) {
        this.source = source;
        this.proc = null;
        this.home = null;
    }
    async ask(request) {
        if (!this.proc) {
            this.proc = spawn(process.execPath, ["--import", REGISTER, path.join(KIT, "src", "writer.mjs")], {
                stdio: ["pipe", "pipe", "inherit"],
                env: { ...process.env, ENVREPLICA_MIGRATION_KIT_SOURCE: this.source },
            });
            this.lines = new Lines(this.proc.stdout);
            this.proc.stdin.on("error", () => { });
        }
        this.proc.stdin.write(JSON.stringify(request) + "\n");
        const line = await guard(this.lines.next(), "the foreign writer");
        if (line === null)
            throw new AdapterError("internal", "the foreign writer process ended");
        const answer = JSON.parse(line);
        if (!answer.ok)
            throw new AdapterError("internal", `the foreign writer failed: ${answer.error}`);
        return answer;
    }
    async disconnect() {
        if (this.proc && this.home !== null)
            await this.ask({ op: "disconnect" });
        this.home = null;
    }
    async close() {
        if (!this.proc)
            return;
        try {
            this.proc.stdin.end(JSON.stringify({ op: "quit" }) + "\n");
            await guard(new Promise(resolve => this.proc.on("exit", resolve)), "the foreign writer's exit");
        }
        catch {
            this.proc.kill("SIGKILL");
        }
    }
}

export class Adapter {
    constructor(options, modules) {
        this.source = options.source;
        let scratch;
        if (options.scratch) {
            fs.mkdirSync(options.scratch, { recursive: true });
            scratch = fs.mkdtempSync(path.join(fs.realpathSync(options.scratch), "envreplica-js-"));
        }
        else {
            scratch = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), "envreplica-js-"));
        }
        this.scratch = scratch;
        this.world = new World(scratch, modules);
        this.writer = new Writer(this.source);
        this.invocations = new Map();
        this.spare = null; // the next invocation's process, started ahead
        this.started = 0;
        this.connected = null;
        this.writes = 0;
    }

    hello(request) {
        if (request.protocol !== PROTOCOL)
            throw new AdapterError("invalid", `protocol ${JSON.stringify(request.protocol)}: this adapter speaks ${PROTOCOL}`);
        return {
            protocol: PROTOCOL,
            implementation: `${path.basename(this.source)} from ${path.dirname(this.source)} (javascript kit, node ${process.version})`,
            steps: STEPS,
            readings: { backup: "keep", apply: "skip", reconcile: "receipt", lock: "refuse" },
            evidence: "after-maintenance",
            faults: [],
            inputFaults: [],
            exitStatus: false,
            modes: ["process"],
        };
    }

    async endAll() {
        for (const inv of this.invocations.values())
            await inv.kill();
        this.invocations.clear();
        await this.writer.disconnect();
        this.connected = null;
    }

    async reset(request) {
        await this.endAll();
        this.started = 0;
        this.writes = 0;
        this.world.reset(request.stores);
        if (!this.spare || this.spare.exitInfo)
            this.spare = new Invocation(this.source);
        return {};
    }

    ensureWorld() {
        if (!this.world.dir)
            throw new AdapterError("invalid", "no reset yet");
    }

    async invoke(request) {
        this.ensureWorld();
        if (request.role !== "migrate" && request.role !== "recover")
            throw new AdapterError("invalid", `role ${JSON.stringify(request.role)}`);
        if ((request.fault ?? "none") !== "none")
            throw new AdapterError("unsupported", `input fault ${request.fault}: the seed's kit declares none`);
        if ((request.mode ?? "process") !== "process")
            throw new AdapterError("unsupported", `mode ${request.mode}: the kit runs invocations as processes`);
        const n = this.started++;
        let inv = this.spare && !this.spare.exitInfo ? this.spare : new Invocation(this.source);
        this.spare = new Invocation(this.source); // loads while the harness moves on
        if (!await inv.start(n, this.world.invocationArgs(request.role, n))) {
            await inv.kill();
            throw new AdapterError("internal", `invocation ${n} did not start: ${inv.stderr.trim()}`);
        }
        this.invocations.set(n, inv);
        return { invocation: n };
    }

    live(request) {
        const inv = this.invocations.get(request.invocation);
        if (!inv)
            throw new AdapterError("invalid", `no live invocation ${JSON.stringify(request.invocation)}`);
        return inv;
    }

    async ended(inv, message, after) {
        const status = await inv.status();
        this.invocations.delete(inv.n);
        if (!message)
            return { event: "exit", status, refusal: "internal error", after, message: inv.stderr.trim() || `ended with status ${status} and no word` };
        return { event: "exit", status, refusal: message.refusal ?? null, after, message: message.message ?? "" };
    }

    async step(request) {
        const inv = this.live(request);
        inv.go();
        const message = await inv.message();
        if (!message || message.t === "exit")
            return this.ended(inv, message, null);
        if (message.t !== "step")
            throw new AdapterError("internal", `invocation ${inv.n} said ${JSON.stringify(message)}`);
        if (!FINAL.has(message.step))
            return { event: "step", step: message.step };
        // its last step: let it run to its end
        inv.go();
        const end = await inv.message();
        if (end && end.t === "step")
            throw new AdapterError("internal", `invocation ${inv.n} took ${end.step} after its last step`);
        return this.ended(inv, end, message.step);
    }

    async crash(request) {
        const inv = this.live(request);
        await inv.kill();
        this.invocations.delete(inv.n);
        return {};
    }

    async connect(request) {
        this.ensureWorld();
        const i = ["run", "resource"].indexOf(request.store);
        if (i < 0)
            throw new AdapterError("invalid", `store ${JSON.stringify(request.store)}`);
        await this.writer.ask({ op: "connect", path: this.world.store(i) });
        this.writer.home = this.world.home(i);
        return {};
    }

    async write(request) {
        if (this.writer.home === null)
            throw new AdapterError("invalid", "write: no writer connected");
        if (request.version !== 1 && request.version !== 2)
            throw new AdapterError("invalid", `write: version ${JSON.stringify(request.version)}`);
        this.writes++;
        const answer = await this.writer.ask({ op: "write", version: request.version, home: this.writer.home,
            marker: `zz-foreign-${String(this.writes).padStart(4, "0")}` });
        return { write: answer.outcome };
    }

    async disconnect() {
        await this.writer.disconnect();
        return {};
    }

    observe() {
        this.ensureWorld();
        return this.world.observe();
    }

    async handle(request) {
        switch (request.op) {
            case "hello": return this.hello(request);
            case "reset": return this.reset(request);
            case "invoke": return this.invoke(request);
            case "step": return this.step(request);
            case "crash": return this.crash(request);
            case "connect": return this.connect(request);
            case "write": return this.write(request);
            case "disconnect": return this.disconnect();
            case "observe": return this.observe();
            case "lock": case "unlock": case "readOnly": case "edit": case "repair":
                throw new AdapterError("unsupported", `${request.op}: the seed's kit declares no faults`);
            default:
                throw new AdapterError("invalid", `unknown op ${JSON.stringify(request.op)}`);
        }
    }

    async close() {
        try {
            await this.endAll();
            await this.spare?.kill();
        }
        catch { /* going anyway */ }
        await this.writer.close();
        fs.rmSync(this.scratch, { recursive: true, force: true });
    }
}

/** Runs the adapter with the command line `argv` until the end of standard input; then exits (0). A bad command
 * line is one line on standard error and exit status 2; `--help` prints the help and exits 0. */
export async function main(argv = process.argv.slice(2)) {
    const options = await command(NAME, () => readOptions(argv));
    registerSeed(options.source);
    const modules = await loadModules(path.dirname(path.dirname(options.source)));
    const adapter = new Adapter(options, modules);
    for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"])
        process.once(signal, () => {
            // the invocations and the writer see their channel close and end; the scratch directory goes
            for (const inv of [...adapter.invocations.values(), adapter.spare].filter(Boolean))
                inv.proc.kill("SIGKILL");
            adapter.writer.proc?.kill("SIGKILL");
            fs.rmSync(adapter.scratch, { recursive: true, force: true });
            process.exit(128 + os.constants.signals[signal]);
        });
    await serve(request => adapter.handle(request));
    await adapter.close();
    process.exit(0);
}
