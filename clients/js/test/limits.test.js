// Failure without a hang: a hub that stops answering (SIGSTOP) is noticed within
// its heartbeat timeout, streams in flight end with an error, and the outbound
// buffer stays bounded — sends wait, then fail with BufferFull.

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { BufferFull, Client, RequestTimeout, StreamCancelled } from "agora-hub-client";

import { HubProcess, nextMatching, unique, within } from "./support/servers.js";

const cleanup = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

describe("a hub that stops answering", () => {
  test("is dropped after its heartbeat timeout; streams end with an error; then resume recovers", async () => {
    const hub = await new HubProcess({ heartbeat_timeout: 1.5 }).start();
    cleanup.push(async () => {
      hub.proc.kill("SIGCONT");
      await hub.stop();
    });
    const space = unique("frozen");
    const states = [];
    const reader = new Client(hub.url, unique("reader"), {
      reconnect: { initialDelay: 100, maxDelay: 300 },
      openTimeout: 1000,
      maxQueued: 2,
      onStateChange: (state) => states.push(state),
      logger: null,
    });
    const writerLog = [];
    let writerLost;
    const writerReconnecting = new Promise((resolve) => (writerLost = resolve));
    const writer = new Client(hub.url, unique("writer"), {
      reconnect: { initialDelay: 100, maxDelay: 300 },
      openTimeout: 1000,
      logger: { info: (m) => writerLog.push(m) },
      onStateChange: (state) => state === "reconnecting" && writerLost(),
    });
    cleanup.push(() => reader.close(), () => writer.close());
    await reader.connect();
    await writer.connect();
    await reader.join(space);
    await reader.join("agent.status");
    await writer.join(space);
    const events = reader.events(space, { resumed: true });
    const presence = reader.events("agent.status", { resumed: true });
    const incoming = writer.stream(space);
    await incoming.write("started");
    const mine = reader.stream(space, { echo: false });
    await mine.write("mine");
    await reader.ping();

    hub.proc.kill("SIGSTOP");
    // In flight when the connection is lost: sent again after the reconnect, and the
    // hub publishes it once whether or not it had read the first copy.
    const key = unique("key");
    const once = writer.publish(space, "exactly once", { idempotencyKey: key });
    const cut = await within(8000, events.take(8000), "the stream being received to end");
    assert.deepEqual([cut.eventId, cut.status, cut.reason], [incoming.hubEventId, "incomplete", "connection_lost"]);
    assert.ok(states.includes("reconnecting"));
    await assert.rejects(mine.write("more"), (e) => e instanceof StreamCancelled && e.reason === "connection_lost");

    // While reconnecting, at most maxQueued (2) requests wait for the connection.
    const waiting = [reader.ping(), reader.ping()];
    await assert.rejects(reader.ping(), BufferFull);

    // The writer notices on its own heartbeat, not the reader's: the publish in
    // flight is interrupted (and sent again) only once the writer has noticed.
    await within(8000, writerReconnecting, "the writer noticing the hub is gone");
    hub.proc.kill("SIGCONT");
    await within(15_000, reader.waitConnected(15_000), "the reconnect");
    for (const ping of waiting) assert.ok(await ping);
    const resumed = await nextMatching(events, (m) => m.kind === "resumed", 10_000);
    assert.equal(resumed.recovered, true, "the same hub process still has the history");
    // Presence is rejoined from now, never replayed: old news would read as new.
    const rejoined = await nextMatching(presence, (m) => m.kind === "resumed", 10_000);
    assert.equal(rejoined.recovered, false);
    presence.close();
    await writer.waitConnected(15_000);
    const sentOnce = await within(15_000, once, "the idempotent publish");
    assert.ok(writerLog.some((m) => m.startsWith("publish interrupted")), "it was sent again");
    const sent = await writer.publish(space, "after the freeze");
    assert.equal((await nextMatching(events, (m) => m.kind === "event" && m.eventId === sent.eventId)).text, "after the freeze");
    const copies = (await writer.history(space)).events.filter((e) => e.text === "exactly once");
    assert.deepEqual(copies.map((e) => e.eventId), [sentOnce.eventId]);
    events.close();
  });
});

describe("the outbound buffer", () => {
  test("is bounded: a stream writing to a stalled hub waits, then fails with BufferFull", async () => {
    const hub = await new HubProcess({ heartbeat_timeout: 10 }).start();
    cleanup.push(async () => {
      hub.proc.kill("SIGCONT");
      await hub.stop();
    });
    const bound = 256 * 1024;
    const client = new Client(hub.url, unique("flood"), {
      reconnect: false,
      maxBufferedBytes: bound,
      requestTimeout: 1000,
      logger: null,
    });
    cleanup.push(() => client.close());
    await client.connect();
    const space = unique("flood");
    await client.join(space);
    const s = client.stream(space, { echo: false });
    await s.write("start");
    hub.proc.kill("SIGSTOP");
    const delta = "x".repeat(200 * 1024);
    let failure = null;
    let highest = 0;
    // The kernel's socket buffers take some megabytes first; then the client's own
    // buffer fills up to its bound and a write waits, then fails.
    for (let i = 0; i < 500 && failure === null; i++) {
      try {
        await s.write(delta);
      } catch (error) {
        failure = error;
      }
      highest = Math.max(highest, client.bufferedAmount);
    }
    assert.ok(failure instanceof BufferFull, `a write failed with ${failure}`);
    assert.ok(highest <= bound + delta.length + 1024, `buffered ${highest} bytes`);
    assert.ok(client.bufferedAmount > 0);
    await assert.rejects(client.publish(space, "blocked too", { echo: false }), (e) => e instanceof BufferFull || e instanceof RequestTimeout);
    hub.proc.kill("SIGCONT");
  });
});
