/*
 * <memproc-memory>: "what I remember about you" for the signed-in user, for any Django template. No build
 * step, no framework.
 *
 *   {% load static %}
 *   <memproc-memory agent="support" api="{% url 'memproc:api-root' %}" csrf-token="{{ csrf_token }}"></memproc-memory>
 *   <script src="{% static 'memproc/memory.js' %}" defer></script>
 *
 * It talks to `memory/` (memproc's end-user memory view) with the page's session: it shows the working
 * memory by field, lets the user correct a field (a revision marked as made by the user) and pin it (the
 * model's updates keep a pinned field), lists what recent turns recalled and why (score, source thread,
 * when), and lets the user exclude a message from recall (history still shows it) or let it back in,
 * or forget it with what was learnt from it (a second press confirms).
 * Text is always set as text, never parsed as HTML.
 *
 * Attributes: `agent` (the agent whose template or schema the fields follow; default: the default
 * template); `api` (memproc's API root, default "/api/memproc/"); `resource` (a resource id, for staff who
 * may reach others; default: the user's own); `csrf-token` (default: the `csrftoken` cookie).
 * Methods: `refresh()` (reload, e.g. on `memproc-chat:finish`).
 * Methods also: `forget(messageIds)`.
 * Events (bubbling, composed): `memproc-memory:change` (detail: the new view, after a write),
 * `memproc-memory:forgotten` (detail: the receipt: id, scope, status, counts),
 * `memproc-memory:error` (detail: {message}).
 * Styling: CSS custom properties (--memproc-accent, --memproc-bg, --memproc-border, --memproc-font) and
 * the parts `memory`, `fields`, `field`, `recalls`, `recall`, `excluded`, `banner`.
 */
