"""Threads of the caller's resources: list, create, read, rename, delete, messages, turns, clone,
working memory."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.filters import BaseFilterBackend
from rest_framework.request import Request
from rest_framework.response import Response

from memproc import models
from memproc.api.filters import ThreadFilter
from memproc.api.pagination import (
    MemprocCursorPagination,
    MessageCursorPagination,
    ThreadCursorPagination,
    limit_schema,
)
from memproc.api.permissions import default_resource
from memproc.api.serializers.messages import MessagePageSerializer, MessageSerializer
from memproc.api.serializers.threads import (
    ThreadCloneSerializer,
    ThreadCreateSerializer,
    ThreadSerializer,
    ThreadUpdateSerializer,
)
from memproc.api.serializers.turns import TurnRecordPageSerializer, TurnRecordSerializer
from memproc.api.serializers.working_memory import WorkingMemorySerializer, WorkingMemoryUpdateSerializer
from memproc.api.views.base import THREAD_RESOURCE_PARAMETER, MemprocViewMixin, errors, id_parameter
from memproc.api.views.working_memory import AGENT_PARAMETER, WorkingMemoryMixin, working_memory_config
from memproc.exceptions import ValidationError as MemprocValidationError
from memproc.selectors.filters import metadata_filter
from memproc.selectors.messages import thread_messages
from memproc.selectors.threads import THREAD_ORDERINGS, threads_for_resources
from memproc.selectors.turns import thread_turns
from memproc.services.threads import thread_clone, thread_create, thread_delete, thread_update

THREAD_ID = id_parameter("The thread id.")
THREAD = [THREAD_ID, THREAD_RESOURCE_PARAMETER]
ORDER_PARAMETER = OpenApiParameter(
    "order",
    str,
    OpenApiParameter.QUERY,
    required=False,
    enum=["asc", "desc"],
    description="`asc` (default): oldest first; `desc`: newest first.",
)
PAGE_PARAMETERS = [
    OpenApiParameter(
        "cursor",
        str,
        OpenApiParameter.QUERY,
        required=False,
        description=MemprocCursorPagination.cursor_query_description,
    ),
    OpenApiParameter(
        "limit",
        limit_schema(),
        OpenApiParameter.QUERY,
        required=False,
        description="Messages per page (default 50, at most 200).",
    ),
]

TURN_PAGE_PARAMETERS = [
    PAGE_PARAMETERS[0],
    OpenApiParameter(
        "limit",
        limit_schema(),
        OpenApiParameter.QUERY,
        required=False,
        description="Turns per page (default 50, at most 200).",
    ),
]


class ThreadListQuery(BaseFilterBackend):
    """The thread list's `?metadata__<key>=<value>` filters (every key must match; a value also
    matches the JSON number, boolean or null it spells) and `?ordering=` (`updated_at` or
    `created_at`, `-` for newest first; default `-updated_at`; anything else is a 400). The cursor
    pagination applies the order, so pages follow it."""

    prefix = "metadata__"

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        metadata = {
            k[len(self.prefix) :]: v for k, v in request.query_params.items() if k.startswith(self.prefix)
        }
        try:
            queryset = metadata_filter(queryset, metadata, loose=True)
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"metadata": [str(exc)]}) from exc
        # The order itself is the pagination's (ThreadCursorPagination.get_ordering): a filter backend
        # with `get_ordering` would also be asked by the other lists of this viewset.
        return queryset

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": "ordering",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "enum": list(THREAD_ORDERINGS), "default": "-updated_at"},
                "description": "The order of the list (the id breaks ties). Filter by metadata with "
                "`metadata__<key>=<value>` (every key must match).",
            }
        ]


class TurnCursorPagination(MemprocCursorPagination):
    """A thread's turn records, newest first."""

    ordering = ("-started_at", "id")


