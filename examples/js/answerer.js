// An agent that answers requests in a space.
//
//   agora-hub serve                      # a hub on ws://127.0.0.1:8765/ws
//   (cd ../../clients/js && npm ci)      # builds the client
//   npm install && node answerer.js      # here
//   node ask.js "what is an agora?"      # in another terminal
//
// A question is any event in the space that is not a reply (no `in_reply_to`);
// `serve()` sends the answer back to the asker alone. A question that starts with
// "stream" is answered token by token, as a model would, and stops when the asker
// stops listening.
// Settings come from the environment: AGORA_HUB_URL, AGORA_HUB_TOKEN, SPACE,
// AGENT_ID. The client reconnects by itself and resumes where it was.

import { Client, run } from "agora-hub-client";

const url = process.env.AGORA_HUB_URL ?? "ws://127.0.0.1:8765/ws";
const space = process.env.SPACE ?? "ask";

/** Stands in for a model: the answer, word by word, until nobody listens.
 * @param {string} question
 * @param {AbortSignal} signal */
async function* generate(question, signal) {
  for (const word of `You asked: ${question}`.split(" ")) {
    if (signal.aborted) return; // the asker left, or cancelled the answer
    await new Promise((resolve) => setTimeout(resolve, 20));
    yield `${word} `;
  }
}

/** The answer to one question: streamed, or in one reply.
 * @param {import("agora-hub-client").Event} question
 * @param {AbortSignal} signal */
function answer(question, signal) {
  if (question.text?.startsWith("stream")) return generate(question.text, signal);
  return { text: `You asked: ${question.text ?? JSON.stringify(question.data)}` };
}

// Ctrl-C or SIGTERM closes the client (its signal), serve() returns, and the program
// ends; a hub refusal (the agent id is taken …) is one line on stderr.
await run(async (signal) => {
  const client = new Client(url, process.env.AGENT_ID ?? "answerer", {
    token: process.env.AGORA_HUB_TOKEN,
    type: "example",
    capabilities: ["urn:agora:example:answer"],
    signal,
    onResume: (r) => {
      if (!r.recovered) console.error(`rejoined ${r.space}: some questions may have been missed`);
    },
  });
  await client.connect();
  await client.join(space);
  console.log(`${client.agentId} answers questions in ${space} on ${url}`);
  // One question does not hold up the next; an asker that left costs a log line.
  await client.serve(space, answer);
});
