/**
 * Asking the hub, and asking other agents.
 *
 * `PendingRequests`: every request carries a fresh `id` (`c1`, `c2` …) and waits
 * under it. The hub echoes the id as `id` on a reply, and as `request_id` on an
 * `error` or on the `space.event` (or `space.event.done`) that acknowledges a
 * publish — so any number of requests may be in flight, answered in any order.
 *
 * `ReplyWaiters`: request/reply between agents (contract §4). A request is a
 * publish; its answer is the first event of the space whose `data.in_reply_to` is
 * the request's `event_id` — a plain event, or a stream whose first delta says so,
 * assembled — published by an agent the request was addressed to (unaddressed: by
 * any member of the space; contract §18). A reply from another space, or from an
 * agent not asked, passes by: the request goes on waiting. The sender is the hub's
 * stamp (the frame's `from`). The waiter learns the request's `event_id` in the reader, from the
 * frame that acknowledges the publish, before any later frame is handled: a reply
 * that arrives in the same burst as the acknowledgement is not missed.
 */

import { StreamAssembler } from "./assembly.js";
import type { RequestId } from "./errors.js";
import type { Event, Frame, StreamChunk } from "./models.js";

interface Deferred<T> {
  resolve(value: T): void;
  reject(error: Error): void;
}

function deferred<T>(): [Promise<T>, Deferred<T>] {
  let handlers!: Deferred<T>;
  const promise = new Promise<T>((resolve, reject) => {
    handlers = { resolve, reject };
  });
  return [promise, handlers];
}

/** How many requests given up on (timed out) are remembered, so that the hub's late
 * answer to one is known for what it is. */
const ABANDONED_KEPT = 1024;

/** The requests sent on the connection and not answered yet, by id. */
export class PendingRequests {
  private readonly waiting = new Map<string, Deferred<Frame>>();
  private readonly abandoned = new Set<string>();
  private counter = 0;

  /** A fresh request id and the promise its answer will resolve. */
  open(): [string, Promise<Frame>] {
    const rid = `c${++this.counter}`;
    const [promise, handlers] = deferred<Frame>();
    promise.catch(() => {}); // a failure nobody awaits any more is not "unhandled"
    this.waiting.set(rid, handlers);
    return [rid, promise];
  }

  /** The request is over (answered, failed or timed out). */
  forget(rid: string): void {
    if (!this.waiting.delete(rid)) return;
    this.abandoned.add(rid); // not answered: an answer may still come
    if (this.abandoned.size > ABANDONED_KEPT) this.abandoned.delete(this.abandoned.values().next().value!);
  }

  /** `frame` answers request `rid`, if one of ours still waits for it. */
  answer(rid: unknown, frame: Frame): void {
    if (typeof rid !== "string") return;
    const waiter = this.waiting.get(rid);
    if (waiter !== undefined) {
      this.waiting.delete(rid);
      waiter.resolve(frame);
    }
  }

  /** The hub refused request `rid`; false when it is none of ours (a request given
   * up on before its answer came is still ours). */
  refuse(rid: string, error: Error): boolean {
    const waiter = this.waiting.get(rid);
    if (waiter === undefined) return this.abandoned.delete(rid);
    this.waiting.delete(rid);
    waiter.reject(error);
    return true;
  }

  /** The connection is gone: no answer will come to any of them. */
  failAll(error: Error): void {
    const waiting = [...this.waiting.values()];
    this.waiting.clear();
    for (const waiter of waiting) waiter.reject(error);
  }
}

/** Every item of a paged listing: `fetch(cursor)` gets one page (the first with
 * null), `items(page)` its items, until a page has no `nextCursor`. */
export async function everyPage<P extends { nextCursor: string | null }, T>(
  fetch: (cursor: string | null) => Promise<P>,
  items: (page: P) => T[],
): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  for (;;) {
    const page: P = await fetch(cursor);
    out.push(...items(page));
    if (page.nextCursor === null) return out;
    cursor = page.nextCursor;
  }
}

/** One request waiting for its reply. */
export class ReplyWaiter {
  readonly promise: Promise<Event>;
  private readonly handlers: Deferred<Event>;
  /** The agents the request was addressed to; null: unaddressed. */
  readonly to: ReadonlySet<string> | null;
  /** The request's event id, once its publish is acknowledged. */
  eventId: string | null = null;
  /** The reply stream being assembled, once its first delta came. */
  stream: { eventId: string; assembler: StreamAssembler } | null = null;

