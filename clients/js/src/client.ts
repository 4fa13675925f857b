/**
 * The client's face: `HubClient`, one agent's connection to a hub. The entry
 * points (node.ts, browser.ts) export it as `Client`, with the WebSocket of their
 * platform.
 *
 * `await client.connect()` opens the connection and waits for `agent.registered`;
 * then any number of requests may be in flight (matched to their answers by id),
 * and any number of `events()` iterators read what arrives. `await client.close()`
 * ends it all.
 *
 * With `reconnect` (on by default) a lost connection is reopened with backoff; the
 * agent's details are declared again and every space joined is joined again from
 * where the client was (`since`): the hub replays what was published meanwhile, no
 * gap and no duplicate — or says it cannot (`recovered: false`), which the
 * application hears as a `Resumed` item and through `onResume`, never silently.
 *
 * Layers: `Connection` keeps the WebSocket open and reopens it; `Inbox` routes
 * what arrives; this module adds the requests and what a new connection must be
 * told again (`restore`).
 */

import { StreamAssembler } from "./assembly.js";
import {
  Backoff,
  Connection,
  type BackoffOptions,
  type ConnectionState,
  type Session,
} from "./connection.js";
import {
  ConnectionClosed,
  ConnectionFailed,
  HubClientError,
  HubRejected,
  RateLimited,
  RequestTimeout,
  Unavailable,
} from "./errors.js";
import type { Link } from "./link.js";
import { describe, loggerFrom, type Logger } from "./logging.js";
import {
  isObject,
  makeEvent,
  parseAgentPage,
  parseEvent,
  parseHistory,
  parseMembersPage,
  parseRegistration,
  parseSpaces,
  type AgentEntry,
  type AgentPage,
  type Data,
  type Event,
  type Frame,
  type HistoryPage,
  type JoinResult,
  type MembersPage,
  type Message,
  type Position,
  type Registration,
  type Resumed,
  type SpaceInfo,
} from "./models.js";
import { joinMessage } from "./positions.js";
import { Inbox } from "./receiving.js";
import { everyPage, type ReplyWaiter } from "./requests.js";
import type { SocketFactory, TokenPlacement } from "./socket.js";
import { OutgoingStream, OutgoingStreams, type StreamOptions, type StreamOwner } from "./streams.js";
import { AssemblingShaper, ChunkShaper, type Kind, type Subscription } from "./subscriptions.js";

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
/** How often `publish()` sends an idempotent publish again after lost connections. */
const MAX_PUBLISH_RETRIES = 5;

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

export interface RequestOptions extends PublishOptions {
  /** Milliseconds to wait for the reply (default 30 000). */
  timeout?: number;
}

export type { ConnectionState };

export class HubClient implements Session {
  readonly agentId: string;
  private readonly connection: Connection;
  private readonly inbox: Inbox;
  private readonly streams = new OutgoingStreams();
  private readonly log: Logger;
  private readonly options: ClientOptions;
  private refreshing = false;
  private readonly streamOwner: StreamOwner;

  constructor(url: string | string[], agentId: string, options: ClientOptions & { socketFactory: SocketFactory }) {
    if (typeof agentId !== "string" || !AGENT_ID.test(agentId)) {
      throw new TypeError(
        `invalid agentId ${JSON.stringify(agentId)}: 1-128 characters of [A-Za-z0-9._:-], ` +
          "starting with a letter or digit",
      );
    }
    const queueSize = options.queueSize ?? 1000;
    if (!Number.isInteger(queueSize) || queueSize < 1) throw new RangeError("queueSize must be at least 1");
    this.agentId = agentId;
    this.options = options;
    this.log = loggerFrom(options.logger);
    const reconnect = options.reconnect ?? true;
    this.connection = new Connection(
      {
        urls: Array.isArray(url) ? url : [url],
        agentId,
        token: options.token ?? null,
        tokenProvider: options.tokenProvider ?? null,
        tokenIn: options.tokenIn ?? "header",
        backoff: reconnect === false ? null : new Backoff(reconnect === true ? {} : reconnect),
        requestTimeout: options.requestTimeout ?? 10_000,
        openTimeout: options.openTimeout ?? 10_000,
        closeTimeout: options.closeTimeout ?? 2_000,
        maxSize: options.maxSize ?? 16 * 1024 * 1024,
        maxBufferedBytes: options.maxBufferedBytes ?? 4 * 1024 * 1024,
        maxQueued: options.maxQueued ?? 1000,
        socketFactory: options.socketFactory,
        log: this.log,
      },
      this,
    );
    if (options.type !== undefined || options.capabilities?.length || Object.keys(options.metadata ?? {}).length) {
      this.connection.details = agentDetails(agentId, options);
    }
    const connection = this.connection;
    const streams = this.streams;
    this.streamOwner = {
      agentId,
      get generation() {
        return connection.generation;
      },
      openStream: (stream) => streams.add(stream),
      closeStream: (stream) => streams.remove(stream),
      send: (msg, generation) => connection.send(msg, generation),
      request: (msg) => connection.request(msg),
      barrier: () => connection.barrier(),
    };
    this.inbox = new Inbox(
      {
        agentId,
        requests: this.connection.requests,
        streams: this.streams,
        log: this.log,
        onResume: options.onResume ?? null,
        noteError: (frame) => this.connection.noteError(frame),
        tokenExpired: () => this.refreshFromProvider(),
        registered: (registration) => void (this.connection.registration = registration),
      },
      queueSize,
    );
  }

