// A typed client for memproc's REST API: openapi-fetch over the types openapi-typescript generated from
// the API's OpenAPI document (src/schema.d.ts, from openapi.json; `npm run generate` refreshes both).
//
// `createMemprocClient` answers the openapi-fetch client itself (`GET`, `POST`, ... on every path of
// the document, typed) with a few methods for the common calls that return the body or throw a
// `MemprocError`.
import createClient from "openapi-fetch";
import type { Client, ClientOptions, Middleware } from "openapi-fetch";

import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };

type Schemas = components["schemas"];
export type Thread = Schemas["Thread"];
export type ThreadPage = Schemas["PaginatedThreadList"];
export type Message = Schemas["Message"];
export type MessagePage = Schemas["MessagePage"];
export type WorkingMemory = Schemas["WorkingMemory"];
export type WorkingMemoryUpdate = Schemas["WorkingMemoryUpdate"];
export type MemoryView = Schemas["MemoryView"];
export type GenerateRequest = Schemas["GenerateRequest"];
export type GenerateResult = Schemas["GenerateResult"];
export type TripwireLog = Schemas["TripwireLog"];
export type TripwirePage = Schemas["PaginatedTripwireLogList"];
export type ErrorBody = Schemas["Error"];

type QueryOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  parameters: { query?: infer Q };
}
  ? NonNullable<Q>
  : never;

export type ThreadListQuery = QueryOf<"/threads/", "get">;
export type ThreadQuery = QueryOf<"/threads/{id}/", "get">;
export type MessageListQuery = QueryOf<"/threads/{id}/messages/", "get">;
export type MemoryQuery = QueryOf<"/memory/", "get">;
export type TripwireListQuery = QueryOf<"/tripwires/", "get">;

/** Whose working memory: a thread's (within `resourceId` when the caller reaches several), or a
 * resource's. `agent` validates with that agent's working-memory configuration. */
export type WorkingMemoryTarget =
  | { threadId: string; resourceId?: string; agent?: string }
  | { resourceId: string; threadId?: undefined; agent?: string };

export interface MemprocClientOptions extends ClientOptions {
  /** Where the site mounts memproc's API, e.g. "/api/memproc" in a page of the same site, or
   * "https://example.com/api/memproc" from Node. */
  baseUrl: string;
  /** Django's CSRF token, sent as X-CSRFToken on POST, PUT, PATCH and DELETE (session authentication
   * needs it). Default in a browser: the `csrftoken` cookie, for requests to the page's own origin. */
  csrfToken?: string | (() => string | null | undefined);
}

/** A response that was not 2xx. `code` and `detail` come from memproc's `{detail, code}` error body;
 * a 400 carries field errors in `body` (`{field: [message]}`). */
export class MemprocError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly body: unknown;
  readonly response: Response;

  constructor(response: Response, body: unknown) {
    const error = (typeof body === "object" && body !== null ? body : {}) as Partial<ErrorBody>;
    const detail = typeof error.detail === "string" ? error.detail : response.statusText;
    super(`${response.status} ${detail}`.trim());
    this.name = "MemprocError";
    this.status = response.status;
    this.code = typeof error.code === "string" ? error.code : `http_${response.status}`;
    this.detail = detail;
    this.body = body;
    this.response = response;
  }
}

export interface MemprocMethods {
  /** The caller's threads, most recently active first (one page; follow `next` with `query.cursor`). */
  listThreads(query?: ThreadListQuery): Promise<ThreadPage>;
  getThread(threadId: string, query?: ThreadQuery): Promise<Thread>;
  /** One page of a thread's messages, oldest first unless `order: "desc"`. */
  getMessages(threadId: string, query?: MessageListQuery): Promise<MessagePage>;
  getWorkingMemory(target: WorkingMemoryTarget): Promise<WorkingMemory>;
  /** Markdown: the whole new text. Schema mode: an object merged into the current one (`replace` to
   * replace it). */
  updateWorkingMemory(target: WorkingMemoryTarget, body: WorkingMemoryUpdate): Promise<WorkingMemory>;
  /** The memory view: a resource's working memory by field, recent recalls, excluded messages. */
  getMemory(query?: MemoryQuery): Promise<MemoryView>;
  /** Runs one turn. A blocked turn is a 200 with `tripwire` set. An `idempotencyKey` makes it safe to
   * retry: a repeat answers the first turn's result and runs no second turn. */
  generate(agentId: string, body: GenerateRequest, options?: { idempotencyKey?: string }): Promise<GenerateResult>;
  /** Blocked turns, for staff with memproc.view_tripwirelog (anyone else gets a 403). */
  listTripwires(query?: TripwireListQuery): Promise<TripwirePage>;
}

