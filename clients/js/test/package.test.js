// The package as others get it: what `npm pack` puts in it, and a copy installed
// from this checkout (`npm install --install-links …/clients/js`) that works with
// nothing but its one runtime dependency, `ws`.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";

import { REPO } from "./support/servers.js";

const run = promisify(execFile);
const PACKAGE = join(REPO, "clients", "js");
const npm = (args, cwd) => run("npm", [...args, "--no-audit", "--no-fund"], { cwd, timeout: 60_000 });

test("the package holds the built code and its types, not the tests", async () => {
  const { stdout } = await npm(["pack", "--dry-run", "--json", "--ignore-scripts"], PACKAGE);
  const files = JSON.parse(stdout)[0].files.map((f) => f.path);
  for (const file of ["dist/node.js", "dist/node.d.ts", "dist/browser.js", "dist/browser.d.ts", "README.md", "package.json"]) {
    assert.ok(files.includes(file), `${file} is in the package`);
  }
  assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("node_modules/")), files.join(" "));
  const manifest = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8"));
  assert.deepEqual(Object.keys(manifest.dependencies), ["ws"]);
});

test("installed from the checkout, it loads in Node and exposes the browser build", async () => {
  const app = mkdtempSync(join(tmpdir(), "agora-install-"));
  try {
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    await npm(["install", "--install-links", "--ignore-scripts", "--prefer-offline", PACKAGE], app);
    writeFileSync(
      join(app, "check.js"),
      `import { Client, Unauthorized } from "agora-hub-client";
       const browser = await import("agora-hub-client/browser");
       const c = new Client("ws://127.0.0.1:1/ws", "x", { logger: null });
       console.log(JSON.stringify([typeof Client, typeof browser.Client, c.state, new Unauthorized("no").code]));`,
    );
    const { stdout } = await run(process.execPath, ["check.js"], { cwd: app });
    assert.deepEqual(JSON.parse(stdout), ["function", "function", "idle", "UNAUTHORIZED"]);
  } finally {
    rmSync(app, { recursive: true, force: true });
  }
});

test("the type declarations show the API, not the client's internals", () => {
  const declared = (file) => readFileSync(join(PACKAGE, "dist", file), "utf8");
  const session = declared("session.d.ts");
  for (const internal of ["restore", "dispatch", "connectionLost", "stopped", "stateChanged", "refreshFromProvider"]) {
    assert.doesNotMatch(session, new RegExp(`\\b${internal}\\b\\s*[(;]`), `${internal} in session.d.ts`);
  }
  assert.doesNotMatch(session, /^\s+(protected |private )?(readonly )?(inbox|connection|streamOwner)\b/m);
  assert.doesNotMatch(declared("streams.d.ts"), /\b(markCancelled|refused)\(/);
  assert.doesNotMatch(declared("subscriptions.d.ts"), /^\s+(put|reset|matches)\(/m);
  for (const api of ["serve(", "knownMembers(", "close()", "events("]) {
    assert.ok((declared("client.d.ts") + session).includes(api), `${api} is declared`);
  }
});

test("install-links=true in the app's .npmrc keeps the copy a copy; TypeScript with nodenext", async () => {
  // A plain `npm install` of another package later used to turn the copy into a
  // link into the checkout; the README's .npmrc line prevents it. Then the
  // README's tsconfig: nodenext, and "type": "module" for top-level await.
  const app = mkdtempSync(join(tmpdir(), "agora-links-"));
  try {
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    writeFileSync(join(app, ".npmrc"), "install-links=true\n");
    await npm(["install", "--ignore-scripts", "--prefer-offline", PACKAGE], app);
    const typescript = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8")).devDependencies.typescript;
    await npm(["install", "-D", "--prefer-offline", `typescript@${typescript}`], app);
    assert.ok(!lstatSync(join(app, "node_modules", "agora-hub-client")).isSymbolicLink(), "a copy, not a link");
    assert.doesNotMatch(readFileSync(join(app, "package-lock.json"), "utf8"), /"link": true/);

    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { module: "nodenext", target: "es2022", strict: true, noEmit: true } }),
    );
    writeFileSync(
      join(app, "agent.ts"),
      `import { Client, run, type Event } from "agora-hub-client";
       await run(async (signal) => {
         const client = await new Client("ws://127.0.0.1:8765/ws", "ts-agent", { signal }).connect();
         await client.serve("general", (event: Event, stop: AbortSignal) => (stop.aborted ? null : \`hi \${event.from}\`));
       });`,
    );
    const tsc = join(app, "node_modules", ".bin", "tsc");
    await run(tsc, ["-p", "."], { cwd: app }); // throws with tsc's errors
    // Without "type": "module" nodenext compiles agent.ts as CommonJS: no top-level await.
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true }));
    await assert.rejects(run(tsc, ["-p", "."], { cwd: app }), (e) => /TS1309|TS1378|top-level 'await'/.test(e.stdout));
  } finally {
    rmSync(app, { recursive: true, force: true });
  }
});
