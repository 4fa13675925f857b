// Real servers for the tests: `agora-hub serve` processes and a private redis-server,
// each on free ports. The hub is the repository's own (.venv/bin/agora-hub, made by
// `make venv`), or $AGORA_HUB_BIN.

import { spawn, spawnSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, createConnection } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const IN_CI = ["1", "true", "yes"].includes((process.env.CI ?? "").toLowerCase());

/** Settings that keep tests fast on a busy machine without tight timing. */
export const FAST = {
  heartbeat_interval: 0.5,
  heartbeat_timeout: 5,
  liveness_probe_timeout: 1,
  close_timeout: 2,
  shutdown_timeout: 5,
  log_format: "json",
};

export function hubBinary() {
  const bin = process.env.AGORA_HUB_BIN ?? join(REPO, ".venv", "bin", "agora-hub");
  if (!existsSync(bin)) throw new Error(`no hub at ${bin}: run \`make venv\` first (or set AGORA_HUB_BIN)`);
  return bin;
}

export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** A program the tests need: its path, or — outside CI — null (the caller skips).
 * Under CI=true a missing one fails: nothing may be skipped there. */
export function required(name, candidates) {
  for (const path of candidates) if (existsSync(path)) return path;
  const which = spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" });
  if (which.status === 0 && which.stdout.trim()) return which.stdout.trim();
  if (IN_CI) throw new Error(`${name} is not installed: CI must run this test (.ci/run installs it)`);
  return null;
}

/** `agora-hub serve` as a child process. */
export class HubProcess {
  constructor(settings = {}) {
    this.settings = { ...FAST, ...settings };
    this.proc = null;
    this.output = "";
  }

  /** Start on free ports (the same ones again after a stop, unless given). */
  async start(timeout = 20_000) {
    this.settings.port ??= await freePort();
    this.settings.http_port ??= await freePort();
    const args = ["serve"];
    for (const [name, value] of Object.entries(this.settings)) {
      const flag = `--${name.replaceAll("_", "-")}`;
      if (typeof value === "boolean") args.push(value ? flag : `--no-${name.replaceAll("_", "-")}`);
      else args.push(flag, String(value));
    }
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("AGORA_HUB_")));
    const proc = spawn(hubBinary(), args, { cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"] });
    this.proc = proc;
    let started = false;
    await new Promise((resolveStart, reject) => {
      const timer = setTimeout(() => reject(new Error(`hub did not start:\n${this.output}`)), timeout);
      const take = (chunk) => {
        this.output += chunk.toString();
        if (!started && this.output.includes('"hub started"')) {
          started = true;
          clearTimeout(timer);
          resolveStart();
        }
      };
      proc.stdout.on("data", take);
      proc.stderr.on("data", take);
      proc.on("exit", (code) => {
        if (!started) {
          clearTimeout(timer);
          reject(new Error(`hub exited (${code}) before starting:\n${this.output}`));
        }
      });
    });
    return this;
  }

  get url() {
    return `ws://127.0.0.1:${this.settings.port}/ws`;
  }

  get httpUrl() {
    return `http://127.0.0.1:${this.settings.http_port}`;
  }

  /** SIGTERM (the hub closes every connection with 1001) and wait. */
  stop() {
    return this.signal("SIGTERM");
  }

  /** SIGKILL: the node dies without a word. */
  kill() {
    return this.signal("SIGKILL");
  }

  signal(signal) {
    const proc = this.proc;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
    return new Promise((resolveExit) => {
      const force = setTimeout(() => proc.kill("SIGKILL"), 20_000);
      proc.once("exit", () => {
        clearTimeout(force);
        resolveExit();
      });
      proc.kill(signal);
    });
  }
}

/** A private redis-server on a free port, without persistence. */
export class RedisServer {
  constructor(binary) {
    this.binary = binary;
    this.dir = mkdtempSync(join(tmpdir(), "agora-redis-"));
    this.proc = null;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  async start(timeout = 10_000) {
    this.port = await freePort();
    const args = ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
    this.proc = spawn(this.binary, [...args, "--dir", this.dir, "--protected-mode", "no"], { stdio: "ignore" });
    const deadline = Date.now() + timeout;
    while (Date.now() < deadline) {
      if (await pong(this.port)) return this;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error("redis-server did not start");
  }

  async stop() {
    const proc = this.proc;
    if (proc !== null && proc.exitCode === null && proc.signalCode === null) {
      await new Promise((r) => {
        proc.once("exit", r);
        proc.kill("SIGTERM");
      });
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function pong(port) {
  return new Promise((resolvePong) => {
    const socket = createConnection({ port, host: "127.0.0.1" }, () => socket.write("PING\r\n"));
    socket.setTimeout(500, () => {
      socket.destroy();
      resolvePong(false);
    });
    socket.on("data", (data) => {
      socket.destroy();
      resolvePong(data.toString().startsWith("+PONG"));
    });
    socket.on("error", () => resolvePong(false));
  });
}

/** A tokens file (`{"agent-id": "token"}`) in a fresh directory; returns its path. */
export function tokensFile(tokens) {
  const path = join(mkdtempSync(join(tmpdir(), "agora-tokens-")), "tokens.json");
  writeFileSync(path, JSON.stringify(tokens));
  return path;
}

export function rewriteTokens(path, tokens) {
  writeFileSync(path, JSON.stringify(tokens));
}

/** `promise`, or an error naming `what` after `ms`. */
export function within(ms, promise, what = "the operation") {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

/** The next item of `iterator` that `predicate` accepts (others are skipped). */
export async function nextMatching(sub, predicate, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const item = await sub.take(Math.max(1, deadline - Date.now()));
    if (predicate(item)) return item;
  }
}

/** Random ids, so that two runs (or two tests) never share a space or an agent. */
export function unique(prefix) {
  return `${prefix}-${Math.random().toString(36).slice(2, 8)}`;
}

/** An HS256 JSON Web Token of `claims`, signed with `secret`. */
export function jwt(secret, claims) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const unsigned = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  return `${unsigned}.${createHmac("sha256", secret).update(unsigned).digest("base64url")}`;
}
