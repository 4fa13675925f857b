/**
 * Handing what arrives to whoever is reading: bounded, never blocking the reader.
 *
 * Every `Subscription` owns a bounded queue. The client's reader puts into it
 * without waiting; when it is full the **oldest** item is dropped and counted
 * (`subscription.dropped`). Backpressure was rejected on purpose: a reader that
 * waited for a slow loop would also stop reading replies and heartbeats, and the
 * hub would close the connection as a slow consumer (4008) — one slow loop would
 * take the whole agent down.
 *
 * Items that arrive while no subscription wants them go to a *backlog* of the same
 * bound (oldest dropped); a new subscription first takes the backlog items it
 * matches, so `await c.join("x")` followed by `for await (const e of c.events("x"))`
 * misses nothing that arrived in between.
 *
 * What a subscription yields is shaped by an `ItemShaper` chosen when it is made:
 * stream frames as they are (`ChunkShaper`), or put back together
 * (`AssemblingShaper`). A lost connection reaches every shaper (`reset`), so a
 * stream cut off by it ends — as a `cancel` chunk or an `incomplete` event with
 * reason `connection_lost` — and never leaves a reader waiting for its end.
 */

import { StreamAssembler } from "./assembly.js";
import { RequestTimeout, SubscriptionEnded } from "./errors.js";
import { lostChunk, type Event, type Message, type StreamChunk } from "./models.js";

export type Kind = Message["kind"];

/** @internal Shapes the raw items of a subscription into what its reader gets. */
export interface ItemShaper<T> {
  take(item: Message): T[];
  /** The connection was replaced or lost: what was in flight will not come. */
  reset(): T[];
  /** The queue overflowed: items were lost. */
  overflowed(): T[];
  /** When `expire()` will have something (clock ms), or null. */
  deadline(): number | null;
  expire(): T[];
}

/** @internal Items as they arrive. */
export class PassThroughShaper implements ItemShaper<Message> {
  take(item: Message): Message[] {
    return [item];
  }
  reset(): Message[] {
    return [];
  }
  overflowed(): Message[] {
    return [];
  }
  deadline(): null {
    return null;
  }
  expire(): Message[] {
    return [];
  }
}

/** @internal Stream frames as they arrive; a stream cut off by a lost connection
 * gets a made-up `cancel` with reason `connection_lost`. */
export class ChunkShaper extends PassThroughShaper {
  private readonly open = new Map<string, string>(); // event id → space

  override take(item: Message): Message[] {
    if (item.kind === "delta") this.open.set(item.eventId, item.space);
    else if (item.kind === "done" || item.kind === "cancel") this.open.delete(item.eventId);
    return [item];
  }

  override reset(): Message[] {
    const ended = [...this.open].map(([eventId, space]) => lostChunk(space, eventId));
    this.open.clear();
    return ended;
  }
}

/** @internal Streams put back together: one `Event` per stream (see `StreamAssembler`). */
export class AssemblingShaper implements ItemShaper<Message> {
  constructor(readonly assembler: StreamAssembler) {}

  take(item: Message): Message[] {
    if (item.kind === "delta" || item.kind === "done" || item.kind === "cancel") {
      const done = this.assembler.feed(item as StreamChunk);
      return done === null ? [] : [done];
    }
    return [item];
  }
  reset(): Event[] {
    return this.assembler.abandon("connection_lost");
  }
  overflowed(): Event[] {
    return this.assembler.abandon("dropped");
  }
  deadline(): number | null {
    return this.assembler.nextDeadline();
  }
  expire(): Event[] {
    return this.assembler.expire();
  }
}

/** A FIFO with O(1) shift. */
class Queue<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }
  push(item: T): void {
    this.items.push(item);
  }
  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.items[this.head++] = undefined as T;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
  *drain(): Generator<T> {
    while (this.length > 0) yield this.shift() as T;
  }
}

const RESET = Symbol("reset");
const TIMED_OUT = Symbol("timed out");
const ENDED = Symbol("ended");
type Raw = Message | typeof RESET;
type Warn = (message: string) => void;

/**
 * An async iterator over what the hub sends, filtered by space and kind.
 *
 * `for await (const item of sub)` or `await sub.take(timeoutMs)`; `close()` (or
 * leaving the `for await` loop) ends it. Iteration stops when the client is closed,
 * and throws the client's error when the connection is lost for good.
 */
export class Subscription<T = Message> implements AsyncIterableIterator<T> {
  /** Items dropped because the queue was full. */
  dropped = 0;
  private readonly queue = new Queue<Raw>();
  private readonly ready = new Queue<T>();
  private wakeups: Array<() => void> = [];
  private ended = false;
  private error: Error | null = null;
  private overflow = false;