export type MemprocClient = Client<paths> & MemprocMethods;

type Answer<T> = { data?: T; error?: unknown; response: Response };

async function body<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok || data === undefined) throw new MemprocError(response, error);
  return data;
}

const UNSAFE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);

function cookie(name: string): string | undefined {
  const jar = (globalThis as { document?: { cookie?: string } }).document?.cookie ?? "";
  for (const pair of jar.split(";")) {
    const [key, ...value] = pair.trim().split("=");
    if (key === name) return decodeURIComponent(value.join("="));
  }
  return undefined;
}

function csrfMiddleware(csrfToken: MemprocClientOptions["csrfToken"]): Middleware {
  return {
    onRequest({ request }) {
      if (!UNSAFE_METHODS.has(request.method) || request.headers.has("X-CSRFToken")) return undefined;
      let token: string | null | undefined;
      if (typeof csrfToken === "function") token = csrfToken();
      else if (csrfToken !== undefined) token = csrfToken;
      else {
        // The page's own cookie goes only to the page's own origin.
        const origin = (globalThis as { location?: { origin?: string } }).location?.origin;
        if (origin !== undefined && new URL(request.url).origin === origin) token = cookie("csrftoken");
      }
      if (token) request.headers.set("X-CSRFToken", token);
      return request;
    },
  };
}

export function createMemprocClient(options: MemprocClientOptions): MemprocClient {
  const { csrfToken, ...clientOptions } = options;
  const client = createClient<paths>(clientOptions);
  client.use(csrfMiddleware(csrfToken));

  const workingMemoryCall = (target: WorkingMemoryTarget, update?: WorkingMemoryUpdate) => {
    const query = { agent: target.agent };
    if (target.threadId !== undefined) {
      const params = { path: { id: target.threadId }, query: { ...query, resource_id: target.resourceId } };
      return update === undefined
        ? client.GET("/threads/{id}/working-memory/", { params })
        : client.PUT("/threads/{id}/working-memory/", { params, body: update });
    }
    const params = { path: { id: target.resourceId }, query };
    return update === undefined
      ? client.GET("/resources/{id}/working-memory/", { params })
      : client.PUT("/resources/{id}/working-memory/", { params, body: update });
  };

  const methods: MemprocMethods = {
    listThreads: (query) => body(client.GET("/threads/", { params: { query } })),
    getThread: (threadId, query) => body(client.GET("/threads/{id}/", { params: { path: { id: threadId }, query } })),
    getMessages: (threadId, query) =>
      body(client.GET("/threads/{id}/messages/", { params: { path: { id: threadId }, query } })),
    getWorkingMemory: (target) => body(workingMemoryCall(target)),
    updateWorkingMemory: (target, update) => body(workingMemoryCall(target, update)),
    getMemory: (query) => body(client.GET("/memory/", { params: { query } })),
    generate: (agentId, request, { idempotencyKey } = {}) =>
      body(
        client.POST("/agents/{id}/generate/", {
          params: {
            path: { id: agentId },
            header: idempotencyKey === undefined ? undefined : { "Idempotency-Key": idempotencyKey },
          },
          body: request,
        }),
      ),
    listTripwires: (query) => body(client.GET("/tripwires/", { params: { query } })),
  };
  return Object.assign(client, methods);
}
