/**
 * Streams this client publishes: `OutgoingStream`, and the table of open ones.
 *
 * `const s = client.stream(space)`, then `await s.write("tok")` … `await s.end()`
 * sends `space.event.delta` frames under an `event_id` of the client's choosing and
 * `space.event.done`; `await s.cancel(reason)` sends `space.event.cancel` instead.
 * `await s.pipe(tokens)` does all of it for an (async) iterable, cancelling when
 * the iterable throws.
 *
 * **Coalescing.** A model emits 150–300 tokens a second; a frame per token would
 * spend the connection's rate limit (every delta is a message: 100/s by default)
 * and the receivers' CPU on framing. So text written within `coalesce` ms (20) of
 * the first unsent text goes out as one delta — in order, at most 64 Ki
 * characters, flushed at once by `end()`, `cancel()`, `flush()` and a write with
 * fields of its own. A stream then costs at most about 50 deltas a second whatever
 * the token rate, for 20 ms of added latency. The first delta is never held: it
 * opens the stream and waits for the hub's verdict.
 *
 * Each stream's frames carry request ids of its own (`s3.0`, `s3.1` …), so that the
 * hub's refusal of any of them — which may come after later deltas were sent, since
 * only the first waits — finds its stream (`OutgoingStreams`). Writes are sent in
 * call order, one after the other.
 */

import { HubClientError, HubRejected, StreamCancelled } from "./errors.js";
import type { Data, Frame } from "./models.js";

/** Text written within this many ms of the first unsent text is one delta. */
export const COALESCE_MS = 20;
/** Most characters one coalesced delta carries (far below the hub's 1 MiB frame limit). */
export const MAX_DELTA_CHARS = 64 * 1024;

/** What an outgoing stream needs of its client. */
export interface StreamOwner {
  readonly agentId: string;
  readonly generation: number;
  openStream(stream: OutgoingStream): void;
  closeStream(stream: OutgoingStream): void;
  send(msg: Frame, generation: number): Promise<void>;
  request(msg: Frame): Promise<Frame>;
  barrier(): Promise<Frame>;
}

export type StreamState = "new" | "open" | "done" | "cancelled" | "failed";

export interface StreamOptions {
  /** `[A-Za-z0-9._:-]{1,128}`, unique among this agent's streams; random by default.
   * Receivers see `"<agentId>/<eventId>"`. */
  eventId?: string;
  /** Extra `data` fields sent with the first delta (`in_reply_to` …). */
  data?: Data;
  /** Send the deltas back to this client too (default true). */
  echo?: boolean;
  /** Address the stream (an agent id or a list, members of the space): sent with
   * the first delta, and the hub routes every frame of the stream to them (and your
   * echo) only — live, in `history()` and on resume — as it routes `publish()`. */
  to?: string | string[] | null;
  /** Milliseconds within which written text is sent as one delta (default 20; 0:
   * one delta per write). */
  coalesce?: number;
}

export class OutgoingStream {
  readonly hubEventId: string;
  /** Aborted when the stream is cancelled — by `cancel()`, by its receivers (all of
   * them cancelled it or left: `receiver_cancelled`, `receivers_left`), by the hub
   * (`idle_timeout` …) or by a lost connection — with a `StreamCancelled` as its
   * `reason`. Hand it to the model or `fetch()` producing the tokens, so that they
   * stop as soon as nobody listens; the next `write()` rejects too. */
  readonly signal: AbortSignal;
  private readonly aborter = new AbortController();
  state: StreamState = "new";
  /** Why it was cancelled, once it was. */
  reason: string | null = null;
  /** Delta frames sent, and `write()` calls made (coalesced into those frames). */
  sent = 0;
  written = 0;
  /** The done's (or cancel's) `seq`, once the hub relayed it. */
  seq: number | null = null;
  /** The stream's frames' request ids start with this (`"s3."`). */
  readonly requestPrefix: string;
  private error: HubClientError | null = null;
  private generation = -1;
  private cancelledHere = false;
  private frames = 0;
  /** Steps that put frames on the wire, one after the other (deltas in order). */
  private tail: Promise<unknown> = Promise.resolve();
  /** Text written and not sent yet, and the timer that will send it. */
  private pending: string[] = [];
  private pendingChars = 0;
  private flusher: ReturnType<typeof setTimeout> | null = null;
  readonly echo: boolean;
  readonly to: string | string[] | null;
  readonly coalesce: number;
  private readonly fields: Data;

  constructor(
    private readonly owner: StreamOwner,
    readonly space: string,
    readonly eventId: string,
    options: { data?: Data; echo?: boolean; to?: string | string[] | null; coalesce?: number },
    prefix: string,
  ) {
    this.hubEventId = `${owner.agentId}/${eventId}`;
    this.signal = this.aborter.signal;
    this.requestPrefix = prefix;
    this.fields = { ...(options.data ?? {}) };
    this.echo = options.echo ?? true;
    this.to = options.to ?? null;
    this.coalesce = options.coalesce ?? COALESCE_MS;
  }

