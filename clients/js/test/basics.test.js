// The client against a real hub process: connecting, registering, joining,
// publishing (addressed, idempotent), history, the directory, and the hub's refusals.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AgentExists,
  Client,
  ConnectionFailed,
  InvalidRequest,
  SpaceNotFound,
  Unauthorized,
} from "agora-hub-client";

import { HubProcess, nextMatching, unique } from "./support/servers.js";

// heartbeat_timeout 2 s: a client that did not heartbeat would be closed (4408).
const hub = new HubProcess({ members_list_limit: 3, heartbeat_timeout: 2 });
const clients = [];

/** A connected client, closed after the tests. */
async function connect(agentId, options = {}) {
  const client = new Client(hub.url, agentId, { reconnect: false, ...options });
  clients.push(client);
  return client.connect();
}

before(() => hub.start());
after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await hub.stop();
});

describe("connecting", () => {
  test("connect registers the agent with the hub's heartbeat settings", async () => {
    const id = unique("alice");
    const client = await connect(id);
    assert.equal(client.state, "open");
    assert.equal(client.registration.agentId, id);
    assert.match(client.registration.connectionId, /./);
    assert.equal(client.registration.heartbeatInterval, 500);
    assert.equal(client.registration.heartbeatTimeout, 2000);
    assert.ok((await client.ping()) > 1_600_000_000_000);
  });

  test("an idle client keeps its connection with heartbeats", async () => {
    // The hub closes a connection silent for its heartbeat_timeout (2 s here): stay
    // idle past it, and the connection must still be the same, open one.
    const states = [];
    const client = await connect(unique("quiet"), { onStateChange: (state) => states.push(state) });
    const connectionId = client.registration.connectionId;
    await new Promise((r) => setTimeout(r, 3000));
    assert.deepEqual([client.state, states], ["open", ["connecting", "open"]]);
    assert.ok(await client.ping());
    assert.equal(client.registration.connectionId, connectionId);
  });

  test("an invalid agent id is refused before anything is sent", () => {
    assert.throws(() => new Client(hub.url, "-bad id"), TypeError);
    assert.throws(() => new Client("http://[bad", "ok"), TypeError);
    assert.throws(() => new Client("ftp://host/ws", "ok"), TypeError);
  });

  test("a hub that is not there fails the first connect at once", async () => {
    const client = new Client("ws://127.0.0.1:1/ws", unique("nobody"), { logger: null });
    const connecting = client.connect();
    const waiting = client.waitConnected();
    await assert.rejects(connecting, (e) => e instanceof ConnectionFailed && /refused/.test(e.message));
    await assert.rejects(waiting, ConnectionFailed, "whoever waited hears of it too");
    assert.equal(client.state, "idle");
    await assert.rejects(client.ping(), /not connected/);
  });

  test("a second connection with the same id is refused with AgentExists (4409)", async () => {
    const id = unique("twin");
    await connect(id);
    const twin = new Client(hub.url, id, { reconnect: false });
    await assert.rejects(twin.connect(), AgentExists);
  });

  test("details given at construction are in the handshake; register() updates them", async () => {
    const id = unique("planner");
    const client = await connect(id, { type: "planner", capabilities: ["urn:test:plan"], metadata: { v: 1 } });
    let [entry] = (await client.listAgents({ capability: "urn:test:plan" })).agents.filter((a) => a.id === id);
    assert.deepEqual([entry.type, entry.capabilities, entry.metadata], ["planner", ["urn:test:plan"], { v: 1 }]);
    const registration = await client.register({ metadata: { v: 2 } });
    assert.equal(registration.agentId, id);
    [entry] = (await client.listAgents({ capability: "urn:test:*" })).agents.filter((a) => a.id === id);
    assert.deepEqual([entry.type, entry.metadata], ["planner", { v: 2 }]);
  });
});

