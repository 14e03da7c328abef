// The CSRF header, without a server: a fake fetch records what the client sends. In a browser the
// client reads the `csrftoken` cookie for writes to the page's own origin; here the test stands in
// `document` and `location`.
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { createMemprocClient } from "../src/index.js";

const page = globalThis as { document?: { cookie: string }; location?: { origin: string } };
let sent: Request[] = [];

async function recording(request: Request): Promise<Response> {
  sent.push(request);
  return new Response(JSON.stringify({ id: "t" }), { headers: { "Content-Type": "application/json" } });
}

beforeEach(() => {
  sent = [];
  page.document = { cookie: "sessionid=s; csrftoken=from%20cookie; other=1" };
  page.location = { origin: "https://site.test" };
});

afterEach(() => {
  delete page.document;
  delete page.location;
});

test("in a page, writes to its own origin carry the csrftoken cookie; reads do not", async () => {
  const memproc = createMemprocClient({ baseUrl: "https://site.test/api/memproc", fetch: recording });
  await memproc.getThread("t");
  await memproc.POST("/threads/{id}/archive/", { params: { path: { id: "t" } } });
  await memproc.updateWorkingMemory({ threadId: "t" }, { working_memory: "notes" });
  assert.deepEqual(
    sent.map((r) => [r.method, r.headers.get("X-CSRFToken")]),
    [
      ["GET", null],
      ["POST", "from cookie"],
      ["PUT", "from cookie"],
    ],
  );
});

test("the page's cookie never goes to another origin", async () => {
  const memproc = createMemprocClient({ baseUrl: "https://elsewhere.test/api/memproc", fetch: recording });
  await memproc.POST("/threads/{id}/archive/", { params: { path: { id: "t" } } });
  assert.equal(sent[0]!.headers.get("X-CSRFToken"), null);
});

test("a token given is sent on writes to any origin, and a header given wins", async () => {
  const memproc = createMemprocClient({ baseUrl: "https://elsewhere.test/api/memproc", fetch: recording, csrfToken: () => "given" });
  await memproc.POST("/threads/{id}/archive/", { params: { path: { id: "t" } } });
  await memproc.POST("/threads/{id}/archive/", { params: { path: { id: "t" } }, headers: { "X-CSRFToken": "mine" } });
  assert.deepEqual(sent.map((r) => r.headers.get("X-CSRFToken")), ["given", "mine"]);
});

test("the mount point is the base URL, with or without its trailing slash", async () => {
  for (const baseUrl of ["https://site.test/mounted/here", "https://site.test/mounted/here/"]) {
    await createMemprocClient({ baseUrl, fetch: recording }).getMessages("a b", { order: "desc" });
  }
  assert.deepEqual(sent.map((r) => r.url), [
    "https://site.test/mounted/here/threads/a%20b/messages/?order=desc",
    "https://site.test/mounted/here/threads/a%20b/messages/?order=desc",
  ]);
});
