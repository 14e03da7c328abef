"""The protocols front ends and SDKs already speak, served over memproc's agents and threads.

* `openai`: the OpenAI Chat Completions protocol (`v1/chat/completions`, `v1/models`), so the official
  `openai` clients work with `base_url=".../api/memproc/v1"`;
* `aisdk`: the Vercel AI SDK's `useChat` request and its UI-message stream protocol (v1) at
  `agents/<id>/chat/`, which the `<memproc-chat>` component (`memproc/static/memproc/chat.js`) speaks too;
  `aisdk_stream` encodes its stream, `aisdk_resume` reads its answers to calls that wait (approvals,
  client-side tools).

Both run turns as the native endpoints do (`memproc.turns.asgi`): a sync stream under WSGI, an
async one under ASGI that releases the request's database connection before the model is called.
They follow the outside specifications, not memproc's `{"detail", "code"}` conventions, so they stay
out of memproc's OpenAPI document.
"""