describe("spaces and publishing", () => {
  test("join, publish, receive: every member gets the event, the sender's echo acknowledges it", async () => {
    const space = unique("general");
    const alice = await connect(unique("alice"));
    const bob = await connect(unique("bob"));
    const joined = await alice.join(space);
    assert.deepEqual([joined.members, joined.memberCount], [[alice.agentId], 1]);
    assert.equal(typeof joined.epoch, "string");
    await bob.join(space);
    const bobEvents = bob.events(space);
    const sent = await alice.publish(space, { text: "hello", n: 1 });
    assert.equal(sent.from, alice.agentId);
    assert.ok(sent.seq > joined.seq);
    const got = await bobEvents.take(5000);
    assert.deepEqual(
      [got.kind, got.eventId, got.seq, got.from, got.text, got.data.n, got.complete],
      ["event", sent.eventId, sent.seq, alice.agentId, "hello", 1, true],
    );
    assert.equal(bob.lastSeq(space), sent.seq);
    assert.deepEqual(bob.position(space), { epoch: joined.epoch, seq: sent.seq });
    bobEvents.close();
  });

  test("nothing is lost between join() and the first events() call", async () => {
    const space = unique("backlog");
    const alice = await connect(unique("alice"));
    const bob = await connect(unique("bob"));
    await alice.join(space);
    await bob.join(space);
    for (let i = 0; i < 3; i++) await alice.publish(space, `m${i}`);
    await bob.ping(); // everything before the ping's answer has arrived
    const texts = [];
    for await (const event of bob.events(space)) {
      texts.push(event.text);
      if (texts.length === 3) break;
    }
    assert.deepEqual(texts, ["m0", "m1", "m2"]);
  });

  test("a full iterator drops its oldest items and counts them (queueSize)", async () => {
    const space = unique("overflow");
    const alice = await connect(unique("alice"));
    const bob = await connect(unique("bob"), { queueSize: 3, logger: null });
    await alice.join(space);
    await bob.join(space);
    const events = bob.events(space);
    for (let i = 0; i < 5; i++) await alice.publish(space, `m${i}`);
    await bob.ping(); // all five have arrived
    assert.equal(events.dropped, 2);
    const texts = [await events.take(1000), await events.take(1000), await events.take(1000)].map((e) => e.text);
    assert.deepEqual(texts, ["m2", "m3", "m4"]);
    events.close();
  });

  test("echo: false is acknowledged by space.published; the sender gets no copy", async () => {
    const space = unique("quiet");
    const alice = await connect(unique("alice"));
    await alice.join(space);
    const mine = alice.events(space);
    const sent = await alice.publish(space, "not for me", { echo: false });
    assert.match(sent.eventId, /./);
    assert.ok(sent.seq > 0);
    const echoed = await alice.publish(space, "for me");
    const got = await mine.take(5000);
    assert.equal(got.eventId, echoed.eventId, "only the echoed publish comes back");
    mine.close();
  });

  test("addressed publish reaches the named members only", async () => {
    const space = unique("addressed");
    const [alice, bob, carol] = await Promise.all(["alice", "bob", "carol"].map((n) => connect(unique(n))));
    for (const c of [alice, bob, carol]) await c.join(space);
    const bobEvents = bob.events(space);
    const carolEvents = carol.events(space);
    const secret = await alice.publish(space, "psst", { to: bob.agentId });
    const open = await alice.publish(space, "everyone");
    const toBob = await bobEvents.take(5000);
    assert.deepEqual([toBob.eventId, toBob.to], [secret.eventId, bob.agentId]);
    assert.equal((await bobEvents.take(5000)).eventId, open.eventId);
    assert.equal((await carolEvents.take(5000)).eventId, open.eventId, "carol never saw the addressed one");
    await assert.rejects(alice.publish(space, "x", { to: "not-a-member" }), InvalidRequest);
  });

  test("an idempotency key publishes once; the repeat gets the original's ids", async () => {
    const space = unique("idem");
    const alice = await connect(unique("alice"));
    await alice.join(space);
    const first = await alice.publish(space, "once", { idempotencyKey: "k-1" });
    const again = await alice.publish(space, "once", { idempotencyKey: "k-1" });
    assert.deepEqual([again.eventId, again.seq, again.duplicate], [first.eventId, first.seq, true]);
    const page = await alice.history(space);
    assert.equal(page.events.filter((e) => e.text === "once").length, 1);
  });

  test("history pages back, oldest first", async () => {
    const space = unique("history");
    const alice = await connect(unique("alice"));
    await alice.join(space);
    for (let i = 0; i < 5; i++) await alice.publish(space, `h${i}`);
    const newest = await alice.history(space, { limit: 3 });
    assert.deepEqual(newest.events.map((e) => e.text), ["h2", "h3", "h4"]);
    const older = await alice.history(space, { limit: 3, beforeSeq: newest.nextBeforeSeq });
    assert.deepEqual(older.events.map((e) => e.text), ["h0", "h1"]);
    assert.equal(older.nextBeforeSeq, null);
  });

  test("spaces, members (paged), member events, leave", async () => {
    const space = unique("room");
    const agents = await Promise.all(["a", "b", "c", "d", "e"].map((n) => connect(unique(n))));
    const [first, ...rest] = agents;
    await first.join(space);
    const changes = first.events(space, { members: true });
    for (const c of rest) await c.join(space);
    // Joins close together come coalesced (joinedIds lists several); all are told once.
    const joined = [];
    let big;
    while (joined.length < rest.length) {
      big = await nextMatching(changes, (m) => m.kind === "members");
      assert.equal(big.joined, big.joinedIds.length === 1 ? big.joinedIds[0] : null);
      if (big.members !== null) assert.equal(big.members.length, big.memberCount);
      joined.push(...big.joinedIds);
    }
    assert.deepEqual(joined, rest.map((c) => c.agentId));
    // Above members_list_limit (3) the hub sends no list: the count stays exact.
    assert.deepEqual([big.members, big.memberCount], [null, 5]);

    const page = await first.members(space, { limit: 2 });
    assert.deepEqual([page.members.length, page.memberCount], [2, 5]);
    assert.notEqual(page.nextCursor, null);
    assert.deepEqual(await first.allMembers(space), agents.map((a) => a.agentId));
    const info = (await first.spaces()).find((s) => s.id === space);
    assert.deepEqual(info, { id: space, type: "public", memberCount: 5 });
    assert.ok((await first.spaces()).some((s) => s.id === "agent.status" && s.type === "system"));

    await rest[0].leave(space);
    const left = await nextMatching(changes, (m) => m.kind === "members" && m.leftIds.includes(rest[0].agentId));
    assert.equal(left.memberCount, 4);
    assert.deepEqual(rest[0].joinedSpaces, []);
    changes.close();
  });

  test("the directory finds agents by capability and by space, paging", async () => {
    const space = unique("dir");
    const tag = unique("urn:dir");
    const found = await Promise.all(
      [0, 1, 2].map((i) => connect(unique(`tool${i}`), { capabilities: [`${tag}:v${i}`] })),
    );
    const other = await connect(unique("other"));
    await found[0].join(space);
    await other.join(space);
    const byCapability = await other.findAgents({ capability: `${tag}:*` });
    assert.deepEqual(byCapability.map((a) => a.id).sort(), found.map((c) => c.agentId).sort());
    const exact = await other.listAgents({ capability: `${tag}:v1` });
    assert.deepEqual([exact.agents.map((a) => a.id), exact.nextCursor], [[found[1].agentId], null]);
    assert.match(exact.agents[0].node, /./);
    assert.ok(exact.agents[0].connectedAt > 0);
    const members = await other.findAgents({ space });
    assert.deepEqual(members.map((a) => a.id), [found[0].agentId, other.agentId]);
    const firstPage = await other.listAgents({ capability: `${tag}:*`, limit: 2 });
    assert.equal(firstPage.agents.length, 2);
    assert.notEqual(firstPage.nextCursor, null);
  });
});

