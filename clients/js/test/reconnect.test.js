// Losing the connection: automatic reconnect and resume after a hub restart
// (memory backplane: `recovered: false`), streams cut off by the loss, and the
// refusals that stop the client instead of retrying (4401 while reconnecting,
// 4403 from an operator, 4401 at connect).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Client,
  ConnectionClosed,
  ConnectionFailed,
  StreamCancelled,
  Unauthorized,
} from "agora-hub-client";

import { HubProcess, jwt, nextMatching, rewriteTokens, tokensFile, unique, within } from "./support/servers.js";

const cleanup = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

/** A promise for the client's next change to `state`, with the error that caused it. */
function nextState(states, state) {
  return new Promise((resolve) => states.push({ state, resolve }));
}

/** Options that record state changes into `waiters` (see nextState). */
function watching(waiters) {
  return (state, error) => {
    for (const waiter of waiters.filter((w) => w.state === state)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(error);
    }
  };
}

describe("a hub restarted (memory backplane)", () => {
  test("the client reconnects, rejoins, says recovered: false, and ends what the loss cut off", async () => {
    const hub = await new HubProcess().start();
    cleanup.push(() => hub.stop());
    const space = unique("restart");
    const waiters = [];
    const resumes = [];
    const warnings = [];
    const alice = new Client(hub.url, unique("alice"), {
      reconnect: { initialDelay: 200, maxDelay: 1000 },
      onResume: (r) => resumes.push(r),
      onStateChange: watching(waiters),
      logger: { warn: (m) => warnings.push(m) },
    });
    const bob = new Client(hub.url, unique("bob"), { reconnect: { initialDelay: 200, maxDelay: 1000 }, logger: null });
    cleanup.push(() => alice.close(), () => bob.close());
    await alice.connect();
    await bob.connect();
    await alice.join(space);
    await bob.join(space);
    const others = [unique("other"), unique("other")];
    for (const other of others) await alice.join(other);
    const assembled = alice.events(space, { resumed: true });
    const frames = alice.events(space, { chunks: true });
    const before = await bob.publish(space, "before the restart");
    assert.equal((await assembled.take(5000)).eventId, before.eventId);
    assert.equal((await frames.take(5000)).eventId, before.eventId);

    // Each side has a stream open when the hub goes away.
    const incoming = bob.stream(space);
    await incoming.write("half of it");
    assert.equal((await frames.take(5000)).kind, "delta");
    const position = alice.position(space);
    const outgoing = alice.stream(space, { echo: false });
    await outgoing.write("mine");

    const lost = nextState(waiters, "reconnecting");
    await hub.stop(); // SIGTERM: the hub closes every connection with 1001
    const cause = await within(10_000, lost, "alice noticing the loss");
    assert.ok(cause instanceof ConnectionClosed);
    assert.equal(cause.closeCode, 1001);
    // One line says why and what happens, without the hub's advice repeated.
    assert.deepEqual(warnings.filter((m) => m.includes("reconnecting")), ["hub shutting down; reconnecting"]);

    // The stream being received ends — assembled as incomplete, as frames with a cancel.
    const cut = await assembled.take(5000);
    assert.deepEqual(
      [cut.eventId, cut.streamed, cut.status, cut.reason, cut.text],
      [incoming.hubEventId, true, "incomplete", "connection_lost", "half of it"],
    );
    const cutFrame = await frames.take(5000);
    assert.deepEqual([cutFrame.kind, cutFrame.reason, cutFrame.eventId], ["cancel", "connection_lost", incoming.hubEventId]);
    // The stream being sent says so at its next write.
    await assert.rejects(outgoing.write("more"), (e) => e instanceof StreamCancelled && e.reason === "connection_lost");

    // A publish made while disconnected waits for the connection.
    const queued = alice.publish(space, "sent while away");
    const back = nextState(waiters, "open");
    await hub.start(); // same ports, fresh memory: new epochs
    await within(15_000, back, "alice reconnecting");
    assert.equal(alice.reconnects, 1);
    const sent = await queued;

    const resumed = await nextMatching(assembled, (m) => m.kind === "resumed");
    assert.deepEqual([resumed.space, resumed.recovered, resumed.since], [space, false, position]);
    assert.notEqual(resumed.epoch, position.epoch);
    assert.deepEqual(
      resumes.map((r) => [r.space, r.recovered]).sort(),
      [space, ...others].map((s) => [s, false]).sort(),
      "every joined space rejoined",
    );
    assert.equal((await nextMatching(assembled, (m) => m.kind === "event")).eventId, sent.eventId);

    // And the space works as before, for both.
    await bob.waitConnected(15_000);
    const bobEvents = bob.events(space);
    const after = await alice.publish(space, "after the restart");
    assert.equal((await nextMatching(bobEvents, (e) => e.eventId === after.eventId)).text, "after the restart");
    assert.deepEqual(alice.joinedSpaces, [space, ...others]);
    for (const sub of [assembled, frames, bobEvents]) sub.close();
  });
});

