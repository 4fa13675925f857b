// The example agents (examples/js) as a user runs them: answerer.js answers in a
// space, ask.js asks and prints the reply — plain and streamed — and answerer.js
// exits cleanly on SIGTERM. They import "agora-hub-client" as an installed package.

import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, test } from "node:test";

import { HubProcess, REPO, unique, within } from "./support/servers.js";

const run = promisify(execFile);
const cleanup = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

test("answerer.js answers what ask.js asks", async () => {
  const hub = await new HubProcess().start();
  cleanup.push(() => hub.stop());
  // The examples, beside a node_modules that holds this checkout's client.
  const dir = mkdtempSync(join(tmpdir(), "agora-example-"));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  for (const file of ["answerer.js", "ask.js", "package.json"]) {
    copyFileSync(join(REPO, "examples", "js", file), join(dir, file));
  }
  mkdirSync(join(dir, "node_modules"));
  symlinkSync(join(REPO, "clients", "js"), join(dir, "node_modules", "agora-hub-client"), "dir");
  const env = { ...process.env, AGORA_HUB_URL: hub.url, SPACE: unique("ask"), AGENT_ID: unique("answerer") };

  const answerer = spawn(process.execPath, ["answerer.js"], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise((resolve) => answerer.once("exit", (code, signal) => resolve({ code, signal })));
  cleanup.push(() => answerer.exitCode === null && answerer.kill("SIGKILL"));
  let output = "";
  await within(
    15_000,
    new Promise((resolve) => {
      const take = (chunk) => {
        output += chunk;
        if (output.includes("answers questions")) resolve();
      };
      answerer.stdout.on("data", take);
      answerer.stderr.on("data", take);
    }),
    "the answerer starting",
  );

  const plain = await run(process.execPath, ["ask.js", "what is an agora?"], { cwd: dir, env, timeout: 20_000 });
  assert.equal(plain.stdout.trim(), `${env.AGENT_ID}: You asked: what is an agora?`);
  const streamed = await run(process.execPath, ["ask.js", "stream a long one"], { cwd: dir, env, timeout: 20_000 });
  assert.equal(streamed.stdout.trim(), `${env.AGENT_ID} (streamed): You asked: stream a long one`);

  answerer.kill("SIGTERM");
  assert.deepEqual(await within(10_000, exited, "the answerer exiting"), { code: 0, signal: null }, output);
});
