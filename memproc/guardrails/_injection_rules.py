"""Offline prompt-injection scoring: weighted phrase rules over canonical copies of the text.

Each rule belongs to a category and carries a weight (how sure one hit makes us). The text is scored
in several spellings: Unicode-normalised and lower-cased, with leetspeak undone ("1gn0re"), with
letter-spaced words joined ("i g n o r e"), and decoded from base64, hex, ROT13 and invisible
Unicode tag characters when those hide instructions. Scores combine as a noisy OR, 1 - Π(1 - w),
so two weak signals together count more than one. It catches the common phrasings; it is not a
classifier, and a determined attacker who paraphrases will get past it (use `model=` as well).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass

from memproc.guardrails.unicode_normalizer import normalize_text

_W = r"[^.!?\n]"  # a character inside the same sentence


@dataclass(frozen=True, slots=True)
class Rule:
    category: str
    weight: float
    pattern: re.Pattern[str]


def _rule(category: str, weight: float, pattern: str) -> Rule:
    return Rule(category, weight, re.compile(pattern, re.I))


RULES: tuple[Rule, ...] = (
    # Telling the model to drop what it was told.
    _rule(
        "instruction-override",
        0.9,
        rf"\b(?:ignore|disregard|forget|skip|override|bypass|drop|neglect)\b{_W}{{0,40}}?"
        r"\b(?:previous|prior|above|earlier|preceding|former|original|initial|system|existing|all)\b"
        rf"{_W}{{0,20}}?\b(?:instructions?|prompts?|rules|directions|directives|guidelines|context|"
        r"commands?|messages?|constraints|programming)\b",
    ),
    _rule(
        "instruction-override",
        0.7,
        r"\b(?:do not|don'?t|stop|never)\s+(?:follow|obey|listen(?:ing)? to|follow(?:ing)?)\s+"
        r"(?:your|the|any)\s+(?:previous\s+|original\s+|system\s+|initial\s+)?"
        r"(?:instructions|rules|guidelines|programming|prompt)",
    ),
    _rule(
        "instruction-override",
        0.8,
        r"\byour\s+(?:new|real|true|actual)\s+(?:instructions|task|goal|purpose|role)\s+(?:is|are)\b",
    ),
    _rule("instruction-override", 0.6, r"\bnew\s+(?:instructions|rules|system\s+prompt|directives)\s*:"),
    _rule(
        "instruction-override",
        0.5,
        rf"\bfrom\s+now\s+on\b{_W}{{0,40}}\byou\b{_W}{{0,30}}\b(?:will|must|are|shall|should|can)\b",
    ),
    # Role play that removes the rules ("DAN", "developer mode").
    _rule("jailbreak", 0.85, r"\bdo\s+anything\s+now\b"),
    _rule("jailbreak", 0.7, r"\b(?:developer|debug|god|sudo|unrestricted|jailbreak|dan|evil)\s+mode\b"),
    _rule("jailbreak", 0.6, r"\bjailbr(?:eak|oken|eaking)\b"),
    _rule(
        "jailbreak",
        0.7,
        r"\b(?:pretend|imagine|act\s+as\s+if|role-?play|play\s+the\s+role|you\s+are\s+now|simulate)\b"
        rf"{_W}{{0,80}}\b(?:no|without|free\s+(?:from|of)|not\s+bound\s+by|ignores?)\s+(?:any\s+|all\s+)?"
        r"(?:restrictions|rules|limits|limitations|filters|guidelines|ethics|morals|censorship|"
        r"content\s+polic(?:y|ies)|safety)",
    ),
    _rule(
        "jailbreak",
        0.7,
        r"\b(?:act|behave|respond|answer)\s+(?:as|like)\s+(?:an?\s+)?"
        r"(?:unrestricted|unfiltered|uncensored|evil|amoral|unaligned|unethical)\b",
    ),
    _rule(
        "jailbreak",
        0.6,
        r"\byou\s+(?:are|have\s+been)\s+(?:now\s+)?(?:freed|liberated|unshackled|no\s+longer\s+bound)",
    ),
    _rule(
        "jailbreak",
        0.6,
        r"\b(?:without|ignore|ignoring|bypass|bypassing|disable)\s+(?:any\s+|your\s+|all\s+)?"
        r"(?:safety|content|ethical|moral)\s+(?:filters?|polic(?:y|ies)|guidelines|restrictions)",
    ),
    _rule("jailbreak", 0.5, r"\b(?:stay|remain)\s+in\s+character\b"),
    # Asking for the system prompt.
    _rule(
        "system-prompt-extraction",
        0.8,
        r"\b(?:reveal|show|print|display|output|repeat|recite|tell\s+me|give\s+me|share|leak|dump|"
        rf"write\s+out|spell\s+out|paste|quote)\b{_W}{{0,30}}\b(?:your|the)\s+(?:full\s+|entire\s+|"
        r"complete\s+|original\s+|initial\s+|hidden\s+|secret\s+|exact\s+|internal\s+)*"
        r"(?:system\s+prompt|system\s+message|(?:initial|original|hidden|secret|internal)\s+"
        r"(?:instructions|prompt)|instructions\s+(?:above|you\s+were\s+given)|prompt\s+above|"
        r"developer\s+(?:message|prompt)|pre-?prompt)",
    ),
    _rule(
        "system-prompt-extraction",
        0.75,
        r"\bwhat\s+(?:is|are|was|were)\s+your\s+(?:system\s+prompt|(?:initial|original|hidden|secret|"
        r"internal)\s+(?:instructions|prompt))",
    ),
    _rule(
        "system-prompt-extraction",
        0.7,
        rf"\b(?:repeat|print|output|copy|recite)\b{_W}{{0,30}}\b(?:everything|all|the\s+(?:text|words|"
        r"content|lines))\s+(?:above|before\s+this|so\s+far|preceding)",
    ),
    _rule(
        "system-prompt-extraction",
        0.6,
        r"\b(?:what|which)\s+(?:instructions|rules)\s+(?:were\s+you|have\s+you\s+been)\s+(?:given|told)",
    ),
    # Text that pretends to be a system or assistant turn.
    _rule(
        "role-injection",
        0.8,
        r"<\|?(?:im_start|im_end|system|endoftext|start_header_id|end_header_id|eot_id)\|?>|\[/?inst\]|"
        r"<</?sys>>|</?(?:system|sys|instructions?)>",
    ),
    _rule("role-injection", 0.5, r"(?:^|\n)\s*#*\s*(?:system|developer)\s*(?:prompt|message)?\s*:\s*\S"),
    _rule(
        "role-injection",
        0.6,
        r"\b(?:end|begin|start)\s+(?:of\s+)?(?:the\s+)?(?:user\s+input|system\s+prompt|instructions|"
        r"new\s+instructions)\b",
    ),
    # Getting data out through links or tools.
    _rule(
        "exfiltration",
        0.6,
        r"!\[[^\]]*\]\(https?://[^)\s]*[?&][^)\s]*=(?:\{|\[|%7b|<|\$)",
    ),
    _rule(
        "exfiltration",
        0.6,
        rf"\b(?:send|post|upload|forward|exfiltrate|leak|email)\b{_W}{{0,60}}\b(?:conversation|chat\s+"
        r"history|history|memory|system\s+prompt|api\s+keys?|credentials|secrets|passwords)\b"
        rf"{_W}{{0,40}}(?:https?://|\bto\s+\S+@\S+)",
    ),
    # Asking for hidden payloads to be decoded and obeyed.
    _rule(
        "encoded-payload",
        0.6,
        rf"\b(?:decode|decipher|base64|rot13|hex|reverse)\b{_W}{{0,60}}\b(?:and|then)\s+"
        r"(?:follow|execute|run|obey|do\s+what)",
    ),
)

_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "|": "i"}
)
_SPACED = re.compile(r"\b(?:\w[ .\-_*]){3,}\w\b")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{24,}={0,2}(?![A-Za-z0-9+/=])")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}){16,}\b")
_TAGS = re.compile("[\U000e0000-\U000e007f]{4,}")


@dataclass(frozen=True, slots=True)
class Verdict:
    score: float
    categories: dict[str, float]

    @property
    def names(self) -> list[str]:
        return sorted(self.categories)


def score_text(text: str, *, decode: bool = True) -> Verdict:
    """The heuristic verdict for `text` (0 means no rule fired)."""
    weights: dict[Rule, float] = {}
    for variant in _variants(text):
        for rule in RULES:
            if rule not in weights and rule.pattern.search(variant):
                weights[rule] = rule.weight
    categories: dict[str, float] = {}
    for rule, weight in weights.items():
        categories[rule.category] = _noisy_or(categories.get(rule.category, 0.0), weight)
    if decode:
        hidden = _hidden_payload_score(text)
        if hidden:
            categories["encoded-payload"] = _noisy_or(categories.get("encoded-payload", 0.0), hidden)
    total = 0.0
    for value in categories.values():
        total = _noisy_or(total, value)
    return Verdict(round(total, 4), {k: round(v, 4) for k, v in categories.items()})


def _noisy_or(a: float, b: float) -> float:
    return 1 - (1 - a) * (1 - b)


def _variants(text: str) -> Iterator[str]:
    canonical = normalize_text(text, collapse_whitespace=True).lower()
    yield canonical
    unleet = canonical.translate(_LEET)
    if unleet != canonical:
        yield unleet
    joined = _SPACED.sub(lambda m: re.sub(r"[ .\-_*]", "", m.group()), unleet)
    if joined != unleet:
        yield joined


def _hidden_payload_score(text: str) -> float:
    """How strongly decoded hidden text (base64, hex, ROT13, tag characters) reads as an injection."""
    best = 0.0
    for hidden in _decoded(text):
        inner = score_text(hidden, decode=False).score
        if inner:
            best = max(best, max(0.85, inner))
    return best


def _decoded(text: str) -> Iterator[str]:
    tags = _TAGS.findall(text)
    for run in tags:
        yield "".join(chr(ord(c) - 0xE0000) for c in run)
    for match in _BASE64.finditer(text):
        blob = match.group()
        try:
            raw = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=False)
        except (binascii.Error, ValueError):
            continue
        decoded = _printable(raw)
        if decoded:
            yield decoded
    for match in _HEX.finditer(text):
        decoded = _printable(bytes.fromhex(match.group()))
        if decoded:
            yield decoded
    canonical = normalize_text(text)
    rotated = codecs.decode(canonical, "rot13")
    if rotated != canonical:
        yield rotated


def _printable(raw: bytes) -> str | None:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not decoded or sum(c.isprintable() or c.isspace() for c in decoded) / len(decoded) < 0.9:
        return None
    return decoded
