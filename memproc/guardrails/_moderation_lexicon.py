"""The offline moderation baseline: a small weighted phrase lexicon for five categories.

This is a weak baseline, meant for development, tests and as a tripwire for the blatant cases. It
matches phrases, not meaning: it misses paraphrase, sarcasm, slurs (none ship here; add your own
with `ModerationProcessor(lexicon=...)`), and other languages, and it flags quotations and fiction.
Use `model=` for real moderation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from memproc.guardrails.unicode_normalizer import normalize_text

CATEGORIES = ("hate", "harassment", "self-harm", "sexual", "violence")

_PEOPLE = r"(?:you|him|her|them|everyone|everybody|people|someone|somebody|all of you|your family)"

LEXICON: dict[str, tuple[tuple[str, float], ...]] = {
    "violence": (
        (
            rf"\b(?:i(?:'m| am)? (?:going to|gonna|will)|i'll|let's) "
            rf"(?:kill|murder|shoot|stab|strangle|behead|hurt|beat up|torture) {_PEOPLE}\b",
            0.9,
        ),
        (
            r"\bhow (?:do i|to|can i) (?:make|build|assemble) (?:a )?(?:pipe )?(?:bomb|explosive|"
            r"molotov|ied)\b",
            0.9,
        ),
        (r"\b(?:shoot up|bomb) (?:a |the )?(?:school|church|mosque|synagogue|mall|office|concert)\b", 0.9),
        (r"\b(?:massacre|mass shooting|behead(?:ing)?|dismember(?:ed|ing)?)\b", 0.5),
        (r"\b(?:kill|murder|stab|shoot|torture)(?:ed|ing)? (?:him|her|them|you|people)\b", 0.55),
        (r"\bi know where you live\b", 0.6),
    ),
    "self-harm": (
        (r"\b(?:kill|hurt|cut|harm) (?:myself|my self)\b", 0.9),
        (r"\b(?:end|take) my (?:own )?life\b", 0.9),
        (r"\b(?:i )?(?:want|wanna|going) to die\b", 0.7),
        (r"\bsuicid(?:e|al)\b", 0.6),
        (r"\bself[- ]?harm(?:ing)?\b", 0.6),
        (r"\bhow (?:many|much) [\w\s]{0,20}(?:pills|tablets) [\w\s]{0,20}(?:to die|lethal|overdose)\b", 0.9),
        (r"\boverdos(?:e|ing) on purpose\b", 0.8),
    ),
    "hate": (
        (r"\b(?:subhuman|untermensch|inferior race|racial purity|ethnic cleansing)\b", 0.8),
        (
            r"\b(?:gas|exterminate|deport) (?:all )?(?:the )?(?:jews|muslims|christians|immigrants|"
            r"blacks|whites|gays|refugees)\b",
            0.95,
        ),
        (
            r"\b(?:all )?(?:jews|muslims|christians|immigrants|refugees|blacks|whites|gays|women|men) "
            r"(?:are|r) (?:vermin|animals|rats|parasites|a disease|subhuman|inferior)\b",
            0.9,
        ),
        (r"\bgo back to (?:your|ur) (?:own )?country\b", 0.6),
        (r"\b(?:white|racial) (?:power|supremacy)\b", 0.6),
    ),
    "harassment": (
        (
            r"\b(?:you(?:'re| are)|ur|u r) (?:a |an |so |such an? )?(?:worthless|pathetic|stupid|idiot|moron|"
            r"loser|disgusting|retard(?:ed)?|piece of (?:shit|garbage|trash))\b",
            0.7,
        ),
        (r"\b(?:kill|kys) yourself\b|\bkys\b", 0.9),
        (r"\bnobody (?:likes|loves|cares about) you\b", 0.6),
        (r"\bshut (?:the fuck |the hell )?up\b", 0.4),
        (r"\bi(?:'ll| will) (?:find|hunt) you\b", 0.7),
        (r"\b(?:fuck|screw) you\b", 0.55),
    ),
    "sexual": (
        (r"\b(?:porn(?:ography)?|pornographic|xxx|hentai)\b", 0.6),
        (r"\b(?:sexually explicit|explicit sex(?:ual)?|erotic roleplay|sexting)\b", 0.7),
        (r"\b(?:send|show) (?:me )?(?:your )?nudes?\b", 0.8),
        (r"\b(?:have|having) sex with\b", 0.6),
        (r"\b(?:blowjob|handjob|orgasm|masturbat(?:e|ing|ion))\b", 0.6),
    ),
}


def compile_lexicon(
    extra: Mapping[str, Iterable[str | tuple[str, float]]] | None = None,
) -> dict[str, list[tuple[re.Pattern[str], float]]]:
    """The built-in lexicon plus `extra` ({category: [pattern or (pattern, weight)]}, weight 0.8 by
    default). Raises re.error for a bad pattern and ValueError for a bad weight."""
    compiled: dict[str, list[tuple[re.Pattern[str], float]]] = {
        category: [(re.compile(p, re.I), w) for p, w in entries] for category, entries in LEXICON.items()
    }
    for category, entries in (extra or {}).items():
        for entry in entries:
            pattern, weight = (entry, 0.8) if isinstance(entry, str) else entry
            if not 0 < float(weight) <= 1:
                raise ValueError(f"weight {weight!r} must be in (0, 1]")
            compiled.setdefault(category, []).append((re.compile(pattern, re.I), float(weight)))
    return compiled


def score(text: str, lexicon: Mapping[str, list[tuple[re.Pattern[str], float]]]) -> dict[str, float]:
    """Category scores in [0, 1] for `text` (a noisy OR of the matched weights); absent means 0."""
    canonical = normalize_text(text, collapse_whitespace=True).lower().replace("’", "'")
    scores: dict[str, float] = {}
    for category, entries in lexicon.items():
        miss = 1.0
        for pattern, weight in entries:
            if pattern.search(canonical):
                miss *= 1 - weight
        if miss < 1:
            scores[category] = round(1 - miss, 4)
    return scores