describe("refusals are typed errors", () => {
  test("publishing without joining, to a system space, to a bad name", async () => {
    const alice = await connect(unique("alice"));
    await assert.rejects(alice.publish(unique("nojoin"), "x"), (e) => e instanceof SpaceNotFound || e instanceof Unauthorized);
    await alice.join("agent.status");
    await assert.rejects(alice.publish("agent.status", "x"), Unauthorized);
    await assert.rejects(alice.join("Not A Space"), (e) => {
      assert.ok(e instanceof InvalidRequest);
      assert.equal(e.code, "INVALID_REQUEST");
      assert.match(e.requestId, /^c\d+$/);
      return true;
    });
    await assert.rejects(alice.join("file.nothing"), SpaceNotFound);
    await assert.rejects(alice.leave(unique("never")), InvalidRequest);
    await assert.rejects(alice.publish("x", 42), TypeError);
    assert.equal(alice.state, "open", "refusals leave the connection open");
  });

  test("agent.status shows others coming online with their details", async () => {
    const watcher = await connect(unique("watcher"));
    await watcher.join("agent.status");
    const status = watcher.events("agent.status");
    const id = unique("newcomer");
    await connect(id, { type: "tool", capabilities: ["urn:x"] });
    const online = await nextMatching(status, (e) => e.data.event === "online" && e.data.agent.id === id);
    assert.equal(online.from, "@hub");
    assert.deepEqual([online.data.agent.type, online.data.agent.capabilities], ["tool", ["urn:x"]]);
    status.close();
  });
});
