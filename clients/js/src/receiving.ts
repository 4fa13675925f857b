/**
 * What arrives from the hub, and where it goes: the `Inbox`.
 *
 * The connection hands each frame to `Inbox.dispatch`, in arrival order: an
 * answer settles the request waiting for it; events and stream frames move the
 * client's position in their space (positions.ts), may answer a `request()`
 * (`ReplyWaiters`), and go to the subscriptions that want them; the hub's relay of
 * a cancel ends a stream this client publishes; `space.joined` reports how a rejoin
 * after a reconnect went (`Resumed`, and the `onResume` callback). An `error`
 * without a request id is the hub's notice about the connection itself: it becomes
 * the reason of the close that follows — unless it says the token expired, which
 * the token provider's next token answers.
 */

import { ConnectionClosed, isTokenExpiredNotice, rejected, type HubClientError } from "./errors.js";
import { describe, type Logger } from "./logging.js";
import {
  chunkKind,
  parseChunk,
  parseEvent,
  parseMembersChanged,
  parseRegistration,
  str,
  type Frame,
  type Registration,
  type Resumed,
} from "./models.js";
import { JoinedSpaces, NOT_RESUMED } from "./positions.js";
import { ReplyWaiters, type PendingRequests } from "./requests.js";
import type { OutgoingStreams } from "./streams.js";
import { Router } from "./subscriptions.js";

/** What the inbox needs of the client around it. */
export interface InboxContext {
  readonly agentId: string;
  readonly requests: PendingRequests;
  readonly streams: OutgoingStreams;
  readonly log: Logger;
  readonly onResume: ((resumed: Resumed) => unknown) | null;
  /** The hub's `error` without a request id: the reason of a close that may follow. */
  noteError(frame: Frame): void;
  /** The hub says the token expired: `agent.refresh` is due. */
  tokenExpired(): void;
  registered(registration: Registration): void;
}

export class Inbox {
  readonly router: Router;
  readonly spaces = new JoinedSpaces();
  readonly replies = new ReplyWaiters();

  constructor(
    private readonly context: InboxContext,
    queueSize: number,
  ) {
    this.router = new Router(queueSize, (message) => context.log.warn(message));
  }

  dispatch(f: Frame): void {
    const { requests, agentId } = this.context;
    const type = f.type;
    const id = f.id;
    if (id !== undefined) requests.answer(id, f);
    if (type === "space.event") {
      const event = parseEvent(f);
      if (event === null) {
        this.context.log.warn("ignoring a malformed space.event");
        return;
      }
      this.spaces.seen(event.space, event.seq);
      if (event.from === agentId) {
        requests.answer(event.requestId, f);
        this.replies.acknowledged(event.requestId, event.eventId);
      }
      if (!this.replies.idle) this.replies.offerEvent(event);
      this.router.dispatch(event.space, "event", event);
    } else if (chunkKind(type) !== null) {
      const chunk = parseChunk(f);
      if (chunk === null) {
        this.context.log.warn(`ignoring a malformed ${String(type)}`);
        return;
      }
      if (chunk.kind === "cancel" && !chunk.eventId.includes("/")) {
        // The hub telling this producer that every receiver of its stream stopped
        // (contract §19): named by the id this client gave it, where every relayed
        // frame has "<publisher>/<id>".
        this.context.streams.cancelled(`${agentId}/${chunk.eventId}`, chunk.reason ?? "cancelled");
        return;
      }
      if (chunk.seq !== null) this.spaces.seen(chunk.space, chunk.seq);
      if (chunk.from === agentId) {
        requests.answer(chunk.requestId, f);
        // A text big enough for the hub to stream: the done acknowledges it.
        if (chunk.kind === "done") this.replies.acknowledged(chunk.requestId, chunk.eventId);
        if (chunk.kind === "cancel") this.context.streams.cancelled(chunk.eventId, chunk.reason ?? "cancelled");
      }
      if (!this.replies.idle) this.replies.offerChunk(chunk);
      this.router.dispatch(chunk.space, chunk.kind, chunk);
    } else if (type === "space.published") {
      const eventId = str(f.event_id);
      if (typeof id === "string" && eventId !== null) this.replies.acknowledged(id, eventId);
    } else if (type === "space.members" && id === undefined) {
      // (a reply to a `space.members` request has an id)
      const change = parseMembersChanged(f);
      if (change === null) return;
      this.spaces.membersChanged(change);
      this.router.dispatch(change.space, "members", change);
    } else if (type === "space.joined") {
      const resumed = this.spaces.onJoined(f);
      if (resumed !== null) this.resumed(resumed);
    } else if (type === "error") {
      this.onError(f);
    } else if (type === "agent.registered" && id === undefined) {
      const registration = parseRegistration(f);
      if (registration !== null) this.context.registered(registration);
    }
  }

  /** The connection was lost (it may be reopened): streams in flight end. */
  connectionLost(): void {
    this.context.streams.connectionLost();
    this.replies.reset();
    this.router.reset();
  }

  /** The client stopped for good: iterators end (throwing `error` when there is one). */
  stopped(error: HubClientError | null): void {
    this.context.streams.connectionLost();
    this.replies.failAll(error ?? new ConnectionClosed("client closed"));
    this.router.end(error);
  }

  private onError(f: Frame): void {
    const error = rejected(f);
    const rid = error.requestId;
    if (typeof rid === "string") {
      if (this.context.requests.refuse(rid, error) || this.context.streams.refused(rid, error)) return;
    }
    if (rid === null) {
      this.context.noteError(f);
      if (isTokenExpiredNotice(f)) this.context.tokenExpired();
      this.context.log.info(`hub error: ${error.code}: ${error.message}`);
      return;
    }
    this.context.log.warn(`hub error for an unknown request: ${error.code}: ${error.message}`);
  }

  /** Tell the application how a rejoin after a reconnect went. */
  private resumed(resumed: Resumed): void {
    if (NOT_RESUMED.has(resumed.space)) {
      this.context.log.info(`rejoined ${resumed.space} from now (presence is not replayed)`);
    } else if (!resumed.recovered) {
      const why = resumed.epoch !== resumed.since.epoch ? "lost: new epoch" : "no longer reaches back";
      this.context.log.warn(
        `rejoined ${resumed.space}: events after seq ${resumed.since.seq} could not be recovered (history ${why})`,
      );
    }
    this.router.dispatch(resumed.space, "resumed", resumed);
    const callback = this.context.onResume;
    if (callback === null) return;
    try {
      const result = callback(resumed);
      if (result instanceof Promise) {
        result.catch((error: unknown) => this.context.log.warn(`onResume failed: ${describe(error)}`));
      }
    } catch (error) {
      this.context.log.warn(`onResume failed: ${describe(error)}`);
    }
  }
}
