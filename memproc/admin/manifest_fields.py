"""A turn record's manifest, read field by field. A record may come from an older or newer memproc,
so every reader is defensive: a missing or ill-typed field reads as empty, never as an error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def id_list(value: Any) -> list[str]:
    return [str(i) for i in value if isinstance(i, (str, int))] if isinstance(value, list) else []


def history_ids(manifest: Mapping[str, Any]) -> list[str]:
    return id_list(manifest.get("history"))


def recalled(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = manifest.get("recalled")
    return [r for r in items if isinstance(r, Mapping) and r.get("id")] if isinstance(items, list) else []


def recalled_ids(manifest: Mapping[str, Any]) -> list[str]:
    return [str(r["id"]) for r in recalled(manifest)]


def searches(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = manifest.get("searches")
    return [s for s in items if isinstance(s, Mapping)] if isinstance(items, list) else []


def search_hits(search: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    hits = search.get("hits")
    return [h for h in hits if isinstance(h, Mapping) and h.get("id")] if isinstance(hits, list) else []


def search_ids(manifest: Mapping[str, Any]) -> list[str]:
    return [str(h["id"]) for search in searches(manifest) for h in search_hits(search)]


def usage_label(key: Any) -> str:
    """`prompt_tokens` reads "prompt"; other keys as they are, spaced."""
    return str(key).removesuffix("_tokens").replace("_", " ")


def usage_tokens(usage: Any) -> int | None:
    """The usage's `total_tokens`, else prompt + completion tokens; None when it reports neither."""
    if not isinstance(usage, Mapping):
        return None
    if is_number(usage.get("total_tokens")):
        return int(usage["total_tokens"])
    parts = [usage[k] for k in ("prompt_tokens", "completion_tokens") if is_number(usage.get(k))]
    return int(sum(parts)) if parts else None


def percent(part: float, whole: float) -> float:
    return round(min(100.0, part / whole * 100), 1) if whole > 0 else 0.0


def as_int(value: Any) -> int:
    return int(value) if is_number(value) else 0


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
