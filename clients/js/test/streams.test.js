// Streams both ways, cancellation by publisher, receiver and hub, and
// request/reply between agents — against a real hub process.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, RateLimited, ReplyTimeout, RequestTimeout, StreamCancelled, Unauthorized } from "agora-hub-client";

import { HubProcess, nextMatching, unique } from "./support/servers.js";

const hub = new HubProcess({
  stream_threshold: 2048,
  stream_chunk: 512,
  max_streams_per_agent: 3,
  stream_idle_timeout: 1,
});
const clients = [];

async function connect(name) {
  const client = new Client(hub.url, unique(name), { reconnect: false });
  clients.push(client);
  return client.connect();
}

/** `n` clients joined to a fresh space. */
async function room(...names) {
  const space = unique("room");
  const members = await Promise.all(names.map(connect));
  for (const m of members) await m.join(space);
  return [space, ...members];
}

before(() => hub.start());
after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await hub.stop();
});

describe("outgoing streams", () => {
  test("a stream arrives assembled, with its first delta's fields", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const events = bob.events(space);
    const s = alice.stream(space, { data: { model: "m1" } });
    await s.write("Hel");
    await s.write("lo ", { extra: true });
    await s.write("world");
    const seq = await s.end();
    const got = await events.take(5000);
    assert.deepEqual(
      [got.kind, got.streamed, got.status, got.text, got.data.model, got.from, got.eventId, got.chunks, got.seq],
      ["event", true, "complete", "Hello world", "m1", alice.agentId, s.hubEventId, 3, seq],
    );
    assert.equal(s.state, "done");
    assert.equal(await s.end(), seq, "end() is idempotent");
    events.close();
  });

  test("chunks: true yields the frames as they come", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const frames = bob.events(space, { chunks: true });
    const s = alice.stream(space, { eventId: "tokens-1" });
    await s.write("a");
    await s.write("b");
    await s.end();
    const got = [await frames.take(5000), await frames.take(5000), await frames.take(5000)];
    assert.deepEqual(got.map((c) => [c.kind, c.text, c.eventId]), [
      ["delta", "a", `${alice.agentId}/tokens-1`],
      ["delta", "b", `${alice.agentId}/tokens-1`],
      ["done", "", `${alice.agentId}/tokens-1`],
    ]);
    assert.ok(got[0].seq < got[1].seq && got[1].seq < got[2].seq);
    frames.close();
  });

  test("token writes are coalesced into few deltas; coalesce: 0 sends one per write", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const frames = bob.events(space, { chunks: true });
    const s = alice.stream(space, { echo: false });
    const tokens = Array.from({ length: 400 }, (_, i) => `t${i} `);
    for (const token of tokens) await s.write(token); // far above the hub's 100 messages/s
    await s.end();
    const deltas = [];
    for (let frame = await frames.take(5000); frame.kind === "delta"; frame = await frames.take(5000)) deltas.push(frame);
    assert.equal(deltas.map((d) => d.text).join(""), tokens.join(""));
    assert.equal(s.written, 400);
    assert.equal(s.sent, deltas.length);
    assert.ok(deltas.length < 40, `${deltas.length} deltas`);

    const plain = alice.stream(space, { coalesce: 0, echo: false });
    for (const token of ["a", "b", "c"]) await plain.write(token);
    await plain.end();
    const each = [await frames.take(5000), await frames.take(5000), await frames.take(5000)];
    assert.deepEqual(each.map((f) => [f.kind, f.text]), [["delta", "a"], ["delta", "b"], ["delta", "c"]]);
    frames.close();
  });

  test("pipe() streams an async iterable; a failing one cancels the stream", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const events = bob.events(space);
    async function* tokens() {
      for (const t of ["one ", "two ", "three"]) yield t;
    }
    await alice.stream(space, { echo: false }).pipe(tokens());
    assert.equal((await events.take(5000)).text, "one two three");

    async function* failing() {
      yield "partial";
      throw new Error("model crashed");
    }
    await assert.rejects(alice.stream(space).pipe(failing()), /model crashed/);
    const cut = await events.take(5000);
    assert.deepEqual([cut.status, cut.reason, cut.text, cut.complete], ["cancelled", "error: Error", "partial", false]);
    events.close();
  });

  test("the publisher cancels: receivers get the reason, later writes throw", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const events = bob.events(space);
    const s = alice.stream(space);
    await s.write("so far");
    await s.cancel("user stop");
    const got = await events.take(5000);
    assert.deepEqual([got.status, got.reason, got.text], ["cancelled", "user stop", "so far"]);
    await assert.rejects(s.write("more"), (e) => e instanceof StreamCancelled && e.reason === "user stop");
    events.close();
  });

  test("a receiver cancels for itself only", async () => {
    const [space, alice, bob, carol] = await room("alice", "bob", "carol");
    const bobFrames = bob.events(space, { chunks: true });
    const carolEvents = carol.events(space);
    const s = alice.stream(space);
    await s.write("first ");
    const first = await bobFrames.take(5000);
    await bob.cancelStream(space, first.eventId);
    const ack = await bobFrames.take(5000);
    assert.deepEqual([ack.kind, ack.reason], ["cancel", "receiver_cancelled"]);
    await s.write("second");
    await s.end();
    const whole = await carolEvents.take(5000);
    assert.deepEqual([whole.status, whole.text], ["complete", "first second"]);
    await assert.rejects(bobFrames.take(300), RequestTimeout, "bob gets nothing more of it");
    bobFrames.close();
    carolEvents.close();
  });

  test("a stream silent for incompleteTimeout is given up by the receiver", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const events = bob.events(space, { incompleteTimeout: 200 });
    const s = alice.stream(space);
    await s.write("and then");
    const gone = await events.take(5000);
    assert.deepEqual([gone.status, gone.reason, gone.text], ["incomplete", "incomplete_timeout", "and then"]);
    // (on a slow machine the hub's own idle timeout, 1 s, may have ended it first)
    await s.end().catch((e) => assert.ok(e instanceof StreamCancelled, String(e)));
    await assert.rejects(events.take(300), RequestTimeout, "its end is not reported again");
    events.close();
  });

  test("the hub ends an idle stream: the next write says why", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const events = bob.events(space);
    const s = alice.stream(space);
    await s.write("then nothing");
    const cut = await events.take(10_000); // stream_idle_timeout is 1 s
    assert.deepEqual([cut.status, cut.reason], ["cancelled", "idle_timeout"]);
    await alice.ping(); // the relay of the cancel has reached alice too
    await assert.rejects(s.write("late"), (e) => e instanceof StreamCancelled && e.reason === "idle_timeout");
    events.close();
  });

  test("refusals: the first write throws them; too many open streams is RateLimited", async () => {
    const alice = await connect("alice");
    await assert.rejects(alice.stream(unique("notjoined")).write("x"), (e) => e.code === "SPACE_NOT_FOUND" || e instanceof Unauthorized);
    const space = unique("many");
    await alice.join(space);
    const open = [alice.stream(space), alice.stream(space), alice.stream(space)];
    for (const s of open) await s.write("x");
    const fourth = alice.stream(space);
    await assert.rejects(fourth.write("x"), RateLimited);
    for (const s of open) await s.end();
  });
});

