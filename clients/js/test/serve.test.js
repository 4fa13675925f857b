// client.serve(): one request handler (contract §19), and what a producer hears when
// its receivers stop — against a real hub process.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, StreamCancelled } from "agora-hub-client";

import { HubProcess, nextMatching, unique, within } from "./support/servers.js";

// Lifted so that a burst of 200 replies is not refused for its rate.
const hub = new HubProcess({ rate_limit: 2000, rate_burst: 4000 });
const clients = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A connected client; `logged` collects what it logs above debug. */
async function connect(name, logged = null) {
  const logger = logged === null ? null : { info: (m) => logged.push(`info ${m}`), warn: (m) => logged.push(`warn ${m}`) };
  const client = new Client(hub.url, unique(name), { reconnect: false, logger });
  clients.push(client);
  return client.connect();
}

/** An agent serving a fresh space with `handler`; its serve() promise and log. */
async function serving(handler, options = {}) {
  const space = unique("ask");
  const logged = [];
  const agent = await connect("server-bot", logged);
  await agent.join(space); // serve() joins by itself; here askers must find it at once
  const served = agent.serve(space, handler, options);
  return { space, agent, served, logged };
}

async function asker(space, name = "asker") {
  const c = await connect(name);
  await c.join(space);
  return c;
}

before(() => hub.start());
after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await hub.stop();
});

describe("serve", () => {
  test("answers with a string, an object, a stream, a generator, a failure, or not at all", async () => {
    async function* words(text) {
      for (const word of text.split(" ")) {
        await sleep(5);
        yield `${word} `;
      }
    }
    const { space, agent } = await serving((event) => {
      switch (event.text) {
        case "object":
          return { text: "as an object", score: 3 };
        case "stream":
          return words("streamed word by word");
        case "generator":
          return (function* () {
            yield "plain ";
            yield "generator";
          })();
        case "nothing":
          return null;
        case "fail":
          throw new Error("no such city");
        case "async":
          return sleep(10).then(() => "resolved later");
        case "array":
          return ["not", "a", "stream"];
        case "bigint": // not JSON: an outside audit found no reply at all (Python)
          return { big: 10n };
        default:
          return `you said: ${event.text}`;
      }
    });
    const c = await asker(space);
    const plain = await c.request(space, "hello", { to: agent.agentId, timeout: 10_000 });
    assert.deepEqual([plain.text, plain.from], ["you said: hello", agent.agentId]);
    assert.equal((await c.request(space, "object", { timeout: 10_000 })).data.score, 3);
    const streamed = await c.request(space, "stream", { timeout: 10_000 });
    assert.deepEqual([streamed.streamed, streamed.complete, streamed.text], [true, true, "streamed word by word "]);
    assert.equal((await c.request(space, "generator", { timeout: 10_000 })).text, "plain generator");
    assert.equal((await c.request(space, "async", { timeout: 10_000 })).text, "resolved later");
    const failed = await c.request(space, "fail", { timeout: 10_000 });
    assert.deepEqual([failed.data.status, failed.data.error], ["failure", "no such city"]);
    const array = await c.request(space, "array", { timeout: 10_000 });
    assert.equal(array.data.status, "failure");
    assert.match(array.data.error, /not an array/);
    const unsent = await c.request(space, "bigint", { timeout: 10_000 });
    assert.equal(unsent.data.status, "failure");
    assert.match(unsent.data.error, /BigInt/);
    await assert.rejects(c.request(space, "nothing", { timeout: 500 }), { name: "ReplyTimeout" });
  });

  test("addressedOnly leaves what is said to everyone alone", async () => {
    const { space, agent } = await serving(() => "mine", { addressedOnly: true });
    const c = await asker(space);
    assert.equal((await c.request(space, "to me", { to: agent.agentId, timeout: 10_000 })).text, "mine");
    await assert.rejects(c.request(space, "to everyone", { timeout: 500 }), { name: "ReplyTimeout" });
  });

  /** An agent serving with a handler that never answers by itself: when it
   * starts, and the reason its signal aborts with. */
  async function neverAnswering() {
    let started;
    const startedP = new Promise((r) => (started = r));
    let aborted;
    const abortedP = new Promise((r) => (aborted = r));
    const served = await serving((event, signal) => {
      started();
      signal.addEventListener("abort", () => aborted(signal.reason));
      return new Promise(() => {});
    });
    return { ...served, startedP, abortedP };
  }

  test("the handler's signal aborts when the asker leaves", async () => {
    const { space, agent, startedP, abortedP } = await neverAnswering();
    const seen = agent.events(space, { members: true });
    const c = await asker(space);
    await nextMatching(seen, (m) => m.kind === "members" && m.joinedIds.includes(c.agentId));
    await c.publish(space, "slow question", { to: agent.agentId });
    await within(10_000, startedP, "the handler starting");
    await c.close();
    const reason = await within(10_000, abortedP, "the handler's signal aborting");
    assert.equal(reason.name, "AbortError");
    assert.match(reason.message, /asker_left/);
  });

  test("a request() that times out aborts the handler it asked", async () => {
    const { space, agent, startedP, abortedP } = await neverAnswering();
    const c = await asker(space);
    const asked = c.request(space, "slow question", { to: agent.agentId, timeout: 1_000 });
    await within(10_000, startedP, "the handler starting");
    await assert.rejects(asked, { name: "ReplyTimeout" });
    const reason = await within(10_000, abortedP, "the handler's signal aborting");
    assert.equal(reason.name, "AbortError");
  });

  test("a cancel note from the asker aborts the handler; another agent's does not", async () => {
    let started;
    const startedP = new Promise((r) => (started = r));
    let aborted = null;
    let abortSeen;
    const abortP = new Promise((r) => (abortSeen = r));
    const { space, agent } = await serving((event, signal) => {
      started();
      signal.addEventListener("abort", () => abortSeen((aborted = signal.reason)));
      return abortP;
    });
    const c = await asker(space);
    const other = await asker(space, "other");
    const question = await c.publish(space, "slow question", { to: agent.agentId });
    await within(10_000, startedP, "the handler starting");
    const note = { cancel: true, in_reply_to: question.eventId };
    await other.publish(space, note, { to: agent.agentId });
    await other.ping(); // the hub has relayed it by now (frames are in order)…
    await agent.ping(); // …and the agent has read it
    assert.equal(aborted, null, "only the asker may cancel its request");
    await c.publish(space, note, { to: agent.agentId });
    assert.match((await within(10_000, abortP, "the abort")).message, /cancelled/);
  });

  test("a streamed reply the asker cancels stops the handler within a second", async () => {
    const produced = [];
    let stopped;
    const stoppedP = new Promise((r) => (stopped = r));
    const { space, agent } = await serving(async function* (event, signal) {
      try {
        for (let i = 0; i < 400 && !signal.aborted; i++) {
          produced.push(i);
          yield `token ${i} `;
          await sleep(50);
        }
      } finally {
        stopped(performance.now());
      }
    });
    const c = await asker(space);
    const frames = c.events(space, { chunks: true });
    await c.publish(space, "stream me a long answer", { to: agent.agentId });
    const first = await nextMatching(frames, (f) => f.kind === "delta");
    await c.cancelStream(space, first.eventId);
    const cancelledAt = performance.now();
    const stoppedAt = await within(5_000, stoppedP, "the handler stopping");
    assert.ok(stoppedAt - cancelledAt < 1000, `stopped ${Math.round(stoppedAt - cancelledAt)} ms after the cancel`);
    assert.ok(produced.length < 400);
  });

  test("200 askers that leave mid-answer: nothing thrown, nothing logged above info, every handler settles", async () => {
    // Work in progress (handlers and their streams), and a wake-up when none is left.
    let active = 0;
    let calls = 0;
    let idle = () => {};
    const finishedOne = () => {
      active -= 1;
      if (active === 0) idle();
    };
    const { space, agent, served, logged } = await serving(
      async (event, signal) => {
        calls += 1;
        active += 1;
        try {
          if (event.text.startsWith("stream")) {
            return (async function* () {
              active += 1; // the stream's own work
              try {
                for (let i = 0; i < 20 && !signal.aborted; i++) {
                  await sleep(20);
                  yield `${i} `;
                }
              } finally {
                finishedOne();
              }
            })();
          }
          await sleep(Math.random() * 300);
          return `answer to ${event.text}`;
        } finally {
          finishedOne();
        }
      },
      { concurrency: 16 }, // the hub's max_streams_per_agent: more would be refused streams
    );
    let settled = false;
    served.then(() => (settled = true), () => (settled = true));
    const one = async (i) => {
      const c = new Client(hub.url, unique(`hit-${i}`), { reconnect: false, logger: null });
      await c.connect();
      try {
        await c.join(space);
        await c.publish(space, `${i % 2 ? "stream" : "plain"} question ${i}`, { to: agent.agentId });
        await sleep(Math.random() * 300);
      } finally {
        await c.close();
      }
    };
    for (let batch = 0; batch < 4; batch++) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => one(batch * 50 + i)));
    }
    const last = await asker(space, "last-asker");
    assert.equal((await last.request(space, "plain last", { timeout: 15_000 })).text, "answer to plain last");
    if (active > 0) await within(10_000, new Promise((r) => (idle = r)), "every handler settling");
    assert.ok(calls > 1, `${calls} requests reached the handler`);
    assert.equal(settled, false, "serve() still runs");
    assert.deepEqual(logged.filter((line) => !line.startsWith("info ")), []);
    await agent.close();
    await within(10_000, served, "serve() ending with the client");
  });
});

