/*
 * <memproc-chat>: a chat box for a memproc agent, for any Django template. No build step, no framework.
 *
 *   {% load static %}
 *   <memproc-chat agent="support" api="{% url 'memproc:api-root' %}" csrf-token="{{ csrf_token }}"></memproc-chat>
 *   <script src="{% static 'memproc/chat.js' %}" defer></script>
 *
 * It talks to `agents/<agent>/chat/` (the AI SDK's UI-message stream protocol) with the page's session,
 * streams replies as they are written, renders Markdown safely (it builds DOM nodes and never parses
 * untrusted text as HTML), shows a banner when a guardrail blocks a turn, and keeps the conversation
 * across reloads: the thread id lives in localStorage and the messages are loaded from
 * `threads/<id>/messages/`.
 *
 * Attributes: `agent` (required); `api` (memproc's API root, default "/api/memproc/"); `thread` (a fixed
 * thread id instead of the stored one); `storage-key` (default "memproc-chat:<agent>"); `csrf-token`
 * (default: the `csrftoken` cookie); `placeholder`.
 * A "Conversations" list (closed until opened; hidden with a fixed `thread`) lists the user's threads
 * with this agent (`threads/?agent=`): open one, archive it, or, with "Show archived", bring one back.
 * A turn that stops at a tool call waiting for approval (`@tool(requires_approval=...)`) shows the call:
 * its tool and arguments and, when the signed-in user may decide it (`GET pending/<id>/` answers 200),
 * Approve and Reject (with a reason) buttons that post to `pending/<id>/approve/` or `reject/` and show
 * the resumed turn's answer; anyone else reads "Waiting for approval". On load, the thread's calls the
 * user may decide (`pending/`) show the same way. A client-side tool's call only says the turn waits.
 * Events (bubbling, composed): `memproc-chat:finish` (detail: the finish chunk's metadata, or after a
 * decision {thread_id, message_ids}), `memproc-chat:suspended` (detail: {calls}: the calls that wait),
 * `memproc-chat:tripwire` (detail: the tripwire), `memproc-chat:error` (detail: {message}).
 * A message sent while a reply is still streaming stays in the box and goes once that turn has ended
 * (not after an error, a turn that waits for a decision, or a change of conversation: then it stays).
 * Styling: CSS custom properties (--memproc-accent, --memproc-bg, --memproc-border, --memproc-font) and
 * the parts `messages`, `message`, `user`, `assistant`, `banner`, `composer`, `input`, `send`, `new`,
 * `threads`, `approval`.
 */
