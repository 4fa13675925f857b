// Ask the answerer (answerer.js) a question and print the reply.
//
//   node ask.js "what is an agora?"
//   node ask.js "stream me a long answer"
//
// Settings come from the environment: AGORA_HUB_URL, AGORA_HUB_TOKEN, SPACE.

import { Client } from "agora-hub-client";

const url = process.env.AGORA_HUB_URL ?? "ws://127.0.0.1:8765/ws";
const space = process.env.SPACE ?? "ask";
const question = process.argv[2] ?? "hello?";

const client = new Client(url, `asker-${process.pid}`, { token: process.env.AGORA_HUB_TOKEN, reconnect: false });
await client.connect();
try {
  await client.join(space);
  const reply = await client.request(space, question, { timeout: 10_000 });
  console.log(`${reply.from}${reply.streamed ? " (streamed)" : ""}: ${reply.text}`);
} finally {
  await client.close();
}