  /** `space`: where the request is published; `to`: whom it is addressed to. */
  constructor(
    public requestId: RequestId,
    readonly space: string,
    to: string | readonly string[] | null = null,
  ) {
    [this.promise, this.handlers] = deferred<Event>();
    this.promise.catch(() => {});
    this.to = to === null ? null : new Set(typeof to === "string" ? [to] : to);
  }

  /** May a reply published in `space` by `from` (the hub's stamp) answer it? */
  admits(space: string, from: string | null): boolean {
    return space === this.space && !!from && (this.to === null || this.to.has(from));
  }

  settle(reply: Event | Error): void {
    if (reply instanceof Error) this.handlers.reject(reply);
    else this.handlers.resolve(reply);
  }
}

/** The requests waiting for replies, found by what the reader sees. */
export class ReplyWaiters {
  private readonly byRequest = new Map<RequestId, ReplyWaiter>();
  private readonly byEventId = new Map<string, ReplyWaiter>();
  private readonly byStream = new Map<string, ReplyWaiter>();

  /** No request waits: the reader need not look at `in_reply_to`. */
  get idle(): boolean {
    return this.byRequest.size === 0 && this.byEventId.size === 0 && this.byStream.size === 0;
  }

  /** A request to `space` (addressed to `to`) about to be published under request
   * id `rid` (`waiter`: one published again, under a new id, after a lost connection). */
  expect(
    rid: RequestId,
    waiter: ReplyWaiter | null,
    space: string,
    to: string | readonly string[] | null = null,
  ): ReplyWaiter {
    if (waiter === null) {
      waiter = new ReplyWaiter(rid, space, to);
    } else {
      this.byRequest.delete(waiter.requestId);
      waiter.requestId = rid;
    }
    this.byRequest.set(rid, waiter);
    return waiter;
  }

  /** The publish `rid` was acknowledged as `eventId`: replies to it answer it. */
  acknowledged(rid: RequestId | null, eventId: string): void {
    if (rid === null) return;
    const waiter = this.byRequest.get(rid);
    if (waiter === undefined) return;
    this.byRequest.delete(rid);
    waiter.eventId = eventId;
    this.byEventId.set(eventId, waiter);
  }

  /** A `space.event`: the reply of a waiting request? */
  offerEvent(event: Event): void {
    const target = event.data.in_reply_to;
    if (typeof target !== "string") return;
    const waiter = this.byEventId.get(target);
    if (waiter === undefined || !waiter.admits(event.space, event.from)) return;
    this.finish(waiter, event);
  }

  /** A stream frame: the start, part or end of a waiting request's reply? */
  offerChunk(chunk: StreamChunk): void {
    let waiter = this.byStream.get(chunk.eventId);
    if (waiter === undefined) {
      const target = chunk.data.in_reply_to;
      if (chunk.kind !== "delta" || typeof target !== "string") return;
      waiter = this.byEventId.get(target);
      if (waiter === undefined || !waiter.admits(chunk.space, chunk.from)) return;
      // The first reply to come is the answer: a stream, from its first delta on.
      this.byEventId.delete(target);
      waiter.stream = { eventId: chunk.eventId, assembler: new StreamAssembler({ incompleteTimeout: null }) };
      this.byStream.set(chunk.eventId, waiter);
    }
    const whole = waiter.stream!.assembler.feed(chunk);
    if (whole !== null) this.finish(waiter, whole);
  }

  /** The connection was lost: reply streams in flight will not be continued. */
  reset(): void {
    for (const waiter of [...this.byStream.values()]) {
      const [cut] = waiter.stream!.assembler.abandon("connection_lost");
      if (cut !== undefined) this.finish(waiter, cut);
    }
  }

  /** Stop waiting (timeout, or the client stopped). */
  abandon(waiter: ReplyWaiter, error: Error): void {
    this.finish(waiter, error);
  }

  failAll(error: Error): void {
    const all = new Set([...this.byRequest.values(), ...this.byEventId.values(), ...this.byStream.values()]);
    for (const waiter of all) this.finish(waiter, error);
  }

  private finish(waiter: ReplyWaiter, reply: Event | Error): void {
    this.byRequest.delete(waiter.requestId);
    if (waiter.eventId !== null) this.byEventId.delete(waiter.eventId);
    if (waiter.stream !== null) this.byStream.delete(waiter.stream.eventId);
    waiter.settle(reply);
  }
}
