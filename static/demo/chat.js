// The demo chat page: threads, streamed replies over SSE, and what memory gave the model.
(function () {
  "use strict";
  const api = window.MEMPROC_API;
  const resourceId = JSON.parse(document.getElementById("resource-id").textContent);
  const $ = (id) => document.getElementById(id);
  const state = { thread: null, busy: false, lastText: "" };

  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function call(path, options = {}) {
    const response = await fetch(api + path, {
      credentials: "same-origin",
      ...options,
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), ...(options.headers || {}) },
    });
    if (!response.ok) {
      let detail = response.statusText;
      try { const body = await response.json(); detail = body.detail || JSON.stringify(body); } catch (e) { /* not JSON */ }
      throw new Error(`${response.status}: ${detail}`);
    }
    return response.status === 204 ? null : response.json();
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

  function addMessage(role, text, extraClass) {
    const li = document.createElement("li");
    li.className = role + (extraClass ? " " + extraClass : "");
    li.textContent = text;
    li.dataset.role = role;
    $("messages").appendChild(li);
    li.scrollIntoView({ block: "end" });
    return li;
  }

  function banner(kind, text, retry) {
    const el = $("banner");
    el.hidden = !kind;
    el.className = kind || "";
    el.textContent = text || "";
    if (retry) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "Retry";
      button.addEventListener("click", retry);
      el.appendChild(button);
    }
  }

  async function loadThreads() {
    const data = await call(`threads/?resource_id=${encodeURIComponent(resourceId)}`);
    const threads = Array.isArray(data) ? data : data.results || [];
    const list = $("threads");
    list.replaceChildren();
    for (const thread of threads) {
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = thread.title || thread.id.slice(0, 12);
      button.setAttribute("aria-current", String(thread.id === state.thread));
      button.addEventListener("click", () => openThread(thread.id));
      li.appendChild(button);
      list.appendChild(li);
    }
    return threads;
  }

  async function loadMessages() {
    $("messages").replaceChildren();
    if (!state.thread) return;
    let url = `threads/${encodeURIComponent(state.thread)}/messages/`;
    const all = [];
    while (url) {
      const page = await call(url);
      all.push(...page.results);
      url = page.next ? page.next.slice(page.next.indexOf(api) + api.length) : null;
    }
    for (const message of all) addMessage(message.role, textOf(message));
  }

  async function loadWorkingMemory() {
    if (!state.thread) return;
    try {
      const wm = await call(`threads/${encodeURIComponent(state.thread)}/working-memory/?agent=${encodeURIComponent($("agent").value)}`);
      const value = typeof wm.working_memory === "string" ? wm.working_memory : JSON.stringify(wm.working_memory, null, 2);
      $("working-memory").textContent = value || "(empty)";
    } catch (e) { /* a new thread has none yet */ }
  }

  async function openThread(id) {
    state.thread = id;
    banner(null);
    await loadThreads();
    await loadMessages();
    await loadWorkingMemory();
  }

  function showMemory(memory) {
    memory = memory || {};
    const history = $("history");
    history.replaceChildren();
    for (const m of memory.history || []) {
      const li = document.createElement("li");
      li.textContent = `${m.role}: ${m.text}`;
      history.appendChild(li);
    }
    $("history-count").textContent = `(${(memory.history || []).length} messages)`;
    const recalled = $("recalled");
    recalled.replaceChildren();
    for (const m of memory.recalled || []) {
      const li = document.createElement("li");
      li.textContent = m.text + " ";
      const from = document.createElement("span");
      from.className = "from";
      from.textContent = m.thread_id === state.thread ? "(this conversation)" : `(from conversation ${String(m.thread_id).slice(0, 12)})`;
      li.appendChild(from);
      recalled.appendChild(li);
    }
    if (!recalled.children.length) recalled.innerHTML = '<li class="empty">nothing recalled</li>';
    if (memory.working_memory !== undefined) {
      $("working-memory").textContent = memory.working_memory || "(empty)";
    }
    const tokens = memory.tokens;
    $("tokens").textContent = tokens ? `${tokens.total} of ${tokens.limit} (dropped ${tokens.dropped})` : "no token limiter on this agent";
  }

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

  async function send(text) {
    if (state.busy) return;
    state.busy = true;
    state.lastText = text;
    $("send").disabled = true;
    banner(null);
    if (!state.thread) state.thread = crypto.randomUUID().replace(/-/g, "");
    const userLi = addMessage("user", text, "pending");
    const replyLi = addMessage("assistant", "", "pending");
    let finished = false;
    try {
      const response = await fetch(`${api}agents/${encodeURIComponent($("agent").value)}/stream/`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), Accept: "text/event-stream" },
        body: JSON.stringify({ messages: text, thread_id: state.thread, resource_id: resourceId }),
      });
      if (!response.ok) {
        let detail = response.statusText;
        try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
        throw new Error(`${response.status}: ${detail}`);
      }
      for await (const event of sseEvents(response)) {
        if (event.type === "text-delta") {
          replyLi.textContent += event.data.text;
        } else if (event.type === "tool-call") {
          addMessage("tool", `🔧 ${event.data.name}(${JSON.stringify(event.data.args)})`, "pending");
        } else if (event.type === "tripwire") {
          finished = true;
          const t = event.data.tripwire || {};
          banner("tripwire", `Blocked by ${t.processor_id}: ${t.reason}. Nothing of this message was saved.`);
          showMemory(event.data.memory);
        } else if (event.type === "finish") {
          finished = true;
          showMemory(event.data.memory);
        } else if (event.type === "error") {
          throw new Error(event.data.detail || "The turn failed");
        }
      }
      if (!finished) throw new Error("The connection closed before the reply finished");
      await loadThreads();
      await loadMessages();
      await loadWorkingMemory();
    } catch (error) {
      userLi.remove();
      replyLi.remove();
      document.querySelectorAll("#messages li.pending").forEach((li) => li.remove());
      banner("error", `Could not get a reply (${error.message}). Your message was not saved.`, () => send(state.lastText));
      $("input").value = text;
    } finally {
      state.busy = false;
      $("send").disabled = false;
    }
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("input").value.trim();
    if (!text) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("composer").requestSubmit(); }
  });
  $("new-thread").addEventListener("click", async () => {
    state.thread = null;
    $("messages").replaceChildren();
    banner(null);
    showMemory({});
    $("working-memory").textContent = "(empty)";
    await loadThreads();
  });

  loadThreads().then((threads) => { if (threads.length) openThread(threads[0].id); }).catch((e) => banner("error", e.message));
})();
