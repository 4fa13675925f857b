/**
 * The WebSocket under a client, behind a small interface, so that one client runs
 * on Node (the `ws` package, in node.ts) and in browsers (the native `WebSocket`,
 * in browser.ts). A `SocketFactory` opens one socket and reports what happens to
 * it to a `SocketHandlers`; `close` is reported exactly once, whether it opened or
 * not.
 */

import { ConnectionFailed } from "./errors.js";

/** Where the token goes: `Authorization: Bearer` (Node only), the subprotocol
 * `bearer.TOKEN` (what browsers can do), or the `?token=` query parameter (ends up
 * in access logs: the last resort). */
export type TokenPlacement = "header" | "subprotocol" | "query";

export interface SocketClosed {
  /** The close frame's code; null when there was none (the TCP connection dropped,
   * or it never opened). */
  readonly code: number | null;
  readonly reason: string;
  /** The HTTP status, when the upgrade was answered with one (Node only). */
  readonly status?: number;
  /** Why opening failed, in a few words (`connection refused`, the hub's 400 body …). */
  readonly detail?: string;
}

export interface SocketHandlers {
  message(text: string): void;
  close(info: SocketClosed): void;
}

export interface HubSocket {
  /** Bytes given to `send()` and not yet handed to the network. */
  readonly bufferedAmount: number;
  send(text: string): void;
  /** Start the closing handshake. */
  close(code?: number, reason?: string): void;
  /** Drop the connection now (Node); browsers can only `close()`. */
  abort(): void;
}

export interface SocketRequest {
  /** The hub's URL with `agent_id` and the agent's details in the query. */
  readonly url: string;
  readonly token: string | null;
  readonly tokenIn: TokenPlacement;
  /** Largest frame accepted from the hub (bytes). */
  readonly maxSize: number;
  readonly openTimeout: number;
}

export type SocketFactory = (request: SocketRequest, handlers: SocketHandlers) => HubSocket;

const SUBPROTOCOL_PREFIX = "bearer.";
/** What no token holds: anything outside printable ASCII (spaces included). */
const NOT_A_TOKEN = /[^\x21-\x7e]/;

/** The documentation's placeholders for a token. */
const PLACEHOLDERS = new Set(["…", "...", "TOKEN", "<token>"]);

/**
 * `token` checked before it is sent anywhere. A token is printable ASCII, so one
 * with spaces or other characters is a mistake to name — most often the
 * documentation's placeholder `"…"` left in place — not a handshake to fail with a
 * message about subprotocol or header characters. The token is never quoted.
 */
export function checkToken(token: string): string {
  if (PLACEHOLDERS.has(token)) {
    throw new TypeError(
      "the token is the documentation's placeholder: put your agent's token there, " +
        "or remove the token option for a hub that needs none",
    );
  }
  if (typeof token !== "string" || token === "" || NOT_A_TOKEN.test(token)) {
    throw new TypeError(
      "the token is empty or holds characters no token has (spaces, line breaks, non-ASCII): " +
        "check what was pasted, or remove the token option for a hub that needs none",
    );
  }
  return token;
}
/** What an HTTP token (RFC 9110), and so a WebSocket subprotocol, may hold. */
const TOKEN_CHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The subprotocol `bearer.TOKEN` carrying `token`. */
export function bearerSubprotocol(token: string): string {
  if (!TOKEN_CHARS.test(token)) {
    throw new ConnectionFailed(
      'the token holds characters a WebSocket subprotocol cannot carry: use tokenIn: "query" (or "header" in Node)',
    );
  }
  return SUBPROTOCOL_PREFIX + token;
}

/** `url` with `params` added to its query. */
export function withQuery(url: string, params: Array<[string, string]>): string {
  const parsed = new URL(url);
  for (const [key, value] of params) parsed.searchParams.append(key, value);
  return parsed.toString();
}

/**
 * The hub's WebSocket URL: `ws://` or `wss://` (`http(s)://` is taken to mean the
 * same host's WebSocket); a URL without a path gets `/ws`.
 */
export function hubUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`hub URL must be an absolute ws:// or wss:// URL, got ${JSON.stringify(url)}`);
  }
  if (parsed.protocol === "http:") parsed.protocol = "ws:";
  else if (parsed.protocol === "https:") parsed.protocol = "wss:";
  if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
    throw new TypeError(`hub URL must start with ws:// or wss://, got ${JSON.stringify(url)}`);
  }
  if (parsed.pathname === "" || parsed.pathname === "/") parsed.pathname = "/ws";
  parsed.hash = "";
  return parsed.toString();
}

/** A close code that says nothing (no close frame was received). */
export function meaningfulCloseCode(code: number): number | null {
  return code === 1005 || code === 1006 ? null : code;
}
