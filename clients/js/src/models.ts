/**
 * What the client hands to the application: plain records built from hub frames,
 * with camelCase names. Every item an `events()` iterator yields has a `kind`.
 *
 * The hub is trusted but not blindly: a frame that lacks a field needed here is
 * dropped (the `parse*` functions return null), never allowed to break the reader.
 */

import type { RequestId } from "./errors.js";

export type Data = Record<string, unknown>;

/** How a (possibly streamed) event ended: plain events are always `complete`. */
export type EventStatus = "complete" | "cancelled" | "incomplete";

/**
 * One `space.event` — or a stream put back together from its deltas (`streamed`).
 *
 * `from` is the publisher (`"@hub"` for hub events such as `agent.status`);
 * `timestamp` is the hub's, in Unix milliseconds; `to` is set on an addressed
 * event. A streamed event's `data` is its first delta's fields with `text` the
 * concatenation of every delta; its `status` says how it ended and `reason` why
 * (see the README's table), `chunks` how many deltas it had.
 */
export interface Event {
  readonly kind: "event";
  readonly space: string;
  readonly eventId: string;
  readonly seq: number;
  readonly from: string;
  readonly timestamp: number | null;
  readonly data: Data;
  /** `data.text` when it is a string. */
  readonly text: string | null;
  /** `data.in_reply_to` when it is a string: the event this one answers. */
  readonly inReplyTo: string | null;
  readonly to: string | string[] | null;
  readonly requestId: RequestId | null;
  readonly streamed: boolean;
  readonly status: EventStatus;
  /** `status === "complete"`. */
  readonly complete: boolean;
  readonly reason: string | null;
  readonly chunks: number;
  /** A retried publish (same `idempotencyKey`) answered with the original's ids. */
  readonly duplicate: boolean;
  /** Signed envelopes: true when the hub verified the signature, false when
   * unsigned; null for ordinary data. `signer` is the signing key's id. */
  readonly verified: boolean | null;
  readonly signer: string | null;
}

export type ChunkKind = "delta" | "done" | "cancel";

/**
 * One frame of a stream. `eventId` is the hub-side id (`"<publisher>/<id>"`), the
 * same on every frame of a stream. `reason` is set on cancels (`cancelled`,
 * `publisher_disconnected`, `idle_timeout`, `publisher_left_space`,
 * `receiver_cancelled`, or `connection_lost` when this client's connection dropped
 * mid-stream). The acknowledgement of a receiver cancel has no `seq` and no `from`.
 */
export interface StreamChunk {
  readonly kind: ChunkKind;
  readonly space: string;
  readonly eventId: string;
  readonly seq: number | null;
  readonly from: string | null;
  readonly timestamp: number | null;
  readonly data: Data;
  /** The delta's `data.text` (`""` for done and cancel). */
  readonly text: string;
  readonly to: string | string[] | null;
  readonly reason: string | null;
  readonly requestId: RequestId | null;
}

/** Others joined or left a space this client is in. `joinedIds` / `leftIds`: everyone
 * who joined / left, in order — one agent, or several when the hub coalesced the
 * changes of one short interval (`member_events_interval`) into one event. `joined` /
 * `left` keep the seed's single-change shape: the agent id when the event is about
 * one agent, else null — read the lists to miss nobody. `members` is the whole list
 * only while the space is small (the hub's `members_list_limit`), else null. */
export interface MembersChanged {
  readonly kind: "members";
  readonly space: string;
  readonly members: string[] | null;
  readonly memberCount: number;
  readonly joined: string | null;
  readonly left: string | null;
  readonly joinedIds: string[];
  readonly leftIds: string[];
}

/** Where a client is in a space: the history `epoch` and the last `seq` seen. */
export interface Position {
  readonly epoch: string;
  readonly seq: number;
}

/** A space rejoined after a reconnect. `recovered: false`: the hub no longer had
 * everything published since `since` — events between `since.seq` and `seq` may be
 * missing; reload what you need (`history()`, your own store). */
export interface Resumed {
  readonly kind: "resumed";
  readonly space: string;
  readonly recovered: boolean;
  readonly since: Position;
  readonly epoch: string;
  readonly seq: number;
}

/** Anything an `events()` iterator may yield. */
export type Message = Event | StreamChunk | MembersChanged | Resumed;

export interface JoinResult {
  readonly space: string;
  readonly members: string[];
  readonly memberCount: number;
  readonly epoch: string | null;
  readonly seq: number | null;
  /** Set when the join resumed from `since`. */
  readonly recovered: boolean | null;
}

