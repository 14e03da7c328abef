"""Working memory of a thread or a resource: read it, replace or merge it (validated, with a revision)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, views
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from memproc.agents import get_agent
from memproc.api.permissions import default_resource
from memproc.api.serializers.working_memory import WorkingMemorySerializer, WorkingMemoryUpdateSerializer
from memproc.api.views.base import MemprocViewMixin, errors
from memproc.exceptions import ValidationError as MemprocValidationError
from memproc.models import Resource, public_thread_id
from memproc.processors.working_memory import DEFAULT_TEMPLATE
from memproc.selectors.threads import working_memory_get
from memproc.services.working_memory import working_memory_update

AGENT_PARAMETER = OpenApiParameter(
    "agent",
    str,
    OpenApiParameter.QUERY,
    required=False,
    description="Validate with this agent's working-memory configuration (mode, template, schema). "
    "Default: the thread's agent; else Markdown with the default template.",
)


@dataclass(frozen=True)
class WorkingMemoryConfig:
    mode: str = "markdown"
    template: str = DEFAULT_TEMPLATE
    schema: dict[str, Any] | None = None
    max_tokens: int | None = None

    @classmethod
    def of(cls, processor: Any) -> WorkingMemoryConfig:
        return cls(
            mode=processor.mode,
            template=processor.template,
            schema=processor.schema,
            max_tokens=getattr(processor, "max_tokens", None),
        )


def working_memory_config(*, agent_id: str | None, thread_agent_id: str = "") -> WorkingMemoryConfig:
    """`?agent=` names the configuration; else the thread's agent, if it is still registered and has
    working memory; else plain Markdown guarded by the default template."""
    if agent_id is not None:
        processor = _agent_working_memory(agent_id)
        if processor is None:
            raise serializers.ValidationError(
                {"agent": [f"No registered agent {agent_id!r} has working memory."]}
            )
        return WorkingMemoryConfig.of(processor)
    processor = _agent_working_memory(thread_agent_id) if thread_agent_id else None
    return WorkingMemoryConfig.of(processor) if processor is not None else WorkingMemoryConfig()


def _agent_working_memory(agent_id: str) -> Any:
    try:
        agent = get_agent(agent_id)
    except LookupError:
        return None
    return agent.memory.working_memory_processor if agent.memory is not None else None


def shown_value(text: str, mode: str) -> Any:
    """Schema mode shows the stored JSON as an object; anything else as the stored text."""
    if mode == "schema" and text.strip():
        try:
            value = json.loads(text)
        except ValueError:
            return text
        return value if isinstance(value, dict) else text
    return {} if mode == "schema" else text


class WorkingMemoryMixin:
    """GET and PUT of one scope's working memory, for the thread and resource endpoints."""

    def working_memory_read(self, *, scope: str, key: str, config: WorkingMemoryConfig) -> Response:
        text, version = working_memory_get(scope=scope, key=key)
        return self._render(scope, key, text, version, config)

    def working_memory_write(
        self, request: Request, *, scope: str, key: str, config: WorkingMemoryConfig
    ) -> Response:
        serializer = WorkingMemoryUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        value = serializer.validated_data["working_memory"]
        if config.mode == "markdown" and not isinstance(value, str):
            raise serializers.ValidationError({"working_memory": ["This working memory is Markdown text."]})
        try:
            text, version = working_memory_update(
                scope=scope,
                key=key,
                value=value,
                source="api",
                mode=config.mode,
                template=config.template,
                schema=config.schema,
                replace=serializer.validated_data["replace"],
                actor=request.user,
                max_tokens=config.max_tokens,
            )
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"working_memory": [str(exc)]}) from exc
        return self._render(scope, key, text, version, config)

    def _render(self, scope: str, key: str, text: str, version: int, config: WorkingMemoryConfig) -> Response:
        data = {
            "scope": scope,
            "key": public_thread_id(key) if scope == "thread" else key,
            "working_memory": shown_value(text, config.mode),
            "version": version,
            "mode": config.mode,
        }
        return Response(WorkingMemorySerializer(data).data)


class ResourceWorkingMemoryView(MemprocViewMixin, WorkingMemoryMixin, views.APIView):
    """A resource's working memory; a resource the caller may not use is a 404."""

    @extend_schema(
        tags=["working memory"],
        summary="Read a resource's working memory",
        parameters=[AGENT_PARAMETER],
        responses={200: WorkingMemorySerializer, **errors(400, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        key = self.resource_key(id)
        return self.working_memory_read(scope="resource", key=key, config=self.config(request))

    @extend_schema(
        tags=["working memory"],
        summary="Replace or merge a resource's working memory",
        parameters=[AGENT_PARAMETER],
        request=WorkingMemoryUpdateSerializer,
        responses={200: WorkingMemorySerializer, **errors(400, 404, 409, 413)},
    )
    def put(self, request: Request, id: str) -> Response:
        key = self.resource_key(id)
        return self.working_memory_write(request, scope="resource", key=key, config=self.config(request))

    def resource_key(self, resource_id: str) -> str:
        """The caller's own resource, stored or not yet; any stored resource for a caller the resolver
        grants every resource (staff with `memproc.view_thread` to read, `memproc.change_thread` to write).
        The caller's own resource is never a 404, stored or not: its working memory is empty until then."""
        self.require_resource(resource_id)
        if (
            self.allowed_resources() is None
            and resource_id != default_resource(self.request)
            and not Resource.objects.filter(pk=resource_id).exists()
        ):
            raise NotFound()
        return resource_id

    def config(self, request: Request) -> WorkingMemoryConfig:
        return working_memory_config(agent_id=request.query_params.get("agent"))
