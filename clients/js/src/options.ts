/**
 * What a `Client` is made with, and what its requests take.
 */

import type { ConnectionState } from "./connection.js";
import type { HubClientError } from "./errors.js";
import type { Logger } from "./logging.js";
import { isObject, type Data, type Frame, type Resumed } from "./models.js";
import type { BackoffOptions } from "./reconnect.js";
import type { TokenPlacement } from "./socket.js";

export interface ClientOptions {
  /** Sent as `Authorization: Bearer` (Node) or the subprotocol `bearer.TOKEN` (browsers). */
  token?: string;
  /** Called before every connection attempt (reconnects too; it then takes the place
   * of `token`) and when the hub says the token expired (the answer goes to the hub
   * as `agent.refresh`), so a connection outlives its tokens. */
  tokenProvider?: () => string | Promise<string>;
  /** Where the token goes (default: `header` in Node, `subprotocol` in browsers). */
  tokenIn?: TokenPlacement;
  /** The agent's details, declared in the handshake (and on every reconnect). */
  type?: string;
  capabilities?: string[];
  metadata?: Data;
  /** Reopen a lost connection (default true), with these delays. */
  reconnect?: boolean | BackoffOptions;
  /** Milliseconds to wait for each answer (default 10 000). */
  requestTimeout?: number;
  /** Milliseconds for the WebSocket handshake and `agent.registered` (default 10 000). */
  openTimeout?: number;
  /** Milliseconds `close()` waits for the hub's close frame (default 2 000). */
  closeTimeout?: number;
  /** Bound of every `events()` iterator and of the backlog (default 1 000 items). */
  queueSize?: number;
  /** Largest frame accepted from the hub, bytes (default 16 MiB; Node only). */
  maxSize?: number;
  /** Bytes the socket may hold unsent before sends wait (default 4 MiB). */
  maxBufferedBytes?: number;
  /** Requests that may wait for a connection at once (default 1 000). */
  maxQueued?: number;
  /** Called with every space rejoined after a reconnect. */
  onResume?: (resumed: Resumed) => unknown;
  /** Called when the state changes (`open`, `reconnecting`, `closed` …), with the
   * error that caused it. */
  onStateChange?: (state: ConnectionState, error: HubClientError | null) => void;
  /** Where warnings go (default `console.warn`; null: nowhere). */
  logger?: Partial<Logger> | null;
  /** Close the client when this signal aborts — `run()`'s on Ctrl-C, say. */
  signal?: AbortSignal;
}

export interface EventsOptions {
  /** Also yield `MembersChanged` items (someone else joined or left). */
  members?: boolean;
  /** Also yield `Resumed` items (the space was rejoined after a reconnect). */
  resumed?: boolean;
  /** Yield stream frames as they arrive instead of whole streamed events. */
  chunks?: boolean;
  /** Give up on an incoming stream with no frame for this long (ms, default
   * 30 000; null: never). */
  incompleteTimeout?: number | null;
  /** Text kept per incoming stream (default 64 Mi characters). */
  maxChars?: number;
}

export interface PublishOptions {
  /** Deliver to these members only (and the sender's echo). */
  to?: string | string[];
  /** Safe to repeat: a publish with a key already used is answered with the
   * original (`duplicate: true`) and not published again. */
  idempotencyKey?: string;
  /** Get the event back (default true); false: the hub acknowledges instead. */
  echo?: boolean;
}

export interface ReplyOptions extends Omit<PublishOptions, "to"> {
  /** Whom the reply goes to: the event's sender by default; null: every member. */
  to?: string | string[] | null;
}

export interface RequestOptions extends PublishOptions {
  /** Milliseconds to wait for the reply (default 30 000). */
  timeout?: number;
}

/** `data` as the hub takes it: an object, or a string meaning `{text}`. */
export function asData(data: Data | string): Data {
  if (typeof data === "string") return { text: data };
  if (!isObject(data)) throw new TypeError("data must be an object or a string");
  return { ...data };
}

/** The agent's details as `agent.register` declares them. */
export function agentDetails(agentId: string, options: ClientOptions): Frame {
  const details: Frame = { id: agentId };
  if (options.type !== undefined) details.type = options.type;
  details.capabilities = [...(options.capabilities ?? [])];
  details.metadata = { ...(options.metadata ?? {}) };
  return details;
}
