/**
 * Receiving streams: putting their deltas back together into whole events.
 *
 * `StreamAssembler` is pure bookkeeping fed with `StreamChunk`s (no I/O, the clock
 * is injected): it returns an `Event` with `streamed: true` when a stream finishes
 * (`complete`), is cancelled (`cancelled`, with the canceller's reason), or is given
 * up on (`incomplete`: no frame for `incompleteTimeout` ms, the start was missed,
 * it grew past `maxChars`, or the connection was lost).
 */

import { makeEvent, type Data, type Event, type EventStatus, type StreamChunk } from "./models.js";

/** How many given-up streams are remembered, so that their late frames are ignored
 * rather than reported a second time. */
const GIVEN_UP_REMEMBERED = 1024;

export const DEFAULT_MAX_CHARS = 64 * 1024 * 1024;

export interface AssemblerOptions {
  /** Give up on a stream with no frame for this long (ms); null waits forever. */
  incompleteTimeout?: number | null;
  /** Text kept per stream; beyond it the stream is reported `incomplete`/`too_large`. */
  maxChars?: number;
  clock?: () => number;
}

class PartialStream {
  readonly parts: string[] = [];
  size = 0;
  chunks = 0;
  seq: number | null = null;

  constructor(
    readonly first: StreamChunk,
    readonly fields: Data,
    public lastActive: number,
    /** Why it cannot be complete, decided early (`missed_start`, `too_large`). */
    public problem: string | null,
  ) {}

  result(status: EventStatus, reason: string | null, seq: number | null, requestId: StreamChunk["requestId"] = null): Event {
    if (status === "complete" && this.problem !== null) {
      status = "incomplete";
      reason = this.problem;
    }
    return makeEvent({
      space: this.first.space,
      eventId: this.first.eventId,
      seq: seq ?? this.seq ?? 0,
      from: this.first.from ?? "",
      timestamp: this.first.timestamp,
      data: { ...this.fields, text: this.parts.join("") },
      to: this.first.to,
      requestId,
      streamed: true,
      status,
      reason,
      chunks: this.chunks,
    });
  }
}

export class StreamAssembler {
  readonly incompleteTimeout: number | null;
  readonly maxChars: number;
  readonly clock: () => number;
  private readonly open = new Map<string, PartialStream>();
  private readonly givenUp = new Set<string>(); // insertion-ordered: oldest first

  constructor(options: AssemblerOptions = {}) {
    this.incompleteTimeout =
      options.incompleteTimeout === undefined ? 30_000 : options.incompleteTimeout;
    this.maxChars = options.maxChars ?? DEFAULT_MAX_CHARS;
    this.clock = options.clock ?? (() => performance.now());
  }

  /** Streams in progress. */
  get size(): number {
    return this.open.size;
  }

  /** Whether a frame of `eventId` would be part of a stream this assembler tracks. */
  has(eventId: string): boolean {
    return this.open.has(eventId);
  }

  /**
   * Take one frame; returns the whole event when the frame ends its stream.
   *
   * A first delta is recognised by its `data.from` (the hub fills it in on every
   * stream's first delta): a delta of an unknown stream without it means the start
   * was missed, and the stream ends `incomplete` with reason `missed_start`.
   */
  feed(chunk: StreamChunk, now: number = this.clock()): Event | null {
    let partial = this.open.get(chunk.eventId);
    if (partial === undefined && this.givenUp.has(chunk.eventId)) {
      if (chunk.kind !== "delta") this.givenUp.delete(chunk.eventId);
      return null;
    }
    if (chunk.kind === "delta") {
      if (partial === undefined) {
        const { text: _text, ...fields } = chunk.data;
        partial = new PartialStream(chunk, fields, now, "from" in chunk.data ? null : "missed_start");
        this.open.set(chunk.eventId, partial);
      }
      partial.lastActive = now;
      partial.chunks += 1;
      partial.seq = chunk.seq ?? partial.seq;
      if (partial.problem !== "too_large") {
        if (partial.size + chunk.text.length > this.maxChars) {
          partial.problem = "too_large";
          partial.parts.length = 0;
        } else {
          partial.parts.push(chunk.text);
          partial.size += chunk.text.length;
        }
      }
      return null;
    }
    if (partial === undefined) {
      if (chunk.kind === "done") {
        // Every delta of it went missing before this consumer saw it.
        const empty = new PartialStream(chunk, {}, now, "missed_start");
        return empty.result("complete", null, chunk.seq, chunk.requestId);
      }
      return null; // a cancel of a stream never seen: nothing to report
    }
    this.open.delete(chunk.eventId);
    if (chunk.kind === "done") return partial.result("complete", null, chunk.seq, chunk.requestId);
    return partial.result("cancelled", chunk.reason ?? "cancelled", chunk.seq);
  }

  /** When `expire()` will next have something to give up on (clock time), or null. */
  nextDeadline(): number | null {
    if (this.incompleteTimeout === null || this.open.size === 0) return null;
    let oldest = Infinity;
    for (const p of this.open.values()) oldest = Math.min(oldest, p.lastActive);
    return oldest + this.incompleteTimeout;
  }

  /** Give up on streams silent for `incompleteTimeout` or longer. */
  expire(now: number = this.clock()): Event[] {
    const timeout = this.incompleteTimeout;
    if (timeout === null) return [];
    const stale = [...this.open].filter(([, p]) => now - p.lastActive >= timeout).map(([id]) => id);
    return stale.map((id) => this.giveUp(id, "incomplete_timeout"));
  }

  /** Give up on every open stream: the frames they need will not come. */
  abandon(reason: string): Event[] {
    return [...this.open.keys()].map((id) => this.giveUp(id, reason));
  }

  private giveUp(eventId: string, reason: string): Event {
    const partial = this.open.get(eventId)!;
    this.open.delete(eventId);
    this.givenUp.add(eventId);
    if (this.givenUp.size > GIVEN_UP_REMEMBERED) {
      this.givenUp.delete(this.givenUp.values().next().value as string);
    }
    return partial.result("incomplete", reason, null);
  }
}