  /**
   * Send `text` (`fields`: extra `data` fields for its delta). Text written within
   * `coalesce` ms goes out as one delta (see the module's description); a write
   * with fields is a delta of its own. The first write waits one round trip, so
   * that a refusal (not a member, too many open streams …) is thrown right there;
   * later writes wait only for room in the outbound buffer. An error the hub
   * reports for a later delta is thrown by the next `write()` or by `end()`; a
   * stream the hub or a lost connection ended throws `StreamCancelled`.
   */
  async write(text: string, fields: Data = {}): Promise<void> {
    if (typeof text !== "string") throw new TypeError("a delta's text must be a string");
    this.raiseIfUnusable();
    this.written += 1;
    if (this.state === "new") {
      this.state = "open";
      this.generation = this.owner.generation;
      this.owner.openStream(this);
      await this.serially(() => this.sendDelta({ ...this.fields, ...fields, text }, true));
      await this.settled(this.owner.barrier());
      this.raiseIfUnusable();
      return;
    }
    if (Object.keys(fields).length > 0 || this.coalesce <= 0) {
      await this.flush();
      await this.serially(() => this.sendDelta({ ...fields, text }));
      return;
    }
    if (this.pending.length > 0 && this.pendingChars + text.length > MAX_DELTA_CHARS) await this.flush();
    this.pending.push(text);
    this.pendingChars += text.length;
    if (this.pendingChars >= MAX_DELTA_CHARS) await this.flush();
    else this.flusher ??= setTimeout(() => this.flushLater(), this.coalesce);
  }

  /** Send what was written and not sent yet, as one delta, now. */
  flush(): Promise<void> {
    this.stopFlusher();
    return this.serially(async () => {
      if (this.pending.length === 0) return;
      const text = this.pending.join("");
      this.pending = [];
      this.pendingChars = 0;
      this.raiseIfUnusable();
      await this.sendDelta({ text });
    });
  }

  private flushLater(): void {
    this.flusher = null;
    this.flush().catch((error: unknown) => {
      // Thrown by the next write() or end(); a cancel says so by itself.
      if (this.error === null && error instanceof HubClientError && !(error instanceof StreamCancelled)) {
        this.error = error;
      }
    });
  }

  private stopFlusher(): void {
    if (this.flusher !== null) clearTimeout(this.flusher);
    this.flusher = null;
  }

  private async sendDelta(data: Data, first = false): Promise<void> {
    const msg: Frame = {
      type: "space.event.delta",
      id: this.nextRequestId(),
      space: this.space,
      event_id: this.eventId,
      data,
      echo: this.echo,
    };
    if (first && this.to !== null) msg.to = this.to;
    await this.settled(this.owner.send(msg, this.generation));
    this.sent += 1;
  }

  /** `step`'s outcome — or, when it failed, the reason the stream ended, which
   * explains it better (a cancel, a refusal, a lost connection). */
  private async settled<T>(step: Promise<T>): Promise<T> {
    try {
      return await step;
    } catch (error) {
      this.raiseIfUnusable();
      throw error;
    }
  }

  /**
   * End the stream with `space.event.done`; resolves with the done's `seq` (with
   * `echo`: the hub relays it back) or null (`echo: false`: only a refusal is
   * waited for). Ending a stream that never sent a delta, or that `cancel()`
   * ended, does nothing. Idempotent.
   */
  async end(): Promise<number | null> {
    if (this.state === "done" || (this.state === "cancelled" && this.cancelledHere)) return this.seq;
    if (this.state === "new") {
      this.state = "done";
      return null;
    }
    this.raiseIfUnusable();
    await this.flush();
    return this.serially(() => this.endNow());
  }

  private async endNow(): Promise<number | null> {
    if (this.state === "done") return this.seq;
    this.raiseIfUnusable();
    try {
      if (this.echo) {
        await this.finish("space.event.done");
      } else {
        const msg: Frame = {
          type: "space.event.done",
          id: this.nextRequestId(),
          space: this.space,
          event_id: this.eventId,
        };
        await this.owner.send(msg, this.generation);
        await this.owner.barrier();
        this.raiseIfUnusable();
      }
    } catch (error) {
      this.raiseIfUnusable();
      throw error;
    }
    this.state = "done";
    this.owner.closeStream(this);
    return this.seq;
  }

  /** Cancel the stream: every receiver gets `space.event.cancel` with `reason`.
   * Does nothing once it ended. */
  async cancel(reason = "cancelled"): Promise<void> {
    if (this.state === "new") {
      [this.state, this.reason, this.cancelledHere] = ["cancelled", reason, true];
      this.abort();
      return;
    }
    if (this.state !== "open") return;
    try {
      await this.flush(); // what was written goes out before the cancel
    } catch {
      // the cancel is what matters now
    }
    if (this.state !== "open") return;
    [this.state, this.reason, this.cancelledHere] = ["cancelled", reason, true];
    this.abort();
    try {
      if (this.generation === this.owner.generation) {
        await this.finish("space.event.cancel", { reason: reason.slice(0, 256) });
      }
    } catch (error) {
      // The hub had already ended it (idle timeout crossing our cancel), or the
      // connection is gone: either way it is over.
      if (!(error instanceof HubClientError)) throw error;
    } finally {
      this.owner.closeStream(this);
    }
  }

