"""“Why the model saw this”: a turn record's manifest as links and numbers.

Shown under each assistant reply of the transcript and on the record's own admin page. The manifest
holds ids, never text; the excerpts that make the ids readable come from one query over the messages
that still exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.urls import NoReverseMatch

from memproc import models
from memproc.admin.common import admin_url, changelist_url
from memproc.admin.manifest_fields import (
    as_int,
    history_ids,
    id_list,
    is_number,
    percent,
    recalled,
    recalled_ids,
    search_hits,
    search_ids,
    searches,
    usage_label,
    usage_tokens,
)
from memproc.admin.turn_views import (
    HookTiming,
    MessageRef,
    RecallRef,
    SearchHitRef,
    SearchView,
    TokenCounts,
    TurnView,
    WorkingMemoryRef,
)
from memproc.selectors.messages import message_excerpts
from memproc.selectors.turns import thread_turns_until

# Records fetched beyond the page's assistant replies: turns of other pages that started in its time
# range (a reply saved on the next page, concurrent turns), so every reply on the page finds its own.
TURN_SLACK = 20
EXCERPT_CHARS = 160
SHORT_ID_CHARS = 8


def attach_turn_panels(views: Sequence[Any], *, thread_key: str, until: datetime | None) -> None:
    """Gives each assistant reply on a transcript page the `TurnView` of the turn that saved it.

    `views` are the page's `MessageView`s in order, of the thread stored under `thread_key`; `until`
    is the newest message time on the page (None on the last page). Two queries, whatever the number
    of turns: the records, the excerpts.
    """
    assistants = {v.id: v for v in views if v.role == "assistant" and v.id}
    if not assistants:
        return
    resource_id, thread_id = models.split_thread_key(thread_key)
    records = thread_turns_until(
        thread_id=thread_id, resource_id=resource_id, until=until, limit=len(assistants) + TURN_SLACK
    )
    replies = {}
    for record in records:
        reply = next((i for i in reversed(id_list(record.message_ids)) if i in assistants), None)
        if reply is not None and reply not in replies:
            replies[reply] = record
    if not replies:
        return
    on_page = {v.id: v for v in views if v.id}
    wanted = [
        i
        for record in replies.values()
        for i in [
            *history_ids(record.manifest),
            *recalled_ids(record.manifest),
            *search_ids(record.manifest),
        ]
        if i not in on_page
    ]
    links = _Links(on_page=on_page, excerpts=message_excerpts(resource_id=resource_id, message_ids=wanted))
    for reply, record in replies.items():
        assistants[reply].turn = turn_view(record, links=links, thread_key=thread_key)


# --- one record ------------------------------------------------------------------------------------


def record_view(record: models.TurnRecord) -> TurnView:
    """A record's `TurnView` for its own admin page: every message linked to its admin page. One query."""
    manifest = record.manifest if isinstance(record.manifest, Mapping) else {}
    ids = [
        *history_ids(manifest),
        *recalled_ids(manifest),
        *search_ids(manifest),
        *id_list(record.message_ids),
    ]
    links = _Links(on_page={}, excerpts=message_excerpts(resource_id=record.resource_id, message_ids=ids))
    view = turn_view(record, links=links, thread_key=_record_thread_key(record))
    view.saved = [links.message(i) for i in id_list(record.message_ids)]
    view.own_page = True
    return view


def _record_thread_key(record: models.TurnRecord) -> str:
    """The key of the thread a record names by (resource id, thread id); "" for none."""
    if not record.thread_id or not record.resource_id:
        return ""
    return models.thread_key(record.resource_id, record.thread_id)


def turn_view(record: models.TurnRecord, *, links: _Links, thread_key: str) -> TurnView:
    """`thread_key` is the stored key of the record's thread (the transcript's, on a transcript)."""
    manifest = record.manifest if isinstance(record.manifest, Mapping) else {}
    duration = float(record.duration_ms or 0)
    view = TurnView(
        id=str(record.pk),
        url=admin_url("turnrecord", record.pk),
        status=record.status,
        status_label=str(record.get_status_display()),
        agent_id=record.agent_id,
        model=record.model,
        steps=record.steps,
        started_at=record.started_at,
        duration_ms=duration,
        usage=[(usage_label(k), v) for k, v in (record.usage or {}).items() if is_number(v)],
        history=[links.message(i) for i in history_ids(manifest)],
        recalled=[
            links.recalled(r, thread_key=thread_key, resource_id=record.resource_id)
            for r in recalled(manifest)
        ],
        recall_error=bool(manifest.get("recall_error")),
        searches=[
            _search_view(search, links=links, thread_key=thread_key, resource_id=record.resource_id)
            for search in searches(manifest)
        ],
        echoed=as_int(manifest.get("echoed")),
        working_memory=_working_memory(manifest.get("working_memory"), resource_id=record.resource_id),
        tokens=_tokens(manifest.get("tokens")),
        processors=_timings(manifest.get("processors"), duration),
        usage_tokens=usage_tokens(record.usage),
        tripwire_id=str(record.tripwire_id or ""),
        tripwire_url=admin_url("tripwirelog", record.tripwire_id) if record.tripwire_id else None,
        error=record.error,
    )
    spent = sum(p.ms for p in view.processors)
    view.other_ms = max(0.0, duration - spent)
    view.other_pct = percent(view.other_ms, duration)
    return view


