/**
 * Answering requests with a handler: what `client.serve()` runs (contract §19).
 *
 * Every agent that answers writes the same loop — read the space's events, skip its
 * own and the replies, answer, survive an asker who left — and the loops people copy
 * get the last part wrong. `Answerer` is that loop, once:
 *
 * - A **request** is an event of the space that is not a reply (no `in_reply_to`)
 *   and not this agent's own (nor the hub's); streamed ones come whole. With
 *   `addressedOnly`, only those whose `to` names this agent.
 * - `handler(event, signal)` returns (or resolves with) a string or an object (one
 *   reply), `null`/`undefined` (no reply), or an iterator of strings — an `async
 *   function*`, a generator — (a reply streamed as it is produced).
 * - A throw becomes a failure reply `{ status: "failure", error: message }` (a
 *   stream already under way is cancelled with reason `error: <name>`), and a
 *   warning in the log.
 * - `signal` aborts when the asker stops waiting: it left the space, it sent
 *   `{ cancel: true, in_reply_to }` (what the hub's bridges send when their caller
 *   goes away), or every receiver of the streamed reply cancelled it or left (the
 *   hub's notice). `serve` stops waiting for that handler at once and sends nothing
 *   more; pass the signal on (`fetch(url, { signal })`, the model's client) so the
 *   work stops too.
 * - Answering never throws out of the loop: a reply the hub refuses because the
 *   asker left, a stream cut short, a rate limit, a lost connection — each is one log
 *   line (`info` for the asker that left, `warn` otherwise).
 * - At most `concurrency` requests are handled at once; later ones wait, in order,
 *   at most `queueSize` of them (beyond, the oldest is dropped, with a warning).
 *
 * `serve()` resolves when the client is closed, rejects with the client's error when
 * the connection is lost for good, and settles only once every handler it started
 * has been answered or abandoned.
 */

import { ConnectionClosed, HubClientError, InvalidRequest, StreamCancelled } from "./errors.js";
import { describe, type Logger } from "./logging.js";
import { isObject, type Data, type Event, type JoinResult, type Message } from "./models.js";
import type { EventsOptions, ReplyOptions } from "./options.js";
import type { OutgoingStream, StreamOptions } from "./streams.js";
import type { Subscription } from "./subscriptions.js";

/** A request handler: the request in, the reply (or its chunks) out. `signal` aborts
 * when the asker stops waiting. */
export type RequestHandler = (request: Event, signal: AbortSignal) => unknown;

export interface ServeOptions {
  /** Requests handled at once (default 16); later ones wait, in order. */
  concurrency?: number;
  /** Only requests addressed to this agent (`to`), not those to the whole space. */
  addressedOnly?: boolean;
}

/** What an `Answerer` needs of its client. */
export interface Answering {
  readonly agentId: string;
  readonly joinedSpaces: string[];
  join(space: string): Promise<JoinResult>;
  events(space: string, options: EventsOptions): Subscription<Message>;
  reply(event: Event, data: Data, options?: ReplyOptions): Promise<Event>;
  replyStream(event: Event, options?: StreamOptions): OutgoingStream;
}

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
/** Longest failure message sent back to the asker. */
const MAX_ERROR = 1000;

/** One request being answered, and the signal that says the asker stopped waiting. */
class Answer {
  private readonly controller = new AbortController();
  readonly signal = this.controller.signal;
  done: Promise<void> = Promise.resolve();

  constructor(readonly request: Event) {}

  get key(): string {
    return keyOf(this.request.from, this.request.eventId);
  }

  abandon(reason: string): void {
    if (!this.signal.aborted) {
      this.controller.abort(new DOMException(`the asker stopped waiting: ${reason}`, "AbortError"));
    }
  }
}

const keyOf = (asker: string, eventId: string): string => `${asker}\u0000${eventId}`;
const askerOf = (key: string): string => key.slice(0, key.indexOf("\u0000"));

/** Answers the requests of one space with a handler (see the module). */
export class Answerer {
  private readonly running = new Map<string, Answer>();
  private waiting: Answer[] = [];
  private readonly concurrency: number;
  private readonly addressedOnly: boolean;
  private dropped = 0;
  private stopping = false;