@extend_schema(tags=["threads"])
@extend_schema_view(
    list=extend_schema(
        summary="List the caller's threads, most recently active first",
        responses={200: ThreadSerializer(many=True), **errors(400, 404)},
    ),
    retrieve=extend_schema(
        summary="One thread", parameters=THREAD, responses={200: ThreadSerializer, **errors(404)}
    ),
)
class ThreadViewSet(
    MemprocViewMixin,
    WorkingMemoryMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Every query is scoped to the resources the caller may use for the request's method (staff reach
    other owners' with `memproc.view_thread` to read, `memproc.change_thread` to write), so another
    owner's thread is a 404."""

    serializer_class = ThreadSerializer
    pagination_class = ThreadCursorPagination
    filter_backends = [DjangoFilterBackend, ThreadListQuery]
    filterset_class = ThreadFilter

    def get_queryset(self) -> QuerySet[models.Thread]:
        return threads_for_resources(resource_ids=self.allowed_resources())

    def get_object(self) -> models.Thread:
        return self.thread_object()

    def filter_queryset(self, queryset: QuerySet[models.Thread]) -> QuerySet[models.Thread]:
        """Filters narrow the list; a thread's own endpoints ignore them."""
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    @extend_schema(
        summary="Create a thread",
        request=ThreadCreateSerializer,
        responses={201: ThreadSerializer, **errors(400, 404, 413)},
    )
    def create(self, request: Request) -> Response:
        data = self.valid(ThreadCreateSerializer, request.data)
        resource_id = data.get("resource_id") or default_resource(request)
        if resource_id is None:
            raise serializers.ValidationError({"resource_id": ["Name the resource this thread belongs to."]})
        self.require_resource(resource_id)
        try:
            thread = thread_create(
                resource_id=resource_id,
                thread_id=data.get("id"),
                title=data["title"],
                metadata=data["metadata"],
            )
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"id": [str(exc)]}) from exc
        return Response(ThreadSerializer(thread).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Rename a thread or replace its metadata",
        parameters=THREAD,
        request=ThreadUpdateSerializer,
        responses={200: ThreadSerializer, **errors(400, 404, 413)},
    )
    def partial_update(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        data = self.valid(ThreadUpdateSerializer, request.data)
        thread = thread_update(thread=thread, title=data.get("title"), metadata=data.get("metadata"))
        return Response(ThreadSerializer(thread).data)

    @extend_schema(
        summary="Delete a thread, its messages and their attachments",
        parameters=THREAD,
        request=None,
        responses={204: None, **errors(404)},
    )
    def destroy(self, request: Request, id: str) -> Response:
        thread_delete(thread=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="A thread's messages, in order (cursor pagination)",
        parameters=[*THREAD, ORDER_PARAMETER, *PAGE_PARAMETERS],
        responses={200: MessagePageSerializer, **errors(400, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=MessageCursorPagination)
    def messages(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        page = self.paginate_queryset(thread_messages(thread_key=thread.pk))
        return self.get_paginated_response(MessageSerializer(page, many=True).data)

    @extend_schema(
        summary="A thread's turns, newest first: status, usage, duration, and why the model saw what it "
        "saw (cursor pagination)",
        parameters=[*THREAD, *TURN_PAGE_PARAMETERS],
        responses={200: TurnRecordPageSerializer, **errors(400, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=TurnCursorPagination)
    def turns(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        page = self.paginate_queryset(
            thread_turns(thread_id=thread.public_id, resource_id=thread.resource_id)
        )
        return self.get_paginated_response(TurnRecordSerializer(page, many=True).data)

    @extend_schema(
        summary="Copy a thread and its messages into a new thread",
        parameters=THREAD,
        request=ThreadCloneSerializer,
        responses={201: ThreadSerializer, **errors(400, 404, 413)},
    )
    @action(detail=True, methods=["post"])
    def clone(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        data = self.valid(ThreadCloneSerializer, request.data)
        try:
            clone = thread_clone(thread=thread, new_thread_id=data.get("id"), title=data.get("title"))
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"id": [str(exc)]}) from exc
        return Response(ThreadSerializer(clone).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        methods=["GET"],
        summary="Read a thread's working memory",
        tags=["working memory"],
        parameters=[*THREAD, AGENT_PARAMETER],
        responses={200: WorkingMemorySerializer, **errors(400, 404)},
    )
    @extend_schema(
        methods=["PUT"],
        summary="Replace or merge a thread's working memory",
        tags=["working memory"],
        parameters=[*THREAD, AGENT_PARAMETER],
        request=WorkingMemoryUpdateSerializer,
        responses={200: WorkingMemorySerializer, **errors(400, 404, 409)},
    )
    @action(detail=True, methods=["get", "put"], url_path="working-memory", url_name="working-memory")
    def working_memory(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        config = working_memory_config(
            agent_id=request.query_params.get("agent"), thread_agent_id=thread.agent_id
        )
        if request.method == "PUT":
            return self.working_memory_write(request, scope="thread", key=thread.pk, config=config)
        return self.working_memory_read(scope="thread", key=thread.pk, config=config)

    def valid(self, serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