  /** Write every piece of `source`, then end; when `source` throws, cancel with
   * reason `error: <name>` and rethrow. Resolves like `end()`. */
  async pipe(source: AsyncIterable<string> | Iterable<string>): Promise<number | null> {
    try {
      for await (const piece of source) await this.write(piece);
    } catch (error) {
      if (this.state === "open") {
        const name = error instanceof Error ? error.name : typeof error;
        await this.cancel(error instanceof StreamCancelled ? "cancelled" : `error: ${name}`);
      }
      throw error;
    }
    return this.end();
  }

  /** Send done or cancel and wait for the hub's relay of it. */
  private async finish(type: string, fields: Frame = {}): Promise<void> {
    const reply = await this.owner.request({ type, space: this.space, event_id: this.eventId, ...fields });
    if (type === "space.event.done" && reply.type !== type) {
      // The receivers had stopped it: the hub answers the done with its notice.
      this.markCancelled(typeof reply.reason === "string" ? reply.reason : "cancelled");
      this.raiseIfUnusable();
    }
    this.seq = Number.isInteger(reply.seq) ? (reply.seq as number) : null;
  }

  private serially<T>(step: () => Promise<T>): Promise<T> {
    const run = this.tail.then(step);
    this.tail = run.catch(() => {});
    return run;
  }

  private nextRequestId(): string {
    return `${this.requestPrefix}${this.frames++}`;
  }

  // ── state, driven by the client ─────────────────────────────────────────

  private raiseIfUnusable(): void {
    if (this.error !== null) throw this.error;
    if (this.state === "open" && this.generation !== this.owner.generation) {
      this.markCancelled("connection_lost");
    }
    if (this.state === "cancelled") throw this.cancelledError();
    if (this.state === "done" || this.state === "failed") {
      throw new HubClientError(`stream ${this.eventId} has already ended`, { code: "STREAM_ENDED" });
    }
  }

  private cancelledError(): StreamCancelled {
    const reason = this.reason ?? "cancelled";
    return new StreamCancelled(`stream ${this.eventId} in ${this.space} was cancelled: ${reason}`, reason);
  }

  private abort(): void {
    if (!this.aborter.signal.aborted) this.aborter.abort(this.cancelledError());
  }

  /** @internal The receivers, the hub or a lost connection ended the stream. */
  markCancelled(reason: string): void {
    if (this.state === "new" || this.state === "open") {
      this.state = "cancelled";
      this.reason = reason;
      this.stopFlusher();
      this.owner.closeStream(this);
      this.abort();
    }
  }

  /** @internal The hub refused one of this stream's frames. */
  refused(requestId: string, error: HubRejected): void {
    if (this.error === null) this.error = error;
    if (requestId === `${this.requestPrefix}0`) {
      // The first delta: the hub has no such stream.
      this.state = "failed";
      this.owner.closeStream(this);
    }
  }
}

/** @internal The streams this client has open, found by the ids of the hub's frames. */
export class OutgoingStreams {
  private prefixes = 0;
  private readonly byEventId = new Map<string, OutgoingStream>();
  private readonly byPrefix = new Map<string, OutgoingStream>();

  /** The request-id prefix of a new stream (`"s3."`). */
  newPrefix(): string {
    return `s${++this.prefixes}.`;
  }

  add(stream: OutgoingStream): void {
    this.byEventId.set(stream.hubEventId, stream);
    this.byPrefix.set(stream.requestPrefix, stream);
  }

  remove(stream: OutgoingStream): void {
    if (this.byEventId.get(stream.hubEventId) === stream) this.byEventId.delete(stream.hubEventId);
    this.byPrefix.delete(stream.requestPrefix);
  }

  /** The hub relayed a cancel of `hubEventId`, or told us that every receiver of it
   * stopped: if it is ours, it ended. */
  cancelled(hubEventId: string, reason: string): void {
    this.byEventId.get(hubEventId)?.markCancelled(reason);
  }

  /** The hub refused frame `requestId`; false when no stream of ours sent it. */
  refused(requestId: string, error: HubRejected): boolean {
    const dot = requestId.indexOf(".");
    const stream = dot > 0 ? this.byPrefix.get(requestId.slice(0, dot + 1)) : undefined;
    if (stream === undefined) return false;
    stream.refused(requestId, error);
    return true;
  }

  /** Every open stream ended with the connection it was on. */
  connectionLost(): void {
    for (const stream of [...this.byEventId.values()]) stream.markCancelled("connection_lost");
  }
}
