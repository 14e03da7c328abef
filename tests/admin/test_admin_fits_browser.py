"""Every memproc admin page fits the screen, at 1280 px (a laptop) and at 390 px (a phone).

A real browser (headless Chromium from Debian's `chromium` package, driven by Playwright's Python
package) opens every page tests/admin/admin_pages.py lists over the crowded data of
tests/admin/crowded_data.py (long resource, thread and agent ids, long reasons, several rows in every
list) and measures it. A page fits when:

1. **The page never scrolls sideways**: the document is no wider than the window.
2. **No container's content is wider than the container**: for `#content-main`, the changelist
   (`#changelist`, `#changelist-form`, `.results`), every `.module` (cards, fieldsets, "Turns
   today"), `fieldset`, `.form-row` and memproc's own blocks (counts, transcript messages, the review
   tables), `scrollWidth <= clientWidth + 1`, whether the excess spills out, is cut or scrolls. The
   one exception: on a phone, a changelist's `.results` may scroll its table sideways (Django's own
   responsive design) inside a page that does not. At 1280 px even that fails: every column of every
   list is on screen, with the navigation sidebar and the filters open.
3. **No column is squeezed**: a table cell (or an operator count) whose text wraps onto two lines or
   more is at least 6 em wide, so no text stands one word or one letter per line.
4. **Cut text can be read**: an element that cuts its text (an ellipsis, a line clamp, hidden
   overflow) carries a `title` with the whole text, on itself or an enclosing element. Form fields,
   which scroll their own text, and text for screen readers only (`.visually-hidden`) are not cut.

A failure names the page, the width and the element, and leaves a screenshot of the page in
$MEMPROC_SCREENSHOTS/admin-fits (a temp folder by default).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from django.db import connections

from tests.admin.admin_pages import admin_pages
from tests.admin.crowded_data import make_crowded
from tests.browser import CHROMIUM, LAUNCH_ARGS

SCREENSHOTS = Path(os.environ.get("MEMPROC_SCREENSHOTS", Path(tempfile.gettempdir()) / "memproc-screenshots"))
DESKTOP, PHONE = 1280, 390
MIN_WRAPPED_CELL_EM = 6

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]

# Rules 2-4 of the module docstring, measured in the page. Returns one sentence per problem.
MEASURE = """({desktop, minCellEm}) => {
  const found = [];
  const CONTAINERS = [
    "#content-main", "#content-related", "#changelist", "#changelist-form", "#changelist .results",
    ".module", "fieldset", ".form-row", ".memproc-counts", ".memproc-count", ".memproc-turn-stats",
    ".memproc-message", ".memproc-why-body", ".memproc-review-list", ".submit-row",
  ].join(", ");
  const FIELDS = "input, textarea, select";  // they scroll their own text
  const content = document.querySelector("#content") || document.body;
  const shown = (el) => el.getClientRects().length > 0 && el.clientWidth > 0;
  const name = (el) => {
    let label = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "");
    label += [...el.classList].slice(0, 3).map((c) => "." + c).join("");
    const text = (el.innerText || "").trim().replace(/\\s+/g, " ");
    return /^(TD|TH|A|SPAN|CODE|DIV)$/.test(el.tagName) && text ? `${label} "${text.slice(0, 40)}"` : label;
  };
  const lines = (el) => {
    const tops = [];
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.data.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const rect of range.getClientRects()) if (rect.width > 0) tops.push(rect.top);
    }
    tops.sort((a, b) => a - b);
    return tops.filter((top, i) => i === 0 || top - tops[i - 1] > 4).length;
  };

  // 2. Containers whose content is wider than they are; only the innermost of nested ones.
  const overflowing = [];
  for (const el of document.querySelectorAll(CONTAINERS)) {
    if (!shown(el) || el.scrollWidth <= el.clientWidth + 1) continue;
    const overflowX = getComputedStyle(el).overflowX;
    const scrolls = overflowX === "auto" || overflowX === "scroll";
    if (scrolls && !desktop && el.matches("#changelist .results")) continue;
    const how = scrolls ? "scrolls sideways" : overflowX === "visible" ? "spills out" : "is cut";
    overflowing.push([el, `${name(el)}: ${el.scrollWidth} px of content in ${el.clientWidth} px (${how})`]);
  }
  for (const [el, sentence] of overflowing) {
    if (!overflowing.some(([other]) => other !== el && el.contains(other))) found.push(sentence);
  }

  // 3. Squeezed cells, once per column: the first such cell and how many more.
  const squeezed = new Map();
  for (const cell of content.querySelectorAll("td, th, .memproc-count")) {
    if (!shown(cell) || (cell.innerText || "").trim().length < 2) continue;
    const style = getComputedStyle(cell);
    const em = parseFloat(style.fontSize);
    const width = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const count = lines(cell);
    if (count > 1 && width < minCellEm * em) {
      const column = cell.tagName + "." + [...cell.classList].join(".");
      const seen = squeezed.get(column);
      if (seen) seen.more += 1;
      else squeezed.set(column, {more: 0, sentence: `${name(cell)} is squeezed: ${count} lines in ${Math.round(width)} px`});
    }
  }
  for (const {sentence, more} of squeezed.values()) {
    found.push(more ? `${sentence} (and ${more} more in its column)` : sentence);
  }

  // 4. Cut text with no title.
  for (const el of content.querySelectorAll("*")) {
    if (el.matches(CONTAINERS) || el.matches(FIELDS) || el.closest(".visually-hidden") || !shown(el)) continue;
    const style = getComputedStyle(el);
    const clips = style.overflowX !== "visible" && style.overflowX !== "auto" && style.overflowX !== "scroll";
    const cutAcross = (clips || style.textOverflow === "ellipsis") && el.scrollWidth > el.clientWidth + 1;
    const cutDown = style.webkitLineClamp !== "none" && el.scrollHeight > el.clientHeight + 1;
    if ((cutAcross || cutDown) && !el.closest("[title]")) {
      found.push(`${name(el)} cuts its text and has no title to read it whole`);
    }
  }
  return found;
}"""

# Rule 1, and what sticks out of the window when it fails.
PAGE_SCROLL = """() => {
  const root = document.scrollingElement;
  if (root.scrollWidth <= root.clientWidth + 1) return null;
  const right = root.clientWidth + 1;
  const past = (el) => el.getBoundingClientRect().right + window.scrollX > right;
  const spills = (el) => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === "visible"
    && el.getBoundingClientRect().left + window.scrollX + el.scrollWidth > right;
  const all = [...document.body.querySelectorAll("*")];
  const sticking = all.filter((el) => el.getClientRects().length && past(el) && !past(el.parentElement));
  if (!sticking.length) sticking.push(...all.filter((el) => spills(el) && ![...el.children].some(spills)));
  const labels = sticking.slice(0, 3).map((el) =>
    el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + [...el.classList].slice(0, 3).map((c) => "." + c).join(""));
  return `the page scrolls sideways: ${root.scrollWidth} px in a ${root.clientWidth} px window (sticking out: ${labels.join(", ")})`;
}"""


@pytest.fixture
def browser(monkeypatch):
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
            connections.close_all()  # or PostgreSQL refuses to drop the test database


@pytest.mark.parametrize("width", [DESKTOP, PHONE], ids=["1280px", "390px"])
def test_every_admin_page_fits_the_screen(live_server, admin_user, conversation, browser, width):
    pages = admin_pages(make_crowded(conversation), user=admin_user)
    page = browser.new_page(viewport={"width": width, "height": 900}, device_scale_factor=1)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", admin_user.get_username())
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector("#content")

    folder = SCREENSHOTS / "admin-fits"
    problems = []
    for admin_page in pages:
        response = page.goto(live_server.url + admin_page.url)
        assert response is not None and response.status == 200, (
            str(admin_page),
            response and response.status,
        )
        scroll = page.evaluate(PAGE_SCROLL)
        found = ([scroll] if scroll else []) + page.evaluate(
            MEASURE, {"desktop": width >= DESKTOP, "minCellEm": MIN_WRAPPED_CELL_EM}
        )
        if found:
            folder.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^A-Za-z0-9]+", "-", admin_page.url).strip("-")
            page.screenshot(path=str(folder / f"{width}-{slug}.png"), full_page=True)
            problems += [f"{admin_page} at {width} px: {sentence}" for sentence in found]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
