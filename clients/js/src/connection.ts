/**
 * The connection under a `Client`: opened, used, reopened.
 *
 * `connect()` opens a `Link` (one WebSocket, registered by the hub) and tells it
 * what the client had set up (`Session.restore`: the agent's details, the spaces
 * joined). Frames go to `Session.dispatch` in arrival order. `close()` is
 * idempotent.
 *
 * With `reconnect` on, a lost link — anything but a close that needs a change on
 * this side (4401, 4409, 4429, 4403) — is reopened after jittered exponential
 * delays, cycling through the hub URLs given. A refusal while reconnecting
 * (`Unauthorized`, `AgentExists`, another terminal close) stops the client with
 * that error: never a silent retry loop. Requests made meanwhile wait for the
 * connection up to their timeout; requests in flight when it dropped fail with
 * `ConnectionClosed` (they may or may not have been carried out).
 *
 * The outbound buffer is bounded twice: at most `maxQueued` requests wait for a
 * connection, and a send waits while the socket holds more than
 * `maxBufferedBytes` not yet written — both fail with `BufferFull` rather than let
 * memory grow.
 */

import {
  BufferFull,
  ConnectionClosed,
  ConnectionFailed,
  HubClientError,
  RequestTimeout,
  closedError,
} from "./errors.js";
import { detailsQuery, Link, type LinkOwner } from "./link.js";
import { describe, type Logger } from "./logging.js";
import type { Frame, Registration } from "./models.js";
import { OutboundBuffer } from "./outbound.js";
import { PendingRequests } from "./requests.js";
import { Backoff, isRetryable, isTerminal } from "./reconnect.js";
import { checkToken, hubUrl, withQuery, type SocketClosed, type SocketFactory, type TokenPlacement } from "./socket.js";

export type ConnectionState = "idle" | "connecting" | "open" | "reconnecting" | "closed";

/** What the connection needs from the client above it. */
export interface Session {
  /** Tell a new link, before it is used, what the client had set up. */
  restore(link: Link, detailsSent: boolean): Promise<void>;
  /** One frame from the hub, in arrival order. */
  dispatch(frame: Frame): void;
  /** The link was lost (it may be reopened): end what lived on it. */
  connectionLost(error: ConnectionClosed): void;
  /** The client stopped for good; `error` is null after `close()`. */
  stopped(error: HubClientError | null): void;
  stateChanged(state: ConnectionState, error: HubClientError | null): void;
}

export interface ConnectionSettings {
  urls: string[];
  agentId: string;
  token: string | null;
  tokenProvider: (() => string | Promise<string>) | null;
  tokenIn: TokenPlacement;
  backoff: Backoff | null;
  requestTimeout: number;
  openTimeout: number;
  closeTimeout: number;
  maxSize: number;
  maxBufferedBytes: number;
  maxQueued: number;
  socketFactory: SocketFactory;
  log: Logger;
}

const now = (): number => performance.now();

export class Connection implements LinkOwner {
  state: ConnectionState = "idle";
  registration: Registration | null = null;
  /** Successful reconnects so far. */
  reconnects = 0;
  /** Why the client stopped, when it stopped for a reason of its own. */
  closedError: HubClientError | null = null;
  /** The agent's details (`agent.register`'s `agent`), declared on every link. */
  details: Frame | null = null;
  token: string | null;
  readonly requests = new PendingRequests();
  readonly urls: string[];
  private link: Link | null = null;
  private generationCounter = 0;
  private urlIndex = 0;
  private opening: Promise<void> | null = null;
  private restoring = false;
  private closing = false;
  private queued = 0;
  private lastError: Frame | null = null;
  /** Callers of `waitConnected()`; woken with the error when opening failed. */
  private waiters = new Set<(failure?: HubClientError) => void>();
  private wakeReconnect: (() => void) | null = null;
  private readonly outbound: OutboundBuffer;

  constructor(
    private readonly settings: ConnectionSettings,
    private readonly session: Session,
  ) {
    if (settings.urls.length === 0) throw new TypeError("at least one hub URL is needed");
    this.urls = settings.urls.map(hubUrl);
    this.outbound = new OutboundBuffer(settings.maxBufferedBytes);
    this.token = settings.token;
  }

  get connected(): boolean {
    return this.state === "open";
  }

  /** Bytes handed to the socket and not yet written to the network. */
  get bufferedAmount(): number {
    return this.link?.bufferedAmount ?? 0;
  }

  /** Increases with every new link: what belongs to an old one is stale. */
  get generation(): number {
    return this.generationCounter;
  }

  get log(): Logger {
    return this.settings.log;
  }

