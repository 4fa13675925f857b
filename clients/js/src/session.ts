/**
 * The part of a `Client` that lives with its connection: the state, `connect()` /
 * `close()`, what arrives (`events()`), and what the `Connection` asks of the
 * client (`Session`): to tell a new connection what was set up (`restore`: the
 * agent's details, the spaces joined, from where the client was), to route each
 * frame (`Inbox`), and to end what a lost connection cut off. `HubClient`
 * (client.ts) adds the requests.
 */

import { StreamAssembler } from "./assembly.js";
import { Connection, type ConnectionState } from "./connection.js";
import {
  ConnectionFailed,
  HubRejected,
  isTokenExpiredNotice,
  RateLimited,
  Unavailable,
  type HubClientError,
} from "./errors.js";
import type { Link } from "./link.js";
import { describe, loggerFrom, type Logger } from "./logging.js";
import {
  parseRegistration,
  type Event,
  type Frame,
  type Message,
  type Position,
  type Registration,
} from "./models.js";
import { agentDetails, type ClientOptions, type EventsOptions } from "./options.js";
import { joinMessage } from "./positions.js";
import { Inbox } from "./receiving.js";
import { Backoff } from "./reconnect.js";
import { checkToken, type SocketFactory } from "./socket.js";
import { OutgoingStreams, type StreamOwner } from "./streams.js";
import { AssemblingShaper, ChunkShaper, type Kind, type Subscription } from "./subscriptions.js";

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
/** Rejoins sent at once after a reconnect. */
const REJOINS_IN_FLIGHT = 16;

/** The base of `HubClient`; the entry points give it its `socketFactory`. */
export abstract class ClientSession {
  readonly agentId: string;
  /** @internal */
  protected readonly connection: Connection;
  /** @internal */
  protected readonly inbox: Inbox;
  /** @internal */
  protected readonly streams = new OutgoingStreams();
  /** @internal */
  protected readonly streamOwner: StreamOwner;
  /** @internal */
  protected readonly log: Logger;
  /** @internal Bound of every iterator (and of the requests `serve()` holds). */
  protected readonly queueSize: number;
  /** @internal */
  private readonly options: ClientOptions;
  /** @internal */
  private refreshing = false;

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
    this.queueSize = queueSize;
    this.options = options;
    this.log = loggerFrom(options.logger);
    const reconnect = options.reconnect ?? true;
    this.connection = new Connection(
      {
        urls: Array.isArray(url) ? url : [url],
        agentId,
        token: options.token === undefined ? null : checkToken(options.token),
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
      // What the connection asks of the client (its Session), kept out of the
      // client's own methods: none of it is for applications.
      {
        restore: (link, detailsSent) => this.restore(link, detailsSent),
        dispatch: (frame) => this.inbox.dispatch(frame),
        connectionLost: () => this.inbox.connectionLost(),
        stopped: (error) => this.inbox.stopped(error),
        stateChanged: (state, error) => this.stateChanged(state, error),
      },
    );
    options.signal?.addEventListener("abort", () => void this.close(), { once: true });
    if (options.signal?.aborted) void this.close();
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

  // ── what the connection asks of the client ───────────────────────────

  /** @internal What a new connection is told before it is used: the agent's
   * details when they did not fit in the handshake, and every space joined
   * before, rejoined from where the client was. */
  private async restore(link: Link, detailsSent: boolean): Promise<void> {
    const spaces = this.inbox.spaces;
    try {
      const details = this.connection.details;
      if (details !== null && !detailsSent) {
        this.registered(await this.connection.request({ type: "agent.register", agent: details }, { link }));
      }
      const rejoin = async (space: string): Promise<void> => {
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
      };
      // A few at a time: hundreds at once would run into the hub's rate limit.
      const waiting = spaces.names();
      const rejoiner = async (): Promise<void> => {
        for (let space = waiting.shift(); space !== undefined; space = waiting.shift()) await rejoin(space);
      };
      await Promise.all(Array.from({ length: Math.min(REJOINS_IN_FLIGHT, waiting.length) }, rejoiner));
    } catch (error) {
      spaces.resuming.clear(); // the next connection rejoins them all again
      throw error;
    }
  }

  /** @internal */
  private stateChanged(state: ConnectionState, error: HubClientError | null): void {
    try {
      this.options.onStateChange?.(state, error);
    } catch (callbackError) {
      this.log.warn(`onStateChange failed: ${describe(callbackError)}`);
    }
  }

  // ── the token ──────────────────────────────────────────────────────────

  /** Give the hub a new token (`agent.refresh`); resolves with its expiry (Unix ms)
   * or null. It is the one used on reconnects from now on. */
  async refreshToken(token: string): Promise<number | null> {
    const reply = await this.connection.request({ type: "agent.refresh", token });
    this.connection.token = token;
    const noted = this.connection.noted;
    // The expiry notice is answered: it is not why a later close happens.
    if (noted !== null && isTokenExpiredNotice(noted)) this.connection.noteError(null);
    return Number.isInteger(reply.expires_at) ? (reply.expires_at as number) : null;
  }

  // ── internals ──────────────────────────────────────────────────────────

  /** @internal */
  protected registered(reply: Frame): Registration {
    const registration = parseRegistration(reply);
    if (registration === null) throw new ConnectionFailed("malformed agent.registered");
    this.connection.registration = registration;
    return registration;
  }

  /** @internal */
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
