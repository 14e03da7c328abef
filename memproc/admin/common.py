"""Small helpers shared by memproc's admin pages: links, JSON display, read-only bases."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Exists, OuterRef
from django.http import HttpRequest
from django.template.response import SimpleTemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, register_converter, reverse
from django.urls.converters import PathConverter
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc.models import THREAD_KEY_SEPARATOR, Thread, split_thread_key, thread_key

# Tool arguments and results can be huge; the admin shows the head and says it cut the rest.
JSON_DISPLAY_CHARS = 20_000

ADMIN_MEDIA_CSS = {"all": ("memproc/admin.css", "memproc/turns.css")}


def admin_url(model_name: str, pk: Any, *, view: str = "change") -> str | None:
    try:
        return reverse(f"admin:memproc_{model_name}_{view}", args=[quote(pk)])
    except NoReverseMatch:  # the model is not registered on this site
        return None


def changelist_url(model_name: str, query: str = "") -> str:
    url = reverse(f"admin:memproc_{model_name}_changelist")
    return f"{url}?{query}" if query else url


def admin_link(model_name: str, pk: Any, label: Any = None) -> SafeString | str:
    """A link to the object's admin page, or just its label when there is no page."""
    if pk in (None, ""):
        return "—"
    url = admin_url(model_name, pk)
    text = pk if label is None else label
    return format_html('<a href="{}">{}</a>', url, text) if url else str(text)


def thread_label(key: str) -> str:
    """How a person names a stored thread: its id and, as ids repeat across resources, its resource.
    Never the key itself, whose separator is a control character."""
    resource_id, thread_id = split_thread_key(key)
    if not resource_id:
        return thread_id
    return _("%(thread)s (resource %(resource)s)") % {"thread": thread_id, "resource": resource_id}


def thread_admin_link(key: str, *, with_resource: bool = False) -> SafeString | str:
    """A link to a thread's page (the key is its pk), named by the thread id people use; with its
    resource where no resource column stands beside it."""
    if not key:
        return "—"
    label = thread_label(key) if with_resource else split_thread_key(key)[1]
    return admin_link("thread", key, label)


_SEPARATOR_BYTES = THREAD_KEY_SEPARATOR.encode()
_SEPARATOR_REFERENCE = f"&#{ord(THREAD_KEY_SEPARATOR)};".encode()


def _separator_as_reference(response: Any) -> None:
    response.content = response.content.replace(_SEPARATOR_BYTES, _SEPARATOR_REFERENCE)


class KeySafePagesMixin:
    """A thread's pk (its key) holds a control character, which Django writes as it is wherever a pk
    goes into a page (checkbox values, hidden inputs of filters, the delete confirmation). Each page
    writes it as a character reference instead, after rendering: the browser reads and submits the
    same key, and no page holds a raw control character. JSON in a page escapes it already."""

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        return _key_safe(super().changelist_view(request, extra_context))  # type: ignore[misc]

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _key_safe(super().changeform_view(request, *args, **kwargs))  # type: ignore[misc]

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _key_safe(super().delete_view(request, *args, **kwargs))  # type: ignore[misc]

    def history_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _key_safe(super().history_view(request, *args, **kwargs))  # type: ignore[misc]


def _key_safe(response: Any) -> Any:
    if isinstance(response, SimpleTemplateResponse):
        if response.is_rendered:
            _separator_as_reference(response)
        else:
            response.add_post_render_callback(_separator_as_reference)
    elif getattr(response, "streaming", True) is False and "html" in response.get("Content-Type", ""):
        _separator_as_reference(response)
    return response


