// StreamAssembler on its own (it is pure: frames in, whole events out, the clock
// injected): every way a stream can end.

import assert from "node:assert/strict";
import { test } from "node:test";

import { StreamAssembler } from "agora-hub-client";

const delta = (eventId, text, data = {}, seq = 1) => ({
  kind: "delta", space: "s", eventId, seq, from: "alice", timestamp: 1, data: { ...data, text }, text, to: null, reason: null, requestId: null,
});
const end = (kind, eventId, seq = 9, reason = null) => ({
  kind, space: "s", eventId, seq, from: "alice", timestamp: 2, data: {}, text: "", to: null, reason, requestId: null,
});

test("deltas and a done make one complete event with the first delta's fields", () => {
  const asm = new StreamAssembler({ clock: () => 0 });
  assert.equal(asm.feed(delta("a/1", "Hel", { from: "alice", model: "m" })), null);
  assert.equal(asm.feed(delta("a/1", "lo", {}, 2)), null);
  const done = asm.feed(end("done", "a/1"));
  assert.deepEqual(
    [done.text, done.data, done.status, done.complete, done.chunks, done.seq, done.streamed],
    ["Hello", { from: "alice", model: "m", text: "Hello" }, "complete", true, 2, 9, true],
  );
  assert.equal(asm.size, 0);
});

test("a cancel ends it cancelled with the reason and the text so far", () => {
  const asm = new StreamAssembler();
  asm.feed(delta("a/1", "part", { from: "alice" }));
  const cut = asm.feed(end("cancel", "a/1", 5, "user stop"));
  assert.deepEqual([cut.status, cut.reason, cut.text, cut.complete], ["cancelled", "user stop", "part", false]);
});

test("a stream whose first delta was missed is incomplete (missed_start)", () => {
  const asm = new StreamAssembler();
  asm.feed(delta("a/1", "middle")); // no data.from: not a first delta
  const result = asm.feed(end("done", "a/1"));
  assert.deepEqual([result.status, result.reason], ["incomplete", "missed_start"]);
  const empty = asm.feed(end("done", "a/2"));
  assert.deepEqual([empty.status, empty.reason, empty.text], ["incomplete", "missed_start", ""]);
  assert.equal(asm.feed(end("cancel", "a/3")), null, "a cancel of a stream never seen says nothing");
});

test("more than maxChars is incomplete (too_large) and keeps no text", () => {
  const asm = new StreamAssembler({ maxChars: 5 });
  asm.feed(delta("a/1", "abc", { from: "alice" }));
  asm.feed(delta("a/1", "def"));
  const result = asm.feed(end("done", "a/1"));
  assert.deepEqual([result.status, result.reason, result.text], ["incomplete", "too_large", ""]);
});

test("a silent stream is given up after incompleteTimeout; its late frames are ignored", () => {
  let now = 0;
  const asm = new StreamAssembler({ incompleteTimeout: 100, clock: () => now });
  asm.feed(delta("a/1", "x", { from: "alice" }));
  assert.equal(asm.nextDeadline(), 100);
  now = 99;
  assert.deepEqual(asm.expire(), []);
  now = 100;
  const [gone] = asm.expire();
  assert.deepEqual([gone.status, gone.reason, gone.text], ["incomplete", "incomplete_timeout", "x"]);
  assert.equal(asm.feed(delta("a/1", "late")), null);
  assert.equal(asm.feed(end("done", "a/1")), null, "reported once");
  assert.equal(asm.size, 0);
});

test("abandon() ends every open stream with its reason", () => {
  const asm = new StreamAssembler();
  asm.feed(delta("a/1", "x", { from: "alice" }));
  asm.feed(delta("b/1", "y", { from: "bob" }));
  assert.deepEqual(asm.abandon("connection_lost").map((e) => [e.eventId, e.reason]), [
    ["a/1", "connection_lost"],
    ["b/1", "connection_lost"],
  ]);
});