(function () {
  "use strict";
  if (typeof window === "undefined" || !window.customElements || customElements.get("memproc-chat")) return;

  // --- safe Markdown: text in, DOM nodes out ----------------------------------------------------------

  const SAFE_PROTOCOLS = ["http:", "https:", "mailto:"];

  function safeUrl(url) {
    try {
      const parsed = new URL(url, window.location.href);
      return SAFE_PROTOCOLS.includes(parsed.protocol) ? parsed.href : null;
    } catch (e) {
      return null;
    }
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Inline spans: `code`, **strong**, __strong__, *em*, _em_, ~~del~~, [text](url), <https://autolinks>.
  const INLINE = new RegExp(
    [
      "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)", // 1, 2: code
      "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*", // 3: strong
      "__(?=\\S)([\\s\\S]*?\\S)__(?!\\w)", // 4: strong
      "\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*", // 5: em (also a single character)
      "\\*([^\\s*])\\*", // 6: em of one character
      "(?<![\\w])_(?=[^\\s_])([\\s\\S]*?[^\\s_]|[^\\s_])_(?!\\w)", // 7: em
      "~~(?=\\S)([\\s\\S]*?\\S)~~", // 8: del
      "\\[([^\\]\\n]+)\\]\\(\\s*<?([^)\\s>]+)>?(?:\\s+\"[^\"]*\")?\\s*\\)", // 9, 10: link
      "<((?:https?:\\/\\/|mailto:)[^>\\s]+)>", // 11: autolink
      "(\\n)", // 12: line break
    ].join("|"),
    "g"
  );

  function appendInline(parent, text) {
    const pattern = new RegExp(INLINE.source, "g"); // its own state: the calls nest
    let last = 0;
    let match;
    while ((match = pattern.exec(text)) !== null) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      last = pattern.lastIndex;
      if (match[2] !== undefined) {
        parent.appendChild(el("code", "", match[2].replace(/^ (.*) $/, "$1")));
      } else if (match[3] !== undefined || match[4] !== undefined) {
        appendInline(parent.appendChild(el("strong")), match[3] !== undefined ? match[3] : match[4]);
      } else if (match[5] !== undefined || match[6] !== undefined || match[7] !== undefined) {
        const inner = match[5] !== undefined ? match[5] : match[6] !== undefined ? match[6] : match[7];
        appendInline(parent.appendChild(el("em")), inner);
      } else if (match[8] !== undefined) {
        appendInline(parent.appendChild(el("del")), match[8]);
      } else if (match[9] !== undefined) {
        const href = safeUrl(match[10]);
        if (href) {
          const a = el("a");
          a.href = href;
          a.target = "_blank";
          a.rel = "noopener noreferrer nofollow";
          appendInline(a, match[9]);
          parent.appendChild(a);
        } else {
          appendInline(parent, match[9]); // an unsafe link keeps its text, loses its target
        }
      } else if (match[11] !== undefined) {
        const href = safeUrl(match[11]);
        const a = el(href ? "a" : "span", "", match[11]);
        if (href) {
          a.href = href;
          a.target = "_blank";
          a.rel = "noopener noreferrer nofollow";
        }
        parent.appendChild(a);
      } else if (match[12] !== undefined) {
        parent.appendChild(el("br"));
      }
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
    return parent;
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?/;
  const BULLET = /^( {0,3})[-*+]\s+(.*)$/;
  const NUMBERED = /^( {0,3})(\d{1,9})[.)]\s+(.*)$/;

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
      BULLET.test(line) || NUMBERED.test(line);
  }

  function renderMarkdown(source) {
    const root = document.createDocumentFragment();
    const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(FENCE);
      if (fence) {
        const body = [];
        i += 1;
        while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
        i += 1; // the closing fence (or the end: a streaming block that is not closed yet)
        const code = el("code", "", body.join("\n"));
        if (/^[\w+-]+$/.test(fence[2])) code.className = "language-" + fence[2];
        root.appendChild(el("pre")).appendChild(code);
        continue;
      }
      if (!line.trim()) { i += 1; continue; }
      const heading = line.match(HEADING);
      if (heading) {
        appendInline(root.appendChild(el("h" + heading[1].length)), heading[2]);
        i += 1;
        continue;
      }
      if (RULE.test(line)) { root.appendChild(el("hr")); i += 1; continue; }
      if (QUOTE.test(line)) {
        const quoted = [];
        while (i < lines.length && QUOTE.test(lines[i])) quoted.push(lines[i++].replace(QUOTE, ""));
        root.appendChild(el("blockquote")).appendChild(renderMarkdown(quoted.join("\n")));
        continue;
      }
      const bullet = BULLET.test(line);
      if (bullet || NUMBERED.test(line)) {
        const pattern = bullet ? BULLET : NUMBERED;
        const list = el(bullet ? "ul" : "ol");
        if (!bullet) {
          const first = parseInt(line.match(NUMBERED)[2], 10);
          if (first !== 1) list.start = first;
        }
        let item = null;
        while (i < lines.length) {
          const current = lines[i];
          const m = current.match(pattern);
          if (m) {
            item = [bullet ? m[2] : m[3]];
            list.appendChild(el("li")).__lines = item;
          } else if (current.trim() && /^\s+/.test(current) && item) {
            item.push(current.trim()); // a continuation line of the item
          } else {
            break;
          }
          i += 1;
        }
        for (const li of list.children) appendInline(li, li.__lines.join("\n"));
        root.appendChild(list);
        continue;
      }
      const paragraph = [];
      while (i < lines.length && lines[i].trim() && !(paragraph.length && startsBlock(lines[i]))) {
        paragraph.push(lines[i++]);
      }
      appendInline(root.appendChild(el("p")), paragraph.join("\n"));
    }
    return root;
  }

  // --- the server ----------------------------------------------------------------------------------

  function cookie(name) {
    const match = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return match ? decodeURIComponent(match[1]) : "";
  }

  function newId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      if (body.detail) return body.detail;
      const first = Object.entries(body)[0];
      if (first) return [].concat(first[1]).join(" ");
    } catch (e) { /* not JSON */ }
    return response.statusText || "HTTP " + response.status;
  }

  // UI-message stream chunks from an SSE body: `data: <json>` frames, ending with `data: [DONE]` (which
  // sets `seen.done`: the stream ended rather than the connection).
  async function* chunks(response, seen = {}) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        const data = frame.split(/\r?\n/).filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (!data) continue;
        if (data === "[DONE]") { seen.done = true; return; }
        yield JSON.parse(data);
      }
      if (done) return;
    }
  }

  // --- the element ---------------------------------------------------------------------------------

  const STYLE = `
    :host { display: block; font: var(--memproc-font, 15px/1.45 system-ui, sans-serif); color: #1d2330;
      --accent: var(--memproc-accent, #2f6fdd); --border: var(--memproc-border, #d8dee9); }
    :host([hidden]) { display: none; }
    .chat { display: flex; flex-direction: column; height: 100%; min-height: 16rem;
      background: var(--memproc-bg, #fff); border: 1px solid var(--border); border-radius: 10px; }
    .messages { flex: 1; overflow-y: auto; list-style: none; margin: 0; padding: .8rem; }
    .message { width: fit-content; max-width: 80%; margin: .4rem 0; padding: .5rem .8rem;
      border-radius: 10px; overflow-wrap: anywhere; }
    .message.user { margin-left: auto; background: var(--accent); color: #fff; white-space: pre-wrap; }
    .message.assistant { background: #f6f8fb; border: 1px solid var(--border); }
    .message.pending { opacity: .75; }
    .message.pending .body:empty::after { content: "…"; }
    .message.blocked { opacity: .55; text-decoration: line-through; }
    .body > :first-child { margin-top: 0; } .body > :last-child { margin-bottom: 0; }
    .body ul { list-style: disc; padding-left: 1.3rem; } .body ol { list-style: decimal; padding-left: 1.5rem; }
    .body pre { background: #eef1f6; padding: .5rem; border-radius: 6px; overflow-x: auto; }
    .body code { font-family: ui-monospace, monospace; font-size: .92em; }
    .body :not(pre) > code { background: #eef1f6; padding: 0 .25em; border-radius: 4px; }
    .body blockquote { margin: .4rem 0; padding-left: .7rem; border-left: 3px solid var(--border); color: #556; }
    .tool { display: block; font-size: .82em; color: #556; margin: .2rem 0; font-family: ui-monospace, monospace; }
    .tool.error { color: #8a1f1f; }
    .banner { margin: .6rem .8rem 0; padding: .5rem .7rem; border-radius: 8px; }
    .banner.tripwire { background: #fde8e8; border: 1px solid #e0a0a0; color: #7a1c1c; }
    .banner.error { background: #fff4e0; border: 1px solid #e3b96b; color: #6b4a00; }
    .banner button { margin-left: .6rem; }
    form { display: flex; gap: .5rem; padding: .6rem .8rem; border-top: 1px solid var(--border); }
    textarea { flex: 1; resize: vertical; font: inherit; padding: .4rem .55rem; min-height: 2.4rem;
      border: 1px solid var(--border); border-radius: 8px; }
    textarea:focus-visible, button:focus-visible, input:focus-visible {
      outline: 3px solid color-mix(in srgb, var(--accent) 45%, transparent); outline-offset: 1px; }
    button { font: inherit; cursor: pointer; border-radius: 8px; padding: .35rem .85rem;
      border: 1px solid var(--border); background: var(--memproc-bg, #fff); color: var(--accent); }
    button:hover:not(:disabled) { border-color: var(--accent); }
    button.send { background: var(--accent); border-color: var(--accent); color: #fff; font-weight: 600; }
    button:disabled { cursor: default; opacity: .6; }
    .threads { padding: .4rem .8rem; border-bottom: 1px solid var(--border); font-size: .9em; }
    .threads ul { list-style: none; margin: .3rem 0 0; padding: 0; }
    .threads li { display: flex; gap: .4rem; align-items: center; padding: .15rem 0; }
    .threads li .open { flex: 1; min-width: 0; text-align: left; overflow: hidden; text-overflow: ellipsis;
      white-space: nowrap; background: none; border: 0; padding: .1rem 0; color: inherit; }
    .threads li .archive { font-size: .85em; padding: .1rem .5rem; }
    .threads li.current .open { font-weight: 600; }
    .threads li.archived .open { color: #778; font-style: italic; }
    .threads label { display: inline-flex; gap: .3rem; margin-left: .6rem; }
    .approval { margin: .5rem 0 .1rem; padding: .5rem .6rem; border: 1px solid #e3b96b; border-radius: 8px;
      background: #fffaf0; }
    .approval-head { font-size: .9em; }
    .approval-tool { font-family: ui-monospace, monospace; font-weight: 600; }
    .approval-args { margin: .35rem 0; padding: .4rem .5rem; background: #eef1f6; border-radius: 6px;
      font: .85em/1.35 ui-monospace, monospace; white-space: pre-wrap; overflow-wrap: anywhere;
      max-height: 12rem; overflow-y: auto; }
    .approval-status { margin: .3rem 0 0; font-size: .9em; color: #6b4a00; }
    .approval-status.conflict, .approval-status.error { color: #8a1f1f; }
    .approval-actions, .approval form.approval-reason { display: flex; flex-wrap: wrap; gap: .4rem;
      margin-top: .4rem; padding: 0; border: 0; }
    .approval [hidden], .tool[hidden] { display: none !important; }
    .approval-reason input { flex: 1; min-width: 10rem; font: inherit; padding: .25rem .4rem; }
    .approval .approve { background: var(--accent); color: #fff; border: 1px solid var(--accent);
      border-radius: 6px; padding: .2rem .8rem; }
    .approval .reject, .approval .confirm-reject { background: #fff; color: #8a1f1f; border: 1px solid #e0a0a0;
      border-radius: 6px; padding: .2rem .8rem; }
    .approval-done { margin: .3rem 0 0; font-size: .85em; color: #556; }
  `;

  class MemprocChat extends HTMLElement {
    constructor() {
      super();
      this.busy = false;
      this.queued = false; // Enter was pressed while busy: submit the box when the turn ends
      this.controller = null;
      this.threadId = null;
      const root = this.attachShadow({ mode: "open" });
      root.appendChild(el("style", "", STYLE));
      const chat = root.appendChild(el("div", "chat"));
      chat.setAttribute("part", "chat");
      this.bannerEl = chat.appendChild(el("div", "banner"));
      this.bannerEl.setAttribute("role", "alert");
      this.bannerEl.setAttribute("part", "banner");
      this.bannerEl.hidden = true;
      // The user's conversations with this agent: open one, archive or bring one back.
      this.threadsEl = chat.appendChild(el("details", "threads"));
      this.threadsEl.setAttribute("part", "threads");
      const summary = this.threadsEl.appendChild(el("summary", "", "Conversations"));
      const showArchived = el("label", "", "");
      this.archivedBox = showArchived.appendChild(el("input"));
      this.archivedBox.type = "checkbox";
      showArchived.appendChild(document.createTextNode("Show archived"));
      summary.appendChild(showArchived);
      this.threadList = this.threadsEl.appendChild(el("ul"));
      this.threadList.setAttribute("aria-label", "Conversations");
      this.threadsEl.addEventListener("toggle", () => { if (this.threadsEl.open) this.loadThreads(); });
      this.archivedBox.addEventListener("change", () => this.loadThreads());
      this.list = chat.appendChild(el("ol", "messages"));
      this.list.setAttribute("part", "messages");
      this.list.setAttribute("aria-live", "polite");
      this.form = chat.appendChild(el("form", "composer"));
      this.form.setAttribute("part", "composer");
      this.input = this.form.appendChild(el("textarea", "input"));
      this.input.setAttribute("part", "input");
      this.input.rows = 2;
      this.input.setAttribute("aria-label", "Message");
      this.sendButton = this.form.appendChild(el("button", "send", "Send"));
      this.sendButton.type = "submit";
      this.sendButton.setAttribute("part", "send");
      this.newButton = this.form.appendChild(el("button", "new", "New chat"));
      this.newButton.type = "button";
      this.newButton.setAttribute("part", "new");
      this.form.addEventListener("submit", (event) => {
        event.preventDefault();
        const text = this.input.value.trim();
        if (!text) return;
        if (this.busy) {
          this.queued = true; // the box is read again when the turn ends, edits included
          return;
        }
        this.input.value = "";
        this.send(text);
      });
      this.input.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
          event.preventDefault();
          this.form.requestSubmit();
        }
      });
      this.newButton.addEventListener("click", () => this.newChat());
    }

    connectedCallback() {
      this.input.placeholder = this.getAttribute("placeholder") || "Write a message…";
      if (!this.agent) {
        this.showBanner("error", "<memproc-chat> needs an agent attribute.");
        return;
      }
      const known = this.getAttribute("thread") || this.stored();
      this.threadId = known || this.remember(newId());
      this.threadsEl.hidden = this.hasAttribute("thread"); // a fixed thread: nothing to choose
      if (known) this.load(); // a new id has nothing stored yet
    }

    // --- the conversation list ---------------------------------------------------------------------

    async loadThreads() {
      const archived = this.archivedBox.checked ? "all" : "false";
      const url = this.api + "threads/?agent=" + encodeURIComponent(this.agent) + "&archived=" + archived;
      try {
        const response = await fetch(url, { credentials: "same-origin", headers: this.headers() });
        if (!response.ok) throw new Error("The conversations could not be loaded (" + response.status + ").");
        const body = await response.json();
        const threads = Array.isArray(body) ? body : body.results || [];
        this.threadList.replaceChildren(...threads.map((thread) => this.renderThread(thread)));
        if (!threads.length) this.threadList.appendChild(el("li", "", "No conversation yet."));
      } catch (error) {
        this.showBanner("error", error.message);
      }
    }

    renderThread(thread) {
      const item = el("li", thread.archived_at ? "archived" : "");
      item.dataset.threadId = thread.id;
      if (thread.id === this.threadId) item.classList.add("current");
      const name = thread.title || thread.id;
      const open = item.appendChild(el("button", "open", name + (thread.archived_at ? " (archived)" : "")));
      open.type = "button";
      open.title = name;
      open.setAttribute("aria-label", "Open " + name);
      open.addEventListener("click", () => this.openThread(thread.id));
      const verb = thread.archived_at ? "Unarchive" : "Archive";
      const toggle = item.appendChild(el("button", "archive", verb));
      toggle.type = "button";
      toggle.setAttribute("aria-label", verb + " " + name);
      toggle.addEventListener("click", () => this.archiveThread(thread.id, !thread.archived_at));
      return item;
    }

    openThread(id) {
      if (this.controller) this.controller.abort();
      this.threadId = this.remember(id);
      this.list.replaceChildren();
      this.showBanner(null);
      this.load();
      this.loadThreads();
    }

    async archiveThread(id, archive) {
      const url = this.api + "threads/" + encodeURIComponent(id) + (archive ? "/archive/" : "/unarchive/");
      try {
        const response = await fetch(url, {
          method: "POST",
          credentials: "same-origin",
          headers: this.headers({ "Content-Type": "application/json" }),
          body: "{}",
        });
        if (!response.ok) throw new Error("The conversation could not be " + (archive ? "archived" : "brought back") + " (" + response.status + ").");
      } catch (error) {
        this.showBanner("error", error.message);
      }
      await this.loadThreads();
    }

    disconnectedCallback() {
      if (this.controller) this.controller.abort();
    }

    get agent() { return this.getAttribute("agent") || ""; }

    get api() {
      const base = this.getAttribute("api") || "/api/memproc/";
      return base.endsWith("/") ? base : base + "/";
    }

    get storageKey() { return this.getAttribute("storage-key") || "memproc-chat:" + this.agent; }

    stored() {
      try { return window.localStorage.getItem(this.storageKey); } catch (e) { return null; }
    }

    remember(id) {
      try { window.localStorage.setItem(this.storageKey, id); } catch (e) { /* private mode */ }
      return id;
    }

    headers(extra) {
      return {
        "X-CSRFToken": this.getAttribute("csrf-token") || cookie("csrftoken"),
        "X-Requested-With": "XMLHttpRequest",
        ...extra,
      };
    }

    newChat() {
      if (this.controller) this.controller.abort();
      this.threadId = this.getAttribute("thread") ? this.threadId : this.remember(newId());
      this.list.replaceChildren();
      this.showBanner(null);
    }

    // --- history -----------------------------------------------------------------------------------

    async load() {
      this.list.replaceChildren();
      const loading = this.threadId;
      let url = this.api + "threads/" + encodeURIComponent(loading) + "/messages/?limit=200";
      const messages = [];
      try {
        while (url) {
          const response = await fetch(url, { credentials: "same-origin", headers: this.headers() });
          if (response.status === 404) {
            // A first turn that waits for approval has stored nothing yet, but its call is there.
            if (messages.length === 0 && (await this.showWaitingCalls(loading))) return;
            // Not stored (yet), or not this user's: a fixed thread is kept, a remembered one replaced.
            // Only if nothing was sent meanwhile: a turn started on this id has made it ours.
            const untouched = this.threadId === loading && !this.controller && !this.list.children.length;
            if (!this.getAttribute("thread") && messages.length === 0 && untouched) {
              this.threadId = this.remember(newId());
            }
            return;
          }
          if (!response.ok) throw new Error(await errorText(response));
          const page = await response.json();
          messages.push(...page.results);
          url = page.next;
        }
      } catch (error) {
        this.showBanner("error", "Could not load the conversation: " + error.message);
        return;
      }
      if (this.threadId !== loading) return; // another conversation was opened meanwhile
      this.renderStored(messages);
      this.scrollDown();
      await this.showWaitingCalls(loading);
    }

    // Stored messages (the API's shape) as list items at the end of the list: the items added.
    renderStored(messages) {
      const added = [];
      let reply = null;
      const calls = {};
      for (const message of messages) {
        if (message.role === "user") {
          reply = null;
          const li = this.addMessage("user", message.id);
          li.textContent = textOf(message.parts);
          added.push(li);
        } else if (message.role === "assistant") {
          if (!reply) added.push((reply = this.addMessage("assistant", message.id)));
          for (const part of message.parts) {
            if (part.type === "text" && part.text) this.appendText(reply, part.text);
            if (part.type === "tool-call") calls[part.tool_call_id] = this.addTool(reply, part.tool_name, part.args);
          }
          this.renderReply(reply, { now: true });
        } else if (message.role === "tool") {
          for (const part of message.parts) {
            const chip = calls[part.tool_call_id];
            if (chip && part.type === "tool-result") this.toolDone(chip, part.result, part.is_error);
          }
        }
      }
      return added;
    }

    // --- a turn --------------------------------------------------------------------------------------

    async send(text) {
      this.busy = true;
      this.sendButton.disabled = true;
      this.showBanner(null);
      const userId = newId();
      const userLi = this.addMessage("user", userId, "pending");
      userLi.textContent = text;
      let reply = null;
      let finished = false;
      let ended = false; // the turn is over (answered or blocked): a queued message may follow
      let waiting = null; // the finish chunk's `pending`, when the server names the call that waits
      const seen = {};
      this.controller = new AbortController();
      try {
        const response = await fetch(this.api + "agents/" + encodeURIComponent(this.agent) + "/chat/", {
          method: "POST",
          credentials: "same-origin",
          signal: this.controller.signal,
          headers: this.headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
          // The server keeps the conversation: only the new message travels (the AI SDK's pattern for
          // persisted chats; the endpoint takes useChat's whole list as well).
          body: JSON.stringify({
            id: this.threadId,
            trigger: "submit-message",
            messages: [{ id: userId, role: "user", parts: [{ type: "text", text }] }],
          }),
        });
        if (!response.ok) throw new Error(await errorText(response));
        reply = this.addMessage("assistant", null, "pending");
        for await (const chunk of chunks(response, seen)) {
          if (chunk.type === "start") {
            if (chunk.messageId) reply.dataset.id = chunk.messageId;
          } else if (chunk.type === "text-start") {
            reply.__texts.push("");
          } else if (chunk.type === "text-delta") {
            if (!reply.__texts.length) reply.__texts.push("");
            reply.__texts[reply.__texts.length - 1] += chunk.delta;
            this.renderReply(reply);
          } else if (chunk.type === "tool-input-available") {
            reply.__calls[chunk.toolCallId] = this.addTool(reply, chunk.toolName, chunk.input);
            reply.__open[chunk.toolCallId] = { tool_call_id: chunk.toolCallId, tool_name: chunk.toolName, args: chunk.input };
          } else if (chunk.type === "tool-approval-request") {
            // The AI SDK's approval request; memproc's approvalId is the PendingToolCall's id.
            const call = reply.__open[chunk.toolCallId];
            if (call) Object.assign(call, { kind: "approval" }, chunk.approvalId ? { id: chunk.approvalId } : {});
          } else if (chunk.type === "tool-output-available" || chunk.type === "tool-output-error") {
            delete reply.__open[chunk.toolCallId];
            const chip = reply.__calls[chunk.toolCallId];
            if (chip) this.toolDone(chip, chunk.type === "tool-output-error" ? chunk.errorText : chunk.output,
              chunk.type === "tool-output-error");
          } else if (chunk.type === "data-retry") {
            reply.__texts = []; // a guardrail rejected the draft; a new attempt follows
            this.renderReply(reply);
          } else if (chunk.type === "data-tripwire") {
            finished = true;
            const t = chunk.data || {};
            reply.remove();
            reply = null;
            userLi.classList.add("blocked");
            userLi.title = "Blocked: not saved";
            this.showBanner("tripwire", "Blocked by " + (t.processor_id || "a guardrail") + ": " +
              (t.reason || "no reason given") + ". Nothing of this message was saved.");
            this.emit("tripwire", t);
          } else if (chunk.type === "finish") {
            finished = true;
            waiting = (chunk.messageMetadata || {}).pending || null;
            if (!waiting && !(reply && Object.keys(reply.__open).length)) { // else the turn waits
              if (reply) {
                this.renderReply(reply, { now: true }); // the finished message shows its last delta
                reply.classList.remove("pending");
              }
              userLi.classList.remove("pending");
              this.emit("finish", chunk.messageMetadata || {});
            }
          } else if (chunk.type === "error") {
            throw new Error(chunk.errorText || "The turn failed.");
          }
          this.scrollDown();
        }
        // Calls still without a result when the stream ends: the turn is suspended, waiting for them.
        const open = reply ? Object.values(reply.__open) : [];
        if (waiting || ((finished || seen.done) && open.length)) {
          this.suspended(userLi, reply, open, waiting);
        } else if (!finished) {
          throw new Error("The connection closed before the reply finished.");
        } else {
          ended = true;
        }
      } catch (error) {
        if (error.name === "AbortError") return;
        userLi.remove();
        if (reply) reply.remove();
        this.input.value = this.input.value || text;
        this.showBanner("error", "No reply (" + error.message + "). Your message was not saved.", () => {
          this.input.value = "";
          this.send(text);
        });
        this.emit("error", { message: error.message });
      } finally {
        this.busy = false;
        this.sendButton.disabled = false;
        this.controller = null;
        const next = this.queued && ended;
        this.queued = false;
        if (next) this.form.requestSubmit();
      }
    }

    // --- tool calls that wait for a decision --------------------------------------------------------

    // The stream ended at calls without results: the turn is suspended until they are decided. The
    // server may name the call (`tool-approval-request`'s approvalId, or `pending` in the finish
    // metadata); otherwise the user's queue (`pending/`) is searched for it.
    suspended(userLi, reply, open, waiting) {
      userLi.classList.remove("pending");
      if (!reply) reply = this.addMessage("assistant", null);
      reply.classList.remove("pending");
      reply.classList.add("waiting");
      this.renderReply(reply, { now: true });
      const calls = open.slice();
      if (waiting) {
        const known = calls.find((call) => call.tool_call_id === waiting.tool_call_id);
        const call = { tool_call_id: waiting.tool_call_id, tool_name: waiting.tool_name, args: waiting.args };
        if (known) Object.assign(known, { id: waiting.id, kind: waiting.kind || "approval" });
        else calls.push({ ...call, id: waiting.id, kind: waiting.kind || "approval" });
      }
      for (const call of calls) this.awaitDecision(reply, call);
      this.emit("suspended", { calls });
    }

    // After a load: the thread's calls that wait and that this user may decide, each as a reply with
    // its buttons. Whether there were any.
    async showWaitingCalls(threadId) {
      let calls;
      try {
        calls = await this.waitingCalls(threadId);
      } catch (error) {
        return false; // the queue is an extra: the conversation shows without it
      }
      if (this.threadId !== threadId) return false;
      for (const pending of calls) {
        if (this.list.querySelector(".approval[data-pending-id='" + CSS.escape(pending.id) + "']")) continue;
        const reply = this.addMessage("assistant", null, "waiting");
        if (pending.text) this.appendText(reply, pending.text);
        this.renderReply(reply, { now: true });
        reply.__calls[pending.tool_call_id] = this.addTool(reply, pending.tool_name, pending.arguments);
        const card = this.addApproval(reply, {
          id: pending.id, tool_call_id: pending.tool_call_id, tool_name: pending.tool_name, args: pending.arguments,
        });
        this.offerDecision(card, reply, pending.id);
      }
      if (calls.length) this.scrollDown();
      return calls.length > 0;
    }

    // The calls of `threadId` with this agent that wait for a decision this user may make (the API
    // lists only those), oldest first.
    async waitingCalls(threadId) {
      const found = [];
      let url = this.api + "pending/?limit=200";
      for (let page = 0; url && page < 10; page += 1) {
        const response = await fetch(url, { credentials: "same-origin", headers: this.headers() });
        if (!response.ok) throw new Error(await errorText(response));
        const body = await response.json();
        const rows = Array.isArray(body) ? body : body.results || [];
        found.push(...rows.filter((row) => row.thread_id === threadId && row.agent_id === this.agent &&
          row.state === "pending" && row.kind !== "client"));
        url = Array.isArray(body) ? null : body.next;
      }
      return found;
    }

    // One waiting call: its card, with buttons if this user may decide it, else what it waits for.
    async awaitDecision(reply, call) {
      const card = this.addApproval(reply, call);
      if (call.kind === "client") {
        this.cardStatus(card, "Waiting for the app to answer this call.");
        return;
      }
      let pending = null;
      try {
        if (call.id) {
          const response = await fetch(this.api + "pending/" + encodeURIComponent(call.id) + "/", {
            credentials: "same-origin",
            headers: this.headers(),
          });
          if (response.ok) pending = await response.json();
          else if (response.status !== 404 && response.status !== 403) throw new Error(await errorText(response));
        } else {
          const calls = await this.waitingCalls(this.threadId);
          pending = calls.find((row) => row.tool_call_id === call.tool_call_id) || null;
        }
      } catch (error) {
        pending = null; // who may decide cannot be told: show the call as waiting
      }
      if (!card.isConnected) return;
      if (!pending || pending.kind === "client") {
        this.cardStatus(card, "Waiting for approval.");
      } else if (pending.state !== "pending") {
        this.cardStatus(card, "This call was already decided (" + pending.state + ").", "conflict");
      } else {
        this.offerDecision(card, reply, pending.id);
      }
    }

    addApproval(reply, call) {
      const chip = reply.__calls[call.tool_call_id];
      if (chip) chip.hidden = true; // the card shows the call; the chip comes back with its result
      const card = el("div", "approval");
      card.setAttribute("part", "approval");
      card.setAttribute("role", "group");
      card.setAttribute("aria-label", "Tool call waiting for approval: " + call.tool_name);
      card.dataset.toolCallId = call.tool_call_id;
      if (call.id) card.dataset.pendingId = call.id;
      const head = card.appendChild(el("div", "approval-head", "The agent wants to run "));
      head.appendChild(el("span", "approval-tool", call.tool_name));
      const args = card.appendChild(el("pre", "approval-args", pretty(call.args)));
      args.setAttribute("aria-label", "Arguments of " + call.tool_name);
      card.__name = call.tool_name;
      card.__status = card.appendChild(el("p", "approval-status", "Checking who may decide…"));
      card.__status.setAttribute("role", "status");
      reply.appendChild(card);
      this.scrollDown();
      return card;
    }

    // Approve and Reject for a call this user may decide; Reject asks for a reason first.
    offerDecision(card, reply, id) {
      const name = card.__name;
      card.dataset.pendingId = id;
      this.cardStatus(card, "This call needs your approval.");
      const actions = card.appendChild(el("div", "approval-actions"));
      const approve = actions.appendChild(el("button", "approve", "Approve"));
      approve.type = "button";
      approve.setAttribute("aria-label", "Approve " + name);
      const reject = actions.appendChild(el("button", "reject", "Reject"));
      reject.type = "button";
      reject.setAttribute("aria-label", "Reject " + name);
      reject.setAttribute("aria-expanded", "false");
      const form = card.appendChild(el("form", "approval-reason"));
      form.hidden = true;
      const reason = form.appendChild(el("input", "reason"));
      reason.type = "text";
      reason.maxLength = 2000;
      reason.placeholder = "Why not? The agent reads this.";
      reason.setAttribute("aria-label", "Reason for rejecting " + name);
      const confirm = form.appendChild(el("button", "confirm-reject", "Reject"));
      confirm.type = "submit";
      confirm.setAttribute("aria-label", "Send the rejection of " + name);
      const cancel = form.appendChild(el("button", "cancel", "Cancel"));
      cancel.type = "button";
      card.__controls = [approve, reject, reason, confirm, cancel];
      approve.addEventListener("click", () => this.decide(card, reply, id, "approve", {}));
      reject.addEventListener("click", () => {
        form.hidden = false;
        reject.setAttribute("aria-expanded", "true");
        reason.focus();
      });
      cancel.addEventListener("click", () => {
        form.hidden = true;
        reject.setAttribute("aria-expanded", "false");
        reject.focus();
      });
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        this.decide(card, reply, id, "reject", { reason: reason.value.trim() });
      });
    }

    async decide(card, reply, id, verb, body) {
      if (card.__busy) return;
      card.__busy = true;
      card.setAttribute("aria-busy", "true");
      for (const control of card.__controls) control.disabled = true;
      this.cardStatus(card, verb === "approve" ? "Approving…" : "Rejecting…");
      let settled = false;
      try {
        const response = await fetch(this.api + "pending/" + encodeURIComponent(id) + "/" + verb + "/", {
          method: "POST",
          credentials: "same-origin",
          headers: this.headers({ "Content-Type": "application/json" }),
          body: JSON.stringify(body),
        });
        if (response.status === 409 || response.status === 404) {
          settled = true;
          this.cardStatus(card, response.status === 409
            ? "Already decided by someone else; reload the conversation to see how it went on."
            : "You may not decide this call any more.", "conflict");
          return;
        }
        if (!response.ok) throw new Error(await errorText(response));
        settled = true;
        this.showResumed(card, reply, verb, await response.json());
      } catch (error) {
        this.cardStatus(card, "The decision was not sent (" + error.message + ").", "error");
        this.emit("error", { message: error.message });
      } finally {
        card.__busy = false;
        card.removeAttribute("aria-busy");
        if (settled) {
          for (const node of card.querySelectorAll(".approval-actions, .approval-reason")) node.remove();
        } else {
          for (const control of card.__controls) control.disabled = false;
        }
      }
    }

    // The decision's answer is the resumed turn's result (as generate/ answers): its saved messages
    // replace the waiting reply; a turn that waits again at another call shows that call.
    showResumed(card, reply, verb, result) {
      if (result.tripwire) {
        const asked = reply.previousElementSibling; // the turn's own message, when this page sent it
        if (asked && asked.classList.contains("user")) {
          asked.classList.add("blocked");
          asked.title = "Blocked: not saved";
        }
        reply.remove();
        const t = result.tripwire;
        this.showBanner("tripwire", "Blocked by " + (t.processor_id || "a guardrail") + ": " +
          (t.reason || "no reason given") + ". Nothing of this turn was saved.");
        this.emit("tripwire", t);
        return;
      }
      if (result.pending) {
        const chip = reply.__calls[card.dataset.toolCallId];
        if (chip) chip.hidden = false;
        card.replaceWith(el("p", "approval-done", verb === "approve" ? "Approved." : "Rejected."));
        if (result.text) {
          reply.__texts = [result.text];
          this.renderReply(reply, { now: true });
        }
        const p = result.pending;
        const call = { id: p.id, kind: p.kind, tool_call_id: p.tool_call_id, tool_name: p.tool_name, args: p.args };
        reply.__calls[p.tool_call_id] = this.addTool(reply, p.tool_name, p.args);
        this.awaitDecision(reply, call);
        this.emit("suspended", { calls: [call] });
        return;
      }
      const shown = new Set(Array.from(this.list.children, (li) => li.dataset.id).filter(Boolean));
      const fresh = (result.messages || []).filter((m) => !(m.role === "user" && shown.has(m.id)));
      const added = this.renderStored(fresh);
      if (added.length) reply.replaceWith(...added);
      else reply.remove();
      this.scrollDown();
      this.emit("finish", { thread_id: result.thread_id, message_ids: (result.messages || []).map((m) => m.id) });
    }

    cardStatus(card, text, kind) {
      card.__status.textContent = text;
      card.__status.className = "approval-status" + (kind ? " " + kind : "");
    }

    // --- rendering -----------------------------------------------------------------------------------

    addMessage(role, id, extraClass) {
      const li = el("li", "message " + role + (extraClass ? " " + extraClass : ""));
      li.setAttribute("part", "message " + role);
      if (id) li.dataset.id = id;
      if (role === "assistant") {
        li.__texts = [];
        li.__calls = {};
        li.__open = {}; // tool calls without a result yet, by call id
        li.__body = li.appendChild(el("div", "body"));
      }
      this.list.appendChild(li);
      this.scrollDown();
      return li;
    }

    appendText(reply, text) { reply.__texts.push(text); }

    // Deltas render once per frame; `now` renders at once (a reply that just finished).
    renderReply(reply, { now = false } = {}) {
      const render = () => {
        reply.__frame = null;
        reply.__body.replaceChildren(renderMarkdown(reply.__texts.filter(Boolean).join("\n\n")));
      };
      if (now) {
        if (reply.__frame) cancelAnimationFrame(reply.__frame);
        render();
        return;
      }
      if (reply.__frame) return;
      reply.__frame = requestAnimationFrame(render);
    }

    addTool(reply, name, input) {
      const chip = el("span", "tool", "🔧 " + name + "(" + compact(input) + ")");
      reply.insertBefore(chip, reply.__body);
      return chip;
    }

    toolDone(chip, result, isError) {
      chip.textContent += " → " + compact(result);
      if (isError) chip.classList.add("error");
    }

    scrollDown() { this.list.scrollTop = this.list.scrollHeight; }

    showBanner(kind, text, retry) {
      this.bannerEl.hidden = !kind;
      this.bannerEl.className = "banner" + (kind ? " " + kind : "");
      this.bannerEl.replaceChildren(document.createTextNode(text || ""));
      if (retry) {
        const button = this.bannerEl.appendChild(el("button", "retry", "Retry"));
        button.type = "button";
        button.addEventListener("click", retry);
      }
    }

    emit(name, detail) {
      this.dispatchEvent(new CustomEvent("memproc-chat:" + name, { detail, bubbles: true, composed: true }));
    }
  }

  function textOf(parts) {
    return (parts || []).map((p) => (p.type === "text" ? p.text : p.type === "attachment" ? "📎 " + p.name : ""))
      .filter(Boolean).join("\n");
  }

  function pretty(value) {
    try {
      return JSON.stringify(value === undefined ? null : value, null, 2);
    } catch (e) {
      return String(value);
    }
  }

  function compact(value) {
    const text = typeof value === "string" ? value : JSON.stringify(value === undefined ? null : value);
    return text.length > 120 ? text.slice(0, 117) + "…" : text;
  }

  MemprocChat.renderMarkdown = renderMarkdown;
  customElements.define("memproc-chat", MemprocChat);
})();
