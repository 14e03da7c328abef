"""memproc's routes (namespace "memproc"), mounted by the project, e.g. under `api/memproc/`."""

from __future__ import annotations

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from memproc.api.protocols.aisdk import ChatStreamView, ChatView
from memproc.api.protocols.openai import ChatCompletionsView, ModelDetailView, ModelListView
from memproc.api.schema import DocsView, SchemaView, docs_asset
from memproc.api.views import (
    AgentViewSet,
    ApiRoot,
    AttachmentViewSet,
    ResourceWorkingMemoryView,
    ThreadViewSet,
    TripwireViewSet,
)
from memproc.api.views.approvals import PendingToolCallViewSet
from memproc.api.views.memory import (
    MemoryFieldPin,
    MemoryFieldUnpin,
    MemoryFieldView,
    MemoryForget,
    MemoryMessageExclude,
    MemoryMessageInclude,
    MemoryThreadForget,
    MemoryView,
)

router = SimpleRouter()
router.register("agents", AgentViewSet, basename="agent")
router.register("threads", ThreadViewSet, basename="thread")
router.register("tripwires", TripwireViewSet, basename="tripwire")
router.register("attachments", AttachmentViewSet, basename="attachment")
router.register("pending", PendingToolCallViewSet, basename="pending")

urlpatterns = [
    path("", ApiRoot.as_view(), name="api-root"),
    path(
        "resources/<str:id>/working-memory/",
        ResourceWorkingMemoryView.as_view(),
        name="resource-working-memory",
    ),
    # The end-user memory view (<memproc-memory>). A field name is any text without "/".
    path("memory/", MemoryView.as_view(), name="memory"),
    path("memory/fields/<str:name>/", MemoryFieldView.as_view(), name="memory-field"),
    path("memory/fields/<str:name>/pin/", MemoryFieldPin.as_view(), name="memory-field-pin"),
    path("memory/fields/<str:name>/unpin/", MemoryFieldUnpin.as_view(), name="memory-field-unpin"),
    path("memory/messages/<str:id>/exclude/", MemoryMessageExclude.as_view(), name="memory-message-exclude"),
    path("memory/messages/<str:id>/include/", MemoryMessageInclude.as_view(), name="memory-message-include"),
    path("memory/forget/", MemoryForget.as_view(), name="memory-forget"),
    path("memory/threads/<str:id>/forget/", MemoryThreadForget.as_view(), name="memory-thread-forget"),
    # The clients' protocols (memproc.api.protocols): the AI SDK's useChat, and OpenAI's Chat Completions
    # (`base_url=".../v1"`; the SDKs call these paths without a trailing slash).
    path("agents/<str:id>/chat/", ChatView.as_view(), name="agent-chat"),
    re_path(
        r"^agents/(?P<id>[^/]+)/chat/(?P<chat_id>[^/]+)/stream/?$",
        ChatStreamView.as_view(),
        name="agent-chat-stream",
    ),
    re_path(r"^v1/chat/completions/?$", ChatCompletionsView.as_view(), name="openai-chat-completions"),
    re_path(r"^v1/models/?$", ModelListView.as_view(), name="openai-models"),
    re_path(r"^v1/models/(?P<id>[^/]+)/?$", ModelDetailView.as_view(), name="openai-model"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", DocsView.as_view(), name="docs"),
    path("docs/assets/<str:filename>", docs_asset, name="docs-asset"),
    *router.urls,
]