class _Links:
    """Message and thread links, each URL reversed once."""

    def __init__(self, *, on_page: Mapping[str, Any], excerpts: Mapping[str, Mapping[str, Any]]) -> None:
        self.on_page = on_page
        self.excerpts = excerpts
        self._urls: dict[tuple[str, str], str | None] = {}

    def url(self, model_name: str, pk: str) -> str | None:
        key = (model_name, pk)
        if key not in self._urls:
            self._urls[key] = admin_url(model_name, pk) if pk else None
        return self._urls[key]

    def message(self, message_id: str) -> MessageRef:
        view = self.on_page.get(message_id)
        if view is not None:
            label = f"#{view.sequence}" if view.sequence else _short(message_id)
            return MessageRef(
                id=message_id,
                label=label,
                url=f"#message-{message_id}",
                excerpt=_view_excerpt(view),
                role=view.role,
                on_page=True,
            )
        row = self.excerpts.get(message_id)
        if row is None:
            return MessageRef(id=message_id, label=_short(message_id), missing=True)
        return MessageRef(
            id=message_id,
            label=f"#{row['sequence']}" if row.get("sequence") else _short(message_id),
            url=self.url("message", str(row.get("pk") or "")),
            excerpt=_clip(row.get("excerpt") or ""),
            role=str(row.get("role") or ""),
        )

    def recalled(self, item: Mapping[str, Any], *, thread_key: str, resource_id: str) -> RecallRef:
        """`thread_key`: the turn's thread; `resource_id`: the turn's resource, where recall searched."""
        ref = self.message(str(item.get("id") or ""))
        source = thread_key if ref.on_page else self._recalled_from(ref.id, item, resource_id)
        score = item.get("score")
        score = float(score) if is_number(score) else None
        return RecallRef(
            **ref.__dict__,
            score=score,
            score_pct=round(max(0.0, min(1.0, score)) * 100) if score is not None else 0,
            thread_id=models.split_thread_key(source)[1],
            thread_url=self.url("thread", source),
            same_thread=bool(source) and source == thread_key,
        )

    def _recalled_from(self, message_id: str, item: Mapping[str, Any], resource_id: str) -> str:
        """The key of the recalled message's thread: the stored message's own, while it exists; else
        the manifest's thread id (a Python value, so the id people use) in the turn's resource."""
        row = self.excerpts.get(message_id)
        if row and row.get("thread_id"):
            return str(row["thread_id"])
        public = str(item.get("thread_id") or "")
        return models.thread_key(resource_id, public) if public and resource_id else ""


# --- manifest parts as views (fields are read by memproc.admin.manifest_fields) ---------------------


def _search_view(
    search: Mapping[str, Any], *, links: _Links, thread_key: str, resource_id: str
) -> SearchView:
    withheld = set(id_list(search.get("withheld")))
    hits = []
    for hit in search_hits(search):
        ref = links.recalled(hit, thread_key=thread_key, resource_id=resource_id)
        hits.append(SearchHitRef(**ref.__dict__, withheld=ref.id in withheld))
    return SearchView(
        scope=str(search.get("scope") or ""),
        query_chars=as_int(search.get("query_chars")),
        hits=hits,
        error=str(search.get("error") or ""),
    )


def _working_memory(value: Any, *, resource_id: str) -> WorkingMemoryRef | None:
    """The manifest names a thread's working memory by the thread id (a Python value); its stored
    key, which the links need, is that id within the turn's resource."""
    if not isinstance(value, Mapping) or not value.get("scope") or not value.get("key"):
        return None
    scope, label, version = str(value["scope"]), str(value["key"]), as_int(value.get("version"))
    if scope != "thread":
        key = label
    elif resource_id:
        key = models.thread_key(resource_id, label)
    else:
        return WorkingMemoryRef(scope, "", label, version, None, None, None)  # whose thread is unknown
    query = {"scope__exact": scope, "key": key}
    return WorkingMemoryRef(
        scope=scope,
        key=key,
        label=label,
        version=version,
        owner_url=admin_url(scope, key),
        revisions_url=_changelist("workingmemoryrevision", urlencode(query)),
        version_url=_changelist("workingmemoryrevision", urlencode({**query, "version": version}))
        if version
        else None,
    )


def _tokens(value: Any) -> TokenCounts | None:
    if not isinstance(value, Mapping) or not is_number(value.get("total")):
        return None
    total = int(value["total"])
    limit = int(value["limit"]) if is_number(value.get("limit")) and value["limit"] > 0 else None
    return TokenCounts(
        total=total, limit=limit, dropped=as_int(value.get("dropped")), pct=percent(total, limit or 0)
    )


def _timings(value: Any, duration: float) -> list[HookTiming]:
    if not isinstance(value, list):
        return []
    timings = [
        HookTiming(
            processor=str(p.get("processor") or "?"),
            hook=str(p.get("hook") or ""),
            ms=float(p["ms"]),
            calls=as_int(p.get("calls")),
            pct=percent(float(p["ms"]), duration),
        )
        for p in value
        if isinstance(p, Mapping) and is_number(p.get("ms"))
    ]
    return sorted(timings, key=lambda t: -t.ms)


def _changelist(model_name: str, query: str) -> str | None:
    try:
        return changelist_url(model_name, query)
    except NoReverseMatch:  # not registered on this site
        return None


def _view_excerpt(view: Any) -> str:
    text = " ".join(p.text for p in getattr(view, "parts", ()) if p.kind == "text" and p.text)
    if not text:
        names = [p.name for p in getattr(view, "parts", ()) if p.kind in ("tool-call", "tool-result")]
        text = ", ".join(f"{n}()" for n in names if n)
    return _clip(text)


def _clip(text: str, limit: int = EXCERPT_CHARS - 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(message_id: str) -> str:
    return message_id if len(message_id) <= SHORT_ID_CHARS + 1 else message_id[:SHORT_ID_CHARS] + "…"
