// The client against a live memproc site (tests/api/test_typescript_client.py starts one and runs
// `node --test dist/test/` with these variables):
//   MEMPROC_BASE_URL     where the site mounts memproc, e.g. http://localhost:8000/api/memproc
//   MEMPROC_AGENT        an agent whose input processor blocks the word "forbidden" and whose working
//                        memory has a JSON schema with a `name`
//   MEMPROC_TOKEN        an authtoken key of the owner; MEMPROC_RESOURCE their resource id
//   MEMPROC_STAFF_TOKEN  a staff user's key, with memproc.view_tripwirelog
//   MEMPROC_SESSION, MEMPROC_CSRF  the owner's session id and a CSRF token (as a browser holds them)
//   MEMPROC_FOREIGN_THREAD  a thread of another user
import assert from "node:assert/strict";
import { test } from "node:test";

import { createMemprocClient, MemprocError } from "../src/index.js";
import type { Message } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run this through tests/api/test_typescript_client.py`);
  return value;
}

const baseUrl = env("MEMPROC_BASE_URL");
const agent = env("MEMPROC_AGENT");
const resource = env("MEMPROC_RESOURCE");
const owner = createMemprocClient({ baseUrl, headers: { Authorization: `Bearer ${env("MEMPROC_TOKEN")}` } });
const staff = createMemprocClient({ baseUrl, headers: { Authorization: `Bearer ${env("MEMPROC_STAFF_TOKEN")}` } });

function text(message: Message): string {
  return message.parts.map((part) => (part.type === "text" ? String(part["text"]) : "")).join("");
}

async function rejection(call: Promise<unknown>): Promise<MemprocError> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof MemprocError, `expected a MemprocError, got ${error}`);
    return error;
  }
  assert.fail("the call succeeded");
}

test("a turn, then its thread, its messages and the thread list", async () => {
  const result = await owner.generate(agent, { messages: "hello", thread_id: "ts-thread" });
  assert.equal(result.text, "Echo: hello");
  assert.equal(result.thread_id, "ts-thread");
  assert.equal(result.resource_id, resource);
  assert.equal(result.tripwire, null);
  assert.deepEqual(result.messages.map((m) => m.role), ["user", "assistant"]);

  const again = await owner.generate(agent, { messages: [{ role: "user", content: "again" }], thread_id: "ts-thread" });
  assert.equal(again.text, "Echo: again");

  const threads = await owner.listThreads({ agent });
  assert.deepEqual(threads.results.map((t) => t.id), ["ts-thread"]);
  const thread = await owner.getThread("ts-thread");
  assert.equal(thread.agent_id, agent);
  assert.equal(thread.resource_id, resource);

  const page = await owner.getMessages("ts-thread");
  assert.deepEqual(page.results.map((m) => [m.role, text(m)]), [
    ["user", "hello"],
    ["assistant", "Echo: hello"],
    ["user", "again"],
    ["assistant", "Echo: again"],
  ]);
  assert.deepEqual(page.results.map((m) => m.id).slice(0, 2), result.messages.map((m) => m.id));
  const newest = await owner.getMessages("ts-thread", { order: "desc", limit: 1 });
  assert.equal(text(newest.results[0]!), "Echo: again");
  assert.ok(newest.next, "a second page");
});

test("the same call with an idempotency key runs one turn", async () => {
  const request = { messages: "only once", thread_id: "ts-idempotent" };
  const first = await owner.generate(agent, request, { idempotencyKey: "ts-key-1" });
  const repeat = await owner.generate(agent, request, { idempotencyKey: "ts-key-1" });
  assert.deepEqual(repeat, first);
  assert.equal((await owner.getMessages("ts-idempotent")).results.length, 2);
});

test("working memory: read, update, and the memory view shows it", async () => {
  const target = { resourceId: resource, agent };
  const before = await owner.getWorkingMemory(target);
  assert.equal(before.mode, "schema");
  assert.equal(before.scope, "resource");
  const after = await owner.updateWorkingMemory(target, { working_memory: { name: "Ada" } });
  assert.deepEqual(after.working_memory, { name: "Ada" });
  assert.equal(after.version, before.version + 1);
  assert.deepEqual((await owner.getWorkingMemory(target)).working_memory, { name: "Ada" });

  const view = await owner.getMemory({ agent });
  assert.equal(view.resource_id, resource);
  assert.deepEqual(view.working_memory, { name: "Ada" });
  assert.ok(view.fields.some((field) => field.name === "name"));
  assert.equal(view.version, after.version);
});

test("another user's thread is a 404, through the methods and the raw client", async () => {
  const foreign = env("MEMPROC_FOREIGN_THREAD");
  for (const call of [
    () => owner.getThread(foreign),
    () => owner.getMessages(foreign),
    () => owner.getWorkingMemory({ threadId: foreign }),
  ]) {
    const error = await rejection(call());
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
  }
  const { data, error, response } = await owner.GET("/threads/{id}/", { params: { path: { id: foreign } } });
  assert.equal(response.status, 404);
  assert.equal(data, undefined);
  assert.equal(error?.code, "not_found");
});

test("a blocked turn is a tripwire, listed for staff and refused to others", async () => {
  const blocked = await owner.generate(agent, { messages: "this is forbidden", thread_id: "ts-blocked" });
  assert.equal(blocked.text, "");
  assert.equal(blocked.tripwire?.processor_id, "block-word");

  const queue = await staff.listTripwires({ agent });
  assert.deepEqual(queue.results.map((t) => [t.processor_id, t.phase, t.thread_id]), [
    ["block-word", "input", "ts-blocked"],
  ]);
  const refused = await rejection(owner.listTripwires());
  assert.equal(refused.status, 403);
});

test("a browser's session: writes carry the CSRF token", async () => {
  const csrf = env("MEMPROC_CSRF");
  const headers = { Cookie: `sessionid=${env("MEMPROC_SESSION")}; csrftoken=${csrf}` };
  const target = { resourceId: resource, agent };
  const withToken = createMemprocClient({ baseUrl, headers, csrfToken: () => csrf });
  const saved = await withToken.updateWorkingMemory(target, { working_memory: { name: "Grace" } });
  assert.deepEqual(saved.working_memory, { name: "Grace" });
  assert.equal((await withToken.getThread("ts-thread")).id, "ts-thread");

  const without = createMemprocClient({ baseUrl, headers });
  assert.equal((await without.getThread("ts-thread")).id, "ts-thread"); // reads need no token
  const refused = await rejection(without.updateWorkingMemory(target, { working_memory: { name: "Eve" } }));
  assert.equal(refused.status, 403);
  assert.match(refused.detail, /CSRF/);
});

test("the schema's other endpoints are typed calls on the same client", async () => {
  const { data, response } = await owner.GET("/agents/{id}/", { params: { path: { id: agent } } });
  assert.equal(response.status, 200);
  assert.equal(data?.id, agent);
  const invalid = await owner.POST("/agents/{id}/generate/", {
    params: { path: { id: agent } },
    body: { messages: [] },
  });
  assert.equal(invalid.response.status, 400);
});
