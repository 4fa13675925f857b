/**
 * Running an agent as a program, in Node: `run(main)` ends the way a person at a
 * terminal expects (the Python SDK's `run()`).
 *
 * An agent's `main` ends in one of three ways: it finishes; someone presses Ctrl-C
 * (or a service manager sends SIGTERM); or the hub makes it stop — the agent id is
 * taken, the token is refused, the hub cannot be reached. The last two should read
 * as one line, not a stack trace: `run` prints `<program>: <CODE>: <message>` on
 * stderr for a `HubClientError` (`AgentExists` says which id is taken and what to
 * change) and exits with status 1. Any other error is a bug in the agent and keeps
 * its stack trace.
 *
 * `main` gets an `AbortSignal` that aborts on the first SIGINT or SIGTERM: give it
 * to the clients (`new Client(url, id, { signal })`), which then close, so that
 * `serve()` and `events()` loops end and `main` returns. The process then exits
 * with 130 after Ctrl-C (128 + SIGINT, as shells report it) and 0 after SIGTERM (a
 * clean stop for service managers). A second signal, or `main` still running
 * `grace` ms after the first, exits at once.
 *
 * ```js
 * import { Client, run } from "agora-hub-client";
 *
 * await run(async (signal) => {
 *   const client = await new Client("ws://127.0.0.1:8765/ws", "echo-bot", { signal }).connect();
 *   await client.serve("general", (event) => `you said: ${event.text}`);
 * });
 * ```
 */

import { basename } from "node:path";

import { HubClientError } from "./errors.js";

/** Exit status after Ctrl-C (128 + SIGINT), as shells report it. */
export const EXIT_INTERRUPTED = 130;
/** Exit status when the hub refused or lost the agent. */
export const EXIT_HUB_ERROR = 1;

const EXIT_AFTER: Readonly<Record<string, number>> = { SIGINT: EXIT_INTERRUPTED, SIGTERM: 0 };

export interface RunOptions {
  /** Milliseconds `main` has to finish after the first signal before the process
   * exits anyway (default 5 000). */
  grace?: number;
}

/** Run `main` as the program (see the module's description); resolves with what it
 * returns when it finishes by itself. */
export async function run<T>(main: (signal: AbortSignal) => T | Promise<T>, options: RunOptions = {}): Promise<T> {
  const controller = new AbortController();
  const stop: { by: string | null } = { by: null };
  const exit = (code: number): never => process.exit(code);
  const onSignal = (name: string): void => {
    if (stop.by !== null) exit(EXIT_AFTER[stop.by]!); // a second one: now
    stop.by = name;
    controller.abort(new DOMException(`stopped by ${name}`, "AbortError"));
    setTimeout(() => exit(EXIT_AFTER[name]!), options.grace ?? 5_000).unref();
  };
  const handlers = Object.keys(EXIT_AFTER).map((name) => [name, () => onSignal(name)] as const);
  for (const [name, handler] of handlers) process.on(name, handler);
  try {
    const result = await main(controller.signal);
    return stop.by === null ? result : exit(EXIT_AFTER[stop.by]!);
  } catch (error) {
    // Stopping closes the clients: what their loops then throw is the stop itself.
    if (stop.by !== null) return exit(EXIT_AFTER[stop.by]!);
    if (!(error instanceof HubClientError)) throw error;
    process.stderr.write(`${basename(process.argv[1] ?? "agent")}: ${error.code}: ${error.message}\n`);
    return exit(EXIT_HUB_ERROR);
  } finally {
    for (const [name, handler] of handlers) process.off(name, handler);
  }
}