export interface HistoryPage {
  readonly space: string;
  readonly epoch: string;
  readonly seq: number;
  /** Oldest first; stream frames as recorded. */
  readonly events: Array<Event | StreamChunk>;
  /** Pass as `beforeSeq` for the page before this one (null: nothing older). */
  readonly nextBeforeSeq: number | null;
}

export interface MembersPage {
  readonly space: string;
  readonly members: string[];
  readonly memberCount: number;
  /** null: this is the last page. */
  readonly nextCursor: string | null;
}

export interface AgentEntry {
  readonly id: string;
  readonly type: string | null;
  readonly capabilities: string[];
  readonly metadata: Data;
  readonly node: string;
  readonly connectedAt: number | null;
}

/** A page may hold fewer agents than asked for: only `nextCursor === null` ends it. */
export interface AgentPage {
  readonly agents: AgentEntry[];
  readonly nextCursor: string | null;
}

export interface SpaceInfo {
  readonly id: string;
  readonly type: string;
  readonly memberCount: number;
}

/** `agent.registered`: who the hub says this connection is (intervals in ms). */
export interface Registration {
  readonly agentId: string;
  readonly connectionId: string;
  readonly heartbeatInterval: number;
  readonly heartbeatTimeout: number;
}

// ── parsing ─────────────────────────────────────────────────────────────────

export type Frame = Record<string, unknown>;

export const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
export const int = (v: unknown): number | null => (Number.isInteger(v) ? (v as number) : null);
const rid = (v: unknown): RequestId | null =>
  typeof v === "string" || Number.isInteger(v) ? (v as RequestId) : null;
export const isObject = (v: unknown): v is Data =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const recipients = (v: unknown): string | string[] | null =>
  typeof v === "string"
    ? v
    : Array.isArray(v)
      ? v.filter((x): x is string => typeof x === "string")
      : null;
const strings = (v: unknown): string[] =>
  Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];

/** A plain (or a completed, assembled) event record. */
export function makeEvent(fields: {
  space: string;
  eventId: string;
  seq: number;
  from: string;
  timestamp: number | null;
  data: Data;
  to?: string | string[] | null;
  requestId?: RequestId | null;
  streamed?: boolean;
  status?: EventStatus;
  reason?: string | null;
  chunks?: number;
  duplicate?: boolean;
  verified?: boolean | null;
  signer?: string | null;
}): Event {
  const status = fields.status ?? "complete";
  const text = fields.data.text;
  const inReplyTo = fields.data.in_reply_to;
  return {
    kind: "event",
    space: fields.space,
    eventId: fields.eventId,
    seq: fields.seq,
    from: fields.from,
    timestamp: fields.timestamp,
    data: fields.data,
    text: typeof text === "string" ? text : null,
    inReplyTo: typeof inReplyTo === "string" ? inReplyTo : null,
    to: fields.to ?? null,
    requestId: fields.requestId ?? null,
    streamed: fields.streamed ?? false,
    status,
    complete: status === "complete",
    reason: fields.reason ?? null,
    chunks: fields.chunks ?? 0,
    duplicate: fields.duplicate ?? false,
    verified: fields.verified ?? null,
    signer: fields.signer ?? null,
  };
}

export function parseEvent(f: Frame): Event | null {
  const space = str(f.space);
  const eventId = str(f.event_id);
  const seq = int(f.seq);
  if (space === null || eventId === null || seq === null || !isObject(f.data)) return null;
  return makeEvent({
    space,
    eventId,
    seq,
    from: str(f.from) ?? "",
    timestamp: int(f.timestamp),
    data: f.data,
    to: recipients(f.to),
    requestId: rid(f.request_id),
    verified: typeof f.verified === "boolean" ? f.verified : null,
    signer: str(f.signer),
  });
}

const CHUNK_KINDS: Readonly<Record<string, ChunkKind>> = {
  "space.event.delta": "delta",
  "space.event.done": "done",
  "space.event.cancel": "cancel",
};

export function chunkKind(type: unknown): ChunkKind | null {
  return typeof type === "string" ? (CHUNK_KINDS[type] ?? null) : null;
}

export function parseChunk(f: Frame): StreamChunk | null {
  const kind = chunkKind(f.type);
  const space = str(f.space);
  const eventId = str(f.event_id);
  if (kind === null || space === null || eventId === null) return null;
  if (kind === "delta" && !isObject(f.data)) return null;
  const data = isObject(f.data) ? f.data : {};
  return {
    kind,
    space,
    eventId,
    seq: int(f.seq),
    from: str(f.from),
    timestamp: int(f.timestamp),
    data,
    text: typeof data.text === "string" ? data.text : "",
    to: recipients(f.to),
    reason: str(f.reason),
    requestId: rid(f.request_id),
  };
}

