"""UnicodeNormalizer: removes the characters that smuggle (invisible, bidi and tag characters) from the
turn's input, and nothing the user can see."""

from __future__ import annotations

import re
import unicodedata

from memproc.exceptions import ConfigurationError
from memproc.guardrails import _options
from memproc.guardrails._normalize import is_emoji, strip_invisible
from memproc.guardrails._text import input_targets, map_text
from memproc.messages import Message
from memproc.processors.base import ProcessorContext

__all__ = ["UnicodeNormalizer", "normalize_text"]

FORMS = ("NFC",)
_LOSSY_FORMS = ("NFKC", "NFKD", "NFD")
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
    """A canonical copy of `text` for comparing and scoring, never for storing: controls, bidi and
    tag characters and every zero-width character removed (a joiner between two emoji kept), then
    `form` (NFKC by default, so "ｉｇｎｏｒｅ" reads "ignore"). Detectors that need to map what they
    find back onto the original use `memproc.guardrails._normalize.fold` instead."""
    if strip_control:
        text = strip_invisible(text, remove_zero_width=False, keep_rtl_bidi=False)
    if remove_zero_width:
        kept = strip_invisible(text, strip_control=False)
        # In a copy for detection a joiner never matters, except inside an emoji sequence.
        text = "".join(
            c for i, c in enumerate(kept) if c != "\u200c" and (c != "\u200d" or _between_emoji(kept, i))
        )
    if form:
        text = unicodedata.normalize(form, text)
    if collapse_whitespace:
        text = _collapse(text)
    return text


class UnicodeNormalizer:
    """Removes what smuggles hidden text or reorders it from the turn's new messages, and stores what
    the user wrote otherwise unchanged.

    Reads: the text parts of `ctx.new_messages` (the turn's own input).

    Changes: returns copies of the messages whose text changes, with, when `strip_control` (the
    default), C0/C1 control characters other than tab and newline, bidirectional overrides (the
    "Trojan Source" and "txt.exe" reordering), the other bidi controls (embeddings, isolates and
    marks) unless right-to-left text needs them (on a line with Hebrew, Arabic, ... letters: a mark
    that is not inside a word, an embedding or isolate closed on its line, a right-to-left one only
    around right-to-left letters; see `memproc.guardrails._normalize`), and Unicode tag characters
    outside emoji flags ("ASCII smuggling") removed; when `remove_zero_width` (the default), the
    invisible characters that split a word without showing (zero-width space, soft hyphen, word
    joiner, BOM, Hangul fillers, ...) removed, and a zero-width joiner or non-joiner removed unless
    it sits inside a word of a script that needs it (Persian "می‌خواهم", the Indic scripts,
    Sinhala) or between two emoji. With `form="NFC"` text is also composed canonically (never a
    visible change). With `collapse_whitespace`, runs of spaces and tabs become one space, line
    endings "\\n", more than one blank line one, and the text is trimmed. Records the number of
    changed messages in `ctx.state["normalized"]`. Returns None when nothing changes.

    Never: folds compatibility characters in stored text ("E = mc²", "H₂O", fullwidth "ＡＢＣ",
    ligatures all stay as typed; NFKC and NFKD are refused): a guardrail must not corrupt what the
    user wrote. The detectors (PromptInjectionDetector, PIIDetector, ModerationProcessor,
    SystemPromptScrubber) fold a copy of the text themselves and map what they find back onto the
    original, so they do not need this processor to run first. Never blocks a turn; never touches
    history that memory loaded, system messages or non-text parts; never mutates what it is given.

    Order: first in `input_processors`, so that what is stored and forwarded carries no hidden text.
    """

    id = "unicode-normalizer"
    channels = frozenset({"input"})

    def __init__(
        self,
        *,
        form: str | None = None,
        strip_control: bool = True,
        collapse_whitespace: bool = False,
        remove_zero_width: bool = True,
    ) -> None:
        owner = "UnicodeNormalizer"
        if form in _LOSSY_FORMS:
            raise ConfigurationError(
                f'{owner}(form={form!r}) would change what the user wrote ("E = mc²" to "E = mc2"); '
                "use None or 'NFC'. The detectors fold a copy of the text for matching themselves."
            )
        self.form = None if form is None else _options.choice(owner, "form", form, FORMS)
        self.strip_control = _options.boolean(owner, "strip_control", strip_control)
        self.collapse_whitespace = _options.boolean(owner, "collapse_whitespace", collapse_whitespace)
        self.remove_zero_width = _options.boolean(owner, "remove_zero_width", remove_zero_width)

    def normalize(self, text: str) -> str:
        text = strip_invisible(
            text, strip_control=self.strip_control, remove_zero_width=self.remove_zero_width
        )
        if self.form:
            text = unicodedata.normalize(self.form, text)
        if self.collapse_whitespace:
            text = _collapse(text)
        return text

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


def _collapse(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _HORIZONTAL_SPACE.sub(" ", text)
    text = _SPACE_BEFORE_NEWLINE.sub("\n", text)
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


def _between_emoji(text: str, index: int) -> bool:
    return 0 < index < len(text) - 1 and is_emoji(text[index - 1]) and is_emoji(text[index + 1])
