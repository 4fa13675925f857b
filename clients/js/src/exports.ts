/**
 * What both entry points (node.ts, browser.ts) export besides their `Client`.
 */

export { HubClient } from "./client.js";
export type { ClientOptions, EventsOptions, PublishOptions, ReplyOptions, RequestOptions } from "./options.js";
export type { ConnectionState } from "./connection.js";
export { Backoff, type BackoffOptions } from "./reconnect.js";
export {
  AgentExists,
  BufferFull,
  CloseCode,
  ConnectionClosed,
  ConnectionFailed,
  ErrorCode,
  HubClientError,
  HubConnectionError,
  HubRejected,
  InternalError,
  InvalidRequest,
  RateLimited,
  ReplyTimeout,
  RequestTimeout,
  SpaceFull,
  SpaceNotFound,
  StreamCancelled,
  SubscriptionEnded,
  TERMINAL_CLOSE_CODES,
  Unauthorized,
  Unavailable,
  type RequestId,
} from "./errors.js";
export { StreamAssembler, type AssemblerOptions } from "./assembly.js";
export type { Logger } from "./logging.js";
export type {
  AgentEntry,
  AgentPage,
  ChunkKind,
  Data,
  Event,
  EventStatus,
  HistoryPage,
  JoinResult,
  MembersChanged,
  MembersPage,
  Message,
  Position,
  Registration,
  Resumed,
  SpaceInfo,
  StreamChunk,
} from "./models.js";
export type {
  HubSocket,
  SocketClosed,
  SocketFactory,
  SocketHandlers,
  SocketRequest,
  TokenPlacement,
} from "./socket.js";
export { COALESCE_MS, MAX_DELTA_CHARS, OutgoingStream, type StreamOptions, type StreamState } from "./streams.js";
export { Subscription } from "./subscriptions.js";
export type { RequestHandler, ServeOptions } from "./serving.js";