/** A cancel this client makes up for a stream cut off by a lost connection. */
export function lostChunk(space: string, eventId: string): StreamChunk {
  return {
    kind: "cancel",
    space,
    eventId,
    seq: null,
    from: null,
    timestamp: null,
    data: {},
    text: "",
    to: null,
    reason: "connection_lost",
    requestId: null,
  };
}

export function parseMembersChanged(f: Frame): MembersChanged | null {
  const space = str(f.space);
  const count = int(f.member_count);
  if (space === null || count === null) return null;
  if (f.members !== undefined && f.members !== null && !Array.isArray(f.members)) return null;
  return {
    kind: "members",
    space,
    members: Array.isArray(f.members) ? strings(f.members) : null,
    memberCount: count,
    joined: str(f.joined),
    left: str(f.left),
    joinedIds: ids(f.joined),
    leftIds: ids(f.left),
  };
}

/** `joined`/`left`: an id (one change, the seed's shape) or a list (coalesced changes). */
const ids = (v: unknown): string[] => (typeof v === "string" ? [v] : strings(v));

export function parseMembersPage(f: Frame): MembersPage | null {
  const space = str(f.space);
  const count = int(f.member_count);
  if (space === null || count === null || !Array.isArray(f.members)) return null;
  return { space, members: strings(f.members), memberCount: count, nextCursor: str(f.next_cursor) };
}

export function parseAgentPage(f: Frame): AgentPage | null {
  if (!Array.isArray(f.agents)) return null;
  const agents: AgentEntry[] = [];
  for (const a of f.agents) {
    if (!isObject(a) || typeof a.id !== "string") continue;
    agents.push({
      id: a.id,
      type: str(a.type),
      capabilities: strings(a.capabilities),
      metadata: isObject(a.metadata) ? a.metadata : {},
      node: str(a.node) ?? "",
      connectedAt: int(a.connected_at),
    });
  }
  return { agents, nextCursor: str(f.next_cursor) };
}

export function parseSpaces(f: Frame): SpaceInfo[] {
  const spaces = Array.isArray(f.spaces) ? f.spaces : [];
  return spaces
    .filter((s): s is Data => isObject(s) && typeof s.id === "string")
    .map((s) => ({ id: s.id as string, type: String(s.type ?? ""), memberCount: int(s.member_count) ?? 0 }));
}

export function parseRegistration(f: Frame): Registration | null {
  const agent = f.agent;
  if (!isObject(agent)) return null;
  const agentId = str(agent.id);
  const connectionId = str(agent.connection_id);
  const interval = f.heartbeat_interval;
  const timeout = f.heartbeat_timeout;
  if (agentId === null || connectionId === null) return null;
  if (typeof interval !== "number" || typeof timeout !== "number") return null;
  return { agentId, connectionId, heartbeatInterval: interval, heartbeatTimeout: timeout };
}

/** The published event, from the reply that acknowledges it without carrying it:
 * `space.published` (`echo: false`, or a repeated `idempotencyKey`: `duplicate`) or
 * `space.event.done` (a text big enough for the hub to stream it). */
export function acknowledged(space: string, sender: string, payload: Data, reply: Frame): Event {
  const streamed = reply.type === "space.event.done";
  const duplicate = reply.type === "space.published" && reply.duplicate === true;
  return makeEvent({
    space,
    eventId: String(reply.event_id),
    seq: Number.isInteger(reply.seq) ? (reply.seq as number) : 0,
    from: sender,
    timestamp: Number.isInteger(reply.timestamp) ? (reply.timestamp as number) : null,
    data: { from: sender, ...payload },
    requestId: rid(streamed ? reply.request_id : reply.id),
    streamed,
    duplicate,
  });
}

export function parseHistory(space: string, f: Frame): HistoryPage {
  const events: Array<Event | StreamChunk> = [];
  for (const e of Array.isArray(f.events) ? f.events : []) {
    if (!isObject(e)) continue;
    const item = e.type === "space.event" ? parseEvent(e) : parseChunk(e);
    if (item !== null) events.push(item);
  }
  return {
    space,
    epoch: str(f.epoch) ?? "",
    seq: int(f.seq) ?? 0,
    events,
    nextBeforeSeq: int(f.next_before_seq),
  };
}
