/**
 * One WebSocket connection to the hub, from the upgrade to its loss: a `Link`.
 *
 * `Link.open()` opens a socket and waits for the hub's first frame: `agent.registered`
 * (the link is usable), or an `error` (the hub refused the agent: `Unauthorized`,
 * `AgentExists` … thrown as that class). Every other way it can fail is a
 * `ConnectionFailed`. Once open, the link hands every frame to its owner in arrival
 * order and keeps itself alive: it sends `agent.heartbeat` when nothing else was
 * sent for the hub's `heartbeat_interval`, and drops itself when nothing at all
 * came from the hub for its `heartbeat_timeout` (the hub answers every heartbeat,
 * so such a connection is dead even if TCP has not noticed). WebSocket pings from
 * the hub (its liveness probe) are answered by the WebSocket itself, in Node and in
 * browsers alike.
 *
 * A reconnect never reuses a link: the connection opens a new one.
 */

import { AgentExists, ConnectionFailed, HubClientError, HubRejected, rejected } from "./errors.js";
import { describe, type Logger } from "./logging.js";
import { isObject, parseRegistration, type Frame, type Registration } from "./models.js";
import type { HubSocket, SocketClosed, SocketFactory, SocketHandlers, SocketRequest } from "./socket.js";

const HEARTBEAT = JSON.stringify({ type: "agent.heartbeat" });
/** Agent details ride in the handshake query while it stays this short. */
const MAX_DETAILS_QUERY = 4096;

export interface LinkOwner {
  /** A frame of an open link, in arrival order. */
  onFrame(link: Link, frame: Frame): void;
  /** An open link was lost (reported once; not for a link that never opened). */
  onLost(link: Link, info: SocketClosed): void;
}

const now = (): number => performance.now();

export class Link implements SocketHandlers {
  socket!: HubSocket;
  registration: Registration | null = null;
  /** When the hub was last heard from / last sent a frame (clock ms). */
  lastRx = now();
  lastTx = now();
  private owner: LinkOwner | null = null;
  private early: Frame[] = [];
  private lost = false;
  private keepalive: ReturnType<typeof setInterval> | null = null;
  private opening: { resolve(): void; reject(error: Error): void } | null = null;
  /** Set while `closeGracefully()` waits for the hub's close. */
  private afterClose: (() => void) | null = null;

  private constructor(
    readonly url: string,
    private readonly log: Logger,
  ) {}

