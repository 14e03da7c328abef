"""Text from memory inside the blocks memproc wraps it in: it may mention a block's tag, never open,
close or imitate one.

Working memory, a thread's summary, other threads' recalled messages, the summarizer's transcript
and a judge model's content are text that users (or a model, from what users said) wrote. Put
between `<working_memory>` and `</working_memory>` as it is, a stored `</working_memory>` ends the
block early and whatever follows reads as memproc's own instructions; a guardrail that scans the
block stops at the forged end too. So every occurrence of a tag memproc emits, in any spelling a
model would read as the same tag (any case, `-` or spaces for `_`, spaces inside the brackets, the
full-width and small forms of `<`), has its `<` written as `&lt;`: the model still reads the
mention, but it is no tag. Tags that are not memproc's are left alone, and so is the rest of the text.
"""

from __future__ import annotations

import re

__all__ = ["MEMPROC_TAGS", "JUDGE_OPEN", "JUDGE_CLOSE", "neutralise", "neutralise_judged", "indent_lines"]

# Every tag memproc wraps text in (tests/processors/test_prompt_tags.py renders every block and
# fails when one emits a tag missing here).
MEMPROC_TAGS = (
    "working_memory",
    "working_memory_template",
    "working_memory_schema",
    "conversation_summary",
    "current_summary",
    "new_messages",
)
# The markers around the content a judge model reviews (guardrails/_judge.py).
JUDGE_OPEN = "<<<CONTENT"
JUDGE_CLOSE = "CONTENT>>>"

_COMPACT = tuple(tag.replace("_", "") for tag in MEMPROC_TAGS)
# "<", full-width "＜" and small "﹤"; then an optional "/" and a tag-like name that may be spelt
# with "-", "_" or spaces between its words.
_TAG_LIKE = re.compile(r"[<\uff1c\ufe64](\s*[/\uff0f]?\s*)([A-Za-z][A-Za-z_\-\s]{0,80})")
_JUDGE_MARKERS = re.compile(r"<<<\s*CONTENT|CONTENT\s*>>>", re.I)


def _is_memproc_tag(name: str) -> bool:
    compact = re.sub(r"[\s_\-]", "", name).lower()
    return compact.startswith(_COMPACT)


def neutralise(text: str) -> str:
    """`text` with the `<` of every memproc tag in it written as `&lt;` (idempotent)."""
    if not text:
        return text

    def escape(match: re.Match[str]) -> str:
        if not _is_memproc_tag(match.group(2)):
            return match.group(0)
        return "&lt;" + match.group(1) + match.group(2)

    return _TAG_LIKE.sub(escape, text)


def neutralise_judged(text: str) -> str:
    """Content for a judge model: memproc's tags neutralised, and its markers too, so the content
    cannot end its own section and speak as the guardrail."""
    escaped = neutralise(text)
    return _JUDGE_MARKERS.sub(lambda m: m.group(0).replace("<", "&lt;").replace(">", "&gt;"), escaped)


def indent_lines(text: str, indent: str = "  ") -> str:
    """A multi-line text as one list item: its later lines indented, so none of them can pass for
    another item of the list it is put in (a recalled "- [date] role: …" line, for example)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\n" + indent)
