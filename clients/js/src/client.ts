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
 * what arrives; `ClientSession` (session.ts) holds the state, the lifecycle,
 * `events()` and what a new connection must be told again; this module adds the
 * requests.
 */

import { CloseCode, ConnectionClosed, HubClientError, ReplyTimeout } from "./errors.js";
import {
  acknowledged,
  parseAgentPage,
  parseEvent,
  parseHistory,
  parseMembersPage,
  parseSpaces,
  type AgentEntry,
  type AgentPage,
  type Data,
  type Event,
  type Frame,
  type HistoryPage,
  type JoinResult,
  type MembersPage,
  type Position,
  type Registration,
  type SpaceInfo,
} from "./models.js";
import { asData, type PublishOptions, type ReplyOptions, type RequestOptions } from "./options.js";
import { joinMessage } from "./positions.js";
import { everyPage, type ReplyWaiter } from "./requests.js";
import { Answerer, type RequestHandler, type ServeOptions } from "./serving.js";
import { ClientSession } from "./session.js";
import { OutgoingStream, type StreamOptions } from "./streams.js";

/** How often `publish()` sends an idempotent publish again after lost connections. */
const MAX_PUBLISH_RETRIES = 5;

/** An agent's connection to an Agora hub (see the module's description). */
export class HubClient extends ClientSession {
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
    return this.publishWith(space, data, options, null, null);
  }

  /**
   * Ask: publish `data` (addressed with `to`) and resolve with the first event
   * whose `data.in_reply_to` is the published event's id — a streamed reply
   * assembled (check `complete`) — published in `space` by an agent of `to`
   * (unaddressed: by any member of `space`). No reply within `timeout` ms (default 30 000,
   * publishing included) throws `ReplyTimeout`; the client stopping for good
   * throws its error.
   */
  async request(space: string, data: Data | string, options: RequestOptions = {}): Promise<Event> {
    const timeout = options.timeout ?? 30_000;
    const deadline = performance.now() + timeout;
    let waiter: ReplyWaiter | null = null;
    const replies = this.inbox.replies;
    let sent: Event;
    try {
      const onId = (rid: string): void => void (waiter = replies.expect(rid, waiter, space, options.to ?? null));
      sent = await this.publishWith(space, data, options, onId, deadline);
    } catch (error) {
      if (waiter !== null) replies.abandon(waiter, error as Error);
      throw error;
    }
    const pending: ReplyWaiter = waiter!;
    // The reader binds the request to its event id from the frame that acknowledged
    // the publish, before any later frame; this covers an acknowledgement it missed.
    if (pending.eventId === null) replies.acknowledged(pending.requestId, sent.eventId);
    const timer = setTimeout(
      () => {
        const message = `no reply to ${sent.eventId} in ${space} within ${timeout} ms`;
        replies.abandon(pending, new ReplyTimeout(message, sent.eventId));
        // Nobody waits any more: the agents asked are told, as the hub's faces
        // tell them (contract §19), and serve() cancels its handler. Best effort.
        const stop = { cancel: true, in_reply_to: sent.eventId, reason: "timeout" };
        this.publish(space, stop, { to: options.to, echo: false }).catch(() => {});
      },
      Math.max(0, deadline - performance.now()),
    );
    try {
      return await pending.promise;
    } finally {
      clearTimeout(timer);
    }
  }


  /** Answer `event`: publish `data` with `in_reply_to` = its id in its space,
   * addressed to its sender (`to: null`: to every member; or other agents). An event
   * of the hub itself (`"@hub"`) is answered unaddressed. */
  async reply(event: Event, data: Data | string, options: ReplyOptions = {}): Promise<Event> {
    const payload = { ...asData(data), in_reply_to: event.eventId };
    const to = options.to === undefined ? senderOf(event) : options.to;
    return this.publish(event.space, payload, { ...options, to: to ?? undefined });
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

  /** Stop receiving someone else's stream (`eventId` as received); the publisher
   * and the other receivers are not affected. */
  async cancelStream(space: string, eventId: string): Promise<void> {
    await this.connection.request({ type: "space.event.cancel", space, event_id: eventId });
  }

  /**
   * Answer every request in `space` with `handler`, until the client closes.
   *
   * `space` is joined first when it is not yet. A request is an event of the space
   * that is not a reply and not this agent's own (a streamed one comes whole); with
   * `addressedOnly`, only those addressed to this agent. `handler(event, signal)`
   * returns (or resolves with) the reply: a string or an object (one reply,
   * addressed to the asker), `null`/`undefined` (no reply), or an iterator of
   * strings — an `async function*` — streamed as it is produced. A throw becomes a
   * failure reply `{ status: "failure", error }`. `signal` aborts when the asker
   * stops waiting (it left, it cancelled the request or the streamed reply): pass it
   * on to the work. At most `concurrency` (16) requests are handled at once. A reply
   * that cannot be delivered (the asker left …) is logged, never thrown. Resolves
   * when the client closes; rejects with its error when the connection is lost for
   * good. See serving.ts.
   */
  serve(space: string, handler: RequestHandler, options: ServeOptions = {}): Promise<void> {
    return new Answerer(this, space, handler, options, this.queueSize, this.log).run();
  }

  // ── streams ────────────────────────────────────────────────────────────

  /** A stream to publish to `space`: `write()` … `end()`, or `pipe(tokens)`. */
  stream(space: string, options: StreamOptions = {}): OutgoingStream {
    const eventId = options.eventId ?? `st-${randomHex(6)}`;
    return new OutgoingStream(this.streamOwner, space, eventId, options, this.streams.newPrefix());
  }

  /** A stream that answers `event`: its first delta carries `in_reply_to`, and it
   * is addressed as `reply()` addresses (`to`: the event's sender by default), so
   * the hub routes every frame of it to the asker (and your echo) only. */
  replyStream(event: Event, options: StreamOptions = {}): OutgoingStream {
    return this.stream(event.space, {
      ...options,
      data: { ...(options.data ?? {}), in_reply_to: event.eventId },
      to: options.to === undefined ? senderOf(event) : options.to,
    });
  }

  // ── internals ──────────────────────────────────────────────────────────

  private async publishWith(
    space: string,
    data: Data | string,
    options: PublishOptions,
    onId: ((rid: string) => void) | null,
    deadline: number | null,
  ): Promise<Event> {
    const payload = asData(data);
    const msg: Frame = { type: "space.publish", space, data: payload, echo: options.echo ?? true };
    if (options.to !== undefined) msg.to = options.to;
    if (options.idempotencyKey !== undefined) msg.idempotency_key = options.idempotencyKey;
    let reply: Frame;
    for (let attempt = 0; ; attempt++) {
      try {
        const timeout = deadline === null ? undefined : Math.max(1, deadline - performance.now());
        reply = await this.connection.request({ ...msg }, { onId: onId ?? undefined, timeout });
        break;
      } catch (error) {
        const retry =
          error instanceof ConnectionClosed &&
          error.closeCode !== CloseCode.MESSAGE_TOO_BIG && // it would be refused again
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
}

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Whom a reply to `event` goes to by default: its sender, unless the hub sent it. */
function senderOf(event: Event): string | null {
  return AGENT_ID.test(event.from) ? event.from : null;
}

function randomHex(bytes: number): string {
  const buf = new Uint8Array(bytes);
  globalThis.crypto.getRandomValues(buf);
  return [...buf].map((b) => b.toString(16).padStart(2, "0")).join("");
}
