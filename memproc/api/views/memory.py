"""The end-user memory view (`memory/`): what memproc remembers about the caller's resource, by field,
what recent turns recalled and why; correcting and pinning a field, excluding a message from recall.

Every answer is the whole view, so a client re-renders from the response. The resource is the caller's
own (`?resource_id=` names another one the resolver grants: staff with `memproc.view_thread` to read,
`memproc.change_thread` to write); anything else is a 404.

Forgetting is `POST memory/forget/` with `message_ids` or `thread_id` (memproc.services.forget).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, views
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from memproc import models
from memproc.api.permissions import THREAD_DELETE, default_resource, has_any_perm
from memproc.api.serializers.memory import (
    MemoryFieldUpdateSerializer,
    MemoryForgetSerializer,
    MemoryForgottenSerializer,
    MemoryViewSerializer,
)
from memproc.api.views.base import MemprocViewMixin, errors, path_id_ok
from memproc.api.views.working_memory import (
    AGENT_PARAMETER,
    WorkingMemoryConfig,
    shown_value,
    working_memory_config,
)
from memproc.exceptions import ValidationError as MemprocValidationError
from memproc.processors.working_memory_fields import fields_of
from memproc.selectors.memory_view import memory_recalls, messages_recall_excluded
from memproc.selectors.threads import resource_memory_get
from memproc.services.forget import forget
from memproc.services.memory_view import message_recall_exclude, resource_field_pin
from memproc.services.working_memory import working_memory_update

RESOURCE_PARAMETER = OpenApiParameter(
    "resource_id",
    str,
    OpenApiParameter.QUERY,
    required=False,
    description="The resource whose memory to show; default: the caller's own.",
)
FIELD = OpenApiParameter("name", str, OpenApiParameter.PATH, description="The field's name.")
MESSAGE = OpenApiParameter("id", str, OpenApiParameter.PATH, description="The message id.")
NO_BODY = {"application/json": {"type": "object", "description": "Nothing is needed; send `{}` or no body."}}
TAGS = ["memory view"]
# A value the field's template or schema refuses: the memory's state decides, as for a 409.
VALUE_REFUSED = "Not a value for this field: "


class MemoryViewBase(MemprocViewMixin, views.APIView):
    """Resolves the resource once per request and renders the whole view."""

    def resource(self) -> str:
        """The resource named by `?resource_id=` (else the caller's own) if the caller may use it, else
        404. The caller's own resource need not be stored yet (the template's fields show, empty)."""
        request: Request = self.request
        own = default_resource(request)
        resource_id = request.query_params.get("resource_id", own)
        if resource_id is None:
            raise serializers.ValidationError({"resource_id": ["Name the resource whose memory to show."]})
        self.require_resource(resource_id)
        if (
            self.allowed_resources() is None
            and resource_id != own
            and not models.Resource.objects.filter(pk=resource_id).exists()
        ):
            raise NotFound()  # staff who reach every resource see others' stored ones only
        return resource_id

    def config(self) -> WorkingMemoryConfig:
        return working_memory_config(agent_id=self.request.query_params.get("agent"))

    def field_name(self, name: str, *, resource_id: str, config: WorkingMemoryConfig) -> str:
        """`name` if the resource's working memory (or its template, schema) has that field, else 404."""
        text, _, _ = resource_memory_get(resource_id=resource_id)
        if not path_id_ok(name) or name not in {
            f.name
            for f in fields_of(text=text, mode=config.mode, template=config.template, schema=config.schema)
        }:
            raise NotFound()
        return name

    def no_body(self) -> None:
        # Nothing is read from the body, but one that is not a JSON object is a 400, as elsewhere.
        serializers.Serializer(data=self.request.data).is_valid(raise_exception=True)

    def render(self, resource_id: str, config: WorkingMemoryConfig) -> Response:
        text, version, pinned = resource_memory_get(resource_id=resource_id)
        fields = fields_of(text=text, mode=config.mode, template=config.template, schema=config.schema)
        data: dict[str, Any] = {
            "resource_id": resource_id,
            "mode": config.mode,
            "version": version,
            "working_memory": shown_value(text, config.mode),
            "fields": [{"name": f.name, "value": f.value, "pinned": f.name in pinned} for f in fields],
            "pinned": list(pinned),
            "recalls": [vars_of(item) for item in memory_recalls(resource_id=resource_id)],
            "excluded": [vars_of(item) for item in messages_recall_excluded(resource_id=resource_id)],
        }
        return Response(MemoryViewSerializer(data).data)


def vars_of(item: Any) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__slots__}


class MemoryView(MemoryViewBase):
    @extend_schema(
        tags=TAGS,
        summary="What memproc remembers about a resource",
        description=(
            "The resource's working memory by field (with the pinned ones), what recent turns recalled "
            "(score, source thread, the turn), and the messages excluded from recall."
        ),
        parameters=[RESOURCE_PARAMETER, AGENT_PARAMETER],
        responses={200: MemoryViewSerializer, **errors(400, 404)},
    )
    def get(self, request: Request) -> Response:
        return self.render(self.resource(), self.config())