  /** @internal Made by the client's router (`client.events()`). */
  constructor(
    readonly space: string | null,
    readonly kinds: ReadonlySet<Kind>,
    readonly maxSize: number,
    private readonly shaper: ItemShaper<T>,
    private readonly detach: (sub: Subscription<T>) => void,
    private readonly warn: Warn,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** @internal */
  matches(space: string, kind: Kind): boolean {
    return this.kinds.has(kind) && (this.space === null || this.space === space);
  }

  /** Items waiting to be read. */
  get size(): number {
    return this.queue.length + this.ready.length;
  }

  // ── producer side (the client's reader) ──────────────────────────────

  /** @internal */
  put(item: Message): void {
    this.enqueue(item);
  }

  /** @internal The connection was replaced or lost. */
  reset(): void {
    this.enqueue(RESET);
  }

  private enqueue(item: Raw): void {
    if (this.ended) return;
    if (this.queue.length >= this.maxSize) {
      this.queue.shift();
      this.dropped += 1;
      this.overflow = true;
      if (this.dropped === 1 || this.dropped % 1000 === 0) {
        this.warn(
          `subscription full (${this.maxSize}): dropped ${this.dropped} item(s) so far; ` +
            "read faster or raise queueSize",
        );
      }
    }
    this.queue.push(item);
    this.wake();
  }

  /** @internal No more items: iteration ends (or throws `error`) once the queue is drained. */
  end(error: Error | null = null): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.wake();
  }

  private wake(): void {
    const wakeups = this.wakeups;
    this.wakeups = [];
    for (const wake of wakeups) wake();
  }

  // ── consumer side ─────────────────────────────────────────────────────

  async next(): Promise<IteratorResult<T>> {
    const item = await this.pull(null);
    return item === ENDED || item === TIMED_OUT
      ? { done: true, value: undefined }
      : { done: false, value: item };
  }

  /** The next item. Throws `RequestTimeout` when none came within `timeoutMs`, the
   * client's error when the connection was lost for good, and `SubscriptionEnded`
   * when the subscription (or the client) was closed. */
  async take(timeoutMs?: number): Promise<T> {
    const until = timeoutMs === undefined ? null : this.clock() + timeoutMs;
    const item = await this.pull(until);
    if (item === TIMED_OUT) throw new RequestTimeout(`nothing received within ${timeoutMs} ms`);
    if (item === ENDED) throw new SubscriptionEnded("the subscription has ended");
    return item;
  }

  private async pull(until: number | null): Promise<T | typeof ENDED | typeof TIMED_OUT> {
    for (;;) {
      if (this.ready.length > 0) return this.ready.shift() as T;
      const raw = this.queue.shift();
      if (raw !== undefined) {
        if (this.overflow) {
          this.overflow = false;
          this.readyAll(this.shaper.overflowed());
        }
        this.readyAll(raw === RESET ? this.shaper.reset() : this.shaper.take(raw));
        continue;
      }
      if (this.ended) {
        if (this.error !== null) throw this.error;
        return ENDED;
      }
      const now = this.clock();
      const expiry = this.shaper.deadline();
      if (expiry !== null && now >= expiry) {
        this.readyAll(this.shaper.expire());
        continue;
      }
      if (until !== null && now >= until) return TIMED_OUT;
      const wake = Math.min(expiry ?? Infinity, until ?? Infinity);
      await this.sleep(wake === Infinity ? null : wake - now);
    }
  }

  private readyAll(items: T[]): void {
    for (const item of items) this.ready.push(item);
  }

  private sleep(ms: number | null): Promise<void> {
    return new Promise((resolve) => {
      const timer = ms === null ? null : setTimeout(resolve, Math.max(1, ms));
      this.wakeups.push(() => {
        if (timer !== null) clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Stop receiving; what is queued can still be read. */
  close(): void {
    this.detach(this);
    this.end();
  }

  async return(): Promise<IteratorResult<T>> {
    this.close();
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/** @internal The client's table of subscriptions, plus the backlog of unwanted items. */
export class Router {
  private readonly subs = new Set<Subscription<any>>();
  private backlog: Array<[string, Kind, Message]> = [];
  private endedWith: { error: Error | null } | null = null;

  constructor(
    private readonly backlogSize: number,
    readonly warn: Warn,
  ) {}

  subscribe<T>(space: string | null, kinds: ReadonlySet<Kind>, shaper: ItemShaper<T>): Subscription<T> {
    const sub = new Subscription<T>(space, kinds, this.backlogSize, shaper, (s) => this.subs.delete(s), this.warn);
    if (this.endedWith !== null) {
      sub.end(this.endedWith.error);
      return sub;
    }
    const keep: Array<[string, Kind, Message]> = [];
    for (const entry of this.backlog) {
      if (sub.matches(entry[0], entry[1])) sub.put(entry[2]);
      else keep.push(entry);
    }
    this.backlog = keep;
    this.subs.add(sub);
    return sub;
  }

  dispatch(space: string, kind: Kind, item: Message): void {
    let taken = false;
    for (const sub of this.subs) {
      if (sub.matches(space, kind)) {
        sub.put(item);
        taken = true;
      }
    }
    if (!taken) {
      this.backlog.push([space, kind, item]);
      if (this.backlog.length > this.backlogSize) this.backlog.shift();
    }
  }

  /** The connection was replaced or lost: streams in flight end. */
  reset(): void {
    for (const sub of this.subs) sub.reset();
  }

  /** End every subscription, now and future ones. */
  end(error: Error | null = null): void {
    this.endedWith = { error };
    for (const sub of this.subs) sub.end(error);
    this.subs.clear();
  }
}