describe("a producer hears its receivers", () => {
  test("the only receiver cancels: stream.signal aborts and the next write rejects", async () => {
    const space = unique("s");
    const alice = await connect("alice");
    const bob = await connect("bob");
    await alice.join(space);
    await bob.join(space);
    const frames = bob.events(space, { chunks: true });
    const s = alice.stream(space, { to: bob.agentId, echo: false });
    const aborted = new Promise((r) => s.signal.addEventListener("abort", () => r(s.signal.reason)));
    await s.write("first ");
    const first = await nextMatching(frames, (f) => f.kind === "delta");
    await bob.cancelStream(space, first.eventId);
    const reason = await within(5_000, aborted, "stream.signal aborting");
    assert.ok(reason instanceof StreamCancelled && reason.reason === "receiver_cancelled", String(reason));
    await assert.rejects(s.write("second"), (e) => e instanceof StreamCancelled && e.reason === "receiver_cancelled");
  });

  test("every receiver leaves: receivers_left", async () => {
    const space = unique("s");
    const [alice, bob, carol] = [await connect("alice"), await connect("bob"), await connect("carol")];
    for (const c of [alice, bob, carol]) await c.join(space);
    const s = alice.stream(space, { to: [bob.agentId, carol.agentId] });
    const aborted = new Promise((r) => s.signal.addEventListener("abort", () => r(s.signal.reason)));
    await s.write("for two");
    await bob.leave(space);
    await carol.close();
    assert.equal((await within(5_000, aborted, "stream.signal aborting")).reason, "receivers_left");
    await assert.rejects(s.end(), StreamCancelled);
  });
});
