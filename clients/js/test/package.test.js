// The package as others get it: what `npm pack` puts in it, and a copy installed
// from this checkout (`npm install --install-links …/clients/js`) that works with
// nothing but its one runtime dependency, `ws`.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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
