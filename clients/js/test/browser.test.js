// The built package in a real headless Chromium (Debian's `chromium`): a page
// served by this test imports dist/browser.js, connects to a hub that requires
// tokens (the token travels as the `bearer.TOKEN` subprotocol: a browser cannot
// set headers), joins, publishes, receives its echo and asks a Node agent a
// question whose streamed answer it assembles. The page reports back with a POST.
//
// Under CI=true a missing Chromium fails the test (.ci/run installs it).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { after, test } from "node:test";

import { Client } from "agora-hub-client";

import { HubProcess, REPO, nextMatching, required, tokensFile, unique, within } from "./support/servers.js";

const chromium = required("chromium", ["/usr/bin/chromium", "/usr/bin/chromium-browser"]);
const DIST = join(REPO, "clients", "js", "dist");
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--no-default-browser-check",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-dev-shm-usage",
];

const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>agora-hub-client in a browser</title>
<script type="module">
  const report = (result) => fetch("/result", { method: "POST", body: JSON.stringify(result) });
  window.addEventListener("error", (e) => report({ ok: false, error: String(e.message) }));
  window.addEventListener("unhandledrejection", (e) => report({ ok: false, error: String(e.reason) }));
  const params = new URLSearchParams(location.search);
  const [hub, agent, token, space, peer] = ["hub", "agent", "token", "space", "peer"].map((k) => params.get(k));
  try {
    const { Client, Unauthorized } = await import("/dist/browser.js");
    let refused = null;
    try {
      await new Client(hub, agent, { token: "not-the-token-0123", reconnect: false, logger: null }).connect();
    } catch (e) {
      refused = e instanceof Unauthorized ? e.code : String(e);
    }
    const client = new Client(hub, agent, { token, reconnect: false });
    await client.connect();
    const joined = await client.join(space);
    const events = client.events(space);
    const sent = await client.publish(space, { text: "hello from the browser" });
    const echo = await events.take(10000);
    const answer = await client.request(space, "what time is it?", { to: peer, timeout: 10000 });
    await report({
      ok: true,
      refused,
      members: joined.members,
      echoed: echo.eventId === sent.eventId && echo.from === agent,
      answer: answer.text,
      streamed: answer.streamed,
      answeredBy: answer.from,
    });
    await client.close();
  } catch (e) {
    await report({ ok: false, error: String(e && e.stack || e) });
  }
</script>`;

const TYPES = { ".js": "text/javascript", ".map": "application/json", ".html": "text/html" };

/** Serves the page and dist/, and resolves `result` with the page's report. */
function pageServer() {
  let deliver;
  const result = new Promise((resolve) => (deliver = resolve));
  const server = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (req.method === "POST" && path === "/result") {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        res.end("ok");
        deliver(JSON.parse(body));
      });
      return;
    }
    if (path === "/") {
      res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
      return;
    }
    const file = normalize(join(DIST, path.replace(/^\/dist\//, "")));
    if (path.startsWith("/dist/") && file.startsWith(DIST)) {
      try {
        const body = readFileSync(file);
        res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(body);
        return;
      } catch {
        // not found below
      }
    }
    res.writeHead(404).end();
  });
  return { server, result };
}

const cleanup = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

test("the package in headless Chromium: bearer subprotocol, join, publish, receive", { skip: chromium === null && "chromium is not installed" }, async () => {
  const browserId = unique("browser");
  const peerId = unique("node-peer");
  const token = "browser-token-0123456789";
  const path = tokensFile({ [browserId]: token, [peerId]: "peer-token-0123456789" });
  const hub = await new HubProcess({ auth_mode: "tokens", auth_tokens_file: path }).start();
  cleanup.push(() => hub.stop());
  const space = unique("browser");

  const peer = new Client(hub.url, peerId, { token: "peer-token-0123456789", reconnect: false });
  cleanup.push(() => peer.close());
  await peer.connect();
  await peer.join(space);
  const heard = peer.events(space);

  const { server, result } = pageServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanup.push(() => new Promise((resolve) => server.close(resolve)));
  const query = new URLSearchParams({ hub: hub.url, agent: browserId, token, space, peer: peerId });
  const profile = mkdtempSync(join(tmpdir(), "agora-chromium-"));
  const browser = spawn(chromium, [...FLAGS, `--user-data-dir=${profile}`, `http://127.0.0.1:${server.address().port}/?${query}`], {
    stdio: "ignore",
    detached: true,
  });
  cleanup.push(async () => {
    if (browser.exitCode === null && browser.signalCode === null) {
      const exited = new Promise((resolve) => browser.once("exit", resolve));
      process.kill(-browser.pid, "SIGKILL"); // the browser and the processes it started
      await exited;
    }
    rmSync(profile, { recursive: true, force: true });
  });

  // The browser's publish reaches the Node agent...
  const hello = await nextMatching(heard, (e) => e.from === browserId, 45_000);
  assert.equal(hello.text, "hello from the browser");
  // ...which answers the browser's question with a stream.
  const question = await nextMatching(heard, (e) => e.from === browserId, 15_000);
  assert.deepEqual([question.text, question.to], ["what time is it?", peerId]);
  await peer.replyStream(question).pipe(["it is ", "time ", "to test"]);

  const report = await within(15_000, result, "the page's report");
  assert.deepEqual(report, {
    ok: true,
    refused: "UNAUTHORIZED",
    members: [peerId, browserId],
    echoed: true,
    answer: "it is time to test",
    streamed: true,
    answeredBy: peerId,
  });
  heard.close();
});
