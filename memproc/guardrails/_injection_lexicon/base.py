"""The building blocks of the phrase rules: a rule, an alternation helper, and the one-sentence span."""

from __future__ import annotations

import re
from dataclasses import dataclass

W = r"[^.!?\n]"  # inside one sentence


def any_of(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


@dataclass(frozen=True, slots=True)
class Rule:
    category: str
    weight: float
    pattern: re.Pattern[str]

    def __hash__(self) -> int:
        return id(self)


def rule(category: str, weight: float, pattern: str) -> Rule:
    return Rule(category, weight, re.compile(pattern))