class MemoryFieldView(MemoryViewBase):
    @extend_schema(
        tags=TAGS,
        summary="Correct a working-memory field",
        description=(
            "Sets one field (validated against the template or schema), recorded as a working-memory "
            "revision with source `user` and the caller as actor."
        ),
        parameters=[FIELD, RESOURCE_PARAMETER, AGENT_PARAMETER],
        request=MemoryFieldUpdateSerializer,
        responses={200: MemoryViewSerializer, **errors(400, 404, 409, 413)},
    )
    def put(self, request: Request, name: str) -> Response:
        resource_id, config = self.resource(), self.config()
        serializer = MemoryFieldUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        name = self.field_name(name, resource_id=resource_id, config=config)
        try:
            working_memory_update(
                scope="resource",
                key=resource_id,
                field=name,
                value=serializer.validated_data["value"],
                source=models.WorkingMemoryRevision.Source.USER,
                mode=config.mode,
                template=config.template,
                schema=config.schema,
                actor=request.user,
                max_tokens=config.max_tokens,
            )
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"value": [VALUE_REFUSED + str(exc)]}) from exc
        return self.render(resource_id, config)


class MemoryFieldPinView(MemoryViewBase):
    pinned = True

    def post(self, request: Request, name: str) -> Response:
        resource_id, config = self.resource(), self.config()
        self.no_body()
        if self.pinned:
            name = self.field_name(name, resource_id=resource_id, config=config)
        elif not path_id_ok(name):
            raise NotFound()
        try:
            resource_field_pin(resource_id=resource_id, name=name, pinned=self.pinned)
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"name": [str(exc)]}) from exc
        return self.render(resource_id, config)


PIN_PARAMETERS = [FIELD, RESOURCE_PARAMETER, AGENT_PARAMETER]


class MemoryFieldPin(MemoryFieldPinView):
    @extend_schema(
        tags=TAGS,
        summary="Pin a working-memory field",
        description="The model's working-memory updates keep a pinned field's value (and are told so).",
        parameters=PIN_PARAMETERS,
        request=NO_BODY,
        responses={200: MemoryViewSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)


class MemoryFieldUnpin(MemoryFieldPinView):
    pinned = False

    @extend_schema(
        tags=TAGS,
        summary="Unpin a working-memory field",
        description="The model may change the field again. Unpinning a field not pinned changes nothing.",
        parameters=PIN_PARAMETERS,
        request=NO_BODY,
        responses={200: MemoryViewSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)


class MemoryRecallExcludeView(MemoryViewBase):
    excluded = True

    def post(self, request: Request, id: str) -> Response:
        resource_id, config = self.resource(), self.config()
        if not path_id_ok(id):
            raise NotFound()
        self.no_body()
        try:
            message_recall_exclude(resource_id=resource_id, message_id=id, excluded=self.excluded)
        except models.Message.DoesNotExist as exc:
            raise NotFound() from exc
        return self.render(resource_id, config)


MESSAGE_PARAMETERS = [MESSAGE, RESOURCE_PARAMETER, AGENT_PARAMETER]


class MemoryMessageExclude(MemoryRecallExcludeView):
    @extend_schema(
        tags=TAGS,
        summary="Exclude a message from recall",
        description="Semantic recall never brings the message back (not even as a neighbour of a hit); "
        "the thread's history still shows it.",
        parameters=MESSAGE_PARAMETERS,
        request=NO_BODY,
        responses={200: MemoryViewSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)


class MemoryMessageInclude(MemoryRecallExcludeView):
    excluded = False

    @extend_schema(
        tags=TAGS,
        summary="Let an excluded message back into recall",
        description="It is embedded again after the change commits.",
        parameters=MESSAGE_PARAMETERS,
        request=NO_BODY,
        responses={200: MemoryViewSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)


# MemoryForgetSerializer's body, with what its validate() adds: exactly one of the two fields.
FORGET_REQUEST = {
    "type": "object",
    "properties": {
        "message_ids": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 255},
            "minItems": 1,
            "maxItems": 1000,
            "description": "Message ids of the resource.",
        },
        "thread_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "description": "A thread of the resource.",
        },
    },
    "oneOf": [{"required": ["message_ids"]}, {"required": ["thread_id"]}],
}


class MemoryForget(MemoryViewBase):
    @extend_schema(
        tags=TAGS,
        summary="Forget messages or a thread, with what was derived from them",
        description=(
            "Deletes the messages (or the thread) with their embeddings, the summaries that covered them, "
            "the working-memory changes their turns wrote (set back to the value before; held for an "
            "operator when a later change built on them: `receipt.status` is then `review`), files no "
            "other message uses, and their ids in turn records. Unknown ids are a 404 and nothing is "
            "forgotten. Answers the whole view and the receipt."
        ),
        parameters=[RESOURCE_PARAMETER, AGENT_PARAMETER],
        request={"application/json": FORGET_REQUEST},
        responses={200: MemoryForgottenSerializer, **errors(400, 404)},
    )
    def post(self, request: Request) -> Response:
        resource_id, config = self.resource(), self.config()
        if (
            self.allowed_resources() is None
            and resource_id != default_resource(request)
            and not has_any_perm(request.user, THREAD_DELETE)
        ):
            raise NotFound()  # forgetting is deleting: staff also need memproc.delete_thread
        serializer = MemoryForgetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        wanted = serializer.validated_data
        ids = wanted.get("message_ids")
        if not all(path_id_ok(i) for i in [*(ids or ()), wanted.get("thread_id", "x")]):
            raise NotFound()
        try:
            receipt = forget(
                resource_id=resource_id,
                message_ids=ids,
                thread_id=wanted.get("thread_id"),
                actor=request.user,
            )
        except MemprocValidationError as exc:
            raise NotFound() from exc  # an id the resource does not hold, as for any other item
        view = self.render(resource_id, config).data
        done = {"id": receipt.pk, "scope": receipt.scope, "status": receipt.status, "counts": receipt.counts}
        return Response(MemoryForgottenSerializer({**view, "receipt": done}).data)
