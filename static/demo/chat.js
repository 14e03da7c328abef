// The demo chat page: one agent's threads, streamed replies over SSE rendered as safe Markdown, the
// guardrails' verdicts, and what memory gave the model on the last turn (read from the turn record).
(function () {
  "use strict";
  const api = window.MEMPROC_API;
  const $ = (id) => document.getElementById(id);
  const agents = JSON.parse($("agents-data").textContent);
  const resourceId = JSON.parse($("resource-id").textContent);
  const byId = Object.fromEntries(agents.map((a) => [a.id, a]));
  const AGENT_KEY = "memproc-demo:agent";
  const state = { thread: null, busy: false, texts: {}, titles: {} };

  const PROCESSORS = {
    "prompt-injection-detector": "the prompt-injection detector",
    "pii-detector": "the personal-data detector",
    moderation: "the moderation check",
    "max-length": "the length limit",
    "token-limiter": "the token limit",
    "system-prompt-scrubber": "the system-prompt scrubber",
    "unicode-normalizer": "the Unicode normalizer",
  };

  // What a user reads when a turn fails: plain words, never a status code, a setting or a provider's text.
  const PLAIN_ERRORS = {
    model_unavailable: "The AI model is not answering right now.",
    model_error: "The AI model ran into a problem while answering.",
    model_bad_response: "The AI model sent an answer the demo could not read.",
    model_rate_limited: "The AI model is busy. Wait a moment, then try again.",
    model_authentication: "The AI model refused to answer for this site; whoever runs the demo needs to check its set-up.",
    configuration_error: "The demo is not set up to answer yet; whoever runs it will find the details in the server log.",
    embedder_unavailable: "The memory search is not available right now.",
    storage_unavailable: "File storage is not available right now.",
    too_large: "Your message is too long to send.",
    throttled: "You are sending messages too quickly. Wait a moment, then try again.",
    not_authenticated: "You are signed out. Reload the page and sign in again.",
    permission_denied: "You are signed out. Reload the page and sign in again.",
    network: "The demo server could not be reached. Check that it is still running.",
    interrupted: "The connection dropped before the reply was finished.",
  };
  const STATUS_CODES = { 401: "not_authenticated", 403: "permission_denied", 413: "too_large", 429: "throttled", 500: "configuration_error", 502: "model_error", 503: "model_unavailable" };

  class TurnError extends Error {
    constructor(code) {
      super(code);
      this.code = code;
    }
  }

  function plainError(code) {
    return PLAIN_ERRORS[code] || "Something went wrong while answering.";
  }

  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function errorCode(response) {
    try {
      const body = await response.json();
      if (body && typeof body.code === "string") return body.code;
    } catch (e) { /* not JSON */ }
    return STATUS_CODES[response.status] || "server_error";
  }

  async function call(path, options = {}) {
    let response;
    try {
      response = await fetch(api + path, {
        credentials: "same-origin",
        ...options,
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), ...(options.headers || {}) },
      });
    } catch (e) {
      throw new TurnError("network");
    }
    if (response.status === 404) return null;
    if (!response.ok) throw new TurnError(await errorCode(response));
    return response.status === 204 ? null : response.json();
  }

  function newId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16)); // randomUUID needs a secure context
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function clip(text, length) {
    text = String(text || "").replace(/\s+/g, " ").trim();
    return text.length > length ? text.slice(0, length - 1) + "…" : text;
  }

  function agent() {
    return byId[$("agent").value] || agents[0] || {};
  }

  function textOf(message) {
    return (message.parts || []).map((p) => {
      if (p.type === "text") return p.text;
      if (p.type === "tool-call") return `🔧 ${p.tool_name}(${JSON.stringify(p.args)})`;
      if (p.type === "tool-result") return `↳ ${typeof p.result === "string" ? p.result : JSON.stringify(p.result)}`;
      if (p.type === "attachment") return `📎 ${p.name}`;
      return "";
    }).join("\n");
  }

  // --- the conversation ----------------------------------------------------------------------------

  function setBody(li, role, text) {
    if (role === "assistant") li.__body.innerHTML = window.DemoMarkdown.render(text);
    else li.__body.textContent = text;
  }

  function addMessage(role, text, extraClass) {
    const li = el("li", role + (extraClass ? " " + extraClass : ""));
    li.dataset.role = role;
    li.__body = li.appendChild(el("div", "body"));
    setBody(li, role, text);
    if (role === "assistant" && agent().offline) li.appendChild(el("span", "by", "local/echo · offline stand-in"));
    $("messages").appendChild(li);
    li.scrollIntoView({ block: "end" });
    return li;
  }

  function typing(li) {
    const dots = el("span", "typing");
    dots.setAttribute("role", "status");
    dots.setAttribute("aria-label", "The assistant is writing");
    for (let i = 0; i < 3; i += 1) dots.appendChild(el("i"));
    li.__body.replaceChildren(dots);
  }

  function showEmpty(show) {
    $("empty").hidden = !show;
    $("empty-agent").textContent = agent().description || "";
  }

  function banner(kind, options = {}) {
    const box = $("banner");
    box.hidden = !kind;
    box.className = kind || "";
    box.replaceChildren();
    if (!kind) return;
    box.dataset.code = options.code || "";
    const close = box.appendChild(el("button", "close", "×"));
    close.type = "button";
    close.title = "Dismiss";
    close.setAttribute("aria-label", "Dismiss");
    close.addEventListener("click", () => banner(null));
    const title = box.appendChild(el("strong", "title", options.title || ""));
    if (options.processor) title.appendChild(el("code", "processor", options.processor));
    for (const line of options.lines || []) box.appendChild(el("p", line.className || "", line.text));
    if (options.retry) {
      const retry = box.appendChild(el("div", "actions")).appendChild(el("button", "button", "Try again"));
      retry.type = "button";
      retry.addEventListener("click", options.retry);
    }
  }

  // A turn that stopped at a tool call waiting for a decision (the admin's Pending tool calls, or
  // `<memproc-chat>`'s buttons) or for the app's answer (a client-side tool).
  function showPending(pending) {
    const call = `${pending.tool_name || "a tool"}(${JSON.stringify(pending.args || {})})`;
    banner("pending", {
      code: pending.kind || "approval",
      title: pending.kind === "client" ? "Waiting for the app to answer a tool call" : "Waiting for approval",
      lines: [
        { text: `The model called ${call}. The turn resumes, and is saved, once ${pending.kind === "client" ? "the app answers it" : "someone allowed to decide approves or rejects it (Admin › Pending tool calls)"}.` },
      ],
    });
  }

  function beforeModel(tripwire) {
    return !tripwire || !tripwire.phase || tripwire.phase === "input";
  }

  function showTripwire(tripwire) {
    const id = tripwire.processor_id || "unknown";
    banner("tripwire", {
      code: id,
      title: "Blocked by a guardrail ",
      processor: id,
      lines: [
        { text: tripwire.reason || "The guardrail gave no reason.", className: "reason" },
        { text: `${(PROCESSORS[id] || "The guardrail").replace(/^the /, "The ")} ${beforeModel(tripwire) ? "stopped your message before the model saw it" : "stopped the model's answer"}. Nothing of this turn was saved, so it can never be recalled later; operators can review it in the admin.` },
      ],
    });
  }

  function showError(code, retryText) {
    banner("error", {
      code,
      title: plainError(code),
      lines: [{ text: "Your message was not saved." }],
      retry: code === "too_large" || !retryText ? null : () => send(retryText),
    });
  }

  // --- threads: each one belongs to one agent ------------------------------------------------------

  async function loadThreads() {
    const a = agent();
    const data = await call(`threads/?resource_id=${encodeURIComponent(resourceId)}&agent=${encodeURIComponent(a.id)}`);
    const threads = data ? (Array.isArray(data) ? data : data.results || []) : [];
    const list = $("threads");
    list.replaceChildren();
    for (const thread of threads) {
      state.titles[thread.id] = thread;
      const button = el("button", "", thread.title || "Untitled conversation");
      button.type = "button";
      button.dataset.thread = thread.id;
      button.setAttribute("aria-current", String(thread.id === state.thread));
      button.addEventListener("click", () => { setView("chat"); openThread(thread.id); });
      list.appendChild(el("li")).appendChild(button);
    }
    $("threads-hint").textContent = threads.length
      ? "Your conversations with this agent. Each conversation belongs to one agent."
      : "No conversations with this agent yet.";
    return threads;
  }

  async function loadMessages() {
    $("messages").replaceChildren();
    if (!state.thread) return [];
    let url = `threads/${encodeURIComponent(state.thread)}/messages/?limit=200`;
    const all = [];
    while (url) {
      const page = await call(url);
      if (!page) break;
      all.push(...page.results);
      url = page.next ? page.next.slice(page.next.indexOf(api) + api.length) : null;
    }
    for (const message of all) {
      state.texts[message.id] = textOf(message);
      addMessage(message.role, textOf(message));
    }
    showEmpty(!all.length);
    return all;
  }

  async function openThread(id) {
    state.thread = id;
    banner(null);
    for (const b of document.querySelectorAll("#threads button")) b.setAttribute("aria-current", String(b.dataset.thread === id));
    await loadMessages();
    await loadMemoryPanel();
  }

  async function newConversation() {
    state.thread = null;
    $("messages").replaceChildren();
    banner(null);
    showEmpty(true);
    for (const b of document.querySelectorAll("#threads button")) b.setAttribute("aria-current", "false");
    await loadMemoryPanel();
  }

  async function openAgent() {
    document.body.dataset.ready = "false"; // "true" once the agent's threads and memory are shown
    const a = agent();
    localStorage.setItem(AGENT_KEY, a.id);
    const url = new URL(location.href);
    url.searchParams.set("agent", a.id);
    history.replaceState(null, "", url);
    const badge = $("model-badge");
    badge.hidden = false;
    badge.className = "badge " + (a.offline ? "offline" : "live");
    document.body.classList.toggle("offline", Boolean(a.offline));
    badge.textContent = a.offline ? "offline stand-in: local/echo" : `model: ${a.model}`;
    badge.title = a.offline ? "No AI model is answering: local/echo repeats your message." : "";
    $("offline-note").hidden = !a.offline;
    showAgentFacts(a);
    const threads = await loadThreads();
    if (threads.length) await openThread(threads[0].id);
    else await newConversation();
    document.body.dataset.ready = "true";
  }

  // --- what memory gave the model ------------------------------------------------------------------

  function scopeWords(scope) {
    return scope === "resource" ? "about you, shared by all your conversations" : "this conversation only";
  }

  function showAgentFacts(a) {
    const facts = [
      ["Model", a.offline ? "local/echo (offline stand-in: repeats your message)" : a.model],
      ["History", a.history ? `the last ${a.history} messages` : "none"],
      ["Recall", a.recall ? `top ${a.recall.top_k} similar messages${a.recall.threshold != null ? ` (score ≥ ${a.recall.threshold})` : ""} from ${a.recall.scope === "resource" ? "all your conversations" : "this conversation"}` : "off"],
      ["Working memory", a.working_memory ? `${a.working_memory.scope} scope: ${scopeWords(a.working_memory.scope)}` : "none"],
      ["Token limit", a.token_limit ? `${a.token_limit} tokens (token-limiter)` : "none (no token limiter)"],
      ["Guardrails in", (a.input_processors || []).map((p) => p.id + (p.strategy ? ` (${p.strategy})` : "")).join(", ") || "none"],
      ["Guardrails out", (a.output_processors || []).map((p) => p.id + (p.strategy ? ` (${p.strategy})` : "")).join(", ") || "none"],
    ];
    const dl = $("agent-facts");
    dl.replaceChildren();
    for (const [term, value] of facts) {
      dl.appendChild(el("dt", "", term));
      dl.appendChild(el("dd", "", value));
    }
  }

  async function loadWorkingMemory(a) {
    const config = a.working_memory;
    const scopeLabel = $("wm-scope");
    if (!config) {
      scopeLabel.textContent = "";
      $("working-memory").textContent = "This agent keeps no working memory.";
      return;
    }
    const path = config.scope === "resource"
      ? `resources/${encodeURIComponent(resourceId)}/working-memory/`
      : state.thread ? `threads/${encodeURIComponent(state.thread)}/working-memory/` : null;
    let wm = null;
    if (path) {
      try { wm = await call(`${path}?agent=${encodeURIComponent(a.id)}`); } catch (e) { wm = null; }
    }
    const value = wm ? (typeof wm.working_memory === "string" ? wm.working_memory : JSON.stringify(wm.working_memory, null, 2)) : "";
    scopeLabel.textContent = `${config.scope} scope · ${scopeWords(config.scope)}${wm && wm.version ? ` · version ${wm.version}` : ""}`;
    $("working-memory").textContent = value && value.trim() ? value : "(empty)";
  }

  async function lastTurn() {
    if (!state.thread) return null;
    try {
      const page = await call(`threads/${encodeURIComponent(state.thread)}/turns/?limit=1`);
      return page && page.results && page.results.length ? page.results[0] : null;
    } catch (e) {
      return null;
    }
  }

  async function threadInfo(id) {
    if (!(id in state.titles)) {
      try { state.titles[id] = await call(`threads/${encodeURIComponent(id)}/`); } catch (e) { state.titles[id] = null; }
    }
    return state.titles[id];
  }

  // Texts of messages the turn record names only by id (it never stores text): this thread's are on the
  // page; another thread's come from its newest messages.
  async function fillTexts(items) {
    const missing = new Set(items.filter((i) => !(i.id in state.texts) && i.thread_id).map((i) => i.thread_id));
    for (const threadId of missing) {
      try {
        const page = await call(`threads/${encodeURIComponent(threadId)}/messages/?order=desc&limit=200`);
        for (const m of (page && page.results) || []) state.texts[m.id] = textOf(m);
      } catch (e) { /* shown without its text */ }
    }
  }

  function remember(memory) {
    for (const m of [...(memory.history || []), ...(memory.recalled || [])]) {
      if (m.id && m.text !== undefined) state.texts[m.id] = m.text;
    }
  }

  async function tripwireOf(record) {
    if (!record.tripwire_id) return null;
    try { return await call(`tripwires/${encodeURIComponent(record.tripwire_id)}/`); } catch (e) { return null; }
  }

  // `live` is the memory of the turn that just ran (from the stream); the panel reads the turn record.
  async function loadMemoryPanel(live) {
    const a = agent();
    if (live && live.memory) remember(live.memory);
    const [record] = await Promise.all([lastTurn(), loadWorkingMemory(a)]);
    let manifest = record ? record.manifest || {} : null;
    let status = record ? record.status : null;
    let tripwire = record && status === "blocked" ? await tripwireOf(record) : null;
    if (!record && live) {
      // A blocked first turn leaves no thread, so no record to read: show what the stream reported.
      const memory = live.memory || {};
      manifest = {
        history: (memory.history || []).map((m) => m.id),
        recalled: (memory.recalled || []).map((m) => ({ id: m.id, thread_id: m.thread_id, score: m.score })),
        tokens: memory.tokens,
        recall_error: memory.recall_error,
      };
      status = live.tripwire ? "blocked" : "completed";
      tripwire = live.tripwire || null;
    }
    showTurnStatus(record, status, tripwire);
    manifest = manifest || {};
    await fillTexts([...(manifest.recalled || [])]);
    showHistory(manifest.history || [], status);
    await showRecalled(a, manifest, status);
    showTokens(a, manifest.tokens, status);
  }

  function showTurnStatus(record, status, tripwire) {
    const line = $("turn-status");
    line.className = "turn-status " + (status || "none");
    if (!status) {
      line.textContent = state.thread ? "No turn recorded for this conversation yet." : "A new conversation: nothing sent yet.";
      return;
    }
    const details = record ? ` · ${Math.round(record.duration_ms || 0)} ms · ${record.model}` : "";
    if (status === "blocked") {
      const who = tripwire && tripwire.processor_id ? tripwire.processor_id : "a guardrail";
      line.textContent = beforeModel(tripwire)
        ? `Last turn: blocked by ${who}. The model was not called; below is what memory had prepared for it.`
        : `Last turn: blocked by ${who} while the model answered; nothing was saved.`;
    } else if (status === "failed") {
      line.textContent = `Last turn: failed, nothing was saved${details}.`;
    } else {
      line.textContent = `Last turn: answered${details}.`;
    }
  }

  function showHistory(ids, status) {
    const list = $("history");
    list.replaceChildren();
    for (const id of ids) {
      const text = state.texts[id];
      list.appendChild(el("li", "", text === undefined ? `message ${id.slice(0, 8)}` : clip(text, 160)));
    }
    $("history-count").textContent = status ? `(${ids.length} message${ids.length === 1 ? "" : "s"})` : "";
    if (!ids.length) list.appendChild(el("li", "empty", status ? "no earlier messages" : "nothing yet"));
  }

  async function showRecalled(a, manifest, status) {
    const list = $("recalled");
    list.replaceChildren();
    const recalled = manifest.recalled || [];
    $("recalled-count").textContent = recalled.length ? `(${recalled.length})` : "";
    if (!a.recall) {
      list.appendChild(el("li", "empty", "Recall is off for this agent."));
      return;
    }
    if (manifest.recall_error) list.appendChild(el("li", "empty", "Recall failed on this turn; the turn went on without it."));
    for (const item of recalled) {
      const li = list.appendChild(el("li", "recalled-item"));
      const text = state.texts[item.id];
      li.appendChild(el("span", "text", text === undefined ? `message ${item.id.slice(0, 8)} (no longer stored)` : clip(text, 220)));
      const meta = li.appendChild(el("span", "meta"));
      const score = typeof item.score === "number"
        ? el("span", "score", `score ${item.score.toFixed(2)}`)
        : el("span", "score context", "context around a match");
      meta.appendChild(score);
      meta.appendChild(document.createTextNode(" · "));
      if (!item.thread_id || item.thread_id === state.thread) {
        meta.appendChild(el("span", "source", "this conversation"));
      } else {
        const info = await threadInfo(item.thread_id);
        const title = info && info.title ? `“${clip(info.title, 40)}”` : `conversation ${item.thread_id.slice(0, 8)}`;
        const from = el("span", "source", `from ${title}`);
        if (info && info.agent_id && info.agent_id !== a.id) from.textContent += ` (${byId[info.agent_id] ? byId[info.agent_id].name : info.agent_id})`;
        meta.appendChild(from);
      }
    }
    if (!list.children.length) list.appendChild(el("li", "empty", status ? "nothing recalled on this turn" : "nothing yet"));
  }

  function showTokens(a, tokens, status) {
    let text;
    if (tokens) text = `${tokens.total} of ${tokens.limit} tokens (${tokens.dropped} history message${tokens.dropped === 1 ? "" : "s"} dropped to fit)`;
    else if (!a.token_limit) text = "This agent has no token limiter.";
    else if (status === "blocked") text = `Limit ${a.token_limit} tokens (token-limiter); not counted: the turn was blocked before the count.`;
    else text = `Limit ${a.token_limit} tokens (token-limiter); no count yet.`;
    $("tokens").textContent = text;
  }

  // --- one turn --------------------------------------------------------------------------------------

  async function* sseEvents(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const type = (frame.match(/^event: (.*)$/m) || [])[1];
        const data = (frame.match(/^data: (.*)$/m) || [])[1];
        if (type) yield { type, data: data ? JSON.parse(data) : {} };
      }
    }
  }

  function setBusy(busy) {
    state.busy = busy;
    $("send").disabled = busy;
    $("send").textContent = busy ? "Sending…" : "Send";
    $("agent").disabled = busy;
    $("new-thread").disabled = busy;
    $("messages").setAttribute("aria-busy", String(busy));
  }

  async function streamTurn(text, replyLi) {
    let response;
    try {
      response = await fetch(`${api}agents/${encodeURIComponent(agent().id)}/stream/`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), Accept: "text/event-stream" },
        body: JSON.stringify({ messages: text, thread_id: state.thread, resource_id: resourceId }),
      });
    } catch (e) {
      throw new TurnError("network");
    }
    if (!response.ok) throw new TurnError(await errorCode(response));
    let reply = "";
    try {
      for await (const event of sseEvents(response)) {
        if (event.type === "text-delta") {
          reply += event.data.text;
          replyLi.classList.add("streaming");
          setBody(replyLi, "assistant", reply);
        } else if (event.type === "retry") {
          reply = ""; // an output guardrail asked the model for another answer
          typing(replyLi);
        } else if (event.type === "tool-call") {
          $("messages").insertBefore(el("li", "tool pending", `🔧 ${event.data.name}(${JSON.stringify(event.data.args)})`), replyLi);
        } else if (event.type === "suspended") {
          // A tool call waits for a person (or for the app): nothing of the turn is saved yet.
          return { memory: event.data.memory || {}, tripwire: null, pending: event.data.pending || {} };
        } else if (event.type === "tripwire" || event.type === "finish") {
          return { memory: event.data.memory || {}, tripwire: event.type === "tripwire" ? event.data.tripwire || {} : null };
        } else if (event.type === "error") {
          throw new TurnError(event.data.code || "server_error");
        }
      }
    } catch (e) {
      throw e instanceof TurnError ? e : new TurnError("interrupted");
    }
    throw new TurnError("interrupted");
  }

  // A guardrail may rewrite the input (PIIDetector redacts, UnicodeNormalizer strips hidden characters):
  // say so when the stored message differs from what was typed.
  function noticeRewrite(sent, messages) {
    const users = messages.filter((m) => m.role === "user");
    const stored = users.length ? textOf(users[users.length - 1]) : null;
    if (stored === null || stored.trim() === sent.trim()) return;
    const id = /\[REDACTED:/.test(stored) ? "pii-detector" : "unicode-normalizer";
    banner("notice", {
      code: id,
      title: `${PROCESSORS[id].replace(/^the /, "The ")} (${id}) changed your message before the model saw it`,
      lines: [{ text: `Saved as: “${clip(stored, 200)}”` }],
    });
  }

  // A message the server did not keep stays on screen, marked, until the next turn or a reload.
  function markUnsaved(li, label) {
    li.classList.remove("pending");
    li.classList.add("unsaved");
    li.appendChild(el("span", "by", label));
  }

  async function send(text) {
    if (state.busy || !text) return;
    setBusy(true);
    banner(null);
    document.querySelectorAll("#messages li.unsaved").forEach((li) => li.remove());
    showEmpty(false);
    if (!state.thread) state.thread = newId();
    const userLi = addMessage("user", text, "pending");
    const replyLi = addMessage("assistant", "", "pending");
    typing(replyLi);
    try {
      const result = await streamTurn(text, replyLi);
      if (result.pending) {
        replyLi.remove();
        markUnsaved(userLi, "Waiting · saved once the call is decided");
        showPending(result.pending);
      } else if (result.tripwire) {
        replyLi.remove();
        document.querySelectorAll("#messages li.tool.pending").forEach((li) => li.remove());
        markUnsaved(userLi, beforeModel(result.tripwire) ? "Blocked · not sent to the model, not saved" : "Blocked · not saved");
        showTripwire(result.tripwire);
      }
      await loadThreads();
      if (!result.tripwire && !result.pending) noticeRewrite(text, await loadMessages());
      await loadMemoryPanel(result);
    } catch (error) {
      replyLi.remove();
      document.querySelectorAll("#messages li.tool.pending").forEach((li) => li.remove());
      markUnsaved(userLi, "Not saved");
      showTurnStatus(null, "failed", null);
      showError(error instanceof TurnError ? error.code : "server_error", text);
    } finally {
      setBusy(false);
      const last = $("messages").lastElementChild;
      if (last) last.scrollIntoView({ block: "end" });
    }
  }

  // --- small screens: one panel at a time --------------------------------------------------------------

  function setView(view) {
    document.body.dataset.view = view;
    for (const b of document.querySelectorAll(".view-button")) b.setAttribute("aria-pressed", String(b.dataset.view === view));
  }

  for (const b of document.querySelectorAll(".view-button")) {
    b.addEventListener("click", () => setView(document.body.dataset.view === b.dataset.view ? "chat" : b.dataset.view));
  }
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("input").value.trim();
    if (!text || state.busy) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); $("composer").requestSubmit(); }
  });
  for (const example of document.querySelectorAll(".example")) {
    example.addEventListener("click", () => { $("input").value = example.textContent; $("input").focus(); });
  }
  $("new-thread").addEventListener("click", () => { setView("chat"); newConversation(); });
  $("agent").addEventListener("change", () => { banner(null); openAgent().catch((e) => showError(e.code || "server_error")); });

  const requested = new URL(location.href).searchParams.get("agent");
  const remembered = localStorage.getItem(AGENT_KEY);
  if (!requested && remembered && byId[remembered]) $("agent").value = remembered;
  openAgent().catch((e) => banner("error", { title: plainError(e.code || "server_error") }));
})();