describe("big publishes", () => {
  test("a text over the hub's threshold is streamed by the hub and assembled exactly", async () => {
    const [space, alice, bob] = await room("alice", "bob");
    const events = bob.events(space);
    const text = "ü€😀x".repeat(1000); // multi-byte characters across chunk boundaries
    const sent = await alice.publish(space, { text, topic: "big" });
    assert.equal(sent.streamed, true);
    const got = await events.take(5000);
    assert.deepEqual([got.streamed, got.status, got.data.topic, got.eventId], [true, "complete", "big", sent.eventId]);
    assert.ok(got.chunks > 1);
    assert.equal(got.text, text);
    events.close();
  });
});

describe("request and reply", () => {
  test("request() resolves with the reply; reply() addresses the asker", async () => {
    const [space, asker, answerer, bystander] = await room("asker", "answerer", "bystander");
    const questions = answerer.events(space);
    const seen = bystander.events(space);
    const answered = (async () => {
      const question = await nextMatching(questions, (e) => e.from === asker.agentId);
      await answerer.reply(question, { text: `echo: ${question.text}` });
    })();
    const reply = await asker.request(space, "ping?", { to: answerer.agentId, timeout: 5000 });
    await answered;
    assert.equal(reply.text, "echo: ping?");
    assert.equal(reply.from, answerer.agentId);
    assert.equal(reply.inReplyTo, reply.data.in_reply_to);
    assert.equal(reply.to, asker.agentId);
    assert.equal(typeof reply.data.in_reply_to, "string");
    await assert.rejects(seen.take(300), RequestTimeout, "neither the question nor the answer reached the bystander");
    questions.close();
    seen.close();
  });

  test("a streamed reply is assembled; a long reply streamed by the hub too", async () => {
    const [space, asker, answerer] = await room("asker", "answerer");
    const questions = answerer.events(space);
    const answering = (async () => {
      const q1 = await nextMatching(questions, (e) => e.from === asker.agentId);
      await answerer.replyStream(q1).pipe(["tok", "en", "s"]);
      const q2 = await nextMatching(questions, (e) => e.from === asker.agentId);
      await answerer.reply(q2, "z".repeat(5000));
    })();
    const streamed = await asker.request(space, "first", { timeout: 5000 });
    assert.deepEqual([streamed.streamed, streamed.status, streamed.text], [true, "complete", "tokens"]);
    const long = await asker.request(space, "second", { timeout: 5000 });
    assert.deepEqual([long.streamed, long.text.length], [true, 5000]);
    await answering;
    questions.close();
  });

  test("reply(to: null) answers in front of everyone", async () => {
    const [space, asker, answerer, bystander] = await room("asker", "answerer", "bystander");
    const questions = answerer.events(space);
    const seen = bystander.events(space);
    const asking = asker.request(space, "anyone?", { timeout: 5000 });
    const question = await nextMatching(questions, (e) => e.from === asker.agentId);
    const answer = await answerer.reply(question, "yes", { to: null });
    assert.equal(answer.to, null);
    assert.equal((await asking).eventId, answer.eventId);
    const heard = await nextMatching(seen, (e) => e.from === answerer.agentId);
    assert.deepEqual([heard.text, heard.inReplyTo], ["yes", question.eventId]);
    questions.close();
    seen.close();
  });

  test("only a reply in the request's space from an agent it asked answers it (§18)", async () => {
    const [space, asker, helper, mallory] = await room("asker", "helper", "mallory");
    const pub = unique("pub");
    for (const c of [asker, helper, mallory]) await c.join(pub);
    const questions = helper.events(space);
    const seen = { [space]: asker.events(space), [pub]: asker.events(pub) };
    let settled = false;
    const asking = asker.request(space, "a question", { to: helper.agentId, timeout: 5000 });
    asking.then(() => (settled = true), () => (settled = true));
    const question = await nextMatching(questions, (e) => e.from === asker.agentId);
    const forged = { in_reply_to: question.eventId };
    await mallory.publish(pub, { ...forged, text: "forged in pub" });
    await mallory.publish(space, { ...forged, text: "forged, not asked" });
    await mallory.stream(space, { data: forged }).pipe(["forged ", "stream"]);
    await helper.publish(pub, { ...forged, text: "helper, in pub" });
    for (const [where, sub] of Object.entries(seen)) {
      const marker = await mallory.publish(where, "marker"); // the asker's reader has handled all of it
      await nextMatching(sub, (e) => e.eventId === marker.eventId);
    }
    assert.equal(settled, false, "no forged reply answered the request");
    await helper.reply(question, "genuine");
    const reply = await asking;
    assert.deepEqual([reply.space, reply.from, reply.text], [space, helper.agentId, "genuine"]);

    // Unaddressed: any member of its space answers it (streamed here), not another space.
    const unaddressed = asker.request(space, "anyone?", { timeout: 5000 });
    const open = await nextMatching(questions, (e) => e.from === asker.agentId && e.text === "anyone?");
    const elsewhere = await mallory.publish(pub, { in_reply_to: open.eventId, text: "from pub" });
    await nextMatching(seen[pub], (e) => e.eventId === elsewhere.eventId);
    await mallory.replyStream(open).pipe(["any ", "member"]);
    const answer = await unaddressed;
    assert.deepEqual([answer.space, answer.from, answer.text], [space, mallory.agentId, "any member"]);
    for (const sub of [questions, ...Object.values(seen)]) sub.close();
  });

  test("no reply in time is a ReplyTimeout", async () => {
    const [space, asker] = await room("asker", "silent");
    await assert.rejects(asker.request(space, "anyone?", { timeout: 300 }), (e) => {
      assert.ok(e instanceof ReplyTimeout && e instanceof RequestTimeout);
      assert.match(e.eventId, /./, "the request was published: its id says which");
      return true;
    });
  });
});