  /** Open a link and wait for `agent.registered`. */
  static open(factory: SocketFactory, request: SocketRequest, log: Logger): Promise<Link> {
    const link = new Link(request.url, log);
    return new Promise<Link>((resolve, reject) => {
      const timer = setTimeout(() => {
        link.fail(new ConnectionFailed(`cannot connect to ${hostOf(request.url)}: timed out`));
      }, request.openTimeout);
      link.opening = {
        resolve: () => {
          clearTimeout(timer);
          resolve(link);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      try {
        link.socket = factory(request, link);
      } catch (error) {
        link.opening = null;
        clearTimeout(timer);
        reject(error instanceof HubClientError ? error : new ConnectionFailed(describe(error)));
      }
    });
  }

  /** Start handing frames to `owner` (those that came early first) and keeping
   * the link alive. */
  activate(owner: LinkOwner): void {
    this.owner = owner;
    const early = this.early;
    this.early = [];
    for (const frame of early) if (!this.lost) owner.onFrame(this, frame);
    const reg = this.registration!;
    const interval = Math.max(10, reg.heartbeatInterval);
    const tick = interval / 2;
    this.keepalive = setInterval(() => this.beat(interval, tick, reg.heartbeatTimeout), tick);
  }

  send(text: string): void {
    this.socket.send(text);
    this.lastTx = now();
  }

  get bufferedAmount(): number {
    return this.socket.bufferedAmount;
  }

  /** Close with 1000 and wait (at most `timeout` ms) for the hub to close too. */
  async closeGracefully(timeout: number): Promise<void> {
    this.stopKeepalive();
    if (this.lost) return;
    const closed = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeout);
      this.afterClose = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.socket.close(1000, "client closed");
    await closed;
    if (!this.lost) this.socket.abort();
  }

  /** Drop the link now; its loss is reported with `info`. */
  drop(info: SocketClosed): void {
    this.close(info);
    this.socket.abort();
  }

  stopKeepalive(): void {
    if (this.keepalive !== null) clearInterval(this.keepalive);
    this.keepalive = null;
  }

  private beat(interval: number, tick: number, timeout: number): void {
    const t = now();
    if (t - this.lastRx > timeout) {
      const silent = ((t - this.lastRx) / 1000).toFixed(1);
      this.log.warn(`no frame from the hub for ${silent} s: dropping the connection`);
      this.drop({ code: null, reason: `no frame from the hub for ${silent} s` });
      return;
    }
    if (t - this.lastTx >= interval - tick / 2) this.send(HEARTBEAT);
  }

  // ── SocketHandlers ──────────────────────────────────────────────────────

  message(text: string): void {
    if (this.lost) return;
    this.lastRx = now();
    let frame: unknown;
    try {
      frame = JSON.parse(text);
    } catch {
      this.log.warn("ignoring a frame that is not JSON");
      return;
    }
    if (!isObject(frame)) return;
    if (this.opening !== null) this.first(frame);
    else if (this.owner !== null) this.owner.onFrame(this, frame);
    else this.early.push(frame);
  }

  close(info: SocketClosed): void {
    if (this.lost) return;
    this.lost = true;
    this.stopKeepalive();
    this.afterClose?.();
    if (this.opening !== null) {
      this.fail(new ConnectionFailed(openFailure(this.url, info), { status: info.status ?? null }));
    } else if (this.owner !== null) {
      this.owner.onLost(this, info);
    }
  }

  // ── opening ──────────────────────────────────────────────────────────────

  private first(frame: Frame): void {
    if (frame.type === "error") {
      // The hub refused the agent; it closes the connection itself.
      this.fail(refusal(frame, new URL(this.url).searchParams.get("agent_id")));
      return;
    }
    const registration = frame.type === "agent.registered" ? parseRegistration(frame) : null;
    if (registration === null) {
      this.fail(
        new ConnectionFailed(
          `hub at ${hostOf(this.url)} sent ${String(frame.type)} instead of agent.registered`,
        ),
      );
      return;
    }
    this.registration = registration;
    const opening = this.opening!;
    this.opening = null;
    opening.resolve();
  }

  private fail(error: ConnectionFailed | HubRejected): void {
    const opening = this.opening;
    if (opening === null) return;
    this.opening = null;
    this.lost = true;
    this.stopKeepalive();
    this.socket?.abort();
    opening.reject(error);
  }
}

/** The hub's refusal of the agent, saying what to change when the id is taken. */
function refusal(frame: Frame, agentId: string | null): HubRejected {
  const error = rejected(frame);
  if (!(error instanceof AgentExists)) return error;
  return new AgentExists(
    `${error.message}: the agent id ${JSON.stringify(agentId)} is taken on this hub; ` +
      "connect with another agentId, or stop the client that holds it",
    { code: error.code },
  );
}

function hostOf(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
}

function openFailure(url: string, info: SocketClosed): string {
  const where = hostOf(url);
  if (info.status !== undefined) {
    const body = info.detail ? `: ${info.detail}` : "";
    return `hub at ${where} refused the connection: HTTP ${info.status}${body}`;
  }
  if (info.code !== null) {
    return `hub at ${where} closed the connection (${info.code}${info.reason ? ` ${info.reason}` : ""})`;
  }
  return `cannot connect to ${where}${info.detail ? `: ${info.detail}` : ""}`;
}

/** `type`, `capability` (one each) and `metadata` (JSON) for the handshake query;
 * null when there are none or they would make it longer than 4 KiB. */
export function detailsQuery(details: Frame | null): Array<[string, string]> | null {
  if (details === null) return null;
  const query: Array<[string, string]> = [];
  if (typeof details.type === "string") query.push(["type", details.type]);
  for (const capability of Array.isArray(details.capabilities) ? details.capabilities : []) {
    query.push(["capability", String(capability)]);
  }
  const metadata = details.metadata;
  if (metadata !== null && typeof metadata === "object" && Object.keys(metadata).length > 0) {
    query.push(["metadata", JSON.stringify(metadata)]);
  }
  return new URLSearchParams(query).toString().length > MAX_DETAILS_QUERY ? null : query;
}
