// Tool calls that wait, through memproc's `agents/<id>/chat/` endpoint with the AI SDK's own client code,
// the way a React app's `useChat` does it: `AbstractChat` over `DefaultChatTransport`, answering an
// approval request with `addToolApprovalResponse` and a client-side tool with `addToolOutput`, and
// `sendAutomaticallyWhen` sending the answer. Run by tests/api/test_protocol_aisdk_approvals_js.py:
//
//   node aisdk_approvals.mjs <chat endpoint URL> <Authorization header value>
//
// Prints one JSON object: what each scenario saw. The Python test checks it and the database.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";

const [api, authorization] = process.argv.slice(2);
if (!api || !authorization) {
  console.error("usage: node aisdk_approvals.mjs <chat endpoint URL> <Authorization header value>");
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
    this.toolCalls = [];
    this.waiters = [];
  }

  // Resolves once `count` responses in all have finished (an automatic request is not awaited by
  // the call that triggers it).
  finished(count) {
    if (this.finishes.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }
}

function newChat(id, options = {}) {
  const chat = new NodeChat({
    id,
    transport: new DefaultChatTransport({ api, headers: { Authorization: authorization } }),
    onFinish: ({ message, finishReason, isError }) => {
      chat.finishes.push({ id: message.id, finishReason, isError });
      for (const waiter of chat.waiters.filter((w) => chat.finishes.length >= w.count)) waiter.resolve();
    },
    onError: (error) => chat.errors.push(error.message),
    ...options,
  });
  return chat;
}

function summary(chat) {
  return structuredClone({
    status: chat.status,
    error: chat.error ? chat.error.message : null,
    errors: chat.errors,
    finishes: chat.finishes,
    toolCalls: chat.toolCalls,
    messages: chat.messages.map((m) => ({ id: m.id, role: m.role, metadata: m.metadata ?? null, parts: m.parts })),
  });
}

function waitingApproval(chat) {
  const part = chat.lastMessage.parts.find((p) => p.type?.startsWith("tool-") && p.state === "approval-requested");
  if (!part) throw new Error(`no approval requested: ${JSON.stringify(chat.lastMessage)}`);
  return part;
}

const results = {};

// Approve: the turn waits on the refund; the answer is sent automatically and the resumed turn
// continues the same assistant message. Then one more message in the same chat.
const approve = newChat("js-approve", { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
await approve.sendMessage({ text: "please refund A-1" });
results.approveRequested = summary(approve);
await approve.addToolApprovalResponse({ id: waitingApproval(approve).approval.id, approved: true });
await approve.finished(2);
results.approved = summary(approve);
await approve.sendMessage({ text: "thanks" });
results.approve = summary(approve);

// Reject with a reason: the tool part ends as `output-denied` and the model reads why.
const reject = newChat("js-reject", { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
await reject.sendMessage({ text: "please refund B-2" });
await reject.addToolApprovalResponse({ id: waitingApproval(reject).approval.id, approved: false, reason: "too much" });
await reject.finished(2);
results.reject = summary(reject);

// A client-side tool: onToolCall answers it with addToolOutput (not awaited there: the SDK runs it after
// the chunk), and sendAutomaticallyWhen sends the output back.
const located = newChat("js-client", { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls });
located.onToolCall = async ({ toolCall }) => {
  located.toolCalls.push(toolCall);
  if (toolCall.toolName === "get_location") {
    void located.addToolOutput({ tool: "get_location", toolCallId: toolCall.toolCallId, output: { city: "Lisbon" } });
  }
};
await located.sendMessage({ text: "where am I?" });
await located.finished(2);
results.client = summary(located);

console.log(JSON.stringify(results));
