// A small, safe Markdown renderer for the demo's replies: the whole text is HTML-escaped first, then
// a few Markdown forms become tags this file writes itself (paragraphs, headings, lists, quotes, code,
// emphasis, links). Nothing of the model's text is ever parsed as HTML, and links keep only http,
// https and mailto targets. window.DemoMarkdown.render(text) returns an HTML string.
(function (global) {
  "use strict";

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  }

  // `url` is already escaped; only its scheme is checked (quotes cannot appear: they are entities).
  function safeHref(url) {
    const raw = url.replace(/&amp;/g, "&");
    return /^(https?:\/\/|mailto:)/i.test(raw) ? url : null;
  }

  function emphasis(text) {
    return text
      .replace(/\*\*(?=\S)([^*\n]*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/__(?=\S)([^_\n]*?\S)__/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*(?=\S)([^*\n]*?\S)\*(?![*\w])/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_(?=\S)([^_\n]*?\S)_(?![_\w])/g, "$1<em>$2</em>")
      .replace(/~~(?=\S)([^~\n]*?\S)~~/g, "<del>$1</del>");
  }

  function link(href, label) {
    return `<a href="${href}" target="_blank" rel="noopener noreferrer nofollow">${label}</a>`;
  }

  // One line (or paragraph) of escaped text. Code spans and links are set aside first, so emphasis
  // never reaches into a URL or a code span.
  function inline(text) {
    const kept = [];
    const keep = (html) => `\u0000${kept.push(html) - 1}\u0000`;
    text = text.replace(/`([^`\n]+)`/g, (_, code) => keep(`<code>${code}</code>`));
    text = text.replace(/\[([^\]\n]+)\]\(((?:[^\s()&]|&amp;)+)\)/g, (whole, label, url) => {
      const href = safeHref(url);
      return href ? keep(link(href, emphasis(label))) : whole;
    });
    text = text.replace(/\b(?:https?:\/\/|mailto:)(?:[^\s<&]|&amp;)+/g, (url) => {
      const trail = (url.match(/[.,;:!?)\]]+$/) || [""])[0];
      const bare = url.slice(0, url.length - trail.length);
      return keep(link(bare, bare)) + trail;
    });
    text = emphasis(text);
    return text.replace(/\u0000(\d+)\u0000/g, (_, i) => kept[Number(i)]);
  }

  const BLOCK_START = /^(```|#{1,6}\s|&gt;|\s*[-*+]\s+\S|\s*\d+[.)]\s+\S|(?:-{3,}|\*{3,}|_{3,})\s*$)/;

  function render(source) {
    const lines = escapeHtml(String(source || "").replace(/\u0000/g, "").replace(/\r\n?/g, "\n")).split("\n");
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (/^```/.test(line)) {
        const body = [];
        i += 1;
        while (i < lines.length && !/^```\s*$/.test(lines[i])) body.push(lines[i++]);
        i += 1; // the closing fence (or the end of a reply still streaming)
        out.push(`<pre><code>${body.join("\n")}</code></pre>`);
      } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
        const level = Math.min(6, m[1].length + 2); // a reply's "# Title" should not outshout the page
        out.push(`<h${level}>${inline(m[2])}</h${level}>`);
        i += 1;
      } else if (/^(?:-{3,}|\*{3,}|_{3,})\s*$/.test(line)) {
        out.push("<hr>");
        i += 1;
      } else if (/^&gt;/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^&gt;/.test(lines[i])) quoted.push(lines[i++].replace(/^&gt;\s?/, ""));
        out.push(`<blockquote>${quoted.map(inline).join("<br>")}</blockquote>`);
      } else if (/^\s*[-*+]\s+\S/.test(line)) {
        const items = [];
        while (i < lines.length && (m = lines[i].match(/^\s*[-*+]\s+(.*)$/))) {
          items.push(`<li>${inline(m[1])}</li>`);
          i += 1;
        }
        out.push(`<ul>${items.join("")}</ul>`);
      } else if ((m = line.match(/^\s*(\d+)[.)]\s+\S/))) {
        const start = Number(m[1]);
        const items = [];
        while (i < lines.length && (m = lines[i].match(/^\s*\d+[.)]\s+(.*)$/))) {
          items.push(`<li>${inline(m[1])}</li>`);
          i += 1;
        }
        out.push(`<ol${start !== 1 ? ` start="${start}"` : ""}>${items.join("")}</ol>`);
      } else if (!line.trim()) {
        i += 1;
      } else {
        const para = [];
        while (i < lines.length && lines[i].trim() && !(para.length && BLOCK_START.test(lines[i]))) {
          para.push(lines[i++]);
        }
        out.push(`<p>${para.map(inline).join("<br>")}</p>`);
      }
    }
    return out.join("");
  }

  global.DemoMarkdown = { render, escapeHtml };
})(window);
