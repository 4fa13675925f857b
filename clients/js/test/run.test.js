// run(): an agent as a program. A hub refusal is one line and exit status 1, Ctrl-C
// closes the clients and exits 130, SIGTERM exits 0, any other error keeps its stack
// trace — each in a real node process, against a real hub.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { HubProcess, REPO, unique, within } from "./support/servers.js";

const hub = new HubProcess();
const dir = mkdtempSync(join(tmpdir(), "agora-run-"));

before(async () => {
  await hub.start();
  mkdirSync(join(dir, "node_modules"));
  symlinkSync(join(REPO, "clients", "js"), join(dir, "node_modules", "agora-hub-client"), "dir");
  writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
});
after(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** `code` as a program `name`.js: its process, and a promise of how it ended. */
function program(name, code) {
  writeFileSync(join(dir, `${name}.js`), code);
  const proc = spawn(process.execPath, [`${name}.js`], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  const out = { stdout: "", stderr: "" };
  proc.stdout.on("data", (d) => (out.stdout += d));
  proc.stderr.on("data", (d) => (out.stderr += d));
  const ended = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal, ...out })));
  const printed = (text) =>
    new Promise((resolve) => {
      const look = () => out.stdout.includes(text) && resolve();
      proc.stdout.on("data", look);
      look();
    });
  return { proc, ended, printed };
}

const agent = (id) => `
import { Client, run } from "agora-hub-client";
await run(async (signal) => {
  const client = await new Client(${JSON.stringify(hub.url)}, ${JSON.stringify(id)}, { signal }).connect();
  console.log("connected");
  await client.serve("general", (event) => "hi");
  console.log("serve ended");
});
`;

test("a second copy of an agent ends with one line saying the id is taken; Ctrl-C ends the first", async () => {
  const id = unique("echo-bot");
  const first = program("first", agent(id));
  await within(15_000, first.printed("connected"), "the first copy connecting");

  const second = await within(15_000, program("second", agent(id)).ended, "the second copy ending");
  assert.equal(second.code, 1, second.stderr);
  const lines = second.stderr.trim().split("\n");
  assert.equal(lines.length, 1, second.stderr);
  assert.match(lines[0], /^second\.js: AGENT_EXISTS: .*"echo-bot-\w+" is taken.*another agentId/);

  first.proc.kill("SIGINT");
  const ended = await within(10_000, first.ended, "the first copy ending on Ctrl-C");
  assert.deepEqual([ended.code, ended.stderr], [130, ""]);
  assert.match(ended.stdout, /serve ended/); // the client closed, serve() returned
});

test("SIGTERM is a clean stop (status 0)", async () => {
  const p = program("term", agent(unique("svc")));
  await within(15_000, p.printed("connected"), "connecting");
  p.proc.kill("SIGTERM");
  const ended = await within(10_000, p.ended, "ending on SIGTERM");
  assert.deepEqual([ended.code, ended.stderr], [0, ""]);
});

test("an error that is not the hub's keeps its stack trace", async () => {
  const ended = await within(
    15_000,
    program("bug", `import { run } from "agora-hub-client";\nawait run(async () => { null.oops; });\n`).ended,
    "the buggy program ending",
  );
  assert.notEqual(ended.code, 0);
  assert.match(ended.stderr, /TypeError[\s\S]*at /);
});

test("what main returns is run()'s", async () => {
  const ended = await within(
    15_000,
    program("value", `import { run } from "agora-hub-client";\nconsole.log(await run(async () => 42));\n`).ended,
    "the program ending",
  );
  assert.deepEqual([ended.code, ended.stdout.trim()], [0, "42"]);
});
