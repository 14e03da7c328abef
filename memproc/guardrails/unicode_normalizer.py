"""UnicodeNormalizer: folds look-alike characters and removes invisible ones from the turn's input."""

from __future__ import annotations

import re
import unicodedata

from memproc.guardrails import _options
from memproc.guardrails._text import input_targets, map_text
from memproc.messages import Message
from memproc.processors.base import ProcessorContext

__all__ = ["UnicodeNormalizer", "normalize_text"]

FORMS = ("NFC", "NFD", "NFKC", "NFKD")

# Zero-width and invisible characters. U+200D (zero-width joiner) is kept between two emoji, where
# it builds one glyph (a family, a profession), and removed everywhere else.
_ZERO_WIDTH = re.compile("[\u00ad\u180e\u200b\u200c\u2060-\u2064\ufeff]")
_ZWJ = "\u200d"
# C0/C1 controls except tab, line feed and carriage return; bidirectional embeddings, overrides and
# isolates (the "Trojan Source" reordering); interlinear annotation marks.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufff9-\ufffb]")
# Unicode tag characters spell hidden ASCII ("ASCII smuggling"); they are legitimate only inside an
# emoji flag sequence: a black flag U+1F3F4, tags, then the cancel tag U+E007F.
_TAGS = re.compile("[\U000e0000-\U000e007f]+")
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
_HORIZONTAL_SPACE = re.compile(r"[^\S\n]+")
_SPACE_BEFORE_NEWLINE = re.compile(r" +\n")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(
    text: str,
    *,
    form: str | None = "NFKC",
    strip_control: bool = True,
    collapse_whitespace: bool = False,
    remove_zero_width: bool = True,
) -> str:
    """`text` normalised as UnicodeNormalizer does it; other guardrails use it to score a canonical
    copy of the text without changing the message."""
    if strip_control:
        text = _CONTROL.sub("", text)
        text = _strip_tags(text)
    if remove_zero_width:
        text = _ZERO_WIDTH.sub("", text)
        if _ZWJ in text:
            text = _strip_joiners(text)
    if form:
        text = unicodedata.normalize(form, text)
    if collapse_whitespace:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = _HORIZONTAL_SPACE.sub(" ", text)
        text = _SPACE_BEFORE_NEWLINE.sub("\n", text)
        text = _BLANK_LINES.sub("\n\n", text)
        text = text.strip()
    return text


class UnicodeNormalizer:
    """Normalises the text of the turn's new messages so later guardrails and the model see one
    canonical spelling.

    Reads: the text parts of `ctx.new_messages` (the turn's own input).

    Changes: returns copies of the messages whose text changes, with (in this order) control
    characters removed when `strip_control` (C0/C1 controls other than tab and newline, bidi
    overrides and isolates, and Unicode tag characters outside emoji flags: invisible text used to
    smuggle instructions), zero-width characters removed when `remove_zero_width` (a zero-width
    joiner between two emoji stays), Unicode normalisation to `form` (NFKC by default: fullwidth
    and other compatibility look-alikes such as "ｉｇｎｏｒｅ" become "ignore"; None skips it), and,
    when `collapse_whitespace`, runs of spaces and tabs made one space, line endings made "\\n",
    more than one blank line made one, and the text trimmed. Line breaks otherwise stay, so
    Markdown and code keep their shape. Records the number of changed messages in
    `ctx.state["normalized"]`. Returns None when nothing changes.

    Never: blocks a turn; touches history that memory loaded, system messages or non-text parts;
    mutates what it is given.

    Order: first in `input_processors`, so that detectors (PromptInjectionDetector, PIIDetector,
    ModerationProcessor, MaxLength) judge the normalised text; what is saved is the normalised text.
    """

    id = "unicode-normalizer"

    def __init__(
        self,
        *,
        form: str | None = "NFKC",
        strip_control: bool = True,
        collapse_whitespace: bool = False,
        remove_zero_width: bool = True,
    ) -> None:
        owner = "UnicodeNormalizer"
        self.form = None if form is None else _options.choice(owner, "form", form, FORMS)
        self.strip_control = _options.boolean(owner, "strip_control", strip_control)
        self.collapse_whitespace = _options.boolean(owner, "collapse_whitespace", collapse_whitespace)
        self.remove_zero_width = _options.boolean(owner, "remove_zero_width", remove_zero_width)

    def normalize(self, text: str) -> str:
        return normalize_text(
            text,
            form=self.form,
            strip_control=self.strip_control,
            collapse_whitespace=self.collapse_whitespace,
            remove_zero_width=self.remove_zero_width,
        )

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        replaced = {}
        for message in input_targets(ctx):
            changed = map_text(message, self.normalize)
            if changed is not message:
                replaced[message.id] = changed
        ctx.state["normalized"] = len(replaced)
        if not replaced:
            return None
        return [replaced.get(m.id, m) for m in ctx.messages]

    def __repr__(self) -> str:
        return f"UnicodeNormalizer(form={self.form!r})"


def _strip_tags(text: str) -> str:
    if not _TAGS.search(text):
        return text
    flags = [m.span() for m in _FLAG_TAGS.finditer(text)]

    def keep_in_flags(match: re.Match[str]) -> str:
        inside = any(start <= match.start() and match.end() <= end for start, end in flags)
        return match.group() if inside else ""

    return _TAGS.sub(keep_in_flags, text)


def _strip_joiners(text: str) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char == _ZWJ and not (
            _is_emoji(text[index - 1 : index]) and _is_emoji(text[index + 1 : index + 2])
        ):
            continue
        out.append(char)
    return "".join(out)


def _is_emoji(char: str) -> bool:
    if not char:
        return False
    code = ord(char)
    return code >= 0x1F000 or 0x2600 <= code <= 0x27BF or code == 0xFE0F or unicodedata.category(char) == "So"
