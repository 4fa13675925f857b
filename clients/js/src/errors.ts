/**
 * Errors of the client, and the hub's error and close codes.
 *
 * ```
 * HubClientError                root of everything the client throws; code, message, requestId
 * ├── HubConnectionError        the connection can't be used
 * │   ├── ConnectionFailed      could not open: refused, DNS, TLS, HTTP status (.status)
 * │   └── ConnectionClosed      closed after opening (.closeCode, .closeReason)
 * ├── RequestTimeout            no answer in time (the request may still have been carried out)
 * │   └── ReplyTimeout          request(): published, but nobody replied in time (.eventId)
 * ├── BufferFull                the outbound buffer stayed full: nothing was sent
 * ├── SubscriptionEnded         take() on a subscription that was closed
 * ├── StreamCancelled           a stream this client publishes ended early (.reason)
 * └── HubRejected               the hub answered `error` (a request, or the connection)
 *     ├── InvalidRequest        INVALID_REQUEST
 *     ├── Unauthorized          UNAUTHORIZED
 *     ├── AgentExists           AGENT_EXISTS
 *     ├── SpaceNotFound         SPACE_NOT_FOUND
 *     ├── SpaceFull             SPACE_FULL
 *     ├── RateLimited           RATE_LIMITED
 *     ├── Unavailable           UNAVAILABLE
 *     └── InternalError         INTERNAL_ERROR
 * ```
 *
 * `rejected()` maps an `error` frame to its class (a code this client does not
 * know becomes a plain `HubRejected`); `closedError()` makes the
 * `ConnectionClosed` of a lost connection.
 */

/** The `code` of an `error` frame (protocol/errors.py's ErrorCode). */
export const ErrorCode = {
  INVALID_REQUEST: "INVALID_REQUEST",
  UNAUTHORIZED: "UNAUTHORIZED",
  AGENT_EXISTS: "AGENT_EXISTS",
  SPACE_NOT_FOUND: "SPACE_NOT_FOUND",
  SPACE_FULL: "SPACE_FULL",
  RATE_LIMITED: "RATE_LIMITED",
  INTERNAL_ERROR: "INTERNAL_ERROR",
  UNAVAILABLE: "UNAVAILABLE",
  HEARTBEAT_TIMEOUT: "HEARTBEAT_TIMEOUT",
  SLOW_CONSUMER: "SLOW_CONSUMER",
  DISCONNECTED: "DISCONNECTED",
} as const;

/** WebSocket close codes the hub uses (protocol/errors.py's CloseCode). */
export const CloseCode = {
  NORMAL: 1000,
  GOING_AWAY: 1001,
  PROTOCOL_ERROR: 1002,
  INVALID_DATA: 1007,
  MESSAGE_TOO_BIG: 1009,
  TRY_AGAIN_LATER: 1013,
  SLOW_CONSUMER: 4008,
  UNAUTHORIZED: 4401,
  DISCONNECTED: 4403,
  HEARTBEAT_TIMEOUT: 4408,
  AGENT_EXISTS: 4409,
  RATE_LIMIT_ABUSE: 4429,
} as const;

/**
 * Close codes after which reconnecting cannot help: they need a change on the
 * client's side (4401 credentials, 4409 another connection holds the id, 4429
 * slow down), or an operator disconnected the agent (4403).
 */
export const TERMINAL_CLOSE_CODES: ReadonlySet<number> = new Set([
  CloseCode.UNAUTHORIZED,
  CloseCode.AGENT_EXISTS,
  CloseCode.RATE_LIMIT_ABUSE,
  CloseCode.DISCONNECTED,
]);

export type RequestId = string | number;

/** Root of the client's errors. `code` is the hub's error code when it sent one. */
export class HubClientError extends Error {
  static readonly defaultCode: string = "CLIENT_ERROR";
  readonly code: string;
  readonly requestId: RequestId | null;

  constructor(message: string, options: { code?: string; requestId?: RequestId | null } = {}) {
    super(message);
    this.name = new.target.name;
    this.code = options.code ?? (new.target as typeof HubClientError).defaultCode;
    this.requestId = options.requestId ?? null;
  }

  override toString(): string {
    const rid = this.requestId !== null ? ` (request ${this.requestId})` : "";
    return `${this.name} ${this.code}: ${this.message}${rid}`;
  }
}

/** The connection to the hub could not be opened or was lost. */
export class HubConnectionError extends HubClientError {
  static override readonly defaultCode: string = "CONNECTION_ERROR";
}

/** Opening the connection failed before the hub accepted it; `status` is the
 * HTTP status when the hub (or a proxy) answered the upgrade with one (Node only:
 * browsers do not tell). */
export class ConnectionFailed extends HubConnectionError {
  static override readonly defaultCode: string = "CONNECTION_FAILED";
  readonly status: number | null;