describe("tokens that expire", () => {
  test("the token provider's next token goes to the hub as agent.refresh; its claims apply", async () => {
    const secret = "a-jwt-secret-of-at-least-32-bytes-0123456789";
    const hub = await new HubProcess({ auth_mode: "jwt", jwt_secret: secret, jwt_leeway: 0, token_refresh_grace: 2 }).start();
    cleanup.push(() => hub.stop());
    const id = unique("jwt-agent");
    let issued = 0;
    let refreshed;
    const secondToken = new Promise((resolve) => (refreshed = resolve));
    const tokenProvider = async () => {
      issued += 1;
      const first = issued === 1;
      if (!first) refreshed();
      const exp = Math.floor(Date.now() / 1000) + (first ? 2 : 600);
      return jwt(secret, { sub: id, exp, join: first ? ["a-*"] : ["a-*", "b-*"] });
    };
    const warnings = [];
    const client = new Client(hub.url, id, { tokenProvider, reconnect: false, logger: { warn: (m) => warnings.push(m) } });
    cleanup.push(() => client.close());
    await client.connect();
    await client.join(unique("a"));
    await assert.rejects(client.join(unique("b")), Unauthorized, "the first token's claims");
    await within(10_000, secondToken, "the hub's expiry notice"); // exp + the hub's sweep
    // The refresh is sent as soon as the provider answers: one round trip later it
    // has been answered too (the hub answers in order).
    await client.ping();
    await client.ping();
    await client.join(unique("b"));
    assert.deepEqual([client.state, issued, warnings], ["open", 2, []]);
  });
});

describe("refusals stop the client", () => {
  // One hub for the three tests, with tokens and the server API; the last test
  // restarts it with a token revoked.
  const apiKey = "api-key-0123456789abcdef";
  const tokens = {
    a1: "token-a1-0123456789",
    a2: "token-a2-0123456789",
    a3: "token-a3-0123456789",
    agent: "first-token-0123456789",
    spammer: "spammer-token-0123456789",
  };
  const path = tokensFile(tokens);
  const hub = new HubProcess({ auth_mode: "tokens", auth_tokens_file: path, api_key: apiKey });
  before(() => hub.start());
  after(() => hub.stop());

  test("a token refused at connect is Unauthorized; header, subprotocol and query all work", async () => {
    const wrong = new Client(hub.url, "a1", { token: "nope-0123456789", reconnect: false });
    await assert.rejects(wrong.connect(), (e) => e instanceof Unauthorized && e.code === "UNAUTHORIZED");
    await assert.rejects(new Client(hub.url, "a1", { reconnect: false }).connect(), Unauthorized);
    const unfit = new Client(hub.url, "a1", { token: "a/b=", tokenIn: "subprotocol", reconnect: false });
    await assert.rejects(unfit.connect(), (e) => e instanceof ConnectionFailed && /subprotocol/.test(e.message));
    // The README's placeholder left in place says so, in every placement, before anything is sent.
    for (const tokenIn of ["header", "subprotocol", "query"]) {
      assert.throws(() => new Client(hub.url, "a1", { token: "…", tokenIn }), /documentation's placeholder/);
    }
    assert.throws(() => new Client(hub.url, "a1", { token: "pasted with a\nline break" }), /no token has/);
    const provided = new Client(hub.url, "a1", { tokenProvider: () => "… ", reconnect: false });
    await assert.rejects(provided.connect(), (e) => e instanceof ConnectionFailed && /no token has/.test(e.message));
    const placements = [
      ["a1", "header"],
      ["a2", "subprotocol"],
      ["a3", "query"],
    ];
    for (const [id, tokenIn] of placements) {
      const client = new Client(hub.url, id, { token: `token-${id}-0123456789`, tokenIn, reconnect: false });
      await client.connect();
      assert.ok(await client.ping(), `token in the ${tokenIn}`);
      await client.close();
    }
  });

  test("an operator's disconnect (4403) is not undone by a reconnect", async () => {
    const waiters = [];
    const id = "spammer";
    const client = new Client(hub.url, id, {
      token: tokens.spammer,
      reconnect: { initialDelay: 100 },
      onStateChange: watching(waiters),
      logger: null,
    });
    await client.connect();
    const closed = nextState(waiters, "closed");
    const response = await fetch(`${hub.httpUrl}/api/agents/${id}/disconnect`, {
      method: "POST",
      headers: { "X-API-Key": apiKey },
      body: JSON.stringify({ reason: "flooding" }),
    });
    assert.equal(response.status, 200);
    const error = await within(10_000, closed, "the disconnect");
    assert.ok(error instanceof ConnectionClosed);
    assert.deepEqual([error.closeCode, error.code], [4403, "DISCONNECTED"]);
    assert.match(error.message, /flooding/);
    assert.equal(client.reconnects, 0);
    await assert.rejects(client.connect(), ConnectionClosed, "a stopped client does not reopen");
    await assert.rejects(client.waitConnected(100), ConnectionClosed);
  });

  test("a reconnect refused with 4401 stops the client with Unauthorized, no retry loop", async () => {
    const waiters = [];
    const logged = [];
    let provided = 0;
    const client = new Client(hub.url, "agent", {
      tokenProvider: () => {
        provided += 1;
        return "first-token-0123456789"; // what it had: revoked meanwhile
      },
      reconnect: { initialDelay: 100, maxDelay: 300 },
      onStateChange: watching(waiters),
      logger: { info: (m) => logged.push(m), warn: (m) => logged.push(m) },
    });
    cleanup.push(() => client.close());
    await client.connect();
    const space = unique("auth");
    await client.join(space);
    const events = client.events(space);
    const lost = nextState(waiters, "reconnecting");
    await hub.stop();
    await within(10_000, lost, "the loss");
    rewriteTokens(path, { ...tokens, agent: "second-token-0123456789" }); // the old token is revoked
    const closed = nextState(waiters, "closed");
    await hub.start();
    const error = await within(15_000, closed, "the client stopping");
    assert.ok(error instanceof Unauthorized, `stopped with ${error}`);
    assert.equal(client.closedError, error);
    assert.equal(client.reconnects, 0);
    assert.ok(provided >= 2, "the provider is asked before every attempt");
    assert.equal(logged.filter((m) => m.startsWith("reconnect refused")).length, 1);
    await assert.rejects(events.take(1000), Unauthorized, "iterators end with the error");
    await assert.rejects(client.ping(), Unauthorized, "requests too");
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(client.state, "closed", "and it stays stopped");
  });
});
