// Compile-time checks (`tsc` fails if a line marked @ts-expect-error compiles): the client's paths,
// parameters and bodies come from the OpenAPI document. Nothing here runs against a server.
import { test } from "node:test";

import { createMemprocClient } from "../src/index.js";
import type { GenerateResult, MemprocClient, WorkingMemory } from "../src/index.js";

export async function typed(client: MemprocClient): Promise<void> {
  const result: GenerateResult = await client.generate("agent", { messages: "hi", thread_id: "t" });
  const text: string = result.text;
  const memory: WorkingMemory = await client.getWorkingMemory({ threadId: "t" });
  const version: number = memory.version;
  void [text, version];

  // @ts-expect-error: no such path in the document
  await client.GET("/no-such-endpoint/");
  // @ts-expect-error: the path parameter is required
  await client.GET("/threads/{id}/", {});
  // @ts-expect-error: `messages` is required
  await client.generate("agent", { thread_id: "t" });
  // @ts-expect-error: `order` is "asc" or "desc"
  await client.getMessages("t", { order: "newest" });
  // @ts-expect-error: a thread's fields are read-only strings, not numbers
  const title: number = (await client.getThread("t")).title;
  void title;
}

test("the client is built without a server", () => {
  createMemprocClient({ baseUrl: "http://localhost/api/memproc" });
});