  constructor(message: string, options: { status?: number | null } = {}) {
    super(message);
    this.status = options.status ?? null;
  }
}

/** The connection closed while it was needed. `closeCode`/`closeReason` come from
 * the close frame (null when the TCP connection just dropped); when the hub sent an
 * `error` right before closing, `code` and `message` are that error's. */
export class ConnectionClosed extends HubConnectionError {
  static override readonly defaultCode: string = "CONNECTION_CLOSED";
  readonly closeCode: number | null;
  readonly closeReason: string;

  constructor(
    message: string,
    options: { code?: string; closeCode?: number | null; closeReason?: string } = {},
  ) {
    super(message, options.code !== undefined ? { code: options.code } : {});
    this.closeCode = options.closeCode ?? null;
    this.closeReason = options.closeReason ?? "";
  }
}

/** The hub did not answer in time. The request may still have been carried out. */
export class RequestTimeout extends HubClientError {
  static override readonly defaultCode: string = "TIMEOUT";
}

/** `request()` published its event (`eventId`) but no reply came in time; a late
 * answer can still be matched by hand (its `data.in_reply_to`). */
export class ReplyTimeout extends RequestTimeout {
  readonly eventId: string;

  constructor(message: string, eventId: string) {
    super(message);
    this.eventId = eventId;
  }
}

/** The outbound buffer stayed over its bound for a whole request timeout, or too
 * many requests waited for a connection: the message was not sent. */
export class BufferFull extends HubClientError {
  static override readonly defaultCode: string = "BUFFER_FULL";
}

/** `take()` on a subscription that was closed (or whose client was). */
export class SubscriptionEnded extends HubClientError {
  static override readonly defaultCode: string = "ENDED";
}

/** A stream this client publishes ended early: `reason` is the hub's
 * (`idle_timeout`, `publisher_left_space` …), `connection_lost`, or the one given
 * to `cancel()`. */
export class StreamCancelled extends HubClientError {
  static override readonly defaultCode: string = "STREAM_CANCELLED";
  readonly reason: string;

  constructor(message: string, reason: string) {
    super(message);
    this.reason = reason;
  }
}

/** The hub refused a request (or the connection) with an `error` frame. */
export class HubRejected extends HubClientError {
  static override readonly defaultCode: string = "REJECTED";
}

export class InvalidRequest extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.INVALID_REQUEST;
}
export class Unauthorized extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.UNAUTHORIZED;
}
export class AgentExists extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.AGENT_EXISTS;
}
export class SpaceNotFound extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.SPACE_NOT_FOUND;
}
export class SpaceFull extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.SPACE_FULL;
}
export class RateLimited extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.RATE_LIMITED;
}
export class Unavailable extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.UNAVAILABLE;
}
export class InternalError extends HubRejected {
  static override readonly defaultCode: string = ErrorCode.INTERNAL_ERROR;
}

const BY_CODE: ReadonlyMap<string, typeof HubRejected> = new Map(
  [
    InvalidRequest,
    Unauthorized,
    AgentExists,
    SpaceNotFound,
    SpaceFull,
    RateLimited,
    Unavailable,
    InternalError,
  ].map((cls) => [cls.defaultCode, cls]),
);

type Frame = Record<string, unknown>;

/** The error for an `error` frame from the hub. */
export function rejected(frame: Frame): HubRejected {
  const code = typeof frame.code === "string" && frame.code ? frame.code : "UNKNOWN";
  const message = typeof frame.message === "string" ? frame.message : "(no message)";
  const rid = frame.request_id;
  const Cls = BY_CODE.get(code) ?? HubRejected;
  return new Cls(message, {
    code,
    requestId: typeof rid === "string" || typeof rid === "number" ? rid : null,
  });
}

/** The error for a lost connection: the close frame's code and reason (null and
 * "" when there was none), and the `error` the hub sent just before closing, which
 * explains it better, if any. */
export function closedError(
  closeCode: number | null,
  closeReason: string,
  lastError: Frame | null,
): ConnectionClosed {
  if (lastError !== null) {
    return new ConnectionClosed(String(lastError.message || "connection closed by the hub"), {
      code: String(lastError.code || "CONNECTION_CLOSED"),
      closeCode,
      closeReason,
    });
  }
  const what = closeReason ? `connection closed by the hub: ${closeReason}` : "connection lost";
  return new ConnectionClosed(closeCode !== null ? `${what} (close code ${closeCode})` : what, {
    closeCode,
    closeReason,
  });
}

/** The hub's notice that this connection's token expired (`agent.refresh` is due). */
export function isTokenExpiredNotice(frame: Frame): boolean {
  return (
    frame.code === ErrorCode.UNAUTHORIZED &&
    typeof frame.message === "string" &&
    frame.message.startsWith("token expired:")
  );
}