  // ── state ──────────────────────────────────────────────────────────────

  /** `idle` → `connecting` → `open` ⇄ `reconnecting` → `closed`. */
  get state(): ConnectionState {
    return this.connection.state;
  }
  get connected(): boolean {
    return this.connection.connected;
  }
  /** What the hub said at the last `agent.registered`. */
  get registration(): Registration | null {
    return this.connection.registration;
  }
  /** Successful reconnects so far. */
  get reconnects(): number {
    return this.connection.reconnects;
  }
  /** Bytes sent but not yet written to the network (bounded by `maxBufferedBytes`). */
  get bufferedAmount(): number {
    return this.connection.bufferedAmount;
  }
  /** Why the client stopped, when it stopped on its own (a refusal, a lost connection). */
  get closedError(): HubClientError | null {
    return this.connection.closedError;
  }
  /** The spaces joined (and rejoined after a reconnect), in join order. */
  get joinedSpaces(): string[] {
    return this.inbox.spaces.names();
  }
  /** The last member list the hub sent for a joined space (partial in a big space). */
  knownMembers(space: string): string[] | null {
    return this.inbox.spaces.members(space);
  }
  /** The highest `seq` received in `space`. */
  lastSeq(space: string): number | null {
    return this.inbox.spaces.lastSeq(space);
  }
  /** Where this client is in `space`: keep it to resume later with `join(space, {since})`. */
  position(space: string): Position | null {
    return this.inbox.spaces.position(space);
  }

  // ── lifecycle ──────────────────────────────────────────────────────────

  /** Open the connection and wait for `agent.registered`. Throws `ConnectionFailed`
   * when the hub cannot be reached, `Unauthorized` / `AgentExists` when it refuses
   * the agent. The first connection is never retried. */
  async connect(): Promise<this> {
    await this.connection.connect();
    return this;
  }

  /** Close the connection (1000); iterators end once drained. Idempotent. */
  close(): Promise<void> {
    return this.connection.close();
  }

  /** Wait until the connection is (again) open. */
  waitConnected(timeout?: number): Promise<void> {
    return this.connection.waitConnected(timeout);
  }

  // ── requests ───────────────────────────────────────────────────────────

  /** Tell the hub what this agent is (others see `agent.status` `updated`). Only
   * what is given is sent; the hub keeps the rest. Declared again after reconnects. */
  async register(details: { type?: string | null; capabilities?: string[]; metadata?: Data } = {}): Promise<Registration> {
    const agent: Frame = { id: this.agentId };
    if (details.type !== undefined) agent.type = details.type;
    if (details.capabilities !== undefined) agent.capabilities = [...details.capabilities];
    if (details.metadata !== undefined) agent.metadata = { ...details.metadata };
    const reply = await this.connection.request({ type: "agent.register", agent });
    this.connection.details = { ...(this.connection.details ?? {}), ...agent };
    return this.registered(reply);
  }

  /** Join `space` (created on first join). `since` (a `position()` kept from
   * earlier) resumes: the hub first replays what was published after it. */
  async join(space: string, options: { since?: Position | null } = {}): Promise<JoinResult> {
    const since = options.since ?? null;
    const reply = await this.connection.request(joinMessage(space, since));
    return this.inbox.spaces.joinedReply(space, reply, since !== null);
  }

