/**
 * The reconnect policy: how long to wait before each attempt (`Backoff`), and which
 * losses and failed attempts are worth another try. A close that needs a change on
 * this side (4401, 4409, 4429; 4403: an operator's disconnect) and a refusal of the
 * agent (`Unauthorized`, `AgentExists` …) are not: they stop the client.
 */

import {
  ConnectionClosed,
  ConnectionFailed,
  HubRejected,
  RateLimited,
  RequestTimeout,
  TERMINAL_CLOSE_CODES,
  Unavailable,
  type HubClientError,
} from "./errors.js";

/** Reconnect delays (ms): `initialDelay * factor ** attempt` capped at `maxDelay`,
 * each times a random factor in [0.5, 1] so that many clients dropped at once do
 * not come back at once. */
export interface BackoffOptions {
  initialDelay?: number;
  maxDelay?: number;
  factor?: number;
  /** Give up after this many failed attempts (default: never). */
  maxAttempts?: number;
}

export class Backoff {
  readonly initialDelay: number;
  readonly maxDelay: number;
  readonly factor: number;
  readonly maxAttempts: number;

  constructor(options: BackoffOptions = {}) {
    this.initialDelay = options.initialDelay ?? 500;
    this.maxDelay = options.maxDelay ?? 30_000;
    this.factor = options.factor ?? 2;
    this.maxAttempts = options.maxAttempts ?? Infinity;
  }

  delay(attempt: number): number {
    const base = Math.min(this.maxDelay, this.initialDelay * this.factor ** Math.min(attempt, 64));
    return base * (0.5 + Math.random() / 2);
  }
}

/** A loss no reconnect can help. */
export function isTerminal(error: HubClientError): boolean {
  return error instanceof ConnectionClosed && error.closeCode !== null && TERMINAL_CLOSE_CODES.has(error.closeCode);
}

/** A failed reconnect attempt worth another try. */
export function isRetryable(error: HubClientError): boolean {
  if (error instanceof ConnectionClosed) return !isTerminal(error);
  if (error instanceof HubRejected) return error instanceof Unavailable || error instanceof RateLimited;
  return error instanceof ConnectionFailed || error instanceof RequestTimeout;
}
