// An agent that answers requests in a space.
//
//   agora-hub serve                      # a hub on ws://127.0.0.1:8765/ws
//   (cd ../../clients/js && npm ci)      # builds the client
//   npm install && node answerer.js      # here
//   node ask.js "what is an agora?"      # in another terminal
//
// A question is any event in the space that is not a reply (no `in_reply_to`);
// the answer goes back to the asker alone (`reply()` addresses it). A question
// that starts with "stream" is answered token by token, as a model would.
// Settings come from the environment: AGORA_HUB_URL, AGORA_HUB_TOKEN, SPACE,
// AGENT_ID. The client reconnects by itself and resumes where it was.

import { Client, HubClientError } from "agora-hub-client";

const url = process.env.AGORA_HUB_URL ?? "ws://127.0.0.1:8765/ws";
const space = process.env.SPACE ?? "ask";

const client = new Client(url, process.env.AGENT_ID ?? "answerer", {
  token: process.env.AGORA_HUB_TOKEN,
  type: "example",
  capabilities: ["urn:agora:example:answer"],
  onResume: (r) => {
    if (!r.recovered) console.error(`rejoined ${r.space}: some questions may have been missed`);
  },
});

/** Stands in for a model: the answer, word by word.
 * @param {string} question */
async function* generate(question) {
  for (const word of `You asked: ${question}`.split(" ")) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    yield `${word} `;
  }
}

/** @param {import("agora-hub-client").Event} question */
async function answer(question) {
  try {
    if (question.text?.startsWith("stream")) {
      await client.replyStream(question, { echo: false }).pipe(generate(question.text));
    } else {
      await client.reply(question, { text: `You asked: ${question.text ?? JSON.stringify(question.data)}` });
    }
  } catch (error) {
    // A refused reply (rate limited, the asker left …) costs this question only.
    if (!(error instanceof HubClientError)) throw error;
    console.error(`could not answer ${question.eventId}: ${error}`);
  }
}

await client.connect();
await client.join(space);
console.log(`${client.agentId} answers questions in ${space} on ${url}`);
for (const signal of ["SIGINT", "SIGTERM"]) process.once(signal, () => client.close());

// Ends when the client is closed; throws if the hub refuses it for good.
for await (const event of client.events(space)) {
  const isQuestion = event.complete && event.from !== client.agentId && event.inReplyTo === null;
  if (isQuestion) void answer(event); // one question does not hold up the next
}