  /** Leave `space`; streams this client publishes there are cancelled by the hub. */
  async leave(space: string): Promise<void> {
    await this.connection.request({ type: "space.leave", space });
    this.inbox.spaces.left(space);
  }

  /**
   * Publish `data` (an object, or a string meaning `{text}`) to `space`; resolves
   * with the event as the hub stamped it (`eventId`, `seq`, `timestamp`) once it is
   * acknowledged: by its echo, or by `space.published` with `echo: false`. With an
   * `idempotencyKey` and `reconnect`, a publish cut off by a lost connection is sent
   * again (the hub publishes it at most once).
   */
  publish(space: string, data: Data | string, options: PublishOptions = {}): Promise<Event> {
    return this.publishWith(space, data, options, null);
  }

  /**
   * Ask: publish `data` and resolve with the first event whose `data.in_reply_to`
   * is the published event's id — a streamed reply assembled. Throws
   * `RequestTimeout` when none comes within `timeout` (default 30 s).
   */
  async request(space: string, data: Data | string, options: RequestOptions = {}): Promise<Event> {
    const timeout = options.timeout ?? 30_000;
    let waiter: ReplyWaiter | null = null;
    const replies = this.inbox.replies;
    try {
      await this.publishWith(space, data, options, (rid) => (waiter = replies.expect(rid, waiter)));
    } catch (error) {
      if (waiter !== null) replies.abandon(waiter, error as Error);
      throw error;
    }
    const pending: ReplyWaiter = waiter!;
    const timer = setTimeout(() => {
      replies.abandon(pending, new RequestTimeout(`no reply to ${pending.eventId} within ${timeout} ms`));
    }, timeout);
    try {
      return await pending.promise;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Answer `event`: publish `data` with `in_reply_to` = its id, addressed to its sender. */
  async reply(event: Event, data: Data | string, options: Omit<PublishOptions, "to"> = {}): Promise<Event> {
    if (!event.from || event.from === "@hub") throw new TypeError("only an agent's event can be replied to");
    const payload = { ...asData(data), in_reply_to: event.eventId };
    return this.publish(event.space, payload, { ...options, to: event.from });
  }

  /** Every space of the hub (cluster-wide) with its member count. */
  async spaces(): Promise<SpaceInfo[]> {
    return parseSpaces(await this.connection.request({ type: "space.list" }));
  }

  /** One page of `space`'s current members, cluster-wide, oldest first; pass the
   * page's `nextCursor` for the next one. `limit` 1–1000 (the hub's default 100). */
  async members(space: string, options: { cursor?: string | null; limit?: number } = {}): Promise<MembersPage> {
    const msg: Frame = { type: "space.members", space };
    if (options.cursor != null) msg.cursor = options.cursor;
    if (options.limit !== undefined) msg.limit = options.limit;
    const page = parseMembersPage(await this.connection.request(msg));
    if (page === null) throw new HubClientError("malformed space.members reply");
    return page;
  }

  /** Every current member of `space`, paging through `members()`. */
  allMembers(space: string): Promise<string[]> {
    return everyPage((cursor) => this.members(space, { cursor, limit: 1000 }), (page) => page.members);
  }

  /** One page of the agent directory: agents online cluster-wide, by `capability`
   * (exact, or a prefix ending in `*`) and/or membership of `space`. */
  async listAgents(
    options: { capability?: string; space?: string; cursor?: string | null; limit?: number } = {},
  ): Promise<AgentPage> {
    const msg: Frame = { type: "agent.list" };
    if (options.capability !== undefined) msg.capability = options.capability;
    if (options.space !== undefined) msg.space = options.space;
    if (options.cursor != null) msg.cursor = options.cursor;
    if (options.limit !== undefined) msg.limit = options.limit;
    const page = parseAgentPage(await this.connection.request(msg));
    if (page === null) throw new HubClientError("malformed agent.list reply");
    return page;
  }

  /** Every agent `listAgents()` matches, paging through them all. */
  findAgents(options: { capability?: string; space?: string } = {}): Promise<AgentEntry[]> {
    return everyPage((cursor) => this.listAgents({ ...options, cursor, limit: 1000 }), (page) => page.agents);
  }

  /** The newest recorded events of `space` (a member only), oldest first; page
   * back with `beforeSeq: page.nextBeforeSeq`. At most 100 a page. */
  async history(space: string, options: { limit?: number; beforeSeq?: number } = {}): Promise<HistoryPage> {
    const msg: Frame = { type: "space.history", space, limit: options.limit ?? 50 };
    if (options.beforeSeq !== undefined) msg.before_seq = options.beforeSeq;
    return parseHistory(space, await this.connection.request(msg));
  }

  /** One heartbeat round trip; resolves with the hub's timestamp (Unix ms). */
  async ping(): Promise<number | null> {
    const reply = await this.connection.request({ type: "agent.heartbeat" });
    return Number.isInteger(reply.timestamp) ? (reply.timestamp as number) : null;
  }

  /** Give the hub a new token (`agent.refresh`); resolves with its expiry (Unix ms)
   * or null. It is the one used on reconnects from now on. */
  async refreshToken(token: string): Promise<number | null> {
    const reply = await this.connection.request({ type: "agent.refresh", token });
    this.connection.token = token;
    const noted = this.connection.noted;
    if (noted !== null && noted.code === "UNAUTHORIZED") this.connection.noteError(null);
    return Number.isInteger(reply.expires_at) ? (reply.expires_at as number) : null;
  }

  /** Stop receiving someone else's stream (`eventId` as received); the publisher
   * and the other receivers are not affected. */
  async cancelStream(space: string, eventId: string): Promise<void> {
    await this.connection.request({ type: "space.event.cancel", space, event_id: eventId });
  }

  // ── streams ────────────────────────────────────────────────────────────

  /** A stream to publish to `space`: `write()` … `end()`, or `pipe(tokens)`. */
  stream(space: string, options: StreamOptions = {}): OutgoingStream {
    return new OutgoingStream(
      this.streamOwner,
      space,
      options.eventId ?? `st-${randomHex(6)}`,
      { ...(options.data ?? {}) },
      options.echo ?? true,
      this.streams.newPrefix(),
    );
  }

  /** A stream that answers `event` (`data.in_reply_to`). Client streams cannot be
   * addressed: every member of the space receives it. */
  replyStream(event: Event, options: Omit<StreamOptions, "data"> & { data?: Data } = {}): OutgoingStream {
    return this.stream(event.space, { ...options, data: { ...(options.data ?? {}), in_reply_to: event.eventId } });
  }

  // ── receiving ──────────────────────────────────────────────────────────

  /**
   * Iterate what arrives in `space` (or in every space): `Event`s — incoming
   * streams put back together, or their frames with `chunks: true` — and, when
   * asked, `MembersChanged` and `Resumed` items. It starts now, and first takes
   * what arrived while nobody was reading.
   */
  events(space?: string | null): Subscription<Event>;
  events(space: string | null | undefined, options: EventsOptions): Subscription<Message>;
  events(space: string | null = null, options: EventsOptions = {}): Subscription<any> {
    const kinds = new Set<Kind>(["event", "delta", "done", "cancel"]);
    if (options.members) kinds.add("members");
    if (options.resumed) kinds.add("resumed");
    const shaper = options.chunks
      ? new ChunkShaper()
      : new AssemblingShaper(
          new StreamAssembler({
            incompleteTimeout: options.incompleteTimeout === undefined ? 30_000 : options.incompleteTimeout,
            maxChars: options.maxChars,
          }),
        );
    return this.inbox.router.subscribe<Message>(space ?? null, kinds, shaper);
  }

  // ── Session: what the connection asks of the client ──────────────────────

  /** @internal What a new connection is told before it is used: the agent's
   * details when they did not fit in the handshake, and every space joined
   * before, rejoined from where the client was. */
  async restore(link: Link, detailsSent: boolean): Promise<void> {
    const spaces = this.inbox.spaces;
    try {
      const details = this.connection.details;
      if (details !== null && !detailsSent) {
        this.registered(await this.connection.request({ type: "agent.register", agent: details }, { link }));
      }
      await Promise.all(
        spaces.names().map(async (space) => {
          const since = spaces.rejoining(space);
          try {
            const reply = await this.connection.request(joinMessage(space, since), { link });
            spaces.joinedReply(space, reply, since !== null);
          } catch (error) {
            if (error instanceof Unavailable || error instanceof RateLimited) throw error;
            if (!(error instanceof HubRejected)) throw error;
            this.log.warn(`could not rejoin ${space} after reconnecting: ${error.message}`);
            spaces.rejoinRefused(space);
          }
        }),
      );
    } catch (error) {
      spaces.resuming.clear(); // the next connection rejoins them all again
      throw error;
    }
  }

  /** @internal */
  dispatch(frame: Frame): void {
    this.inbox.dispatch(frame);
  }
  /** @internal */
  connectionLost(): void {
    this.inbox.connectionLost();
  }
  /** @internal */
  stopped(error: HubClientError | null): void {
    this.inbox.stopped(error);
  }
  /** @internal */
  stateChanged(state: ConnectionState, error: HubClientError | null): void {
    try {
      this.options.onStateChange?.(state, error);
    } catch (callbackError) {
      this.log.warn(`onStateChange failed: ${describe(callbackError)}`);
    }
  }

  // ── internals ──────────────────────────────────────────────────────────

  private async publishWith(
    space: string,
    data: Data | string,
    options: PublishOptions,
    onId: ((rid: string) => void) | null,
  ): Promise<Event> {
    const payload = asData(data);
    const msg: Frame = { type: "space.publish", space, data: payload, echo: options.echo ?? true };
    if (options.to !== undefined) msg.to = options.to;
    if (options.idempotencyKey !== undefined) msg.idempotency_key = options.idempotencyKey;
    let reply: Frame;
    for (let attempt = 0; ; attempt++) {
      try {
        reply = await this.connection.request({ ...msg }, onId === null ? {} : { onId });
        break;
      } catch (error) {
        const retry =
          error instanceof ConnectionClosed &&
          options.idempotencyKey !== undefined &&
          this.connection.state === "reconnecting" &&
          attempt < MAX_PUBLISH_RETRIES;
        if (!retry) throw error;
        this.log.info("publish interrupted by a lost connection: sending it again");
      }
    }
    if (reply.type === "space.event") {
      const event = parseEvent(reply);
      if (event !== null) return event;
    }
    return acknowledged(space, this.agentId, payload, reply);
  }

  private registered(reply: Frame): Registration {
    const registration = parseRegistration(reply);
    if (registration === null) throw new ConnectionFailed("malformed agent.registered");
    this.connection.registration = registration;
    return registration;
  }

  private refreshFromProvider(): void {
    const provider = this.options.tokenProvider;
    if (provider === undefined || this.refreshing) return;
    this.refreshing = true;
    (async () => {
      try {
        await this.refreshToken(await provider());
      } catch (error) {
        this.log.warn(`refreshing the expired token failed: ${describe(error)}`);
      } finally {
        this.refreshing = false;
      }
    })();
  }
}

/** The published event, from the reply that acknowledges it without carrying it:
 * `space.published` (`echo: false`, or a repeated `idempotencyKey`: `duplicate`) or
 * `space.event.done` (a text big enough for the hub to stream it). */
function acknowledged(space: string, sender: string, payload: Data, reply: Frame): Event {
  const streamed = reply.type === "space.event.done";
  const duplicate = reply.type === "space.published" && reply.duplicate === true;
  return makeEvent({
    space,
    eventId: String(reply.event_id),
    seq: Number.isInteger(reply.seq) ? (reply.seq as number) : 0,
    from: sender,
    timestamp: Number.isInteger(reply.timestamp) ? (reply.timestamp as number) : null,
    data: { from: sender, ...payload },
    requestId: (streamed ? reply.request_id : reply.id) as string | null,
    streamed,
    duplicate,
  });
}

function asData(data: Data | string): Data {
  if (typeof data === "string") return { text: data };
  if (!isObject(data)) throw new TypeError("data must be an object or a string");
  return { ...data };
}

function agentDetails(agentId: string, options: ClientOptions): Frame {
  const details: Frame = { id: agentId };
  if (options.type !== undefined) details.type = options.type;
  details.capabilities = [...(options.capabilities ?? [])];
  details.metadata = { ...(options.metadata ?? {}) };
  return details;
}

function randomHex(bytes: number): string {
  const buf = new Uint8Array(bytes);
  globalThis.crypto.getRandomValues(buf);
  return [...buf].map((b) => b.toString(16).padStart(2, "0")).join("");
}