  constructor(
    private readonly client: Answering,
    private readonly space: string,
    private readonly handler: RequestHandler,
    options: ServeOptions,
    private readonly maxWaiting: number,
    private readonly log: Logger,
  ) {
    if (typeof handler !== "function") throw new TypeError("serve() needs a handler function");
    this.concurrency = options.concurrency ?? 16;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) {
      throw new RangeError("concurrency must be an integer of at least 1");
    }
    this.addressedOnly = options.addressedOnly ?? false;
  }

  async run(): Promise<void> {
    const events = this.client.events(this.space, { members: true });
    try {
      if (!this.client.joinedSpaces.includes(this.space)) await this.client.join(this.space);
      for await (const item of events) this.take(item);
    } finally {
      events.close();
      await this.stop();
    }
  }

  // ── what arrives ─────────────────────────────────────────────────────────

  private take(item: Message): void {
    if (item.kind === "members") {
      for (const agentId of item.leftIds) this.stopWaiting((key) => askerOf(key) === agentId, "asker_left");
      return;
    }
    if (item.kind !== "event") return;
    if (item.data.cancel === true && item.inReplyTo !== null) {
      const wanted = keyOf(item.from, item.inReplyTo);
      this.stopWaiting((key) => key === wanted, "cancelled");
      return;
    }
    if (!this.isRequest(item)) return;
    const answer = new Answer(item);
    if (this.running.size < this.concurrency) {
      this.start(answer);
      return;
    }
    if (this.waiting.length >= this.maxWaiting) {
      this.waiting.shift();
      this.dropped += 1;
      if (this.dropped === 1 || this.dropped % 1000 === 0) {
        this.log.warn(
          `serve ${this.space}: ${this.dropped} request(s) dropped so far, more waited than queueSize; ` +
            "raise concurrency or queueSize",
        );
      }
    }
    this.waiting.push(answer);
  }

  private isRequest(event: Event): boolean {
    if (event.from === this.client.agentId || !AGENT_ID.test(event.from)) return false;
    if (event.inReplyTo !== null) return false;
    if (!event.complete) {
      this.log.info(`serve ${this.space}: ignoring ${event.eventId}, a request that arrived ${event.status} (${event.reason})`);
      return false;
    }
    if (!this.addressedOnly) return true;
    const to = event.to;
    return to === this.client.agentId || (Array.isArray(to) && to.includes(this.client.agentId));
  }

  /** The askers `asked` matches stopped waiting: drop or abandon their answers. */
  private stopWaiting(asked: (key: string) => boolean, reason: string): void {
    if (this.waiting.length > 0) this.waiting = this.waiting.filter((answer) => !asked(answer.key));
    for (const [key, answer] of this.running) if (asked(key)) answer.abandon(reason);
  }

  // ── one answer ───────────────────────────────────────────────────────────

  private start(answer: Answer): void {
    this.running.set(answer.key, answer);
    answer.done = this.answer(answer)
      .catch((error: unknown) => this.log.warn(`serve ${this.space}: ${describe(error)}`))
      .finally(() => this.finished(answer));
  }

  private finished(answer: Answer): void {
    if (this.running.get(answer.key) === answer) this.running.delete(answer.key);
    while (this.waiting.length > 0 && !this.stopping && this.running.size < this.concurrency) {
      this.start(this.waiting.shift()!);
    }
  }

  private async answer(answer: Answer): Promise<void> {
    const { request, signal } = answer;
    let result: unknown;
    try {
      result = await untilAborted(Promise.resolve().then(() => this.handler(request, signal)), signal);
    } catch (error) {
      if (!signal.aborted) await this.fail(answer, error);
      return;
    }
    if (signal.aborted || result === null || result === undefined) return;
    const chunks = iteratorOf(result);
    if (chunks !== null) await this.stream(answer, chunks);
    else if (typeof result === "string" || isObject(result)) {
      try {
        await this.reply(answer, typeof result === "string" ? { text: result } : result);
      } catch (error) {
        if (!(error instanceof TypeError)) throw error; // not JSON (a BigInt, a cycle): nothing was sent
        await this.fail(answer, error);
      }
    } else {
      const what = Array.isArray(result) ? "an array" : typeof result;
      await this.fail(answer, new TypeError(`a handler returns a string, an object, null or an iterator of strings, not ${what}`));
    }
  }

  private async stream(answer: Answer, source: AsyncIterator<unknown> | Iterator<unknown>): Promise<void> {
    const { signal } = answer;
    const stream = this.client.replyStream(answer.request, { echo: false });
    // The receivers stopped it (or the hub, or a lost connection): so does the handler.
    stream.signal.addEventListener("abort", () => answer.abandon(stream.reason ?? "cancelled"), { once: true });
    try {
      for (;;) {
        let step: IteratorResult<unknown>;
        try {
          step = await untilAborted(Promise.resolve().then(() => source.next()), signal);
        } catch (error) {
          if (!signal.aborted) await this.fail(answer, error, stream);
          return;
        }
        if (signal.aborted) return;
        if (step.done) break;
        if (typeof step.value !== "string") {
          await this.fail(answer, new TypeError(`a reply's chunks are strings, not ${typeof step.value}`), stream);
          return;
        }
        try {
          await stream.write(step.value);
        } catch (error) {
          if (!(error instanceof HubClientError)) throw error;
          this.undelivered(answer, error);
          return;
        }
      }
      try {
        if (stream.state === "new") await this.reply(answer, { text: "" }); // not one chunk
        else await stream.end();
      } catch (error) {
        if (!(error instanceof HubClientError)) throw error;
        this.undelivered(answer, error);
      }
    } finally {
      if (stream.state === "open") {
        // Abandoned meanwhile: tell the receivers (a no-op when the hub ended it).
        await stream.cancel("cancelled").catch(() => {});
      }
      // Not awaited: a generator in the middle of an await ends that first.
      if (typeof source.return === "function") Promise.resolve().then(() => source.return!()).catch(() => {});
    }
  }

  private async fail(answer: Answer, error: unknown, stream: OutgoingStream | null = null): Promise<void> {
    if (answer.signal.aborted) return;
    const { request } = answer;
    const detail = error instanceof Error && error.stack ? error.stack : describe(error);
    this.log.warn(`serve ${this.space}: the handler failed on ${request.eventId} from ${request.from}: ${detail}`);
    if (stream !== null && stream.state === "open") {
      const name = error instanceof Error ? error.name : typeof error;
      await stream.cancel(`error: ${name}`).catch(() => {});
      return;
    }
    await this.reply(answer, { status: "failure", error: describe(error).slice(0, MAX_ERROR) });
  }

  private async reply(answer: Answer, data: Data): Promise<void> {
    try {
      await this.client.reply(answer.request, data, { echo: false });
    } catch (error) {
      if (!(error instanceof HubClientError)) throw error;
      this.undelivered(answer, error);
    }
  }

  /** A reply the hub did not take or deliver: never thrown, never a crash. */
  private undelivered(answer: Answer, error: HubClientError): void {
    const { request } = answer;
    const gone = error instanceof InvalidRequest || error instanceof StreamCancelled || error instanceof ConnectionClosed;
    const line =
      `serve ${this.space}: could not answer ${request.eventId} from ${request.from}` +
      `${gone ? " (the asker left or stopped waiting)" : ""}: ${error.code}: ${error.message}`;
    if (gone) this.log.info(line);
    else this.log.warn(line);
  }

  // ── the end ──────────────────────────────────────────────────────────────

  /** Abandon the handlers still running and wait until each answer has settled. */
  private async stop(): Promise<void> {
    this.stopping = true;
    this.waiting = [];
    const answers = [...this.running.values()];
    for (const answer of answers) answer.abandon("serve stopped");
    await Promise.all(answers.map((answer) => answer.done));
  }
}

/** `work`, or a rejection with the signal's reason as soon as it aborts. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  work.catch(() => {}); // settled after an abort: nobody is waiting for it any more
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** The chunks of a streamed reply: an async iterable (an `async function*`'s
 * generator, a `ReadableStream` …) or a generator; null for anything else (an
 * array is not a stream of chunks, as a string is not). */
function iteratorOf(value: unknown): AsyncIterator<unknown> | Iterator<unknown> | null {
  if (typeof value !== "object" || value === null) return null;
  const v = value as { [Symbol.asyncIterator]?: unknown; [Symbol.iterator]?: unknown; next?: unknown };
  if (typeof v[Symbol.asyncIterator] === "function") {
    return (value as AsyncIterable<unknown>)[Symbol.asyncIterator]();
  }
  if (typeof v[Symbol.iterator] === "function" && typeof v.next === "function") return value as Iterator<unknown>;
  return null;
}