  // ── lifecycle ──────────────────────────────────────────────────────────

  async connect(): Promise<void> {
    if (this.state === "closed" || this.closing) throw this.stoppedError();
    if (this.state === "open") return;
    if (this.state === "reconnecting") return this.waitConnected();
    if (this.opening === null) {
      this.setState("connecting");
      this.opening = this.openLink().then(
        () => {
          this.opening = null;
          this.opened();
        },
        (error: unknown) => {
          this.opening = null;
          if (!this.closing) {
            const failure = asClientError(error);
            this.setState("idle", failure);
            for (const wake of [...this.waiters]) wake(failure);
          }
          throw error;
        },
      );
    }
    return this.opening;
  }

  /** Close the connection (1000) and end every subscription. Idempotent. */
  async close(): Promise<void> {
    if (this.state === "closed" || this.closing) return;
    this.closing = true;
    this.wakeReconnect?.();
    const link = this.link;
    this.link = null;
    if (link !== null) await link.closeGracefully(this.settings.closeTimeout);
    this.finish(null);
  }

  /** Wait until the connection is (again) open. */
  waitConnected(timeout?: number): Promise<void> {
    if (this.state === "open") return Promise.resolve();
    if (this.state === "closed" || this.closing) return Promise.reject(this.stoppedError());
    return new Promise<void>((resolve, reject) => {
      const timer =
        timeout === undefined
          ? null
          : setTimeout(() => {
              this.waiters.delete(wake);
              reject(new RequestTimeout(`no connection to the hub within ${timeout} ms`));
            }, timeout);
      const wake = (failure?: HubClientError): void => {
        if (timer !== null) clearTimeout(timer);
        this.waiters.delete(wake);
        if (this.state === "open") resolve();
        else reject(failure ?? this.stoppedError());
      };
      this.waiters.add(wake);
    });
  }

  // ── sending ────────────────────────────────────────────────────────────

