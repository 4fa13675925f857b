/**
 * The bound on what the client has sent but the network has not taken yet.
 *
 * A WebSocket's `send()` never refuses: what the network cannot take piles up in
 * the socket's buffer (`bufferedAmount`) — without a bound, a producer faster than
 * the link (a token stream to a stalled hub) grows memory until the process dies.
 * So a frame goes out at once only while the buffer holds at most `maxBytes`;
 * otherwise it waits for the buffer to drain, behind the frames already waiting
 * (the hub must see one publisher's frames in the order they were sent), and fails
 * with `BufferFull` when its deadline passes first — nothing half-sent, nothing
 * reordered. Browsers say nothing when a buffer drains, so the wait checks every
 * 20 ms; it only happens while the buffer is over its bound.
 */

import { BufferFull, ConnectionClosed } from "./errors.js";
import type { Link } from "./link.js";

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class OutboundBuffer {
  /** Frames waiting for room, in call order. */
  private tail: Promise<void> = Promise.resolve();
  private waiting = 0;

  constructor(readonly maxBytes: number) {}

  /** Send `text` on `link` once there is room, while `link` is `current()`. */
  send(link: Link, text: string, what: string, deadline: number, current: () => Link | null): Promise<void> {
    if (this.waiting === 0 && this.hasRoom(link, text)) {
      if (link !== current()) return Promise.reject(lost());
      link.send(text);
      return Promise.resolve();
    }
    this.waiting += 1;
    const sent = this.tail.then(() => this.sendWhenRoom(link, text, what, deadline, current));
    const done = (): void => void (this.waiting -= 1);
    this.tail = sent.then(done, done);
    return sent;
  }

  private hasRoom(link: Link, text: string): boolean {
    const buffered = link.bufferedAmount;
    return buffered === 0 || buffered + text.length <= this.maxBytes;
  }

  private async sendWhenRoom(
    link: Link,
    text: string,
    what: string,
    deadline: number,
    current: () => Link | null,
  ): Promise<void> {
    while (link === current() && !this.hasRoom(link, text)) {
      if (now() >= deadline) {
        throw new BufferFull(
          `outbound buffer over ${this.maxBytes} bytes for the whole request timeout: ${what} not sent`,
        );
      }
      await sleep(Math.min(20, Math.max(1, deadline - now())));
    }
    if (link !== current()) throw lost();
    link.send(text);
  }
}

function lost(): ConnectionClosed {
  return new ConnectionClosed("connection lost");
}