(function () {
  "use strict";
  if (typeof window === "undefined" || !window.customElements || customElements.get("memproc-memory")) return;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function cookie(name) {
    const match = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return match ? decodeURIComponent(match[1]) : "";
  }

  function button(text, className, label) {
    const node = el("button", className, text);
    node.type = "button";
    if (label) node.setAttribute("aria-label", label);
    return node;
  }

  let uid = 0;

  // A field's value as the user reads and edits it: Markdown text as it is, JSON as JSON.
  function shown(value, mode) {
    if (mode !== "schema") return value || "";
    return value === null || value === undefined ? "" : typeof value === "string" ? value : JSON.stringify(value);
  }

  function when(iso) {
    const date = new Date(iso);
    return isNaN(date) ? "" : date.toLocaleString();
  }

  // The API's errors: `{field: [messages]}` or `{"detail": ...}`.
  function errorText(body, status) {
    if (body && typeof body === "object") {
      if (typeof body.detail === "string") return body.detail;
      const parts = Object.entries(body).map(([k, v]) => k + ": " + (Array.isArray(v) ? v.join(" ") : String(v)));
      if (parts.length) return parts.join("; ");
    }
    return "The request failed (" + status + ").";
  }

  const STYLE = `
    :host { display: block; font: var(--memproc-font, 15px/1.45 system-ui, sans-serif); color: #1d2330;
      --accent: var(--memproc-accent, #2f6fdd); --border: var(--memproc-border, #d8dee9); }
    :host([hidden]) { display: none; }
    .memory { background: var(--memproc-bg, #fff); border: 1px solid var(--border); border-radius: 10px;
      padding: .6rem .9rem; }
    h2 { font-size: 1.05rem; margin: .4rem 0; } h3 { font-size: .95rem; margin: .8rem 0 .3rem; }
    ul { list-style: none; margin: 0; padding: 0; }
    li { border-top: 1px solid var(--border); padding: .45rem 0; }
    .name { font-weight: 600; margin-right: .4rem; }
    .value { white-space: pre-wrap; overflow-wrap: anywhere; }
    .value.empty { color: #889; font-style: italic; }
    .pinned .name::after { content: " (pinned)"; font-weight: normal; color: var(--accent); font-size: .85em; }
    .actions { display: inline-flex; gap: .35rem; margin-left: .5rem; }
    .why { display: block; font-size: .82em; color: #556; }
    .excerpt { display: block; overflow-wrap: anywhere; }
    .excerpt.gone { color: #889; font-style: italic; }
    .excluded-item .excerpt { text-decoration: line-through; }
    form { display: flex; flex-direction: column; gap: .3rem; margin-top: .3rem; }
    textarea { font: inherit; padding: .35rem; min-height: 2.2rem; resize: vertical; }
    .banner { margin: .4rem 0; padding: .45rem .6rem; border-radius: 8px; background: #fff4e0;
      border: 1px solid #e3b96b; color: #6b4a00; }
    .empty-list { color: #889; font-style: italic; border: 0; }
    button { font: inherit; font-size: .85em; cursor: pointer; padding: .15rem .6rem; border-radius: 6px;
      border: 1px solid var(--border); background: var(--memproc-bg, #fff); color: var(--accent); }
    button:hover:not(:disabled) { border-color: var(--accent); }
    button:focus-visible { outline: 3px solid color-mix(in srgb, var(--accent) 45%, transparent); outline-offset: 1px; }
    button.save { background: var(--accent); color: #fff; border-color: var(--accent); }
    button.on { background: var(--accent); color: #fff; border: 1px solid var(--accent); }
    button.forget.armed { background: #b3261e; color: #fff; border: 1px solid #b3261e; }
    button:disabled { cursor: default; opacity: .6; }
  `;

  class MemprocMemory extends HTMLElement {
    constructor() {
      super();
      this.view = null;
      this.busy = false;
      const root = this.attachShadow({ mode: "open" });
      root.appendChild(el("style", "", STYLE));
      const box = root.appendChild(el("section", "memory"));
      box.setAttribute("part", "memory");
      box.setAttribute("aria-labelledby", "memproc-memory-title");
      const title = box.appendChild(el("h2", "", "What I remember about you"));
      title.id = "memproc-memory-title";
      this.bannerEl = box.appendChild(el("div", "banner"));
      this.bannerEl.setAttribute("role", "alert");
      this.bannerEl.setAttribute("part", "banner");
      this.bannerEl.hidden = true;
      box.appendChild(el("h3", "", "Working memory"));
      this.fieldsEl = box.appendChild(el("ul", "fields"));
      this.fieldsEl.setAttribute("part", "fields");
      this.fieldsEl.setAttribute("aria-label", "Working memory fields");
      box.appendChild(el("h3", "", "Recently recalled"));
      this.recallsEl = box.appendChild(el("ul", "recalls"));
      this.recallsEl.setAttribute("part", "recalls");
      this.recallsEl.setAttribute("aria-label", "Recently recalled messages");
      box.appendChild(el("h3", "", "Excluded from recall"));
      this.excludedEl = box.appendChild(el("ul", "excluded"));
      this.excludedEl.setAttribute("part", "excluded");
      this.excludedEl.setAttribute("aria-label", "Messages excluded from recall");
    }

    connectedCallback() {
      this.refresh();
    }

    get api() {
      const base = this.getAttribute("api") || "/api/memproc/";
      return base.endsWith("/") ? base : base + "/";
    }

    // memory/ plus `path`, with the agent and resource the element names.
    url(path) {
      const query = new URLSearchParams();
      if (this.getAttribute("agent")) query.set("agent", this.getAttribute("agent"));
      if (this.getAttribute("resource")) query.set("resource_id", this.getAttribute("resource"));
      const qs = query.toString();
      return this.api + "memory/" + (path || "") + (qs ? "?" + qs : "");
    }

    headers(extra) {
      return {
        "X-CSRFToken": this.getAttribute("csrf-token") || cookie("csrftoken"),
        "X-Requested-With": "XMLHttpRequest",
        ...extra,
      };
    }

    async request(method, path, body) {
      const init = { method, credentials: "same-origin", headers: this.headers() };
      if (body !== undefined) {
        init.headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
      const response = await fetch(this.url(path), init);
      let data = null;
      try { data = await response.json(); } catch (e) { /* an empty or non-JSON body */ }
      if (!response.ok) throw new Error(errorText(data, response.status));
      return data;
    }

    async refresh() {
      try {
        this.render(await this.request("GET", ""));
        this.showBanner(null);
      } catch (error) {
        this.fail(error);
      }
    }

    // A write: every answer is the whole view, rendered at once.
    async write(method, path, body) {
      if (this.busy) return false;
      this.busy = true;
      try {
        this.render(await this.request(method, path, body));
        this.showBanner(null);
        this.dispatchEvent(new CustomEvent("memproc-memory:change", { detail: this.view, bubbles: true, composed: true }));
        return true;
      } catch (error) {
        this.fail(error);
        return false;
      } finally {
        this.busy = false;
      }
    }

    correct(name, value) {
      return this.write("PUT", "fields/" + encodeURIComponent(name) + "/", { value });
    }

    pin(name, pinned) {
      return this.write("POST", "fields/" + encodeURIComponent(name) + "/" + (pinned ? "pin/" : "unpin/"));
    }

    exclude(messageId, excluded) {
      return this.write("POST", "messages/" + encodeURIComponent(messageId) + "/" + (excluded ? "exclude/" : "include/"));
    }

    // Forgets messages (a thread: POST threads/<id>/forget/) with what memproc derived from them; the answer
    // is the view with the receipt, whose status says whether an operator still has to decide.
    async forget(messageIds) {
      const done = await this.write("POST", "forget/", { message_ids: messageIds });
      const receipt = this.view && this.view.receipt;
      if (done && receipt && receipt.status === "review") {
        this.showBanner("Forgotten. A later change to your memory built on it: someone will review what stays.");
      }
      if (done) {
        this.dispatchEvent(new CustomEvent("memproc-memory:forgotten", { detail: receipt, bubbles: true, composed: true }));
      }
      return done;
    }

    // A button that asks once more before it forgets: the first press arms it, the second forgets.
    forgetButton(messageId, excerpt) {
      const forget = button("Forget", "forget", "Forget, with what was learnt from it: " + excerpt.slice(0, 60));
      forget.addEventListener("click", () => {
        if (!forget.classList.contains("armed")) {
          forget.classList.add("armed");
          forget.textContent = "Forget for good?";
          forget.setAttribute("aria-label", "Forget for good? Press again to forget: " + excerpt.slice(0, 60));
          setTimeout(() => {
            forget.classList.remove("armed");
            forget.textContent = "Forget";
            forget.setAttribute("aria-label", "Forget, with what was learnt from it: " + excerpt.slice(0, 60));
          }, 6000);
          return;
        }
        this.forget([messageId]);
      });
      return forget;
    }

    fail(error) {
      this.showBanner(error.message);
      this.dispatchEvent(new CustomEvent("memproc-memory:error", { detail: { message: error.message }, bubbles: true, composed: true }));
    }

    showBanner(text) {
      this.bannerEl.hidden = !text;
      this.bannerEl.textContent = text || "";
    }

    // --- rendering -----------------------------------------------------------------------------------

    render(view) {
      this.view = view;
      this.fieldsEl.replaceChildren(...view.fields.map((field) => this.renderField(field, view.mode)));
      if (!view.fields.length) this.fieldsEl.appendChild(el("li", "empty-list", "Nothing remembered yet."));
      this.recallsEl.replaceChildren(...view.recalls.map((recall) => this.renderRecall(recall)));
      if (!view.recalls.length) this.recallsEl.appendChild(el("li", "empty-list", "Nothing recalled recently."));
      this.excludedEl.replaceChildren(...view.excluded.map((message) => this.renderExcluded(message)));
      if (!view.excluded.length) this.excludedEl.appendChild(el("li", "empty-list", "No message is excluded."));
    }

    renderField(field, mode) {
      const item = el("li", "field" + (field.pinned ? " pinned" : ""));
      item.setAttribute("part", "field");
      item.dataset.name = field.name;
      item.appendChild(el("span", "name", field.name));
      const text = shown(field.value, mode);
      item.appendChild(el("span", "value" + (text ? "" : " empty"), text || "not set"));
      const actions = item.appendChild(el("span", "actions"));
      const edit = actions.appendChild(button("Edit", "edit", "Edit " + field.name));
      const pin = actions.appendChild(button(field.pinned ? "Unpin" : "Pin", "pin", (field.pinned ? "Unpin " : "Pin ") + field.name));
      if (field.pinned) pin.classList.add("on"); // its label says what it does (no aria-pressed as well)
      pin.addEventListener("click", () => this.pin(field.name, !field.pinned));
      edit.addEventListener("click", () => this.editField(item, field, mode, edit));
      return item;
    }

    editField(item, field, mode, edit) {
      if (item.querySelector("form")) return;
      edit.disabled = true;
      const form = item.appendChild(el("form", "editor"));
      const id = "memproc-memory-edit-" + (++uid);
      const label = form.appendChild(el("label", "", "New value for " + field.name + (mode === "schema" ? " (JSON)" : "")));
      label.htmlFor = id;
      const input = form.appendChild(el("textarea", "input"));
      input.id = id;
      input.value = shown(field.value, mode);
      const row = form.appendChild(el("span", "actions"));
      const save = row.appendChild(el("button", "save", "Save"));
      save.type = "submit";
      const cancel = row.appendChild(button("Cancel", "cancel"));
      const close = () => { form.remove(); edit.disabled = false; edit.focus(); };
      cancel.addEventListener("click", close);
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        let value = input.value;
        if (mode === "schema") {
          try { value = value.trim() ? JSON.parse(value) : null; } catch (e) { value = input.value; } // plain text: a JSON string
        }
        if (await this.correct(field.name, value)) close();
      });
      input.focus();
    }

    renderRecall(recall) {
      const item = el("li", "recall");
      item.setAttribute("part", "recall");
      item.dataset.messageId = recall.message_id;
      const excerpt = recall.excerpt === null ? "(this message is no longer available)" : recall.excerpt;
      item.appendChild(el("span", "excerpt" + (recall.excerpt === null ? " gone" : ""), excerpt));
      const score = recall.score === null ? "nearby a match" : "score " + recall.score.toFixed(2);
      const why = [score, "from conversation " + recall.thread_id, "recalled " + when(recall.recalled_at)];
      if (recall.turn_thread_id !== recall.thread_id) why.push("in conversation " + recall.turn_thread_id);
      item.appendChild(el("span", "why", why.join(" · ")));
      if (recall.excerpt !== null) {
        const actions = item.appendChild(el("span", "actions"));
        const toggle = actions.appendChild(button(
          recall.recall_excluded ? "Include in recall" : "Exclude from recall",
          "exclude",
          (recall.recall_excluded ? "Include in recall: " : "Exclude from recall: ") + excerpt.slice(0, 60)
        ));
        if (recall.recall_excluded) toggle.classList.add("on");
        toggle.addEventListener("click", () => this.exclude(recall.message_id, !recall.recall_excluded));
        actions.appendChild(this.forgetButton(recall.message_id, excerpt));
      }
      return item;
    }

    renderExcluded(message) {
      const item = el("li", "excluded-item");
      item.dataset.messageId = message.message_id;
      item.appendChild(el("span", "excerpt", message.excerpt));
      item.appendChild(el("span", "why", message.role + " · conversation " + message.thread_id + " · " + when(message.created_at)));
      const include = item.appendChild(el("span", "actions")).appendChild(
        button("Include in recall", "include", "Include in recall: " + message.excerpt.slice(0, 60))
      );
      include.addEventListener("click", () => this.exclude(message.message_id, false));
      include.parentNode.appendChild(this.forgetButton(message.message_id, message.excerpt));
      return item;
    }
  }

  customElements.define("memproc-memory", MemprocMemory);
})();