  /**
   * Send `msg` with a fresh `id` and resolve with the frame that answers it.
   * `link`: on that link only (a new link being restored); `onId` learns the id
   * before the message goes out.
   */
  async request(
    msg: Frame,
    options: { link?: Link; timeout?: number; onId?: (rid: string) => void } = {},
  ): Promise<Frame> {
    const timeout = options.timeout ?? this.settings.requestTimeout;
    const deadline = now() + timeout;
    const [rid, answer] = this.requests.open();
    msg.id = rid;
    options.onId?.(rid);
    let timer: ReturnType<typeof setTimeout> | null = null;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const what = this.connected ? "answer to" : "connection for";
        reject(new RequestTimeout(`no ${what} ${String(msg.type)} within ${timeout} ms`, { requestId: rid }));
      }, timeout);
    });
    try {
      const sent = (async () => {
        const link = options.link ?? (await this.ready(deadline));
        await this.transmit(link, msg, deadline);
        return answer;
      })();
      return await Promise.race([sent, expired]);
    } finally {
      if (timer !== null) clearTimeout(timer);
      this.requests.forget(rid);
    }
  }

  /** Send `msg` on the current link (`generation`: that link's, or fail). */
  async send(msg: Frame, generation?: number): Promise<void> {
    const deadline = now() + this.settings.requestTimeout;
    const link = await this.ready(deadline);
    if (generation !== undefined && generation !== this.generationCounter) {
      throw new ConnectionClosed("the connection this belonged to was lost");
    }
    await this.transmit(link, msg, deadline);
  }

  /** A heartbeat round trip: the hub answers frames in order, so every error for
   * what was sent before has arrived once this resolves. */
  async barrier(): Promise<Frame> {
    return this.request({ type: "agent.heartbeat" });
  }

  /** The `error` the hub sent without a request id: the reason of the close that
   * usually follows. */
  noteError(frame: Frame | null): void {
    this.lastError = frame;
  }

  get noted(): Frame | null {
    return this.lastError;
  }

  private async ready(deadline: number): Promise<Link> {
    if (this.state === "open" && this.link !== null) return this.link;
    if (this.state === "closed" || this.closing) throw this.stoppedError();
    if (this.state === "idle") throw new ConnectionClosed("not connected: call connect() first");
    if (this.queued >= this.settings.maxQueued) {
      throw new BufferFull(`${this.queued} requests already wait for the connection`);
    }
    this.queued += 1;
    try {
      await this.waitConnected(Math.max(0, deadline - now()));
    } finally {
      this.queued -= 1;
    }
    return this.link!;
  }

  private transmit(link: Link, msg: Frame, deadline: number): Promise<void> {
    return this.outbound.send(link, JSON.stringify(msg), String(msg.type), deadline, () => this.link);
  }

  // ── opening ────────────────────────────────────────────────────────────

  /** One attempt: a registered link, told what the client had set up. */
  private async openLink(): Promise<void> {
    const settings = this.settings;
    if (settings.tokenProvider !== null) {
      try {
        this.token = checkToken(await settings.tokenProvider());
      } catch (error) {
        throw new ConnectionFailed(`token provider failed: ${describe(error)}`);
      }
    }
    const details = detailsQuery(this.details);
    const url = withQuery(this.urls[this.urlIndex]!, [["agent_id", settings.agentId], ...(details ?? [])]);
    const link = await Link.open(
      settings.socketFactory,
      {
        url,
        token: this.token,
        tokenIn: settings.tokenIn,
        maxSize: settings.maxSize,
        openTimeout: settings.openTimeout,
      },
      settings.log,
    );
    if (this.closing) {
      link.drop({ code: null, reason: "client closed" });
      throw new ConnectionClosed("client closed");
    }
    this.generationCounter += 1;
    this.link = link;
    this.lastError = null;
    this.registration = link.registration;
    link.activate(this);
    this.restoring = true;
    try {
      await this.session.restore(link, details !== null);
    } catch (error) {
      if (this.link === link) this.link = null;
      link.drop({ code: null, reason: "restore failed" });
      throw error;
    } finally {
      this.restoring = false;
    }
    if (this.link !== link) throw this.lostError();
  }

  private opened(): void {
    this.setState("open");
    for (const wake of [...this.waiters]) wake();
  }

  // ── LinkOwner ─────────────────────────────────────────────────────────

  onFrame(link: Link, frame: Frame): void {
    if (link !== this.link) return;
    try {
      this.session.dispatch(frame);
    } catch (error) {
      this.log.warn(`failed to handle ${String(frame.type)}: ${describe(error)}`);
    }
  }

  onLost(link: Link, info: SocketClosed): void {
    if (link !== this.link) return;
    this.link = null;
    const error = closedError(info.code, info.reason, this.lastError);
    this.requests.failAll(error);
    this.session.connectionLost(error);
    if (this.closing || this.restoring) return; // close() or the opener takes it from here
    if (this.settings.backoff !== null && !isTerminal(error)) {
      // The hub's own advice ("hub shutting down; reconnect") is what happens next.
      this.log.warn(`${error.message.replace(/; reconnect$/, "")}; reconnecting`);
      this.setState("reconnecting", error);
      void this.reconnect(this.settings.backoff, error);
      return;
    }
    this.log.info(error.message);
    this.finish(error);
  }

  private async reconnect(backoff: Backoff, cause: HubClientError): Promise<void> {
    let attempt = 0;
    let last = cause;
    while (!this.closing) {
      if (attempt >= backoff.maxAttempts) {
        this.log.warn(`giving up reconnecting after ${attempt} attempt(s)`);
        this.finish(last);
        return;
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, backoff.delay(attempt));
        this.wakeReconnect = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeReconnect = null;
      if (this.closing) return;
      attempt += 1;
      this.urlIndex = (this.urlIndex + 1) % this.urls.length;
      try {
        await this.openLink();
      } catch (error) {
        const err = asClientError(error);
        if (this.closing) return;
        if (isRetryable(err)) {
          last = err;
          this.log.info(`reconnect attempt ${attempt} failed: ${err.message}`);
          continue;
        }
        this.log.warn(`reconnect refused: ${err.message}`);
        this.finish(err);
        return;
      }
      this.reconnects += 1;
      this.log.warn(`reconnected to ${this.urls[this.urlIndex]} (attempt ${attempt})`);
      this.opened();
      return;
    }
  }

  /** The connection is gone for good (`error` null: closed by the application). */
  private finish(error: HubClientError | null): void {
    if (this.state === "closed") return;
    this.closing = true;
    this.closedError = error;
    const link = this.link;
    this.link = null;
    link?.drop({ code: null, reason: "stopped" });
    this.requests.failAll(error ?? new ConnectionClosed("client closed"));
    this.setState("closed", error);
    this.session.stopped(error);
    for (const wake of [...this.waiters]) wake();
  }

  private setState(state: ConnectionState, error: HubClientError | null = null): void {
    if (this.state === state) return;
    this.state = state;
    this.session.stateChanged(state, error);
  }

  private stoppedError(): HubClientError {
    return this.closedError ?? new ConnectionClosed("client is closed");
  }

  private lostError(): ConnectionClosed {
    return new ConnectionClosed("connection lost");
  }
}

function asClientError(error: unknown): HubClientError {
  return error instanceof HubClientError ? error : new ConnectionFailed(describe(error));
}
