// A two-node cluster over a real redis-server: a node is killed, the client moves
// to the other node and resumes with `since` — every event published meanwhile
// arrives, in order, once (`recovered: true`).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client } from "agora-hub-client";

import { HubProcess, RedisServer, nextMatching, required, unique, within } from "./support/servers.js";

const redisBinary = required("redis-server", ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]);
const cleanup = [];
let nodeA;
let nodeB;

before(async () => {
  if (redisBinary === null) return;
  const redis = await new RedisServer(redisBinary).start();
  cleanup.push(() => redis.stop());
  nodeA = new HubProcess({ redis_url: redis.url, node_id: unique("node-a") });
  nodeB = new HubProcess({ redis_url: redis.url, node_id: unique("node-b") });
  cleanup.push(() => nodeA.kill(), () => nodeB.stop());
  await Promise.all([nodeA.start(), nodeB.start()]);
});

after(async () => {
  for (const step of cleanup.reverse()) await step();
});

test("a node killed: the client resumes on the other node and recovers every event", { skip: redisBinary === null && "redis-server is not installed" }, async () => {
  const space = unique("cluster");
  const resumes = [];
  const watcher = new Client([nodeA.url, nodeB.url], unique("watcher"), {
    reconnect: { initialDelay: 100, maxDelay: 500 },
    onResume: (r) => resumes.push(r),
    logger: null,
  });
  const publisher = new Client(nodeB.url, unique("publisher"), { reconnect: false });
  cleanup.push(() => watcher.close(), () => publisher.close());
  await watcher.connect(); // on node A: the first URL
  await publisher.connect();
  await watcher.join(space);
  await publisher.join(space);
  const events = watcher.events(space);

  const published = [];
  for (let i = 0; i < 3; i++) published.push(await publisher.publish(space, `before ${i}`));
  for (const sent of published) assert.equal((await events.take(5000)).eventId, sent.eventId);

  await nodeA.kill();
  // Published on node B while the watcher has no connection at all.
  for (let i = 0; i < 5; i++) published.push(await publisher.publish(space, `during ${i}`));
  await within(20_000, watcher.waitConnected(20_000), "the watcher reconnecting to node B");
  for (let i = 0; i < 2; i++) published.push(await publisher.publish(space, `after ${i}`));

  const received = [];
  while (received.length < published.length - 3) {
    received.push(await events.take(10_000));
  }
  assert.deepEqual(
    received.map((e) => e.text),
    published.slice(3).map((e) => e.text),
    "every event once, in order",
  );
  assert.deepEqual(received.map((e) => e.seq), published.slice(3).map((e) => e.seq));
  assert.deepEqual(resumes.map((r) => [r.space, r.recovered]), [[space, true]]);
  assert.equal(watcher.reconnects, 1);
  // The watcher is on node B now: a member there, cluster-wide.
  const member = (await publisher.listAgents({ space })).agents.find((a) => a.id === watcher.agentId);
  assert.equal(member.node, nodeB.settings.node_id);
  const more = await publisher.publish(space, "last");
  assert.equal((await nextMatching(events, (e) => e.eventId === more.eventId)).text, "last");
  events.close();
});
