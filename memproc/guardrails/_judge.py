"""Asking a chat model for a JSON verdict, and reading whatever it answers without trusting it.

A judge model is an optional helper of a guardrail: when it cannot be resolved, raises, or answers
something that is not a JSON object, `ask_json` logs why and returns None, and the guardrail falls
back to its offline detector. It never raises.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from memproc import logs, redaction
from memproc.llm import resolve_model
from memproc.llm.types import ModelRequest
from memproc.messages import Message
from memproc.messages.prompt_tags import JUDGE_CLOSE, JUDGE_OPEN, neutralise_judged

logger = logging.getLogger("memproc.guardrails")

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def ask_json(spec: Any, *, instructions: str, content: str, owner: str) -> dict[str, Any] | None:
    """The judge's verdict on `content` as a dict, or None (logged) when there is no usable one.

    The content goes in its own user message between markers, and the instructions tell the judge to
    treat it as data: text under review that says "ignore your instructions" must not steer it.
    """
    try:
        model = resolve_model(spec)
    except Exception as exc:
        logs.failure(
            logger,
            "memproc: %s could not resolve its judge model %r; using the offline detector",
            owner,
            spec,
            exc=exc,
        )
        return None
    request = ModelRequest(
        messages=[
            Message.create("system", instructions),
            Message.create("user", f"{JUDGE_OPEN}\n{neutralise_judged(content)}\n{JUDGE_CLOSE}"),
        ]
    )
    try:
        response = model.generate(request)
    except Exception as exc:
        logger.warning(
            "memproc: %s judge model %s failed (%s); using the offline detector",
            owner,
            getattr(model, "id", spec),
            redaction.describe(exc),
        )
        return None
    data = parse_json_object(getattr(response, "text", "") or "")
    if data is None:
        logger.warning(
            "memproc: %s judge model %s answered without a JSON object; using the offline detector",
            owner,
            getattr(model, "id", spec),
        )
    return data


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text`: bare, inside a ``` fence, or embedded in prose."""
    text = text.strip()
    candidates = [text, *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def score(value: Any) -> float | None:
    """A number clamped to [0, 1]; also reads "0.8", "80%", true/false. None for anything else."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        raw = value.strip()
        percent = raw.endswith("%")
        try:
            value = float(raw.rstrip("%")) / (100 if percent else 1)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and value == value:  # not NaN
        return min(1.0, max(0.0, float(value)))
    return None


def category_scores(value: Any, *, aliases: dict[str, str] | None = None) -> dict[str, float]:
    """Reads {"hate": 0.1} as well as [{"category": "hate", "score": 0.1}] (Mastra's shape) and
    ["hate"] (a list of flagged names, each scored 1). Names are lower-cased; `aliases` maps
    alternative spellings ("self_harm") to the canonical name."""
    aliases = aliases or {}
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                pairs.append((item, 1.0))
            elif isinstance(item, dict):
                name = item.get("category", item.get("type", item.get("name")))
                pairs.append((name, item.get("score", item.get("confidence", 1.0))))
    scores: dict[str, float] = {}
    for name, raw in pairs:
        if not isinstance(name, str):
            continue
        key = name.strip().lower()
        key = aliases.get(key, key)
        number = score(raw)
        if number is not None:
            scores[key] = max(number, scores.get(key, 0.0))
    return scores
