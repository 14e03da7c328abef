// Talks to memproc's `agents/<id>/chat/` endpoint with the AI SDK's own client code, the way a React
// app's `useChat` does: `AbstractChat` (what `useChat` wraps) over `DefaultChatTransport`, which parses
// every frame with the SDK's UI-message chunk schema; and `readUIMessageStream` over a raw transport
// stream. Run by tests/api/test_protocol_aisdk_js.py:
//
//   node aisdk_chat.mjs <chat endpoint URL> <Authorization header value>
//
// Prints one JSON object: what each scenario saw. The Python test checks it and the database.
import { AbstractChat, DefaultChatTransport, readUIMessageStream } from "ai";

const [api, authorization] = process.argv.slice(2);
if (!api || !authorization) {
  console.error("usage: node aisdk_chat.mjs <chat endpoint URL> <Authorization header value>");
  process.exit(2);
}

// The state a UI framework would keep (React's `useChat` keeps it in hooks); here, plain arrays.
class MemoryState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) { return structuredClone(thing); }
}

class NodeChat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new MemoryState() });
    this.finishes = [];
    this.errors = [];
  }
}

function newChat(id) {
  const chat = new NodeChat({
    id,
    transport: new DefaultChatTransport({ api, headers: { Authorization: authorization } }),
    onFinish: ({ message, finishReason, isError }) => chat.finishes.push({ id: message.id, finishReason, isError }),
    onError: (error) => chat.errors.push(error.message),
  });
  return chat;
}

function summary(chat) {
  return {
    status: chat.status,
    error: chat.error ? chat.error.message : null,
    errors: chat.errors,
    finishes: chat.finishes,
    messages: chat.messages.map((m) => ({ id: m.id, role: m.role, metadata: m.metadata ?? null, parts: m.parts })),
  };
}

const results = {};

// A conversation of three turns: useChat resends the whole list every time.
const talk = newChat("js-talk");
for (const text of ["hello", "how are you", "bye"]) await talk.sendMessage({ text });
results.conversation = summary(talk);

// The agent's own tool, run on the server: tool-input-available, tool-output-available, two steps.
const tools = newChat("js-tools");
await tools.sendMessage({ text: "please add" });
results.tools = summary(tools);

// A blocked turn, then an ordinary one in the same chat.
const blocked = newChat("js-tripwire");
await blocked.sendMessage({ text: "this is forbidden" });
await blocked.sendMessage({ text: "something else" });
results.tripwire = summary(blocked);

// Regenerate the last answer: the server replaces it.
const again = newChat("js-regenerate");
await again.sendMessage({ text: "first" });
await again.sendMessage({ text: "second" });
await again.regenerate();
results.regenerate = summary(again);

// A model that fails mid-answer: an `error` chunk, which useChat turns into its error state.
const failing = newChat("js-error");
await failing.sendMessage({ text: "please fail" });
results.error = summary(failing);

// The SDK's stream reader over the transport's parsed stream.
const transport = new DefaultChatTransport({ api, headers: { Authorization: authorization } });
const stream = await transport.sendMessages({
  chatId: "js-reader",
  trigger: "submit-message",
  messageId: undefined,
  abortSignal: undefined,
  messages: [{ id: "reader-user-1", role: "user", parts: [{ type: "text", text: "read me" }] }],
});
const snapshots = [];
for await (const message of readUIMessageStream({ stream, terminateOnError: true })) snapshots.push(message);
results.reader = { snapshots: snapshots.length, last: snapshots.at(-1) };

// Resuming (useChat({resume: true}) on page load): there is never a stream to resume.
results.resume = await transport.reconnectToStream({ chatId: "js-talk" });

console.log(JSON.stringify(results));