def pretty_json(value: Any, *, limit: int = JSON_DISPLAY_CHARS) -> tuple[str, bool]:
    """Indented JSON (strings as they are), cut at `limit` characters. Returns (text, truncated)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def one_line(value: Any, *, limit: int = 80) -> str:
    """A compact one-line preview of a value for a <summary> or a list column."""
    if isinstance(value, str):
        text = " ".join(value.split())
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ReadOnlyAdmin(KeySafePagesMixin, admin.ModelAdmin):
    """For rows memproc writes itself: operators read them, never add or edit them by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class UserLinksMixin:
    """Lists show the users their rows link to (`user_links`) by one more query, never a join: memproc's
    tables may sit in a database of their own, apart from the users (USER_LINK in memproc.models)."""

    list_select_related: ClassVar[tuple[str, ...]] = ()
    user_links: ClassVar[tuple[str, ...]] = ()

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related(*self.user_links)  # type: ignore[misc]


class StoredThreadMixin:
    """For rows that name a thread by (resource id, thread id) in plain columns (turn records, tripwire
    logs): a blocked first turn never stored its thread, so the thread is linked only where it exists
    (one EXISTS per list)."""

    def get_queryset(self, request: HttpRequest) -> Any:
        thread_exists = Exists(
            Thread.objects.filter(public_id=OuterRef("thread_id"), resource_id=OuterRef("resource_id"))
        )
        return super().get_queryset(request).annotate(thread_exists=thread_exists)  # type: ignore[misc]

    @admin.display(description=_("Thread"), ordering="thread_id")
    def thread(self, obj: Any) -> Any:
        if not obj.thread_id:
            return "—"
        if getattr(obj, "thread_exists", False):
            return admin_link("thread", thread_key(obj.resource_id, obj.thread_id), obj.thread_id)
        return format_html('{} <span class="memproc-quiet">({})</span>', obj.thread_id, _("not stored"))


# How a thread key's separator is written in an admin URL, as Django's quote() writes "/" as "_2F".
URL_KEY_SEPARATOR = f"_{ord(THREAD_KEY_SEPARATOR):02X}"


class ThreadKeyConverter(PathConverter):
    """The object id of an admin URL whose pk is a thread key: the key's separator, a control
    character, travels as "_1F" instead of "%1F". quote() writes "_" itself as "_5F", so "_1F" in a
    quoted id is only ever the separator. An id with "%1F" (a URL from before) still opens its object."""

    def to_python(self, value: str) -> str:
        return value.replace(URL_KEY_SEPARATOR, THREAD_KEY_SEPARATOR)

    def to_url(self, value: Any) -> str:
        return str(value).replace(THREAD_KEY_SEPARATOR, URL_KEY_SEPARATOR)


register_converter(ThreadKeyConverter, "memproc_thread_key")


class ThreadKeyPkMixin:
    """For admins whose pk is a thread's key (threads, summaries). Their object URLs write the key's
    separator as "_1F" (`ThreadKeyConverter`), wherever Django or memproc reverses them: list rows,
    the history and delete links, redirects, the "Recent actions" of the admin index. An admin URL
    from before keys existed names the bare thread id, and still opens its object while only one
    resource has a thread of that id (one more query, on a miss only)."""

    thread_id_lookup: ClassVar[str] = "public_id"

    def get_urls(self) -> list[URLPattern]:
        return [_with_key_converter(pattern) for pattern in super().get_urls()]  # type: ignore[misc]

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        obj = super().get_object(request, object_id, from_field)  # type: ignore[misc]
        if obj is not None or from_field is not None or THREAD_KEY_SEPARATOR in object_id:
            return obj
        queryset = self.get_queryset(request)  # type: ignore[attr-defined]
        found = list(queryset.filter(**{self.thread_id_lookup: object_id})[:2])
        return found[0] if len(found) == 1 else None


def _with_key_converter(pattern: Any) -> Any:
    """`pattern` with its object id read and written by `ThreadKeyConverter`."""
    route = str(pattern.pattern)
    if not route.startswith("<path:object_id>"):
        return pattern
    route = route.replace("<path:object_id>", "<memproc_thread_key:object_id>", 1)
    return path(route, pattern.callback, pattern.default_args, pattern.name)
